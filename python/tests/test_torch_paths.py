"""Which path convplan.torch takes, without a GPU: plain eager calls (with or without a gradient)
never go through the custom op convplan::conv, and calls under a dispatch mode (make_fx, as
torch.compile's tracing) always do. convplan's launches are replaced by PyTorch's convolution on
the CPU (float64), so that the autograd wiring (which directions run, the bias gradient, the
layouts) is checked against F.conv*d's gradients. Skips without torch."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402

import convplan  # noqa: E402
import convplan.torch as cpt  # noqa: E402


class CpuLaunches:
    """Stands in for convplan's launches (cpt._run) and counts the custom op's calls."""

    def __init__(self, monkeypatch):
        self.directions = []
        self.problems = []  # the texts of the problems planned, in call order
        self.op_calls = 0
        self.compute = True  # False: record the calls only, leaving their outputs as they are
        real_op = cpt._conv_op

        def counted_op(*args):
            self.op_calls += 1
            return real_op(*args)

        monkeypatch.setattr(cpt, "_run", self.run)
        monkeypatch.setattr(cpt, "_check_inputs", lambda *args: None)  # CPU tensors allowed
        monkeypatch.setattr(cpt, "_conv_op", counted_op)
        # The op's own calls (context 0) take the default context: one without a database.
        monkeypatch.setattr(convplan, "_default", convplan.Context(db="off"))

    def run(self, ctx, shape, direction, device, x, w, y, like, post="", bias=None,
            residual=None):
        self.directions.append(direction if not post else f"{direction}+{post}")
        self.problems.append(str(shape.problem(direction, post)))
        if not self.compute:
            return
        g = shape.geometry
        pads = []
        for before, after in reversed(list(zip(g.before, g.after))):
            pads += [before, after]
        fn = (F.conv1d, F.conv2d, F.conv3d)[len(shape.x_shape) - 3]

        def conv(a, b):
            return fn(F.pad(a, pads), b, stride=g.stride, dilation=g.dilation, groups=g.groups)

        if direction == "fwd":
            ops = post.split("+") if post else []
            act = ops[-1] if ops and ops[-1] not in ("bias",) and not ops[-1].startswith("add") \
                else None
            scale = next((float(o[4:]) if o.startswith("add*") else 1.0 for o in ops
                          if o.startswith("add")), 1.0)
            y.copy_(cpt._torch_epilogue(conv(x, w), bias, residual, scale, act))
            return
        # bwd_data writes x (grad x), bwd_filter writes w (grad w); y holds grad y.
        with torch.enable_grad():
            xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
            gx, gw = torch.autograd.grad(conv(xs, ws), (xs, ws), y)
        (x if direction == "bwd_data" else w).copy_(gx if direction == "bwd_data" else gw)


@pytest.fixture
def launches(monkeypatch):
    return CpuLaunches(monkeypatch)


@pytest.fixture(scope="module")
def context():
    return convplan.Context(db="off")


def make(shape, fmt, seed, grad=True):
    t = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return t.contiguous(memory_format=fmt).requires_grad_(grad)


# (spatial dims, memory format, stride, padding, dilation, groups)
CASES = [(1, torch.contiguous_format, 2, ((2, 1),), 2, 2),
         (2, torch.contiguous_format, (2, 1), ((1, 0), (0, 1)), (1, 2), 2),
         (2, torch.channels_last, 1, 1, 1, 1),
         (3, torch.channels_last_3d, (1, 2, 1), ((1, 1), (0, 1), (1, 0)), 1, 4)]


@pytest.mark.parametrize("d, fmt, stride, padding, dilation, groups", CASES)
def test_eager_gradients_skip_the_custom_op_and_match_pytorch(launches, context, d, fmt, stride,
                                                              padding, dilation, groups):
    x = make((2, 8) + (7,) * d, fmt, 1)
    w = make((12, 8 // groups) + (3,) * d, fmt, 2)
    b = make((12,), torch.contiguous_format, 3)
    y = cpt.conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups,
                 context=context)
    assert type(y.grad_fn).__name__ == "_ConvFunctionBackward"
    gy = make(y.shape, fmt, 4, grad=False)
    gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)

    xt, wt, bt = (t.detach().clone().requires_grad_() for t in (x, w, b))
    pads = padding if not isinstance(padding, int) else ((padding, padding),) * d
    flat = [p for pair in reversed(pads) for p in pair]
    fn = (F.conv1d, F.conv2d, F.conv3d)[d - 1]
    yt = fn(F.pad(xt, flat), wt, bt, stride=stride, dilation=dilation, groups=groups)
    tx, tw, tb = torch.autograd.grad(yt, (xt, wt, bt), gy)
    for ours, theirs in ((y, yt), (gx, tx), (gw, tw), (gb, tb)):
        torch.testing.assert_close(ours, theirs)
    if d > 1:
        assert y.is_contiguous(memory_format=fmt) and gx.is_contiguous(memory_format=fmt)
        assert gw.is_contiguous(memory_format=fmt)
    assert launches.op_calls == 0
    assert launches.directions == ["fwd", "bwd_data", "bwd_filter"]


def test_only_the_gradients_asked_for_are_computed(launches, context):
    x = make((2, 4, 6, 6), torch.contiguous_format, 5, grad=False)
    w = make((4, 4, 3, 3), torch.contiguous_format, 6)
    y = cpt.conv(x, w, padding=1, context=context)
    y.sum().backward()
    assert w.grad is not None and x.grad is None
    assert launches.directions == ["fwd", "bwd_filter"]
    frozen = w.detach()
    x.requires_grad_()
    cpt.conv(x, frozen, padding=1, context=context).sum().backward()
    assert launches.directions[2:] == ["fwd", "bwd_data"]
    assert launches.op_calls == 0


def test_no_grad_calls_skip_autograd_and_the_custom_op(launches, context):
    x = make((1, 3, 5, 5), torch.contiguous_format, 7)
    w = make((2, 3, 3, 3), torch.contiguous_format, 8)
    b = make((2,), torch.contiguous_format, 9)
    with torch.no_grad():
        y = cpt.conv(x, w, b, padding=1, context=context)
    assert y.grad_fn is None and not y.requires_grad
    torch.testing.assert_close(y, F.conv2d(x, w, b, padding=1))
    # One call of the post:bias problem: the bias is the convolution's epilogue.
    assert launches.op_calls == 0 and launches.directions == ["fwd+bias"]


def test_double_backward_raises_rather_than_giving_wrong_second_derivatives(launches, context):
    x = make((1, 2, 5, 5), torch.contiguous_format, 10)
    w = make((2, 2, 3, 3), torch.contiguous_format, 11)
    (gx,) = torch.autograd.grad(cpt.conv(x, w, context=context).square().sum(), (x,),
                                create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        gx.sum().backward()


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("mode", ["real", "fake"])
def test_tracing_goes_through_the_custom_op(launches, grad, mode):
    """make_fx runs under a dispatch mode, as torch.compile's tracing does (on real tensors, or on
    FakeTensors): the graph must hold convplan's op, not what one eager call did."""
    from torch.fx.experimental.proxy_tensor import make_fx
    x = make((2, 4, 6, 6), torch.contiguous_format, 12)
    w = make((4, 2, 3, 3), torch.contiguous_format, 13)

    def f(x, w):
        with torch.set_grad_enabled(grad):
            return cpt.conv(x, w, padding=1, groups=2)

    code = make_fx(f, tracing_mode=mode)(x, w).code
    assert "convplan.conv" in code
    assert launches.op_calls == 1
    assert launches.directions == (["fwd"] if mode == "real" else [])


