"""optimize_for_inference without a GPU: the torch.fx rewrite's structure (which convs are fused,
with which chains) on torchvision's ResNet-50 and on small models, batch-norm folding against the
unfused model in float64 (the fused modules fall back to PyTorch's operations on CPU tensors, so
the numbers checked are the folded weights and the rewritten graph's), patterns that must be left
alone, and the refusal of a model in training mode. Skips without torch."""
import collections

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import convplan  # noqa: E402
import convplan.torch as cpt  # noqa: E402


@pytest.fixture(autouse=True)
def cpu_context(monkeypatch):
    monkeypatch.setattr(convplan, "_default", convplan.Context(db="off"))


def randomize_bn(model, seed=0):
    """Batch norms with statistics and affine parameters far from the identity."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            if m.running_mean is None:
                continue
            m.running_mean.copy_(torch.randn(n, generator=g))
            m.running_var.copy_(torch.rand(n, generator=g) * 2 + 0.1)
            if m.affine:
                m.weight.data.copy_(torch.randn(n, generator=g))
                m.bias.data.copy_(torch.randn(n, generator=g))
    return model


def rel_l2(a, b):
    return ((a - b).norm() / b.norm()).item()


def chains(gm):
    return collections.Counter(c for _, c in gm.convplan_fusions)


def fused_modules(gm):
    return [m for m in gm.modules() if isinstance(m, cpt.FusedConv)]


def test_resnet50_fuses_53_convs():
    torchvision = pytest.importorskip("torchvision")
    model = randomize_bn(torchvision.models.resnet50().eval())
    gm = cpt.optimize_for_inference(model)
    assert len(gm.convplan_fusions) == 53
    assert chains(gm) == {"bias+relu": 33, "bias+add+relu": 16, "bias": 4}
    assert len(fused_modules(gm)) == 53
    # The batch norms and ReLUs are gone from the graph; the pooling and the classifier stay.
    kinds = collections.Counter(type(m).__name__ for m in gm.modules())
    assert kinds["BatchNorm2d"] == 0 and kinds["Conv2d"] == 0 and kinds["Linear"] == 1
    assert kinds["MaxPool2d"] == 1 and kinds["AdaptiveAvgPool2d"] == 1
    # The model itself is untouched.
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 53
    # Folded in float64 from float64 parameters: the rewrite is exact but for rounding.
    model = model.double()
    gm = cpt.optimize_for_inference(model)
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    with torch.no_grad():
        assert rel_l2(gm(x), model(x)) < 1e-10


class Activations(nn.Module):
    """Convs followed by the activations the chains take, as modules, functions and methods."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.b2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.c4, self.b4 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c5 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.c6 = nn.Conv2d(8, 8, 1)
        self.c7 = nn.Conv2d(8, 8, 1)
        self.c8 = nn.Conv2d(8, 8, 1, bias=False)
        self.act1, self.act2 = nn.ReLU6(inplace=True), nn.SiLU()

    def forward(self, x):
        a = self.act1(self.b1(self.c1(x)))                 # bias+relu6 (bias from the BN)
        b = self.act2(self.b2(self.c2(a)))                 # bias+silu
        c = F.gelu(self.c3(b) + a)                         # bias+add+gelu
        d = torch.add(self.b4(self.c4(c)), b, alpha=0.5)   # bias+add*0.5
        e = F.gelu(self.c5(d), approximate="tanh")         # bias+gelu_tanh
        f = self.c6(e).sigmoid() * torch.tanh(self.c7(e))  # bias+sigmoid, bias+tanh
        return F.elu(self.c8(f))                           # elu


def test_small_model_chains_and_numerics():
    model = randomize_bn(Activations().eval(), 1).double()
    gm = cpt.optimize_for_inference(model)
    assert [c for _, c in gm.convplan_fusions] == [
        "bias+relu6", "bias+silu", "bias+add+gelu", "bias+add*0.5", "bias+gelu_tanh",
        "bias+sigmoid", "bias+tanh", "elu"]
    x = torch.randn(3, 3, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        assert rel_l2(gm(x), model(x)) < 1e-12


def test_folding_is_computed_in_float64_and_cast():
    model = randomize_bn(nn.Sequential(nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6)).eval(), 2)
    gm = cpt.optimize_for_inference(model)
    (fused,) = fused_modules(gm)
    conv, bn = model[0], model[1]
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    want_w = (conv.weight.double() * scale.view(-1, 1, 1, 1)).float()
    want_b = ((conv.bias.double() - bn.running_mean.double()) * scale + bn.bias.double()).float()
    assert fused.weight.dtype == torch.float32 and torch.equal(fused.weight, want_w)
    assert torch.equal(fused.bias, want_b)
    assert not fused.weight.requires_grad


class LeftAlone(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn_shared = nn.BatchNorm2d(4)
        self.reflect = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
        self.bn_reflect = nn.BatchNorm2d(4)
        self.plain = nn.Conv2d(4, 4, 1, bias=False)
        self.bn_stats = nn.BatchNorm2d(4, track_running_stats=False)
        self.lin = nn.Linear(4, 4)
        self.bn_lin = nn.BatchNorm1d(4)

    def forward(self, x):
        s = self.shared(x)
        a = self.bn_shared(s) + s                          # conv used twice: no BN folding
        b = F.relu(self.bn_reflect(self.reflect(a)))       # reflect padding: PyTorch's
        c = self.bn_stats(self.plain(b))                   # batch statistics: not foldable
        d = c + 1.0                                        # no tensor to add
        return self.bn_lin(self.lin(d.mean((2, 3))))       # not a convolution


def test_non_foldable_patterns_are_left_alone():
    model = randomize_bn(LeftAlone().eval(), 3).double()
    gm = cpt.optimize_for_inference(model)
    assert gm.convplan_fusions == []
    kinds = collections.Counter(type(m).__name__ for m in gm.modules())
    assert kinds["Conv2d"] == 3 and kinds["BatchNorm2d"] == 3 and kinds["BatchNorm1d"] == 1
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        assert rel_l2(gm(x), model(x)) < 1e-12


def test_broadcasting_add_falls_back_at_run_time():
    class PerChannel(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x, t):
            return torch.relu(self.conv(x) + t)

    model = PerChannel().eval().double()
    gm = cpt.optimize_for_inference(model)
    assert [c for _, c in gm.convplan_fusions] == ["bias+add+relu"]
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    t = torch.randn(1, 4, 1, 1, dtype=torch.float64)  # not of y's shape: PyTorch's add
    with torch.no_grad():
        assert rel_l2(gm(x, t), model(x, t)) < 1e-12


def test_training_mode_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    with pytest.raises(ValueError, match=r"eval mode \(call model.eval\(\) first\)"):
        cpt.optimize_for_inference(model)


def test_without_fallback_cpu_tensors_raise():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    gm = cpt.optimize_for_inference(model, fallback=False)
    with torch.no_grad(), pytest.raises(cpt.UnsupportedError, match="CUDA tensors only"):
        gm(torch.randn(1, 3, 5, 5))
