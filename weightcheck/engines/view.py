"""The engine's view: replay an engine's drafter loader over a checkpoint's names and config.

The loaders are data (mappings/engines/<engine>.toml, each rule citing the engine source file,
version and lines it was read from; prose in docs/engines.md). :func:`view` answers, for one
checkpoint and one engine version:

  * which config fields the engine reads, the value it sees, and the defaults it applies;
  * for every tensor name: the parameter it lands in, or that it is dropped without a word,
    skipped on purpose, consumed by special code (d2t), or rejected with an error;
  * for every engine parameter: loaded, supplied by the target (embed_tokens, lm_head), or left
    at its random initialisation;
  * which target layers the aux layer ids capture;
  * what the engine builds and whether it starts: the dtype, the decoder layers, the draft vocab,
    a tied head, and where it stops (config, build, load, bind) and why.

Names, shapes and the config are enough, with one exception: given the target, a tensor vLLM
shares when it equals the target's is compared by a few range reads (same_bytes.py).

Checked against both engines' own loaders: docs/differential.md.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Literal

from weightcheck import expr
from weightcheck.engines.aux import (
    captured,
    captured_layers,
    config_convention,
    default_ids,
    is_speculators_format,
)
from weightcheck.engines.data import (
    ENGINES,
    LAYOUTS,
    Engine,
    Names,
    Parameter,
    engine_data,
    load,
    loader_for,
    loader_of,
    loaders,
    newest,
    output_for,
    read_by,
    renamed,
    replays,
)
from weightcheck.engines.data import version_key as _ver
from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod

__all__ = [
    "ENGINES",
    "LAYOUTS",
    "load",
    "engine_data",
    "loader_for",
    "loader_of",
    "loaders",
    "newest",
    "output_for",
    "read_by",
    "replays",
    "view",
    "EngineView",
    "Landing",
    "ParamState",
    "captured_layers",
    "config_convention",
]


# what the loader does with a checkpoint tensor: loads it into a parameter, consumes it in special
# code (d2t), skips it on purpose (t2d), drops it without a word, refuses it with an error, or
# loads it with a warning
# (unknown: the EAGLE-3 loader does not run, another class or none is built)
Fate = Literal["loaded", "special", "skipped", "dropped", "error", "warned", "unknown"]
# what a parameter ends with: a checkpoint tensor, the target's, its random init, or nothing
# because it is optional and absent
ParamFate = Literal["loaded", "from_target", "random", "optional-absent"]


@dataclass
class Landing:
    name: str
    canonical: str | None
    engine_name: str | None
    param: str | None
    fate: Fate
    why: str = ""
    cite: str = ""


@dataclass
class ParamState:
    param: str
    canonical: str
    required: bool
    state: ParamFate
    sources: list = field(default_factory=list)
    note: str = ""
    cite: str = ""
    shape: list | None = None  # the shape the engine builds it in (None: not known)
    winner: str | None = None  # of several sources, the one whose values stay (the last loaded)


@dataclass
class Failure:
    """Where and why the engine stops (it does not start)."""

    stage: str  # config | build | load | bind
    why: str
    subject: str | None = None  # the config field or tensor it stops on
    cite: str = ""


@dataclass
class EngineView:
    engine: str
    version: str
    architectures_ok: bool
    architecture: str | None
    config: dict  # field -> {"value", "from"}
    config_errors: list  # (field, message)
    landings: list
    params: list
    aux: dict
    notes: list = field(default_factory=list)
    speculators_format: bool = False
    # what the engine builds
    built_architecture: str | None = None  # architectures[0] after the engine's renaming
    failure: Failure | None = None  # None: it starts (loads and binds)
    dtype: str | None = None
    dtype_from: str = ""
    layers: int | None = None  # decoder layers built
    draft_vocab: dict = field(default_factory=dict)  # {"size", "from"}
    tied_head: bool | None = None  # the head is the embedding module (no lm_head parameter)
    captured_layers: list | None = None  # target layers captured (needs the target)
    loader: str = ""  # the file replayed: mappings/engines/<loader>.toml

    @property
    def starts(self) -> bool:
        return self.failure is None

    def table(self) -> list[dict]:
        return [dataclasses.asdict(l) for l in self.landings]

    def summary(self) -> dict:
        """What happens when this engine loads the drafter, for plain `check` (no --engine): it
        starts or where it stops, the parameters left at init, the tensors dropped, where the
        head and embedding come from, and one sentence saying it."""
        left = [p.param for p in self.params if p.state == "random" and p.required]
        dropped = [x.name for x in self.landings if x.fate == "dropped"]
        state = {p.canonical: p.state for p in self.params}
        if not self.starts:
            f = self.failure
            said = f"fails at {f.stage}" + (f" on {f.subject}" if f.subject else "") + f": {f.why}"
        elif left:
            said = f"starts, but leaves {len(left)} parameter(s) at init (first: {left[0]})"
        elif dropped:
            said = f"starts, but drops {len(dropped)} tensor(s) (first: {dropped[0]})"
        else:
            said = "loads every parameter"
            if state.get("lm_head.weight") == "from_target":
                said += "; the head is the target's"
        if self.starts:
            said += f"; built in {self.dtype}" if self.dtype else "; built in the target's dtype"
        return {
            "version": self.version,
            "starts": self.starts,
            "layers": self.layers,
            "dtype": self.dtype,
            "draft_vocab": self.draft_vocab,
            "lm_head": state.get("lm_head.weight"),
            "embed_tokens": state.get("embed_tokens.weight"),
            "left_at_init": left,
            "dropped": dropped,
            "says": said,
        }

    def facts(self) -> dict:
        """The served view's facts, for the JSON report's `engine` section."""
        f = self.failure
        return {
            "starts": self.starts,
            "fails": None if f is None else dataclasses.asdict(f),
            "architecture": self.built_architecture,
            "dtype": self.dtype,
            "dtype_from": self.dtype_from,
            "layers": self.layers,
            "draft_vocab": self.draft_vocab,
            "tied_head": self.tied_head,
            "captured_layers": self.captured_layers,
        }


def _since_ok(item, version: str) -> bool:
    s, u = item.since, item.until  # until: the first version it no longer applies to
    return (not s or _ver(version) >= _ver(s)) and (not u or _ver(version) < _ver(u))


_STAGES = ("config", "build", "load", "bind")


def _toml_value(v):
    return None if v == "null" else v


def _type_ok(kind: str | None, v) -> bool:
    if kind == "int":
        return type(v) is int
    if kind == "int_list":
        return isinstance(v, list) and all(type(x) is int for x in v)
    return True


def engine_config(data: Engine, raw: dict, version: str, target=None) -> tuple:
    """(values by field, {"value","from"} by field, errors, speculators_format, failures) as the
    engine sees them. The values also hold the config's own top-level keys (flags the loader tests
    directly, e.g. use_aux_norm): the names the data's conditions read. ``errors`` are
    (field, message); ``failures`` the same as Failure objects, with the stage."""
    spec = is_speculators_format(raw)
    cfg = raw
    adapter = data.speculators_adapter
    if adapter and spec and isinstance(raw.get("transformer_layer_config"), dict):
        cfg = dict(raw["transformer_layer_config"])
        for k, default in adapter.override.items():  # written whatever the layer config says
            cfg[k] = raw[k] if k in raw else _toml_value(default)
        for k in adapter.copy_if_set:
            if raw.get(k) is not None:
                cfg[k] = raw[k]
    values: dict = {}
    shown: dict = {}
    errors: list = []
    failures: list = []
    base = {k: v for k, v in cfg.items() if isinstance(k, str)}
    # vLLM's speculators adapter sets the layer config's values unvalidated: true/false read as
    # an integer are Python's 1/0, not a failed build
    as_int = bool(spec and adapter is not None and adapter.bool_is_int and cfg is not raw)

    def lenient(path: str, v):
        if as_int and isinstance(v, bool) and config_mod.path_type_expected(path) == "int":
            return int(v)
        return v

    def fail(fld, msg, stage):
        if (fld, msg) in errors:  # an object that is not one, read for several fields
            return
        errors.append((fld, msg))
        failures.append(Failure(stage, msg, fld))

    for item in data.config:
        if not _since_ok(item, version):
            continue
        fld = item.field
        found = False
        if item.from_target:
            v = getattr(target, item.from_target, None) if target is not None else None
            values[fld] = v
            shown[fld] = {
                "value": v,
                "from": "the target's" if target is not None else "the target's (no --target)",
            }
            continue
        for path in item.paths:
            bad = config_mod.container_problem(cfg, path)
            if bad is not None:  # an object it looks inside is not one (rule WC212)
                fail(bad[0], bad[1], item.stage)
                values[fld], shown[fld], found = None, {"value": None, "from": bad[0]}, True
                break
            v = config_mod.lookup(cfg, path)
            if v is not config_mod._MISSING:
                if v is None and item.null == "default":
                    break  # read as absent: the default below
                values[fld], shown[fld], found = v, {"value": v, "from": path}, True
                if v is None and item.null == "error":
                    fail(
                        fld,
                        f"`{fld}` is null: the engine uses it as a number and fails",
                        item.stage,
                    )
                elif lenient(path, v) is not v:
                    values[fld] = lenient(path, v)
                    shown[fld] = {"value": values[fld], "from": f"{path} ({json.dumps(v)})"}
                elif v is not None and config_mod.path_type_problem(path, v):
                    # the JSON type mappings/config.toml gives the field (rule WC212): the
                    # engine does not build the config, and nothing computes with the value
                    fail(fld, config_mod.path_type_problem(path, v), item.stage)
                    values[fld] = None
                elif v is not None and not _type_ok(item.type, v):
                    fail(
                        fld,
                        f"`{fld}` is {json.dumps(v)}, not "
                        + ("an integer" if item.type == "int" else "a list of integers")
                        + ": the engine fails on it",
                        item.stage,
                    )
                break
        for path in item.length_of if not found else ():
            v = config_mod.lookup(cfg, path)
            if isinstance(v, list):
                values[fld], shown[fld], found = (
                    len(v),
                    {"value": len(v), "from": f"len({path})"},
                    True,
                )
                break
        if found:
            if isinstance(values[fld], str) and values[fld] in item.auto:
                was = values[fld]
                values[fld] = item.auto[was]
                shown[fld] = {"value": values[fld], "from": f"{shown[fld]['from']} ({was}, auto)"}
            continue
        if item.required:
            fail(fld, f"the engine requires `{fld}` and fails when it is absent", item.stage)
            values[fld] = None
            shown[fld] = {"value": None, "from": "absent: load fails"}
        elif not item.paths and not item.length_of:
            values[fld] = None
            shown[fld] = {"value": None, "from": "not read"}
        elif item.default is None:
            values[fld] = None
            shown[fld] = {"value": None, "from": "absent"}
        else:
            try:
                v = expr.evaluate(item.default, {**base, **values})
            except expr.Undefined:  # it needs a value the config does not give
                v = None
            shown[fld] = {"value": v, "from": "engine default"}
            if isinstance(v, str) and v in item.auto:
                shown[fld] = {"value": item.auto[v], "from": f"engine default ({v}, auto)"}
                v = item.auto[v]
            values[fld] = v
    read = _reads(data)
    for k, v in base.items():  # flags the loader tests directly (e.g. use_aux_norm)
        if k in values:
            continue
        v = lenient(k, v)
        problem = config_mod.path_type_problem(k, v) if v is not None else None
        if problem is None:
            values[k] = v
            continue
        values[k] = None  # a value of the wrong JSON type: nothing computes with it
        if k in read:
            fail(k, problem, "build")
    for f in data.fails:
        try:
            hit = bool(expr.evaluate(f.when, values))
        except (expr.ExprError, TypeError, ValueError):
            hit = False
        if hit:
            errors.append((f.when, f.why))
            failures.append(Failure(f.stage, f.why, f.when, f.cite))
    return values, shown, errors, spec, failures


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


def _expand(param: str, n: int) -> list[str]:
    return [param.format(i=i) for i in range(n)] if "{i}" in param else [param]


def resolved_architecture(engine: str, arch) -> object:
    """``architectures[0]`` as the engine reads it (vLLM renames LlamaForCausalLM to
    Eagle3LlamaForCausalLM for an EAGLE-3 drafter; SGLang renames nothing)."""
    return renamed(load(loader_for(engine, arch)), arch)


def selects_eagle3_loader(engine: str, arch) -> bool:
    """Whether ``architectures[0]`` selects one of the engine's EAGLE-3 drafter loaders."""
    data = load(loader_for(engine, arch))
    return renamed(data, arch) in data.engine.architectures


