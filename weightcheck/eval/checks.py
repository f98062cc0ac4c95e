"""What eval checks before it computes: a sample against a drafter (and the target), a target
against a drafter — each mismatch one line naming the file (docs/eval.md §5)."""

from __future__ import annotations

from weightcheck.errors import WeightcheckError


def check_sample(s, m, tgt) -> None:
    """The sample fits the drafter (and the target): one line naming the file otherwise."""
    w = int(s.aux.shape[1])
    T_data = s.hidden if s.hidden is not None else (w // s.n_aux if s.n_aux else m.T)
    if T_data != m.T:
        raise WeightcheckError(
            s.file,
            f"hidden size {T_data} (the target's last hidden state is [{s.aux.shape[0]}, "
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


def check_target(m, tgt) -> None:
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
