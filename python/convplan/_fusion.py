"""optimize_for_inference: a PyTorch model's convolutions and their epilogues as fused convplan
calls (issue 19). Exported from convplan.torch.

The model is traced with torch.fx (symbolic_trace). Each nn.Conv1d/2d/3d (zero padding) starts a
chain, which grows through nodes that only the chain uses:
  conv -> [eval-mode BatchNorm with running statistics: folded into the weight and bias]
       -> [add of one other tensor (operator.add/iadd, torch.add, Tensor.add/add_)]
       -> [activation: ReLU, ReLU6 (Hardtanh 0..6), GELU (erf or tanh), SiLU, Sigmoid, Tanh,
           ELU(alpha=1), as modules, functions or methods]
and is replaced by one FusedConv, whose forward is one call of the `post:` problem
(post:bias+add+relu, ...). A conv whose chain is empty (no bias, nothing fusable after it) is left
as it is, as is everything else in the graph. Folding is computed in float64 and cast to the
weight's dtype; the model itself is not modified (it is copied first).
"""
import copy
import operator
import sys
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

import convplan as _cp

# convplan.torch imports this module at its end: it is in sys.modules by then, fully defined.
_cpt = sys.modules["convplan.torch"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_ADDS = (operator.add, operator.iadd, torch.add)
# function -> (the chain's name, its parameters after the input in order, {parameter: (the value
# it needs, its default)})
_FUNCTIONS = {
    F.relu: ("relu", ("inplace",), {}),
    torch.relu: ("relu", (), {}),
    torch.relu_: ("relu", (), {}),
    F.relu6: ("relu6", ("inplace",), {}),
    F.hardtanh: ("relu6", ("min_val", "max_val", "inplace"), {"min_val": (0.0, -1.0), "max_val": (6.0, 1.0)}),
    F.gelu: ("gelu", ("approximate",), {}),
    F.silu: ("silu", ("inplace",), {}),
    torch.sigmoid: ("sigmoid", (), {}),
    torch.tanh: ("tanh", (), {}),
    F.elu: ("elu", ("alpha", "inplace"), {"alpha": (1.0, 1.0)}),
}


class FusedConv(nn.Module):
    """A convolution with its folded batch norm, residual add and activation, run as one
    convplan call: forward(x, residual=None). The weight and bias are buffers (inference: they
    take no gradient), so that .to(dtype / memory_format / device) converts them. Inputs convplan
    cannot take (CPU tensors, a dtype mix) run through PyTorch's own operations when fallback is
    set, counted in the context's stats()['fallbacks']."""

    def __init__(self, conv: nn.Module, weight: Tensor, bias: Optional[Tensor], residual: bool,
                 residual_scale: float, activation: Optional[str], fallback: bool, context=None):
        super().__init__()
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.stride, self.padding = conv.stride, conv.padding
        self.dilation, self.groups = conv.dilation, conv.groups
        self.residual, self.residual_scale = residual, float(residual_scale)
        self.activation = activation
        self.fallback, self.context = fallback, context
        self.chain = _cpt._chain(bias is not None, residual, residual_scale, activation)
        d = weight.dim() - 2
        self._geometry = _cpt._geometry(self.stride, self.padding, self.dilation, self.groups, d,
                                        weight.shape[2:])
        self._torch_conv = (F.conv1d, F.conv2d, F.conv3d)[d - 1]

    def extra_repr(self):
        return (f"{self.weight.shape[1] * self.groups}, {self.weight.shape[0]}, "
                f"kernel_size={tuple(self.weight.shape[2:])}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}, post={self.chain}")

    def forward(self, x: Tensor, residual: Optional[Tensor] = None) -> Tensor:
        w, b = self.weight, self.bias
        if self.fallback and not self._takes(x, residual):
            (self.context or _cp.default_context()).count_fallback()
            y = self._torch_conv(x, w, b, self.stride, self.padding, self.dilation, self.groups)
            return _cpt._torch_epilogue(y, None, residual, self.residual_scale, self.activation)
        if self.residual and residual is None:
            raise ValueError(f"FusedConv(post={self.chain}) needs its residual")
        return _cpt._conv(self._geometry, x, w, b, self.context, residual, self.residual_scale,
                          self.activation, fuse_bias_traced=True)

    def _takes(self, x: Tensor, residual: Optional[Tensor]) -> bool:
        w = self.weight
        if not _cpt._takes(x, w, self.bias, "zeros"):
            return False
        if residual is None:
            return True
        # An add that broadcasts (a per-channel tensor, say) is no residual of y's shape.
        y_shape = self._geometry.output_shape(tuple(x.shape), tuple(w.shape))
        return (tuple(residual.shape) == y_shape and residual.dtype == x.dtype
                and residual.get_device() == x.get_device())

    def plan(self, x_shape, dtype=torch.bfloat16, channels_last=True, device=0):
        """Which plan the context holds (tuning it when it is not there) for input x_shape: a dict
        with the problem's text, config ("unfused+eng12", "eng4", ...), kind ("fused" or
        "unfused"), and the record's best_fused_ms / best_unfused_ms when it timed candidates."""
        fmt = _cpt._format_for(channels_last, len(x_shape))
        tf32 = dtype is torch.float32 and _cpt._tf32_enabled()
        shape = _cpt._Shape(self._geometry, fmt, x_shape, self.weight.shape, dtype, tf32)
        problem = shape.problem("fwd", self.chain)
        ctx = self.context or _cp.default_context()
        info = ctx._impl.plan_info(problem, device, _cpt._raw_stream(device))
        info["problem"] = str(problem)
        return info


# ------------------------------------------------------------------------------------------
# Matching


def _only_user(node: fx.Node) -> Optional[fx.Node]:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def _module(gm: fx.GraphModule, node: fx.Node):
    return gm.get_submodule(node.target) if node.op == "call_module" else None


def _foldable_bn(gm, node: fx.Node, channels: int) -> Optional[nn.Module]:
    bn = _module(gm, node)
    if (type(bn) in _BATCH_NORMS and not bn.training and bn.track_running_stats
            and bn.running_mean is not None and bn.num_features == channels):
        return bn
    return None


def _activation(gm, node: fx.Node) -> Optional[str]:
    """The chain's name for node's activation, or None when it is none we fuse (on one input)."""
    m = _module(gm, node)
    if m is not None:
        if type(m) is nn.ReLU:
            return "relu"
        if type(m) is nn.ReLU6 or (type(m) is nn.Hardtanh and m.min_val == 0 and m.max_val == 6):
            return "relu6"
        if type(m) is nn.GELU:
            return "gelu_tanh" if m.approximate == "tanh" else "gelu"
        if type(m) is nn.ELU:
            return "elu" if m.alpha == 1.0 else None
        return {nn.SiLU: "silu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh"}.get(type(m))
    if node.op == "call_function" and node.target in _FUNCTIONS:
        name, params, required = _FUNCTIONS[node.target]
        if len(node.args) - 1 > len(params):
            return None
        values = dict(zip(params, node.args[1:]))
        values.update(node.kwargs)
        values.pop("inplace", None)
        if name == "gelu":
            approximate = values.pop("approximate", "none")
            name = "gelu_tanh" if approximate == "tanh" else "gelu" if approximate == "none" \
                else None
        if set(values) - set(required) or any(values.get(k, default) != need
                                              for k, (need, default) in required.items()):
            return None
        return name
    if node.op == "call_method" and len(node.args) == 1 and not node.kwargs:
        return {"relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}.get(
            node.target)
    return None


def _residual_of(node: fx.Node, head: fx.Node):
    """(residual node, scale) when node adds one other tensor to head, else None."""
    is_add = ((node.op == "call_function" and node.target in _ADDS)
              or (node.op == "call_method" and node.target in ("add", "add_")))
    if not is_add or len(node.args) != 2:
        return None
    kwargs = dict(node.kwargs)
    alpha = kwargs.pop("alpha", 1)
    if kwargs or not isinstance(alpha, (int, float)):
        return None
    a, b = node.args
    if a is head and isinstance(b, fx.Node) and b is not head:
        return b, float(alpha)
    if b is head and isinstance(a, fx.Node) and alpha == 1:
        return a, 1.0
    return None


def _fold(conv: nn.Module, bn: Optional[nn.Module]):
    """The conv's weight and bias with bn folded in (float64, cast to the weight's dtype)."""
    w, b = conv.weight.detach(), conv.bias
    if bn is None:
        return w, (None if b is None else b.detach())
    w64 = w.double()
    mean, var = bn.running_mean.double(), bn.running_var.double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    b64 = b.detach().double() if b is not None else torch.zeros_like(mean)
    w_out = (w64 * scale.view((-1,) + (1,) * (w.dim() - 1))).to(w.dtype)
    w_out = w_out.contiguous(memory_format=_cpt._memory_format(w))
    b_out = ((b64 - mean) * scale + beta).to(w.dtype)
    return w_out, b_out


def _chain_nodes(gm, conv_node: fx.Node, channels: int):
    """Walks the chain after conv_node: (nodes after the conv, bn, residual, scale, activation)."""
    nodes, bn, residual, scale, activation = [], None, None, 1.0, None
    head = conv_node
    nxt = _only_user(head)
    if nxt is not None and _foldable_bn(gm, nxt, channels) is not None:
        bn = _foldable_bn(gm, nxt, channels)
        nodes.append(nxt)
        head, nxt = nxt, _only_user(nxt)
    if nxt is not None:
        found = _residual_of(nxt, head)
        if found is not None:
            residual, scale = found
            nodes.append(nxt)
            head, nxt = nxt, _only_user(nxt)
    if nxt is not None and nxt.args and nxt.args[0] is head:
        activation = _activation(gm, nxt)
        if activation is not None:
            nodes.append(nxt)
    return nodes, bn, residual, scale, activation


def optimize_for_inference(model: nn.Module, context=None, fallback: bool = True) -> fx.GraphModule:
    """A copy of `model` (in eval mode) traced with torch.fx, its batch norms folded into the
    preceding convolutions and each conv(+bias)(+add residual)(+activation) chain replaced by a
    FusedConv (one convplan call of the `post:` problem); the rest stays PyTorch. Returns the
    GraphModule; its attribute convplan_fusions lists (conv's name, chain) per fused conv, in
    graph order. Run it under torch.no_grad() or torch.inference_mode() (the fused weights take
    no gradient anyway). Raises ValueError for a model in training mode (batch norm would then use
    batch statistics, which cannot be folded)."""
    if model.training:
        raise ValueError("optimize_for_inference needs a model in eval mode (call model.eval() "
                         "first): batch norm in training mode uses batch statistics, which "
                         "cannot be folded into the convolution")
    gm = fx.symbolic_trace(copy.deepcopy(model))
    graph = gm.graph
    fusions: List[tuple] = []
    for node in list(graph.nodes):
        if node.graph is not graph or node.op != "call_module":
            continue
        conv = gm.get_submodule(node.target)
        if type(conv) not in _CONVS or conv.padding_mode != "zeros" or len(node.args) != 1:
            continue
        nodes, bn, residual, scale, activation = _chain_nodes(gm, node, conv.out_channels)
        weight, bias = _fold(conv, bn)
        if bias is None and residual is None and activation is None:
            continue  # nothing to fuse: the plain convolution stays PyTorch's
        fused = FusedConv(conv, weight, bias, residual is not None, scale, activation, fallback,
                          context)
        gm.add_submodule(node.target, fused)  # in the conv's place, under its name
        last = nodes[-1] if nodes else node
        args = (node.args[0],) if residual is None else (node.args[0], residual)
        with graph.inserting_before(last):
            new = graph.call_module(node.target, args)
        last.replace_all_uses_with(new)
        for old in reversed([node] + nodes):
            graph.erase_node(old)
        fusions.append((node.target, fused.chain))
    graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    gm.convplan_fusions = fusions
    return gm


def plans(model: nn.Module, x_shapes, dtype=torch.bfloat16, channels_last=True, device=0):
    """For each FusedConv of `model`, given its input shape in x_shapes (a dict name -> shape, as
    recorded by a forward hook), the plan chosen (FusedConv.plan), in module order."""
    out = []
    for name, m in model.named_modules():
        if isinstance(m, FusedConv) and name in x_shapes:
            info = m.plan(tuple(x_shapes[name]), dtype, channels_last, device)
            info["name"], info["chain"] = name, m.chain
            out.append(info)
    return out
