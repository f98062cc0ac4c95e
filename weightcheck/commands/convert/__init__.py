"""``weightcheck convert SRC OUT --to sglang|vllm|speculators``: engine-ready checkpoints.

plan.py decides every output tensor and config.py the output config; produce.py writes the bytes,
publish.py puts a verified OUT in place. Every byte written is re-read and checked before OUT
appears (storage/verify.py).
"""

from __future__ import annotations

from weightcheck.commands.convert.plan import (
    DESTINATIONS,
    Item,
    Plan,
    parse_size,
    plan,
    plan_report,
)
from weightcheck.commands.convert.publish import (
    TMP_MARK,
    check_paths,
    clean,
    clean_stale,
    not_replaceable,
    write,
)

__all__ = [
    "DESTINATIONS",
    "Item",
    "Plan",
    "parse_size",
    "plan",
    "plan_report",
    "TMP_MARK",
    "check_paths",
    "clean",
    "clean_stale",
    "not_replaceable",
    "write",
]
