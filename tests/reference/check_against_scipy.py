#!/usr/bin/env python3
"""Checks convplan's float64 reference convolution against an implementation written here.

Draws random problems of every kind (1/2/3-D; groups, depthwise included; stride, dilation,
asymmetric padding; the three directions; alpha/beta; channels-first, channels-last and explicit
strided layouts; forward problems with post-op chains of every kind, in random orders), runs the reference on random data through the reference_dump tool, and
recomputes each result with NumPy/SciPy:
  forward          scipy.signal.correlate of the padded input with the dilated filter, 'valid',
                   then every stride-th element;
  backward-data    scipy.signal.convolve ('full') of the stride-upsampled dy with the dilated
                   filter, placed in the padded input and cropped;
  backward-filter  scipy.signal.correlate ('valid') of the padded input with the upsampled dy,
                   summed over the batch, sampled at every dilation-th tap;
  post-op chain    NumPy/SciPy element-wise (scipy.special.erf, expit) on the forward result.
Each result must match with relative L2 error < 1e-12; the tensors a direction only reads, and
the strided gaps of the one it writes, must be left bit-for-bit unchanged. The shapes and strides
the tool reports are checked against the ones computed here.

Usage: check_against_scipy.py PATH/TO/reference_dump [--count N] [--seed S]
Exit status: 0 pass, 1 fail, 77 skip (NumPy or SciPy missing).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import scipy.signal
    import scipy.special
except ImportError as e:  # CI installs them; elsewhere the check is skipped, not failed
    print(f"SKIP: numpy/scipy not available ({e})")
    sys.exit(77)

TOLERANCE = 1e-12
LETTERS = {1: "w", 2: "hw", 3: "dhw"}


def output_size(i, k, s, pb, pa, dil):
    return (i + pb + pa - dil * (k - 1) - 1) // s + 1


ACTIVATIONS = ["relu", "relu6", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "elu"]


def random_chain(rng, counter):
    """A post-op chain: the activation ACTIVATIONS[counter % 8] (so each occurs), maybe a second
    one, a bias and an add with a scale, in a random order."""
    chain = [(ACTIVATIONS[counter % len(ACTIVATIONS)], 1.0)]
    if rng.random() < 0.3:
        chain.append((rng.choice(ACTIVATIONS), 1.0))
    if rng.random() < 0.7:
        chain.append(("bias", 1.0))
    if rng.random() < 0.6:
        chain.append(("add", rng.choice([1.0, 0.5, -2.0, rng.uniform(-2, 2)])))
    rng.shuffle(chain)
    return chain


def chain_text(chain):
    return "+".join(op if op != "add" or scale == 1.0 else f"add*{scale!r}" for op, scale in chain)


def parse_chain(text):
    """The chain of convplan's canonical text ("bias+add*-2+relu") as (op, scale) pairs."""
    chain = []
    for token in text.split("+"):
        op, _, scale = token.partition("*")
        chain.append((op, float(scale) if scale else 1.0))
    return chain


def apply_chain(chain, v, bias, residual):
    """The chain on v (n, k, spatial...) with bias (k,) and residual (v's shape)."""
    for op, scale in chain:
        if op == "bias":
            v = v + bias.reshape([1, -1] + [1] * (v.ndim - 2))
        elif op == "add":
            v = v + scale * residual
        elif op == "relu":
            v = np.maximum(v, 0.0)
        elif op == "relu6":
            v = np.clip(v, 0.0, 6.0)
        elif op == "gelu":
            v = 0.5 * v * (1.0 + scipy.special.erf(v / np.sqrt(2.0)))
        elif op == "gelu_tanh":
            v = 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))
        elif op == "silu":
            v = v * scipy.special.expit(v)
        elif op == "sigmoid":
            v = scipy.special.expit(v)
        elif op == "tanh":
            v = np.tanh(v)
        elif op == "elu":
            v = np.where(v > 0, v, np.expm1(np.minimum(v, 0.0)))
        else:
            raise ValueError(op)
    return v


