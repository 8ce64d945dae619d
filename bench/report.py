#!/usr/bin/env python3
"""Writes the README's result tables from the committed JSON in bench/results/, and the charts
under docs/ that the README shows, so that neither can drift from the measurements.

    python3 bench/report.py            # rewrite the README's tables and the charts (matplotlib)
    python3 bench/report.py --check    # exit 1 when the README's tables differ from the JSON (CI)

Tables are written between the README's markers `<!-- report.py:NAME -->` and
`<!-- report.py:end -->`:
  resnet50    ResNet-50 against PyTorch: for each direction, type, layout and batch the newest
              `<date>-resnet50-<dtype>-<layout>-<dir>-b<batch>.json` of bench/torch_compare.py
              (a run in limited mode; the -heuristic/-exhaustive runs of tune_modes.py are not)
  tune-modes  the `*-tune-modes.json` of bench/tune_modes.py
  torch-infer the newest `*-torch-infer-resnet50-bf16.json` of bench/torch_infer.py (written only
              where the README has its marker)
Charts (docs/, PNG): bench-resnet50-layers.png, each layer's PyTorch time over convplan's for the
newest bf16 NHWC runs of each direction and batch; bench-resnet50-tuning.png, convplan's tuning
time against PyTorch's first calls (its cudnn.benchmark search) for every row of the table.
"""

import argparse
import difflib
import glob
import json
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results")
README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
LAYERS_CHART = "docs/bench-resnet50-layers.png"
TUNING_CHART = "docs/bench-resnet50-tuning.png"

RUN_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-resnet50-(\w+)-(\w+)-(fwd|bwd_data|bwd_filter)-b(\d+)(-\d+)?\.json$")
DIRECTIONS = ["fwd", "bwd_data", "bwd_filter"]


def load(path):
    with open(path) as f:
        return json.load(f)


def newest_runs():
    """{(dir, dtype, layout, batch): (file name, document)} of the newest plain run of each."""
    best = {}
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        name = os.path.basename(path)
        m = RUN_NAME.match(name)
        if not m:
            continue
        doc = load(path)
        if doc.get("format") != "convplan-torch-compare":
            continue
        s = doc["settings"]
        key = (s["direction"], s["dtype"], s["layout"], int(s["batch"]))
        order = (doc.get("date", m.group(1)), name)
        if key not in best or order > best[key][0]:
            best[key] = (order, name, doc)
    return {k: (v[1], v[2]) for k, v in best.items()}


def sort_key(key):
    direction, dtype, layout, batch = key
    return (DIRECTIONS.index(direction), dtype != "bf16", dtype, layout, batch)


def resnet50_table(runs):
    head = ("| direction | type | layout | batch | PyTorch ms (x count) | convplan ms (x count) "
            "| convplan / PyTorch | PyTorch ms (23 distinct) | convplan ms (23 distinct) "
            "| convplan / PyTorch | PyTorch first calls s | convplan tuning s | tuning ratio | run |")
    lines = [head, "|" + "---|" * 14]
    for key in sorted(runs, key=sort_key):
        name, doc = runs[key]
        t, rows = doc["totals"], doc["rows"]
        torch_d = sum(r["torch"]["median_ms"] for r in rows)
        conv_d = sum(r["convplan"]["median_ms"] for r in rows)
        first_s, tune_s = t["torch_first_call_ms"] / 1e3, t["convplan_tuning_ms"] / 1e3
        direction, dtype, layout, batch = key
        lines.append(
            f"| {direction} | {dtype} | {layout} | {batch} | {t['torch_ms']:.3f} | {t['convplan_ms']:.3f} "
            f"| {t['convplan_ms'] / t['torch_ms']:.2f} | {torch_d:.3f} | {conv_d:.3f} | {conv_d / torch_d:.2f} "
            f"| {first_s:.2f} | {tune_s:.1f} | {tune_s / first_s:.1f}x "
            f"| [{doc['date'][:10]}](bench/results/{name}) |")
    return "\n".join(lines)


def tune_modes_table():
    lines = ["| type, layout, batch | heuristic | limited | exhaustive | exhaustive / heuristic | PyTorch "
             "| tuning s (heur / lim / exh / PyTorch) | run |", "|" + "---|" * 8]
    docs = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*-tune-modes.json"))):
        doc = load(path)
        if doc.get("format") == "convplan-tune-modes":
            docs.append((os.path.basename(path), doc))
    docs.sort(key=lambda nd: (nd[1]["settings"]["dtype"] != "bf16", nd[1]["settings"]["dtype"],
                              -int(nd[1]["settings"]["batch"])))
    for name, doc in docs:
        s, t = doc["settings"], doc["totals"]
        w = {m: t[m]["weighted_ms"] for m in ("heuristic", "limited", "exhaustive")}
        tuning = " / ".join(f"{t[m]['tuning_ms'] / 1e3:.1f}" for m in ("heuristic", "limited", "exhaustive"))
        lines.append(
            f"| {s['dtype']}, {s['layout']}, {s['batch']} | {w['heuristic']:.3f} | {w['limited']:.3f} "
            f"| {w['exhaustive']:.3f} | {w['exhaustive'] / w['heuristic']:.3f} | {t['torch']['weighted_ms']:.3f} "
            f"| {tuning} / {t['torch']['first_call_ms'] / 1e3:.1f} | [{doc['date'][:10]}](bench/results/{name}) |")
    return "\n".join(lines)


