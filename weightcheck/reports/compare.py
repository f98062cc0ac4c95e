"""`weightcheck compare`'s report: the two sides and every difference between them."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.model.compatibility import Difference
from weightcheck.record import record
from weightcheck.reports.base import ConfigValue, Report, SourceInfo, optional

Verdict = Literal["identical", "compatible", "incompatible"]


@record
class Side:
    source: SourceInfo
    dialect: str | None
    architecture: str | None
    config_architecture: str | None  # the drafter architecture its config names, if any


@record
class OnlyIn:
    canonical: str
    name: str
    presence: str | None


@record
class ShapeMismatch:
    canonical: str
    a: list[int]
    b: list[int]


@record
class DtypeMismatch:
    canonical: str
    a: str
    b: str


@record
class ConfigDifference:
    field: str
    category: str  # architecture, serving, informational (mappings/config.toml)
    a: ConfigValue
    b: ConfigValue
    a_from: str | None
    b_from: str | None
    note: str | None = optional()  # why two spellings mean the same (category informational)
    # the value a side's weights hold where its config contradicts them (rule WC409; absent when
    # they agree): a config mistake of that side, not another model
    a_weights: ConfigValue = optional()
    b_weights: ConfigValue = optional()


@record
class ByteCounts:
    equal: int
    different: int
    not_compared: int


@record
class PairedTensor:
    canonical: str
    name_a: str
    name_b: str
    shape: list[int]
    dtype_a: str
    dtype_b: str
    bytes_equal: bool | None
    decided_by: Literal["lfs-sha256", "bytes", "dtype"] | None


@record
class VocabOverlap:
    a_draft: int
    b_draft: int
    shared: int
    same_index: int
    a_identity: bool
    b_identity: bool
    a_placeholder: bool
    b_placeholder: bool
    meaning: str


@record
class TensorValues:
    """--values: one paired tensor's values compared (streamed with torch), or why not."""

    max_abs_diff: float | None = optional()
    rel_l2: float | None = optional()
    cosine: float | None = optional()
    bytes_equal: bool | None = optional()
    non_finite: int | None = optional()  # positions where either side is NaN or Inf
    error: str | None = optional()  # why they could not be compared (a dtype torch lacks)


@record(kw_only=True)
class CompareReport(Report):
    """``weightcheck compare``: schema ``weightcheck.compare/1``. ``reasons`` and
    ``strict_failures`` are structured (model/compatibility.py Difference: kind, subject, a, b),
    written to JSON as their sentences."""

    SCHEMA_NAME = "compare"

    schema: Literal["weightcheck.compare/1"] = field(default="weightcheck.compare/1")
    verdict: Verdict
    exit_status: int  # 1: incompatible, or a difference with --strict
    strict: bool
    reasons: tuple[Difference, ...]
    strict_failures: tuple[Difference, ...]
    a: Side
    b: Side
    only_in_a: list[OnlyIn]
    only_in_b: list[OnlyIn]
    shape_mismatches: list[ShapeMismatch]
    dtype_mismatches: list[DtypeMismatch]
    config_differences: list[ConfigDifference]
    bytes: ByteCounts
    tensors: list[PairedTensor]
    notes: list[str]
    vocab: VocabOverlap | None
    values: dict[str, TensorValues] | None = optional()  # --values: per tensor

    @property
    def ok(self) -> bool:
        return self.exit_status == 0
