"""Floors of flashbench's materialising variants on CUDA (standard, v1, checkpoint), measured on the
GPU, beside the times flashbench measured for them.

A variant's floor is what its own algorithm costs when every part of it runs as fast as this GPU runs
that part alone:
- each matrix product it issues, timed alone through PyTorch's matmul: cuBLAS, the library its
  kernels call, with fp32 accumulation, no TF32 and no reduced-precision reductions (as flashbench's
  CUBLAS_COMPUTE_32F); the full N x N products, since flashbench's do not skip the masked half;
- each time its row kernels must read or write an N x N tensor (a "pass"), at the copy bandwidth
  measured on a tensor of that size (a copy is one read and one write: two passes).

Per layer, in products and N x N passes (S = scale Q K^T; D = rowsum(dO o O) is N numbers, not
counted). A causal row kernel reads only the visible part of a row, (N + 1) / 2N of the tensor, and
writes all of it (the products read the masked zeros too), so a read pass costs that fraction there:

  standard   forward   S = Q K^T | P = softmax(S): read S, write P | O = P V
             backward  dP = dO V^T | dS = P o (dP - D): read P and dP, write dS |
                       dV = P^T dO, dQ = dS K, dK = dS^T Q
  v1         forward   as standard's (S kept; P written for P V, from S in one read)
             backward  P = exp(S - m) / l: read S, write P | then standard's backward
  checkpoint forward   as standard's
             backward  S = Q K^T | P from S: read S, write P | then standard's backward

Rows whose layer is not plain self-attention (dropout, grouped K/V, N_k != N) are skipped with the
reason. A row's floor is the per-layer floor times its layers. Each shape's parts are timed once with
CUDA events, by the peers' stopping rule (timing.py), and shared by the rows of that shape.

Writes OUT/floors.json and OUT/floors.md (each whole or not at all): measured / floor per row and
direction, and each floor's parts. --parts FILE takes the parts from an earlier floors.json instead
of measuring them (no GPU or torch needed): new flashbench rows judged against floors measured before.
Exit 0; 2 for bad input (one line on stderr).

Usage: python3 scripts/peers/floors.py OUT RESULTS.json [RESULTS.json ...] [--max-time 1] [--parts FILE]
"""
import argparse
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402

# torch is imported where it is used: what needs no GPU (the plans, the rows, the table) is testable on
# a machine without it (tests/scripts/floors_test.py).

# The products, by name; each of one [N, d] or [N, N] operand per head, for B·H heads.
PRODUCTS = ["S = Q·Kᵀ", "O = P·V", "dP = dO·Vᵀ", "dV = Pᵀ·dO", "dQ = dS·K", "dK = dSᵀ·Q"]
# variant -> direction -> (products, N x N tensors read, N x N tensors written)
STANDARD_BACKWARD = (["dP = dO·Vᵀ", "dV = Pᵀ·dO", "dQ = dS·K", "dK = dSᵀ·Q"], 2, 1)
PLANS = {
    "standard": {"fwd": (["S = Q·Kᵀ", "O = P·V"], 1, 1), "bwd": STANDARD_BACKWARD},
    "v1": {"fwd": (["S = Q·Kᵀ", "O = P·V"], 1, 1),
           "bwd": (STANDARD_BACKWARD[0], STANDARD_BACKWARD[1] + 1, STANDARD_BACKWARD[2] + 1)},
    "checkpoint": {"fwd": (["S = Q·Kᵀ", "O = P·V"], 1, 1),
                   "bwd": (["S = Q·Kᵀ"] + STANDARD_BACKWARD[0], STANDARD_BACKWARD[1] + 1, STANDARD_BACKWARD[2] + 1)},
}


def passes(variant, direction, problem):
    """The N x N passes of one direction: reads (a causal one covers the visible part) + writes."""
    _, reads, writes = PLANS[variant][direction]
    n = problem["seq"]
    visible = (n + 1) / (2 * n) if problem.get("causal", False) else 1.0
    return reads * visible + writes


class BadInput(Exception):
    pass


def shape_of(problem):
    return (problem["batch"], problem["heads"], problem["seq"], problem["head_dim"], problem["dtype"])


def shape_key(problem):
    """The shape as floors.json names its parts: "B,H,N,d,dtype"."""
    return ",".join(map(str, shape_of(problem)))


def why_not(row):
    """Why a result row gets no floor, or None when it does."""
    p = row.get("problem", {})
    if row.get("backend") != "cuda" or row.get("variant") not in PLANS:
        return "not a cuda row of standard, v1 or checkpoint"
    if row.get("status") != "ok":
        return f"status {row.get('status')}"
    if p.get("dropout", 0.0) > 0.0:
        return "dropout (the floors are of the plain layer)"
    if p.get("kv_heads", p.get("heads")) != p.get("heads"):
        return "grouped K/V heads"
    if p.get("seq_k", p.get("seq")) != p.get("seq"):
        return "N_k != N"
    return None


