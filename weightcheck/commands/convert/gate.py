"""``convert`` is gated by ``check``: the planned output goes through the same rules as
``check OUT --engine E [--target T]`` before a byte is written.

The output is known before it exists: every tensor's name, dtype and shape (the plan's items),
the shards, the config written. :func:`planned_drafter` builds the drafter ``check`` would read
from OUT once written, without writing it; the only tensor bytes the rules read without
``--values`` (d2t and t2d, rules/base.py ``Context.vocab_maps``) come from where the plan takes
them: the source's byte range for a copied tensor, the vocabulary map for a written one.

E is each engine that reads the destination layout (``--to sglang``: SGLang; ``--to vllm``
and ``--to speculators``: vLLM — mappings/engines/*.toml ``read_by``), at the newest release the
data describe. An error refuses the conversion (exit 1, the findings printed, nothing written);
warnings are reported with the conversion.
"""

from __future__ import annotations

import os

from weightcheck.commands.convert.items import Item, Plan
from weightcheck.engines.data import load, newest, read_by
from weightcheck.model.drafter import Drafter, from_source
from weightcheck.model.vocab import read_maps
from weightcheck.reports import Gate, GateRun
from weightcheck.requests import CheckRequest
from weightcheck.rules import ERROR
from weightcheck.rules.apply import run
from weightcheck.sources.base import Source, TensorRecord, WeightFile
from weightcheck.sources.tensors import read_small


def planned_drafter(p: Plan) -> Drafter:
    """OUT as ``check`` will read it: the planned names, dtypes, shapes, shards and config."""
    out = os.path.abspath(p.out)
    src = Source(
        spec=p.out,
        kind="folder",
        location=out,
        layout="model.safetensors" if p.shards == 1 else "sharded safetensors",
        config=p.config,
        config_file="config.json",
    )
    for i in range(p.shards):
        name = p.shard_name(i)
        src.files[name] = WeightFile(name, "safetensors", local_path=os.path.join(out, name))
    for it in p.items:
        src.tensors[it.out_name] = TensorRecord(
            it.out_name, it.dtype, tuple(it.shape), it.nbytes, p.shard_name(it.shard)
        )
        # what the engines compare with the target's (vLLM shares an equal embedding) is read
        # where the bytes come from: the same answer as check OUT once written
        origin = {
            "copy": p.src,
            "pickle": p.src,
            "embed-from-target": p.embed_target,
            "head-from-target": p.head_target,
        }.get(it.kind)
        same_dtype = it.kind in ("copy", "pickle") or it.src_dtype in (None, it.dtype)
        if origin is not None and it.src_name is not None and same_dtype:
            src.planned_from[it.out_name] = (origin.source, it.src_name, it.src_offset)
    return from_source(src)


def _bytes_of(p: Plan, it: Item) -> bytes | None:
    """A small planned tensor's bytes (d2t, t2d): from the map written, or the source's copy."""
    if it.kind == "vocab-map":
        return bytes(it.data)
    if it.kind in ("copy", "pickle"):
        return read_small(p.src.source, it.src_name)
    return None  # cast or taken from a target: never a vocabulary map


def vocab_maps(p: Plan) -> tuple[list[int] | None, bytes | None]:
    """(d2t as a list, t2d bytes) of the planned output, as ``Context.vocab_maps`` reads them
    (model/vocab.py ``read_maps``: the one reading of both)."""
    by = {it.canonical: it for it in p.items}
    return read_maps(by.get("d2t"), by.get("t2d"), lambda it: _bytes_of(p, it))


def check_plan(p: Plan) -> Gate:
    """Run check's rules on the planned output for each engine that reads the layout: the
    ``check`` part of the convert report; ``ok`` is False when any finding is an error."""
    return _gate(planned_drafter(p), p.to, p.target, vocab_maps=vocab_maps(p))


def check_source(d: Drafter, to: str, target=None) -> Gate:
    """A SRC that is a target model, not a drafter (``Drafter.looks_like_target``): no plan can
    be made of it, so check's rules run on SRC itself for each engine that reads ``to`` — the
    same findings ``check SRC --engine E`` gives — and the conversion is refused with them (exit
    1, like check), not stopped as unreadable input (exit 2: the files read fine)."""
    g = _gate(d, to, target)
    g.on = "source"
    return g


def _gate(d: Drafter, to: str, target, **kw) -> Gate:
    runs = []
    for engine in read_by(to):
        _, findings = run(d, CheckRequest(src=d.source.spec, engine=engine), target, **kw)
        runs.append(GateRun(engine, newest(load(engine)), list(findings)))
    ok = all(f.severity != ERROR for r in runs for f in r.findings)
    return Gate(ok=ok, engines=runs)
