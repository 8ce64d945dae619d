"""The convplan package without torch and without a GPU (CI): import, the problem's text form
against the C++ parser, errors naming the field, devices() and the no-GPU error. On a GPU
machine the tests that need its absence skip, saying so."""
import os
import subprocess
import sys
import glob

import pytest

import convplan


def test_import_does_not_import_torch():
    code = "import sys, convplan; convplan.Problem('ic3ih8iw8oc4kh3kw3'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_version_and_cudnn_version():
    assert convplan.__version__.count(".") == 2
    v = convplan.cudnn_version()
    assert isinstance(v, int) and 90000 <= v < 100000, v


def _suite_descriptors():
    suites = os.environ.get("CONVPLAN_SUITES") or os.path.join(
        os.path.dirname(__file__), "..", "..", "suites")
    out = []
    for path in sorted(glob.glob(os.path.join(suites, "*.txt"))):
        for line in open(path):
            line = line.split("#")[0].split()
            if len(line) >= 3:
                # The batch goes after the flags ("post:bias+relu/ic3..."), where the parser
                # reads the shape.
                flags, slash, shape = line[2].rpartition("/")
                out.append(flags + slash + (shape if "mb" in shape else "mb32" + shape))
    return out


# Flags, directions, types, layouts, 1-3 D, asymmetric padding, dilation, groups, scaling.
_EXTRA = [
    "dir:bwd_data,dt:bf16,layout:nhwc/g1mb32ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1ph1pw1",
    "dir:bwd_filter,dt:f16/mb8ic32ih28iw28oc64kh3kw3sh2sw2ph1pw1",
    "dt:f64/mb2ic4iw17oc6kw5pw2",
    "dt:f32,tc:0/mb2ic4id8ih8iw8oc8kd3kh3kw3pd1ph1pw1",
    "layout:nhwc/mb4ic16ih15iw15oc16kh3kw3ph0pw1rh2rw0",
    "mb1ic8ih32iw32oc8kh3kw3dh1dw1ph2pw2",
    "g8mb2ic32ih16iw16oc64kh3kw3ph1pw1",
    "alpha:2,beta:0.5/mb2ic8ih8iw8oc8kh1kw1",
    "dir:wgrad,dt:bf16,layout:nhwc/g32mb4ic128ih28iw28oc128kh3kw3ph1pw1",
    "mb3ic5ih9iw11oc7kh2kw4sh3sw2",
]


def _descriptors():
    return _suite_descriptors() + _EXTRA


