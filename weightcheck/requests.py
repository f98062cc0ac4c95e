"""What a command is asked: one typed request per command, carrying its options from the command
line (weightcheck/cli.py) or the Python API (weightcheck/api.py) to its pipeline
(weightcheck/commands/), which reads them from here and from nowhere else.

Adding an option to a command is a field here and its ``click.option`` in cli.py (under the
field's name): the API passes its keyword arguments through (``weightcheck.check(src,
engine="vllm")`` is ``CheckRequest(src=..., engine="vllm")``), the pipeline and the rules read the
request (``ctx.request`` in a rule). What only changes how a report is drawn (``--format``,
``--explain``) is the CLI's, not the request's.
"""

from __future__ import annotations

import os

from weightcheck.record import record

PathLike = str | os.PathLike


def _path(p) -> str | None:
    return None if p is None else os.fspath(p)


@record(kw_only=True)
class InspectRequest:
    src: str
    revision: str | None = None  # Hub branch, tag or commit (same as SRC@REV)
    token: str | None = None
    mapping: str | None = None  # your own dialect file

    def __post_init__(self):
        self.src, self.mapping = _path(self.src), _path(self.mapping)


@record(kw_only=True)
class CompareRequest:
    a: str
    b: str
    revision_a: str | None = None
    revision_b: str | None = None
    values: bool = False  # read both sides' weights (torch)
    strict: bool = False  # also fail on dtype, serving-field and optional-tensor differences
    token: str | None = None
    progress: bool = False  # a progress line on a terminal

    def __post_init__(self):
        self.a, self.b = _path(self.a), _path(self.b)


@record(kw_only=True)
class CheckRequest:
    src: str
    engine: str | None = None  # sglang|vllm[==VERSION]: that engine's own view
    target: str | None = None  # the target model: config and headers
    training_config: str | None = None  # a training config file, or a folder holding one
    allow_partial_init: bool = False  # with training_config: another architecture is a warning
    trainer: str | None = None  # with training_config: the trainer replayed
    training_vocab: str | None = None  # the training run's vocabulary map
    values: bool = False  # also read the weights (torch)
    live: bool = False  # also run the installed engine's own loader (with engine)
    revision: str | None = None
    token: str | None = None
    progress: bool = False  # a progress line on a terminal (values)
    # the model path the engine will be given, when not SRC as given (SGLang picks its config
    # parser from the path: engines/model_path.py)
    served_as: str | None = None

    def __post_init__(self):
        self.src = _path(self.src)
        self.target, self.training_config = _path(self.target), _path(self.training_config)
        self.training_vocab = _path(self.training_vocab)

    @property
    def engine_name(self) -> str | None:
        return self.engine.partition("==")[0] if self.engine else None

    @property
    def engine_version(self) -> str | None:
        return self.engine.partition("==")[2] or None if self.engine else None


@record(kw_only=True)
class ConvertRequest:
    src: str
    out: str
    to: str  # sglang, vllm, speculators
    config_from: str | None = None
    dtype: str | None = None  # bf16, fp16, fp32 or bfloat16, float16, float32 (a torch cast)
    embeddings: str = "keep"  # keep, drop or from=TARGET
    lm_head_from: str | None = None
    vocab_from: str | None = None
    target: str | None = None
    verifier: str | None = None  # --to speculators: the verifier written
    max_shard_size: str | int = "5GB"
    mapping: str | None = None
    dry_run: bool = False
    force: bool = False
    fsync: bool = False
    revision: str | None = None
    token: str | None = None
    # True: a progress line on a terminal; a callable: given the bytes written
    progress: object = None
    check: bool = True  # the gate: check's rules on the planned output
    allow_errors: bool = False  # write even when the gate finds errors

    def __post_init__(self):
        self.src, self.out = _path(self.src), _path(self.out)
        for name in ("config_from", "lm_head_from", "vocab_from", "target", "verifier", "mapping"):
            setattr(self, name, _path(getattr(self, name)))


@record(kw_only=True)
class EvalRequest:
    drafters: list[str]  # one or more drafters, each evaluated on the same data
    hidden_states: str  # SpecForge's rows_*/data_<i>.ckpt[.gz] or speculators' hs_<i>.safetensors
    target: str | None = None  # its lm_head, final norm and embedding, read by ranges
    loss_mask: str | None = None  # speculators' preprocessed dataset (default: above hs_*)
    steps: int = 3  # the chain length K
    limit: int | None = None  # the first N samples
    sample: int | None = None  # N samples drawn at random for seed
    seed: int = 0
    device: str | None = None  # auto (None), cpu, cuda, cuda:N
    dtype: str | None = None  # as ConvertRequest's (None: the config's)
    baseline_tps: float | None = None  # tok/s without speculation (with cycle_ms: the speed)
    cycle_ms: float | None = None  # one verify cycle
    draft_ms: float | None = None  # drafting per cycle
    token: str | None = None
    progress: bool = False  # a progress bar on a terminal's stderr

    def __post_init__(self):
        if isinstance(self.drafters, (str, os.PathLike)):
            self.drafters = [self.drafters]
        self.drafters = [os.fspath(d) for d in self.drafters]
        self.hidden_states, self.target = _path(self.hidden_states), _path(self.target)
        self.loss_mask = _path(self.loss_mask)
