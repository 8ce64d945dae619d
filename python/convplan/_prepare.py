"""prepare: tunes a model's convplan convolutions before its first call, several at once
(Context.prepare_all). Exported from convplan.torch.

The model runs once under FakeTensorMode (no GPU work; the model's parameters, buffers and
gradients are left as they are: it runs on fake copies through torch.func.functional_call).
Each convplan call it makes is recorded (its context, device and problem) instead of launched:
convplan.torch asks `_recorder` in the places where it would plan, and records only tensors of
this trace's fake mode, so that other threads' real calls run as usual meanwhile.
"""
import sys
import threading
from typing import List

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves, tree_map

# convplan.torch imports this module at its end: it is in sys.modules by then, fully defined.
_cpt = sys.modules["convplan.torch"]

_one_at_a_time = threading.Lock()  # convplan.torch has one _recorder


class _Recorder:
    """The problems met while tracing, per (context, device), in first-met order."""

    def __init__(self, mode: FakeTensorMode, eager: bool):
        self.mode = mode
        self.eager = eager  # the path that the recorded calls take: eager, or the custom ops
        self.found = {}  # (id(context), device) -> (context, device, {text: problem})

    def takes(self, t: Tensor) -> bool:
        return getattr(t, "fake_mode", None) is self.mode

    def add(self, context, device: int, problem):
        entry = self.found.setdefault((id(context), device), (context, device, {}))
        entry[2].setdefault(str(problem), problem)


def _fake(mode: FakeTensorMode, value):
    return mode.from_tensor(value) if isinstance(value, Tensor) else value


def _backward(outputs, leaves):
    """The gradients of the outputs' sum with respect to the leaves that require one."""
    outputs = [o for o in tree_leaves(outputs) if isinstance(o, Tensor) and o.requires_grad]
    leaves = [t for t in leaves if t.requires_grad]
    if outputs and leaves:
        torch.autograd.grad(outputs, leaves, [torch.ones_like(o) for o in outputs],
                            allow_unused=True)


def _trace(model: nn.Module, example_inputs, backward: bool, compiled: bool) -> _Recorder:
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    state = {name: _fake(mode, t) for name, t in model.named_parameters()}
    state.update({name: _fake(mode, t) for name, t in model.named_buffers()})
    inputs = tree_map(lambda v: _fake(mode, v), example_inputs)
    recorder = _Recorder(mode, eager=not compiled)
    with _one_at_a_time:
        _cpt._recorder = recorder
        try:
            with mode, torch.set_grad_enabled(backward):
                outputs = torch.func.functional_call(model, state, inputs)
                if backward:
                    _backward(outputs, list(state.values()) + tree_leaves(inputs))
        finally:
            _cpt._recorder = None
    return recorder


def prepare(model: nn.Module, *example_inputs, backward: bool = False, compiled: bool = False,
            threads: int = 4) -> List[str]:
    """Tunes (or finds in the tuning database) every convplan problem that model(*example_inputs)
    would plan, `threads` at once (Context.prepare_all, in each module's context), so that the
    model's first calls find them tuned. Call it after convert() or optimize_for_inference().

    The model runs once on fake copies of its parameters, buffers and example_inputs (tensors,
    or nested lists, tuples and dicts of them, on the devices and in the dtypes and memory formats
    of the real calls): nothing runs on a GPU, nothing of the model changes. backward=False records
    an inference call (under torch.no_grad()); backward=True a training step: the forward with a
    gradient, and the backward of the outputs' sum with respect to the parameters and inputs that
    require one. compiled=True records the calls of the model under torch.compile (the custom
    ops), whose problems differ from eager mode's where a bias is added (eager fuses it into the
    convolution's call).

    Returns the problems' texts (each once, in first-met order). Raises what the model's forward
    raises (UnsupportedError for a call convplan cannot take), ValueError for a bad `threads`,
    convplan.Error when tuning failed (after trying them all, saying how many failed).
    """
    if int(threads) < 1:
        raise ValueError(f"threads={threads} must be at least 1")
    recorder = _trace(model, example_inputs, backward, compiled)
    texts = []
    for context, device, problems in recorder.found.values():
        context.prepare_all(list(problems.values()), device, threads)
        texts.extend(problems)
    return texts
