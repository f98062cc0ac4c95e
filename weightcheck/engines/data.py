"""The engines' data: mappings/engines/<engine>.toml, each read from the engine's own source."""

from __future__ import annotations

import re

from weightcheck import mappings
from weightcheck.errors import WeightcheckError

ENGINES = ("sglang", "vllm")
# layouts convert can write (mappings/engines/<name>.toml [output]); `speculators` is a format, not
# an engine, but its file has the same shape
LAYOUTS = ENGINES + ("speculators",)


def version_key(v: str) -> tuple:
    return tuple(
        int(x) if x.isdigit() else 0 for x in re.split(r"[.\-+]", re.sub(r"post", "", v)) if x
    )


def load(engine: str) -> dict:
    if engine not in LAYOUTS:
        raise WeightcheckError(None, f"unknown engine {engine!r}: choose {', '.join(ENGINES)}")
    return mappings.load(f"engines/{engine}.toml")


def newest(data: dict) -> str:
    return max(data["engine"]["versions_read"], key=version_key)


def replays(architecture, engine: str = "sglang") -> bool:
    """Whether the engine data describe this drafter architecture's loader (``inventory`` in
    [engine]); an unknown architecture is replayed as the engines would treat it."""
    return architecture is None or architecture.name == load(engine)["engine"]["inventory"]
