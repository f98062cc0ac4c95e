"""``weightcheck convert SRC OUT --to sglang|vllm|speculators``: the plan.

load -> normalize -> :func:`plan` (every output tensor: name, shard, dtype, where its bytes come
from; the output config, built by config.py) -> publish.write (produce.py writes the bytes into a
temporary folder beside OUT, verified, renamed into place) -> render.

The destination layouts are data: the ``[output]`` section of mappings/engines/<to>.toml. How OUT
names its sources (the mark, the metadata, the verifier) is provenance.py's.
"""

from __future__ import annotations

import re

from weightcheck import expr
from weightcheck.commands.convert import config as config_out
from weightcheck.commands.convert.items import Item, Plan
from weightcheck.commands.convert.provenance import (
    MARK,
    metadata,
    public_name,
    source_label,
    verifier_name,
)
from weightcheck.engines import aux
from weightcheck.engines.data import load, output_for, replays
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.model import compatibility, dialects, vocab
from weightcheck.model import config as config_mod
from weightcheck.model.drafter import Drafter, last_loaded
from weightcheck.storage.header import dtype_option

DESTINATIONS = ("sglang", "vllm", "speculators")
CASTABLE = ("BF16", "F16", "F32", "F64")  # what a streamed cast reads and writes


def taken_dtype(src: Drafter, out_dtype: str | None, taken: str) -> str:
    """The dtype OUT stores a tensor taken from a target in (``--embeddings from=TARGET``,
    ``--lm-head-from TARGET``, the rows ``--vocab-from`` takes from it), ``taken`` its dtype
    there: ``--dtype`` when given, else the drafter's own — the floating dtype most of its
    tensors have (WC208's majority) — so OUT is in one dtype; the target's only when the drafter
    has no floating tensor a cast could match."""
    if out_dtype:
        return out_dtype
    counts: dict[str, int] = {}
    for t in src.tensors:
        if t.dtype in CASTABLE:
            counts[t.dtype] = counts.get(t.dtype, 0) + 1
    if not counts or taken not in CASTABLE:
        return taken
    return max(sorted(counts), key=lambda k: counts[k])


