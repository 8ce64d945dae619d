"""Fused epilogues from PyTorch on a GPU (issue 19): convplan.torch.conv with bias, residual and
each activation against a float64 reference, both kinds of plan reported; torchvision ResNet-50
through optimize_for_inference in bf16 channels_last against PyTorch (rel-L2 1e-2), under a CUDA
graph, and under torch.compile. Skips, saying why, without torch or a GPU. Planned in heuristic
mode (which plan wins is the benchmark's business, bench/torch_infer.py)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402

import convplan  # noqa: E402
import convplan.torch as cpt  # noqa: E402

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available() or not convplan.devices(),
                               reason="no usable CUDA GPU here")
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module", autouse=True)
def heuristic_context():
    previous = convplan._default
    convplan.set_default_context(convplan.Context(db="off", tune="heuristic"))
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = tf32
    convplan.set_default_context(previous)


def rel_l2(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("activation", [None, "relu", "relu6", "gelu", "gelu_tanh", "silu",
                                        "sigmoid", "tanh", "elu"])
def test_conv_epilogue_matches_float64(dtype, channels_last, activation):
    g = torch.Generator(device="cuda").manual_seed(7)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(4, 32, 14, 14, device="cuda", generator=g).to(dtype, memory_format=fmt)
    w = (torch.randn(64, 32, 3, 3, device="cuda", generator=g) / 17).to(dtype, memory_format=fmt)
    b = torch.randn(64, device="cuda", generator=g).to(dtype)
    r = torch.randn(4, 64, 14, 14, device="cuda", generator=g).to(dtype, memory_format=fmt)
    with torch.no_grad():
        y = cpt.conv(x, w, b, padding=1, residual=r, residual_scale=0.5, activation=activation)
        want = F.conv2d(x.double(), w.double(), b.double(), padding=1) + 0.5 * r.double()
        if activation is not None:
            want = cpt._ACTIVATIONS[activation](want)
    assert y.dtype == dtype and y.is_contiguous(memory_format=fmt)
    assert rel_l2(y, want) < TOL[dtype]


@needs_gpu
def test_plain_bias_without_grad_is_one_post_bias_call():
    x = torch.randn(2, 16, 8, 8, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(16, 16, 3, 3, device="cuda", dtype=torch.bfloat16) / 12
    b = torch.randn(16, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        y = cpt.conv(x, w, b, padding=1)
    assert rel_l2(y, F.conv2d(x.double(), w.double(), b.double(), padding=1)) < 2e-2
    shape = next(s for s in cpt._geometry(1, 1, 1, 1, 2, (3, 3)).shapes.values()
                 if s.x_shape == tuple(x.shape) and s.dtype is torch.bfloat16)
    assert set(shape.problems) == {("fwd", "bias")}
    info = convplan.default_context()._impl.plan_info(shape.problems[("fwd", "bias")])
    assert info["kind"] in ("fused", "unfused") and info["config"]


def resnet50(batch):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    for m in model.modules():  # statistics away from the identity, as a trained model has
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    model = model.cuda().to(torch.bfloat16, memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(torch.bfloat16,
                                                            memory_format=torch.channels_last)
    return model, x


@needs_gpu
def test_resnet50_optimized_matches_pytorch():
    model, x = resnet50(8)
    gm = cpt.optimize_for_inference(model)
    assert len(gm.convplan_fusions) == 53
    with torch.no_grad():
        want = model(x)  # PyTorch's bf16 channels_last eval, batch norms unfolded
        got = gm(x)
    assert got.dtype == torch.bfloat16
    err = rel_l2(got, want)
    assert err < 1e-2, f"rel-L2 {err:.2e} against PyTorch"
    plans = cpt.plans(gm, {"conv1": x.shape, "layer1.0.conv3": (8, 64, 56, 56)})
    assert [p["chain"] for p in plans] == ["bias+relu", "bias+add+relu"]
    assert all(p["kind"] in ("fused", "unfused") and p["config"] for p in plans)
    assert "post:bias+add+relu" in plans[1]["problem"]


@needs_gpu
def test_resnet50_optimized_in_a_cuda_graph():
    model, x = resnet50(4)
    gm = cpt.optimize_for_inference(model)
    with torch.no_grad():
        want = gm(x)  # plans made before capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            gm(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = gm(x)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)


@needs_gpu
def test_optimized_model_under_torch_compile():
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32),
                                torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 1), torch.nn.SiLU())
    model = model.eval().cuda().to(torch.bfloat16, memory_format=torch.channels_last)
    x = torch.randn(4, 16, 10, 10, device="cuda").to(torch.bfloat16,
                                                       memory_format=torch.channels_last)
    gm = cpt.optimize_for_inference(model)
    with torch.no_grad():
        want = model.float()(x.float())
        got = torch.compile(gm)(x)
    assert rel_l2(got, want) < 2e-2
