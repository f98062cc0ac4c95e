"""What an engine decides from the model path before it reads a weight (mappings/engines/
<engine>.toml ``[[model_path]]``): SGLang picks its config parser from the path it is given
(a path naming both "eagle" and "mistral" is read as Mistral's native format, params.json). The
replay is given the path as the engine sees it (Source.engine_path: a Hub id, the folder as
typed, or ``check --served-as``)."""

from __future__ import annotations

from weightcheck.engines.data import applies, engine_data
from weightcheck.engines.replay_types import Failure
from weightcheck.record import record

FIELD = "model path"  # the subject of what the path decides


@record
class PathDecision:
    """One decision the path makes: ``failure`` when the engine stops on it (else it reads
    another config file than config.json, which is there)."""

    message: str
    detail: str
    failure: Failure | None = None


def decisions(engine: str, version: str, source) -> list[PathDecision]:
    """What the model path decides in ``engine==version`` for ``source``."""
    out = []
    path = source.engine_path()
    for rule in engine_data(engine).model_path:
        if not applies(rule, version) or not rule.matches(path):
            continue
        said = " and ".join(repr(x) for x in rule.contains_all) or " or ".join(
            repr(x) for x in rule.contains_any
        )
        detail = (
            f"The path as {engine} is given it: {path!r} (another one: check --served-as). It "
            f"selects {rule.parser}. {rule.cite}"
        )
        if source.has_file(rule.needs_file):
            msg = (
                f"{engine} reads {rule.needs_file} here, not config.json (the model path names "
                f"{said}): what this replay of config.json says may not hold"
            )
            out.append(PathDecision(msg, detail))
            continue
        msg = (
            f"the model path names {said}: {engine} looks for {rule.needs_file}, finds none and "
            f"stops — {rule.fix}"
        )
        out.append(PathDecision(msg, detail, Failure(rule.stage, msg, FIELD, rule.cite)))
    return out
