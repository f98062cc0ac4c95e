"""The engines' data: mappings/engines/<engine>.toml, each read from the engine's own source, as
typed objects.

Each file is built into the frozen dataclasses below by the one typed loader of every mappings
file (weightcheck/mappings.py ``build``), which follows their type hints: a key no dataclass
names, a value of the wrong type, a regex that does not compile, an expression expr.py cannot
read or one naming a value the replay does not resolve, is a one-line WeightcheckError naming the
file, the key path and what is allowed. Every field is read by weightcheck
(tests/test_engine_data.py checks both); what the engines do that weightcheck does not use is
written in the files as comments.
"""

from __future__ import annotations

import os
import re
import typing
from dataclasses import field
from typing import Literal, Union

from weightcheck import expr, mappings
from weightcheck.engines.data_aux import AuxLayers, ModelPath, Runner, Stage, WrongType
from weightcheck.errors import WeightcheckError
from weightcheck.mappings import Bad, Expr, Path, Regex, Version
from weightcheck.model import config as config_mod
from weightcheck.model import dialects, inventory, names
from weightcheck.record import record

ENGINES = ("sglang", "vllm")
# layouts convert can write (mappings/engines/<name>.toml [output]); `speculators` is a format, not
# an engine: its file has [engine] (the inventory) and [output] only
LAYOUTS = ENGINES + ("speculators",)

Step = Literal["rewrite", "special", "skip", "drop", "stacked", "concat", "prefix"]
FromTarget = Literal[
    "always",
    "unless_target_hidden_differs",
    "if_draft_vocab_null",
    "if_draft_vocab_unset",
    "if_absent_or_equal",
    # the same, and only when the target's embedding is as wide as the draft's (vLLM's V1 runner)
    "if_absent_or_equal_same_width",
]


def version_key(v: str) -> tuple:
    return tuple(
        int(x) if x.isdigit() else 0 for x in re.split(r"[.\-+]", re.sub(r"post", "", v)) if x
    )


# ---------------------------------------------------------------------------------------------
# the schema


@record(frozen=True)
class FormatInfo:
    """[engine] of a format file (speculators): the drafter inventory it holds, and the engines
    that read the format (convert's gate checks an output of it as each of them loads it)."""

    inventory: str
    read_by: tuple[Literal["sglang", "vllm"], ...]


@record(frozen=True)
class EngineInfo:
    """[engine]: the inventory whose loader the file replays, the releases read, and the
    architectures[0] values that select that loader."""

    inventory: str
    versions_read: tuple[Version, ...]
    architectures: tuple[str, ...]
    arch_rename: ArchRename | None = None  # the engine renames architectures before selecting
    # where it stops when architectures[0] selects no EAGLE-3 loader
    arch_fails_at: Stage = "config"
    # the engine's other drafter loaders (another class, e.g. the MLA drafter): files
    # mappings/engines/<name>.toml, each selected by its own `architectures`
    loaders: tuple[str, ...] = ()


@record(frozen=True)
class ArchRename:
    """[engine.arch_rename]: every declared architecture that neither starts nor ends with
    ``keep_affix`` gets ``prefix`` (vLLM's EAGLEConfig: LlamaForCausalLM -> Eagle3LlamaForCausalLM)."""

    prefix: str
    keep_affix: str
    cite: str


@record(frozen=True)
class Layers:
    """[layers]: the decoder layers the engine builds. ``count`` (an expression over the config
    fields) layers; every parameter under ``prefix`` (layer 0's) exists in each of them, with
    ``{layer}`` in its shape standing for the layer index."""

    count: Expr
    prefix: str
    cite: str


@record(frozen=True)
class Fail:
    """[[fails]]: a config the engine rejects: at ``stage``, when ``when`` holds."""

    when: Expr
    stage: Stage
    why: str  # `{name}` is replaced by the value the engine reads for `name`
    cite: str
    subject: str | None = None  # the config field it names (default: the condition itself)


