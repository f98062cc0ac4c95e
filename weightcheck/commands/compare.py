"""``weightcheck compare A B``: one verdict across dialects, configs and values.

load both -> normalize -> judge (model/compatibility.py: pairs by *canonical* name, shapes,
configs, the verdicts) -> the bytes and values here -> :func:`report` (schema
``weightcheck.compare/1``) -> render.
``--strict`` also fails (exit 1) on dtype, serving-field and missing-optional-tensor differences.

Byte identity is decided from Hub LFS sha256 when both tensors sit at the same place in files
with equal content hashes; otherwise by comparing the bytes, which happens only when both sides
are local or when ``--values`` asks for it.
"""

from __future__ import annotations

import math
import sys

from weightcheck.engines import aux
from weightcheck.errors import WeightcheckError, require_torch
from weightcheck.model import vocab
from weightcheck.model.compatibility import (
    Comparison,
    declared_architecture,
    judge,
    presence,
    verdict,
)
from weightcheck.model.drafter import Drafter, Tensor, load_drafter
from weightcheck.progress import Progress
from weightcheck.reports import (
    ByteCounts,
    CompareReport,
    ConfigDifference,
    DtypeMismatch,
    OnlyIn,
    PairedTensor,
    ShapeMismatch,
    Side,
    TensorValues,
    VocabOverlap,
    source_info,
)
from weightcheck.requests import CompareRequest
from weightcheck.sources import is_local
from weightcheck.sources.tensors import VALUES_CHUNK_ELEMS, from_bytes, iter_chunks
from weightcheck.sources.together import at_once
from weightcheck.storage.header import TORCH_NAMES, itemsize


def run(req: CompareRequest) -> CompareReport:
    """``compare`` as ``req`` asks it: both sides read at once (a Hub source's requests overlap
    the other's reads), judged, their bytes (and with ``values`` their values) compared."""
    if req.values:
        require_torch("--values")
    da, db = at_once(
        lambda: load_drafter(req.a, revision=req.revision_a, token=req.token),
        lambda: load_drafter(req.b, revision=req.revision_b, token=req.token),
        threads=not (is_local(req.a) and is_local(req.b)),
    )
    progress = req.progress and sys.stderr.isatty()
    c = compare(da, db, values=req.values, progress=progress)
    return report(c, values=req.values, strict=req.strict)


def _same_lfs_place(a: Drafter, b: Drafter, ta: Tensor, tb: Tensor) -> bool:
    fa, fb = a.source.files.get(ta.file), b.source.files.get(tb.file)
    return bool(
        fa
        and fb
        and fa.sha256
        and fa.sha256 == fb.sha256
        and ta.begin == tb.begin
        and ta.end == tb.end
    )


def _bytes_equal(a: Drafter, b: Drafter, ta: Tensor, tb: Tensor) -> bool:
    if ta.nbytes != tb.nbytes:
        return False
    chunks_a = iter_chunks(a.source, ta.name, window=ta.window)
    for ca, cb in zip(chunks_a, iter_chunks(b.source, tb.name, window=tb.window)):
        if ca != cb:
            return False
    return True


def _values(a: Drafter, b: Drafter, ta: Tensor, tb: Tensor) -> dict:
    """max |a-b|, ‖a-b‖/‖a‖, cosine and byte equality, streamed in bounded chunks (torch).

    Each chunk is converted once per side to float32 and reduced with BLAS dot products (blocked
    accumulation within a chunk of 4 M elements, float64 across chunks: relative error ~1e-6); the
    finiteness mask is only computed for a chunk whose sums come out non-finite."""
    import torch

    if ta.dtype not in TORCH_NAMES or tb.dtype not in TORCH_NAMES:
        return {"error": f"values of {ta.dtype}/{tb.dtype} are not supported"}
    isa, isb = itemsize(ta.dtype), itemsize(tb.dtype)

    def dots(xa, xb):
        d = xa - xb
        return d, (
            float(torch.dot(d, d)),
            float(torch.dot(xa, xa)),
            float(torch.dot(xb, xb)),
            float(torch.dot(xa, xb)),
        )

    n = VALUES_CHUNK_ELEMS
    max_abs = 0.0
    sdd = saa = sbb = sab = 0.0
    nonfinite = 0
    bytes_eq = ta.dtype == tb.dtype
    for ca, cb in zip(
        iter_chunks(a.source, ta.name, n * isa, isa, ta.window),
        iter_chunks(b.source, tb.name, n * isb, isb, tb.window),
    ):
        if bytes_eq and ca != cb:
            bytes_eq = False
        if not ca:
            continue
        xa = from_bytes(ca, ta.dtype).to(torch.float32)
        xb = from_bytes(cb, tb.dtype).to(torch.float32)
        d, (c_dd, c_aa, c_bb, c_ab) = dots(xa, xb)
        if not math.isfinite(c_dd + c_aa + c_bb + c_ab):
            fin = torch.isfinite(xa) & torch.isfinite(xb)
            nonfinite += int((~fin).sum())
            d, (c_dd, c_aa, c_bb, c_ab) = dots(xa[fin], xb[fin])
        if d.numel():
            lo, hi = torch.aminmax(d)
            max_abs = max(max_abs, -float(lo), float(hi))
        sdd += c_dd
        saa += c_aa
        sbb += c_bb
        sab += c_ab
    rel = (sdd**0.5) / (saa**0.5) if saa > 0 else (0.0 if sdd == 0 else float("inf"))
    cos = sab / ((saa * sbb) ** 0.5) if saa > 0 and sbb > 0 else (1.0 if saa == sbb == 0 else 0.0)
    out = {"max_abs_diff": max_abs, "rel_l2": rel, "cosine": cos, "bytes_equal": bytes_eq}
    if nonfinite:
        out["non_finite"] = nonfinite
    return out


