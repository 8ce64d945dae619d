#!/usr/bin/env python3
"""Puts convplan's tuning modes side by side, layer by layer, from torch_compare.py results.

Each argument is the JSON that one `torch_compare.py --tune MODE` run wrote for the same suite,
data type, layout, direction and batch. Prints one table (each mode's time per layer, the
exhaustive/heuristic ratio, PyTorch's time in the first run) and the totals (sum over distinct
layers, sum weighted by count, tuning time), and writes the same as JSON with --json.

    python3 bench/tune_modes.py heuristic.json limited.json exhaustive.json --json modes.json

A benchmark report: it asserts nothing.
"""

import argparse
import json
import sys

from provenance import provenance

MODES = ("heuristic", "limited", "exhaustive")


def load(paths):
    runs = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        mode = data["convplan"]["settings"]["tune"]
        if mode in runs:
            sys.exit(f"tune_modes: two results for mode '{mode}' ({path})")
        runs[mode] = data
    keys = {tuple(r["settings"][k] for k in ("suite", "dtype", "layout", "direction", "batch"))
            for r in runs.values()}
    if len(keys) != 1:
        sys.exit(f"tune_modes: the results are not for the same problems: {sorted(keys)}")
    return [m for m in MODES if m in runs], runs


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="torch_compare.py JSON files, one per mode")
    p.add_argument("--json", default=None, help="write the table here too")
    args = p.parse_args(argv)
    modes, runs = load(args.results)
    first = runs[modes[0]]
    s = first["settings"]
    layers = []
    for i, row in enumerate(first["rows"]):
        entry = {"name": row["name"], "count": row["count"], "torch_ms": row["torch"]["median_ms"]}
        for m in modes:
            other = runs[m]["rows"][i]
            assert other["descriptor"] == row["descriptor"], (m, other["name"])
            entry[m] = {"engine": other["convplan"]["engine"], "ms": other["convplan"]["median_ms"],
                        "tuning_ms": other["convplan"]["tuning_ms"]}
        layers.append(entry)

    def total(key, weighted):
        return sum((l["count"] if weighted else 1) * (l[key] if key == "torch_ms" else l[key]["ms"])
                   for l in layers)

    totals = {m: {"distinct_ms": total(m, False), "weighted_ms": total(m, True),
                  "tuning_ms": runs[m]["totals"]["convplan_tuning_ms"],
                  "torch_weighted_ms": runs[m]["totals"]["torch_ms"]} for m in modes}
    totals["torch"] = {"distinct_ms": total("torch_ms", False), "weighted_ms": total("torch_ms", True),
                       "first_call_ms": first["totals"]["torch_first_call_ms"]}

    print(f"{s['suite']} {s['direction']} {s['dtype']} {s['layout']} b{s['batch']} on {first['gpu']}, "
          f"cuDNN {first['cudnn']['convplan']}: ms per layer by tuning mode")
    head = f"{'layer':<22} {'count':>5} " + " ".join(f"{m:>10}" for m in modes)
    both = "heuristic" in modes and "exhaustive" in modes
    head += (f" {'exh/heur':>8}" if both else "") + f" {'torch':>8}"
    print(head)
    print("-" * len(head))
    for l in layers:
        line = f"{l['name']:<22} {l['count']:>5} " + " ".join(f"{l[m]['ms']:>10.4f}" for m in modes)
        if both:
            line += f" {l['exhaustive']['ms'] / l['heuristic']['ms']:>8.3f}"
        print(line + f" {l['torch_ms']:>8.4f}")
    print("-" * len(head))
    for label, key in (("sum, distinct layers", "distinct_ms"), ("sum, weighted by count", "weighted_ms")):
        line = f"{label:<28} " + " ".join(f"{totals[m][key]:>10.3f}" for m in modes)
        if both:
            line += f" {totals['exhaustive'][key] / totals['heuristic'][key]:>8.3f}"
        print(line + f" {totals['torch'][key]:>8.3f}")
    print(f"{'tuning s':<28} " + " ".join(f"{totals[m]['tuning_ms'] / 1e3:>10.1f}" for m in modes)
          + (" " * 9 if both else "") + f" {totals['torch']['first_call_ms'] / 1e3:>8.1f}")
    print("torch: the first run's PyTorch (cudnn.benchmark=True); its 'tuning' is the sum of first calls."
          " Each mode's run measured PyTorch again: weighted "
          + ", ".join(f"{m} {totals[m]['torch_weighted_ms']:.3f}" for m in modes) + " ms.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "convplan-tune-modes", "version": 1, "settings": s, "gpu": first["gpu"],
                       "cudnn": first["cudnn"], "date": first["date"], "modes": modes,
                       "layers": layers, "totals": totals, "provenance": provenance()}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
