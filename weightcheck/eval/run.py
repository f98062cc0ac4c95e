"""``evaluate``: several drafters, one pass over the data, the target's top-1 computed once per
sample; every mismatch between data, drafter and target said in one line naming the file."""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.eval import metric
from weightcheck.eval.data import open_data


def _check_sample(s, m, tgt) -> None:
    """The sample fits the drafter (and the target): one line naming the file otherwise."""
    T_data = int(s.last.shape[1])
    w = int(s.aux.shape[1])
    if T_data != m.T:
        raise WeightcheckError(
            s.file,
            f"hidden size {T_data} (the target's last hidden state is [{s.last.shape[0]}, "
            f"{T_data}]), {m.label} expects target hidden size {m.T}",
        )
    n_data = s.n_aux if s.n_aux is not None else (w // T_data if w % T_data == 0 else None)
    if n_data is None:
        raise WeightcheckError(
            s.file,
            f"aux hidden states are {w} wide, not a multiple of the hidden size {T_data}",
        )
    if n_data != m.n_aux:
        raise WeightcheckError(
            s.file,
            f"{n_data} aux hidden states of {T_data} ({w} wide), {m.label}'s fc expects "
            f"{m.n_aux} ({m.n_aux * m.T} wide)",
        )
    if s.input_ids.numel():
        top = int(s.input_ids.max())
        low = int(s.input_ids.min())
        if top >= m.V or low < 0:
            bad = top if top >= m.V else low
            raise WeightcheckError(
                s.file, f"token id {bad} is outside {m.label}'s vocabulary of {m.V}"
            )
    if tgt is not None and tgt.hidden != T_data:
        raise WeightcheckError(
            s.file,
            f"hidden size {T_data}, the target {tgt.label}'s lm_head is "
            f"[{tgt.vocab}, {tgt.hidden}]",
        )


def _check_target(m, tgt) -> None:
    if tgt.vocab != m.V:
        raise WeightcheckError(
            tgt.label,
            f"target vocabulary {tgt.vocab} ({tgt.head.rec.name} is [{tgt.vocab}, "
            f"{tgt.hidden}]), {m.label}'s is {m.V} (its t2d / vocab_size)",
        )
    if tgt.hidden != m.T:
        raise WeightcheckError(
            tgt.label,
            f"target hidden size {tgt.hidden} ({tgt.head.rec.name}), {m.label} expects "
            f"target hidden size {m.T}",
        )


def load_models(specs, target=None, dtype=None, token=None):
    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.model.drafter import load_drafter

    models = []
    for spec in specs:
        d = load_drafter(spec, token=token)
        if d.looks_like_target:
            raise WeightcheckError(spec, d.target_said())
        m = Eagle3Drafter(d, dtype=dtype, embed=target.embed if target is not None else None)
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
            _check_target(m, target)
        models.append(m)
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
) -> dict:
    """The report: per drafter, per step accuracies and the expected acceptance length."""
    import torch

    if steps < 1:
        raise WeightcheckError(None, f"--steps {steps}: at least 1")
    ds = open_data(data)
    tgt = None
    if target is not None:
        from weightcheck.eval.target import TargetSide

        tgt = TargetSide(target, dtype=dtype, token=token)
    models = load_models(drafters, tgt, dtype, token)
    counts = [metric.Counts(steps) for _ in models]
    total = len(ds.files) if limit is None else min(limit, len(ds.files))
    with torch.inference_mode():
        for i, s in enumerate(ds.samples(limit)):
            for m in models:
                _check_sample(s, m, tgt)
            if tgt is not None:
                ref = tgt.top1(s.last, s.last_normed, s.file)
            else:  # the data's own next token stands for the target's top-1
                ref = torch.cat((s.input_ids[1:], s.input_ids.new_full((1,), -1)))
            for m, c in zip(models, counts):
                preds = m.unroll(s.aux, s.input_ids, steps)
                c.add_sample(preds, ref, s.input_ids, s.loss_mask)
            if progress is not None:
                progress(i + 1, total)
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
        "data": {"path": data, "format": ds.format, "files": total, "note": ds.note},
        "target": (
            {"spec": tgt.label, "vocab": tgt.vocab, "hidden": tgt.hidden, "dtype": tgt.dtype_name}
            if tgt is not None
            else None
        ),
        "reference": "target top-1" if tgt is not None else "next data token (no --target)",
        "steps": steps,
        "drafters": results,
    }
