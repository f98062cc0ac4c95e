"""``evaluate``: several drafters, one pass over the data, the target's top-1 computed once per
sample; every mismatch between data, drafter and target said in one line naming the file."""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.eval import metric
from weightcheck.eval.checks import check_target
from weightcheck.eval.data import open_data


def _weights_bytes(d, dtype_name: str) -> int:
    """The drafter's tensors in the compute dtype, in bytes (what it takes on the device)."""
    import torch

    size = getattr(torch, dtype_name).itemsize
    return sum(t.numel for t in d.by_canonical().values()) * size


def load_models(specs, target=None, dtype=None, token=None, device=None):
    """The drafters, checked against each other's needs and the target, loaded on ``device``
    (after checking that they fit there)."""
    import torch

    from weightcheck.eval import device as device_mod
    from weightcheck.eval.forward import Eagle3Drafter, engine_dtype
    from weightcheck.model.drafter import load_drafter

    device = device or torch.device("cpu")
    loaded = []
    for spec in specs:
        d = load_drafter(spec, token=token)
        if d.looks_like_target:
            raise WeightcheckError(spec, d.target_said())
        loaded.append((spec, d))
    needed = {spec: _weights_bytes(d, dtype or engine_dtype(d.normalized)) for spec, d in loaded}
    # the target's head is on the GPU already (TargetSide checked it); its embedding goes there
    # only for a drafter without its own
    takes_embed = any("embed_tokens.weight" not in d.by_canonical() for _, d in loaded)
    if target is not None and takes_embed and target.embed_bytes:
        needed[f"{target.spec} {target.embed.rec.name}"] = target.embed_bytes
    device_mod.check_fits(device, needed, specs[0] if len(specs) == 1 else ", ".join(specs))
    models = []
    for spec, d in loaded:
        embed = target.embed if target is not None else None
        m = Eagle3Drafter(d, dtype=dtype, embed=embed, device=device)
        if not m.has_embed:
            raise WeightcheckError(
                spec,
                "has no embed_tokens (the engines take the target's): give --target"
                + (" (the target has no embedding either)" if target is not None else ""),
            )
        if m.d2t_targets is not None and m.d2t_targets.numel() != m.lm_head.shape[0]:
            raise WeightcheckError(
                spec,
                f"d2t maps {m.d2t_targets.numel()} draft ids, lm_head has "
                f"{m.lm_head.shape[0]} rows",
            )
        if target is not None:
            check_target(m, target)
        models.append(m)
    emb = target.embed if target is not None else None
    if emb is not None and emb.on_gpu and any(m.embed_from == "target" for m in models):
        emb.load()  # there now, not in the first batch
    return models


def headline(r: dict):
    """(tau, its 95% interval or None) of one drafter's result that ranks it and predicts its
    speed: the acceptance length walked cycle by cycle as an engine drafts — the engines' own
    count, which vLLM's counters matched within 0.5% where the expected tau was 26% off
    (docs/eval.md §6) — else, with no cycle walked, the expected one."""
    w = r.get("walked") or {}
    if w.get("tau") is not None:
        return w["tau"], w.get("tau_interval")
    return r.get("tau"), (r.get("interval") or {}).get("tau")