def parse_size(text: str) -> int:
    """'5GB' -> 5e9, '500MB', '2GiB' -> 2*2**30, '1000' -> 1000 bytes (transformers' units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", text, re.IGNORECASE)
    if not m:
        raise UsageError(None, f"--max-shard-size {text!r}: expected e.g. 5GB, 500MB or 2GiB")
    num, unit = float(m.group(1)), (m.group(2) or "").upper()
    scale = {
        "": 1,
        "B": 1,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        "TB": 10**12,
        "KIB": 2**10,
        "MIB": 2**20,
        "GIB": 2**30,
        "TIB": 2**40,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
    }.get(unit)
    if scale is None:
        raise UsageError(None, f"--max-shard-size {text!r}: unknown unit {unit!r}")
    if int(num * scale) < 1:
        raise UsageError(None, f"--max-shard-size {text!r}: a shard holds at least one byte")
    return int(num * scale)


def plan(
    src: Drafter,
    to: str,
    out: str,
    dtype: str | None = None,
    embeddings: str = "keep",
    lm_head_from=None,
    config_from: Drafter | None = None,
    max_shard_size: int = 5 * 10**9,
    target=None,
    embed_target=None,
    verifier: str | None = None,
    vocab_from=None,
) -> Plan:
    """What converting ``src`` to ``to`` writes in ``out``: every tensor, the shards, the config
    and the metadata, before a byte is written (bad input raises)."""
    if to not in DESTINATIONS:
        raise UsageError(None, f"--to {to!r}: choose {', '.join(DESTINATIONS)}")
    p = Plan(
        src=src,
        to=to,
        out=out,
        target=target,
        embed_target=embed_target,
        head_target=lm_head_from,
        verifier=verifier,
    )
    refuse_unplannable(src, to)
    out_spec = output_for(to, src.architecture)
    base = base_config(p, src, config_from)
    norm = config_mod.normalize(base)
    for r in out_spec.refuse:
        if expr.holds(r.when, norm.values):
            raise WeightcheckError(src.source.spec, f"cannot convert to {to}: {r.why}")
    out_dtype = dtype_option(dtype) if dtype else None
    names_dialect = dialects.by_name(out_spec.names_dialect)
    canon = src.by_canonical()
    copy_items(p, canon, embeddings, out_spec, out_dtype, names_dialect)
    name_table_notes(p)
    split_notes(p)
    if embeddings.startswith("from="):
        embed_item(p, embeddings[5:], norm.get("hidden_size"), out_dtype, names_dialect)
    elif embeddings == "drop" and "embed_tokens.weight" in canon:
        p.notes.append("embed_tokens.weight dropped (the engines use the target's embedding)")
    if vocab_from is not None:
        reindex_items(p, vocab_from, lm_head_from, names_dialect, out_spec, out_dtype)
    elif lm_head_from is not None:
        if "lm_head.weight" in canon:
            raise WeightcheckError(
                src.source.spec, "--lm-head-from: the drafter already has an lm_head"
            )
        head_item(p, norm.get("draft_vocab_size"), out_dtype, names_dialect)
    assign_shards(p, max_shard_size)
    p.config = config_out.build_config(p, base, out_dtype)
    settle_config(p, vocab_from, config_from)
    p.metadata = metadata(p)
    return p


def refuse_unplannable(src: Drafter, to: str) -> None:
    """What no plan can be made of: a target model, names no dialect explains, a tensor given
    twice, an architecture the destination does not hold."""
    if src.looks_like_target:
        raise WeightcheckError(src.source.spec, src.target_said("it"))
    if src.naming.unknown:
        raise WeightcheckError(
            src.source.spec,
            f"{len(src.naming.unknown)} tensor name(s) no dialect "
            f"explains (first: {src.naming.unknown[0]}): add a "
            "dialect file with --mapping",
        )
    for c, names in src.naming.duplicates.items():
        # equal copies: OUT holds the one the engines keep, nothing served changes (WC103 info);
        # copies that differ: which was trained is not in the checkpoint
        if _copies_equal(src, c, names) is not True:
            raise WeightcheckError(
                src.source.spec,
                f"{c} is given {len(names)} times ({', '.join(names)}) and the copies differ: "
                "drop the one that was not trained (`weightcheck compare` against the training "
                "checkpoint tells which), then convert",
            )
    for c, copies in src.fused_copies().items():
        # a fused tensor beside its part stored apart (WC103): the same rule as a tensor given
        # twice — equal copies, OUT holds the one the engines keep; copies that differ, refused
        from weightcheck.engines import same_bytes

        keep = last_loaded(copies)
        if same_bytes.copies_equal(src.source, copies, keep) is not True:
            said = ", ".join(_copy_said(t) for t in copies)
            raise WeightcheckError(
                src.source.spec,
                f"{c} is given {len(copies)} times ({said}) and the copies differ: drop the "
                "spelling that was not trained (`weightcheck compare` against the training "
                "checkpoint tells which), then convert",
            )
    for name, earlier in src.source.shadowed.items():
        # a name in two weight files (WC210): the engines keep the later file's copy, so does
        # OUT when the copies are equal; which of copies that differ was trained is not known
        if _shadowed_equal(src, name) is not True:
            files = ", ".join(t.file for t in (*earlier, src.source.tensors[name]))
            raise WeightcheckError(
                src.source.spec,
                f"{name} is in {len(earlier) + 1} weight files ({files}) and the copies differ: "
                "drop the one that was not trained (`weightcheck compare` against the training "
                "checkpoint tells which), then convert",
            )
    if not replays(src.architecture, to):
        inv = load(to).engine.inventory
        raise WeightcheckError(
            src.source.spec,
            f"a {src.architecture.name} drafter: the {to} layout (mappings/engines/{to}.toml) "
            f"holds {inv} drafters only, so it is not converted",
        )


def _copy_said(t) -> str:
    """A copy of a part: the tensor stored apart, or the fused tensor's rows."""
    return f"{t.name}'s {t.canonical.split('.')[-2]} rows" if t.window else t.name


