"""convert's report (reports.ConvertReport, schema ``weightcheck.convert/1``): the plan, every
output tensor's source, name, file, dtype and shape; the gate's findings; what was written."""

from __future__ import annotations

from weightcheck.commands.convert.items import Plan
from weightcheck.model.drafter import Drafter
from weightcheck.reports.base import typed
from weightcheck.reports.convert import ConvertReport, Gate, PlannedTensor, ReindexInfo


def plan_report(p: Plan) -> ConvertReport:
    return ConvertReport(
        source=p.src.source.spec,
        source_dialect=p.src.dialect,
        to=p.to,
        out=p.out,
        shards=[p.shard_name(i) for i in range(p.shards)],
        tensor_rows=[
            PlannedTensor(
                source=it.src_name,
                canonical=it.canonical,
                output=it.out_name,
                shard=p.shard_name(it.shard),
                dtype=it.dtype,
                source_dtype=it.src_dtype,
                shape=list(it.shape),
                how=it.kind,
                bytes=it.nbytes,
            )
            for it in p.items
        ],
        config_changes=p.config_changes,
        notes=p.notes,
        config=p.config,
        reindex=typed(ReindexInfo, p.reindex),
    )


def refused_report(d: Drafter, to: str, out: str, gate: Gate) -> ConvertReport:
    """SRC is a target model, or its config has values of the wrong JSON type: no plan, the
    conversion refused with check's findings on SRC (``gate``)."""
    return ConvertReport(
        source=d.source.spec,
        source_dialect=d.dialect,
        to=to,
        out=out,
        shards=[],
        tensor_rows=[],
        config_changes=[],
        notes=[],
        config=None,
        check=gate,
        refused=True,
        exit_status=1,
    )
