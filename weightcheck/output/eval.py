"""eval's document: the data and the target; per drafter, best first, its steps' accuracies, the
expected acceptance length, the one walked as an engine drafts and (with the speed options) the
predicted tokens per second."""

from __future__ import annotations

from weightcheck.output.blocks import Blank, Fields, Line, Table, Title
from weightcheck.reports.eval import EvalDrafter, EvalReport


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, nd=2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _data_line(data) -> str:
    """``PATH (specforge, 8 samples)``, with what was selected and whether it was cut short."""
    n, have = data.files, data.available or data.files
    if data.selection == "sample" and data.asked is not None and data.asked >= have:
        what = f"all {have} samples: --sample {data.asked} asks for more than there are"
    elif data.selection == "sample":
        what = f"{data.asked} of {have} samples drawn at random: --sample {data.asked} "
        what += f"--seed {data.seed}"
    elif data.selection == "limit" and (data.asked or 0) < have:
        what = f"the first {data.asked} of {have} samples: --limit {data.asked}"
    else:
        what = f"{have} sample" + ("" if have == 1 else "s")
    if data.interrupted:
        what += f"; interrupted: the {n} evaluated before it"
    return f"{data.path} ({data.format}, {what})"


def eval_document(r: EvalReport) -> list:
    data, t = r.data, r.target
    head = [("data", _data_line(data))]
    if data.note:
        head.append(("note", data.note))
    head.append(
        (
            "target",
            f"{t.spec} (vocab {t.vocab}, hidden {t.hidden}, {t.dtype})"
            if t
            else "none — the data's next token stands for the target's top-1",
        )
    )
    head.append(("device", r.device))
    blocks = [Title("weightcheck eval"), Fields(head), Blank()]
    for d in r.ranked:
        blocks += _drafter(d, r) + [Blank()]
    if r.speed:
        sp = r.speed
        blocks.append(
            Line(
                f"break-even acceptance length: {_num(sp.break_even_tau)} "
                f"(= {sp.baseline_tps:g} tok/s x ({sp.cycle_ms:g} ms verify + "
                f"{sp.draft_ms:g} ms draft) / 1000)"
            )
        )
    return blocks


def _rate_interval(s, iv) -> str:
    if not s.given:
        return "-"
    if s.acc_interval is None:
        return f"too few positions (< {iv.min_positions})"
    lo, hi = s.acc_interval
    return f"{_pct(lo)} - {_pct(hi)}"


def _length_interval(value, interval, d: EvalDrafter) -> str:
    """The parenthesis after an acceptance length: its interval, or why there is none."""
    if interval:
        return f"95% interval {_num(interval[0])}-{_num(interval[1])}"
    if value is None:
        return "no position reached every step"
    n = d.samples
    need = d.interval.min_sequences
    return f"too few sequences for an interval: {n} < {need}"


def _drafter(d: EvalDrafter, r: EvalReport) -> list:
    out = [
        Line(
            f"#{d.rank} {d.drafter} ({d.dialect}, {d.dtype}, draft vocab {d.draft_vocab}, "
            f"embedding from {d.embed_from})"
        )
    ]
    rows = []
    for s in d.steps:
        rows.append(
            (
                str(s.step),
                f"{_pct(s.acc)} ({s.hits}/{s.given})",
                _rate_interval(s, d.interval),
                f"{_pct(s.trained_acc)} ({s.trained_hits}/{s.trained_valid})",
            )
        )
    out.append(
        Table(
            ["step", "acc | accepted prefix", "95% interval", "trained acc (SpecForge acc_k)"], rows
        )
    )
    ivs = _length_interval(d.tau, d.interval.tau, d)
    out.append(
        Line(f"expected acceptance length, {r.steps}-step chain: {_num(d.tau)} ({ivs})", wrap=True)
    )
    w = d.walked
    steps = "/".join(str(k) for k in range(len(w.accepted_per_step)))
    out.append(
        Line(
            f"acceptance length walked cycle by cycle, as an engine drafts: {_num(w.tau)} "
            f"({_length_interval(w.tau, w.tau_interval, d)}; {w.cycles} cycles, drafts accepted at "
            f"step {steps}: {'/'.join(str(x) for x in w.accepted_per_step)})",
            wrap=True,
        )
    )
    if d.data_agreement is not None and d.data_agreement < 1:
        out.append(
            Line(
                f"the data's next token is the target's top-1 at {_pct(d.data_agreement)} "
                "of positions (prefixes are followed only where it is)",
                wrap=True,
            )
        )
    if r.speed:
        out.append(
            Line(
                f"predicted {_num(d.predicted_tps, 1)} tok/s vs baseline "
                f"{_num(r.speed.baseline_tps, 1)} (x{_num(d.speedup)}), at the "
                + ("walked" if d.walked.tau is not None else "expected")
                + " length"
            )
        )
    return out
