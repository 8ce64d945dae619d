"""convplan.torch: PyTorch convolutions through convplan's plan cache.

    import convplan.torch as cpt
    y = cpt.conv(x, w, bias, stride=1, padding=1)   # 1-, 2- or 3-D by x's rank
    n = cpt.convert(model)                          # nn.Conv1d/2d/3d -> convplan, in place

conv() runs on torch.cuda.current_stream(), takes its output and workspace from PyTorch's caching
allocator, and has a backward through convplan's bwd_data and bwd_filter (grad-bias is grad y
summed over all but the channels). It is the custom op convplan::conv (with fake implementations
and autograd) wherever torch.compile, a dispatch mode (FakeTensor, make_fx, functionalization), a
functorch transform or the JIT tracer looks on; CUDA graph capture takes either path. In plain
eager mode it skips the dispatcher: a call that needs no gradient goes straight to C++ (the host
cost of a tiny call is below F.conv2d's), one that needs a gradient goes through a plain
torch.autograd.Function calling the same C++ (the custom op's dispatch costs ~200 us a call).

The layout comes from the strides: channels_last (or channels_last_3d) when x or the weight is in
it, as PyTorch decides, else contiguous; a tensor in neither is copied into it. fp32 uses TF32
when torch.backends.cudnn.allow_tf32 says so, as PyTorch's cuDNN path does.

Plans are made on a shape's first call (tuned, or found in the tuning database): make that call
before capturing a CUDA graph (PyTorch's own warm-up does), from the thread that captures.
"""

import threading
from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import convplan as _cp

__all__ = ["conv", "convert", "ConvplanConv", "UnsupportedError", "optimize_for_inference",
           "plans", "prepare"]

_DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
                torch.float64: "f64"}
_LETTERS = {1: "w", 2: "hw", 3: "dhw"}
# The current stream as an int and the TF32 switch, read without making Python objects (the
# public spellings, torch.cuda.current_stream().cuda_stream and torch.backends.cudnn.allow_tf32,
# cost a microsecond or more per call); the public ones where a build lacks the private ones.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)
_tf32_enabled = getattr(torch._C, "_get_cudnn_allow_tf32", None) or (
    lambda: torch.backends.cudnn.allow_tf32)
_is_compiling = torch.compiler.is_compiling


class UnsupportedError(ValueError):
    """An input convplan cannot take (a CPU tensor, a dtype mix, ...); convert(...,
    fallback=True) sends such calls to PyTorch instead."""


# ------------------------------------------------------------------------------------------
# Geometry


def _ntuple(value, d: int, name: str) -> tuple:
    if isinstance(value, int):
        return (value,) * d
    t = tuple(int(v) for v in value)
    if len(t) == 1:
        return t * d
    if len(t) != d:
        raise ValueError(f"{name}={value!r} must be an int or {d} ints for a {d}-D convolution")
    return t


def _padding(padding, d: int, filt: Sequence[int], dilation: Sequence[int]):
    """(before, after) per spatial dimension. padding: an int, d ints, d (before, after) pairs,
    'valid', or 'same' (PyTorch's split: the odd pixel after)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * d, (0,) * d
        if padding == "same":
            total = [dl * (k - 1) for k, dl in zip(filt, dilation)]
            before = tuple(t // 2 for t in total)
            return before, tuple(t - b for t, b in zip(total, before))
        raise ValueError(f"padding={padding!r} must be 'valid', 'same', an int or a sequence")
    if isinstance(padding, int):
        return (padding,) * d, (padding,) * d
    items = list(padding)
    if len(items) == 1 and d > 1 and isinstance(items[0], int):
        items = items * d
    if len(items) != d:
        raise ValueError(f"padding={padding!r} must have {d} entries for a {d}-D convolution")
    before, after = [], []
    for p in items:
        if isinstance(p, int):
            before.append(p)
            after.append(p)
        else:
            b, a = p
            before.append(int(b))
            after.append(int(a))
    return tuple(before), tuple(after)


def _memory_format(t: Tensor):
    """The memory format of x or the weight, as PyTorch's suggest_memory_format reads strides."""
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def _pick_format(x: Tensor, w: Tensor):
    fx = _memory_format(x)
    return fx if fx is not torch.contiguous_format else _memory_format(w)


