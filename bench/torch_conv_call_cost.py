#!/usr/bin/env python3
"""Host time per call of convplan.torch beside PyTorch's F.conv2d, on the tiny problem of
bench/torch_call_cost.py (n1 c8 k8 8x8, 3x3, pad 1, fp32, NCHW, TF32 off, no_grad): batches of
1000 calls, the stream synchronized after each batch inside the timed region. Rows: F.conv2d,
a converted nn.Conv2d, convplan.torch.conv, the custom op torch.ops.convplan.conv (what autograd and
torch.compile call), and F.conv2d / the converted module with a bias. Prints a table and writes
JSON to --json. A benchmark: it asserts nothing.
"""
import argparse
import json
import statistics
import time


def per_call_us(fn, batches):
    import torch
    for _ in range(2000):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(1000):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / 1000 * 1e6)
    return statistics.median(out), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import convplan
    import convplan.torch as cpt
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    convplan.set_default_context(convplan.Context(db="off"))
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False).cuda()
    conv_b = torch.nn.Conv2d(8, 8, 3, padding=1).cuda()
    converted = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)).cuda()
    converted_b = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1)).cuda()
    cpt.convert(converted)
    cpt.convert(converted_b)
    op = torch.ops.convplan.conv.default
    rows = [
        ("torch F.conv2d", lambda: F.conv2d(x, w, padding=1)),
        ("torch nn.Conv2d", lambda: conv(x)),
        ("convplan converted nn.Conv2d", lambda: converted(x)),
        ("convplan.torch.conv", lambda: cpt.conv(x, w, padding=1)),
        ("torch.ops.convplan.conv (custom op)", lambda: op(x, w, [1, 1], [1, 1], [1, 1], [1, 1], 1, 0)),
        ("torch nn.Conv2d with bias", lambda: conv_b(x)),
        ("convplan converted nn.Conv2d with bias", lambda: converted_b(x)),
    ]
    results = []
    with torch.no_grad():
        for name, fn in rows:
            med, batches = per_call_us(fn, args.batches)
            results.append({"name": name, "us_per_call": med, "batches_us": batches})
    base = results[0]["us_per_call"]
    print(f"Host time per call, n1c8k8 8x8 3x3 fp32 NCHW, no_grad (median of {args.batches} "
          f"batches of 1000; torch {torch.__version__}, {torch.cuda.get_device_name()})")
    print("| call | us per call | / F.conv2d |")
    print("|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['us_per_call']:.2f} | {r['us_per_call'] / base:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "convplan-torch-call-cost", "rows": results,
                       "torch": torch.__version__, "cudnn_torch": torch.backends.cudnn.version(),
                       "cudnn_convplan": convplan.cudnn_version(),
                       "gpu": torch.cuda.get_device_name(),
                       "stats": convplan.default_context().stats()}, f, indent=1)


if __name__ == "__main__":
    main()
