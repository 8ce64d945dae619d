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