def _descriptor(direction, dtype, channels_last, tf32, n, c, k, groups, inp, filt, stride,
                before, after, dilation, post="") -> str:
    d = len(inp)
    letters = _LETTERS[d]
    tc = "1" if (tf32 or dtype != torch.float32) else "0"
    chain = f",post:{post}" if post else ""
    text = (f"dir:{direction},dt:{_DTYPE_NAMES[dtype]},layout:{'nhwc' if channels_last else 'nchw'},"
            f"tc:{tc}{chain}/g{groups}mb{n}ic{c}")
    text += "".join(f"i{l}{v}" for l, v in zip(letters, inp))
    text += f"oc{k}"
    for prefix, values in (("k", filt), ("s", stride), ("p", before), ("r", after)):
        text += "".join(f"{prefix}{l}{v}" for l, v in zip(letters, values))
    text += "".join(f"d{l}{v - 1}" for l, v in zip(letters, dilation))
    return text


def _strides_of(shape, memory_format) -> tuple:
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


def _check_inputs(x: Tensor, w: Tensor, bias: Optional[Tensor], groups: int):
    """Raises UnsupportedError (or ValueError) naming what convplan cannot take. The common case
    costs a few attribute reads: the messages are built only on failure."""
    device = x.get_device()
    dtype = x.dtype
    if (device < 0 or w.get_device() != device or dtype not in _DTYPE_NAMES or w.dtype != dtype
            or x.dim() not in (3, 4, 5) or w.dim() != x.dim()
            or (bias is not None and (bias.dtype != dtype or bias.get_device() != device))):
        _raise_unsupported(x, w, bias)
    if x.shape[1] != w.shape[1] * groups:
        raise ValueError(f"x has {x.shape[1]} channels but weight {tuple(w.shape)} with "
                         f"groups={groups} expects {w.shape[1] * groups}")


def _raise_unsupported(x: Tensor, w: Tensor, bias: Optional[Tensor]):
    if not x.is_cuda or not w.is_cuda or (bias is not None and not bias.is_cuda):
        raise UnsupportedError(f"convplan runs CUDA tensors only (x on {x.device}, weight on "
                               f"{w.device}" + (f", bias on {bias.device}" if bias is not None else "")
                               + ")")
    if x.device != w.device or (bias is not None and bias.device != x.device):
        raise UnsupportedError(f"tensors on different devices: x {x.device}, weight {w.device}")
    if x.dtype not in _DTYPE_NAMES:
        raise UnsupportedError(f"x.dtype={x.dtype} is not one of float32, float16, bfloat16, "
                               "float64")
    if w.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise UnsupportedError(f"dtypes differ: x {x.dtype}, weight {w.dtype}"
                               + (f", bias {bias.dtype}" if bias is not None else ""))
    raise UnsupportedError(f"x.dim()={x.dim()}, weight.dim()={w.dim()}: convplan takes batched "
                           "1-, 2- and 3-D convolutions with a weight of the same rank")


class _Geometry:
    """One convolution's stride, padding, dilation and groups, and the plans of the shapes it met
    (keyed by the tensors' shapes, strides, dtype and device)."""

    __slots__ = ("stride", "before", "after", "dilation", "groups", "padding", "shapes")

    def __init__(self, stride, before, after, dilation, groups):
        self.stride, self.before, self.after = tuple(stride), tuple(before), tuple(after)
        self.dilation, self.groups = tuple(dilation), int(groups)
        self.shapes = {}

    # Copies of a model (copy.deepcopy, pickling) share or remake the geometry, never its plans.
    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (_Geometry, (self.stride, self.before, self.after, self.dilation, self.groups))

    def output_shape(self, x_shape, w_shape):
        out = []
        for i, (size, k) in enumerate(zip(x_shape[2:], w_shape[2:])):
            span = self.dilation[i] * (k - 1) + 1
            o = (size + self.before[i] + self.after[i] - span) // self.stride[i] + 1
            if o <= 0:
                raise ValueError(f"output size {o} along spatial dimension {i} is empty (input "
                                 f"{size}, filter {k}, padding {self.before[i]}+{self.after[i]}, "
                                 f"stride {self.stride[i]}, dilation {self.dilation[i]})")
            out.append(o)
        return (x_shape[0], w_shape[0], *out)


_geometries = {}
_geometries_lock = threading.Lock()


