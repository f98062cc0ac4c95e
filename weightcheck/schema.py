"""The schemas of the data files in mappings/ (besides the engine files, whose typed data the
replay reads directly: weightcheck/engines/data.py), as frozen dataclasses that
weightcheck/mappings.py :func:`~weightcheck.mappings.build` follows.

A field is a TOML key (``metadata={"key": ...}`` when the names differ); its type hint says what
the key accepts — ``Literal`` lists the allowed values, a dataclass is a table, ``tuple[X, ...]``
a list (of tables: ``[[key]]``), ``X | None`` or a default makes it optional — and the string
kinds ``Expr``, ``Regex``, ``Path`` are checked as expressions, regular expressions and dotted
config paths. Anything else in a file is an error naming the file, the key and what is allowed.

    kind            files                                   schema
    dialect         mappings/dialects/*.toml, --mapping     DialectFile
    name table      mappings/names.toml                     NamesFile
    architecture    mappings/architectures/*.toml           ArchitectureFile
    config fields   mappings/config.toml                    ConfigFile
    rules, causes   mappings/rules.toml                     RulesFile
    engine, format  mappings/engines/*.toml                 engines/data.py Engine, Format
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.mappings import Expr, Path, Regex, Version
from weightcheck.record import record

# The shapes of the files: records (weightcheck/record.py: dataclasses defined without generated
# code), built once by the loader and only read after, so compared by identity; the two whose
# instances the model keeps and hashes (TensorTemplate, FieldSpec) are frozen.
shape = record(eq=False)

# ---------------------------------------------------------------------------------------------
# dialects: mappings/dialects/*.toml and a user's --mapping file


@shape
class DialectInfo:
    """[dialect]"""

    name: str
    kind: Literal["layout", "wrapper"] = "layout"
    description: str = ""
    aliases: tuple[str, ...] = ()
    # the engine whose aux-layer-id convention this trainer's ids follow
    aux_convention: Literal["sglang", "vllm"] | None = None


@shape
class Detect:
    """[detect]: each is evidence for the dialect when it matches."""

    tensor_patterns: tuple[Regex, ...] = ()
    config_keys: tuple[str, ...] = ()  # "a.b" looks inside object a
    architectures: tuple[str, ...] = ()


@shape
class StripRule:
    """[[strip]]: a prefix a wrapper puts around every name."""

    prefix: str
    cite: str = ""


@shape
class RenameRule:
    """[[rename]]: exactly one of ``exact``, ``prefix``, ``regex`` -> ``to``; or ``alias``: a
    spelling of mappings/names.toml (its written -> canonical, no ``to``)."""

    to: str | None = None
    exact: str | None = None
    prefix: str | None = None
    regex: Regex | None = None
    alias: str | None = None
    cite: str = ""


@shape
class DialectFile:
    dialect: DialectInfo
    detect: Detect = Detect()
    strip: tuple[StripRule, ...] = ()
    rename: tuple[RenameRule, ...] = ()


# ---------------------------------------------------------------------------------------------
# the name table: mappings/names.toml (weightcheck/model/names.py)


@record(frozen=True)
class Alias:
    """[[alias]]: a spelling some producer writes or some engine renames, and its canonical one."""

    written: str
    canonical: str
    match: Literal["prefix", "exact"]
    scope: Literal["layout", "any"]
    origin: str
    cite: str


@record(frozen=True)
class Buffer:
    """[[buffer]]: a non-parameter buffer an export may carry (no drafter parameter)."""

    pattern: Regex
    what: str
    origin: str
    cite: str


@shape
class NamesFile:
    alias: tuple[Alias, ...] = ()
    buffer: tuple[Buffer, ...] = ()


# ---------------------------------------------------------------------------------------------
# architectures: mappings/architectures/*.toml

Presence = Literal["required", "optional"]


@shape
class ArchitectureInfo:
    """[architecture]"""

    name: str
    description: str = ""
    config_architectures: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()
    attention: Literal["gqa", "mla"] = "gqa"
    default: bool = False


@shape
class LayersSpec:
    """[layers]: layer 0's names start with ``first``, layer i's with ``other`` ({layer} = i)."""

    first: str
    other: str


@record(frozen=True)
class TensorTemplate:
    """[[tensor]]: one tensor the architecture has, its shape over the config's symbols."""

    name: str
    shape: tuple[Expr, ...]
    dtype: str = "model"  # "model": the config's dtype; else a safetensors dtype (I64, BOOL)
    when: Expr | None = None
    presence: Presence = "required"
    for_each: Expr | None = None
    note: str = ""
    # presence in decoder layers >= 1 when it differs from layer 0's
    later_presence: Presence | None = field(
        default=None, metadata={"key": "presence_in_later_layers"}
    )
    later_note: str = field(default="", metadata={"key": "note_in_later_layers"})


