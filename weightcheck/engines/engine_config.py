"""The config as an engine reads it: the phase of the replay (view.py) that says, for every field
of a loader's [[config]] data, the value the engine sees, where it comes from, the defaults it
applies, and the fields it stops on (with the stage: config, build, load, bind)."""

from __future__ import annotations

import json
import re
from dataclasses import field

from weightcheck import expr
from weightcheck.engines.aux import is_speculators_format
from weightcheck.engines.data import ConfigField, Engine, SpeculatorsAdapter, WrongType, applies
from weightcheck.engines.replay_types import Failure
from weightcheck.model import config as config_mod
from weightcheck.record import record

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _toml_value(v):
    return None if v == "null" else v


def _type_ok(kind: str | None, v) -> bool:
    if kind == "int":
        return type(v) is int
    if kind == "int_list":
        return isinstance(v, list) and all(type(x) is int for x in v)
    return True


_CLASS_TYPES = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}
_CLASS_WORDS = {"int": "an int", "float": "a float", "bool": "a bool", "str": "a str"}


def _class_problem(kind: str, v) -> str | None:
    """What huggingface_hub's strict dataclass check says of ``v`` for a field of ``kind``
    (None: it passes)."""
    base = kind.removesuffix("_or_null")
    if v is None:
        return None if kind.endswith("_or_null") else f"{_CLASS_WORDS[base]}, not null"
    if _CLASS_TYPES[base](v):
        return None
    return f"{_CLASS_WORDS[base]}{' or null' if base != kind else ''}, not {json.dumps(v)}"


def _config_class(data: Engine, cfg: dict, spec: bool, reader) -> dict:
    """The fields the engine's config class gives an absent key (its defaults); each declared
    field of the wrong type stops the engine (``reader.fail``)."""
    klass = data.config_class
    if klass is None or spec or cfg.get("model_type") != klass.model_type:
        return {}
    defaults = {}
    for name, f in klass.fields.items():
        if name not in cfg:
            if f.default is not None:
                defaults[name] = expr.evaluate(f.default, {})
            continue
        problem = _class_problem(f.type, cfg[name])
        if problem:
            why = (
                f"`{name}` must be {problem}: transformers' {klass.name} checks the type of "
                "every field it declares when the config is read (a strict dataclass)"
            )
            reader.fail(name, why, klass.stage, klass.cite)
    return defaults


def _adapter_attributes(adapter, cfg: dict, reader) -> None:
    """The adapter sets the layer config as attributes, without a config class's defaults: a
    field the model reads that is absent, or null where the engine computes with it, stops it."""
    for k in adapter.absent_fails:
        if k not in cfg:
            why = (
                f"`{k}` is absent from transformer_layer_config: the engine sets the layer config "
                "as plain attributes, with no defaults, and building the draft reads it"
            )
            reader.fail(k, why, "build")
    for k, stage in adapter.null_fails.items():
        if k in cfg and cfg[k] is None:
            why = (
                f"`{k}` is null in transformer_layer_config: the engine computes with it and fails"
            )
            if stage == "forward":  # it starts; the draft's first forward fails (the view says)
                reader.fates[k] = WrongType(k, "other", "forward", why + " at the first forward")
            else:
                reader.fail(k, why, stage)


def _json_kind(v) -> str:
    if isinstance(v, str):
        return "string"
    return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else "other"


def wrong_type(adapter: SpeculatorsAdapter | None, fld: str, v) -> WrongType | None:
    """The adapter's [[speculators_adapter.wrong_type]] for ``fld`` holding ``v`` (None: none
    listed, or no adapter)."""
    if adapter is None:
        return None
    kind = _json_kind(v)
    return next((w for w in adapter.wrong_type if w.field == fld and w.json == kind), None)


def unread_top_level(adapter: SpeculatorsAdapter, raw: dict) -> dict:
    """The top-level keys of a speculators config with a value of the wrong JSON type that the
    adapter never reads (it builds the draft config from transformer_layer_config and the keys it
    overrides or copies): their type changes nothing the engine builds."""
    read = set(adapter.override) | set(adapter.copy_if_set) | {"transformer_layer_config"}
    out = {}
    for k, v in raw.items():
        if k in read or v is None or not config_mod.path_type_problem(k, v):
            continue
        why = (
            f"the engine never reads the top-level {k}: its speculators adapter builds the draft "
            "config from transformer_layer_config and the keys it overrides or copies"
        )
        out[k] = WrongType(k, _json_kind(v), "unread", why)
    return out


def layer_config(data: Engine, raw: dict, spec: bool) -> dict:
    """The dict the engine reads its fields from: the config itself, or for a speculators-format
    config its transformer_layer_config with the adapter's overrides written in."""
    adapter = data.speculators_adapter
    if not (adapter and spec and isinstance(raw.get("transformer_layer_config"), dict)):
        return raw
    cfg = dict(raw["transformer_layer_config"])
    for k, default in adapter.override.items():  # written whatever the layer config says
        cfg[k] = raw[k] if k in raw else _toml_value(default)
    for k in adapter.copy_if_set:
        if raw.get(k) is not None:
            cfg[k] = raw[k]
    return cfg