def compare(a: Drafter, b: Drafter, values: bool = False, progress: bool = True) -> Comparison:
    c = judge(a, b, aux.same_aux_layers)
    both_local = a.source.kind != "hub" and b.source.kind != "hub"
    paired = [
        p
        for p in c.pairs
        if p.a is not None and p.b is not None and tuple(p.a.shape) == tuple(p.b.shape)
    ]
    bar = None
    total = sum(p.a.nbytes + p.b.nbytes for p in paired)
    if (values or both_local) and progress and total > (256 << 20):
        bar = Progress("compare", total)
    for p in paired:
        if _same_lfs_place(a, b, p.a, p.b):
            p.bytes_equal, p.how = True, "lfs-sha256"
        if values and p.how == "lfs-sha256":
            p.values = {"max_abs_diff": 0.0, "rel_l2": 0.0, "cosine": 1.0, "bytes_equal": True}
        elif values:
            p.values = _values(a, b, p.a, p.b)
            if p.bytes_equal is None and "bytes_equal" in p.values:
                p.bytes_equal, p.how = p.values["bytes_equal"], "bytes"
        elif p.bytes_equal is None and both_local and p.a.dtype == p.b.dtype:
            p.bytes_equal, p.how = _bytes_equal(a, b, p.a, p.b), "bytes"
        elif p.bytes_equal is None and p.a.dtype != p.b.dtype:
            p.bytes_equal, p.how = False, "dtype"
        if bar:
            bar.update(p.a.nbytes + p.b.nbytes)
    if bar:
        bar.close()
    return c


def _map_of(d: Drafter):
    """(its draft vocabulary's map or None, why it cannot be read or None)."""
    try:
        return vocab.from_drafter(d), None
    except (WeightcheckError, ValueError) as e:  # a malformed d2t: check says why (WC304/WC306)
        return None, getattr(e, "message", None) or str(e)


def vocab_report(a: Drafter, b: Drafter) -> tuple[dict | None, str | None]:
    """The ``vocab`` object: both draft vocabularies (d2t read by range; no d2t is the identity
    map) and how far they agree — target ids in both, draft ids standing for the same target id —
    with what that means for initializing one from the other; and, when a side's map cannot be
    read, the note that says so (the vocabularies are then not compared: never in silence)."""
    remote = "hub" in (a.source.kind, b.source.kind)
    (ma, wa), (mb, wb) = at_once(lambda: _map_of(a), lambda: _map_of(b), threads=remote)
    bad = [(side, why) for side, why in (("A", wa), ("B", wb)) if why]
    if bad:
        said = "; ".join(f"{side}'s {why}" for side, why in bad)
        who = " and ".join(side for side, _ in bad)
        return None, (
            f"draft vocabularies not compared: {said} (`weightcheck check {who}` says what the "
            "engines do with it)"
        )
    if ma is None or mb is None:
        return None, None
    r = vocab.overlap(ma, mb)
    targets = [s for s, d in (("A", a), ("B", b)) if d.looks_like_target]
    if targets:  # no drafter's training starts from a target, no convert makes one of it
        who = " and ".join(targets)
        r["meaning"] = (
            f"{who} {'is a target model' if len(targets) == 1 else 'are target models'}, not "
            "a drafter: its lm_head scores the whole vocabulary and no convert makes a drafter of "
            "it; compare a drafter with a drafter (a target is check's --target)"
        )
        return r, None
    r["meaning"] = vocab_meaning(r)
    return r, None