@pytest.mark.parametrize("scale", [1.0, 0.5])
@pytest.mark.parametrize("activation", [None, "relu", "relu6", "gelu", "gelu_tanh", "silu",
                                        "sigmoid", "tanh", "elu"])
def test_no_grad_epilogue_is_one_post_call(launches, context, activation, scale):
    x = make((2, 3, 6, 6), torch.channels_last, 20)
    w = make((4, 3, 3, 3), torch.channels_last, 21)
    b = make((4,), torch.contiguous_format, 22)
    r = make((2, 4, 6, 6), torch.contiguous_format, 23)  # copied into y's format
    with torch.no_grad():
        y = cpt.conv(x, w, b, padding=1, context=context, residual=r, residual_scale=scale,
                     activation=activation)
    want = F.conv2d(x, w, b, padding=1) + scale * r
    if activation is not None:
        want = cpt._ACTIVATIONS[activation](want)
    torch.testing.assert_close(y, want)
    chain = "bias+add" + ("" if scale == 1.0 else "*0.5") + (f"+{activation}" if activation else "")
    assert launches.directions == [f"fwd+{chain}"] and launches.op_calls == 0


def test_epilogue_with_gradient_keeps_the_training_path(launches, context):
    x = make((1, 2, 5, 5), torch.contiguous_format, 24).requires_grad_()
    w = make((3, 2, 3, 3), torch.contiguous_format, 25).requires_grad_()
    r = make((1, 3, 5, 5), torch.contiguous_format, 26).requires_grad_()
    y = cpt.conv(x, w, padding=1, context=context, residual=r, activation="silu")
    y.sum().backward()
    xs, ws, rs = (t.detach().clone().requires_grad_() for t in (x, w, r))
    F.silu(F.conv2d(xs, ws, padding=1) + rs).sum().backward()
    for got, want in ((x, xs), (w, ws), (r, rs)):
        torch.testing.assert_close(got.grad, want.grad)
    assert launches.directions == ["fwd", "bwd_data", "bwd_filter"]


