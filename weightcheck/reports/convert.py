"""`weightcheck convert`'s report: the plan, the gate, what was written."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.record import record
from weightcheck.reports.base import ConfigValue, Keyed, Report, key, optional
from weightcheck.rules.base import Finding


@record
class PlannedTensor:
    source: str | None
    canonical: str | None
    output: str
    shard: str
    dtype: str
    source_dtype: str | None
    shape: list[int]
    how: str  # commands/convert/items.py Item.kind
    bytes: int


@record
class GateRun:
    engine: str
    version: str
    findings: list[Finding]


@record
class Gate:
    """convert's gate: check's rules on the planned output (or on SRC: ``on``)."""

    ok: bool
    engines: list[GateRun]
    on: Literal["source"] | None = optional()  # run on SRC, which no plan could be made of
    why: Literal["target", "config_types"] | None = optional()


@record
class ReindexInfo(Keyed):
    """--vocab-from: the map the head was re-indexed to, and where its rows come from."""

    map: str
    draft_tokens: int
    kept: int  # SRC's row j at row j
    moved: int  # SRC's row i != j at row j
    from_target: int  # rows of tokens SRC's head lacks, from the target's head


@record
class Written(Keyed):
    """What a conversion wrote."""

    out: str
    files: list[str]  # the weights and the index, in OUT
    tensors: int
    bytes: int
    fsync: bool
    cleaned: list[str]  # killed runs' leftovers removed from OUT's folder
    note: str | None = optional()  # a signal that arrived while OUT was put in place


@record(kw_only=True)
class ConvertReport(Report):
    """``weightcheck convert``: schema ``weightcheck.convert/1``; ``written`` is None for a dry
    run and a refused conversion."""

    SCHEMA_NAME = "convert"

    schema: Literal["weightcheck.convert/1"] = field(default="weightcheck.convert/1")
    source: str
    source_dialect: str | None
    to: str
    out: str
    shards: list[str]
    tensor_rows: list[PlannedTensor] = key("tensors")
    config_changes: list[str]
    notes: list[str]
    config: dict[str, ConfigValue] | None  # the config written
    reindex: ReindexInfo | None = optional()  # --vocab-from
    check: Gate | None = None
    refused: bool = False  # the gate found errors: nothing written
    exit_status: int = 0  # 1: the gate refused
    written: Written | None = optional()
    dry: bool = field(default=False, metadata={"skip": True})

    @property
    def dry_run(self) -> bool:
        return self.written is None and not self.refused

    @property
    def files(self) -> tuple[str, ...]:
        """The files written into OUT (weights and index); a plan's shards; none if refused."""
        if self.refused:
            return ()
        return tuple(self.written.files) if self.written is not None else tuple(self.shards)

    @property
    def tensors(self) -> list[PlannedTensor]:
        return self.tensor_rows

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The gate's findings, for every engine that reads the layout in turn."""
        return tuple(f for e in (self.check.engines if self.check else ()) for f in e.findings)
