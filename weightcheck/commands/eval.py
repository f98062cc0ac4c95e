"""``weightcheck eval DRAFTER [DRAFTER ...] --hidden-states DATA``: how well each drafter predicts
the target on saved hidden states (weightcheck/eval/, docs/eval.md): the options checked, the
evaluation run, the speed arithmetic added, the report (reports/eval.py) returned. torch is
imported only once the options check out (by evaluate, once the data's files are listed and being
read ahead)."""

from __future__ import annotations

import sys

from weightcheck.errors import UsageError
from weightcheck.eval.metric import break_even, predicted_tps
from weightcheck.eval.run import Interrupted, evaluate, headline
from weightcheck.progress import Progress
from weightcheck.reports.eval import EvalInterrupted, EvalReport
from weightcheck.requests import EvalRequest
from weightcheck.storage.header import TORCH_NAMES, dtype_option


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


def run(req: EvalRequest) -> EvalReport:
    """``eval`` as ``req`` asks it: the options checked (before torch is imported or anything
    read), the drafters evaluated, the speed arithmetic added: the report. Ctrl-C:
    :class:`EvalInterrupted` carrying the report of what was evaluated (KeyboardInterrupt when
    nothing was)."""
    if req.limit is not None and req.limit < 1:
        raise UsageError(None, f"--limit {req.limit}: at least 1")
    if req.sample is not None and req.sample < 1:
        raise UsageError(None, f"--sample {req.sample}: at least 1")
    if req.limit is not None and req.sample is not None:
        raise UsageError(None, "--limit and --sample: give one (the first N, or N at random)")
    speeds = (req.baseline_tps, req.cycle_ms, req.draft_ms)
    with_speed = check_speed(*speeds)
    if not _has_torch():  # imported by evaluate, once the data's files are listed
        raise UsageError(
            None, "eval runs the drafter: it needs torch: pip install 'weightcheck[torch]'"
        )
    bar = Progress("eval", stream=sys.stderr, unit="pos") if req.progress else None
    try:
        report = evaluate(
            req.drafters,
            req.hidden_states,
            target=req.target,
            loss_mask=req.loss_mask,
            steps=req.steps,
            limit=req.limit,
            sample=req.sample,
            sample_seed=req.seed,
            device=req.device,
            dtype=TORCH_NAMES[dtype_option(req.dtype)] if req.dtype else None,
            token=req.token,
            progress=bar.step if bar is not None and bar.enabled else None,
        )
    except Interrupted as stop:
        report = stop.result
        if with_speed:
            speed(report, *speeds)
        raise EvalInterrupted(EvalReport.from_dict(report)) from None
    finally:
        if bar is not None:
            bar.close()
    if with_speed:
        speed(report, *speeds)
    return EvalReport.from_dict(report)