def _int(v, default):
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def _narrowed(p: Parameter, got: list | None, want: list | None) -> str | None:
    """Why a tensor of shape ``got`` loads into ``p`` of shape ``want`` all the same: they differ
    only along the dimension the weight loader narrows (``narrows``), and the tensor is larger
    there, or smaller and the loader pads (``narrow_smaller = "pad"``). None: the load stops."""
    d = {"rows": 0, "columns": 1}.get(p.narrows or "")
    if d is None or got is None or want is None or len(got) != len(want) or d >= len(got):
        return None
    if any(g != w for i, (g, w) in enumerate(zip(got, want)) if i != d):
        return None
    if got[d] > want[d]:
        return (
            f"shape {got} into {want}: the weight loader keeps the first {want[d]} {p.narrows} "
            "and drops the rest"
        )
    if got[d] < want[d] and p.narrow_smaller == "pad":
        return (
            f"shape {got} into {want}: the weight loader zero-fills the {p.narrows} after {got[d]}"
        )
    return None


def _shape(p: Parameter, vals: dict, layer: int) -> list | None:
    if p.shape is None:
        return None
    try:
        got = expr.evaluate(p.shape, {**vals, "layer": layer})
    except (expr.ExprError, TypeError, ValueError, ZeroDivisionError):
        return None
    if not isinstance(got, list) or not all(type(x) is int for x in got):
        return None
    return got


