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
from dataclasses import field

from weightcheck.engines import model_path
from weightcheck.engines.aux import (
    capture_failure,
    captured,
    convention_for,
    default_ids,
    never_captured,
)
from weightcheck.engines.data import Engine, load, loader_for, newest, renamed
from weightcheck.engines.data import runners as data_runners
from weightcheck.engines.engine_config import engine_config, layer_config
from weightcheck.engines.parameters import expected_parameters, parameter_states
from weightcheck.engines.replay_types import BUFFER, STAGES, Failure, Landing, ParamState
from weightcheck.engines.routing import route_names, unrouted
from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod
from weightcheck.record import record

__all__ = ["view", "EngineView", "Failure", "Landing", "ParamState"]


@record
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
    # the draft vocabulary the target's full head is cut to, when the engine borrows it for a
    # reduced one (vLLM: its logits processor keeps the first draft_vocab_size columns, so draft
    # id i is scored by target token i's row): None when the head is the drafter's or full
    truncated_head: int | None = None
    tied_head: bool | None = None  # the head is the embedding module (no lm_head parameter)
    captured_layers: list | None = None  # target layers captured (needs the target)
    loader: str = ""  # the file replayed: mappings/engines/<loader>.toml
    # what the engine decided from the model path before reading a file (model_path.py)
    path_decisions: list = field(default_factory=list)
    # where the target's first forward pass stops once the engine has started (needs the
    # target: an aux id its forward cannot capture, or raises on): past what `starts` covers
    forward_failure: Failure | None = None
    # what a config value of the wrong JSON type does, by field, where the engine sets the config
    # unvalidated (vLLM's speculators adapter: engine_config.py, data.WrongType): where it fails,
    # or that the engine computes with it or never reads it (rule WC212's consequence)
    type_fates: dict = field(default_factory=dict)

    @property
    def starts(self) -> bool:
        return self.failure is None

    def table(self) -> list[dict]:
        return [dataclasses.asdict(landing) for landing in self.landings]

    def summary(self) -> dict:
        """What happens when this engine loads the drafter, for plain `check` (no --engine): it
        starts or where it stops, the parameters left at init, the tensors dropped, where the
        head and embedding come from, and one sentence saying it."""
        left = [p.param for p in self.params if p.state == "random" and p.required]
        dropped = [
            x.name for x in self.landings if x.fate == "dropped" and not x.why.startswith(BUFFER)
        ]
        state = {p.canonical: p.state for p in self.params}
        if not self.starts:
            f = self.failure
            said = (
                f"fails at {f.stage}"
                + (f" on {code(f.subject)}" if f.subject else "")
                + f": {f.why}"
            )
        elif left:
            said = f"starts, but leaves {len(left)} parameter(s) at init (first: {left[0]})"
        elif dropped:
            said = f"starts, but drops {len(dropped)} tensor(s) (first: {dropped[0]})"
        else:
            said = "loads every parameter"
            if self.truncated_head is not None:
                said += (
                    f"; the head is the target's, cut to its first {self.truncated_head} rows "
                    "(draft ids scored as other tokens)"
                )
            elif state.get("lm_head.weight") == "from_target":
                said += "; the head is the target's"
        if self.starts and self.forward_failure is not None:
            said = (
                "starts, but the first forward fails on "
                f"{self.forward_failure.subject}: {self.forward_failure.why}"
            )
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
            "forward_fails": None
            if self.forward_failure is None
            else dataclasses.asdict(self.forward_failure),
        }


def unread_landings(source) -> list:
    """The tensors of a weight file the shard index names nothing of: the engine never opens it
    (sglang 0.5.23 / vllm 0.32.0 model_loader/weight_utils.py filter_duplicate_safetensors_files;
    docs/differential.md R31). Skipped, not dropped: what it costs is said of the parameters
    that then load nothing (WC204, WC704), and the file by WC210."""
    return [
        Landing(
            n,
            None,
            None,
            None,
            "skipped",
            f"in {r.file}, a file the shard index names nothing of: never opened",
            "sglang==0.5.23 / vllm==0.32.0 model_loader/weight_utils.py "
            "filter_duplicate_safetensors_files",
        )
        for n, r in sorted(getattr(source, "unread", {}).items())
    ]


