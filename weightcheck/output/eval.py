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


def eval_document(r: EvalReport) -> list:
    data, t = r.data, r.target
    head = [("data", f"{data.path} ({data.format}, {data.files} samples)")]
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


def _drafter(d: EvalDrafter, r: EvalReport) -> list:
    out = [
        Line(
            f"#{d.rank} {d.drafter} ({d.dialect}, {d.dtype}, draft vocab {d.draft_vocab}, "
            f"embedding from {d.embed_from})"
        )
    ]
    rows = []
    for s in d.steps:
        iv = s.acc_interval
        rows.append(
            (
                str(s.step),
                f"{_pct(s.acc)} ({s.hits}/{s.given})",
                f"{_pct(iv[0])} - {_pct(iv[1])}" if iv else "-",
                f"{_pct(s.trained_acc)} ({s.trained_hits}/{s.trained_valid})",
            )
        )
    out.append(
        Table(
            ["step", "acc | accepted prefix", "95% interval", "trained acc (SpecForge acc_k)"], rows
        )
    )
    iv = (d.interval or {}).get("tau")
    ivs = f" (95% interval {_num(iv[0])}-{_num(iv[1])})" if iv else " (one sample: no interval)"
    out.append(Line(f"expected acceptance length, {r.steps}-step chain: {_num(d.tau)}{ivs}"))
    w = d.walked
    wiv = w.tau_interval
    wivs = f"95% interval {_num(wiv[0])}-{_num(wiv[1])}; " if wiv else ""
    steps = "/".join(str(k) for k in range(len(w.accepted_per_step)))
    out.append(
        Line(
            f"acceptance length walked cycle by cycle, as an engine drafts: {_num(w.tau)} "
            f"({wivs}{w.cycles} cycles, drafts accepted at step {steps}: "
            f"{'/'.join(str(x) for x in w.accepted_per_step)})",
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