def view(drafter, engine: str, version: str | None = None, target=None) -> EngineView:
    """The engine's view of ``drafter``. ``target`` (model/target.py's Target, optional) supplies
    what the engine takes from it: its dtype (vLLM), the target layers the aux ids capture, and
    the bytes of its embedding and head (vLLM shares equal ones)."""
    raw = drafter.config or {}
    arch_names = raw.get("architectures") or []
    arch0 = arch_names[0] if isinstance(arch_names, list) and arch_names else None
    loader = loader_for(engine, arch0)  # the loader architectures[0] selects
    data = load(loader)
    if version is not None and version not in data.engine.versions_read:
        # the loader that applies decides which releases can be replayed: never another's
        raise WeightcheckError(
            drafter.source.spec,
            f"{engine} {version}: the loader that reads this drafter "
            f"(mappings/engines/{loader}.toml, {arch0 or 'no architectures'}) was read for "
            f"{', '.join(data.engine.versions_read)} only; choose one of those",
        )
    version = version or newest(data)
    names_cfg = data.names
    vals, shown, errors, spec, failures = engine_config(data, raw, version, target)
    if spec and data.speculators_adapter is None:  # it stops reading the config before these
        errors, failures = [], []
    accepted = set(data.engine.architectures)
    adapter = data.speculators_adapter
    built_arch = renamed(data, arch0)
    arch_ok = (spec and adapter is not None and adapter.derives_architecture) or (
        built_arch in accepted
    )
    n_aux = _int(vals.get("num_aux_hidden_states") or 3, 3)
    layers = data.layers
    try:
        n_layers = _int(expr.evaluate(layers.count, vals), 1) if layers is not None else 1
    except expr.ExprError:
        n_layers = 1

    # the parameters the engine's module has for this config (d2t is consumed by special code,
    # names.special: its state is said below)
    params: dict[str, Parameter] = {}
    shapes: dict[str, list | None] = {}
    for p in data.parameter:
        if p.canonical == "d2t" or not _since_ok(p, version) or not expr.holds(p.when, vals):
            continue
        if p.architectures and built_arch not in p.architectures:
            continue
        in_layer = layers is not None and p.param.startswith(layers.prefix)
        copies = range(n_layers) if in_layer else [0]
        for layer in copies:
            for i, full in enumerate(_expand(p.param, n_aux)):
                canonical = p.canonical.format(i=i)
                if in_layer and layer:
                    full = f"model.layers.{layer}." + full[len(layers.prefix) :]
                    canonical = f"layers.{layer}." + canonical.split(".", 1)[1]
                for r in names_cfg.param_rename:  # older module trees (sglang <= 0.5.11)
                    if _since_ok(r, version):
                        full = re.sub(r.pattern, r.replace, full)
                required = p.required and expr.holds(p.required_when, {**vals, "layer": layer})
                params[full] = dataclasses.replace(
                    p, param=full, canonical=canonical, required=required
                )
                shapes[full] = _shape(p, vals, layer)
    param_names = {k.split("[")[0] for k in params}
    modules = {n.rsplit(".", i)[0] for n in param_names for i in range(1, n.count(".") + 1)}
    # parameters that exist only as shards: a tensor under the whole name loads every shard
    fused: dict[str, list] = {}
    for k in params:
        if "[" in k:
            fused.setdefault(k.split("[")[0], []).append(k)

    d2t_shape = next(
        (_shape(p, vals, 0) for p in data.parameter if p.canonical == "d2t" and p.shape), None
    )
    landings = []
    exceptions = [re.compile(x) for x in names_cfg.unknown_exceptions]
    module_exceptions = [re.compile(x) for x in names_cfg.module_exceptions]
    by_name = {t.name: t for t in drafter.tensors}
    pending: list = []  # (landing index, Concat, part, name, tensor): held by a concat rule
    for t in drafter.tensors:
        if not arch_ok:
            landings.append(
                Landing(
                    t.name,
                    t.canonical,
                    None,
                    None,
                    "unknown",
                    f"architectures[0] {json.dumps(arch0)} selects no EAGLE-3 loader: "
                    "this loader does not run",
                )
            )
            continue
        name = t.name
        fate = None
        shard = None
        why = ""
        cite = ""
        for step in names_cfg.order:
            if fate:
                break
            if step == "rewrite":
                for r in names_cfg.rewrite:
                    if _since_ok(r, version):
                        name = re.sub(r.pattern, r.replace, name, count=1 if r.anchored else 0)
            elif step == "special":
                for r in names_cfg.special:
                    if re.search(r.pattern, name):
                        if expr.holds(r.when, vals):
                            fate, why, cite = "special", r.becomes, r.cite
                            got = list(t.shape) if t.canonical == "d2t" else None
                            if d2t_shape is not None and got is not None and got != d2t_shape:
                                fate = "error"
                                why = (
                                    f"shape {got} into {r.becomes.split()[0]} {d2t_shape}: the "
                                    "weight loader asserts and the load stops"
                                )
                        break
            elif step == "skip":
                for r in names_cfg.skip:
                    if re.search(r.pattern, name):
                        fate, why, cite = "skipped", "skipped by the loader", r.cite
                        break
            elif step == "drop":
                for r in names_cfg.drop:
                    if re.search(r.pattern, name) and expr.holds(r.when, vals):
                        said = f" ({r.when})" if r.when else ""
                        fate, why, cite = "dropped", f"dropped on purpose{said}", r.cite
                        break
            elif step == "stacked":
                for r in names_cfg.stacked:
                    if r.from_ in name:
                        name, shard = name.replace(r.from_, r.to, 1), r.shard
                        break
            elif step == "concat":
                for r in names_cfg.concat:
                    part = next((i for i, x in enumerate(r.parts) if x in name), None)
                    if part is not None:
                        fate, held = "held", (r, part)
                        break
            elif step == "prefix":
                for r in names_cfg.prefix:
                    if r.mode == "unless_parameter":
                        if name not in param_names:
                            name = r.add + name
                    elif r.mode == "unless_starts_with":
                        if not any(name.startswith(x) for x in r.unless_starts_with):
                            name = r.add + name
                    elif not any(s in name for s in r.unless_contains):
                        name = r.add + name
        if fate == "held":  # settled below, when every tensor has arrived
            pending.append((len(landings), *held, name, t))
            landings.append(Landing(t.name, t.canonical, name, None, "dropped", "", held[0].cite))
            continue
        if fate is None:
            key = f"{name}[{shard}]" if shard else name
            if key in params or (name in params and not shard) or (not shard and name in fused):
                p = params.get(key) or params.get(name)
                pname = p.param if p is not None else name
                want = shapes.get(key) if p is not None else None
                got = list(t.shape) if getattr(t, "shape", None) is not None else None
                narrowed = _narrowed(p, got, want) if p is not None else None
                if want is not None and got is not None and got != want and not narrowed:
                    landings.append(
                        Landing(
                            t.name,
                            t.canonical,
                            name,
                            pname,
                            "error",
                            f"shape {got} into parameter {pname} {want}: the weight loader "
                            "asserts and the load stops",
                            p.cite,
                        )
                    )
                    continue
                cite_ = p.cite if p is not None else params[fused[name][0]].cite
                landings.append(
                    Landing(t.name, t.canonical, name, pname, "loaded", narrowed or "", cite_)
                )
                continue
            if any(x.search(name) for x in exceptions):
                fate, why = "dropped", "no such parameter; the loader ignores this suffix silently"
            elif any(
                (m := x.search(name)) and name[: m.start()].rstrip(".") in modules
                for x in module_exceptions
            ):
                fate, why = "dropped", "no such parameter; the loader ignores this suffix silently"
            else:
                fate = {"drop": "dropped", "error": "error", "warn": "warned"}[names_cfg.unknown]
                why = "no such parameter" + _conditional_why(names_cfg, t.name, name)
            cite = names_cfg.cite
        landings.append(Landing(t.name, t.canonical, name, None, fate, why, cite))

    _settle_concat(pending, landings, params, shapes)

    # which parameters received nothing, and who fills them
    filled: dict[str, list] = {}
    for l in landings:
        if l.fate == "loaded":
            for k in fused.get(l.param, [l.param]) if l.param not in params else [l.param]:
                filled.setdefault(k, []).append(l.name)
    target_hidden = raw.get("target_hidden_size")
    hidden = vals.get("hidden_size") or raw.get("hidden_size")
    dtype = vals.get("dtype") if "dtype" in vals else None
    states = []
    for p in params.values():
        ft = p.from_target
        got = filled.get(p.param, [])
        equal, equal_note = None, ""
        same_width = ft == "if_absent_or_equal_same_width"
        if same_width:
            ft = "if_absent_or_equal"
        if ft == "if_absent_or_equal" and got:
            equal, equal_note = _equals_target(drafter, by_name.get(got[-1]), p, target, dtype)
        wide = _target_width(target, target_hidden) if same_width else None
        mine = (shapes.get(p.param) or [None])[-1]
        if wide is not None and mine is not None and wide != mine:
            equal, ft = False, "width"  # the draft keeps its own (or its initial) embedding
            equal_note = f"the target's embedding is {wide} wide, the draft's {mine}: not shared"
        target_fills = (
            ft == "always"
            or (
                ft == "unless_target_hidden_differs"
                and not (target_hidden and hidden and target_hidden != hidden)
            )
            or (
                ft == "if_draft_vocab_null"
                and "draft_vocab_size" in raw
                and raw["draft_vocab_size"] is None
            )
            or (ft == "if_draft_vocab_unset" and raw.get("draft_vocab_size") is None)
            or (ft == "if_absent_or_equal" and (not got or equal))
        )
        if got and target_fills and ft != "if_absent_or_equal":
            state, note = "from_target", "the checkpoint's tensor is replaced by the target's"
        elif got and target_fills:
            state, note = "from_target", equal_note
        elif got:
            state, note = "loaded", equal_note
        elif target_fills:
            state, note = "from_target", p.note
        elif ft == "width":
            state, note = "random", equal_note
        elif p.required:
            state, note = "random", p.note or "nothing loads into it; it keeps its initial values"
        else:
            state, note = "optional-absent", p.note
        states.append(
            ParamState(
                p.param,
                p.canonical,
                p.required,
                state,
                got,
                note,
                p.cite,
                shapes.get(p.param),
                _winner(drafter, got) if len(got) > 1 else None,
            )
        )
    # d2t is consumed by special code, not loaded into a parameter
    for p in data.parameter:
        if p.canonical != "d2t" or not expr.holds(p.when, vals):
            continue
        got = [l.name for l in landings if l.fate == "special" and l.canonical == "d2t"]
        state = "loaded" if got else ("random" if p.required else "optional-absent")
        states.append(
            ParamState(
                p.param,
                "d2t",
                p.required,
                state,
                got,
                "" if got else (p.note or "absent: draft ids are used as target ids"),
                p.cite,
                _shape(p, vals, 0),
                _winner(drafter, got) if len(got) > 1 else None,
            )
        )
    tied = not any(p.canonical == "lm_head.weight" for p in states)

    # where it stops: the earliest stage
    if drafter.config is None:
        failures.append(Failure("config", "no config.json", "config.json"))
    if spec and adapter is None:
        failures.append(
            Failure(
                "config",
                "a speculators-format config: the engine reads no transformer_layer_config",
                "transformer_layer_config",
            )
        )
    if not arch_ok:
        failures.append(
            Failure(
                data.engine.arch_fails_at,
                f"architectures[0] {json.dumps(arch0)}"
                + (f" (read as {built_arch})" if built_arch != arch0 else "")
                + " selects no EAGLE-3 loader",
                "architectures",
            )
        )
    for l in landings:
        if l.fate == "error":
            failures.append(Failure("load", l.why, l.name, l.cite))
            break
    failure = min(failures, key=lambda f: _STAGES.index(f.stage)) if failures else None
    if not arch_ok:
        states = []

    aux = aux_layers(data, raw, vals)
    captured = None
    if target is not None:
        captured = captured_layers_of(aux, engine, version, target.model_type, target.num_layers)
        aux["captures_output_of_layers"] = captured
    vd = vals.get("draft_vocab_size")
    vd_from = (shown.get("draft_vocab_size") or {}).get("from", "")
    if vd is None and "draft_vocab_size" in raw and raw["draft_vocab_size"] is None:
        vd, vd_from = vals.get("vocab_size"), "null: the target's vocabulary (vocab_size)"
    return EngineView(
        engine=engine,
        version=version,
        architectures_ok=arch_ok,
        architecture=arch0,
        config=shown,
        config_errors=errors,
        landings=landings,
        params=states,
        aux=aux,
        speculators_format=spec,
        built_architecture=built_arch,
        failure=failure,
        dtype=dtype,
        dtype_from=(shown.get("dtype") or {}).get("from", ""),
        layers=n_layers if layers is not None else None,
        draft_vocab={"size": vd, "from": vd_from},
        tied_head=tied,
        captured_layers=captured,
        loader=loader,
    )