def select(available: int, limit: int | None, sample: int | None, seed: int) -> list[int]:
    """The files evaluated: all, the first ``limit``, or ``sample`` drawn at random for
    ``seed`` — the ones whose keyed hash of (seed, index) is smallest, so that a draw is the
    same on every machine and Python version, and a larger draw holds a smaller one."""
    import hashlib

    if sample is None:
        return list(range(available if limit is None else min(limit, available)))
    if sample >= available:
        return list(range(available))

    def key(i: int) -> bytes:
        return hashlib.blake2b(f"{seed}:{i}".encode(), digest_size=8).digest()

    return sorted(sorted(range(available), key=key)[:sample])


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: ``result`` is the report of the samples evaluated before it."""

    def __init__(self, result: dict):
        super().__init__()
        self.result = result


def evaluate(
    drafters,
    data: str,
    target: str | None = None,
    steps: int = 3,
    limit: int | None = None,
    dtype: str | None = None,
    token: str | None = None,
    progress=None,
    bootstrap: int = metric.BOOTSTRAP,
    seed: int = metric.SEED,
    device: str | None = None,
    sample: int | None = None,
    sample_seed: int = 0,
    batch_positions: int | None = None,
    loss_mask: str | None = None,
) -> dict:
    """The report: per drafter, per step accuracies and the acceptance lengths, for the
    samples selected (``limit``: the first N; ``sample``: N drawn for ``sample_seed``), computed
    on ``device`` (``auto``: a GPU when torch sees one). Ctrl-C raises :class:`Interrupted`
    with the report of what was evaluated, or KeyboardInterrupt when nothing was. ``loss_mask``:
    speculators' preprocessed dataset (its ``loss_mask`` column) for files moved away from it."""
    from weightcheck.eval import loop, readahead

    if steps < 1:
        raise WeightcheckError(None, f"--steps {steps}: at least 1")
    loop.PHASES.clear()
    loop.mark("start")
    ds = open_data(data, loss_mask)
    chosen = select(len(ds.files), limit, sample, sample_seed)
    # with a read-ahead mode on (readahead.MODE), the disk starts now, while torch is imported
    # and the weights are loaded: torch's libraries first, then the data
    ahead = readahead.ReadAhead(
        [ds.files[i] for i in chosen],
        ranges=ahead_ranges(ds, need_last=target is not None),
        first=readahead.libraries(),
    )
    loop.mark("files listed, read ahead")
    try:
        from weightcheck.eval import device as device_mod

        dev = device_mod.resolve(device)
        loop.mark("torch imported, device")
        tgt = None
        if target is not None:
            from weightcheck.eval.target import TargetSide

            tgt = TargetSide(target, dtype=dtype, token=token, device=dev)
        models = load_models(drafters, tgt, dtype, token, dev)
        loop.mark("weights loaded")
        counts, interrupted = _pass(ds, chosen, models, tgt, steps, dev, progress,
                                    batch_positions, ahead)  # fmt: skip
    finally:
        ahead.close()
        if ahead.first_done is not None:
            loop.PHASES.append((f"libraries read ahead ({ahead.first_bytes / 1e9:.2f} GB)",
                                ahead.first_done))  # fmt: skip
        if ahead.finished is not None:
            loop.PHASES.append((f"read ahead done ({ahead.bytes / 1e9:.2f} GB)", ahead.finished))
    done = len(counts[0].cond_num)
    data_info = {
        "path": data,
        "format": ds.format,
        "files": done,
        "note": ds.note,
        "loss_mask": ds.mask,
        "loss_mask_from": ds.mask_from,
        "available": len(ds.files),
        "selection": "sample" if sample is not None else ("limit" if limit else "all"),
        "seed": sample_seed if sample is not None else None,
        "asked": sample if sample is not None else limit,
        "interrupted": interrupted,
    }
    out = _report(models, counts, tgt, data_info, steps, device_mod.describe(dev), bootstrap, seed)
    loop.mark("report")
    if interrupted:
        raise Interrupted(out)
    return out


def ahead_ranges(ds, need_last: bool):
    """What readahead.py reads of each file: SpecForge's without the last hidden state when it is
    not used (no --target), else the whole file."""
    if need_last or ds.format != "specforge":
        return None
    from weightcheck.eval.data import ckpt_ranges

    return ckpt_ranges


def _pass(ds, chosen, models, tgt, steps, dev, progress, batch_positions, ahead):
    """(the counts, interrupted) of the pass over the data; Ctrl-C keeps what every drafter has
    (KeyboardInterrupt when that is nothing)."""
    import torch

    from weightcheck.eval.loop import run_batches

    if dev.type != "cpu":
        import gc

        from weightcheck.eval import upload
        from weightcheck.eval.forward import release_maps

        upload.close()
        gc.collect()
        release_maps()
    counts = [metric.Counts(steps) for _ in models]
    with torch.inference_mode():
        try:
            run_batches(ds, chosen, models, tgt, counts, steps, dev, progress, batch_positions,
                        ahead)  # fmt: skip
        except KeyboardInterrupt:
            kept = min(len(c.cond_num) for c in counts)  # what every drafter has
            for c in counts:
                c.truncate(kept)
            if not kept:
                raise
            return counts, True
    return counts, False


def _report(models, counts, tgt, data_info, steps, device, bootstrap, seed) -> dict:
    results = []
    for m, c in zip(models, counts):
        r = metric.summarize(c, bootstrap=bootstrap, seed=seed)
        r.update(
            {
                "drafter": m.label,
                "dialect": m.d.dialect,
                "dtype": m.dtype_name,
                "embed_from": m.embed_from,
                "draft_vocab": int(m.lm_head.shape[0]),
            }
        )
        results.append(r)
    order = sorted(range(len(results)), key=lambda j: -(headline(results[j])[0] or 0))
    for rank, j in enumerate(order, 1):
        results[j]["rank"] = rank
    return {
        "data": data_info,
        "target": (
            {"spec": tgt.label, "vocab": tgt.vocab, "hidden": tgt.hidden, "dtype": tgt.dtype_name}
            if tgt is not None
            else None
        ),
        "reference": "target top-1" if tgt is not None else "next data token (no --target)",
        "device": device,
        "steps": steps,
        "drafters": results,
    }