def _copies_equal(src: Drafter, c: str, names: list[str]) -> bool | None:
    from weightcheck.engines import same_bytes

    by_name = {t.name: t for t in src.tensors}
    keep = src.by_canonical()[c]
    return same_bytes.copies_equal(src.source, [by_name[n] for n in names], keep)


def _shadowed_equal(src: Drafter, name: str) -> bool | None:
    from weightcheck.engines import same_bytes

    if name not in src.source.tensors:
        return None
    return same_bytes.shadowed_equal(src.source, name)


def name_table_notes(p: Plan) -> None:
    """What the name table (mappings/names.toml) decided: a non-parameter buffer left out (both
    engines drop it), a legacy spelling written under its canonical name."""
    for n in p.src.naming.buffers:
        p.notes.append(f"{n} left out: a non-parameter buffer, not a weight (both engines drop it)")
    for c, names in p.src.naming.duplicates.items():
        keep = p.src.by_canonical()[c].name
        for n in names:
            if n != keep:
                p.notes.append(
                    f"{n} left out: the same values as {keep}, the copy the engines keep"
                )
    for c, copies in p.src.fused_copies().items():
        keep = last_loaded(copies)
        for t in copies:
            if (t.name, t.window) != (keep.name, keep.window):
                p.notes.append(
                    f"{_copy_said(t)} left out: the same values as {_copy_said(keep)}, the copy "
                    "the engines keep"
                )
    for name, earlier in p.src.source.shadowed.items():
        kept = p.src.source.tensors[name].file
        for t in earlier:
            p.notes.append(f"{name} of {t.file} left out: the same values as {kept}'s, kept")
    legacy = p.src.naming.legacy
    if legacy:
        said = ", ".join(f"{n} -> {p.src.naming.canonical[n]}" for n in legacy)
        p.notes.append(f"legacy spelling(s) renamed (mappings/names.toml): {said}")


def split_notes(p: Plan) -> None:
    """A fused tensor (mappings/architectures [[fused]]) is written as its parts, split where
    the engines split it: each part's bytes a range of the fused tensor's (copied ones re-read
    and compared when written). Every engine and trainer reads the parts."""
    split: dict[str, list[tuple]] = {}
    canon = p.src.by_canonical()
    for it in p.items:
        t = canon.get(it.canonical)
        if t is not None and t.window is not None:
            split.setdefault(t.name, []).append((t.window, it.out_name))
    for name, parts in split.items():
        said = ", ".join(n for _, n in sorted(parts))
        p.notes.append(f"{name} split into {said} (rows at the config's offsets)")


def base_config(p: Plan, src: Drafter, config_from: Drafter | None) -> dict:
    """The config the output's is built from: SRC's, or ``--config-from`` REF's when compare
    says the two are compatible."""
    base = src.config
    if config_from is not None:
        c = compatibility.judge(src, config_from, aux.same_aux_layers)
        if compatibility.verdict(c) == "incompatible":
            raise WeightcheckError(
                config_from.source.spec,
                "--config-from refused: compare says incompatible: "
                + "; ".join(map(str, c.reasons)),
            )
        base = config_from.config
        p.notes.append(
            f"config from {source_label(config_from.source)} (compare: {compatibility.verdict(c)})"
        )
    if not base:
        raise WeightcheckError(
            src.source.spec,
            "no config.json: nothing to build the output config from (pass --config-from REF)",
        )
    return base


def copy_items(p: Plan, canon: dict, embeddings: str, out_spec, out_dtype, names_dialect) -> None:
    """SRC's own tensors, by canonical name: copied, cast to ``--dtype``, or read from a pickle."""
    for c, t in sorted(canon.items()):
        if c == "embed_tokens.weight" and embeddings != "keep":
            continue
        if c == "t2d" and "t2d" not in out_spec.keep:
            continue
        d = t.dtype
        kind = "copy"
        if p.src.source.files[t.file].format == "pickle":
            kind = "pickle"
        if out_dtype and d in ("BF16", "F16", "F32", "F64") and d != out_dtype:
            kind, d = "cast", out_dtype
        off = t.window[0] if t.window is not None else 0  # a fused tensor's part: split
        p.items.append(
            Item(
                names_dialect.from_canonical(c),
                c,
                d,
                tuple(t.shape),
                kind,
                t.name,
                t.dtype,
                src_offset=off,
            )  # fmt: skip
        )