def _settle_concat(pending: list, landings: list, params: dict, shapes: dict) -> None:
    """What the tensors held by a concat rule became, replayed in checkpoint order as the loader
    caches them: a complete set is concatenated (dim 0) into the fused parameter, checked against
    its shape as a whole (the tensor that completes the set is the one the load stops on); a
    part replaced in the cache, or whose partners never come, is dropped without a word."""
    cache: dict[str, int] = {}  # name as looked up -> index of the landing held under it
    shape_of = {idx: list(t.shape) for idx, *_rest, t in pending}
    for idx, r, part, name, _t in pending:
        if name in cache:
            replaced = landings[cache[name]]
            replaced.why = (
                f"held for its partner, then replaced in the loader's cache by {landings[idx].name}"
            )
        cache[name] = idx
        names = [name.replace(r.parts[part], x, 1) for x in r.parts]
        if not all(n in cache for n in names):
            continue
        fused = names[0].replace(r.parts[0], r.into, 1)
        held = [cache.pop(n) for n in names]
        keys = [f"{fused}[{i}]" for i in range(len(names))]
        if not all(k in params for k in keys):
            for i in held:
                others = " + ".join(landings[j].name for j in held if j != i)
                landings[i].why = (
                    f"concatenated with {others} into {fused}, which is no parameter: "
                    "discarded without a word"
                )
            continue
        for i, k in zip(held, keys):
            l = landings[i]
            l.fate, l.param, l.engine_name, l.why, l.cite = "loaded", k, fused, "", params[k].cite
        want = [shapes.get(k) for k in keys]
        if any(w is None for w in want):
            continue
        got = [shape_of[i] for i in held]
        rows, rows_want = sum(g[0] for g in got), sum(w[0] for w in want)
        if rows != rows_want or any(g[1:] != want[0][1:] for g in got):
            # the tensor that completes the set is the one the load stops on; its partners
            # were only held: nothing of them was written
            for i in held:
                l = landings[i]
                l.fate, l.param = "dropped", None
                l.why = "held for its partner, then part of a concatenation the load stops on"
            l = landings[idx]
            l.fate, l.param = "error", None
            l.why = (
                f"concatenated {' + '.join(map(str, got))} into parameter {fused} "
                f"{[rows_want, *want[0][1:]]}: the weight loader asserts and the load stops"
            )
    for i in cache.values():
        if not landings[i].why:
            landings[i].why = "held for its partner, which never comes: dropped without a word"


