"""The GPU's gradients held against PyTorch: `flashbench grad --backend cuda` for every implementation
of the cuda device and every dtype, against torch's `math` SDPA backend in float64 on the GPU.

For each shape [B, H, N, d], mask and dtype it draws X and dO (standard normal, then rounded to the
dtype, so that flashbench and the reference start from the same numbers), writes them as float32
.npy, runs `flashbench grad --backend cuda --dtype D --impl I` (the self-attention layer the
benchmark measures: Q = K = V = X) and compares its O and dX = dQ + dK + dV with the float64
reference. The bar is the error of the same layer computed naively by torch in the storage dtype
(S, P and every product stored in it, as `sum(O * dO)` differentiated by autograd): a kernel is
within it when its relative error is at most 3x the naive one (FlashAttention's own test bar), or
1e-5 in fp32 where the naive error is at rounding level.

Errors per tensor: max_abs = max |x - ref|, rel = max_abs / max |ref| (flashbench's check metric).
Writes OUT/torch_grad.json and OUT/torch_grad.md; exits 1 when a row that ran is beyond its bar or
failed, 0 otherwise (a `skipped` row, e.g. cudnn in fp32, is not a failure).

Usage: python3 scripts/peers/torch_grad.py OUT [--binary build-gpu/flashbench]
       [--shapes 1x2x1x64,1x2x97x64,2x2x256x128,1x4x1024x128] [--mask both] [--dtype bf16,fp16,fp32]
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

# torch is imported where it is used, so that what needs no GPU (shapes, the implementation list, the
# markdown) is testable on a machine without it (tests/torch_grad_test.py).
DTYPES = ("bf16", "fp16", "fp32")
FP32_FLOOR = 1e-5  # the fp32 bar, as flashbench's own CUDA tests hold fp32 against float64


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = [int(x) for x in item.lower().split("x")]
        if len(parts) != 4 or min(parts) < 1:
            raise argparse.ArgumentTypeError(f"shape '{item}' is not BxHxNxd")
        shapes.append(tuple(parts))
    return shapes


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


def reference(x, do, causal):
    """O and dX of one self-attention layer in float64 through torch's math backend."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    x = x.detach().clone().to(torch.float64).requires_grad_(True)  # a leaf of its own
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(x, x, x, is_causal=causal)
    o.backward(do.to(torch.float64))
    return o.detach(), x.grad


def naive(x, do, causal, dtype):
    """The same layer written out in `dtype`: every stored tensor rounded to it, as a plain framework
    program would compute it."""
    import torch
    x = x.detach().clone().to(dtype).requires_grad_(True)  # a leaf of its own
    n, d = x.shape[-2], x.shape[-1]
    s = (x @ x.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    if causal:
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=x.device).tril(), float("-inf"))
    o = torch.softmax(s, dim=-1) @ x
    o.backward(do.to(dtype))
    return o.detach().to(torch.float64), x.grad.to(torch.float64)


def errors(got, ref):
    """max |got - ref| and that over max |ref| (NaN anywhere: infinite)."""
    diff = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    if math.isnan(diff):
        diff = math.inf
    return {"max_abs": diff, "rel": diff / scale if scale > 0 else diff}


def run_flashbench(binary, impl, dtype_name, causal, x_path, do_path, out):
    command = [binary, "grad", "--backend", "cuda", "--dtype", dtype_name, "--impl", impl, "--q", str(x_path),
               "--k", str(x_path), "--v", str(x_path), "--do", str(do_path), "--out", str(out)]
    if causal:
        command.append("--causal")
    return subprocess.run(command, capture_output=True, text=True)


