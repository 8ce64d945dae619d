#!/usr/bin/env python3
"""ResNet-50 inference with fused epilogues (issue 19): torchvision ResNet-50 (seeded weights,
batch-norm statistics away from the identity), bf16 channels_last, eval, cudnn.benchmark=True.

(a) The 53 convolutions with their epilogues (batch norm folded: bias, residual add, ReLU), each
    layer timed alone on the inputs it meets in the model, summed:
      convplan     one call of the post: problem (FusedConv), the tuner's choice; per layer which
                   kind won (fused cuDNN engine, or the convolution then convplan's epilogue kernel)
                   and the best time of each kind in the tuning record
      eager        PyTorch: conv, then bias, residual add and ReLU as separate (in-place) calls
      compiled     the same ops out of place through torch.compile (default mode), compiled once
                   per distinct layer: inductor's own epilogue kernel after cuDNN's convolution
                   (left out with --skip-compile)
      cudnn_fused  torch.cudnn_convolution_relu / torch.cudnn_convolution_add_relu (F.conv2d with
                   its bias for the 4 layers with a bias alone)
      conv_only    PyTorch's convolution without any epilogue, for reference
    Each layer's calls are captured in a CUDA graph and replayed, so the sums are GPU time.
(b) The whole model: PyTorch eager, torch.compile (default mode), optimize_for_inference, and at
    batches <= 32 the optimized model (and eager) replayed from a CUDA graph. Each iteration is
    timed from its start (the GPU idle) to the end of its GPU work: host-bound runs count their
    host time. Medians of --iters.

Prints tables; writes JSON to --json. A benchmark: it asserts nothing.

    python3 bench/torch_infer.py --batch 32 256 --json out.json [--tune limited] [--skip-compile]
"""
import argparse
import datetime
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from provenance import provenance  # noqa: E402