def test_canonical_text_matches_the_cpp_parser():
    binary = os.environ.get("CONVPLAN_CANONICAL_TEXT")
    if not binary:
        pytest.skip("CONVPLAN_CANONICAL_TEXT (the canonical_text test binary) is not set; "
                    "ctest sets it")
    descs = _descriptors()
    assert len(descs) >= 50
    out = subprocess.run([binary], input="\n".join(descs) + "\n", capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == len(descs)
    for desc, cpp in zip(descs, out):
        assert not cpp.startswith("error"), (desc, cpp)
        p = convplan.Problem(desc)
        assert str(p) == cpp, desc
        assert str(convplan.Problem(str(p))) == cpp  # canonical text parses to itself
        assert convplan.Problem(cpp) == p


def test_problem_attributes_are_read_only_values():
    p = convplan.Problem("dir:bwd_data,dt:bf16,layout:nhwc/g2mb8ic32ih28iw30oc64kh3kw5sh2sw1"
                         "ph1pw2rh0rw1dh1dw0")
    assert (p.direction, p.dtype, p.layout) == ("bwd_data", "bf16", "nhwc")
    assert (p.n, p.c, p.k, p.groups, p.spatial_dims) == (8, 32, 64, 2, 2)
    assert p.input == (28, 30) and p.filter == (3, 5) and p.stride == (2, 1)
    assert p.padding_before == (1, 2) and p.padding_after == (0, 1) and p.dilation == (2, 1)
    # (28 + 1 + 0 - (2*2 + 1)) // 2 + 1 = 13; (30 + 2 + 1 - 5) // 1 + 1 = 29
    assert p.output == (13, 29)
    assert p.flops == pytest.approx(2 * 8 * 64 * 13 * 29 * (32 // 2) * 3 * 5)
    with pytest.raises(AttributeError):
        p.n = 3
    one_d = convplan.Problem("mb2ic4iw17oc6kw5pw2")
    assert one_d.spatial_dims == 1 and one_d.input == (17,) and one_d.output == (17,)
    assert hash(one_d) == hash(convplan.Problem(str(one_d)))


@pytest.mark.parametrize("text, field", [
    ("mb2ic4ih8iw8oc4kh0kw3", "kh"),
    ("g3mb2ic64ih8iw8oc64kh3kw3", "g"),
    ("dt:f8/mb2ic4ih8iw8oc4kh3kw3", "f8"),
    ("dir:sideways/mb2ic4ih8iw8oc4kh3kw3", "sideways"),
    ("mb2ic4ih8iw8oc4kh3kw3xx5", "xx"),
    ("mb2ic4ih2iw2oc4kh5kw5", "output"),
])
def test_malformed_descriptor_is_a_value_error_naming_the_field(text, field):
    with pytest.raises(ValueError) as e:
        convplan.Problem(text)
    assert field in str(e.value), str(e.value)


def test_error_is_a_runtime_error():
    assert issubclass(convplan.Error, RuntimeError)


def test_context_arguments_are_checked():
    with pytest.raises(ValueError, match="sometimes"):
        convplan.Context(db="off", tune="sometimes")
    with pytest.raises(ValueError, match="workspace_limit=-1"):
        convplan.Context(db="off", workspace_limit=-1)


def test_prepare_all_checks_its_arguments_and_an_empty_list_needs_no_gpu():
    ctx = convplan.Context(db="off")
    ctx.prepare_all([])
    problem = convplan.Problem("ic3ih8iw8oc4kh3kw3")
    with pytest.raises(ValueError, match="threads=0"):
        ctx.prepare_all([problem], threads=0)


def test_context_stats_and_database(tmp_path):
    path = tmp_path / "tuning.db"
    ctx = convplan.Context(db=path, tune="heuristic", workspace_limit=1 << 20)
    s = ctx.stats()
    assert s["db"] == str(path) and path.exists()
    assert s["tune"] == "heuristic" and s["workspace_limit"] == 1 << 20
    for key in ("hits", "misses", "tunes", "clones", "db_hits", "plans", "fallbacks", "handles"):
        assert s[key] == 0, key
    assert convplan.Context(db="off").stats()["db"] == "off"


def test_default_context_uses_the_clis_default_database(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVPLAN_DB", str(tmp_path / "default.db"))
    convplan.set_default_context(None)
    try:
        assert convplan.default_context().db == str(tmp_path / "default.db")
        assert convplan.default_context() is convplan.default_context()
    finally:
        convplan.set_default_context(None)


def _no_gpu():
    return convplan._C.gpu_status() != ""


@pytest.mark.skipif(not _no_gpu(), reason="this machine has a GPU: the no-GPU behaviour cannot show")
def test_devices_is_empty_without_a_gpu():
    assert convplan.devices() == []


@pytest.mark.skipif(not _no_gpu(), reason="this machine has a GPU: the no-GPU behaviour cannot show")
def test_convolution_without_a_gpu_raises_error_saying_so():
    ctx = convplan.Context(db="off")
    with pytest.raises(convplan.Error) as e:
        ctx.run("mb1ic8ih8iw8oc8kh3kw3ph1pw1", 0, 0, 0)
    assert e.value.code == "no device"
    assert "no device" in str(e.value)


@pytest.mark.skipif(_no_gpu(), reason="no GPU here")
def test_devices_lists_the_gpus():
    ds = convplan.devices()
    assert ds and all(d["name"] and d["cudnn_version"] == convplan.cudnn_version() for d in ds)