# the types a transformers config class declares, as huggingface_hub's strict dataclasses check
# them: an int is an int and not a bool (nor a float); a float is a float (not an int); `_or_null`
# also takes null
ClassType = Literal["int", "float", "bool", "str", "int_or_null", "float_or_null", "bool_or_null"]


@record(frozen=True)
class ClassField:
    type: ClassType
    default: Expr | None = None  # absent from the config: the class's default


@record(frozen=True)
class ConfigClass:
    """[config_class]: the transformers config class the engine builds a flat draft config of
    ``model_type`` with. A strict dataclass: each field it declares is type-checked when the
    engine reads the config (a wrong type stops it at ``stage``), and an absent one takes the
    class's default. A speculators-format config goes through the engine's adapter instead."""

    name: str
    model_type: str
    fields: dict[str, ClassField]
    cite: str
    stage: Stage = "config"


@record(frozen=True)
class Rewrite:
    """[[names.rewrite]]: a spelling of the name table (mappings/names.toml) the loader renames,
    ``towards`` its written or its canonical form. ``pattern``/``replace``: how the loader
    matches it when that is not the spelling itself (SGLang's ``"midlayer"``, without the dot),
    checked at load to turn the one spelling into the other."""

    alias: str
    towards: Literal["written", "canonical"]
    pattern: Regex | None = None
    replace: str | None = None
    # which matches of ``pattern`` are replaced: "all" (Python's str.replace, re.sub) or "first"
    # only (vLLM's WeightsMapper: str.replace(substr, new, 1)); an anchor is written in the
    # pattern (^), not here
    occurrences: Literal["all", "first"] = "all"
    since: Version | None = None
    until: Version | None = None

    def spellings(self) -> tuple[str, str]:
        """(the spelling the loader finds, the one it makes) of the name table's alias."""
        a = names.alias(self.alias)
        return (a.canonical, a.written) if self.towards == "written" else (a.written, a.canonical)

    def regex(self) -> tuple[str, str]:
        """(pattern, replacement) as the loader applies them."""
        if self.pattern is not None:
            return self.pattern, self.replace or ""
        found, made = self.spellings()
        return re.escape(found), made


@record(frozen=True)
class ParamRename:
    pattern: Regex
    replace: str
    since: Version | None = None
    until: Version | None = None


@record(frozen=True)
class Special:
    pattern: Regex
    becomes: str
    cite: str
    when: Expr | None = None
    # dtypes of the tensor the special code fails on (SGLang's d2t + an int64 arange: torch does
    # not promote uint16/32/64), and why: the load stops
    refuses_dtypes: tuple[str, ...] = ()
    refuses_why: str = ""


@record(frozen=True)
class Skip:
    pattern: Regex
    cite: str


@record(frozen=True)
class Drop:
    pattern: Regex
    cite: str
    when: Expr | None = None


@record(frozen=True)
class Stacked:
    from_: str = field(metadata={"key": "from"})
    to: str
    shard: str


@record(frozen=True)
class Concat:
    """Tensors the loader holds until every part has arrived, then concatenates (dim 0, in
    ``parts`` order) into one parameter: the name with ``parts[0]`` replaced by ``into``. A part
    whose partners never come is dropped without a word, as is a pair whose fused name is no
    parameter (SGLang's MLA drafter: q_a_proj + kv_a_proj_with_mqa)."""

    parts: tuple[str, ...]
    into: str
    cite: str


@record(frozen=True)
class Prefix:
    add: str
    mode: Literal["unless_parameter", "unless_contains", "unless_starts_with"]
    unless_contains: tuple[str, ...] = ()
    unless_starts_with: tuple[str, ...] = ()


@record(frozen=True)
class Conditional:
    """A name whose parameter exists only when ``when`` holds (said in the reason it is dropped)."""

    pattern: Regex
    when: Expr


@record(frozen=True)
class Never:
    """A name whose parameter the engine's module never has (said in the reason)."""

    pattern: Regex