PT_ITERATOR = (
    "sglang==0.5.23 / vllm==0.32.0 model_loader/weight_utils.py pt_weights_iterator "
    "(torch.load(file).items())"
)


def as_the_engine_reads(drafter) -> tuple[list, list]:
    """(what the engine's loader is handed, in order; the Landings of the tensors it never sees):
    model/drafter.py ``Drafter.as_handed`` (a pickled ``*.bin`` with its tensors under a key hands
    its top-level entries: SGLang drops ``state_dict`` and starts with every parameter at its
    initial values, vLLM fails the load on it)."""
    handed, unseen = drafter.as_handed()
    files = drafter.source.files
    never = [
        Landing(
            t.name,
            t.canonical,
            None,
            None,
            "skipped",
            f"under `{files[t.file].pickle_key}` in {t.file}: the engines iterate the file's "
            "top-level entries and never see it",
            PT_ITERATOR,
        )
        for t in unseen
    ]
    return handed, never


def code(subject: str) -> str:
    """A subject as a sentence names it: a field or tensor name as it is, a condition of the
    engine's data (``rope_factor is None``: Python the engine runs) in backquotes."""
    return subject if " " not in subject else f"`{subject}`"


def view(drafter, engine: str, version: str | None = None, target=None) -> EngineView:
    """The engine's view of ``drafter``. ``target`` (model/target.py's Target, optional) supplies
    what the engine takes from it: its dtype (vLLM), the target layers the aux ids capture, and
    the bytes of its embedding and head (vLLM shares equal ones).

    The replay in phases: the config as the engine reads it (engine_config.py), the parameters
    its module has (parameters.py), each tensor's route through the name rules (routing.py),
    every parameter's state (parameters.py), and the first failure (:func:`first_failure`)."""
    raw = drafter.config or {}
    arch_names = raw.get("architectures") or []
    arch0 = arch_names[0] if isinstance(arch_names, list) and arch_names else None
    loader = loader_for(engine, arch0)  # the loader architectures[0] selects
    data = load(loader)
    version = _version(drafter, engine, version, loader, arch0, data)
    vals, shown, errors, spec, failures, fates = engine_config(data, raw, version, target)
    if spec and data.speculators_adapter is None:  # it stops reading the config before these
        errors, failures, fates = [], [], {}
    path = model_path.decisions(engine, version, drafter.source)  # before it reads the config
    failures = [x.failure for x in path if x.failure is not None] + failures
    adapter = data.speculators_adapter
    built_arch = renamed(data, arch0)
    arch_ok = (spec and adapter is not None and adapter.derives_architecture) or (
        built_arch in data.engine.architectures
    )
    exp = expected_parameters(data, version, vals, built_arch)
    handed, never = as_the_engine_reads(drafter)
    if arch_ok:
        landings = _load_fails(route_names(handed, data, version, vals, exp), fates)
    else:
        landings = unrouted(handed, arch0)
    landings += never + unread_landings(drafter.source)
    states = parameter_states(drafter, data, vals, exp, landings, target)
    tied = not any(p.canonical == "lm_head.weight" for p in states)
    head = next((p for p in states if p.canonical == "lm_head.weight"), None)
    vd, v = vals.get("draft_vocab_size"), vals.get("vocab_size")
    cut = (
        head is not None
        and head.state == "from_target"
        and not head.sources
        and type(vd) is int
        and type(v) is int
        and vd < v
    )
    stops = _stops(drafter, data, spec, arch_ok, arch0, built_arch, landings)
    stops += _negative(exp) if arch_ok else []
    # a speculators config reaches the engine through its adapter: the draft config is
    # transformer_layer_config and the keys the adapter writes over it, eagle_config is gone
    # (vLLM: the ids are the top-level ones or its defaults; docs/differential.md R26)
    aux = aux_layers(
        data, layer_config(data, raw, spec) if adapter is not None else raw, vals, engine
    )
    captured_ = forward = None
    if target is not None:
        mt, L = target.model_type, target.num_layers
        captured_ = captured_layers_of(aux, engine, version, mt, L)
        aux["captures_output_of_layers"] = captured_
        for r in aux["runners"]:
            r["captures_output_of_layers"] = captured_layers_of(r, engine, version, mt, L)
        forward = first_failure(capture_failures(aux, vals, engine, version, mt, L, captured_))
    if forward is None:  # a config value the first forward fails on (the engine has started)
        forward = first_failure(
            [Failure("forward", w.why, f, w.cite) for f, w in fates.items() if w.stage == "forward"]
        )
    return EngineView(
        engine=engine,
        version=version,
        architectures_ok=arch_ok,
        architecture=arch0,
        config=shown,
        config_errors=errors,
        landings=landings,
        params=states if arch_ok else [],
        aux=aux,
        speculators_format=spec,
        built_architecture=built_arch,
        failure=first_failure(failures + stops),
        dtype=vals.get("dtype") if "dtype" in vals else None,
        dtype_from=(shown.get("dtype") or {}).get("from", ""),
        layers=exp.layers if data.layers is not None else None,
        draft_vocab=_draft_vocab(raw, vals, shown),
        truncated_head=vd if cut else None,
        tied_head=tied,
        captured_layers=captured_,
        loader=loader,
        path_decisions=path,
        forward_failure=forward,
        type_fates=fates,
    )