@record(frozen=True)
class FusedTemplate:
    """[[fused]]: one tensor that is another spelling of several of the architecture's tensors,
    concatenated along dim 0 in the order of ``parts`` (all canonical names of [[tensor]])."""

    name: str
    parts: tuple[str, ...]
    note: str = ""
    cite: str = ""


@shape
class ArchitectureFile:
    architecture: ArchitectureInfo
    tensor: tuple[TensorTemplate, ...]
    layers: LayersSpec | None = None
    fused: tuple[FusedTemplate, ...] = ()


# ---------------------------------------------------------------------------------------------
# config fields: mappings/config.toml


@record(frozen=True)
class FieldSpec:
    """[[field]]: one field of the normalized config, the paths it is read from in order."""

    name: str
    paths: tuple[Path, ...]
    type: Literal["int", "float", "bool", "str", "list", "object"]
    category: Literal["architecture", "serving", "informational"]
    symbol: str | None = None  # its name in shape expressions (H, I, nh, ...)
    default: Expr | None = None
    # an explicit null: "absent" (the default stands in, how transformers writes "not set") or
    # "value" (null is the value: DeepseekV3Config's q_lora_rank null is not its default 1536)
    null: Literal["absent", "value"] = "absent"


@shape
class ConfigFile:
    field: tuple[FieldSpec, ...]


# ---------------------------------------------------------------------------------------------
# rules: mappings/rules.toml (each rule's name, severity, page and the causes it explains)

Severity = Literal["error", "warning", "info"]


@shape
class Explains:
    """[[rule.WCnnn.explains]]: findings a root finding explains, listed under it (rules/causes.py).
    ``subject``: "same" (the root's subject), "names_root" (the consequence's message names the
    root's subject), "any", "named" (the root's message or detail names the consequence's subject), else a
    regular expression the consequence's subject must match."""

    codes: tuple[str, ...]
    why: str
    subject: str = "same"


# What the engine (or trainer) does with the drafter a finding describes: the one thing a finding's
# severity is decided by (rules/base.py severity_of; docs/rules.md states the rule):
#   crash        it crashes or refuses (at start-up, config, build or load)            -> error
#   untrained    it serves a parameter with no trained values (its initial value,
#                a constant, NaN)                                                       -> error
#   misfed       it feeds the drafter other values than it was trained on (other
#                captured layers, another vocabulary map, another width)                -> error
#   conditional  the served model is right only under a condition the finding names
#                (an engine, a runner, a flag, a version, a trained value)              -> warning
#   unchanged    nothing the engine serves (or the trainer trains) changes              -> info
Consequence = Literal["crash", "untrained", "misfed", "conditional", "unchanged"]


@shape
class ConsequenceCase:
    """[[rule.WCnnn.consequence.case]]: a case in which the rule's finding has another consequence
    (the rule passes ``consequence=`` for it); ``when`` names the case on the rule's page."""

    kind: Consequence
    when: str


@shape
class RuleConsequence:
    """[rule.WCnnn.consequence]: what the engine does with a drafter the rule finds, which decides
    the rule's severity; ``says`` is shown on the rule's page."""

    kind: Consequence
    says: str
    case: tuple[ConsequenceCase, ...] = ()


@shape
class RulePage:
    """[rule.WCnnn]: everything about a rule but its code (weightcheck/rules/ binds the function).
    Its severity is its consequence's (no rule states a severity of its own)."""

    name: str
    summary: str
    what: str
    fix: str
    consequence: RuleConsequence
    why: str = ""
    reported: str = ""
    # why the finding depends on the layout the drafter is written in (docs/consistency.md)
    layout_specific: str = ""
    explains: tuple[Explains, ...] = ()