def _geometry(stride, padding, dilation, groups, d, filt) -> _Geometry:
    key = (d, stride, padding, dilation, groups, tuple(filt) if isinstance(padding, str) else None)
    try:
        g = _geometries.get(key)
    except TypeError:  # lists: normalize, then cache under the normalized key
        key = None
        g = None
    if g is None:
        dil = _ntuple(dilation, d, "dilation")
        before, after = _padding(padding, d, filt, dil)
        g = _Geometry(_ntuple(stride, d, "stride"), before, after, dil, groups)
        for name, values, low in (("stride", g.stride, 1), ("dilation", g.dilation, 1),
                                  ("padding", g.before + g.after, 0)):
            if any(v < low for v in values):
                raise ValueError(f"{name}={values} must be >= {low}")
        if key is not None:
            with _geometries_lock:
                g = _geometries.setdefault(key, g)
    return g


# ------------------------------------------------------------------------------------------
# Plans of one shape


class _Shape:
    """What the calls of one (geometry, x, weight) shape need: the convplan problems of the three
    directions (made on first use), the workspace each needs, and the tensors' strides."""

    __slots__ = ("geometry", "fmt", "channels_last", "x_ok", "w_ok", "x_shape", "w_shape",
                 "y_shape", "x_strides", "w_strides", "y_strides", "dtype", "tf32", "problems",
                 "workspace", "empty", "bias_view", "bias_dims")

    def __init__(self, g: _Geometry, fmt, x_shape, w_shape, dtype, tf32: bool, x_ok=True,
                 w_ok=True):
        self.geometry = g
        self.fmt = fmt
        self.channels_last = fmt is not torch.contiguous_format
        self.x_ok, self.w_ok = x_ok, w_ok
        self.x_shape, self.w_shape = tuple(x_shape), tuple(w_shape)
        self.y_shape = g.output_shape(self.x_shape, self.w_shape)
        self.x_strides = _strides_of(self.x_shape, fmt)
        self.w_strides = _strides_of(self.w_shape, fmt)
        self.y_strides = _strides_of(self.y_shape, fmt)
        self.dtype, self.tf32 = dtype, tf32
        self.problems = {}
        self.workspace = {}
        self.empty = 0 in self.x_shape or 0 in self.w_shape
        spatial = len(self.x_shape) - 2
        self.bias_view = (1, -1) + (1,) * spatial  # the bias broadcast over y
        self.bias_dims = (0,) + tuple(range(2, 2 + spatial))  # what grad-bias sums over

    def problem(self, direction: str, post: str = ""):
        """The problem of `direction`; forward may carry a post-op chain ("bias+add+relu")."""
        key = (direction, post) if post else direction
        p = self.problems.get(key)
        if p is None:
            g = self.geometry
            text = _descriptor(direction, self.dtype, self.channels_last, self.tf32,
                               self.x_shape[0], self.x_shape[1], self.w_shape[0], g.groups,
                               self.x_shape[2:], self.w_shape[2:], g.stride, g.before, g.after,
                               g.dilation, post)
            p = self.problems[key] = _cp.Problem(text)
        return p


def _forward_shape(g: _Geometry, x: Tensor, w: Tensor) -> _Shape:
    """The shape's plans; the inputs are checked when a key is first met (the key holds all that
    the checks read), so that a call of a known shape checks nothing."""
    dtype = x.dtype
    tf32 = dtype is torch.float32 and _tf32_enabled()
    key = (x.shape, x.stride(), w.shape, w.stride(), dtype, w.dtype, x.get_device(),
           w.get_device(), tf32)
    s = g.shapes.get(key)
    if s is None:
        _check_inputs(x, w, None, g.groups)
        fmt = _pick_format(x, w)
        s = g.shapes[key] = _Shape(g, fmt, x.shape, w.shape, x.dtype, tf32,
                                   x.is_contiguous(memory_format=fmt),
                                   w.is_contiguous(memory_format=fmt))
    return s


def _backward_shape(g: _Geometry, x_shape, w_shape, dtype, device: int,
                    channels_last: bool) -> _Shape:
    tf32 = dtype is torch.float32 and _tf32_enabled()
    key = ("bwd", tuple(x_shape), tuple(w_shape), dtype, device, tf32, channels_last)
    s = g.shapes.get(key)
    if s is None:
        s = g.shapes[key] = _Shape(g, _format_for(channels_last, len(x_shape)), x_shape, w_shape,
                                   dtype, tf32)
    return s


