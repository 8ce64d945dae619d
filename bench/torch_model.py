#!/usr/bin/env python3
"""torchvision ResNet-50 (random seeded weights), bf16 channels_last, convplan-converted against
plain PyTorch (cudnn.benchmark=True): inference forward and one training step (forward + backward
+ SGD) at each batch, the converted model's forward captured in a CUDA graph, and the first
iteration's time in a fresh process: PyTorch's, convplan's with a cold tuning database, with a cold
one after convplan.torch.prepare() (its time counted: the model's convolutions tuned 4 at once),
and with a warm one. Times are medians of --iters iterations after warm-up, each from its start to the end of
its GPU work (host-bound runs count their host time). Prints a table; writes JSON to --json.
A benchmark: it asserts nothing.

    python3 bench/torch_model.py --batch 32 256 --json out.json [--db DIR] [--skip-first]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def build(batch, dtype_name, convert, db):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    model = torchvision.models.resnet50(weights=None).to("cuda", dtype,
                                                         memory_format=torch.channels_last)
    if convert:
        import convplan
        import convplan.torch as cpt
        convplan.set_default_context(convplan.Context(db=db))
        cpt.convert(model)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, 224, 224, generator=gen).to("cuda", dtype).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), generator=gen).cuda()
    return model, x, labels


def make_step(model, x, labels, mode):
    import torch
    import torch.nn.functional as F
    if mode == "infer":
        model.eval()

        def step():
            with torch.no_grad():
                return model(x)
        return step
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), labels)
        loss.backward()
        opt.step()
        return loss
    return step


def timed(step, iters, warmup):
    import torch
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def graphed(model, x, iters, warmup):
    """The converted model's inference forward captured in one CUDA graph, replayed."""
    import torch
    model.eval()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        model(x)
    return timed(graph.replay, iters, warmup)


def first_iteration(args):
    """One fresh process: build, then time the very first iteration (tuning or search included)."""
    import torch
    is_convplan = args.first.startswith("convplan")
    model, x, labels = build(args.batch[0], args.dtype, is_convplan, args.db)
    step = make_step(model, x, labels, args.mode)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    if args.first == "convplan-prepared":
        import convplan.torch as cpt
        cpt.prepare(model, x, backward=args.mode == "train")
    step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    out = {"first_s": seconds}
    if is_convplan:
        import convplan
        s = convplan.default_context().stats()
        out.update({k: s[k] for k in ("tunes", "db_hits", "clones", "tune_ms")})
    print("FIRST " + json.dumps(out), flush=True)


def run_first(kind, mode, batch, dtype, db, log):
    cmd = [sys.executable, os.path.abspath(__file__), "--first", kind, "--mode", mode, "--batch",
           str(batch), "--dtype", dtype, "--db", db]
    p = subprocess.run(cmd, capture_output=True, text=True)
    log.write(f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}\n")
    for line in p.stdout.splitlines():
        if line.startswith("FIRST "):
            return json.loads(line[6:])
    return {"error": (p.stderr or p.stdout)[-2000:]}