def vocab_meaning(v: dict) -> str:
    """What the maps mean for initializing B's training from A's weights (SpecForge and
    speculators overwrite d2t/t2d with the run's map, the lm_head rows stay where they were)."""
    na, nb, same = v["a_draft"], v["b_draft"], v["same_index"]
    if v.get("a_placeholder") or v.get("b_placeholder"):
        # an all-zero d2t is no map built from data (model/vocab.py is_placeholder): no advice
        # that reads it as the tokens a head was trained for
        who = " and ".join(s for s in "AB" if v.get(f"{s.lower()}_placeholder"))
        return (
            f"{who}'s d2t is the all-zero placeholder, not a map built from data: which token each "
            "of its lm_head rows was trained for is not recorded, so neither initializing from it "
            "nor re-indexing it (--vocab-from) can be judged from the maps; find the training "
            "run's map (SpecForge: cache/vocab_mapping/<hash>.pt) and check against it "
            "(`weightcheck check A --training-vocab MAP`)"
        )
    if na == nb == same:
        return "the same map: A's lm_head rows stand for the same tokens under B's map"
    lost = nb - v["shared"]
    fix = "`weightcheck convert A OUT --to ENGINE --vocab-from B` re-indexes A's head to B's map"
    if lost:
        fix += f" ({lost:,} of B's tokens are not in A's head: add `--lm-head-from TARGET`)"
    return (
        f"initializing B's training from A as it is reads {min(na, nb) - same:,} of A's lm_head "
        f"rows as other tokens: {fix}"
    )


def _side(d: Drafter) -> Side:
    return Side(
        source=source_info(d),
        dialect=d.dialect,
        architecture=d.architecture.name if d.architecture else None,
        # the drafter architecture the config names (architectures[0]), if any
        config_architecture=declared_architecture(d),
    )


def report(c: Comparison, values: bool = False, strict: bool = False) -> CompareReport:
    v = verdict(c)
    only_a = [
        OnlyIn(p.label, p.a.name, presence(c.b, p.canonical) or presence(c.a, p.canonical))
        for p in c.pairs
        if p.b is None
    ]
    only_b = [
        OnlyIn(p.label, p.b.name, presence(c.a, p.canonical) or presence(c.b, p.canonical))
        for p in c.pairs
        if p.a is None
    ]
    both = [p for p in c.pairs if p.a is not None and p.b is not None]
    undecided = sum(1 for p in both if p.bytes_equal is None)
    notes = list(c.notes)
    if v == "compatible" and undecided:
        notes.append(
            f"bytes of {undecided} tensor(s) not compared (Hub sources without matching "
            "content hashes): pass --values to read and compare them"
        )
    vocab, unread = vocab_report(c.a, c.b)
    if unread:
        notes.append(unread)
    return CompareReport(
        verdict=v,
        exit_status=1 if v == "incompatible" or (strict and c.strict_failures) else 0,
        strict=strict,
        reasons=tuple(c.reasons),
        strict_failures=tuple(c.strict_failures),
        a=_side(c.a),
        b=_side(c.b),
        only_in_a=only_a,
        only_in_b=only_b,
        shape_mismatches=[
            ShapeMismatch(p.label, list(p.a.shape), list(p.b.shape))
            for p in both
            if tuple(p.a.shape) != tuple(p.b.shape)
        ],
        dtype_mismatches=[
            DtypeMismatch(p.label, p.a.dtype, p.b.dtype) for p in both if p.a.dtype != p.b.dtype
        ],
        config_differences=[ConfigDifference(**d) for d in c.config_differences],
        bytes=ByteCounts(
            equal=sum(1 for p in both if p.bytes_equal is True),
            different=sum(1 for p in both if p.bytes_equal is False),
            not_compared=undecided,
        ),
        tensors=[
            PairedTensor(
                p.label,
                p.a.name,
                p.b.name,
                list(p.a.shape),
                p.a.dtype,
                p.b.dtype,
                p.bytes_equal,
                p.how,
            )
            for p in both
        ],
        notes=notes,
        vocab=VocabOverlap(**vocab) if vocab is not None else None,
        values={p.label: TensorValues(**p.values) for p in both if p.values is not None}
        if values
        else None,
    )