def embed_item(p: Plan, spec: str, hidden, out_dtype, names_dialect) -> None:
    """``--embeddings from=TARGET``: the target's embedding, as wide as the drafter."""
    et = p.embed_target
    if et is None or et.embed is None:
        raise WeightcheckError(spec, "target has no embedding tensor to take")
    if hidden and et.embed.shape[1] != hidden:
        raise WeightcheckError(
            spec, f"the target's embedding {list(et.embed.shape)} is not {hidden} wide"
        )
    d = taken_dtype(p.src, out_dtype, et.embed.dtype)
    p.items.append(
        Item(
            names_dialect.from_canonical("embed_tokens.weight"),
            "embed_tokens.weight",
            d,
            tuple(et.embed.shape),
            "embed-from-target",
            et.embed.name,
            et.embed.dtype,
        )
    )
    p.notes.append(f"embed_tokens.weight taken from {source_label(et.source)} ({et.embed.name})")


def head_item(p: Plan, draft_vocab, out_dtype, names_dialect) -> None:
    """``--lm-head-from TARGET`` without a map: the target's head rows at the d2t target ids."""
    t = p.head_target
    head = target_head(t)
    if head is None:
        raise WeightcheckError(t.source.spec, "target has no lm_head to gather rows from")
    d = taken_dtype(p.src, out_dtype, head.dtype)
    p.items.append(
        Item(
            names_dialect.from_canonical("lm_head.weight"),
            "lm_head.weight",
            d,
            (draft_vocab, head.shape[1]),
            "head-from-target",
            head.name,
            head.dtype,
        )
    )
    p.notes.append(
        f"lm_head.weight gathered from {source_label(t.source)} ({head.name}) at the "
        f"d2t target ids: [{draft_vocab}, {head.shape[1]}]"
    )


def assign_shards(p: Plan, max_shard_size: int) -> None:
    """Shards: greedy in canonical order, like transformers' shard_checkpoint."""
    size, shard = 0, 0
    for it in p.items:
        if size and size + it.nbytes > max_shard_size:
            shard, size = shard + 1, 0
        it.shard = shard
        size += it.nbytes
    p.shards = shard + 1


def settle_config(p: Plan, vocab_from, config_from: Drafter | None) -> None:
    """The built config's last changes: the map's draft vocabulary, one line for a config taken
    whole from REF, the verifier, and the conversion's mark (last)."""
    if p.reindex is not None and p.config.get("draft_vocab_size") != vocab_from.size:
        p.config_changes.append(
            f"draft_vocab_size: {p.config.get('draft_vocab_size')} -> {vocab_from.size} "
            "(the --vocab-from map)"
        )
        p.config["draft_vocab_size"] = vocab_from.size
    if config_from is not None and not p.src.config:
        # SRC has no config: every field is REF's, which one line says (not one per field)
        fields = {f.name for f in config_mod.field_specs()}
        news = [c for c in p.config_changes if c.split(": ", 1)[0] in fields and ": null -> " in c]
        p.config_changes = [c for c in p.config_changes if c not in news]
        p.config_changes.insert(
            0,
            f"SRC has no config.json: every field is {config_from.source.label}'s "
            f"({len(news)} fields set)",
        )
    verifier_name(p)
    p.config.pop(MARK, None)  # a converted SRC's mark, carried over with its config: last again
    p.config[MARK] = p.to  # as in the shards' metadata: --force may replace this config.json