@record(frozen=True)
class Names:
    order: tuple[Step, ...]
    unknown: Literal["drop", "error", "warn"]
    cite: str
    unknown_exceptions: tuple[Regex, ...] = ()
    # names ignored only when the name before the match is an existing module (vLLM's `.bias`)
    module_exceptions: tuple[Regex, ...] = ()
    rewrite: tuple[Rewrite, ...] = ()
    param_rename: tuple[ParamRename, ...] = ()
    special: tuple[Special, ...] = ()
    skip: tuple[Skip, ...] = ()
    drop: tuple[Drop, ...] = ()
    stacked: tuple[Stacked, ...] = ()
    concat: tuple[Concat, ...] = ()
    prefix: tuple[Prefix, ...] = ()
    conditional: tuple[Conditional, ...] = ()
    never: tuple[Never, ...] = ()


@record(frozen=True)
class Parameter:
    canonical: str
    param: str
    required: bool
    cite: str
    when: Expr | None = None
    # required only in the layers where this holds (an expression over the config and `layer`):
    # elsewhere the module has the parameter but its forward pass never reads it
    required_when: Expr | None = None
    from_target: FromTarget | None = None
    note: str = ""
    since: Version | None = None
    until: Version | None = None
    # the parameter's shape, an expression over the config fields (and `layer`): a checkpoint
    # tensor of another shape stops the load (the weight loader asserts)
    shape: Expr | None = None
    # the parameter exists only in the classes these architectures (as the engine reads them) build
    architectures: tuple[str, ...] = ()
    # what the weight loader narrows the checkpoint tensor along (its tensor-parallel shard dim:
    # "rows" dim 0, "columns" dim 1): a tensor longer there loads its leading slice and no
    # assertion fires; a shorter one fails the narrow ("error") or fills the leading slice, the
    # rest zero ("pad")
    narrows: Literal["rows", "columns"] | None = None
    narrow_smaller: Literal["error", "pad"] = "error"


@record(frozen=True)
class ConfigField:
    field: str
    paths: tuple[Path, ...]  # in lookup order; () = the engine does not read the field
    length_of: tuple[Path, ...] = ()  # lists whose length is the value, after `paths`
    required: bool = False  # absent: the load fails
    default: Expr | None = None  # absent: the value (None: stays unknown)
    since: Version | None = None
    until: Version | None = None
    # an explicit null: used as is (value), read as absent (default), or rejected (error)
    null: Literal["value", "default", "error"] = "value"
    type: Literal["int", "int_list"] | None = None  # another type (not null) is rejected
    stage: Stage = "build"  # where a rejected or required-absent value stops the engine
    auto: dict[str, str] = field(default_factory=dict)  # value -> the value the engine uses
    from_target: Literal["dtype"] | None = None  # the engine takes the target's value
    # read from the TARGET's config instead (first path found, else `default`); unknown (None)
    # without --target: what the engine derives from the target model it serves
    target_paths: tuple[Path, ...] = ()


@record(frozen=True)
class Targets:
    supported_model_types: tuple[str, ...] = ()
    supported_architectures: tuple[str, ...] = ()


@record(frozen=True)
class SpeculatorsAdapter:
    # top-level keys always written over transformer_layer_config: the top-level value, else the
    # default given here (a TOML value; "null" for None)
    override: dict[str, Union[bool, int, float, str]]
    copy_if_set: tuple[str, ...]  # top-level keys copied only when set (not null)
    trainers_mean: dict[str, str]
    derives_architecture: bool
    # the layer config's values are set as attributes, never validated: a JSON boolean where an
    # integer is read is Python's 0 or 1
    bool_is_int: bool = False
    # no defaults either: the fields whose absence stops the build (the model reads them as
    # attributes), and the stage where a null one stops the engine
    absent_fails: tuple[str, ...] = ()
    # ("forward": the engine starts, and the draft's first forward fails on it)
    null_fails: dict[str, Literal["config", "build", "load", "forward"]] = field(
        default_factory=dict
    )
    # and no type check: a value of the wrong JSON type fails where it is first used, or never
    # (data_aux.py WrongType); a field and type not listed stops the build
    wrong_type: tuple[WrongType, ...] = ()


