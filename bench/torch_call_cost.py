#!/usr/bin/env python3
"""Host time per call of PyTorch's F.conv2d on the tiny problem of bench/host_overhead.cc
(n1 c8 k8 8x8, 3x3, pad 1, fp32, NCHW; cudnn.benchmark=True, TF32 off), measured the way
host_overhead measures it: batches of 1000 calls, the stream synchronized after each batch, inside
the timed region. Prints one line and writes JSON to --json. A benchmark: it asserts nothing.
"""
import argparse
import json
import statistics
import time

from provenance import provenance


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--batches", type=int, default=20)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(1, 8, 8, 8, device="cuda")
    w = torch.randn(8, 8, 3, 3, device="cuda")
    with torch.no_grad():
        for _ in range(2000):
            F.conv2d(x, w, padding=1)
        torch.cuda.synchronize()
        per_call = []
        for _ in range(args.batches):
            t0 = time.perf_counter()
            for _ in range(1000):
                F.conv2d(x, w, padding=1)
            torch.cuda.synchronize()
            per_call.append((time.perf_counter() - t0) / 1000 * 1e6)
    med = statistics.median(per_call)
    print(f"torch F.conv2d n1c8k8 8x8 3x3 fp32: {med:.2f} us per call (median of {args.batches} "
          f"batches of 1000; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"format": "torch-call-cost", "us_per_call": med, "batches_us": per_call,
                       "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                       "gpu": torch.cuda.get_device_name(), "provenance": provenance()}, f, indent=1)


if __name__ == "__main__":
    main()
