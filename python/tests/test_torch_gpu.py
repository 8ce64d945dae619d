"""convplan.torch on a GPU: every direction x dtype x layout x 1/2/3-D x geometry (groups,
stride, dilation, asymmetric padding) against PyTorch and a float64 reference; gradcheck;
torchvision ResNet-50 converted (eval bf16 channels_last and fp32, one training step); two threads
on two streams; CUDA graph capture and replay; torch.compile. Skips, saying why, without torch or
a GPU. Shapes are planned in heuristic mode (the tuner's choice is not what is tested here)."""
import copy
import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import convplan  # noqa: E402
import convplan.torch as cpt  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available() or not convplan.devices(),
                               reason="no usable CUDA GPU here")


@pytest.fixture(scope="module", autouse=True)
def heuristic_context():
    previous = convplan._default
    convplan.set_default_context(convplan.Context(db="off", tune="heuristic"))
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    convplan.set_default_context(previous)


def rel_l2(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# Against the float64 reference; the same-dtype comparison with PyTorch gets twice this.
TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]

# (name, spatial dims, x spatial, filter, stride, padding (before, after), dilation, groups)
GEOMETRIES = [
    ("plain1d", 1, (17,), (3,), (1,), ((1, 1),), (1,), 1),
    ("strided1d", 1, (19,), (5,), (2,), ((2, 1),), (2,), 2),
    ("depthwise1d", 1, (16,), (3,), (1,), ((1, 1),), (1,), 8),
    ("plain2d", 2, (10, 11), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ("strided2d", 2, (13, 12), (3, 2), (2, 1), ((1, 2), (0, 1)), (2, 1), 2),
    ("depthwise2d", 2, (9, 9), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 8),
    ("plain3d", 3, (6, 7, 6), (3, 3, 3), (1, 1, 1), ((1, 1), (1, 1), (1, 1)), (1, 1, 1), 1),
    ("strided3d", 3, (7, 8, 7), (3, 2, 3), (2, 1, 2), ((1, 0), (0, 1), (2, 1)), (1, 2, 1), 2),
    ("depthwise3d", 3, (6, 6, 6), (3, 3, 3), (1, 1, 1), ((1, 1), (1, 1), (1, 1)), (1, 1, 1), 8),
]
CASES = [(g, dt, cl) for g in GEOMETRIES for dt in DTYPES for cl in (False, True)
         if not (cl and g[1] == 1)]


def torch_conv(x, w, b, stride, pads, dilation, groups):
    """PyTorch's convolution with (before, after) padding: F.pad, then F.conv*d unpadded."""
    flat = []
    for before, after in reversed(pads):
        flat += [before, after]
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[x.dim() - 2]
    return fn(F.pad(x, flat), w, b, stride=stride, dilation=dilation, groups=groups)


def memory_format(rank, channels_last):
    if not channels_last:
        return torch.contiguous_format
    return torch.channels_last if rank == 4 else torch.channels_last_3d


def make(shape, dtype, fmt, gen):
    t = torch.randn(shape, generator=gen, dtype=torch.float64)
    return t.to("cuda", dtype).contiguous(memory_format=fmt)


@needs_gpu
@pytest.mark.parametrize("geometry, dtype, channels_last", CASES,
                         ids=[f"{g[0]}-{str(dt)[6:]}-{'cl' if cl else 'contig'}"
                              for g, dt, cl in CASES])
def test_all_directions_match_pytorch_and_float64(geometry, dtype, channels_last):
    name, d, spatial, filt, stride, pads, dilation, groups = geometry
    n, c, k = 2, 8, 16
    fmt = memory_format(d + 2, channels_last)
    gen = torch.Generator().manual_seed(hash(name) % 1000)
    x = make((n, c, *spatial), dtype, fmt, gen).requires_grad_()
    w = make((k, c // groups, *filt), dtype, fmt, gen).requires_grad_()
    b = make((k,), dtype, torch.contiguous_format, gen).requires_grad_()
    try:
        y = cpt.conv(x, w, b, stride=stride, padding=pads, dilation=dilation, groups=groups)
        gy = torch.randn(y.shape, generator=gen, dtype=torch.float64).to("cuda", dtype)
        gx, gw, gb = torch.autograd.grad(y, (x, w, b), gy)
    except convplan.Error as e:
        if e.code == "not supported":
            pytest.skip(f"cuDNN offers no engine here: {e}")
        raise
    torch.cuda.synchronize()
    assert y.is_contiguous(memory_format=fmt)

    # The float64 reference on the CPU, and PyTorch in the same dtype.
    x64, w64, b64 = (t.detach().cpu().double().requires_grad_() for t in (x, w, b))
    y64 = torch_conv(x64, w64, b64, stride, pads, dilation, groups)
    rx, rw, rb = torch.autograd.grad(y64, (x64, w64, b64), gy.cpu().double())
    xt, wt, bt = (t.detach().clone().requires_grad_() for t in (x, w, b))
    yt = torch_conv(xt, wt, bt, stride, pads, dilation, groups)
    tx, tw, tb = torch.autograd.grad(yt, (xt, wt, bt), gy)

    tol = TOL[dtype]
    for what, ours, ref, theirs in (("y", y, y64, yt), ("grad x", gx, rx, tx),
                                    ("grad w", gw, rw, tw), ("grad bias", gb, rb, tb)):
        assert ours.shape == ref.shape, what
        err, torch_err = rel_l2(ours, ref), rel_l2(theirs, ref)
        assert err <= max(tol, 2 * torch_err), f"{what}: {err:.2e} vs float64 (PyTorch {torch_err:.2e})"
        assert rel_l2(ours, theirs) <= 2 * max(tol, torch_err), f"{what} vs PyTorch"


@needs_gpu
def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 4, 6, 5, generator=gen, dtype=torch.float64).cuda().requires_grad_()
    w = torch.randn(6, 2, 3, 2, generator=gen, dtype=torch.float64).cuda().requires_grad_()
    b = torch.randn(6, generator=gen, dtype=torch.float64).cuda().requires_grad_()

    def f(x, w, b):
        return cpt.conv(x, w, b, stride=(2, 1), padding=((1, 0), (0, 1)), dilation=(1, 2),
                        groups=2)

    assert torch.autograd.gradcheck(f, (x, w, b))


@needs_gpu
def test_functional_matches_f_conv_for_plain_arguments():
    x = torch.randn(2, 3, 12, 12, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda")
    for kwargs in ({}, {"padding": 1}, {"padding": "same"}, {"stride": 2, "padding": (1, 0)},
                   {"padding": "valid", "dilation": 2}):
        with torch.no_grad():
            assert rel_l2(cpt.conv(x, w, **kwargs), F.conv2d(x, w, **kwargs)) < 1e-5, kwargs


@pytest.mark.parametrize("rank, fmt", [(3, torch.contiguous_format), (4, torch.contiguous_format),
                                       (4, torch.channels_last), (5, torch.channels_last_3d)])
def test_fake_implementations_give_pytorchs_shapes_and_backward_calls_convplan(rank, fmt):
    """Needs no GPU: the ops on meta tensors, as torch.compile traces them."""
    d = rank - 2
    x = torch.empty((2, 4) + (9,) * d, device="meta").contiguous(memory_format=fmt).requires_grad_()
    w = torch.empty((6, 2) + (3,) * d, device="meta").contiguous(memory_format=fmt).requires_grad_()
    stride, before, after, dil = [2] * d, [1] * d, [2] * d, [2] * d
    y = torch.ops.convplan.conv(x, w, stride, before, after, dil, 2, 0)
    ref = torch_conv(x, w, None, stride, [(1, 2)] * d, dil, 2)
    assert y.shape == ref.shape
    assert y.is_contiguous(memory_format=fmt)
    gx, gw = torch.autograd.grad(y.sum(), (x, w))
    assert gx.shape == x.shape and gw.shape == w.shape
    assert gx.is_contiguous(memory_format=fmt) and gw.is_contiguous(memory_format=fmt)

    def f(x, w):
        out = torch.ops.convplan.conv(x, w, stride, before, after, dil, 2, 0)
        return torch.autograd.grad(out.sum(), (x, w))

    from torch.fx.experimental.proxy_tensor import make_fx
    code = make_fx(f, tracing_mode="fake")(torch.randn(x.shape, requires_grad=True),
                                           torch.randn(w.shape, requires_grad=True)).code
    assert "convplan.conv_backward_data" in code and "convplan.conv_backward_filter" in code


@needs_gpu
def test_opcheck_of_the_custom_ops():
    x = torch.randn(2, 4, 9, 10, device="cuda", requires_grad=True)
    w = torch.randn(6, 2, 3, 3, device="cuda", requires_grad=True)
    torch.library.opcheck(torch.ops.convplan.conv.default,
                          (x, w, [2, 1], [1, 0], [2, 1], [1, 2], 2, 0))
    gy = torch.randn(2, 6, 5, 7, device="cuda")
    torch.library.opcheck(torch.ops.convplan.conv_backward_data.default,
                          (gy, w.detach(), [2, 4, 9, 10], [2, 1], [1, 0], [2, 1], [1, 2], 2, False, 0))
    torch.library.opcheck(torch.ops.convplan.conv_backward_filter.default,
                          (gy, x.detach(), [6, 2, 3, 3], [2, 1], [1, 0], [2, 1], [1, 2], 2, False, 0))


def test_convert_keeps_state_dict_keys_and_counts():
    model = nn.Sequential(nn.Conv1d(2, 4, 3), nn.Sequential(nn.Conv2d(4, 4, 3), nn.ReLU()),
                          nn.Conv3d(4, 2, 1, bias=False), nn.Linear(2, 2))
    keys = list(model.state_dict().keys())
    assert cpt.convert(model) == 3
    assert list(model.state_dict().keys()) == keys
    assert isinstance(model[1][0], cpt.ConvplanConv)
    with pytest.raises(cpt.UnsupportedError, match="padding_mode='reflect'"):
        cpt.convert(nn.Sequential(nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect")))


def test_cpu_input_raises_or_falls_back_and_is_counted():
    ctx = convplan.Context(db="off")
    strict = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1))
    cpt.convert(strict, context=ctx)
    x = torch.randn(1, 2, 5, 5)
    with pytest.raises(cpt.UnsupportedError, match="CUDA tensors only"):
        strict(x)  # the autograd path (the weight requires grad)
    with torch.no_grad(), pytest.raises(cpt.UnsupportedError, match="CUDA tensors only"):
        strict(x)  # the direct path
    plain = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"))
    lenient = copy.deepcopy(plain)
    cpt.convert(lenient, fallback=True, context=ctx)
    assert torch.equal(lenient(x), plain(x))
    assert ctx.stats()["fallbacks"] == 1


def resnet50(seed=0):
    tv = pytest.importorskip("torchvision", reason="torchvision is not installed")
    torch.manual_seed(seed)
    return tv.models.resnet50(weights=None)


@needs_gpu
@pytest.mark.parametrize("dtype, channels_last, tol", [(torch.bfloat16, True, 1e-2),
                                                       (torch.float32, False, 1e-4)])
def test_resnet50_eval_matches_pytorch(dtype, channels_last, tol):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    ref = resnet50().eval().to("cuda", dtype, memory_format=fmt)
    model = copy.deepcopy(ref)
    assert cpt.convert(model) == 53
    x = torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(2)).to(
        "cuda", dtype).contiguous(memory_format=fmt)
    with torch.no_grad():
        out, expected = model(x), ref(x)
    err = rel_l2(out, expected)
    assert err <= tol, f"rel-L2 {err:.2e} against PyTorch"


@needs_gpu
@pytest.mark.parametrize("dtype, channels_last, tol", [(torch.bfloat16, True, 1e-2),
                                                       (torch.float32, False, 1e-4)])
def test_resnet50_training_step_gradients_match_pytorch(dtype, channels_last, tol):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    ref = resnet50().train().to("cuda", dtype, memory_format=fmt)
    model = copy.deepcopy(ref)
    cpt.convert(model)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 224, 224, generator=gen).to("cuda", dtype).contiguous(memory_format=fmt)
    labels = torch.randint(0, 1000, (4,), generator=gen).cuda()
    for m in (model, ref):
        F.cross_entropy(m(x).float(), labels).backward()
    worst = []
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        worst.append((rel_l2(p.grad, q.grad), name))
    worst.sort(reverse=True)
    assert worst[0][0] <= tol, f"worst gradients (rel-L2, parameter): {worst[:5]}"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.step()  # the step itself runs; its inputs were checked above


@needs_gpu
def test_two_threads_on_two_streams_share_one_context():
    ctx = convplan.Context(db="off", tune="heuristic")
    shapes = [(4, 16, 14, 14), (2, 16, 28, 28)]
    w = torch.randn(32, 16, 3, 3, device="cuda")
    errors, results = [], {}
    barrier = threading.Barrier(2)

    def work(i):
        try:
            stream = torch.cuda.Stream()
            x = torch.randn(shapes[i], device="cuda")
            torch.cuda.synchronize()
            barrier.wait()
            with torch.cuda.stream(stream), torch.no_grad():
                for _ in range(50):
                    y = cpt.conv(x, w, padding=1, context=ctx)
            stream.synchronize()
            results[i] = rel_l2(y, F.conv2d(x, w, padding=1))
        except Exception as e:  # reported below, with the thread
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(results[i] < 1e-5 for i in range(2)), results
    s = ctx.stats()
    assert s["tunes"] == 2 and s["handles"] == 2, s


@needs_gpu
def test_cuda_graph_capture_replays_the_converted_model():
    model = resnet50().eval().to("cuda", torch.bfloat16, memory_format=torch.channels_last)
    ref = copy.deepcopy(model)
    cpt.convert(model)
    static_x = torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            model(static_x)  # plans every shape before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_y = model(static_x)
    for seed in (4, 5):
        static_x.copy_(torch.randn(static_x.shape, generator=torch.Generator().manual_seed(seed))
                       .to("cuda", torch.bfloat16))
        graph.replay()
        with torch.no_grad():
            eager, expected = model(static_x), ref(static_x)
        torch.cuda.synchronize()
        assert rel_l2(static_y, eager) <= 1e-3  # the same plans, replayed (split-K may reorder)
        assert rel_l2(static_y, expected) <= 1e-2


@needs_gpu
def test_torch_compile_of_a_converted_model_matches():
    torch.manual_seed(6)
    ref = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                        nn.Conv2d(32, 8, 1)).cuda()
    model = copy.deepcopy(ref)
    assert cpt.convert(model) == 3
    compiled = torch.compile(model)
    x = torch.randn(2, 3, 32, 32, device="cuda", requires_grad=True)
    out = compiled(x)
    expected = ref(x)
    assert rel_l2(out, expected) < 1e-5
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    x.grad = None
    expected.square().sum().backward()
    for g, p in zip(grads, ref.parameters()):
        assert rel_l2(g, p.grad) < 1e-4


