"""``weightcheck convert SRC OUT --to sglang|vllm|speculators``: engine-ready checkpoints.

plan.py decides every output tensor and config.py the output config, provenance.py how OUT names
its sources (the mark, the metadata, the model card's origins); gate.py runs check's rules
on that planned output (an error refuses); produce.py writes the bytes, publish.py puts a
verified OUT in place. Every byte written is re-read and checked before OUT
appears (storage/verify.py).
"""

from __future__ import annotations

from weightcheck.commands.convert.gate import check_plan, check_source
from weightcheck.commands.convert.plan import (
    DESTINATIONS,
    Item,
    Plan,
    parse_size,
    plan,
)
from weightcheck.commands.convert.publish import (
    TMP_MARK,
    check_paths,
    clean,
    clean_stale,
    not_replaceable,
    write,
)
from weightcheck.commands.convert.report import plan_report, refused_report

__all__ = [
    "DESTINATIONS",
    "check_plan",
    "check_source",
    "Item",
    "Plan",
    "parse_size",
    "plan",
    "plan_report",
    "refused_report",
    "TMP_MARK",
    "check_paths",
    "clean",
    "clean_stale",
    "not_replaceable",
    "write",
]