@record
class _Reader:
    """What reading the config gives, field by field: ``values`` (what expressions compute with),
    ``shown`` ({"value", "from"} by field), ``errors`` ((field, message)) and ``failures`` (the
    same as Failure objects, with the stage)."""

    cfg: dict
    # vLLM's speculators adapter sets the layer config's values unvalidated: true/false read as
    # an integer are Python's 1/0, not a failed build
    as_int: bool
    # the adapter that sets them (None: a config the engine reads itself): a value of the wrong
    # JSON type fails where its [[speculators_adapter.wrong_type]] says, or never
    adapter: SpeculatorsAdapter | None = None
    values: dict = field(default_factory=dict)
    shown: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    # what a value of the wrong JSON type does, by field, where the adapter's data says
    fates: dict = field(default_factory=dict)

    def lenient(self, path: str, v):
        if self.as_int and isinstance(v, bool) and config_mod.path_type_expected(path) == "int":
            return int(v)
        return v

    def fail(self, fld, msg, stage, cite=""):
        if any(f == fld for f, _ in self.errors):  # one field, one failure (the first found)
            return
        self.errors.append((fld, msg))
        self.failures.append(Failure(stage, msg, fld, cite))

    def read_field(self, item: ConfigField, target, base: dict) -> None:
        fld = item.field
        if item.from_target:
            v = getattr(target, item.from_target, None) if target is not None else None
            self.values[fld] = v
            said = "the target's" if target is not None else "the target's (no --target)"
            self.shown[fld] = {"value": v, "from": said}
            return
        if item.target_paths:
            self._of_target(item, target)
            return
        found = self._from_paths(item) or self._from_length(item)
        if not found:
            self._absent(item, base)
        elif isinstance(self.values[fld], str) and self.values[fld] in item.auto:
            was = self.values[fld]
            self.values[fld] = item.auto[was]
            said = f"{self.shown[fld]['from']} ({was}, auto)"
            self.shown[fld] = {"value": self.values[fld], "from": said}

    def _of_target(self, item: ConfigField, target) -> None:
        """A value the engine reads from the target's config: the first of ``target_paths`` set
        there, else the field's default; unknown (None) without a target."""
        fld = item.field
        if target is None:
            self.values[fld] = None
            self.shown[fld] = {"value": None, "from": "the target's (no --target)"}
            return
        for path in item.target_paths:
            v = config_mod.lookup(target.config, path)
            if v is not config_mod._MISSING and v is not None:
                self.values[fld] = v
                self.shown[fld] = {"value": v, "from": f"the target's {path}"}
                return
        v = expr.evaluate(item.default, {}) if item.default is not None else None
        self.values[fld] = v
        self.shown[fld] = {"value": v, "from": "the target's (absent: engine default)"}

    def _from_paths(self, item: ConfigField) -> bool:
        """The value at the first of the field's paths the config has; whether one was found."""
        fld = item.field
        for path in item.paths:
            bad = config_mod.container_problem(self.cfg, path)
            if bad is not None:  # an object it looks inside is not one (rule WC212)
                self.fail(bad[0], bad[1], item.stage)
                self.values[fld], self.shown[fld] = None, {"value": None, "from": bad[0]}
                return True
            v = config_mod.lookup(self.cfg, path)
            if v is config_mod._MISSING:
                continue
            if v is None and item.null == "default":
                return False  # read as absent: the default
            self.values[fld], self.shown[fld] = v, {"value": v, "from": path}
            self._judge(item, path, v)
            return True
        return False

    def _judge(self, item: ConfigField, path: str, v) -> None:
        """A value found at ``path``: null where the engine computes, the wrong JSON type, or a
        type the engine fails on, stops it."""
        fld = item.field
        if v is None and item.null == "error":
            self.fail(fld, f"`{fld}` is null: the engine uses it as a number and fails", item.stage)
        elif self.lenient(path, v) is not v:
            self.values[fld] = self.lenient(path, v)
            self.shown[fld] = {"value": self.values[fld], "from": f"{path} ({json.dumps(v)})"}
        elif v is not None and config_mod.path_type_problem(path, v):
            # the JSON type mappings/config.toml gives the field (rule WC212)
            self.mistyped(fld, v, config_mod.path_type_problem(path, v), item.stage)
        elif v is not None and not _type_ok(item.type, v):
            kind = "an integer" if item.type == "int" else "a list of integers"
            said = f"`{fld}` is {json.dumps(v)}, not {kind}: the engine fails on it"
            self.fail(fld, said, item.stage)

    def mistyped(self, fld: str, v, problem: str, stage: str | None) -> None:
        """A value of the wrong JSON type (rule WC212): the engine stops at ``stage`` (None: no
        stage reads it) and nothing computes with it; where the adapter sets it unvalidated, its
        [[speculators_adapter.wrong_type]] says where it fails instead, or that the engine
        computes with it (``accepted``). The one place the replay decides it."""
        w = wrong_type(self.adapter, fld, v)
        if w is not None:
            self.fates[fld] = w
            stage, problem = w.stage, f"{problem}: {w.why}"
        if stage in ("config", "build"):
            self.fail(fld, problem, stage, w.cite if w is not None else "")
        self.values[fld] = v if stage == "accepted" else None

    def _from_length(self, item: ConfigField) -> bool:
        for path in item.length_of:
            v = config_mod.lookup(self.cfg, path)
            if isinstance(v, list):
                self.values[item.field] = len(v)
                self.shown[item.field] = {"value": len(v), "from": f"len({path})"}
                return True
        return False

    def _absent(self, item: ConfigField, base: dict) -> None:
        fld = item.field
        if item.required:
            self.fail(fld, f"the engine requires `{fld}` and fails when it is absent", item.stage)
            self.values[fld], self.shown[fld] = None, {"value": None, "from": "absent: load fails"}
            return
        if not item.paths and not item.length_of:
            self.values[fld], self.shown[fld] = None, {"value": None, "from": "not read"}
            return
        if item.default is None and base.get(fld) is not None:  # the config class's default
            self.values[fld] = base[fld]
            self.shown[fld] = {"value": base[fld], "from": "absent: the config class's default"}
            return
        if item.default is None:
            self.values[fld], self.shown[fld] = None, {"value": None, "from": "absent"}
            return
        try:
            v = expr.evaluate(item.default, {**base, **self.values})
        except expr.Undefined:  # it needs a value the config does not give
            v = None
        self.shown[fld] = {"value": v, "from": "engine default"}
        if isinstance(v, str) and v in item.auto:
            self.shown[fld] = {"value": item.auto[v], "from": f"engine default ({v}, auto)"}
            v = item.auto[v]
        self.values[fld] = v

    def top_level(self, base: dict, read: frozenset[str]) -> None:
        """The config's own top-level keys: flags the loader tests directly (e.g. use_aux_norm)."""
        for k, v in base.items():
            if k in self.values:
                continue
            v = self.lenient(k, v)
            problem = config_mod.path_type_problem(k, v) if v is not None else None
            if problem is None:
                self.values[k] = v
                continue
            self.mistyped(k, v, problem, "build" if k in read else None)

    def declared_failures(self, data: Engine) -> None:
        """The loader's [[fails]]: conditions over the values the engine stops on."""
        for f in data.fails:
            try:
                hit = bool(expr.evaluate(f.when, self.values))
            except (expr.ExprError, TypeError, ValueError):
                hit = False
            if hit:
                why = _PLACEHOLDER.sub(lambda m: self._said(m.group(1), m.group(0)), f.why)
                self.errors.append((f.subject or f.when, why))
                self.failures.append(Failure(f.stage, why, f.subject or f.when, f.cite))

    def _said(self, name: str, otherwise: str) -> str:
        v = self.values.get(name)
        return otherwise if v is None else json.dumps(v)


