"""The engine's view: replay an engine's drafter loader over a checkpoint's names and config.

The loaders are data (mappings/engines/<engine>.toml, each rule citing the engine source file,
version and lines it was read from; prose in docs/engines.md). :func:`view` answers, for one
checkpoint and one engine version:

  * which config fields the engine reads, the value it sees, and the defaults it applies;
  * for every tensor name: the parameter it lands in, or that it is dropped without a word,
    skipped on purpose, consumed by special code (d2t), or rejected with an error;
  * for every engine parameter: loaded, supplied by the target (embed_tokens, lm_head), or left
    at its random initialisation;
  * which target layers the aux layer ids capture.

Only names and the config are needed: no tensor bytes are read.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Literal

from weightcheck import expr
from weightcheck.engines.aux import captured_layers, config_convention, is_speculators_format
from weightcheck.engines.data import (
    ENGINES,
    LAYOUTS,
    Engine,
    Names,
    Parameter,
    engine_data,
    load,
    newest,
    replays,
)
from weightcheck.engines.data import version_key as _ver
from weightcheck.model import config as config_mod

__all__ = [
    "ENGINES",
    "LAYOUTS",
    "load",
    "engine_data",
    "newest",
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
Fate = Literal["loaded", "special", "skipped", "dropped", "error", "warned"]
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

    def table(self) -> list[dict]:
        return [dataclasses.asdict(l) for l in self.landings]


def _since_ok(item, version: str) -> bool:
    s, u = item.since, item.until  # until: the first version it no longer applies to
    return (not s or _ver(version) >= _ver(s)) and (not u or _ver(version) < _ver(u))


def engine_config(data: Engine, raw: dict, version: str) -> tuple[dict, dict, list, bool]:
    """(values by field, {"value","from"} by field, errors, speculators_format) as the engine sees
    them. The values also hold the config's own top-level keys (flags the loader tests directly,
    e.g. use_aux_norm): the names the data's conditions read."""
    spec = is_speculators_format(raw)
    cfg = raw
    adapter = data.speculators_adapter
    if adapter and spec and isinstance(raw.get("transformer_layer_config"), dict):
        cfg = dict(raw["transformer_layer_config"])
        for k in adapter.flatten:
            if raw.get(k) is not None:
                cfg[k] = raw[k]
        for k, v in adapter.defaults.items():
            cfg.setdefault(k, v)
    values: dict = {}
    shown: dict = {}
    errors: list = []
    base = {k: v for k, v in cfg.items() if isinstance(k, str)}
    for item in data.config:
        if not _since_ok(item, version):
            continue
        fld = item.field
        found = False
        for path in item.paths:
            v = config_mod.lookup(cfg, path)
            if v is not config_mod._MISSING:
                values[fld], shown[fld], found = v, {"value": v, "from": path}, True
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
            continue
        if item.required:
            errors.append((fld, f"the engine requires `{fld}` and fails when it is absent"))
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
            values[fld] = v
            shown[fld] = {"value": v, "from": "engine default"}
    for k, v in base.items():  # flags the loader tests directly (e.g. use_aux_norm)
        values.setdefault(k, v)
    return values, shown, errors, spec


def _expand(param: str, n: int) -> list[str]:
    return [param.format(i=i) for i in range(n)] if "{i}" in param else [param]


def view(drafter, engine: str, version: str | None = None) -> EngineView:
    data = engine_data(engine)  # not load(): it also knows the `speculators` layout
    version = version or newest(data)
    raw = drafter.config or {}
    names_cfg = data.names
    vals, shown, errors, spec = engine_config(data, raw, version)
    arch_names = raw.get("architectures") or []
    arch0 = arch_names[0] if isinstance(arch_names, list) and arch_names else None
    accepted = set(data.engine.architectures)
    adapter = data.speculators_adapter
    arch_ok = (spec and adapter is not None and adapter.derives_architecture) or arch0 in accepted
    n_aux = vals.get("num_aux_hidden_states") or 3
    try:
        n_aux = int(n_aux)
    except (TypeError, ValueError):
        n_aux = 3

    # the parameters the engine's module has for this config (d2t is consumed by special code,
    # names.special: its state is said below)
    params: dict[str, Parameter] = {}
    for p in data.parameter:
        if p.canonical == "d2t" or not _since_ok(p, version) or not expr.holds(p.when, vals):
            continue
        for i, full in enumerate(_expand(p.param, n_aux)):
            for r in names_cfg.param_rename:  # older module trees (sglang <= 0.5.11)
                if _since_ok(r, version):
                    full = re.sub(r.pattern, r.replace, full)
            params[full] = dataclasses.replace(p, param=full, canonical=p.canonical.format(i=i))
    param_names = {k.split("[")[0] for k in params}

    landings = []
    exceptions = [re.compile(x) for x in names_cfg.unknown_exceptions]
    for t in drafter.tensors:
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
            elif step == "prefix":
                for r in names_cfg.prefix:
                    if r.mode == "unless_parameter":
                        if name not in param_names:
                            name = r.add + name
                    elif not any(s in name for s in r.unless_contains):
                        name = r.add + name
        if fate is None:
            key = f"{name}[{shard}]" if shard else name
            if key in params or (name in params and not shard):
                p = params.get(key) or params[name]
                landings.append(Landing(t.name, t.canonical, name, p.param, "loaded", "", p.cite))
                continue
            if any(x.search(name) for x in exceptions):
                fate, why = "dropped", "no such parameter; the loader ignores this suffix silently"
            else:
                fate = {"drop": "dropped", "error": "error", "warn": "warned"}[names_cfg.unknown]
                why = "no such parameter" + _conditional_why(names_cfg, t.name, name)
            cite = names_cfg.cite
        landings.append(Landing(t.name, t.canonical, name, None, fate, why, cite))

    # which parameters received nothing, and who fills them
    filled: dict[str, list] = {}
    for l in landings:
        if l.fate == "loaded":
            filled.setdefault(l.param, []).append(l.name)
    target_hidden = raw.get("target_hidden_size")
    hidden = vals.get("hidden_size") or raw.get("hidden_size")
    states = []
    for p in params.values():
        ft = p.from_target
        got = filled.get(p.param, [])
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
            or (ft == "if_absent_or_equal" and not got)
        )
        if got and target_fills and ft != "if_absent_or_equal":
            state, note = "from_target", "the checkpoint's tensor is replaced by the target's"
        elif got:
            state, note = "loaded", ""
        elif target_fills:
            state, note = "from_target", p.note
        elif p.required:
            state, note = "random", p.note or "nothing loads into it; it keeps its initial values"
        else:
            state, note = "optional-absent", p.note
        states.append(ParamState(p.param, p.canonical, p.required, state, got, note, p.cite))
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
            )
        )

    aux = aux_layers(data, raw)
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
    )


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


def aux_layers(data: Engine, raw: dict) -> dict:
    """Where the engine reads aux ids, and the formula for the target layers they capture."""
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
    return {"ids": ids, "from": src, "default": aux.default_text, "conventions": conventions}