def test_bad_activation_and_residual_shape_are_named(launches, context):
    x = make((1, 2, 5, 5), torch.contiguous_format, 27)
    w = make((3, 2, 3, 3), torch.contiguous_format, 28)
    with pytest.raises(ValueError, match="activation='rleu'"):
        cpt.conv(x, w, padding=1, activation="rleu", context=context)
    with torch.no_grad(), pytest.raises(ValueError, match="residual of shape"):
        cpt.conv(x, w, padding=1, residual=make((1, 3, 4, 4), torch.contiguous_format, 29),
                 context=context)


def test_traced_epilogue_goes_through_conv_fused(launches):
    from torch.fx.experimental.proxy_tensor import make_fx
    x = make((2, 4, 6, 6), torch.contiguous_format, 30)
    w = make((4, 4, 3, 3), torch.contiguous_format, 31)
    r = make((2, 4, 6, 6), torch.contiguous_format, 32)

    def f(x, w, r):
        with torch.no_grad():
            return cpt.conv(x, w, padding=1, residual=r, activation="relu")

    code = make_fx(f, tracing_mode="fake")(x, w, r).code
    assert "convplan.conv_fused" in code


# ------------------------------------------------------------------------------------------
# prepare(): the problems of a model's calls, recorded under FakeTensorMode


def small_model(context):
    """Biased and unbiased, grouped and strided convolutions, one problem twice, a BatchNorm."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False),
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=4, bias=False),
        torch.nn.Conv2d(16, 8, 1, stride=2))
    model = model.double().to(memory_format=torch.channels_last)
    assert cpt.convert(model, context=context) == 4
    return model


@pytest.fixture
def prepared(monkeypatch):
    """What prepare() hands to Context.prepare_all: [(texts, device, threads)]; CPU tensors
    allowed."""
    calls = []
    monkeypatch.setattr(cpt, "_check_inputs", lambda *args: None)
    monkeypatch.setattr(convplan.Context, "prepare_all", lambda self, problems, device, threads:
                        calls.append(([str(p) for p in problems], device, threads)))
    return calls


def run_step(model, x, backward):
    with torch.set_grad_enabled(backward):
        y = model(x)
        if backward:
            y.sum().backward()


@pytest.mark.parametrize("backward", [False, True])
def test_prepare_hands_over_what_the_eager_calls_plan(monkeypatch, prepared, context, backward):
    model = small_model(context)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = make((2, 8, 9, 9), torch.channels_last, 40, grad=False)
    texts = cpt.prepare(model, x, backward=backward, threads=3)
    assert prepared == [(texts, -1, 3)]
    assert cpt._recorder is None
    # The model ran on fake copies: its parameters, statistics and gradients are untouched.
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())

    launches = CpuLaunches(monkeypatch)
    run_step(model, x, backward)
    assert texts == list(dict.fromkeys(launches.problems))
    # Inference: two post:bias problems and the grouped one (met twice, handed over once);
    # training: forward problems without a post-op chain, and no bwd_data for x (needs no grad).
    directions = sorted(set(launches.directions))
    if backward:
        assert len(texts) == 8 and directions == ["bwd_data", "bwd_filter", "fwd"]
    else:
        assert len(texts) == 3 and directions == ["fwd", "fwd+bias"]


@pytest.mark.parametrize("backward", [False, True])
def test_prepare_compiled_hands_over_what_the_custom_ops_plan(monkeypatch, prepared, context,
                                                              backward):
    """make_fx on real tensors runs the custom ops for real, as a compiled model's calls do."""
    from torch.fx.experimental.proxy_tensor import make_fx
    model = small_model(context)
    x = make((2, 8, 9, 9), torch.channels_last, 41, grad=backward)
    texts = cpt.prepare(model, x, backward=backward, compiled=True)
    assert [p[0] for p in prepared] == [texts]

    launches = CpuLaunches(monkeypatch)
    launches.compute = False  # autograd.grad, as run() computes a gradient, fails under make_fx
    make_fx(lambda x: run_step(model, x, backward), tracing_mode="real")(x)
    assert launches.op_calls == 4
    assert texts == list(dict.fromkeys(launches.problems))
    assert not any("post:" in t for t in texts)  # the ops add a bias apart


def test_prepare_names_bad_arguments_and_unsupported_calls(context):
    model = small_model(context)
    x = make((2, 8, 10, 10), torch.channels_last, 42, grad=False)  # a shape not checked yet
    with pytest.raises(ValueError, match="threads=0"):
        cpt.prepare(model, x, threads=0)
    with pytest.raises(cpt.UnsupportedError, match="CUDA tensors only"):
        cpt.prepare(model, x)  # CPU tensors, as the real call would say
    assert cpt._recorder is None
