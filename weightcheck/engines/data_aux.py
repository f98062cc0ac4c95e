"""The parts of the engine files' schema (weightcheck/engines/data.py) that describe what the
engine does around the loader: where its model runners read the aux ids and what each target
family's forward does with them ([aux_layers]), and what it decides from the model path before it
reads a file ([[model_path]]). Built by the same typed loader; data.py re-exports them."""

from __future__ import annotations

from typing import Literal

from weightcheck.mappings import Expr, Path, Version
from weightcheck.record import record

# where an engine stops when it does not start: reading the config, building the model, loading the
# weights, binding the draft to the target (data.py uses it too)
Stage = Literal["config", "build", "load", "bind"]


@record(frozen=True)
class Convention:
    """[[aux_layers.convention]]: what a target family's forward does with the ids."""

    target_model_types: tuple[str, ...]
    captures_output_of: Expr  # over k, ids, L
    default_ids_output_of: Expr | None = None  # over L
    sorted_unique: bool = False  # captured once each, in layer order (sorted(set(ids)))
    # over k, ids, L: id k is captured (the forward loop reaches its capture point)
    capturable: Expr | None = None
    # where the family's forward captures, in words (entry of layer i, after the last layer)
    capture_point: str = ""
    # what the engine does when an id is never captured (a slot fewer, or one left unwritten)
    missing: str = ""
    # the target's forward itself raises when the captures are fewer than the ids (SGLang's
    # packed buffer checks its count); else the drafter's fc meets the wrong width later
    missing_raises: bool = False
    fails_when: Expr | None = None  # over k, L: id k makes the forward raise
    fails_why: str = ""
    cite: str = ""
    since: Version | None = None
    versions: tuple[Version, ...] | None = None


@record(frozen=True)
class Runner:
    """[[aux_layers.runner]]: a model runner of the engine, and where it reads the aux ids (in
    order; none found: the target's default ids). ``default``: the one the release runs unless
    ``runs_when`` of another holds."""

    name: str
    paths: tuple[Path, ...]
    cite: str
    default: bool = False
    runs_when: str = ""
    skips_empty: bool = False  # an empty list is passed over (`if not layer_ids`), else it is used


@record(frozen=True)
class AuxLayers:
    default_text: str
    runner: tuple[Runner, ...] = ()  # the engine's first file only (every loader shares them)
    convention: tuple[Convention, ...] = ()


@record(frozen=True)
class ModelPath:
    """[[model_path]]: what the engine decides from the model path itself, before it reads a
    file: a path (lower-cased, as the engine is given it) holding every one of ``contains_all``,
    or any of ``contains_any``, is read by ``parser``, which needs ``needs_file`` in the folder;
    without it the engine stops at ``stage``."""

    parser: str
    needs_file: str
    stage: Stage
    fix: str
    cite: str
    contains_all: tuple[str, ...] = ()
    contains_any: tuple[str, ...] = ()
    since: Version | None = None
    until: Version | None = None

    def matches(self, path: str) -> bool:
        low = path.lower()
        return bool(
            (self.contains_all and all(x in low for x in self.contains_all))
            or any(x in low for x in self.contains_any)
        )


@record(frozen=True)
class WrongType:
    """[[speculators_adapter.wrong_type]]: what a value of the wrong JSON type for ``field`` does
    in an engine that sets the layer config unvalidated (vLLM's speculators adapter): it stops the
    engine where the value is first used (``stage`` config, build, load: on ``tensor``, the
    canonical name of the checkpoint tensor whose load fails), the engine starts and its first
    forward fails on it (``forward``), or the engine computes with it as the number it is
    (``accepted``). ``json``: the JSON type found (``number``: a number where an integer is
    expected, 1.0)."""

    field: str
    json: Literal["string", "number", "other"]
    # "unread" is derived, never listed: a top-level key the adapter does not read
    stage: Literal["config", "build", "load", "forward", "accepted", "unread"]
    why: str
    tensor: str | None = None
    cite: str = ""
