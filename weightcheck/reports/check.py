"""`weightcheck check`'s report, typed down to every leaf: the replay of ``--engine`` (its
config, each tensor's fate, each parameter's state, the aux layers), plain check's line per
engine, the target, ``--live``, ``--values``, the training gate and the run's vocabulary map."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.engines.replay_types import Failure, Landing, ParamState
from weightcheck.record import record
from weightcheck.reports.base import ConfigValue, Keyed, Report, SourceInfo, key, optional
from weightcheck.rules.base import Finding, Severity


@record
class Summary:
    errors: int
    warnings: int
    info: int


# =============================================================================================
# --engine: the replay (engines/view.py), field for field
@record
class ConfigRead:
    """A config field as the engine reads it: the value it sees and where it came from (a key
    path, ``engine default``, ``absent``...)."""

    value: ConfigValue
    from_: str = key("from")


@record
class AuxConvention:
    """Which target layers an id captures, for some target model types (the engine's data)."""

    target_model_types: list[str]
    captures_output_of: str  # an expression over k, ids, L
    default_ids_output_of: str | None = optional()
    since: str | None = optional()
    versions: list[str] | None = optional()


@record
class AuxRunner(Keyed):
    """One of the engine's model runners (mappings/engines/<engine>.toml [[aux_layers.runner]]):
    where it reads the aux ids, and the target layers it then captures."""

    name: str
    default: bool  # the one the release runs unless runs_when of another holds
    runs_when: str
    ids: list[ConfigValue] | None  # as the config writes them where it reads (None: its default)
    from_: str | None = key("from")  # the key path they were read from
    # with --target: the target layers captured, in the order the drafter receives them
    captures_output_of_layers: list[int] | None = optional()
    captures: bool | None = optional()  # False: use_aux_hidden_state is false


@record
class AuxLayers(Keyed):
    """Where the engine reads the aux layer ids, the ids, and the layers they capture."""

    ids: list[ConfigValue] | None  # as the config writes them (None: the engine's default)
    from_: str | None = key("from")  # the key path they were read from
    default: str = ""  # the engine's default, in words
    conventions: list[AuxConvention] = field(default_factory=list)
    # the target layers whose outputs are captured, in the order the drafter receives them
    # (--target; None without it, or when nothing is captured)
    captures_output_of_layers: list[int] | None = None
    captures: bool | None = optional()  # False: use_aux_hidden_state is false
    why: str | None = optional()  # why nothing is captured
    # each model runner (the default first): ids and from above are the default runner's
    runners: list[AuxRunner] = field(default_factory=list)


@record
class DraftVocab:
    size: int | None
    from_: str = key("from")


@record(kw_only=True)
class EngineReport(Keyed):
    """``check --engine E``: what the engine does with the drafter, as replayed from
    mappings/engines/<loader>.toml."""

    name: str
    version: str
    loader: str  # mappings/engines/<loader>.toml
    speculators_format: bool
    config: dict[str, ConfigRead]
    tensors: list[Landing]  # one per checkpoint tensor
    parameters: list[ParamState]  # one per engine parameter
    aux_layers: AuxLayers
    starts: bool
    fails: Failure | None  # where it stops (None: it starts)
    # architectures[0] after the engine's renaming (a config's value: of any JSON type)
    architecture: ConfigValue
    dtype: str | None  # what it builds the draft in (None: the target's)
    dtype_from: str
    layers: int | None  # decoder layers built
    draft_vocab: DraftVocab
    tied_head: bool | None
    captured_layers: list[int] | None  # the target layers captured (with --target)
    # where the target's first forward stops on the aux ids the default runner reads (with
    # --target; None: it runs)
    forward_fails: Failure | None = None


@record
class RunVerdict:
    """What ``check --engine E`` sums up: its findings as it lists them (one cause, one
    finding)."""

    errors: int
    warnings: int
    codes: list[str]  # of its errors and warnings


@record(kw_only=True)
class EngineLine(Keyed):
    """Plain check's line of one engine: what it does with the drafter and what its own run,
    ``check --engine E``, finds."""

    version: str
    starts: bool
    layers: int | None
    dtype: str | None
    draft_vocab: DraftVocab
    lm_head: str | None  # the head's state: loaded, from_target, random, optional-absent
    embed_tokens: str | None
    left_at_init: list[str]  # required parameters no tensor fills
    dropped: list[str]  # tensors the loader drops without a word
    says: str  # the line, in words
    # the engine's own run, check --engine E, finds no error: it serves the drafter as trained
    serves: bool = True
    findings: RunVerdict | None = optional()  # the engine's own run


# =============================================================================================
# --target
@record
class TensorHeader:
    name: str
    shape: list[int]
    dtype: str


@record(kw_only=True)
class TargetInfo(Keyed):
    """The target model (config and headers only)."""

    spec: str
    commit: str | None
    model_type: str | None
    text_model_type: str | None
    architectures: list[ConfigValue]
    hidden_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None
    dtype: str | None
    config_only: bool  # a folder or repo with config.json and no weights
    embed: TensorHeader | None
    lm_head: TensorHeader | None


# =============================================================================================
# --live: the installed engine's own loader (engines/live.py, live_compare.py)
@record
class Disagreement:
    """A point where the live loader and the replay differ (WC713)."""

    says: str
    live: ConfigValue
    replay: ConfigValue
    tensor: str | None = optional()
    param: str | None = optional()
    stage: str | None = optional()


@record
class LiveWarning:
    key: str | None  # the tensor being loaded when the engine logged it
    message: str


@record
class Compared:
    tensors: int  # tensors both saw
    parameters: bool  # whether both load to the end (parameters compared)


@record(kw_only=True)
class LiveReport(Keyed):
    engine: str
    version: str  # installed
    architecture: ConfigValue  # the class built (a config's value: of any JSON type)
    loads: bool
    fails: Failure | None
    tensors: list[Landing]
    parameters: list[ParamState]
    warnings: list[LiveWarning]
    notes: list[str]
    replay_version: str | None
    disagreements: list[Disagreement]
    agrees: bool | None  # None: no replay to compare with
    compared: Compared | None = optional()


# =============================================================================================
# --values
@record
class ValueStats:
    """A tensor's values, streamed: min and max of the finite ones, how many are not finite."""

    min: float | None
    max: float | None
    non_finite: int
    numel: int


# =============================================================================================
# --training-config: the training gate (rules/training.py) and the trainer's replay
@record
class FieldDiff:
    field: str
    src: ConfigValue
    training: ConfigValue


@record
class ShapeDiff:
    name: str
    src: list[int]
    trainer: list[int]


@record(kw_only=True)
class TrainerReport:
    """What the trainer does with SRC when a run starts from it (weightcheck/trainers/)."""

    name: str
    version: str
    source_kind: str  # pretrained | training_state
    raises: str | None  # why it raises before training starts
    # the config it builds its model from: the training config, or SRC's own (the training
    # config is then never read)
    built_from: Literal["training", "src"]
    fix: str | None
    cite: str | None
    parameters: dict[str, Literal["src", "target", "init", "data"]]  # where each one comes from
    buffers: list[str]
    parameters_from_src: int
    parameters_at_init: int
    parameters_from_target: int
    fraction: float
    unexpected: list[str]
    missing: list[str]
    mismatched: list[ShapeDiff]
    # SRC's fused tensors (qkv_proj, gate_up_proj) its loader takes by name and never splits ->
    # their parts, named as SRC names them
    unsplit: dict[str, list[str]]


@record(kw_only=True)
class TrainingReport(Keyed):
    """Can SRC initialize exactly the architecture the training config builds?"""

    architecture: str | None
    src_architecture: str | None
    architecture_fields: list[FieldDiff]
    parameters_initialized: int
    parameters: int
    fraction_initialized: float
    initialized: list[str]
    from_scratch: list[str]
    allow_partial_init: bool
    trainer: TrainerReport | None
    says: str  # the line, in words


@record(kw_only=True)
class TrainingVocab(Keyed):
    """--training-vocab: the run's vocabulary map against SRC's."""

    map: str
    a_draft: int
    b_draft: int
    shared: int
    same_index: int
    a_identity: bool
    b_identity: bool
    a_placeholder: bool
    b_placeholder: bool
    misread_rows: int
    missing_tokens: int


# =============================================================================================
@record(kw_only=True)
class CheckReport(Report):
    """``weightcheck check``: schema ``weightcheck.check/1``. ``ok`` is the gate: no error."""

    SCHEMA_NAME = "check"

    schema: Literal["weightcheck.check/1"] = field(default="weightcheck.check/1")
    ok: bool
    source_info: SourceInfo = key("source")
    dialect: str | None
    architecture: str | None
    engine: EngineReport | None  # --engine: the replay
    target: TargetInfo | None  # --target
    findings: tuple[Finding, ...]  # every one, ungrouped
    summary: Summary
    conclusion: str
    engines: dict[str, EngineLine] | None = optional()  # plain check: each engine's line
    live: LiveReport | None = optional()
    values: dict[str, ValueStats] | None = optional()
    training: TrainingReport | None = optional()
    training_vocab: TrainingVocab | None = optional()

    @property
    def source(self) -> str:
        return self.source_info.spec

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def of(self, severity: Severity) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == severity)

    @property
    def errors(self) -> tuple[Finding, ...]:
        return self.of("error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return self.of("warning")

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}
