"""``weightcheck eval DRAFTER [DRAFTER ...] --hidden-states DATA``: how well each drafter predicts
the target on saved hidden states (weightcheck/eval/, docs/eval.md): the options checked, the
evaluation run, the speed arithmetic added, the report (reports/eval.py) returned. torch is
imported only once the options check out (by evaluate, once the data's files are listed and being
read ahead)."""

from __future__ import annotations

from weightcheck.errors import UsageError
from weightcheck.eval.metric import break_even, predicted_tps
from weightcheck.eval.run import Interrupted, evaluate, headline
from weightcheck.reports.eval import EvalInterrupted, EvalReport


def check_speed(baseline_tps, cycle_ms, draft_ms) -> bool:
    """Whether the speed options are given (both or neither; positive), before any work."""
    if baseline_tps is None and cycle_ms is None:
        if draft_ms is not None:
            raise UsageError(None, "--draft-ms needs --baseline-tps and --cycle-ms")
        return False
    if baseline_tps is None or cycle_ms is None:
        raise UsageError(None, "--baseline-tps and --cycle-ms go together")
    if baseline_tps <= 0 or cycle_ms <= 0 or (draft_ms or 0) < 0:
        raise UsageError(None, "--baseline-tps and --cycle-ms must be positive, --draft-ms >= 0")
    return True


def speed(report: dict, baseline_tps, cycle_ms, draft_ms) -> None:
    """Adds the break-even acceptance length and each drafter's predicted tok/s (docs/eval.md §4);
    the options were checked by :func:`check_speed`."""
    d = draft_ms or 0.0
    report["speed"] = {
        "baseline_tps": baseline_tps,
        "cycle_ms": cycle_ms,
        "draft_ms": d,
        "break_even_tau": break_even(baseline_tps, cycle_ms, d),
    }
    for r in report["drafters"]:
        tau, iv = headline(r)  # the walked acceptance length (docs/eval.md §4)
        r["predicted_tps"] = predicted_tps(tau, cycle_ms, d) if tau is not None else None
        r["predicted_tps_interval"] = [predicted_tps(x, cycle_ms, d) for x in iv] if iv else None
        r["speedup"] = r["predicted_tps"] / baseline_tps if r["predicted_tps"] else None


def _has_torch() -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["torch"] is None
        return False


def run(
    drafters: list[str],
    data: str,
    *,
    target: str | None = None,
    steps: int = 3,
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    device: str | None = None,
    dtype: str | None = None,
    token: str | None = None,
    baseline_tps: float | None = None,
    cycle_ms: float | None = None,
    draft_ms: float | None = None,
    progress=None,
) -> EvalReport:
    """The options checked (before torch is imported or anything read), the drafters evaluated,
    the speed arithmetic added: the report. Ctrl-C: :class:`EvalInterrupted` carrying the report
    of what was evaluated (KeyboardInterrupt when nothing was)."""
    if limit is not None and limit < 1:
        raise UsageError(None, f"--limit {limit}: at least 1")
    if sample is not None and sample < 1:
        raise UsageError(None, f"--sample {sample}: at least 1")
    if limit is not None and sample is not None:
        raise UsageError(None, "--limit and --sample: give one (the first N, or N at random)")
    with_speed = check_speed(baseline_tps, cycle_ms, draft_ms)
    if not _has_torch():  # imported by evaluate, once the data's files are listed
        raise UsageError(
            None, "eval runs the drafter: it needs torch: pip install 'weightcheck[torch]'"
        )

    try:
        report = evaluate(
            list(drafters),
            str(data),
            target=None if target is None else str(target),
            steps=steps,
            limit=limit,
            sample=sample,
            sample_seed=seed,
            device=device,
            dtype=dtype,
            token=token,
            progress=progress,
        )
    except Interrupted as stop:
        report = stop.result
        if with_speed:
            speed(report, baseline_tps, cycle_ms, draft_ms)
        raise EvalInterrupted(EvalReport.from_dict(report)) from None
    if with_speed:
        speed(report, baseline_tps, cycle_ms, draft_ms)
    return EvalReport.from_dict(report)