def _load_fails(landings: list, fates: dict) -> list:
    """The tensor whose load fails on a config value of the wrong JSON type (its WrongType's
    ``tensor``, stage load): its landing is the error the load stops on."""
    out = list(landings)
    for w in fates.values():
        if w.stage != "load" or w.tensor is None:
            continue
        for i, x in enumerate(out):
            if x.canonical == w.tensor and x.fate == "loaded":
                why = f"{w.field} has the wrong JSON type: {w.why}"
                out[i] = dataclasses.replace(x, fate="error", why=why, cite=w.cite)
                break
    return out


def _version(drafter, engine: str, version, loader: str, arch0, data: Engine) -> str:
    """The release replayed: the one asked for, which the loader that applies must have been read
    for (never another's), or the newest it was read for."""
    if version is not None and version not in data.engine.versions_read:
        raise WeightcheckError(
            drafter.source.spec,
            f"{engine} {version}: the loader that reads this drafter "
            f"(mappings/engines/{loader}.toml, {arch0 or 'no architectures'}) was read for "
            f"{', '.join(data.engine.versions_read)} only; choose one of those",
        )
    return version or newest(data)


def _stops(drafter, data: Engine, spec, arch_ok, arch0, built_arch, landings) -> list:
    """Where the engine stops besides reading the config: no config, a speculators-format config
    it cannot read, an architecture that selects no EAGLE-3 loader, the first tensor it refuses."""
    out = []
    if drafter.config is None:
        out.append(Failure("config", "no config.json", "config.json"))
    if spec and data.speculators_adapter is None:
        why = "a speculators-format config: the engine reads no transformer_layer_config"
        out.append(Failure("config", why, "transformer_layer_config"))
    if not arch_ok:
        read_as = f" (read as {built_arch})" if built_arch != arch0 else ""
        why = f"architectures[0] {json.dumps(arch0)}{read_as} selects no EAGLE-3 loader"
        out.append(Failure(data.engine.arch_fails_at, why, "architectures"))
    for landing in landings:
        if landing.fate == "error":
            out.append(Failure("load", landing.why, landing.name, landing.cite))
            break
    return out


def _negative(exp) -> list:
    """A parameter the config sizes with a negative dimension: the engine's module allocates it
    with torch.empty, which raises ("Trying to create tensor with negative dimension") while the
    draft is built, before a weight is read."""
    for param, shape in exp.shapes.items():
        if shape and any(type(d) is int and d < 0 for d in shape):
            why = f"{param} is built with shape {shape}: torch refuses a negative dimension"
            return [Failure("build", why, param.split("[")[0])]
    return []


