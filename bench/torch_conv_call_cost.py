#!/usr/bin/env python3
"""Host time per call of convplan.torch beside PyTorch's F.conv2d, on the tiny problem of
bench/torch_call_cost.py (n1 c8 k8 8x8, 3x3, pad 1, fp32, NCHW, TF32 off, no_grad): batches of
1000 calls, the stream synchronized after each batch inside the timed region. Rows: F.conv2d,
a converted nn.Conv2d, convplan.torch.conv, the custom op torch.ops.convplan.conv (what torch.compile
and tracing call), and F.conv2d / the converted module with a bias. Prints a table and writes
JSON to --json. Then the training path (grad enabled): one call's forward and backward (grad x and
grad w) for F.conv2d, convplan.torch.conv (eager: a plain autograd.Function) and the custom op.
Without the convplan package (or with --torch-only) only PyTorch's rows run: scripts/gpu-bench's
overhead step sets them beside host_overhead's bare cudnnBackendExecute. A benchmark: it asserts
nothing.
"""
import argparse
import json
import statistics
import time

from provenance import provenance


def per_call_us(fn, batches, calls=1000):
    import torch
    for _ in range(2 * calls):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--torch-only", action="store_true", help="PyTorch's rows only")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    try:
        if args.torch_only:
            raise ImportError("--torch-only")
        import convplan
        import convplan.torch as cpt
    except ImportError as e:
        print(f"torch_conv_call_cost: PyTorch's rows only ({e})")
        convplan = None
    if convplan is not None:
        convplan.set_default_context(convplan.Context(db="off"))
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False).cuda()
    conv_b = torch.nn.Conv2d(8, 8, 3, padding=1).cuda()
    rows = [("torch F.conv2d", lambda: F.conv2d(x, w, padding=1)),
            ("torch nn.Conv2d", lambda: conv(x)),
            ("torch nn.Conv2d with bias", lambda: conv_b(x))]
    # The training path: forward and backward (grad x and grad w) of one call, grad enabled.
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    gy = torch.randn(1, 8, 8, 8, device="cuda")

    def train_call(conv_fn):
        def call():
            torch.autograd.grad(conv_fn(xg, wg), (xg, wg), gy)
        return call

    train_rows = [("torch F.conv2d forward + backward",
                   train_call(lambda a, b: F.conv2d(a, b, padding=1)))]
    if convplan is not None:
        converted = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)).cuda()
        converted_b = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1)).cuda()
        cpt.convert(converted)
        cpt.convert(converted_b)
        op = torch.ops.convplan.conv.default
        rows += [
            ("convplan converted nn.Conv2d", lambda: converted(x)),
            ("convplan.torch.conv", lambda: cpt.conv(x, w, padding=1)),
            ("torch.ops.convplan.conv (custom op)",
             lambda: op(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, 0)),
            ("convplan converted nn.Conv2d with bias", lambda: converted_b(x)),
        ]
        train_rows += [
            ("convplan.torch.conv forward + backward",
             train_call(lambda a, b: cpt.conv(a, b, padding=1))),
            ("custom op forward + backward (torch.compile's path)",
             train_call(lambda a, b: op(a, b, [1, 1], [1, 1], [1, 1], [1, 1], 1, 0))),
        ]
    results = []
    with torch.no_grad():
        for name, fn in rows:
            med, batches = per_call_us(fn, args.batches)
            results.append({"name": name, "us_per_call": med, "batches_us": batches})
    for name, fn in train_rows:
        med, batches = per_call_us(fn, args.batches, calls=200)  # ~0.1 ms a call
        results.append({"name": name, "us_per_call": med, "batches_us": batches})
    base = results[0]["us_per_call"]
    train_base = results[len(rows)]["us_per_call"]
    print(f"Host time per call, n1c8k8 8x8 3x3 fp32 NCHW, no_grad but for the backward rows "
          f"(median of {args.batches} batches of 1000 calls, of 200 with backward; "
          f"torch {torch.__version__}, {torch.cuda.get_device_name()})")
    print("| call | us per call | / F.conv2d |")
    print("|---|---|---|")
    for i, r in enumerate(results):
        ref = base if i < len(rows) else train_base  # backward rows: / F.conv2d's backward row
        print(f"| {r['name']} | {r['us_per_call']:.2f} | {r['us_per_call'] / ref:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "convplan-torch-call-cost", "rows": results,
                       "torch": torch.__version__, "cudnn_torch": torch.backends.cudnn.version(),
                       "cudnn_convplan": convplan.cudnn_version() if convplan else None,
                       "gpu": torch.cuda.get_device_name(), "provenance": provenance(),
                       "stats": convplan.default_context().stats() if convplan else None},
                      f, indent=1)


if __name__ == "__main__":
    main()