def torch_infer_table():
    """ResNet-50 inference with fused epilogues: the 53 convolutions' sums and the whole model."""
    paths = sorted(glob.glob(os.path.join(RESULTS, "*-torch-infer-resnet50-bf16.json")))
    docs = [(os.path.basename(p), load(p)) for p in paths]
    docs = [(n, d) for n, d in docs if d.get("format") == "convplan-torch-infer"]
    lines = ["| batch | convs+epilogues: convplan (fused / unfused layers) | PyTorch eager "
             "| torch.compile per layer | cuDNN fused ops | convs alone "
             "| model: optimize_for_inference | eager | torch.compile "
             "| CUDA graph of optimized | run |", "|" + "---|" * 11]
    if not docs:
        lines.append("| (no run committed yet) |" + " |" * 10)
        return "\n".join(lines)
    name, doc = max(docs, key=lambda nd: (nd[1].get("date", ""), nd[0]))

    def f(v):
        return "-" if v is None else f"{v:.2f}"

    for batch, b in sorted(doc["batches"].items(), key=lambda kv: int(kv[0])):
        t, m, k = b["layer_totals_ms"], b["model"], b["kinds"]
        lines.append(
            f"| {batch} | {f(t['convplan'])} ({k.get('fused', 0)} / {k.get('unfused', 0)}) "
            f"| {f(t['eager'])} | {f(t.get('compiled'))} | {f(t['cudnn_fused'])} "
            f"| {f(t['conv_only'])} "
            f"| {f(m.get('convplan_ms'))} | {f(m.get('eager_ms'))} | {f(m.get('compile_ms'))} "
            f"| {f(m.get('convplan_graph_ms'))} | [{doc['date'][:10]}](bench/results/{name}) |")
    return "\n".join(lines)


def replace_between(text, name, body):
    start, end = f"<!-- report.py:{name} -->", "<!-- report.py:end -->"
    i = text.find(start)
    if i < 0:
        sys.exit(f"report.py: README.md has no marker {start}")
    j = text.find(end, i)
    if j < 0:
        sys.exit(f"report.py: README.md has no {end} after {start}")
    return text[:i + len(start)] + "\n" + body + "\n" + text[j:]


def readme_text(runs):
    with open(README) as f:
        text = f.read()
    new = replace_between(text, "resnet50", resnet50_table(runs))
    new = replace_between(new, "tune-modes", tune_modes_table())
    if "<!-- report.py:torch-infer -->" in new:
        new = replace_between(new, "torch-infer", torch_infer_table())
    return text, new


def charts(runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    picked = {k: v for k, v in runs.items() if k[1] == "bf16" and k[2] == "nhwc"}
    batches = sorted({k[3] for k in picked})
    fig, axes = plt.subplots(1, len(DIRECTIONS), figsize=(15, 7.5), sharey=True)
    for ax, direction in zip(axes, DIRECTIONS):
        height = 0.8 / max(len(batches), 1)
        for b_i, batch in enumerate(batches):
            if (direction, "bf16", "nhwc", batch) not in picked:
                continue
            name, doc = picked[(direction, "bf16", "nhwc", batch)]
            rows = doc["rows"]
            ratio = [r["torch"]["median_ms"] / r["convplan"]["median_ms"] for r in rows]
            ys = [i + b_i * height for i in range(len(rows))]
            ax.barh(ys, ratio, height=height, label=f"batch {batch} ({doc['date'][:10]})")
            ax.set_yticks([i + height * (len(batches) - 1) / 2 for i in range(len(rows))])
            ax.set_yticklabels([r["name"] for r in rows], fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_title(f"{direction}, bf16, NHWC")
        ax.set_xlabel("PyTorch time / convplan time (> 1: convplan faster)")
        ax.invert_yaxis()
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("ResNet-50 layer by layer on the H200: PyTorch (cudnn.benchmark) over convplan (tuned)")
    fig.tight_layout()
    fig.savefig(os.path.join(REPO, LAYERS_CHART), dpi=90, metadata={"Software": None})
    plt.close(fig)

    keys = sorted(runs, key=sort_key)
    labels = [f"{d}\n{t} {l}\nb{b}" for d, t, l, b in keys]
    first = [runs[k][1]["totals"]["torch_first_call_ms"] / 1e3 for k in keys]
    tune = [runs[k][1]["totals"]["convplan_tuning_ms"] / 1e3 for k in keys]
    fig, ax = plt.subplots(figsize=(13, 5))
    xs = range(len(keys))
    ax.bar([x - 0.2 for x in xs], first, width=0.4, label="PyTorch: first call of each layer (its search)")
    ax.bar([x + 0.2 for x in xs], tune, width=0.4, label="convplan: tuning (limited mode, checked vs float64)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("seconds, all 23 layers")
    ax.set_title("ResNet-50: time to the first tuned call, forward and backward (each bar: the run of the table)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(REPO, TUNING_CHART), dpi=90, metadata={"Software": None})
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true",
                   help="compare the README's tables with the JSON; exit 1 when they differ")
    p.add_argument("--no-charts", action="store_true", help="write the tables only")
    args = p.parse_args(argv)
    runs = newest_runs()
    old, new = readme_text(runs)
    if args.check:
        missing = [c for c in (LAYERS_CHART, TUNING_CHART) if not os.path.exists(os.path.join(REPO, c))]
        if old != new or missing:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       "README.md", "README.md (from bench/results)"))
            for c in missing:
                print(f"report.py: {c} is missing")
            print("report.py: the README's results are stale: run python3 bench/report.py and commit")
            return 1
        print("report.py: the README's tables match bench/results/")
        return 0
    with open(README, "w") as f:
        f.write(new)
    print("report.py: wrote the tables of README.md")
    if not args.no_charts:
        os.makedirs(DOCS, exist_ok=True)
        charts(runs)
        print(f"report.py: wrote {LAYERS_CHART} and {TUNING_CHART}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
