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
from weightcheck.engines.data import ENGINES, LAYOUTS, load, newest, replays
from weightcheck.engines.data import version_key as _ver
from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod

__all__ = [
    "ENGINES",
    "LAYOUTS",
    "load",
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


def _since_ok(item: dict, version: str) -> bool:
    s, u = item.get("since"), item.get("until")  # until: first version it no longer applies to
    return (not s or _ver(version) >= _ver(s)) and (not u or _ver(version) < _ver(u))


def _dotted_names(src: str) -> list[str]:
    return re.findall(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+", src)


def evaluate_when(cond: str, names: dict, raw: dict) -> bool:
    cond = (cond or "").strip()
    if cond in ("", "always"):
        return True
    if cond == "never":
        return False
    local = dict(names)
    for dotted in _dotted_names(cond):
        key = "__" + dotted.replace(".", "__")
        v = config_mod.lookup(raw, dotted)
        local[key] = None if v is config_mod._MISSING else v
        if local[key] is None:
            # the engine's default for a nested flag it reads (use_aux_hidden_state -> true)
            local[key] = names.get(dotted.rsplit(".", 1)[-1])
        cond = cond.replace(dotted, key)
    try:
        return bool(expr.evaluate(cond, local))
    except expr.Undefined:
        return False


def engine_config(data: dict, raw: dict, version: str) -> tuple[dict, dict, list, bool]:
    """(values by field, {"value","from"} by field, errors, speculators_format) as the engine sees them."""
    spec = is_speculators_format(raw)
    cfg = raw
    adapter = data.get("speculators_adapter")
    if adapter and spec and isinstance(raw.get("transformer_layer_config"), dict):
        cfg = dict(raw["transformer_layer_config"])
        for k in adapter.get("flatten", []):
            if raw.get(k) is not None:
                cfg[k] = raw[k]
        for k, v in adapter.get("defaults", {}).items():
            cfg.setdefault(k, v)
    values: dict = {}
    shown: dict = {}
    errors: list = []
    base = {k: v for k, v in cfg.items() if isinstance(k, str)}
    for item in data.get("config", []):
        if not _since_ok(item, version):
            continue
        fld = item["field"]
        found = False
        for path in item.get("paths", []):
            m = re.fullmatch(r"len\(([\w.]+)\)", path)
            if m:
                v = config_mod.lookup(cfg, m.group(1))
                if isinstance(v, list):
                    values[fld], shown[fld], found = len(v), {"value": len(v), "from": path}, True
                    break
                continue
            if not re.fullmatch(r"[\w.]+", path):
                continue  # prose in the data (e.g. a model_type-specific path)
            v = config_mod.lookup(cfg, path)
            if v is not config_mod._MISSING:
                values[fld], shown[fld], found = v, {"value": v, "from": path}, True
                break
        if found:
            continue
        default = str(item.get("default", ""))
        if default == "ERROR":
            errors.append(
                (
                    fld,
                    f"the engine requires `{fld}` and fails when it is absent"
                    + (f" ({item['note']})" if item.get("note") else ""),
                )
            )
            values[fld] = None
            shown[fld] = {"value": None, "from": "absent: load fails"}
            continue
        if default in ("", "ignored"):
            values[fld] = None
            shown[fld] = {"value": None, "from": "absent" if default == "" else "not read"}
            continue
        try:
            v = expr.evaluate(default.replace(" / ", " // "), {**base, **values})
        except expr.ExprError:
            v = default
        values[fld] = v
        shown[fld] = {"value": v, "from": "engine default"}
    for k, v in base.items():  # flags the loader tests directly (e.g. use_aux_norm)
        values.setdefault(k, v)
    return values, shown, errors, spec


def _expand(param: str, n: int) -> list[str]:
    return [param.format(i=i) for i in range(n)] if "{i}" in param else [param]


def view(drafter, engine: str, version: str | None = None) -> EngineView:
    if engine not in ENGINES:  # load() also knows the `speculators` output layout: not an engine
        raise WeightcheckError(None, f"unknown engine {engine!r}: choose {', '.join(ENGINES)}")
    data = load(engine)
    version = version or newest(data)
    raw = drafter.config or {}
    names_cfg = data.get("names", {})
    vals, shown, errors, spec = engine_config(data, raw, version)
    arch_names = raw.get("architectures") or []
    arch0 = arch_names[0] if isinstance(arch_names, list) and arch_names else None
    accepted = set(data["engine"].get("architectures", []))
    adapter = data.get("speculators_adapter") or {}
    arch_ok = (spec and adapter.get("derives_architecture", False)) or arch0 in accepted
    n_aux = vals.get("num_aux_hidden_states") or 3
    try:
        n_aux = int(n_aux)
    except (TypeError, ValueError):
        n_aux = 3

    # the parameters the engine's module has for this config
    params: dict[str, dict] = {}
    for p in data.get("parameter", []):
        if not p.get("param") or not _since_ok(p, version) or p["canonical"] in ("d2t", "t2d"):
            continue  # d2t/t2d are consumed by special code or skipped (names.special/skip)
        if not evaluate_when(p.get("when", ""), vals, raw):
            continue
        for i, full in enumerate(_expand(p["param"], n_aux)):
            for r in names_cfg.get("param_rename", []):  # older module trees (sglang <= 0.5.11)
                if _since_ok(r, version):
                    full = re.sub(r["pattern"], r["replace"], full)
            params[full] = dict(p, param=full, canonical=p["canonical"].format(i=i))
    param_names = {k.split("[")[0] for k in params}

    landings = []
    order = names_cfg.get("order", ["rewrite", "special", "skip", "stacked", "prefix"])
    unknown = names_cfg.get("unknown", "drop")
    exceptions = [re.compile(x) for x in names_cfg.get("unknown_exceptions", [])]
    for t in drafter.tensors:
        name = t.name
        fate = None
        shard = None
        why = ""
        cite = ""
        for step in order:
            if fate:
                break
            if step == "rewrite":
                for r in names_cfg.get("rewrite", []):
                    if not _since_ok(r, version):
                        continue
                    name = re.sub(
                        r["pattern"],
                        r["replace"],
                        name,
                        count=0 if not r.get("anchored", False) else 1,
                    )
            elif step == "special":
                for r in names_cfg.get("special", []):
                    if re.search(r["pattern"], name):
                        if evaluate_when(r.get("when", ""), vals, raw):
                            fate, why, cite = "special", r.get("becomes", ""), r.get("cite", "")
                        break
            elif step == "skip":
                for r in names_cfg.get("skip", []):
                    if re.search(r["pattern"], name):
                        fate, why, cite = "skipped", "skipped by the loader", r.get("cite", "")
                        break
            elif step == "drop":
                for r in names_cfg.get("drop", []):
                    if re.search(r["pattern"], name) and evaluate_when(
                        r.get("when", ""), vals, raw
                    ):
                        fate, why, cite = (
                            "dropped",
                            f"dropped on purpose ({r.get('when')})",
                            r.get("cite", ""),
                        )
                        break
            elif step == "stacked":
                for r in names_cfg.get("stacked", []):
                    if r["from"] in name:
                        name, shard = name.replace(r["from"], r["to"], 1), r["shard"]
                        break
            elif step == "prefix":
                for r in names_cfg.get("prefix", []):
                    mode = r.get("mode", "unless_parameter")
                    if mode == "unless_parameter":
                        if name not in param_names:
                            name = r["add"] + name
                    elif mode == "unless_contains":
                        if not any(s in name for s in r.get("unless_contains", [])):
                            name = r["add"] + name
        if fate is None:
            key = f"{name}[{shard}]" if shard else name
            if key in params or (name in params and not shard):
                p = params.get(key) or params[name]
                fate, why, cite = "loaded", "", p.get("cite", "")
                landings.append(Landing(t.name, t.canonical, name, p["param"], fate, why, cite))
                continue
            if any(x.search(name) for x in exceptions):
                fate, why = "dropped", "no such parameter; the loader ignores this suffix silently"
            else:
                fate = {"drop": "dropped", "error": "error", "warn": "warned"}.get(
                    unknown, "dropped"
                )
                why = "no such parameter" + _conditional_why(names_cfg, t.name, name, vals, raw)
            cite = names_cfg.get("cite", "") or names_cfg.get("unfilled_cite", "")
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
        ft = p.get("from_target", "")
        canonical = p["canonical"]
        got = filled.get(p["param"], [])
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
            states.append(
                ParamState(
                    p["param"],
                    canonical,
                    bool(p.get("required")),
                    "from_target",
                    got,
                    "the checkpoint's tensor is replaced by the target's",
                    p.get("cite", ""),
                )
            )
        elif got:
            states.append(
                ParamState(
                    p["param"],
                    canonical,
                    bool(p.get("required")),
                    "loaded",
                    got,
                    "",
                    p.get("cite", ""),
                )
            )
        elif target_fills:
            states.append(
                ParamState(
                    p["param"],
                    canonical,
                    bool(p.get("required")),
                    "from_target",
                    [],
                    p.get("note", ""),
                    p.get("cite", ""),
                )
            )
        elif p.get("required"):
            states.append(
                ParamState(
                    p["param"],
                    canonical,
                    True,
                    "random",
                    [],
                    p.get("note", "") or "nothing loads into it; it keeps its initial values",
                    p.get("cite", ""),
                )
            )
        else:
            states.append(
                ParamState(
                    p["param"],
                    canonical,
                    False,
                    "optional-absent",
                    [],
                    p.get("note", ""),
                    p.get("cite", ""),
                )
            )
    # d2t is consumed by special code, not loaded into a parameter
    for p in data.get("parameter", []):
        if p.get("canonical") != "d2t" or not evaluate_when(p.get("when", ""), vals, raw):
            continue
        got = [l.name for l in landings if l.fate == "special" and l.canonical == "d2t"]
        state = "loaded" if got else ("random" if p.get("required") else "optional-absent")
        states.append(
            ParamState(
                p.get("param") or "d2t",
                "d2t",
                bool(p.get("required")),
                state,
                got,
                "" if got else (p.get("note", "") or "absent: draft ids are used as target ids"),
                p.get("cite", ""),
            )
        )

    aux = aux_layers(data, raw, vals, version)
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


def _conditional_why(names_cfg: dict, original: str, name: str, vals: dict, raw: dict) -> str:
    for r in names_cfg.get("conditional", []):
        pat = r["pattern"]
        if (
            re.search(pat, original)
            or re.search(pat, name)
            or re.search(pat, name.removeprefix("model."))
        ):
            when = r.get("when", "")
            return (
                f" (the parameter exists only when `{when}`)"
                if when not in ("never", "")
                else " (the engine's module never has this parameter)"
            )
    return ""


def aux_layers(data: dict, raw: dict, vals: dict, version: str) -> dict:
    """Where the engine reads aux ids, and the formula for the target layers they capture."""
    aux = data.get("aux_layers", {})
    ids, src = None, None
    for path in aux.get("paths", []):
        path = path.split(" ")[0]
        v = config_mod.lookup(raw, path)
        if isinstance(v, list):
            ids, src = v, path
            break
    return {
        "ids": ids,
        "from": src,
        "default": aux.get("default"),
        "conventions": [
            {
                k: c[k]
                for k in ("target_model_types", "captures_output_of", "default_ids_output_of")
                if k in c
            }
            | ({"since": c["since"]} if "since" in c else {})
            | ({"versions": c["versions"]} if "versions" in c else {})
            for c in aux.get("convention", [])
        ],
    }