def _run(ctx, shape: _Shape, direction: str, device: int, x: Tensor, w: Tensor, y: Tensor,
         like: Tensor, post: str = "", bias: Optional[Tensor] = None,
         residual: Optional[Tensor] = None):
    """Enqueues one direction on the current stream with a workspace from PyTorch's allocator;
    forward with a post-op chain `post` reads bias (k packed values) and residual (y's shape and
    strides) where the chain has them."""
    problem = shape.problem(direction, post)
    if _recorder is not None and _recorder.takes(like):
        _recorder.add(ctx, device, problem)  # prepare()'s trace: nothing to launch
        return
    stream = _raw_stream(device)
    impl = ctx._impl
    # Per context: prepare() tunes in the context's cache (launch() never does), so a launch meets
    # at most a clone for a new thread's handle.
    key = (direction, post, impl)
    b_ptr = bias.data_ptr() if bias is not None else 0
    r_ptr = residual.data_ptr() if residual is not None else 0
    ws_bytes = shape.workspace.get(key)
    if ws_bytes is None:
        ws_bytes = shape.workspace[key] = impl.prepare(problem, device, stream)
    for _ in range(2):
        ws = like.new_empty((ws_bytes,), dtype=torch.uint8) if ws_bytes else None
        if impl.launch(problem, device, stream, x.data_ptr(), w.data_ptr(), y.data_ptr(),
                       ws.data_ptr() if ws is not None else 0, ws_bytes, b_ptr, r_ptr):
            return
        # Not planned on this thread yet, or a plan rebuilt with another workspace.
        ws_bytes = shape.workspace[key] = impl.prepare(problem, device, stream)
    raise _cp.Error(f"convplan: {problem} could not be launched after planning")


def _in_format(shape: _Shape, x: Tensor, w: Tensor):
    if not shape.x_ok:
        x = x.contiguous(memory_format=shape.fmt)
    if not shape.w_ok:
        w = w.contiguous(memory_format=shape.fmt)
    return x, w


def _forward_planned(ctx, shape: _Shape, x: Tensor, w: Tensor) -> Tensor:
    """y for x and w already in shape's format."""
    y = x.new_empty_strided(shape.y_shape, shape.y_strides)
    if shape.empty:
        return y.zero_()
    _run(ctx, shape, "fwd", x.get_device(), x, w, y, x)
    return y


def _forward(ctx, g: _Geometry, x: Tensor, w: Tensor) -> Tensor:
    shape = _forward_shape(g, x, w)
    x, w = _in_format(shape, x, w)
    return _forward_planned(ctx, shape, x, w)


# ------------------------------------------------------------------------------------------
# Post-op chains (bias, residual add, activation) fused into the forward problem

_ACTIVATIONS = {
    "relu": F.relu,
    "relu6": F.relu6,
    "gelu": F.gelu,
    "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "elu": F.elu,
}


def _chain(bias: bool, residual: bool, residual_scale: float, activation: Optional[str]) -> str:
    """The chain's text as the problem model spells it: "bias+add*0.5+relu"."""
    ops = ["bias"] if bias else []
    if residual:
        scale = float(residual_scale)
        ops.append("add" if scale == 1.0 else f"add*{scale!r}")
    if activation is not None:
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not one of "
                             f"{', '.join(sorted(_ACTIVATIONS))} (or None)")
        ops.append(activation)
    return "+".join(ops)


def _torch_epilogue(y: Tensor, bias: Optional[Tensor], residual: Optional[Tensor],
                    residual_scale: float, activation: Optional[str]) -> Tensor:
    """The chain in PyTorch's own operations (the training path, and fallbacks)."""
    if bias is not None:
        y = y + bias.view((1, -1) + (1,) * (y.dim() - 2))
    if residual is not None:
        y = y + residual if residual_scale == 1.0 else y + residual_scale * residual
    if activation is not None:
        y = _ACTIVATIONS[activation](y)
    return y


def _forward_fused(ctx, g: _Geometry, x: Tensor, w: Tensor, bias: Optional[Tensor],
                   residual: Optional[Tensor], post: str) -> Tensor:
    """One forward call of the `post:` problem: y = chain(conv(x, w)) with bias and residual."""
    shape = _forward_shape(g, x, w)
    x, w = _in_format(shape, x, w)
    if bias is not None:
        if bias.dtype != x.dtype or bias.get_device() != x.get_device():
            _check_inputs(x, w, bias, g.groups)
        bias = bias.contiguous()
    if residual is not None:
        if tuple(residual.shape) != shape.y_shape:
            raise ValueError(f"residual of shape {tuple(residual.shape)} must have the "
                             f"convolution's output shape {shape.y_shape}")
        if residual.dtype != x.dtype or residual.get_device() != x.get_device():
            raise UnsupportedError(f"residual ({residual.dtype} on {residual.device}) must have "
                                   f"x's dtype and device ({x.dtype} on {x.device})")
        if not residual.is_contiguous(memory_format=shape.fmt):
            residual = residual.contiguous(memory_format=shape.fmt)
    y = x.new_empty_strided(shape.y_shape, shape.y_strides)
    if shape.empty:
        return y.zero_()
    _run(ctx, shape, "fwd", x.get_device(), x, w, y, x, post, bias, residual)
    return y


