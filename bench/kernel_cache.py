#!/usr/bin/env python3
"""Puts two `convplan bench --json` runs of one suite side by side: without and with cuDNN's
kernel cache (CONVPLAN_KERNEL_CACHE=0 and =1), layer by layer: tuning time, the chosen engine and
its time. Prints the table and the totals, and writes the same as JSON with --json.

    python3 bench/kernel_cache.py off.json on.json --json kernel-cache.json

scripts/gpu-bench's kcache step makes both runs (--db off, CUDA_CACHE_DISABLE=1) and calls this.
A benchmark report: it asserts nothing.
"""

import argparse
import json
import sys

from provenance import provenance


def load(path):
    with open(path) as f:
        return json.load(f)


def layers(off, on):
    if [r["descriptor"] for r in off["rows"]] != [r["descriptor"] for r in on["rows"]]:
        sys.exit("kernel_cache: the two runs are not of the same problems")
    out = []
    for a, b in zip(off["rows"], on["rows"]):
        out.append({"name": a["name"], "count": a["count"], "descriptor": a["descriptor"],
                    "off": {k: a[k] for k in ("engine", "median_ms", "tuning_ms")},
                    "on": {k: b[k] for k in ("engine", "median_ms", "tuning_ms")}})
    return out


def totals(run, rows, side):
    return {"tuning_ms": run["totals"]["tuning_ms"], "setup_ms": run["totals"]["setup_ms"],
            "weighted_ms": sum(r["count"] * (r[side]["median_ms"] or 0) for r in rows),
            "failed": run["totals"]["failed"]}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("off", help="convplan bench JSON, CONVPLAN_KERNEL_CACHE=0")
    p.add_argument("on", help="convplan bench JSON, CONVPLAN_KERNEL_CACHE=1")
    p.add_argument("--json", default=None, help="write the table here too")
    args = p.parse_args(argv)
    off, on = load(args.off), load(args.on)
    rows = layers(off, on)
    tot = {"off": totals(off, rows, "off"), "on": totals(on, rows, "on")}
    s = off["settings"]
    print(f"{s['suite']} {s['direction']} {s['data_type']} {s['layout']} b{s['batch'] or s['default_batch']}"
          f" tune={s['tune']} on {off['gpu']['name']}, cuDNN {off['cudnn_version']}: kernel cache off / on")
    head = (f"{'layer':<24} {'n':>3} {'tune ms off':>11} {'on':>8} {'ms off':>8} {'on':>8} {'on/off':>6}"
            f"  engine off -> on")
    print(head)
    print("-" * len(head))
    for r in rows:
        a, b = r["off"], r["on"]
        ratio = b["median_ms"] / a["median_ms"] if a["median_ms"] and b["median_ms"] else float("nan")
        change = a["engine"] if a["engine"] == b["engine"] else f"{a['engine']} -> {b['engine']}"
        print(f"{r['name'][:24]:<24} {r['count']:>3} {a['tuning_ms']:>11.0f} {b['tuning_ms']:>8.0f}"
              f" {a['median_ms'] or 0:>8.4f} {b['median_ms'] or 0:>8.4f} {ratio:>6.3f}  {change}")
    print("-" * len(head))
    a, b = tot["off"], tot["on"]
    print(f"{'tuning s':<28} {a['tuning_ms'] / 1e3:>11.2f} {b['tuning_ms'] / 1e3:>8.2f}"
          f"   ({b['tuning_ms'] / a['tuning_ms']:.2f}x)")
    print(f"{'time, weighted by count, ms':<28} {'':>11} {'':>8} {a['weighted_ms']:>8.3f}"
          f" {b['weighted_ms']:>8.3f} {b['weighted_ms'] / a['weighted_ms']:>6.3f}")
    print(f"failed layers: off {a['failed']}, on {b['failed']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "convplan-kernel-cache", "version": 1, "settings": s,
                       "gpu": off["gpu"], "cudnn": off["cudnn_version"], "date": off.get("date"),
                       "layers": rows, "totals": tot, "provenance": provenance()}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