def read_rows(paths):
    """The result rows of the files, each with its file; BadInput for a file that is not one."""
    rows = []
    for path in paths:
        try:
            document = json.loads(Path(path).read_text())
            rows += [dict(r, source=str(path)) for r in document["rows"]]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise BadInput(f"floors.py: '{path}' is not a flashbench result file ({error.__class__.__name__})")
    return rows


def floor_of(variant, direction, parts, problem):
    """The floor [ms] of one direction for `problem` (its layers included) from its shape's measured
    parts: {'products': {name: ms}, 'pass_ms': ms}; None when they could not be measured."""
    if parts is None or "error" in parts:
        return None
    products = PLANS[variant][direction][0]
    per_layer = sum(parts["products"][name] for name in products) + passes(variant, direction, problem) * parts["pass_ms"]
    return problem.get("layers", 1) * per_layer


def judge(row, parts):
    """The output row: measured, floor and their ratio per direction."""
    out = {"variant": row["variant"], "impl": row.get("impl", row["variant"]), "problem": row["problem"],
           "source": row["source"]}
    reason = why_not(row)
    if reason:
        return dict(out, status="skipped", reason=reason)
    if parts is None or "error" in parts:
        return dict(out, status="skipped", reason=(parts or {}).get("error", "parts not measured"))
    for direction in ("fwd", "bwd"):
        measured = row["timing"][direction]["median_ms"]
        floor = floor_of(row["variant"], direction, parts, row["problem"])
        out[direction] = {"measured_ms": measured, "floor_ms": floor, "ratio": measured / floor,
                          "products": PLANS[row["variant"]][direction][0],
                          "passes": passes(row["variant"], direction, row["problem"])}
    return dict(out, status="ok")


