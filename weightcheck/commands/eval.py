"""``weightcheck eval DRAFTER [DRAFTER ...] --hidden-states DATA``: how well each drafter predicts
the target on saved hidden states (weightcheck/eval/, docs/eval.md). Its own text and JSON
rendering live here until the renderer takes them over."""

from __future__ import annotations

import json
import sys

import click

from weightcheck.errors import UsageError


def _progress():
    """A progress line on stderr when it is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(i, n):
        click.echo(f"\rweightcheck eval: {i}/{n} samples", err=True, nl=i == n)

    return show


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x, nd=2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


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
    """Adds the break-even acceptance length and each drafter's predicted tok/s (docs/eval.md §4)."""
    from weightcheck.eval.metric import break_even, predicted_tps

    if not check_speed(baseline_tps, cycle_ms, draft_ms):
        return
    d = draft_ms or 0.0
    report["speed"] = {
        "baseline_tps": baseline_tps,
        "cycle_ms": cycle_ms,
        "draft_ms": d,
        "break_even_tau": break_even(baseline_tps, cycle_ms, d),
    }
    for r in report["drafters"]:
        tau = r["tau"]
        r["predicted_tps"] = predicted_tps(tau, cycle_ms, d) if tau is not None else None
        iv = (r.get("interval") or {}).get("tau")
        r["predicted_tps_interval"] = [predicted_tps(x, cycle_ms, d) for x in iv] if iv else None
        r["speedup"] = r["predicted_tps"] / baseline_tps if r["predicted_tps"] else None


def text(report: dict) -> str:
    lines = []
    data = report["data"]
    lines.append(f"data: {data['path']} ({data['format']}, {data['files']} samples)")
    if data.get("note"):
        lines.append(f"  note: {data['note']}")
    t = report["target"]
    lines.append(
        f"target: {t['spec']} (vocab {t['vocab']}, hidden {t['hidden']}, {t['dtype']})"
        if t
        else "target: none — the data's next token stands for the target's top-1"
    )
    K = report["steps"]
    sp = report.get("speed")
    for r in sorted(report["drafters"], key=lambda r: r["rank"]):
        lines.append("")
        lines.append(
            f"#{r['rank']} {r['drafter']} ({r['dialect']}, {r['dtype']}, draft vocab "
            f"{r['draft_vocab']}, embedding from {r['embed_from']})"
        )
        rows = [("step", "acc | accepted prefix", "95% interval", "trained acc (SpecForge acc_k)")]
        for s in r["steps"]:
            iv = s.get("acc_interval")
            rows.append(
                (
                    str(s["step"]),
                    f"{_pct(s['acc'])} ({s['hits']}/{s['given']})",
                    f"{_pct(iv[0])} - {_pct(iv[1])}" if iv else "-",
                    f"{_pct(s['trained_acc'])} ({s['trained_hits']}/{s['trained_valid']})",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        iv = (r.get("interval") or {}).get("tau")
        ivs = f" (95% interval {_num(iv[0])}-{_num(iv[1])})" if iv else " (one sample: no interval)"
        lines.append(f"  expected acceptance length, {K}-step chain: {_num(r['tau'])}{ivs}")
        if r.get("data_agreement") is not None and r["data_agreement"] < 1:
            lines.append(
                f"  the data's next token is the target's top-1 at {_pct(r['data_agreement'])} "
                "of positions (prefixes are followed only where it is)"
            )
        if sp:
            lines.append(
                f"  predicted {_num(r['predicted_tps'], 1)} tok/s vs baseline "
                f"{_num(sp['baseline_tps'], 1)} (x{_num(r['speedup'])})"
            )
    if sp:
        lines.append("")
        lines.append(
            f"break-even acceptance length: {_num(sp['break_even_tau'])} "
            f"(= {sp['baseline_tps']:g} tok/s x ({sp['cycle_ms']:g} ms verify + "
            f"{sp['draft_ms']:g} ms draft) / 1000)"
        )
    return "\n".join(lines)


@click.command("eval")
@click.argument("drafters", nargs=-1, required=True, metavar="DRAFTER [DRAFTER ...]")
@click.option(
    "--hidden-states",
    "data",
    required=True,
    metavar="DATA",
    help="SpecForge offline hidden states (rows_*/data_<i>.ckpt[.gz]) or speculators' "
    "hs_<i>.safetensors folder.",
)
@click.option(
    "--target",
    default=None,
    metavar="TARGET",
    help="The target (folder or Hub id): its lm_head, final norm and embedding are read by "
    "ranges. Without it the data's next token stands for the target's top-1.",
)
@click.option("--steps", "-k", default=3, show_default=True, type=int, help="Chain length K.")
@click.option("--limit", default=None, type=int, help="Read at most N samples.")
@click.option(
    "--dtype",
    default=None,
    type=click.Choice(["float32", "bfloat16", "float16"]),
    help="Compute dtype (default: the config's, as the engine builds it).",
)
@click.option("--baseline-tps", type=float, default=None, help="Tok/s without speculation.")
@click.option("--cycle-ms", type=float, default=None, help="One verify cycle, in ms.")
@click.option("--draft-ms", type=float, default=None, help="Drafting time per cycle, in ms.")
@click.option("--token", envvar="HF_TOKEN", default=None, help="Hugging Face token.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default=None)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def eval_command(
    drafters,
    data,
    target,
    steps,
    limit,
    dtype,
    baseline_tps,
    cycle_ms,
    draft_ms,
    token,
    fmt,
    as_json,
):
    """How well each DRAFTER predicts the target: per-step accuracy and expected acceptance
    length, from saved hidden states, on a CPU (needs torch). Several drafters are ranked."""
    if fmt == "text" and as_json:
        raise UsageError(None, "--format text and --json ask for two output formats: choose one")
    if limit is not None and limit < 1:
        raise UsageError(None, f"--limit {limit}: at least 1")
    check_speed(baseline_tps, cycle_ms, draft_ms)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError(
            None, "eval runs the drafter: it needs torch (pip install torch)"
        ) from None
    from weightcheck.eval.run import evaluate

    report = evaluate(
        list(drafters),
        data,
        target=target,
        steps=steps,
        limit=limit,
        dtype=dtype,
        token=token,
        progress=_progress(),
    )
    speed(report, baseline_tps, cycle_ms, draft_ms)
    if as_json or fmt == "json":
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(text(report))