@shape
class Group:
    """[[group]]: a code group of docs/rules.md."""

    prefix: str
    title: str
    intro: str = ""


@shape
class RulesFile:
    title: str
    intro: str
    group: tuple[Group, ...]
    rule: dict[str, RulePage]
    # the roots whose causes are applied first claim a consequence two roots explain
    cause_order: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# trainers: mappings/trainers/*.toml (weightcheck/trainers/, docs/trainers.md)


@shape
class TrainerInfo:
    """[trainer]"""

    name: str
    version: Version
    versions_read: tuple[Version, ...]
    architectures: tuple[str, ...]  # the classes its EAGLE-3 strategy builds
    layers_built: int | str  # a count, or the symbol that gives it (L)
    detect: str  # what in a training config says it is this trainer's
    cite_architectures: str = ""
    cite_detect: str = ""
    cite_layers: str = ""


@shape
class TrainerLoad:
    """[load]: how the trainer loads a pretrained drafter for training; every fact cited."""

    missing: Literal["raises", "init"]  # a parameter SRC lacks
    shape_mismatch: Literal["raises"]
    allowed_missing: tuple[str, ...] = ()
    weight_files: tuple[str, ...] = ()  # the only names its loader reads in a folder
    training_state_unexpected: Literal["raises"] | None = None
    state_file: str | None = None  # a run checkpoint it warm-starts from
    strategy: str | None = None
    requires_speculators_config: bool = False
    requires_verifier: bool = False
    requires_equal_hidden: bool = False
    builds_from_src: str | None = None  # the key SRC's config holds when it builds from that
    default_draft_vocab_size: int | None = None
    not_validated: tuple[str, ...] = ()
    # SRC's transformer_layer_config becomes transformers' strict LlamaConfig: the fields it
    # declares without None (null raises) and the class's defaults (an absent field takes them);
    # the top-level fields the trainer's pydantic config class validates, by type (lax: it
    # coerces "128" and 128.0 to 128, "true" to True; the `_or_null` ones take null)
    layer_not_null: tuple[str, ...] = ()
    layer_defaults: dict[str, int] = field(default_factory=dict)
    top_types: dict[
        str, Literal["int", "int_or_null", "bool", "bool_or_null", "int_list_or_null", "str_list"]
    ] = field(default_factory=dict)
    base_model_prefix: str | None = None
    default_target_layer_ids: tuple[Expr, ...] = ()
    says_embedding: str = ""  # WC902: what it does when SRC has no embedding
    says_without_map: str = ""  # WC907: what it does with d2t/t2d when the run gives no map
    # the command that writes SRC under the trainer's own names, a fused tensor's parts split
    # (WC908, WC903): SRC, OUT and TARGET stand for the user's paths
    convert: str = ""
    cite_names: str = ""
    cite_unexpected: str = ""
    cite_missing: str = ""
    cite_shape: str = ""
    cite_weight_files: str = ""
    cite_state: str = ""
    cite_config: str = ""
    cite_verifier: str = ""
    cite_hidden: str = ""
    cite_builds_from: str = ""
    cite_draft_vocab: str = ""
    cite_validation: str = ""
    cite_layer_types: str = ""
    cite_layer_class: str = ""
    cite_base_model_prefix: str = ""
    cite_t2d: str = ""
    cite_target_layers: str = ""
    cite_fused: str = ""


@shape
class TrainerParam:
    """[[param]]: a parameter or buffer of the trainer's model, by its own name."""

    name: str  # {layer} and {i} expanded by the replay
    shape: tuple[Expr, ...]
    cite: str
    origin: Literal["src", "target", "src_else_target", "data"] = "src"
    when: Expr | None = None
    for_each: Expr | None = None
    buffer: bool = False
    data_when: Expr | None = None
    data_if_map: bool = False  # a run's map given (--training-vocab) is loaded whatever the sizes


@shape
class TrainerFile:
    trainer: TrainerInfo
    load: TrainerLoad
    param: tuple[TrainerParam, ...]
