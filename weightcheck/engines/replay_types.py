"""What the replay (view.py) says about one checkpoint: the fate of each tensor (Landing), the
state of each engine parameter (ParamState), and where the engine stops (Failure)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.record import record

# what the loader does with a checkpoint tensor: loads it into a parameter, consumes it in special
# code (d2t), skips it on purpose (t2d), drops it without a word, refuses it with an error, or
# loads it with a warning
# (unknown: the EAGLE-3 loader does not run, another class or none is built)
Fate = Literal["loaded", "special", "skipped", "dropped", "error", "warned", "unknown"]
# what a parameter ends with: a checkpoint tensor, the target's, its random init, or nothing
# because it is optional and absent
ParamFate = Literal["loaded", "from_target", "random", "optional-absent"]

# how a Landing's `why` starts for a non-parameter buffer (mappings/names.toml [[buffer]]) the
# loader drops: nothing served changes, so no drop is counted against the drafter
BUFFER = "a non-parameter buffer"

# where an engine stops, earliest first ("forward": the target's first forward pass once it has
# started, e.g. an aux id its forward loop cannot capture: EngineView.forward_failure)
STAGES = ("config", "build", "load", "bind", "forward")


@record
class Landing:
    name: str
    canonical: str | None
    engine_name: str | None
    param: str | None
    fate: Fate
    why: str = ""
    cite: str = ""


@record
class ParamState:
    param: str
    canonical: str
    required: bool
    state: ParamFate
    sources: list[str] = field(default_factory=list)
    note: str = ""
    cite: str = ""
    shape: list[int] | None = None  # the shape the engine builds it in (None: not known)
    winner: str | None = None  # of several sources, the one whose values stay (the last loaded)


@record
class Failure:
    """Where and why the engine stops (it does not start)."""

    stage: str  # config | build | load | bind
    why: str
    subject: str | None = None  # the config field or tensor it stops on
    cite: str = ""