def _backward_data(ctx, g: _Geometry, grad_y: Tensor, w: Tensor, x_shape, channels_last) -> Tensor:
    shape = _backward_shape(g, x_shape, w.shape, grad_y.dtype, grad_y.get_device(), channels_last)
    grad_y = grad_y.contiguous(memory_format=shape.fmt)
    w = w.contiguous(memory_format=shape.fmt)
    dx = grad_y.new_empty_strided(shape.x_shape, shape.x_strides)
    if shape.empty:
        return dx.zero_()
    _run(ctx, shape, "bwd_data", grad_y.get_device(), dx, w, grad_y, grad_y)
    return dx


def _backward_filter(ctx, g: _Geometry, grad_y: Tensor, x: Tensor, w_shape, channels_last) -> Tensor:
    shape = _backward_shape(g, x.shape, w_shape, x.dtype, x.get_device(), channels_last)
    grad_y = grad_y.contiguous(memory_format=shape.fmt)
    x = x.contiguous(memory_format=shape.fmt)
    dw = x.new_empty_strided(shape.w_shape, shape.w_strides)
    if shape.empty:
        return dw.zero_()
    _run(ctx, shape, "bwd_filter", x.get_device(), x, dw, grad_y, x)
    return dw


def _format_for(channels_last: bool, rank: int):
    if not channels_last:
        return torch.contiguous_format
    return torch.channels_last if rank == 4 else torch.channels_last_3d


# While convplan.torch.prepare() traces a model: the _prepare._Recorder that collects the problems
# which the trace's calls would plan (_run and the ops' fake implementations ask it); else None.
_recorder = None


def _traced(t: Tensor) -> bool:
    return _recorder is not None and _recorder.takes(t)


_contexts = {}  # id -> Context, for the ops (which take ints, not Python objects); 0: default


def _context_id(context) -> int:
    if context is None:
        return 0
    key = id(context)
    if _contexts.get(key) is not context:
        _contexts[key] = context  # kept for the life of the process, as the ops may name it
    return key


def _context(context_id: int):
    return _cp.default_context() if context_id == 0 else _contexts[context_id]


# ------------------------------------------------------------------------------------------
# The custom ops (torch.compile, CUDA graphs and autograd see these)


def _geometry_of(stride, before, after, dilation, groups) -> _Geometry:
    key = ("op", tuple(stride), tuple(before), tuple(after), tuple(dilation), groups)
    g = _geometries.get(key)
    if g is None:
        with _geometries_lock:
            g = _geometries.setdefault(key, _Geometry(stride, before, after, dilation, groups))
    return g


@torch.library.custom_op("convplan::conv", mutates_args=())
def _conv_op(x: Tensor, weight: Tensor, stride: List[int], padding_before: List[int],
             padding_after: List[int], dilation: List[int], groups: int,
             context: int) -> Tensor:
    g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
    return _forward(_context(context), g, x, weight)


def _fake_forward(x, weight, stride, before, after, dilation, groups, context, post=""):
    """The forward ops' fake output; in prepare()'s trace, records the problem (with `post`)."""
    if _traced(x):
        g = _geometry_of(stride, before, after, dilation, groups)
        _recorder.add(_context(context), x.get_device(),
                      _forward_shape(g, x, weight).problem("fwd", post))
    g = _Geometry(stride, before, after, dilation, groups)
    return torch.empty(g.output_shape(tuple(x.shape), tuple(weight.shape)), dtype=x.dtype,
                       device=x.device, memory_format=_pick_format(x, weight))


@_conv_op.register_fake
def _conv_fake(x, weight, stride, padding_before, padding_after, dilation, groups, context):
    return _fake_forward(x, weight, stride, padding_before, padding_after, dilation, groups,
                         context)


@torch.library.custom_op("convplan::conv_fused", mutates_args=())
def _conv_fused_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], residual: Optional[Tensor],
                   stride: List[int], padding_before: List[int], padding_after: List[int],
                   dilation: List[int], groups: int, residual_scale: float, activation: str,
                   context: int) -> Tensor:
    """conv + bias + residual_scale * residual + activation ("" for none) as one `post:` call.
    Inference only: it has no autograd (conv() takes the unfused path when a gradient is needed)."""
    g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
    post = _chain(bias is not None, residual is not None, residual_scale, activation or None)
    return _forward_fused(_context(context), g, x, weight, bias, residual, post)