def random_problem(rng, index):
    """A random valid problem; its kind cycles so that every combination occurs."""
    dims = 1 + index % 3
    direction = ["fwd", "bwd_data", "bwd_filter"][(index // 3) % 3]
    layout = ["nchw", "nhwc", "explicit"][(index // 9) % 3]
    grouping = rng.choice(["plain", "grouped", "depthwise"])
    if grouping == "plain":
        g, c, k = 1, rng.randint(1, 5), rng.randint(1, 5)
    elif grouping == "grouped":
        g = rng.randint(2, 3)
        c, k = g * rng.randint(1, 3), g * rng.randint(1, 3)
    else:
        g = rng.randint(2, 5)
        c, k = g, g * rng.choice([1, 1, 2])
    n = rng.randint(1, 3)
    max_input = {1: 24, 2: 11, 3: 6}[dims]
    max_filter = {1: 5, 2: 4, 3: 3}[dims]
    sp = []
    for _ in range(dims):
        f = rng.randint(1, max_filter)
        dil = rng.choice([1, 1, 2, 3])
        s = rng.choice([1, 1, 2, 3])
        pb = rng.randint(0, 2)
        pa = pb if rng.random() < 0.4 else rng.randint(0, 3)
        ext = dil * (f - 1) + 1
        i = max(1, ext - pb - pa) + rng.randint(0, max_input)
        sp.append(dict(i=i, f=f, s=s, pb=pb, pa=pa, dil=dil, o=output_size(i, f, s, pb, pa, dil)))
    alpha = rng.choice([1.0, -0.5, 2.0, rng.uniform(-3, 3)])
    beta = rng.choice([0.0, 0.0, 1.0, rng.uniform(-2, 2)])
    chain = []
    if direction == "fwd" and rng.random() < 0.6:
        chain = random_chain(rng, index // 3)
        beta = 0.0  # a chain takes no beta
    return dict(dims=dims, direction=direction, layout=layout, g=g, n=n, c=c, k=k, sp=sp,
                alpha=alpha, beta=beta, chain=chain)


def logical_dims(prb):
    sp = prb["sp"]
    return {
        "x": [prb["n"], prb["c"]] + [d["i"] for d in sp],
        "w": [prb["k"], prb["c"] // prb["g"]] + [d["f"] for d in sp],
        "y": [prb["n"], prb["k"]] + [d["o"] for d in sp],
    }


def packed_strides(dims, channels_last):
    """Channels-first: row-major in (N, C, spatial...); channels-last: (N, spatial..., C)."""
    order = [0] + list(range(2, len(dims))) + [1] if channels_last else list(range(len(dims)))
    strides = [0] * len(dims)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= dims[d]
    return strides


def random_strides(rng, dims):
    order = list(range(len(dims)))
    rng.shuffle(order)
    strides = [0] * len(dims)
    acc = 1
    for d in order:  # innermost first, with a random gap after each dimension
        strides[d] = acc
        acc = acc * dims[d] + rng.randint(0, 3)
    return strides


def problem_text(rng, prb):
    """The problem in convplan's text form (benchdnn letters), output letters sometimes given."""
    flags = [f"dir:{prb['direction']}", "dt:f64", f"alpha:{prb['alpha']!r}", f"beta:{prb['beta']!r}"]
    if prb["chain"]:
        flags.append("post:" + chain_text(prb["chain"]))
    if prb["layout"] == "explicit":
        for t, key in (("x", "xs"), ("w", "ws"), ("y", "ys")):
            flags.append(key + ":" + "x".join(str(s) for s in prb["strides"][t]))
    else:
        flags.append(f"layout:{prb['layout']}")
    letters = LETTERS[prb["dims"]]
    sp = prb["sp"]

    def spatial(prefix, key, offset=0):
        return "".join(f"{prefix}{l}{d[key] + offset}" for l, d in zip(letters, sp))

    desc = f"g{prb['g']}mb{prb['n']}ic{prb['c']}" + spatial("i", "i") + f"oc{prb['k']}"
    if rng.random() < 0.5:
        desc += spatial("o", "o")
    desc += spatial("k", "f") + spatial("s", "s") + spatial("p", "pb") + spatial("r", "pa")
    desc += spatial("d", "dil", -1)  # benchdnn's dilation: 0 means none
    return ",".join(flags) + "/" + desc


def view(buf, dims, strides):
    return np.lib.stride_tricks.as_strided(buf, shape=dims, strides=[8 * s for s in strides],
                                           writeable=False)


def dilate(w, dil):
    """Inserts dil-1 zeros between the taps of the trailing spatial axes of w (..., f...)."""
    nsp = len(dil)
    shape = list(w.shape[:-nsp]) + [d * (f - 1) + 1 for f, d in zip(w.shape[-nsp:], dil)]
    out = np.zeros(shape)
    out[(Ellipsis,) + tuple(slice(None, None, d) for d in dil)] = w
    return out


def upsample(y, stride):
    """Inserts stride-1 zeros between the elements of the trailing spatial axes of y."""
    return dilate(y, stride)


def conv_forward(prb, x, w):
    sp, g = prb["sp"], prb["g"]
    cg, kg = prb["c"] // g, prb["k"] // g
    xp = np.pad(x, [(0, 0), (0, 0)] + [(d["pb"], d["pa"]) for d in sp])
    wd = dilate(w, [d["dil"] for d in sp])
    sub = tuple(slice(0, d["o"] * d["s"], d["s"]) for d in sp)
    y = np.zeros([prb["n"], prb["k"]] + [d["o"] for d in sp])
    for n in range(prb["n"]):
        for kc in range(prb["k"]):
            grp = kc // kg
            # Correlating all cg channels at once sums over them ('valid' leaves one channel).
            full = scipy.signal.correlate(xp[n, grp * cg:(grp + 1) * cg], wd[kc], mode="valid",
                                          method="direct")[0]
            y[n, kc] = full[sub]
    return y


def conv_backward_data(prb, dy, w):
    sp, g = prb["sp"], prb["g"]
    cg, kg = prb["c"] // g, prb["k"] // g
    padded = [d["i"] + d["pb"] + d["pa"] for d in sp]
    wd = dilate(w, [d["dil"] for d in sp])
    up = upsample(dy, [d["s"] for d in sp])
    dx = np.zeros([prb["n"], prb["c"]] + [d["i"] for d in sp])
    crop = tuple(slice(d["pb"], d["pb"] + d["i"]) for d in sp)
    for n in range(prb["n"]):
        for ch in range(prb["c"]):
            grp, cc = divmod(ch, cg)
            acc = np.zeros(padded)
            for kk in range(kg):
                kc = grp * kg + kk
                full = scipy.signal.convolve(up[n, kc], wd[kc, cc], mode="full", method="direct")
                acc[tuple(slice(0, e) for e in full.shape)] += full
            dx[n, ch] = acc[crop]
    return dx


def conv_backward_filter(prb, x, dy):
    sp, g = prb["sp"], prb["g"]
    cg, kg = prb["c"] // g, prb["k"] // g
    xp = np.pad(x, [(0, 0), (0, 0)] + [(d["pb"], d["pa"]) for d in sp])
    up = upsample(dy, [d["s"] for d in sp])
    taps = tuple(slice(0, d["dil"] * (d["f"] - 1) + 1, d["dil"]) for d in sp)
    dw = np.zeros([prb["k"], cg] + [d["f"] for d in sp])
    for kc in range(prb["k"]):
        grp = kc // kg
        for cc in range(cg):
            # Correlating the whole batch at once sums over it ('valid' leaves one image).
            full = scipy.signal.correlate(xp[:, grp * cg + cc], up[:, kc], mode="valid",
                                          method="direct")[0]
            dw[kc, cc] = full[taps]
    return dw


def relative_error(a, b):
    den = np.linalg.norm(b.ravel())
    num = np.linalg.norm((a - b).ravel())
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def covered_mask(dims, strides, span):
    """True at the buffer positions that hold an element of the tensor."""
    mask = np.zeros(span, dtype=bool)
    offsets = np.zeros(dims, dtype=np.int64)
    for d, (size, stride) in enumerate(zip(dims, strides)):
        shape = [1] * len(dims)
        shape[d] = size
        offsets = offsets + (np.arange(size) * stride).reshape(shape)
    mask[offsets.ravel()] = True
    return mask


def check(prb, text, job_dir):
    """Returns a list of failure strings for one job (empty when it passed)."""
    failures = []
    meta_path = os.path.join(job_dir, "meta.json")
    if not os.path.exists(meta_path):
        return [f"{text}: reference_dump wrote nothing (see its stderr)"]
    with open(meta_path) as f:
        meta = json.load(f)
    dims = logical_dims(prb)
    buffers = {}
    for t in "xwy":
        if meta[t]["dims"] != dims[t]:
            failures.append(f"{text}: {t} dims {meta[t]['dims']} != expected {dims[t]}")
        want = prb["strides"][t]
        if meta[t]["strides"] != want:
            failures.append(f"{text}: {t} strides {meta[t]['strides']} != expected {want}")
        before = np.fromfile(os.path.join(job_dir, f"{t}_before.f64"), dtype="<f8")
        after = np.fromfile(os.path.join(job_dir, f"{t}_after.f64"), dtype="<f8")
        if before.size != meta[t]["span"] or after.size != meta[t]["span"]:
            failures.append(f"{text}: {t} buffer sizes {before.size}/{after.size} != span {meta[t]['span']}")
            return failures
        buffers[t] = (before, after)
    if failures:
        return failures

    out = meta["output_tensor"]
    expected_out = {"fwd": "y", "bwd_data": "x", "bwd_filter": "w"}[prb["direction"]]
    if out != expected_out:
        return [f"{text}: output tensor {out} != {expected_out}"]
    logical = {t: view(buffers[t][0], dims[t], prb["strides"][t]) for t in "xwy"}
    if prb["direction"] == "fwd":
        conv = conv_forward(prb, logical["x"], logical["w"])
    elif prb["direction"] == "bwd_data":
        conv = conv_backward_data(prb, logical["y"], logical["w"])
    else:
        conv = conv_backward_filter(prb, logical["x"], logical["y"])
    expected = prb["alpha"] * conv + prb["beta"] * logical[out]
    if prb["chain"]:
        ops = {op for op, _ in prb["chain"]}
        if parse_chain(meta.get("post", "")) != prb["chain"]:
            failures.append(f"{text}: post {meta.get('post')!r} != {chain_text(prb['chain'])!r}")
        k = prb["k"]
        bias = np.zeros(k)
        residual = np.zeros(expected.shape)
        if "bias" in ops:
            if meta["bias"]["dims"] != [1, k] + [1] * prb["dims"] or meta["bias"]["span"] != k:
                failures.append(f"{text}: bias shape {meta['bias']}")
            bias = np.fromfile(os.path.join(job_dir, "bias.f64"), dtype="<f8")[:k]
        if "add" in ops:
            if meta["residual"]["strides"] != prb["strides"]["y"]:
                failures.append(f"{text}: residual strides {meta['residual']['strides']}")
            raw = np.fromfile(os.path.join(job_dir, "residual.f64"), dtype="<f8")
            residual = view(raw, dims["y"], prb["strides"]["y"])
        expected = apply_chain(prb["chain"], expected, bias, residual)
    got = view(buffers[out][1], dims[out], prb["strides"][out])
    err = relative_error(got, expected)
    if not err < TOLERANCE:
        failures.append(f"{text}: relative error {err:.3e} >= {TOLERANCE}")

    for t in "xwy":
        before, after = buffers[t]
        if t != out:
            if not np.array_equal(before.view(np.uint64), after.view(np.uint64)):
                failures.append(f"{text}: {t} is only read but changed")
        else:
            gaps = ~covered_mask(dims[t], prb["strides"][t], meta[t]["span"])
            if not np.array_equal(before.view(np.uint64)[gaps], after.view(np.uint64)[gaps]):
                failures.append(f"{text}: a strided gap of {t} was written")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference_dump")
    parser.add_argument("--count", type=int, default=270)
    parser.add_argument("--seed", type=int, default=20240607)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    problems = []
    for index in range(args.count):
        prb = random_problem(rng, index)
        dims = logical_dims(prb)
        if prb["layout"] == "explicit":
            prb["strides"] = {t: random_strides(rng, dims[t]) for t in "xwy"}
        else:
            prb["strides"] = {t: packed_strides(dims[t], prb["layout"] == "nhwc") for t in "xwy"}
        problems.append((prb, problem_text(rng, prb), rng.getrandbits(63)))

    with tempfile.TemporaryDirectory(prefix="convplan_scipy_") as tmp:
        jobs = "".join(f"{seed} {text}\n" for _, text, seed in problems)
        run = subprocess.run([args.reference_dump, tmp], input=jobs, text=True,
                             capture_output=True)
        if run.returncode == 2:
            print(f"FAIL: reference_dump refused its input:\n{run.stderr}")
            return 1
        if run.stderr:
            print(run.stderr, end="")
        failures = []
        kinds = set()
        chains = set()
        for index, (prb, text, _) in enumerate(problems):
            job_failures = check(prb, text, os.path.join(tmp, str(index)))
            failures += job_failures
            kinds.add((prb["dims"], prb["direction"], prb["layout"]))
            chains.update(op for op, _ in prb["chain"])
    for f in failures[:30]:
        print("FAIL:", f)
    if failures:
        print(f"{len(failures)} failures in {len(problems)} problems")
        return 1
    print(f"PASS: {len(problems)} problems ({len(kinds)} kinds of dims x direction x layout) "
          f"match NumPy/SciPy with relative error < {TOLERANCE}; post-ops seen: "
          f"{', '.join(sorted(chains))}")
    if len(chains) < len(ACTIVATIONS) + 2:
        print("FAIL: not every post-op was drawn; raise --count")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