def steady(args, results):
    import torch
    import convplan
    for batch in args.batch:
        row = {"batch": batch, "dtype": args.dtype}
        for kind in ("pytorch", "convplan"):
            model, x, labels = build(batch, args.dtype, kind == "convplan", args.db)
            for mode in ("infer", "train"):
                med, times = timed(make_step(model, x, labels, mode), args.iters, args.warmup)
                row[f"{kind}_{mode}_ms"] = med
                row[f"{kind}_{mode}_times_ms"] = times
            if kind == "convplan":
                med, times = graphed(model, x, args.iters, args.warmup)
                row["convplan_graph_infer_ms"] = med
                row["convplan_stats"] = convplan.default_context().stats()
            del model, x, labels
            torch.cuda.empty_cache()
        row["infer_ratio"] = row["convplan_infer_ms"] / row["pytorch_infer_ms"]
        row["train_ratio"] = row["convplan_train_ms"] / row["pytorch_train_ms"]
        row["graph_infer_ratio"] = row["convplan_graph_infer_ms"] / row["pytorch_infer_ms"]
        results["steady"].append(row)
        print(f"b{batch}: infer {row['pytorch_infer_ms']:.2f} -> {row['convplan_infer_ms']:.2f} ms "
              f"(graph {row['convplan_graph_infer_ms']:.2f}), train {row['pytorch_train_ms']:.2f} -> "
              f"{row['convplan_train_ms']:.2f} ms", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--db", default=None, help="tuning database of the steady-state runs "
                    "(default: a warm one made by the first-iteration runs, or a new one)")
    ap.add_argument("--first-batch", type=int, default=256)
    ap.add_argument("--skip-first", action="store_true", help="no first-iteration runs")
    ap.add_argument("--json", default=None)
    ap.add_argument("--log", default=None, help="the first-iteration processes' output")
    ap.add_argument("--first", choices=["pytorch", "convplan", "convplan-prepared"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["infer", "train"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first:
        return first_iteration(args)

    import torch
    import convplan
    tmp = tempfile.mkdtemp(prefix="convplan-bench-")
    results = {"format": "convplan-torch-model", "model": "resnet50", "layout": "channels_last",
               "torch": torch.__version__, "cudnn_torch": torch.backends.cudnn.version(),
               "cudnn_convplan": convplan.cudnn_version(), "gpu": torch.cuda.get_device_name(),
               "iters": args.iters, "first": {}, "steady": []}
    log = open(args.log or os.devnull, "w")
    if not args.skip_first:
        b = args.first_batch
        cold_infer, warm = os.path.join(tmp, "cold-infer.db"), os.path.join(tmp, "train.db")
        first = results["first"]
        first["batch"] = b
        first["pytorch_infer"] = run_first("pytorch", "infer", b, args.dtype, "off", log)
        first["pytorch_train"] = run_first("pytorch", "train", b, args.dtype, "off", log)
        first["convplan_cold_infer"] = run_first("convplan", "infer", b, args.dtype, cold_infer, log)
        first["convplan_cold_train"] = run_first("convplan", "train", b, args.dtype, warm, log)
        for mode in ("infer", "train"):
            first["convplan_prepared_" + mode] = run_first(
                "convplan-prepared", mode, b, args.dtype, os.path.join(tmp, f"prepared-{mode}.db"),
                log)
        first["convplan_warm_infer"] = run_first("convplan", "infer", b, args.dtype, warm, log)
        first["convplan_warm_train"] = run_first("convplan", "train", b, args.dtype, warm, log)
        print("first iteration (s): " + ", ".join(f"{k} {v.get('first_s', float('nan')):.2f}"
                                                 for k, v in first.items() if isinstance(v, dict)),
              flush=True)
        if args.db is None:
            args.db = warm
    if args.db is None:
        args.db = os.path.join(tmp, "steady.db")
    steady(args, results)

    print(f"\nResNet-50 {args.dtype} channels_last on {results['gpu']} (torch {torch.__version__}, "
          f"cudnn.benchmark=True; median of {args.iters}, ms)")
    print("| batch | PyTorch infer | convplan infer | ratio | convplan graph infer | graph / PyTorch "
          "| PyTorch train step | convplan train step | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results["steady"]:
        print(f"| {r['batch']} | {r['pytorch_infer_ms']:.2f} | {r['convplan_infer_ms']:.2f} | "
              f"{r['infer_ratio']:.2f} | {r['convplan_graph_infer_ms']:.2f} | "
              f"{r['graph_infer_ratio']:.2f} | {r['pytorch_train_ms']:.2f} | "
              f"{r['convplan_train_ms']:.2f} | {r['train_ratio']:.2f} |")
    f = results["first"]
    if f:
        def s(key):
            return f[key].get("first_s", float("nan"))
        print(f"\nFirst iteration at b{f['batch']} (s, fresh process): "
              f"| mode | PyTorch | convplan cold db | convplan cold db, prepare() first | "
              f"prepared / PyTorch | convplan warm db | warm / PyTorch |")
        print("|---|---|---|---|---|---|---|")
        for mode in ("infer", "train"):
            torch_s = s("pytorch_" + mode)
            print(f"| {mode} | {torch_s:.2f} | {s('convplan_cold_' + mode):.2f} | "
                  f"{s('convplan_prepared_' + mode):.2f} | "
                  f"{s('convplan_prepared_' + mode) / torch_s:.2f} | "
                  f"{s('convplan_warm_' + mode):.2f} | {s('convplan_warm_' + mode) / torch_s:.2f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