def build(batch, seed=0):
    import torch
    import torchvision
    torch.manual_seed(seed)
    model = torchvision.models.resnet50(weights=None).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    model = model.to("cuda", torch.bfloat16, memory_format=torch.channels_last)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, 224, 224, generator=gen).to("cuda", torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    return model, x


def capture_graph(fn, calls):
    """A CUDA graph of `calls` calls of fn(), after two warm-up calls on a side stream (a first
    call plans; planning is not capturable)."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_time_ms(fn, calls=5, replays=20):
    """GPU time of one fn() call: `calls` calls captured in a CUDA graph, replayed."""
    import torch
    graph = capture_graph(fn, calls)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / (replays * calls))
    del graph
    return min(times)


def iteration_ms(fn, iters, warmup=3):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def capture_inputs(gm, x):
    """Each FusedConv's inputs (x, residual) in one forward of gm."""
    import torch
    import convplan.torch as cpt
    seen, hooks = {}, []
    for name, m in gm.named_modules():
        if isinstance(m, cpt.FusedConv):
            hooks.append(m.register_forward_pre_hook(
                lambda mod, args, name=name: seen.__setitem__(name, args)))
    with torch.no_grad():
        gm(x)
    for h in hooks:
        h.remove()
    return seen


def conv_epilogue(xin, w, b, res, st, pad, dil, g, relu):
    """A layer's convolution and epilogue as separate PyTorch ops, out of place: what
    torch.compile is given per layer (it fuses the epilogue into a kernel of its own)."""
    import torch.nn.functional as F
    y = F.conv2d(xin, w, None, st, pad, dil, g) + b.view(1, -1, 1, 1)
    if res is not None:
        y = y + res
    return y.relu() if relu else y


_compiled_conv_epilogue = None


def compiled_conv_epilogue():
    """conv_epilogue through torch.compile (default mode), compiled once per distinct layer."""
    global _compiled_conv_epilogue
    if _compiled_conv_epilogue is None:
        import torch
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = 512  # one compilation per distinct layer
        if hasattr(torch._dynamo.config, "recompile_limit"):
            torch._dynamo.config.recompile_limit = 512
        _compiled_conv_epilogue = torch.compile(conv_epilogue, dynamic=False)
    return _compiled_conv_epilogue


def layer_variants(m, args, compile_layers):
    import torch
    import torch.nn.functional as F
    xin = args[0]
    res = args[1] if len(args) > 1 else None
    w, b = m.weight, m.bias
    st, pad, dil, g = m.stride, m.padding, m.dilation, m.groups
    relu = m.activation == "relu"

    def convplan_call():
        return m(xin, res)

    def eager():
        y = F.conv2d(xin, w, None, st, pad, dil, g)
        y.add_(b.view(1, -1, 1, 1))
        if res is not None:
            y.add_(res)
        return y.relu_() if relu else y

    def cudnn_fused():
        if res is not None:
            return torch.cudnn_convolution_add_relu(xin, w, res, 1.0, b, st, pad, dil, g)
        if relu:
            return torch.cudnn_convolution_relu(xin, w, b, st, pad, dil, g)
        return F.conv2d(xin, w, b, st, pad, dil, g)

    def conv_only():
        return F.conv2d(xin, w, None, st, pad, dil, g)

    def compiled():
        return compiled_conv_epilogue()(xin, w, b, res, st, pad, dil, g, relu)

    variants = {"convplan": convplan_call, "eager": eager, "cudnn_fused": cudnn_fused,
                "conv_only": conv_only}
    if compile_layers:
        variants["compiled"] = compiled
    return variants


LAYER_VARIANTS = ("convplan", "eager", "compiled", "cudnn_fused", "conv_only")


def bench_layers(gm, x, compile_layers):
    import torch
    inputs = capture_inputs(gm, x)
    modules = dict(gm.named_modules())
    layers = []
    with torch.no_grad():
        for name, args in inputs.items():
            m = modules[name]
            row = {"name": name, "chain": m.chain, "x_shape": list(args[0].shape),
                   "k": int(m.weight.shape[0]), "filter": list(m.weight.shape[2:]),
                   "stride": list(m.stride)}
            info = m.plan(tuple(args[0].shape), torch.bfloat16, True, x.get_device())
            row.update({k: info[k] for k in ("problem", "config", "kind", "time_ms",
                                             "best_fused_ms", "best_unfused_ms", "candidates")})
            row["ms"] = {}
            for variant, fn in layer_variants(m, args, compile_layers).items():
                try:
                    row["ms"][variant] = graph_time_ms(fn)
                except Exception as e:  # noqa: BLE001 - a variant that cannot run is reported
                    row["ms"][variant] = None
                    row.setdefault("errors", {})[variant] = f"{type(e).__name__}: {e}"
            layers.append(row)
            torch.cuda.empty_cache()
    totals = {}
    for variant in LAYER_VARIANTS:
        ms = [r["ms"].get(variant) for r in layers]
        totals[variant] = sum(ms) if all(v is not None for v in ms) else None
    kinds = {}
    for r in layers:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    return layers, totals, kinds


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def bench_model(model, gm, x, iters, compile_model, graphs):
    import torch
    out = {}
    with torch.no_grad():
        want = model(x)
        out["rel_l2_vs_eager"] = rel_l2(gm(x), want)
        out["eager_ms"] = iteration_ms(lambda: model(x), iters)
        out["convplan_ms"] = iteration_ms(lambda: gm(x), iters)
        if compile_model:
            compiled = torch.compile(model)
            t0 = datetime.datetime.now()
            compiled(x)
            out["compile_s"] = (datetime.datetime.now() - t0).total_seconds()
            out["compile_ms"] = iteration_ms(lambda: compiled(x), iters)
            del compiled
        if graphs:
            out["convplan_graph_ms"] = whole_graph_ms(lambda: gm(x), iters)
            out["eager_graph_ms"] = whole_graph_ms(lambda: model(x), iters)
    return out


def whole_graph_ms(fn, iters):
    """Median time of one replay of a CUDA graph of fn() (the whole model)."""
    graph = capture_graph(fn, 1)
    ms = iteration_ms(graph.replay, iters)
    del graph
    return ms


def print_tables(batch, layers, totals, kinds, model):
    print(f"\nResNet-50 bf16 channels_last b{batch}: the 53 convolutions with their epilogues "
          "(GPU ms, CUDA graphs)")
    print("| layer | chain | convplan | kind (config) | best fused / unfused in tuning | eager "
          "| torch.compile | cuDNN fused ops | conv only |")
    print("|---|---|---|---|---|---|---|---|---|")

    def f(v):
        return "-" if v is None or v < 0 else f"{v:.4f}"

    for r in layers:
        ms = r["ms"]
        print(f"| {r['name']} | {r['chain']} | {f(ms['convplan'])} | {r['kind']} "
              f"({r['config']}) | {f(r['best_fused_ms'])} / {f(r['best_unfused_ms'])} "
              f"| {f(ms['eager'])} | {f(ms.get('compiled'))} | {f(ms['cudnn_fused'])} "
              f"| {f(ms['conv_only'])} |")
    print(f"| **sum** | | {f(totals['convplan'])} | {kinds} | | {f(totals['eager'])} "
          f"| {f(totals['compiled'])} | {f(totals['cudnn_fused'])} | {f(totals['conv_only'])} |")
    print(f"\nResNet-50 whole model b{batch} (ms per forward): "
          + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                      for k, v in model.items()))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--tune", default=None, help="heuristic, limited, exhaustive "
                    "(default: CONVPLAN_TUNE, else limited)")
    ap.add_argument("--db", default="off", help="tuning database (default off: tune here)")
    ap.add_argument("--skip-compile", action="store_true",
                    help="no torch.compile, neither of the model nor of each layer")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch
    import convplan
    import convplan.torch as cpt
    torch.backends.cudnn.benchmark = True
    ctx = convplan.Context(db=args.db, tune=args.tune)
    convplan.set_default_context(ctx)
    doc = {"format": "convplan-torch-infer",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "settings": {"model": "resnet50", "dtype": "bf16", "layout": "nhwc",
                        "batches": args.batch, "iters": args.iters, "tune": ctx.stats()["tune"],
                        "db": args.db, "cudnn_benchmark": True},
           "versions": {"torch": torch.__version__, "torch_cudnn": torch.backends.cudnn.version(),
                        "convplan": convplan.__version__, "convplan_cudnn": convplan.cudnn_version()},
           "device": (convplan.devices() or [{}])[0].get("name"),
           "provenance": provenance(), "batches": {}}
    for batch in args.batch:
        model, x = build(batch)
        gm = cpt.optimize_for_inference(model)
        t0 = datetime.datetime.now()
        with torch.no_grad():
            gm(x)  # plans every fused problem (tuning, or the database)
        torch.cuda.synchronize()
        first_s = (datetime.datetime.now() - t0).total_seconds()
        layers, totals, kinds = bench_layers(gm, x, not args.skip_compile)
        whole = bench_model(model, gm, x, args.iters, not args.skip_compile, batch <= 32)
        whole["first_forward_s"] = first_s
        fusions = {}
        for _, chain in gm.convplan_fusions:
            fusions[chain] = fusions.get(chain, 0) + 1
        doc["batches"][str(batch)] = {"fusions": fusions, "layers": layers,
                                      "layer_totals_ms": totals, "kinds": kinds, "model": whole}
        print_tables(batch, layers, totals, kinds, whole)
        del model, gm, x
        torch.cuda.empty_cache()
    doc["cache"] = {k: v for k, v in ctx.stats().items() if isinstance(v, (int, float, str))}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