def check_case(args, shape, causal, dtype_name, impls, tmp, generator):
    import torch
    dtype = torch_dtype(dtype_name)
    x = torch.randn(shape, dtype=torch.float64, device="cuda", generator=generator).to(dtype)
    do = torch.randn(shape, dtype=torch.float64, device="cuda", generator=generator).to(dtype)
    x_path, do_path = tmp / "x.npy", tmp / "do.npy"
    np.save(x_path, x.float().cpu().numpy())
    np.save(do_path, do.float().cpu().numpy())
    o_ref, dx_ref = reference(x, do, causal)
    o_naive, dx_naive = naive(x, do, causal, dtype)
    bar = {"o": errors(o_naive, o_ref), "dx": errors(dx_naive, dx_ref)}
    rows = []
    for impl, variant in impls:
        row = {"impl": impl, "variant": variant, "dtype": dtype_name, "shape": list(shape), "causal": causal,
               "naive": bar}
        out = tmp / f"out-{impl}"
        done = run_flashbench(args.binary, impl, dtype_name, causal, x_path, do_path, out)
        if done.returncode != 0:
            # exit 2: the implementation refuses the problem (flashbench's usage error); else it failed
            row["status"] = "skipped" if done.returncode == 2 else "failed"
            row["reason"] = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
            rows.append(row)
            continue
        got = {name: torch.from_numpy(np.load(out / f"{name}.npy")).to(device="cuda", dtype=torch.float64)
               for name in ("o", "dx")}
        row["flashbench"] = {"o": errors(got["o"], o_ref), "dx": errors(got["dx"], dx_ref)}
        row["tolerance"] = {name: max(3.0 * bar[name]["rel"], FP32_FLOOR if dtype_name == "fp32" else 0.0) + 1e-6
                            for name in ("o", "dx")}
        within = all(row["flashbench"][n]["rel"] <= row["tolerance"][n] for n in ("o", "dx"))
        row["status"] = "ok" if within else "beyond_bar"
        rows.append(row)
    return rows


def markdown(rows, meta):
    lines = [f"# flashbench grad --backend cuda against torch math (float64), {meta['gpu']}", "",
             f"torch {meta['torch']}, {meta['time']}. rel = max|x - ref| / max|ref|; the bar is torch's naive "
             "layer in the storage dtype; tolerance = 3 x bar (fp32: at least 1e-5).", "",
             "| impl | dtype | B,H,N,d | causal | O rel | O max abs | dX rel | dX max abs | bar O rel | "
             "bar dX rel | status |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        shape = ",".join(str(s) for s in r["shape"])
        bar = f"{r['naive']['o']['rel']:.2e} | {r['naive']['dx']['rel']:.2e}"
        if "flashbench" in r:
            f = r["flashbench"]
            numbers = (f"{f['o']['rel']:.2e} | {f['o']['max_abs']:.2e} | {f['dx']['rel']:.2e} | "
                       f"{f['dx']['max_abs']:.2e}")
            status = r["status"]
        else:
            numbers = "- | - | - | -"
            status = f"{r['status']}: {r['reason']}"
        lines.append(f"| {r['impl']} | {r['dtype']} | {shape} | {int(r['causal'])} | {numbers} | {bar} | "
                     f"{status} |")
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
    p.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x2x1x64,1x2x97x64,2x2x256x128,1x4x1024x128"))
    p.add_argument("--mask", choices=["false", "true", "both"], default="both")
    p.add_argument("--dtype", default="bf16,fp16,fp32")
    p.add_argument("--impl", default="", help="comma-separated; default: every cuda implementation of the build")
    p.add_argument("--seed", type=int, default=20261201)
    args = p.parse_args()

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
                        what = f"{row['impl']:12s} {dtype_name} {'x'.join(map(str, shape)):14s} causal={int(causal)}"
                        if "flashbench" in row:
                            f = row["flashbench"]
                            print(f"{row['status']:10s} {what} O {f['o']['rel']:.2e} dX {f['dx']['rel']:.2e} "
                                  f"(bar {row['naive']['o']['rel']:.2e}, {row['naive']['dx']['rel']:.2e})", flush=True)
                        else:
                            print(f"{row['status']:10s} {what} {row['reason']}", flush=True)

    meta = {"tool": "torch_grad.py", "torch": torch.__version__, "argv": sys.argv, "gpu": torch.cuda.get_device_name(),
            "cudnn": torch.backends.cudnn.version(),
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