def _winner(drafter, names: list) -> str | None:
    """Of several tensors loaded into one parameter slice, the one whose values stay: both engines
    load files in order and names sorted within a file, the last write wins."""
    files = {}
    for t in drafter.tensors:
        files.setdefault(t.name, getattr(t, "file", None) or "")
    return max(names, key=lambda n: (files.get(n, ""), n))


def _conditional_why(names_cfg: Names, original: str, name: str) -> str:
    def matches(pat: str) -> bool:
        return bool(
            re.search(pat, original)
            or re.search(pat, name)
            or re.search(pat, name.removeprefix("model."))
        )

    for r in names_cfg.conditional:
        if matches(r.pattern):
            return f" (the parameter exists only when `{r.when}`)"
    for r in names_cfg.never:
        if matches(r.pattern):
            return " (the engine's module never has this parameter)"
    return ""


def aux_layers(data: Engine, raw: dict, vals: dict | None = None) -> dict:
    """Where the engine reads aux ids, and the formula for the target layers they capture. With
    ``use_aux_hidden_state`` false the engine captures nothing: no ids, ``captures`` false."""
    aux = data.aux_layers
    ids, src = None, None
    for path in aux.paths:
        v = config_mod.lookup(raw, path)
        if isinstance(v, list):
            ids, src = v, path
            break
    conventions = []
    for c in aux.convention:
        d = {"target_model_types": list(c.target_model_types)}
        d["captures_output_of"] = c.captures_output_of
        if c.default_ids_output_of is not None:
            d["default_ids_output_of"] = c.default_ids_output_of
        if c.since is not None:
            d["since"] = c.since
        if c.versions is not None:
            d["versions"] = list(c.versions)
        conventions.append(d)
    out = {"ids": ids, "from": src, "default": aux.default_text, "conventions": conventions}
    if vals is not None and vals.get("use_aux_hidden_state") is False:
        out.update(ids=None, captures=False, why="use_aux_hidden_state is false")
    return out


