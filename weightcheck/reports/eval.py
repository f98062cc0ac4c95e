"""`weightcheck eval`'s report: the data, the target, and per drafter the per-step accuracies, the
expected acceptance length and the one walked as an engine drafts (weightcheck/eval/,
docs/eval.md)."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.record import record
from weightcheck.reports.base import Report, optional


@record
class EvalData:
    path: str  # --hidden-states as given
    format: Literal["specforge", "speculators"]
    files: int  # samples evaluated
    note: str | None  # how the layout was read, when it needs saying
    available: int = 0  # samples (files) the data holds
    selection: Literal["all", "limit", "sample"] = "all"  # --limit: the first N; --sample N
    seed: int | None = optional()  # --sample's seed
    asked: int | None = optional()  # the N of --limit or --sample
    interrupted: bool = False  # Ctrl-C: the report covers the samples evaluated before it
    # where the positions counted come from: "file" (SpecForge's loss_mask), "arrow" (speculators'
    # preprocessed dataset's loss_mask column, read from loss_mask_from), "none" (every position)
    loss_mask: Literal["file", "arrow", "none"] = "file"
    loss_mask_from: str | None = optional()  # the Arrow dataset's folder (loss_mask "arrow")


@record
class EvalTarget:
    spec: str
    vocab: int
    hidden: int
    dtype: str


@record
class EvalStep:
    step: int  # k: the k-th token of a chain, from 0
    acc: float | None  # hits / given: the drafter's top-1 is the target's, given an accepted prefix
    hits: int
    given: int  # positions whose steps 0..k-1 were all accepted
    trained_acc: float | None  # SpecForge's acc_k: hits over every counted position
    trained_hits: int
    trained_valid: int
    # the Wilson interval of acc; None below EvalIntervals.min_positions positions (too few)
    acc_interval: list[float] | None = None


@record
class EvalIntervals:
    """How the intervals were computed, and the expected acceptance length's."""

    level: float  # 0.95
    rate_method: str  # a step's acc: the Wilson score interval over positions
    min_positions: int  # fewer positions given at a step: no interval ("too few positions")
    length_method: str  # the acceptance lengths: a percentile bootstrap over sequences
    min_sequences: int  # fewer sequences: no interval ("too few sequences")
    tau: list[float] | None  # the expected acceptance length's (min_sequences or more)


@record
class EvalWalk:
    """The engines' own count on the data's sequences: chains started cycle by cycle where the
    previous one ended (docs/eval.md §3)."""

    tau: float | None  # 1 + accepted / cycles: the mean acceptance length an engine reports
    cycles: int  # chains drafted (vLLM's num_drafts)
    accepted: int  # drafts accepted (vLLM's num_accepted_tokens)
    accepted_per_step: list[int]  # cycles whose step k was accepted (num_accepted_tokens_per_pos)
    tau_interval: list[float] | None  # its bootstrap interval (EvalIntervals.min_sequences+)


@record
class EvalDrafter:
    samples: int
    positions: int
    steps: list[EvalStep]
    tau: float | None  # the expected acceptance length of a K-step chain
    walked: EvalWalk  # the acceptance length walked cycle by cycle, as an engine drafts
    data_agreement: float | None  # how often the data's next token is the target's top-1
    interval: EvalIntervals
    drafter: str
    dialect: str | None
    dtype: str  # the compute dtype
    embed_from: Literal["drafter", "target"] | None
    draft_vocab: int
    rank: int  # 1: the longest acceptance walked as an engine drafts (else expected)
    predicted_tps: float | None = optional()  # --baseline-tps, --cycle-ms; at the walked tau
    predicted_tps_interval: list[float] | None = optional()
    speedup: float | None = optional()


@record
class EvalSpeed:
    baseline_tps: float
    cycle_ms: float
    draft_ms: float
    break_even_tau: float  # the acceptance length at which speculation matches the baseline


@record(kw_only=True)
class EvalReport(Report):
    """``weightcheck eval``: schema ``weightcheck.eval/1``."""

    SCHEMA_NAME = "eval"

    schema: Literal["weightcheck.eval/1"] = field(default="weightcheck.eval/1")
    data: EvalData
    target: EvalTarget | None
    reference: str  # what a draft is compared with: the target's top-1, or the data's next token
    device: str  # where the drafters ran: "cpu", "cuda:0 (NVIDIA H200)"
    steps: int  # K
    drafters: list[EvalDrafter]  # in the order given; ``rank`` orders them
    speed: EvalSpeed | None = optional()

    exit_status = 0  # a class attribute: not in the JSON

    @classmethod
    def from_dict(cls, r: dict) -> EvalReport:
        """From weightcheck.eval.run.evaluate's result (plain data)."""
        return cls(
            data=EvalData(**r["data"]),
            target=EvalTarget(**r["target"]) if r["target"] else None,
            reference=r["reference"],
            device=r["device"],
            steps=r["steps"],
            drafters=[
                EvalDrafter(
                    **{
                        **d,
                        "steps": [EvalStep(**s) for s in d["steps"]],
                        "walked": EvalWalk(**d["walked"]),
                        "interval": EvalIntervals(**d["interval"]),
                    }
                )
                for d in r["drafters"]
            ],
            speed=EvalSpeed(**r["speed"]) if r.get("speed") else None,
        )

    @property
    def ranked(self) -> list[EvalDrafter]:
        return sorted(self.drafters, key=lambda d: d.rank)


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``eval``: ``report`` covers the samples evaluated before it
    (``report.data.interrupted``)."""

    def __init__(self, report: EvalReport):
        super().__init__()
        self.report = report