@record(frozen=True)
class Refuse:
    when: Expr  # over the normalized config's fields
    why: str


@record(frozen=True)
class Output:
    names_dialect: str
    architectures: tuple[str, ...]
    config_layout: Literal["flat", "speculators"]
    aux_ids_paths: tuple[Path, ...]
    aux_convention: Literal["sglang", "vllm"]
    # model_type written when the source says none (or "eagle3"), and the config fields written
    # with their value even when the source leaves them to a default (the engines' defaults are
    # a config class's, easy to get wrong: the MLA dims)
    model_type: str = "llama"
    explicit: tuple[str, ...] = ()
    # model_type values the engine cannot take, and the one convert writes instead (same class)
    model_type_for: dict[str, str] = field(default_factory=dict)
    keep: tuple[str, ...] = ()
    refuse: tuple[Refuse, ...] = ()
    family_architectures: dict[str, str] = field(default_factory=dict)


@record(frozen=True)
class Engine:
    """mappings/engines/sglang.toml, vllm.toml: an engine's drafter loader."""

    engine: EngineInfo
    names: Names
    parameter: tuple[Parameter, ...]
    config: tuple[ConfigField, ...]
    aux_layers: AuxLayers
    targets: Targets
    output: Output
    speculators_adapter: SpeculatorsAdapter | None = None
    layers: Layers | None = None
    fails: tuple[Fail, ...] = ()
    # the engine's decisions from the model path (its first file only: before any loader)
    model_path: tuple[ModelPath, ...] = ()
    config_class: ConfigClass | None = None


@record(frozen=True)
class Format:
    """mappings/engines/speculators.toml: a format convert writes, not an engine."""

    engine: FormatInfo
    output: Output


# ---------------------------------------------------------------------------------------------
# what the types cannot say


def _names_known(data: Engine) -> frozenset[str]:
    """The names an engine's conditions and defaults may use: its config fields, and the config's
    own top-level keys mappings/config.toml knows (the replay resolves both)."""
    raw = {p for s in config_mod.field_specs() for p in s.paths if "." not in p}
    return frozenset(raw | {c.field for c in data.config})


def _check_names(src: str, allowed, path: str, what: str) -> None:
    unknown = sorted(expr.names(src) - set(allowed))
    if unknown:
        raise Bad(path, f"`{unknown[0]}` is not {what}")


