"""WC8xx: the weights' values (--values)."""

from __future__ import annotations

from weightcheck.model.drafter import Drafter
from weightcheck.rules.base import Context, rule
from weightcheck.sources.tensors import VALUES_CHUNK_ELEMS, from_bytes, iter_chunks, read_range
from weightcheck.storage.header import TORCH_NAMES, itemsize


@rule("WC801", needs="values")
def nonfinite(ctx, finding):
    for c, s in ctx.values.items():
        if s.get("non_finite"):
            yield finding(
                f"{c}: {s['non_finite']} NaN/Inf value(s); take an earlier checkpoint",
                c,
                detail="one non-finite weight makes every draft token's logits non-finite; a "
                "bad cast to fp16 overflows too",
            )


@rule("WC802", needs="values")
def constant(ctx, finding):
    for c, s in ctx.values.items():
        if (
            s.get("numel", 0) > 1
            and s.get("min") == s.get("max")
            and not c.endswith("norm.weight")
            and c not in ("d2t", "t2d")
        ):
            yield finding(
                f"{c}: every value is {s['min']:g}; re-export it from the trained checkpoint",
                c,
                detail="a constant layer was never trained or was zeroed by the export: it "
                "passes every shape check and predicts nothing",
            )


@rule("WC803", needs="values")
def norm_init(ctx, finding):
    for c, s in ctx.values.items():
        if c.endswith("norm.weight") and s.get("min") == 1.0 and s.get("max") == 1.0:
            yield finding(
                f"{c}: all ones, its initial value; check that the export read the trained norm",
                c,
                detail="right only if training froze this norm; otherwise the export wrote a "
                "fresh module",
            )


@rule("WC804", needs="values")
def head_slice(ctx, finding):
    same = ctx.lm_head_equals_target
    if same:
        yield finding(
            "lm_head.weight is the target's rows at the draft vocabulary: copied, not trained",
            "lm_head.weight",
            detail="fine if the drafter was meant to use the target's head; otherwise export the "
            "trained one (ModelOpt exports fall back to the base model's head)",
        )


def value_stats(d: Drafter, only: set | None = None, progress=None) -> dict:
    """Per canonical tensor: min, max, non-finite count, numel — streamed with torch.
    ``progress``: given the bytes of each chunk read."""
    import torch

    out = {}
    for t in d.tensors:
        if t.canonical is None or t.dtype not in TORCH_NAMES or (only and t.canonical not in only):
            continue
        isz = itemsize(t.dtype)
        lo, hi, bad, n = None, None, 0, 0
        for chunk in iter_chunks(d.source, t.name, VALUES_CHUNK_ELEMS * isz, isz):
            if progress is not None:
                progress(len(chunk))
            x = from_bytes(chunk, t.dtype)  # every step below makes a new tensor: no writes
            if x.dtype == torch.bool:
                x = x.to(torch.uint8)
            x = (
                x.to(torch.float64)
                if x.dtype in (torch.int64, torch.int32)
                else x.to(torch.float32)
            )
            n += x.numel()
            fin = torch.isfinite(x)
            bad += int((~fin).sum())
            x = x[fin]
            if x.numel():
                cmin, cmax = float(x.min()), float(x.max())
                lo = cmin if lo is None else min(lo, cmin)
                hi = cmax if hi is None else max(hi, cmax)
        out[t.canonical] = {"min": lo, "max": hi, "non_finite": bad, "numel": n}
    return out


def lm_head_is_target_slice(ctx: Context, samples: int = 64) -> bool:
    """Sampled rows of the drafter's lm_head equal the target's lm_head rows at the d2t ids
    (compared as values when the dtypes differ: ModelOpt writes an fp32 copy of a bf16 head)."""
    t = ctx.target
    head = ctx.tensor("lm_head.weight")
    if t is None or t.lm_head is None or head is None:
        return False
    if len(head.shape) != 2 or len(t.lm_head.shape) != 2 or head.shape[1] != t.lm_head.shape[1]:
        return False
    same_dtype = head.dtype == t.lm_head.dtype
    if not same_dtype and (head.dtype not in TORCH_NAMES or t.lm_head.dtype not in TORCH_NAMES):
        return False
    d2t, _ = ctx.vocab_maps()
    rows = head.shape[0]
    row_bytes = head.nbytes // rows if rows else 0
    their_rows = t.lm_head.shape[0]
    their_row_bytes = t.lm_head.nbytes // their_rows if their_rows else 0
    if not rows or not row_bytes or not their_row_bytes:
        return False
    step = max(1, rows // samples)
    for i in range(0, rows, step):
        tid = i + (d2t[i] if d2t and i < len(d2t) else 0)
        if not 0 <= tid < their_rows:
            return False
        mine = read_range(ctx.drafter.source, head.name, i * row_bytes, (i + 1) * row_bytes)
        theirs = read_range(
            t.source, t.lm_head.name, tid * their_row_bytes, (tid + 1) * their_row_bytes
        )
        if same_dtype:
            if mine != theirs:
                return False
        elif not _values_equal(mine, head.dtype, theirs, t.lm_head.dtype):
            return False
    return True


def _values_equal(a: bytes, da: str, b: bytes, db: str) -> bool:
    import torch

    x, y = from_bytes(a, da).to(torch.float64), from_bytes(b, db).to(torch.float64)
    return x.shape == y.shape and bool(torch.equal(x, y))