def markdown(judged, parts_by_shape, meta):
    lines = [f"# Floors of the materialising variants, {meta['gpu']}", "",
             f"torch {meta['torch']}, {meta['time']}. Floor = the variant's products timed alone (cuBLAS "
             "through torch, fp32 accumulation) + its N×N passes at the measured copy bandwidth, times L; "
             "ratio = flashbench's median ÷ floor (scripts/peers/floors.py)."
             + (f" Parts from {meta['parts_from']} (measured {meta.get('parts_measured') or '?'})."
                if meta.get("parts_from") else ""), "",
             "| variant | B,H,N,d | causal | dtype | fwd ms | fwd floor | fwd ÷ floor | bwd ms | bwd floor | "
             "bwd ÷ floor |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in judged:
        p = r["problem"]
        shape = f"{p['batch']},{p['heads']},{p['seq']},{p['head_dim']}"
        head = f"| {r['impl']} | {shape} | {int(p.get('causal', False))} | {p['dtype']} |"
        if r["status"] != "ok":
            lines.append(f"{head} {r['status']}: {r['reason']} | | | | | |")
            continue
        f, b = r["fwd"], r["bwd"]
        lines.append(f"{head} {f['measured_ms']:.3f} | {f['floor_ms']:.3f} | {f['ratio']:.2f} | "
                     f"{b['measured_ms']:.3f} | {b['floor_ms']:.3f} | {b['ratio']:.2f} |")
    lines += ["", "Parts per shape (ms; one layer):", "",
              "| B,H,N,d,dtype | " + " | ".join(PRODUCTS) + " | one N×N pass | copy GB/s |",
              "| --- |" + " ---: |" * (len(PRODUCTS) + 2)]
    for shape, parts in parts_by_shape.items():
        if "error" in parts:
            lines.append(f"| {shape} | {parts['error']} |" + " |" * (len(PRODUCTS) + 1))
            continue
        cells = " | ".join(f"{parts['products'][name]:.3f}" for name in PRODUCTS)
        lines.append(f"| {shape} | {cells} | {parts['pass_ms']:.3f} | {parts['copy_gbps']:.0f} |")
    return "\n".join(lines) + "\n"


def copy_pass(copy_ms, tensor_bytes):
    """One N×N pass from a copy of the tensor (one read and one write: two passes) and its rate."""
    return {"pass_ms": copy_ms / 2, "copy_gbps": 2 * tensor_bytes / copy_ms / 1e6}


def check_parts(parts):
    """Why a floors.json's `parts` cannot be used, or None: a dict of shapes, each {"error": ...} or
    holding every product, pass_ms and copy_gbps as numbers."""
    if not isinstance(parts, dict):
        return "its parts are not a table of shapes"
    for key, shape in parts.items():
        if isinstance(shape, dict) and "error" in shape:
            continue
        try:
            numbers = [shape["pass_ms"], shape["copy_gbps"]] + [shape["products"][name] for name in PRODUCTS]
        except (KeyError, TypeError):
            return f"its parts of {key} lack a product, pass_ms or copy_gbps"
        if not all(isinstance(x, (int, float)) and x > 0 for x in numbers):
            return f"its parts of {key} are not all positive numbers"
    return None


def measure_parts(shape, args):
    """Times each product of PRODUCTS and one N×N pass for shape (B, H, N, d, dtype) on the GPU."""
    import torch
    batch, heads, seq, head_dim, dtype_name = shape
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.cuda.empty_cache()
    try:
        gen = torch.Generator(device="cuda").manual_seed(args.seed)
        bh = batch * heads
        q, k, v, do, dx = (torch.randn(bh, seq, head_dim, device="cuda", dtype=dtype, generator=gen)
                           for _ in range(5))
        scores = torch.randn(bh, seq, seq, device="cuda", dtype=dtype, generator=gen)  # S, P, dS
        other = torch.empty_like(scores)  # dP, and the copy's target
        scale = head_dim ** -0.5
        work = {  # as flashbench's standard issues them: dQ and dK add into dX (beta 1)
            "S = Q·Kᵀ": lambda: torch.bmm(q, k.transpose(1, 2), out=scores),  # the scale: cuBLAS's alpha, free
            "O = P·V": lambda: torch.bmm(scores, v, out=dx),
            "dP = dO·Vᵀ": lambda: torch.bmm(do, v.transpose(1, 2), out=other),
            "dV = Pᵀ·dO": lambda: torch.bmm(scores.transpose(1, 2), do, out=dx),
            "dQ = dS·K": lambda: dx.baddbmm_(scores, k, alpha=scale),
            "dK = dSᵀ·Q": lambda: dx.baddbmm_(scores.transpose(1, 2), q, alpha=scale),
        }
        def timed(fn):
            return timing.cuda_sample(fn, args)["median_ms"]
        products = {name: timed(fn) for name, fn in work.items()}
        return dict(copy_pass(timed(lambda: other.copy_(scores)), scores.numel() * scores.element_size()),
                    products=products)
    except torch.cuda.OutOfMemoryError:
        return {"error": "oom"}
    finally:
        torch.cuda.empty_cache()


def write_atomically(path, text):
    """The whole file or, on failure, none: written beside it, then renamed over it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder for floors.json and floors.md")
    p.add_argument("results", nargs="+", help="flashbench result files (run --format json) with cuda rows")
    timing.add_arguments(p, warmup=2, max_samples=200, max_time=1.0, per="part")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--parts", help="a floors.json whose measured parts to use instead of measuring (no GPU needed)")
    args = p.parse_args(argv)
    try:
        rows = read_rows(args.results)
    except BadInput as error:
        print(error, file=sys.stderr)
        return 2
    wanted = [r for r in rows if why_not(r) is None]
    if not wanted:
        print("floors.py: no ok cuda row of standard, v1 or checkpoint on a plain self-attention layer in "
              f"{', '.join(args.results)}", file=sys.stderr)
        return 2
    if args.parts:
        try:
            saved = json.loads(Path(args.parts).read_text())
            parts_by_key, meta = saved["parts"], dict(saved["meta"])
            why = check_parts(parts_by_key) or (None if {"gpu", "torch"} <= set(meta) else "its meta names no gpu or torch")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            why = f"not a floors.json ({error.__class__.__name__})"
        if why:
            print(f"floors.py: '{args.parts}': {why}", file=sys.stderr)
            return 2
        meta.update(parts_from=args.parts, parts_measured=meta.get("parts_measured") or meta.get("time"))
    else:
        try:
            import torch
        except ImportError:
            print("floors.py: measuring needs PyTorch with CUDA (on the GPU machine); --parts FILE judges without it",
                  file=sys.stderr)
            return 2
    out = Path(args.out)
    try:  # before any measuring: an OUT that cannot be made is known at once
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(f"floors.py: cannot create the output folder '{out}' ({error.strerror})", file=sys.stderr)
        return 2
    if not args.parts:
        parts_by_key = {}
        for row in wanted:
            key = shape_key(row["problem"])
            if key not in parts_by_key:
                parts_by_key[key] = measure_parts(shape_of(row["problem"]), args)
                print(f"parts of {key}: {parts_by_key[key]}", flush=True)
        meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    meta.update(tool="floors.py", argv=[sys.argv[0]] + list(argv if argv is not None else sys.argv[1:]),
                time=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    judged = [judge(r, parts_by_key.get(shape_key(r["problem"]))) for r in rows
              if r.get("backend") == "cuda" and r.get("variant") in PLANS]
    document = json.dumps({"meta": meta, "parts": parts_by_key, "rows": judged}, indent=1) + "\n"
    table = markdown(judged, parts_by_key, meta)  # both texts made before either file is written
    write_atomically(out / "floors.json", document)
    write_atomically(out / "floors.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