@_conv_fused_op.register_fake
def _conv_fused_fake(x, weight, bias, residual, stride, padding_before, padding_after, dilation,
                     groups, residual_scale, activation, context):
    post = _chain(bias is not None, residual is not None, residual_scale, activation or None)
    return _fake_forward(x, weight, stride, padding_before, padding_after, dilation, groups,
                         context, post)


@torch.library.custom_op("convplan::conv_backward_data", mutates_args=())
def _bwd_data_op(grad_y: Tensor, weight: Tensor, x_shape: List[int], stride: List[int],
                 padding_before: List[int], padding_after: List[int], dilation: List[int],
                 groups: int, channels_last: bool, context: int) -> Tensor:
    g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
    return _backward_data(_context(context), g, grad_y, weight, tuple(x_shape), channels_last)


@_bwd_data_op.register_fake
def _bwd_data_fake(grad_y, weight, x_shape, stride, padding_before, padding_after, dilation,
                   groups, channels_last, context):
    if _traced(grad_y):
        g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
        shape = _backward_shape(g, x_shape, weight.shape, grad_y.dtype, grad_y.get_device(),
                                channels_last)
        _recorder.add(_context(context), grad_y.get_device(), shape.problem("bwd_data"))
    return torch.empty(x_shape, dtype=grad_y.dtype, device=grad_y.device,
                       memory_format=_format_for(channels_last, len(x_shape)))


@torch.library.custom_op("convplan::conv_backward_filter", mutates_args=())
def _bwd_filter_op(grad_y: Tensor, x: Tensor, w_shape: List[int], stride: List[int],
                   padding_before: List[int], padding_after: List[int], dilation: List[int],
                   groups: int, channels_last: bool, context: int) -> Tensor:
    g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
    return _backward_filter(_context(context), g, grad_y, x, tuple(w_shape), channels_last)


@_bwd_filter_op.register_fake
def _bwd_filter_fake(grad_y, x, w_shape, stride, padding_before, padding_after, dilation, groups,
                     channels_last, context):
    if _traced(x):
        g = _geometry_of(stride, padding_before, padding_after, dilation, groups)
        shape = _backward_shape(g, x.shape, w_shape, x.dtype, x.get_device(), channels_last)
        _recorder.add(_context(context), x.get_device(), shape.problem("bwd_filter"))
    return torch.empty(w_shape, dtype=x.dtype, device=x.device,
                       memory_format=_format_for(channels_last, len(w_shape)))


def _setup_context(ctx, inputs, output):
    x, weight, stride, before, after, dilation, groups, context = inputs
    ctx.save_for_backward(x, weight)
    ctx.geometry = (list(stride), list(before), list(after), list(dilation), groups)
    ctx.context = context
    ctx.channels_last = _pick_format(x, weight) is not torch.contiguous_format


def _conv_backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    stride, before, after, dilation, groups = ctx.geometry
    grad_x = grad_w = None
    if ctx.needs_input_grad[0]:
        grad_x = torch.ops.convplan.conv_backward_data(grad_y, weight, list(x.shape), stride, before,
                                                       after, dilation, groups, ctx.channels_last,
                                                       ctx.context)
    if ctx.needs_input_grad[1]:
        grad_w = torch.ops.convplan.conv_backward_filter(grad_y, x, list(weight.shape), stride,
                                                         before, after, dilation, groups,
                                                         ctx.channels_last, ctx.context)
    return grad_x, grad_w, None, None, None, None, None, None


_conv_op.register_autograd(_conv_backward, setup_context=_setup_context)


# ------------------------------------------------------------------------------------------
# The public functions


# Eager mode: plain tensors, and none of torch.compile, a dispatch mode (FakeTensorMode, make_fx,
# functionalization, ...), a functorch transform or the JIT tracer, which all need the ops.
_PLAIN_TYPES = (Tensor, nn.Parameter)
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None) or (lambda: False)
_jit_tracing = torch._C._get_tracing_state


def _is_eager(x: Tensor, w: Tensor, bias: Optional[Tensor],
              residual: Optional[Tensor] = None) -> bool:
    if _is_compiling():
        return False
    if _recorder is not None and _recorder.takes(x):  # (not _traced(): a call less per conv)
        return _recorder.eager  # prepare() records the path that the real calls will take
    return (type(x) in _PLAIN_TYPES and type(w) in _PLAIN_TYPES
            and (bias is None or type(bias) in _PLAIN_TYPES)
            and (residual is None or type(residual) in _PLAIN_TYPES) and _dispatch_modes() == 0
            and not _functorch_active() and _jit_tracing() is None)