def _check(data: Engine | Format) -> None:
    """What the types cannot say: the names the data refer to exist (an inventory, a dialect,
    the values an expression uses), and every rule list is applied (named in names.order)."""
    try:
        inventory.by_name(data.engine.inventory)
    except KeyError:
        raise Bad("engine.inventory", "no such architecture in mappings/architectures/") from None
    try:
        dialects.by_name(data.output.names_dialect)
    except KeyError:
        raise Bad("output.names_dialect", "no such dialect in mappings/dialects/") from None
    normalized = {s.name for s in config_mod.field_specs()}
    for i, r in enumerate(data.output.refuse):
        _check_names(
            r.when,
            normalized,
            f"output.refuse[{i}].when",
            "a field of the normalized config (mappings/config.toml)",
        )
    if not isinstance(data, Engine):
        return
    known = _names_known(data)
    what = "a [[config]] field of this file nor a config key mappings/config.toml knows"
    n = data.names
    for lst in ("special", "drop", "conditional"):
        for i, r in enumerate(getattr(n, lst)):
            if r.when is not None:
                _check_names(r.when, known, f"names.{lst}[{i}].when", what)
    for i, p in enumerate(data.parameter):
        if p.when is not None:
            _check_names(p.when, known, f"parameter[{i}].when", what)
        if p.shape is not None:
            _check_names(p.shape, known | {"layer"}, f"parameter[{i}].shape", what + " nor `layer`")
    for i, c in enumerate(data.config):
        if c.default is not None:
            _check_names(c.default, known, f"config[{i}].default", what)
    for i, f in enumerate(data.fails):
        _check_names(f.when, known, f"fails[{i}].when", what)
    if data.layers is not None:
        _check_names(data.layers.count, known, "layers.count", what)
    for i, c in enumerate(data.aux_layers.convention):
        _check_names(
            c.captures_output_of,
            {"k", "ids", "L"},
            f"aux_layers.convention[{i}].captures_output_of",
            "one of k, ids, L",
        )
        if c.capturable is not None:
            _check_names(
                c.capturable,
                {"k", "ids", "L"},
                f"aux_layers.convention[{i}].capturable",
                "one of k, ids, L",
            )
        if c.fails_when is not None:
            _check_names(
                c.fails_when, {"k", "L"}, f"aux_layers.convention[{i}].fails_when", "one of k, L"
            )
        if c.default_ids_output_of is not None:
            _check_names(
                c.default_ids_output_of,
                {"L"},
                f"aux_layers.convention[{i}].default_ids_output_of",
                "L",
            )
    _check_rewrites(n)
    runners = data.aux_layers.runner
    if runners and sum(r.default for r in runners) != 1:
        raise Bad("aux_layers.runner", "exactly one runner is the default")
    for step in typing.get_args(Step):
        if getattr(n, step) and step not in n.order:
            raise Bad(
                "names.order",
                f"does not name {step!r}: the [[names.{step}]] rules would never apply",
            )
    fields = [c.field for c in data.config]
    for f in fields:
        if fields.count(f) > 1:
            raise Bad("config", f"field {f!r} is described twice")


def _check_rewrites(n: Names) -> None:
    """Every spelling a loader renames is one the name table knows (mappings/names.toml), and
    the loader's own match turns it into the other spelling of that alias."""
    for i, r in enumerate(n.rewrite):
        a = names.alias(r.alias)
        if a is None:
            raise Bad(
                f"names.rewrite[{i}].alias",
                f"{r.alias!r} is no alias of mappings/names.toml: add the spelling there, with "
                "its origin",
            )
        if (r.pattern is None) != (r.replace is None):
            raise Bad(f"names.rewrite[{i}]", "pattern and replace go together")
        found, made = r.spellings()
        pattern, replace = r.regex()
        probe = found if a.match == "exact" else found + "weight"
        got = re.sub(pattern, replace, probe, count=int(r.occurrences == "first"))
        if got != (made if a.match == "exact" else made + "weight"):
            raise Bad(
                f"names.rewrite[{i}]",
                f"turns {probe!r} into {got!r}, not the alias's other spelling {made!r}",
            )


def parse(raw: dict, where: str, kind: type = Engine):
    """Build ``kind`` (Engine or Format) from a parsed mappings file; ``where`` names it in
    errors."""
    return mappings.build(kind, raw, where, _check)


def load_file(path) -> Engine | Format:
    """An engine file at ``path`` (a copy, a user's edit): speculators.toml is a Format."""
    kind = Format if os.path.basename(str(path)) == "speculators.toml" else Engine
    return parse(mappings.load_toml_file(path), str(path), kind)


@mappings.memo
def load(engine: str) -> Engine | Format:
    """A file of mappings/engines/: an engine's (first) loader, a format, or one of an engine's
    other loaders (named in its [engine] ``loaders``)."""
    if engine not in LAYOUTS and not any(engine in load(e).engine.loaders for e in ENGINES):
        raise WeightcheckError(None, f"unknown engine {engine!r}: choose {', '.join(ENGINES)}")
    kind = Format if engine == "speculators" else Engine
    rel = f"engines/{engine}.toml"
    return parse(mappings.load(rel), mappings.where(rel), kind)