def reindex_items(p: Plan, ref, lm_head_from, names_dialect, out_spec, out_dtype) -> None:
    """--vocab-from: OUT's d2t/t2d are REF's map, and lm_head row j is SRC's row for REF's token j
    (byte for byte), or the target's row for a token SRC's head lacks (--lm-head-from)."""
    src = p.src
    head = src.by_canonical().get("lm_head.weight")
    mine = vocab.from_drafter(src) if head is not None else None
    if mine is not None and mine.size != head.shape[0]:
        raise WeightcheckError(
            src.source.spec,
            f"{head.name} has {head.shape[0]} rows but the map has {mine.size} draft ids",
        )
    rows = (
        vocab.reindex(mine, ref)
        if mine is not None
        else vocab.Reindex(tuple(("target", t) for t in ref.targets), 0, 0, ref.size)
    )
    thead = target_head(lm_head_from) if lm_head_from is not None else None
    width = head.shape[1] if head is not None else None
    check_reindex_sources(p, ref, rows, lm_head_from, thead, width)
    width = width or thead.shape[1]
    p.items = [it for it in p.items if it.canonical not in ("lm_head.weight", "d2t", "t2d")]
    base = head or thead  # SRC's head keeps its dtype (its rows byte for byte); else the target's
    d = (out_dtype or head.dtype) if head is not None else taken_dtype(src, out_dtype, thead.dtype)
    p.items.append(
        Item(
            names_dialect.from_canonical("lm_head.weight"),
            "lm_head.weight",
            d,
            (ref.size, width),
            "reindex",
            base.name,
            base.dtype,
            data=(rows, thead),
        )
    )
    if not ref.identity:
        map_items(p, ref, names_dialect, "t2d" in out_spec.keep)
    p.reindex = {
        "map": ref.where,
        "draft_tokens": ref.size,
        "kept": rows.kept,
        "moved": rows.moved,
        "from_target": rows.from_target,
    }
    line = (
        f"lm_head re-indexed to {public_name(ref.where)}'s map ({ref.size:,} draft tokens): "
        f"{rows.kept:,} rows kept, {rows.moved:,} moved"
    )
    if rows.from_target:
        line += (
            f", {rows.from_target:,} taken from {source_label(lm_head_from.source)} ({thead.name})"
        )
    maps = [it.canonical for it in p.items if it.kind == "vocab-map"]
    p.notes.append(
        line + (f"; {' and '.join(maps)} written from the map" if maps else "; no d2t (identity)")
    )


def target_head(t):
    """A target's lm_head, or its embedding when it ties the two; None when it has neither."""
    return t.lm_head or (t.embed if t.config.get("tie_word_embeddings") else None)


def check_reindex_sources(p: Plan, ref, rows, lm_head_from, thead, width) -> None:
    """The rows a re-index takes from the target exist there: a target head is given, as wide
    as SRC's, holding every target id the map needs."""
    if rows.from_target and thead is None:
        where = lm_head_from.source.spec if lm_head_from is not None else p.src.source.spec
        what = (
            "the target has no lm_head to take them from"
            if lm_head_from is not None
            else "pass --lm-head-from TARGET to take their rows from the target's lm_head"
        )
        raise WeightcheckError(
            where,
            f"--vocab-from: {rows.from_target:,} of the {ref.size:,} tokens of "
            f"{ref.where}'s map are not in SRC's lm_head: {what}",
        )
    if thead is None or not rows.from_target:
        return
    if width is not None and thead.shape[1] != width:
        raise WeightcheckError(
            lm_head_from.source.spec,
            f"the target's lm_head {list(thead.shape)} is not {width} wide",
        )
    bad = [t for t in rows.target_ids() if not 0 <= t < thead.shape[0]]
    if bad:
        raise WeightcheckError(
            lm_head_from.source.spec,
            f"the map's target id {bad[0]} is outside the target's {thead.shape[0]} rows",
        )


def map_items(p: Plan, ref, names_dialect, keep_t2d: bool) -> None:
    """d2t (and t2d, where the layout keeps it) written from the ``--vocab-from`` map."""
    p.items.append(
        Item(
            names_dialect.from_canonical("d2t"),
            "d2t",
            "I64",
            (ref.size,),
            "vocab-map",
            None,
            "I64",
            data=ref.d2t_bytes(),
        )
    )
    vocab_size = ref.vocab or p.src.normalized.get("vocab_size")
    if keep_t2d and vocab_size:
        p.items.append(
            Item(
                names_dialect.from_canonical("t2d"),
                "t2d",
                "BOOL",
                (vocab_size,),
                "vocab-map",
                None,
                "BOOL",
                data=ref.t2d_bytes(vocab_size),
            )
        )
