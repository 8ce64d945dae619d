"""convplan: convolutions on NVIDIA GPUs through cuDNN's graph API, tuned once per process and
remembered across processes, every candidate checked against a float64 reference.

    import convplan
    convplan.devices()                     # [] without a usable GPU
    p = convplan.Problem("dt:bf16,layout:nhwc/mb32ic64ih56iw56oc64kh3kw3ph1pw1")
    p.output, p.flops, str(p)              # (56, 56), 7.4e9, the canonical text
    ctx = convplan.Context(db="off", tune="heuristic")
    ctx.run(p, x_ptr, w_ptr, y_ptr)        # device pointers (any framework's)

`convplan.torch` runs PyTorch convolutions on it (importing convplan never imports torch).
"""
import ctypes as _ctypes
import importlib.util as _importlib_util
import os as _os
import threading as _threading


def _load_wheel_cudnn():
    """Loads cuDNN from PyTorch's wheel (nvidia-cudnn-cu*) where it is installed, before _C.

    One process must use one cuDNN: PyTorch links the wheel's libcudnn.so.9, and without this a
    process that imports convplan first would load the system's (an older 9.x, say) and PyTorch
    would then share it. CONVPLAN_SYSTEM_CUDNN=1 keeps the system's.
    """
    if _os.environ.get("CONVPLAN_SYSTEM_CUDNN") == "1":
        return
    try:
        spec = _importlib_util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    for root in spec.submodule_search_locations:
        lib = _os.path.join(root, "cudnn", "lib", "libcudnn.so.9")
        if _os.path.exists(lib):
            _ctypes.CDLL(lib, mode=_ctypes.RTLD_GLOBAL)
            return


_load_wheel_cudnn()

from . import _C  # noqa: E402
from ._C import Error, Problem  # noqa: E402,F401

__version__ = _C.__version__
__all__ = ["Context", "Error", "Problem", "cudnn_version", "default_context", "devices",
           "__version__"]


def cudnn_version():
    """The cuDNN library loaded in this process, e.g. 91900."""
    return _C.cudnn_version()


def devices():
    """The usable GPUs, each a dict (ordinal, name, uuid, compute_capability, sm_count, l2_bytes,
    memory_bytes, cudnn_version, model_key); an empty list where there is none."""
    return _C.devices()


class Context:
    """One plan cache and one tuning database, shared by every thread and stream that uses it.

    db: a path; None for the CLI's default ($CONVPLAN_DB, else ~/.cache/convplan/tuning.db);
        "off" for none.
    tune: "heuristic", "limited" or "exhaustive"; None reads CONVPLAN_TUNE (default limited).
    workspace_limit: the most workspace bytes a chosen engine may use; None: the environment's
        CONVPLAN_WORKSPACE_LIMIT, else 4 GiB.
    capacity: the most plans held; None: the cache's default.

    Each (device, stream, thread) gets its own cuDNN handle and plans, made on first use. A shape
    is tuned once per context (or found in the database) and cloned for every other handle.
    """

    def __init__(self, db=None, tune=None, workspace_limit=None, capacity=None):
        self._impl = _C.Context(db="" if db is None else str(db), tune=tune,
                                workspace_limit=workspace_limit, capacity=capacity)
        self._fallbacks = 0
        self._lock = _threading.Lock()

    def run(self, problem, x, w, y, device=0, stream=0):
        """Runs `problem` on device pointers x, w, y (ints) on `stream` (a cudaStream_t as an
        int; 0 is the legacy default stream). Tunes on first use. Raises convplan.Error."""
        if isinstance(problem, str):
            problem = Problem(problem)
        self._impl.run(problem, int(x), int(w), int(y), int(device), int(stream))

    def prepare_all(self, problems, device=0, threads=4):
        """Tunes (or finds in the database) every problem of `problems` (Problems or descriptor
        strings) that has no plan yet, `threads` at once, so that the first calls of a model find
        them tuned: one problem's compilation overlaps another's timing, and timings stay one at
        a time on the device. Raises ValueError for bad arguments, convplan.Error (after trying
        them all, saying how many failed) for failures."""
        problems = [Problem(p) if isinstance(p, str) else p for p in problems]
        self._impl.prepare_all(problems, int(device), int(threads))

    def count_fallback(self):
        with self._lock:
            self._fallbacks += 1

    def stats(self):
        """The plan cache's counters (hits, misses, tunes, clones, db_hits, ...), the handles made,
        the database path, the tuning mode, and the calls that fell back to PyTorch."""
        s = self._impl.stats()
        s["fallbacks"] = self._fallbacks
        return s

    @property
    def db(self):
        return self._impl.db

    def __repr__(self):
        return f"convplan.Context(db={self.db!r})"


_default = None
_default_lock = _threading.Lock()


def default_context():
    """The process-wide Context (default database, tuning mode from the environment), made on
    first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Context()
    return _default


def set_default_context(context):
    """Replaces the process-wide Context (None: a new default one on next use)."""
    global _default
    with _default_lock:
        _default = context


def __getattr__(name):
    # `convplan.torch` without an explicit import; torch itself is imported only then.
    if name == "torch":
        from . import torch as module
        return module
    raise AttributeError(f"module 'convplan' has no attribute {name!r}")
