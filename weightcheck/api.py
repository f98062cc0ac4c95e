"""The Python API: the commands as functions returning typed results, for a training script or a
pipeline that gates itself without a subprocess.

    import weightcheck

    result = weightcheck.check("./drafter", engine="sglang", target="org/target")
    if not result.ok:
        for f in result.errors:
            print(f.code, f.subject, f.message)
        raise SystemExit(result.exit_status)

Each result is the command's report (weightcheck/reports/): typed fields for what a caller
tests, ``to_dict()`` (``result.report``) and ``to_json()`` what ``--json`` prints, the schema
weightcheck/schemas/<command>.json. Bad input raises
:class:`weightcheck.WeightcheckError` (the CLI's exit status 2), with ``where`` (the file) and
``message``. Nothing here prints, exits or touches the terminal unless ``progress=True``.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from weightcheck import _API
from weightcheck.errors import WeightcheckError
from weightcheck.reports.pages import CleanReport, KeptEntry, RuleList
from weightcheck.rules.base import Finding  # noqa: F401 (exported: weightcheck.Finding)

if TYPE_CHECKING:  # the annotations' names; at run time each is resolved by __getattr__ below
    from weightcheck.reports.check import CheckReport as CheckResult
    from weightcheck.reports.compare import CompareReport as CompareResult
    from weightcheck.reports.convert import ConvertReport as ConvertResult
    from weightcheck.reports.eval import EvalReport as EvalResult
    from weightcheck.reports.inspect import InspectReport as InspectResult
    from weightcheck.reports.pages import CleanReport, RuleList, RulePage

__all__ = [*_API, "WeightcheckError"]  # the names the package exports from here

# The results are the reports (weightcheck/reports/), under the names the API has had since 0.1.
# Each command's report module is imported when its command runs or its name is first asked for:
# a command does not build the other commands' report classes (start-up, BENCHMARKS.md).
_RESULTS = {
    "InspectResult": ("inspect", "InspectReport"),
    "CompareResult": ("compare", "CompareReport"),
    "CheckResult": ("check", "CheckReport"),
    "ConvertResult": ("convert", "ConvertReport"),
    "CleanResult": ("pages", "CleanReport"),
    "EvalResult": ("eval", "EvalReport"),
}


def __getattr__(name: str):
    if name in _RESULTS:
        module, cls = _RESULTS[name]
        return getattr(importlib.import_module(f"weightcheck.reports.{module}"), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# =============================================================================================
def inspect(src: str | os.PathLike, **options) -> InspectResult:
    """What is in a checkpoint: dialect, architecture, config, tensors. ``options``: the fields
    of :class:`weightcheck.requests.InspectRequest` (``revision``, ``token``, ``mapping``)."""
    from weightcheck.commands import inspect as inspect_mod  # each command's, when it runs
    from weightcheck.requests import InspectRequest

    return inspect_mod.run(InspectRequest(src=src, **options))


def compare(a: str | os.PathLike, b: str | os.PathLike, **options) -> CompareResult:
    """Are two drafters the same model? ``verdict``: identical, compatible or incompatible.
    ``options``: the fields of :class:`weightcheck.requests.CompareRequest` (``revision_a``,
    ``revision_b``, ``values``, ``strict``, ``token``, ``progress``)."""
    from weightcheck.commands import compare as compare_mod  # imports the engines
    from weightcheck.requests import CompareRequest

    return compare_mod.run(CompareRequest(a=a, b=b, **options))


def check(src: str | os.PathLike, **options) -> CheckResult:
    """The gate: every rule, and with ``engine`` (``"sglang"``, ``"vllm"``,
    ``"sglang==0.5.11"``) the engine's own view. ``result.ok`` is False when a finding is an
    error. ``options``: the fields of :class:`weightcheck.requests.CheckRequest` — ``engine``,
    ``target``, ``training_config``, ``allow_partial_init``, ``trainer``, ``training_vocab``,
    ``values``, ``live`` (needs ``engine``, torch and the engine installed: the installed
    engine's own loader on meta tensors, the report's ``live``), ``revision``, ``token``,
    ``progress``; an unknown one is a TypeError naming it."""
    from weightcheck.commands import check as check_mod  # imports the engines
    from weightcheck.requests import CheckRequest

    return check_mod.run(CheckRequest(src=src, **options))


def convert(src: str | os.PathLike, out: str | os.PathLike, **options) -> ConvertResult:
    """Write SRC in the layout ``to`` reads (``sglang``, ``vllm``, ``speculators``), every byte
    verified before OUT appears. ``options``: the fields of
    :class:`weightcheck.requests.ConvertRequest` (``to`` required); ``progress``: a callable
    given the bytes written, or True for a progress line on a terminal.

    Gated by check (``check=True``): the planned output goes through check's rules for each
    engine that reads ``to``; an error refuses (``refused``, exit status 1, nothing written)
    unless ``allow_errors``. ``check=False`` skips the gate (``report["check"]`` is None)."""
    from weightcheck.commands.convert import run as convert_run  # imports the engines
    from weightcheck.requests import ConvertRequest

    return convert_run.run(ConvertRequest(src=src, out=out, **options))


def evaluate(drafters, hidden_states: str | os.PathLike, **options) -> EvalResult:
    """``weightcheck eval``: how well each drafter (a spec, or a list of them) predicts the
    target on saved hidden states — per-step accuracy, the expected acceptance length ``tau`` of
    a ``steps``-token chain and the one ``walked`` cycle by cycle as an engine drafts, ranked;
    with ``baseline_tps`` and ``cycle_ms`` the predicted tokens per second. ``options``: the
    fields of :class:`weightcheck.requests.EvalRequest` (``target``, ``loss_mask``: speculators'
    preprocessed dataset for hs_<i> files moved away from it, ``steps``, ``limit``: the
    first N samples; ``sample``: N drawn at random for ``seed``; ``device``: ``auto`` (None: a
    GPU when torch sees one), ``cpu``, ``cuda`` or ``cuda:N``; ``dtype``, ``baseline_tps``,
    ``cycle_ms``, ``draft_ms``, ``token``, ``progress``). Needs torch (``pip install
    "weightcheck[torch]"``). Ctrl-C raises ``EvalInterrupted`` (a KeyboardInterrupt) whose
    ``report`` covers what was evaluated."""
    from weightcheck.commands import eval as eval_mod
    from weightcheck.requests import EvalRequest

    return eval_mod.run(EvalRequest(drafters=drafters, hidden_states=hidden_states, **options))


def clean(folder: str | os.PathLike = ".") -> CleanReport:
    """Remove what killed converts left in ``folder`` (``.OUT.weightcheck-tmp-PID``), never a
    leftover of a process still alive; an OUT a killed ``--force`` had set aside is restored."""
    from weightcheck.commands.convert import publish  # imports the engines

    folder = str(folder)
    if not os.path.isdir(folder):
        raise WeightcheckError(folder, "not a folder")
    r = publish.clean(folder)
    return CleanReport(
        folder=r["folder"],
        removed=tuple(r["removed"]),
        kept_entries=[KeptEntry(k["name"], k["pid"]) for k in r["kept"]],
    )


def rule(code: str) -> RulePage:
    """A rule's page: code, name, severity, needs, summary, what, why, reported, fix (read as
    attributes, or as a mapping: ``rule("WC305")["fix"]``)."""
    from weightcheck.commands import rule as rule_mod  # imports the rules

    return rule_mod.page(code)


def rule_list() -> RuleList:
    """``rule --all``: every rule's page, and docs/rules.md's title, introduction and groups."""
    from weightcheck.commands import rule as rule_mod

    return RuleList(rules=rule_mod.pages(), catalog=rule_mod.document())


def rule_pages() -> list[RulePage]:
    """Every rule's page, in code order."""
    from weightcheck.commands import rule as rule_mod

    return rule_mod.pages()