@needs_gpu
@pytest.mark.parametrize("backward", [False, True])
def test_prepare_tunes_resnet50_so_that_its_first_calls_tune_nothing(backward):
    ctx = convplan.Context(db="off", tune="heuristic")
    ref = resnet50().train(backward).to("cuda", torch.bfloat16, memory_format=torch.channels_last)
    model = copy.deepcopy(ref)
    cpt.convert(model, context=ctx)
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(7)).to(
        "cuda", torch.bfloat16).contiguous(memory_format=torch.channels_last)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    texts = cpt.prepare(model, x, backward=backward)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    tunes = ctx.stats()["tunes"]
    assert 0 < tunes == len(texts) <= (3 if backward else 1) * 53
    outputs = []
    for m in (model, ref):
        with torch.set_grad_enabled(backward):
            outputs.append(m(x))
            if backward:
                outputs[-1].float().sum().backward()
    assert ctx.stats()["tunes"] == tunes, "the first call tuned what prepare() did not"
    assert rel_l2(*outputs) <= 1e-2
    if backward:
        worst = max(rel_l2(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()))
        assert worst <= 1e-2


@needs_gpu
def test_prepare_compiled_tunes_what_torch_compile_runs():
    ctx = convplan.Context(db="off", tune="heuristic")
    torch.manual_seed(8)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2), nn.ReLU(),
                          nn.Conv2d(32, 8, 1)).cuda()
    cpt.convert(model, context=ctx)
    x = torch.randn(2, 3, 32, 32, device="cuda", requires_grad=True)
    texts = cpt.prepare(model, x, backward=True, compiled=True)
    assert len(texts) == 9 and ctx.stats()["tunes"] == 9
    torch.compile(model)(x).square().sum().backward()
    assert ctx.stats()["tunes"] == 9, "the compiled model tuned what prepare() did not"