def captured_layers_of(aux: dict, engine: str, version: str, model_type, num_layers) -> list | None:
    """The target layers the engine captures with the aux ids of ``aux`` (aux_layers()), in the
    order the drafter receives them; None when it captures nothing or no convention covers it."""
    if aux.get("captures") is False:
        return None
    ids = aux.get("ids")
    default = ids is None
    if default and num_layers:
        ids = default_ids(num_layers)
    return captured(ids, engine, version, model_type, num_layers, default) or None


def _target_width(target, target_hidden) -> int | None:
    """The target's embedding width: its embed_tokens tensor with --target, else the draft
    config's ``target_hidden_size`` (None: unknown)."""
    embed = getattr(target, "embed", None) if target is not None else None
    if embed is not None and getattr(embed, "shape", None):
        return int(embed.shape[-1])
    return target_hidden if type(target_hidden) is int else None


def _equals_target(drafter, t, p: Parameter, target, dtype) -> tuple[bool | None, str]:
    """Whether checkpoint tensor ``t`` equals the target's tensor for parameter ``p`` once both are
    cast to the built dtype (vLLM shares the target's then: torch.equal). (None, note) when it
    cannot tell: no --target, or the bytes cannot be compared."""
    unknown = "loaded, or the target's when equal to it (give --target to compare)"
    if target is None or t is None:
        return None, unknown
    theirs = target.lm_head if p.canonical == "lm_head.weight" else target.embed
    if theirs is None:
        if getattr(target.source, "layout", "") == "config only":
            return None, "loaded, or the target's when equal to it (--target is config only)"
        return None, unknown
    if tuple(theirs.shape) != tuple(t.shape):
        return False, "not the target's: the shapes differ"
    from weightcheck.engines import same_bytes

    try:
        eq = same_bytes.equal_as(drafter.source, t, target.source, theirs, dtype)
    except Exception as e:  # a remote read failing must not fail the view
        return None, f"{unknown}; comparing failed: {type(e).__name__}"
    if eq is None:
        return None, unknown
    if eq:
        return (
            True,
            f"equal to the target's {theirs.name} in {dtype or t.dtype}: the target's is shared",
        )
    return False, f"differs from the target's {theirs.name}: the checkpoint's is kept"
