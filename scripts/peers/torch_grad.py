"""The GPU's gradients held against PyTorch: `flashbench grad --backend cuda` for every implementation
of the cuda device and every dtype, against torch's `math` SDPA backend in float64 on the GPU.

For each shape, mask and dtype it draws Q [B,H,N,d], K and V [B,G,N_k,d] and dO [B,H,N,d]
independently (standard normal, Q, K, V times --input-scale, then rounded to the dtype, so that
flashbench and the reference start from the same numbers), writes them as float32 .npy, runs
`flashbench grad --backend cuda --dtype D --impl I` on them (one layer of the operator the benchmark
measures) and compares its O, dQ, dK and dV, each apart, with the float64 reference. G < H is
grouped-query attention (each K/V head serves H/G query heads: enable_gqa); the causal mask is
bottom-right aligned as flashbench's (row i sees keys j <= i + N_k - N; a row that sees none gives 0).
The bar is the error of the same layer computed naively by torch in the storage dtype (S, P and every
product stored in it, as `sum(O * dO)` differentiated by autograd): a kernel is within it when its
relative error in each tensor is at most 3x the naive one (FlashAttention's own test bar), or 1e-5 in
fp32 where the naive error is at rounding level.

Errors per tensor: max_abs = max |x - ref|, rel = max_abs / max |ref| (flashbench's check metric).
Writes OUT/torch_grad.json and OUT/torch_grad.md; exits 1 when a row that ran is beyond its bar or
failed, 0 otherwise (a `skipped` row, e.g. cudnn in fp32, is not a failure).

Shapes are BxHxNxd (G = H, N_k = N) or BxHxGxNxN_kxd.

Usage: python3 scripts/peers/torch_grad.py OUT [--binary build-gpu/flashbench]
       [--shapes 1x2x1x64,1x2x97x64,2x2x256x128,1x4x1024x128,1x4x2x128x192x64] [--mask both]
       [--dtype bf16,fp16,fp32] [--input-scale 1]
       [--impl standard,v1,...] (default: every implementation `flashbench info` lists for cuda)
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402

# torch is imported where it is used, so that what needs no GPU (shapes, the implementation list, the
# markdown) is testable on a machine without it (tests/scripts/torch_grad_test.py).
DTYPES = ("bf16", "fp16", "fp32")
FP32_FLOOR = 1e-5  # the fp32 bar, as flashbench's own CUDA tests hold fp32 against float64
TENSORS = ("o", "dq", "dk", "dv")  # the files flashbench grad writes, and the keys of each row's errors
DEFAULT_SHAPES = "1x2x1x64,1x2x97x64,2x2x256x128,1x4x1024x128,1x4x2x128x192x64"


def parse_shapes(text):
    """(B, H, G, N, N_k, d) of each comma-separated BxHxNxd or BxHxGxNxN_kxd; G must divide H."""
    shapes = []
    for item in text.split(","):
        parts = [int(x) for x in item.lower().split("x")]
        if len(parts) == 4:
            b, h, n, d = parts
            parts = [b, h, h, n, n, d]
        if len(parts) != 6 or min(parts) < 1:
            raise argparse.ArgumentTypeError(f"shape '{item}' is not BxHxNxd or BxHxGxNxN_kxd")
        if parts[1] % parts[2]:
            raise argparse.ArgumentTypeError(f"shape '{item}': G = {parts[2]} does not divide H = {parts[1]}")
        shapes.append(tuple(parts))
    return shapes


def shape_text(shape):
    """BxHxNxd where G = H and N_k = N, else BxHxGxNxN_kxd."""
    b, h, g, n, nk, d = shape
    return "x".join(map(str, (b, h, n, d) if (g, nk) == (h, n) else shape))


def cuda_implementations(binary):
    """(name, variant) of every implementation of the cuda device in this build."""
    info = json.loads(subprocess.run([binary, "info", "--format", "json"], check=True, capture_output=True,
                                     text=True).stdout)
    for device in info["devices"]:
        if device["name"] == "cuda":
            return [(i["name"], i["variant"]) for i in device["implementations"]]
    raise SystemExit(f"{binary} has no cuda device")


def torch_dtype(name):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def causal_keywords(n, n_k, causal):
    """SDPA's arguments for the bottom-right causal mask: is_causal where N_k = N, else torch's
    lower-right causal bias."""
    if not causal:
        return {}
    if n == n_k:
        return {"is_causal": True}
    from torch.nn.attention.bias import causal_lower_right
    return {"attn_mask": causal_lower_right(n, n_k)}


def reference(q, k, v, do, causal):
    """O, dQ, dK, dV of one layer in float64 through torch's math backend."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (t.detach().clone().to(torch.float64).requires_grad_(True) for t in (q, k, v))  # leaves of their own
    kwargs = causal_keywords(q.shape[2], k.shape[2], causal)
    if k.shape[1] != q.shape[1]:
        kwargs["enable_gqa"] = True
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, **kwargs)
    o.backward(do.to(torch.float64))
    return {"o": o.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def naive(q, k, v, do, causal, dtype):
    """The same layer written out in `dtype`: every stored tensor rounded to it, as a plain framework
    program would compute it (K and V repeated to H heads where G < H; autograd sums them back)."""
    import torch
    q, k, v = (t.detach().clone().to(dtype).requires_grad_(True) for t in (q, k, v))  # leaves of their own
    h, g, n, n_k, d = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    kk, vv = (k, v) if g == h else (k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1))
    s = (q @ kk.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    if causal:
        hidden = torch.ones(n, n_k, dtype=torch.bool, device=q.device).triu(1 + n_k - n)  # j > i + N_k - N
        s = s.masked_fill(hidden, float("-inf"))
        p = torch.softmax(s, dim=-1)
        sees = ~hidden.all(dim=-1, keepdim=True)  # a row that sees no key gives 0, as flashbench's
        p = torch.where(sees, p, torch.zeros((), dtype=dtype, device=q.device))
    else:
        p = torch.softmax(s, dim=-1)
    o = p @ vv
    o.backward(do.to(dtype))
    return {"o": o.detach().to(torch.float64), "dq": q.grad.to(torch.float64), "dk": k.grad.to(torch.float64),
            "dv": v.grad.to(torch.float64)}


def errors(got, ref):
    """max |got - ref| and that over max |ref| (NaN anywhere: infinite)."""
    diff = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    if math.isnan(diff):
        diff = math.inf
    return {"max_abs": diff, "rel": diff / scale if scale > 0 else diff}


def run_flashbench(binary, impl, dtype_name, causal, paths, out):
    """flashbench grad on paths = {"q", "k", "v", "do"}: .npy files, each its own array."""
    command = [binary, "grad", "--backend", "cuda", "--dtype", dtype_name, "--impl", impl, "--q", str(paths["q"]),
               "--k", str(paths["k"]), "--v", str(paths["v"]), "--do", str(paths["do"]), "--out", str(out)]
    if causal:
        command.append("--causal")
    return subprocess.run(command, capture_output=True, text=True)


def read_outputs(out):
    """flashbench grad's o, dq, dk, dv (float32 arrays), or the reason they are not all there."""
    missing = [name for name in TENSORS if not (out / f"{name}.npy").exists()]
    if missing:
        old = " (an older flashbench: it wrote dx.npy = dQ + dK + dV)" if (out / "dx.npy").exists() else ""
        return None, f"flashbench grad wrote no {', '.join(n + '.npy' for n in missing)}{old}"
    return {name: np.load(out / f"{name}.npy") for name in TENSORS}, None


def tolerance(bar, dtype_name):
    """Per tensor: 3x the naive layer's relative error (at least FP32_FLOOR in fp32), plus 1e-6."""
    return {name: max(3.0 * bar[name]["rel"], FP32_FLOOR if dtype_name == "fp32" else 0.0) + 1e-6 for name in bar}


def judge(got_errors, bar, dtype_name):
    """(tolerance, status): "ok" when every tensor's rel is within its tolerance, else "beyond_bar"."""
    tol = tolerance(bar, dtype_name)
    within = all(got_errors[name]["rel"] <= tol[name] for name in TENSORS)
    return tol, "ok" if within else "beyond_bar"


def draw(shape, dtype, generator, scale, device="cuda"):
    """Q, K, V (times scale) and dO, independent standard normals rounded to dtype."""
    import torch
    b, h, g, n, n_k, d = shape

    def normal(size, factor):
        return (torch.randn(size, dtype=torch.float64, device=device, generator=generator) * factor).to(dtype)
    return {"q": normal((b, h, n, d), scale), "k": normal((b, g, n_k, d), scale),
            "v": normal((b, g, n_k, d), scale), "do": normal((b, h, n, d), 1.0)}


def check_case(args, shape, causal, dtype_name, impls, tmp, generator):
    import torch
    dtype = torch_dtype(dtype_name)
    inputs = draw(shape, dtype, generator, args.input_scale)
    paths = {name: tmp / f"{name}.npy" for name in inputs}
    for name, tensor in inputs.items():
        np.save(paths[name], tensor.float().cpu().numpy())
    ref = reference(inputs["q"], inputs["k"], inputs["v"], inputs["do"], causal)
    slow = naive(inputs["q"], inputs["k"], inputs["v"], inputs["do"], causal, dtype)
    bar = {name: errors(slow[name], ref[name]) for name in TENSORS}
    rows = []
    for impl, variant in impls:
        row = {"impl": impl, "variant": variant, "dtype": dtype_name, "shape": list(shape), "causal": causal,
               "input_scale": args.input_scale, "naive": bar}
        out = tmp / f"out-{impl}"
        done = run_flashbench(args.binary, impl, dtype_name, causal, paths, out)
        if done.returncode != 0:
            # exit 2: the implementation refuses the problem (flashbench's usage error); else it failed
            row["status"] = "skipped" if done.returncode == 2 else "failed"
            row["reason"] = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
            rows.append(row)
            continue
        arrays, why = read_outputs(out)
        if arrays is None:
            row["status"], row["reason"] = "failed", why
            rows.append(row)
            continue
        got = {name: torch.from_numpy(a).to(device="cuda", dtype=torch.float64) for name, a in arrays.items()}
        shapes_wrong = [name for name in TENSORS if got[name].shape != ref[name].shape]
        if shapes_wrong:
            row["status"] = "failed"
            row["reason"] = "; ".join(f"{name}.npy has shape {list(got[name].shape)}, expected "
                                      f"{list(ref[name].shape)}" for name in shapes_wrong)
            rows.append(row)
            continue
        row["flashbench"] = {name: errors(got[name], ref[name]) for name in TENSORS}
        row["tolerance"], row["status"] = judge(row["flashbench"], bar, dtype_name)
        rows.append(row)
    return rows


def markdown(rows, meta):
    lines = [f"# flashbench grad --backend cuda against torch math (float64), {meta['gpu']}", "",
             f"torch {meta['torch']}, {meta['time']}. Q, K, V and dO independent; rel = max|x - ref| / max|ref| "
             "per tensor; the bar is torch's naive layer in the storage dtype; tolerance = 3 x bar (fp32: at least "
             "1e-5). Shape B,H,G,N,N_k,d.", "",
             "| impl | dtype | B,H,G,N,N_k,d | causal | O rel | dQ rel | dK rel | dV rel | bar O | bar dQ | bar dK | "
             "bar dV | status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        shape = ",".join(str(s) for s in r["shape"])
        bar = " | ".join(f"{r['naive'][name]['rel']:.2e}" for name in TENSORS)
        if "flashbench" in r:
            numbers = " | ".join(f"{r['flashbench'][name]['rel']:.2e}" for name in TENSORS)
            status = r["status"]
        else:
            numbers = "- | - | - | -"
            status = f"{r['status']}: {r['reason']}"
        lines.append(f"| {r['impl']} | {r['dtype']} | {shape} | {int(r['causal'])} | {numbers} | {bar} | {status} |")
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    """The whole file or, on failure, none: written beside it, then renamed over it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder for torch_grad.json and torch_grad.md")
    p.add_argument("--binary", default="build-gpu/flashbench")
    p.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                   help="comma-separated BxHxNxd or BxHxGxNxN_kxd")
    p.add_argument("--mask", choices=["false", "true", "both"], default="both")
    p.add_argument("--dtype", default="bf16,fp16,fp32")
    p.add_argument("--impl", default="", help="comma-separated; default: every cuda implementation of the build")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--input-scale", type=float, default=1.0, help="Q, K, V are standard normal times this")
    args = p.parse_args()
    if not args.input_scale > 0:
        p.error("--input-scale must be a positive number")

    known = cuda_implementations(args.binary)
    if args.impl:
        wanted = args.impl.split(",")
        unknown = [name for name in wanted if name not in dict(known)]
        if unknown:
            raise SystemExit(f"unknown implementation(s) {', '.join(unknown)}; the build has "
                             f"{', '.join(name for name, _ in known)}")
        known = [(name, variant) for name, variant in known if name in wanted]
    dtypes = args.dtype.split(",")
    for name in dtypes:
        if name not in DTYPES:
            raise SystemExit(f"unknown dtype '{name}' (expected {', '.join(DTYPES)})")
    masks = {"false": [False], "true": [True], "both": [False, True]}[args.mask]
    import torch
    generator = torch.Generator(device="cuda").manual_seed(args.seed)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes:
            for causal in masks:
                for dtype_name in dtypes:
                    for row in check_case(args, shape, causal, dtype_name, known, Path(tmp), generator):
                        rows.append(row)
                        what = f"{row['impl']:12s} {dtype_name} {shape_text(shape):18s} causal={int(causal)}"
                        if "flashbench" in row:
                            got = " ".join(f"{n} {row['flashbench'][n]['rel']:.2e}" for n in TENSORS)
                            bar = ", ".join(f"{row['naive'][n]['rel']:.2e}" for n in TENSORS)
                            print(f"{row['status']:10s} {what} {got} (bar {bar})", flush=True)
                        else:
                            print(f"{row['status']:10s} {what} {row['reason']}", flush=True)

    clocks = timing.open_clocks(timing.torch_device_keys(torch, torch.cuda.current_device()))
    provenance = timing.provenance(torch, clocks)
    meta = {"tool": "torch_grad.py", "torch": torch.__version__, "argv": sys.argv, "gpu": torch.cuda.get_device_name(),
            "cudnn": torch.backends.cudnn.version(), "provenance": provenance, "seed": args.seed,
            "input_scale": args.input_scale,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomically(out / "torch_grad.json", json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    write_atomically(out / "torch_grad.md", markdown(rows, meta))
    bad = [r for r in rows if r["status"] in ("beyond_bar", "failed")]
    print(f"{len(rows) - len(bad)} rows ok or skipped, {len(bad)} beyond the bar or failed; "
          f"wrote {out / 'torch_grad.json'} and {out / 'torch_grad.md'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