def _needs_grad(x: Tensor, w: Tensor, bias: Optional[Tensor], residual: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and (
        x.requires_grad or w.requires_grad or (bias is not None and bias.requires_grad)
        or (residual is not None and residual.requires_grad))


class _ConvFunction(torch.autograd.Function):
    """convplan::conv's autograd in eager mode, without the dispatcher (whose custom-op layers
    cost about 200 us a call, forward and backward): the same _run calls as the ops, the bias add
    and its gradient included. The backward runs on the autograd engine's thread, on the stream
    the engine makes current there (the forward's), with that thread's own cuDNN handle."""

    @staticmethod
    def forward(ctx, x, w, bias, shape, context):
        x, w = _in_format(shape, x, w)
        y = _forward_planned(context, shape, x, w)
        if bias is not None:
            y.add_(bias.view(shape.bias_view))
        ctx.save_for_backward(x, w)
        ctx.shape, ctx.context = shape, context
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        x, w = ctx.saved_tensors
        shape, context = ctx.shape, ctx.context
        needs_x, needs_w, needs_b = ctx.needs_input_grad[:3]
        grad_y = grad_y.contiguous(memory_format=shape.fmt)
        device = grad_y.get_device()
        grad_x = grad_w = grad_b = None
        if needs_x:
            grad_x = grad_y.new_empty_strided(shape.x_shape, shape.x_strides)
            if shape.empty:
                grad_x.zero_()
            else:
                _run(context, shape, "bwd_data", device, grad_x, w, grad_y, grad_y)
        if needs_w:
            grad_w = grad_y.new_empty_strided(shape.w_shape, shape.w_strides)
            if shape.empty:
                grad_w.zero_()
            else:
                _run(context, shape, "bwd_filter", device, x, grad_w, grad_y, grad_y)
        if needs_b:
            grad_b = grad_y.sum(shape.bias_dims)
        return grad_x, grad_w, grad_b, None, None


def _conv(g: _Geometry, x: Tensor, w: Tensor, bias: Optional[Tensor], context,
          residual: Optional[Tensor] = None, residual_scale: float = 1.0,
          activation: Optional[str] = None, fuse_bias_traced: bool = False) -> Tensor:
    """The forward of conv() and of the modules. Without a gradient the whole chain is one
    `post:` problem; with one, the convolution's autograd and PyTorch's epilogue. Traced (a
    dispatch mode, torch.compile), a bias alone stays convplan::conv + add unless
    fuse_bias_traced (the inference modules of optimize_for_inference)."""
    if bias is not None and (bias.dtype != x.dtype or bias.get_device() != x.get_device()):
        _check_inputs(x, w, bias, g.groups)
    extra = residual is not None or activation is not None
    post = _chain(bias is not None, residual is not None, residual_scale, activation) if extra \
        else ("bias" if bias is not None else "")
    needs_grad = _needs_grad(x, w, bias, residual)
    if _is_eager(x, w, bias, residual):
        context = context or _cp.default_context()
        if needs_grad:
            y = _ConvFunction.apply(x, w, bias, _forward_shape(g, x, w), context)
            return _torch_epilogue(y, None, residual, residual_scale, activation) if extra else y
        if post:
            return _forward_fused(context, g, x, w, bias, residual, post)
        shape = _forward_shape(g, x, w)
        x, w = _in_format(shape, x, w)
        return _forward_planned(context, shape, x, w)
    if not needs_grad and (extra or (bias is not None and fuse_bias_traced)):
        return _conv_fused_op(x, w, bias, residual, list(g.stride), list(g.before), list(g.after),
                              list(g.dilation), g.groups, float(residual_scale), activation or "",
                              _context_id(context))
    y = _conv_op(x, w, list(g.stride), list(g.before), list(g.after), list(g.dilation),
                 g.groups, _context_id(context))
    if bias is not None:
        y = y + bias.view((1, -1) + (1,) * (x.dim() - 2))
    return _torch_epilogue(y, None, residual, residual_scale, activation) if extra else y


def conv(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, stride=1, padding=0,
         dilation=1, groups: int = 1, context=None, *, residual: Optional[Tensor] = None,
         residual_scale: float = 1.0, activation: Optional[str] = None) -> Tensor:
    """torch.nn.functional.conv1d/2d/3d (by x's rank) through convplan, with an optional epilogue:

        y = activation(conv(x, weight) + bias + residual_scale * residual)

    residual: a tensor of the output's shape (copied into the output's memory format when it is
    in another); activation: None, "relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid",
    "tanh" or "elu" (alpha 1).

    When no gradient is needed (torch.no_grad(), inference tensors, or nothing requiring grad),
    the whole chain is one convplan call of the `post:` problem ("post:bias+add+relu"), whose
    plan the tuner picks among fused cuDNN engines and the convolution followed by convplan's
    epilogue kernel: so a plain conv(x, w, bias) is one `post:bias` call as well. Traced
    (torch.compile, make_fx) the chain with a residual or activation is the custom op
    convplan::conv_fused. When a gradient is needed, the convolution runs with its backward and
    the epilogue is PyTorch's own operations.

    padding may also be a sequence of (before, after) pairs, one per spatial dimension.
    Raises UnsupportedError for inputs convplan cannot take, ValueError for a bad activation or
    residual shape, convplan.Error for runtime failures.
    """
    if x.dim() != weight.dim() or x.dim() not in (3, 4, 5):
        _check_inputs(x, weight, bias, groups)
    g = _geometry(stride, padding, dilation, groups, x.dim() - 2, weight.shape[2:])
    if residual is None and activation is None:
        return _conv(g, x, weight, bias, context)
    if activation is not None and activation not in _ACTIVATIONS:
        _chain(False, False, 1.0, activation)  # raises, naming the choices
    return _conv(g, x, weight, bias, context, residual, residual_scale, activation)


class ConvplanConv(nn.Module):
    """What convert() puts in place of nn.Conv1d/2d/3d: the same parameters under the same names
    (weight, bias), a forward through convplan."""

    def __init__(self, conv: nn.Module, fallback: bool, context=None):
        super().__init__()
        d = conv.weight.dim() - 2
        if getattr(conv, "padding_mode", "zeros") != "zeros" and not fallback:
            raise UnsupportedError(f"padding_mode={conv.padding_mode!r}: convplan pads with zeros "
                                   "only (convert(..., fallback=True) leaves such layers to PyTorch)")
        self.weight = conv.weight
        self.bias = conv.bias
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size, self.stride = conv.kernel_size, conv.stride
        self.padding, self.dilation, self.groups = conv.padding, conv.dilation, conv.groups
        self.padding_mode = getattr(conv, "padding_mode", "zeros")
        self.fallback = fallback
        self.context = context
        # The original module, for fallback's own forward; in a list so that it is not a
        # submodule (its parameters would appear twice in the state_dict).
        self._torch_conv = [conv]
        self._geometry = _geometry(self.stride, self.padding, self.dilation, self.groups, d,
                                   conv.weight.shape[2:])

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}, convplan")

    def forward(self, x: Tensor) -> Tensor:
        w, b = self.weight, self.bias
        if self.fallback and not _takes(x, w, b, self.padding_mode):
            (self.context or _cp.default_context()).count_fallback()
            return self._torch_conv[0]._conv_forward(x, w, b)
        return _conv(self._geometry, x, w, b, self.context)