def engine_data(name: str) -> Engine:
    """An engine's data (sglang, vllm); the unknown-engine error for anything else (the
    `speculators` layout too: a format, not an engine)."""
    if name not in ENGINES:
        raise WeightcheckError(None, f"unknown engine {name!r}: choose {', '.join(ENGINES)}")
    return load(name)


def read_by(layout: str) -> tuple[str, ...]:
    """The engines that load a ``convert --to`` layout: an engine its own, a format those its
    [engine] ``read_by`` names."""
    data = load(layout)
    return data.engine.read_by if isinstance(data, Format) else (layout,)


def applies(item, version: str) -> bool:
    """Whether a rule with ``since``/``until`` applies to an engine release (``until``: the first
    release it no longer applies to)."""
    s, u = item.since, item.until
    return (not s or version_key(version) >= version_key(s)) and (
        not u or version_key(version) < version_key(u)
    )


def newest(data: Engine) -> str:
    return max(data.engine.versions_read, key=version_key)


def files() -> tuple[str, ...]:
    """Every file of mappings/engines/ by name: the layouts and the engines' other loaders."""
    return LAYOUTS + tuple(n for e in ENGINES for n in load(e).engine.loaders)


def runners(engine: str) -> tuple[Runner, ...]:
    """The engine's model runners (its first file's [[aux_layers.runner]]), the default first."""
    rs = engine_data(engine).aux_layers.runner
    return tuple(sorted(rs, key=lambda r: not r.default))


def loaders(engine: str) -> list[Engine]:
    """Every drafter loader of an engine, its first file first."""
    first = engine_data(engine)
    return [first] + [load(n) for n in first.engine.loaders]


def renamed(data: Engine, arch):
    """``architectures[0]`` as the engine reads it before selecting a class (vLLM's EAGLEConfig
    prefixes Eagle3)."""
    r = data.engine.arch_rename
    if r is None or not isinstance(arch, str):
        return arch
    if arch.startswith(r.keep_affix) or arch.endswith(r.keep_affix):
        return arch
    return r.prefix + arch


def loader_for(engine: str, arch0) -> str:
    """The file (mappings/engines/<name>.toml) of the loader ``architectures[0]`` selects in the
    engine; the engine's first one (whose replay says that nothing selects it) when none does."""
    for name in (engine, *engine_data(engine).engine.loaders):
        data = load(name)
        if renamed(data, arch0) in data.engine.architectures:
            return name
    return engine


def resolved_architecture(engine: str, arch) -> object:
    """``architectures[0]`` as the engine reads it (vLLM renames LlamaForCausalLM to
    Eagle3LlamaForCausalLM for an EAGLE-3 drafter; SGLang renames nothing)."""
    return renamed(load(loader_for(engine, arch)), arch)


def selects_eagle3_loader(engine: str, arch) -> bool:
    """Whether ``architectures[0]`` selects one of the engine's EAGLE-3 drafter loaders."""
    data = load(loader_for(engine, arch))
    return renamed(data, arch) in data.engine.architectures


def loader_of(architecture, engine: str) -> Engine | None:
    """The engine's loader for a drafter architecture (mappings/architectures/), None when the
    engine data describe none."""
    for data in loaders(engine):
        if architecture is not None and architecture.name == data.engine.inventory:
            return data
    return None


def output_for(layout: str, architecture) -> Output:
    """What ``convert --to layout`` writes for a drafter of ``architecture``: the [output] of the
    engine's loader for it (a format's own)."""
    if layout in ENGINES:
        data = loader_of(architecture, layout)
        if data is not None:
            return data.output
    return load(layout).output


def replays(architecture, engine: str = "sglang") -> bool:
    """Whether the engine data describe this drafter architecture's loader (``inventory`` in
    [engine] of one of its files); an unknown architecture is replayed as the engines would
    treat it."""
    if architecture is None:
        return True
    if engine not in ENGINES:  # a format: the inventory it holds
        return architecture.name == load(engine).engine.inventory
    return loader_of(architecture, engine) is not None