def first_failure(failures: list) -> Failure | None:
    """Phase 4: where the engine stops, the earliest stage (config, build, load, bind); of one
    stage, the first found. None: it starts."""
    return min(failures, key=lambda f: STAGES.index(f.stage)) if failures else None


def _draft_vocab(raw: dict, vals: dict, shown: dict) -> dict:
    vd = vals.get("draft_vocab_size")
    vd_from = (shown.get("draft_vocab_size") or {}).get("from", "")
    if vd is None and "draft_vocab_size" in raw and raw["draft_vocab_size"] is None:
        vd, vd_from = vals.get("vocab_size"), "null: the target's vocabulary (vocab_size)"
    if vd is not None and (isinstance(vd, bool) or not isinstance(vd, int)):
        # a mistyped value (512.0, "512": WC212): the engine builds no vocabulary of that size
        return {"size": None, "from": f"{vd_from}: {json.dumps(vd)} is no integer"}
    return {"size": vd, "from": vd_from}


def aux_layers(data: Engine, raw: dict, vals: dict | None = None, engine: str = "") -> dict:
    """Where the engine's model runners read aux ids (mappings/engines/<engine>.toml
    [[aux_layers.runner]]), and the formula for the target layers they capture. ``ids`` and
    ``from`` are the default runner's (a verdict follows it); ``runners`` lists each. With
    ``use_aux_hidden_state`` false the engine captures nothing: no ids, ``captures`` false."""
    aux = data.aux_layers
    runners = []
    for r in data_runners(engine) if engine else ():
        ids, src = None, None
        for path in r.paths:
            v = config_mod.lookup(raw, path)
            if isinstance(v, list) and (v or not r.skips_empty):
                ids, src = v, path
                break
        runners.append(
            {
                "name": r.name,
                "default": r.default,
                "runs_when": r.runs_when,
                "ids": ids,
                "from": src,
            }
        )
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
    first = runners[0] if runners else {"ids": None, "from": None}
    out = {
        "ids": first["ids"],
        "from": first["from"],
        "default": aux.default_text,
        "conventions": conventions,
        "runners": runners,
    }
    if vals is not None and vals.get("use_aux_hidden_state") is False:
        out.update(ids=None, captures=False, why="use_aux_hidden_state is false")
        for r in runners:
            r.update(ids=None, captures=False, **{"from": None})
    return out


def capture_failures(aux: dict, vals: dict, engine, version, model_type, L, got) -> list:
    """The Failures (stage "forward") of the target's first forward on the ids the default runner
    reads (the family's convention, mappings/engines/<engine>.toml), or on the target's default
    ids when it reads none: an id that makes it raise (vLLM's DeepSeek path with id 0), or
    captured states fewer or more than fc is built for (SGLang's packer raises; otherwise fc's
    input width is wrong). The defaults collapse to fewer states on a target of fewer than 8
    layers (docs/differential.md R22); ids none of which the loop reaches capture nothing (R28)."""
    ids = aux.get("ids")
    conv = convention_for(engine, version, model_type)
    if aux.get("captures") is False or conv is None:
        return []
    used = ids if ids is not None else (default_ids(L) if L else None)
    if not used:
        return []
    crash = capture_failure(used, engine, version, model_type, L) if ids is not None else None
    if crash:
        return [Failure("forward", crash, "aux_layer_ids", conv.cite)]
    n = vals.get("num_aux_hidden_states")
    count = len(got) if got is not None else 0
    if type(n) is not int or count == n:
        return []
    lost = never_captured(used, engine, version, model_type, L)
    said = (
        f"ids {json.dumps(ids)}"
        if ids is not None
        else (f"no ids it reads: the target's default ids {json.dumps(used)}")
    )
    why = f"{said} capture {count} state(s)" + (f" (outputs of layers {got})" if got else "")
    why += f", fc takes {n}" + (f"; never reached: {lost}" if lost else "")
    return [Failure("forward", why, "aux_layer_ids", conv.cite)]


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