def _takes(x: Tensor, w: Tensor, b: Optional[Tensor], padding_mode: str) -> bool:
    device = x.get_device()
    return (padding_mode == "zeros" and device >= 0 and w.get_device() == device
            and x.dtype in _DTYPE_NAMES and w.dtype == x.dtype and x.dim() == w.dim()
            and (b is None or (b.dtype == x.dtype and b.get_device() == device)))


_CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def convert(module: nn.Module, fallback: bool = False, context=None) -> int:
    """Replaces every nn.Conv1d/2d/3d inside `module` (and `module` itself cannot be replaced:
    convert its parent) in place with a ConvplanConv sharing its parameters; the state_dict keys
    stay the same. With fallback=True, calls convplan cannot take (CPU tensors, a dtype mix,
    padding modes other than zeros) go to PyTorch's convolution and are counted in
    context.stats()['fallbacks']; without it they raise UnsupportedError. Returns how many
    modules were replaced. nn.ConvTranspose* are left alone."""
    count = 0
    for name, child in list(module.named_children()):
        if type(child) in _CONV_TYPES:
            setattr(module, name, ConvplanConv(child, fallback, context))
            count += 1
        else:
            count += convert(child, fallback, context)
    return count


from ._fusion import FusedConv, optimize_for_inference, plans  # noqa: E402,F401  (uses the above)
from ._prepare import prepare  # noqa: E402,F401  (uses the above)
