"""The benchmark scripts' own logic that needs no GPU. Regression: bench/torch_compare.py read the
set-up and first-result times at the top of `convplan bench --json`'s document, where they are
not (they are in "totals"), so its "cp setup ms", "cp 1st result ms" and "cp bg 1st ms" columns
were always empty."""
import importlib.util
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def load(name):
    sys.path.insert(0, str(BENCH))  # the scripts import provenance.py beside them
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_torch_compare_reads_set_up_and_first_result_from_the_bench_totals():
    tc = load("torch_compare")
    doc = {"format": "convplan-bench", "rows": [],
           "totals": {"setup_ms": 209.9, "first_result_ms": 839.0, "tuning_ms": 952.6}}
    assert tc.bench_totals(doc)["setup_ms"] == 209.9
    assert tc.bench_totals(doc)["first_result_ms"] == 839.0
    assert tc.bench_totals(None) == {}  # no background run
    assert tc.bench_totals({"rows": []}) == {}


def test_torch_compare_gives_no_tuning_ratio_when_a_convplan_layer_failed():
    # Regression: 23 layers that failed at once (a GPU fault in the first one's tune) counted as
    # 1.65 s of tuning against PyTorch's 6.04 s, reported as 0.27x.
    tc = load("torch_compare")
    ok = {"convplan": {"median_ms": 0.5}}
    failed = {"convplan": {"median_ms": None, "error": "CUDA error: illegal address"}}
    assert tc.tuning_ratio([ok, ok], 1650.0, 6040.0) == 1650.0 / 6040.0
    assert tc.tuning_ratio([ok, failed], 1650.0, 6040.0) is None
    assert tc.tuning_ratio([ok], 1650.0, 0) is None


def test_torch_compare_passes_prepare_threads_to_convplan_only_when_set():
    import argparse
    tc = load("torch_compare")
    args = argparse.Namespace(dtype="bf16", layout="nhwc", dir="fwd", iters=20, warmup=3, gpu=0,
                              batch=256, tune=None, prepare_threads=4, peak_tflops=None,
                              peak_gbps=None)
    a = tc.convplan_args(args, "suites/mobilenet_v2.txt")
    assert a[a.index("--prepare-threads") + 1] == "4"
    args.prepare_threads = 0
    assert "--prepare-threads" not in tc.convplan_args(args, "suites/mobilenet_v2.txt")


def test_torch_compare_fresh_driver_cache_gives_each_side_an_empty_folder_of_its_own(tmp_path):
    tc = load("torch_compare")
    cp = tc.driver_cache_env("fresh", str(tmp_path), "convplan")
    torch = tc.driver_cache_env("fresh", str(tmp_path), "torch")
    assert cp["CUDA_CACHE_PATH"] != torch["CUDA_CACHE_PATH"]
    for env in (cp, torch):
        assert env["CUDA_CACHE_DISABLE"] == "0"  # a caller's CUDA_CACHE_DISABLE=1 is overridden
        folder = pathlib.Path(env["CUDA_CACHE_PATH"])
        assert folder.is_dir() and not any(folder.iterdir())
    assert tc.driver_cache_env("off", str(tmp_path), "torch") == {"CUDA_CACHE_DISABLE": "1"}
    assert tc.driver_cache_env("inherit", str(tmp_path), "torch") == {}


def test_kernel_cache_report_pairs_the_layers_and_sums_by_count():
    kc = load("kernel_cache")

    def run(tune_ms, ms, engine):
        rows = [{"name": f"l{i}", "count": 2 if i == 0 else 1, "descriptor": f"d{i}",
                 "engine": engine, "median_ms": ms, "tuning_ms": tune_ms} for i in range(2)]
        return {"rows": rows, "totals": {"tuning_ms": 2 * tune_ms, "setup_ms": 1.0, "failed": 0}}

    off, on = run(300.0, 0.5, "eng5"), run(40.0, 0.25, "eng6")
    layers = kc.layers(off, on)
    assert [l["on"]["engine"] for l in layers] == ["eng6", "eng6"]
    assert kc.totals(off, layers, "off")["weighted_ms"] == 1.5
    assert kc.totals(on, layers, "on")["tuning_ms"] == 80.0