def engine_config(data: Engine, raw: dict, version: str, target=None) -> tuple:
    """(values by field, {"value","from"} by field, errors, speculators_format, failures, fates)
    as the engine sees them; ``fates``: what each value of the wrong JSON type does where the
    engine sets it unvalidated (field -> data.WrongType). The values also hold the config's own top-level keys (flags the loader tests
    directly, e.g. use_aux_norm): the names the data's conditions read. ``errors`` are
    (field, message); ``failures`` the same as Failure objects, with the stage."""
    spec = is_speculators_format(raw)
    cfg = layer_config(data, raw, spec)
    adapter = data.speculators_adapter
    reader = _Reader(
        cfg,
        bool(spec and adapter is not None and adapter.bool_is_int and cfg is not raw),
        adapter if cfg is not raw else None,
    )
    if cfg is not raw:  # a speculators config read through the engine's adapter
        _adapter_attributes(adapter, cfg, reader)
        reader.fates.update(unread_top_level(adapter, raw))
    base = _config_class(data, cfg, spec, reader)
    base.update((k, v) for k, v in cfg.items() if isinstance(k, str))
    for item in data.config:
        if applies(item, version):
            reader.read_field(item, target, base)
    reader.top_level(base, _reads(data))
    reader.declared_failures(data)
    return reader.values, reader.shown, reader.errors, spec, reader.failures, reader.fates


def _reads(data: Engine) -> frozenset[str]:
    """The config names a loader's expressions read (shapes, conditions, defaults, failures)."""
    out: set[str] = set()
    srcs = [p.shape for p in data.parameter] + [p.when for p in data.parameter]
    srcs += [c.default for c in data.config] + [f.when for f in data.fails]
    if data.layers is not None:
        srcs.append(data.layers.count)
    for src in srcs:
        if src:
            out |= expr.names(src)
    return frozenset(out)
