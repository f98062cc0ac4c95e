"""WC2xx: the inventory the config implies, shapes, dtypes, the shard index."""

from __future__ import annotations

import re

from weightcheck import expr
from weightcheck.model import config as config_mod
from weightcheck.model import held
from weightcheck.model import names as name_table
from weightcheck.rules.base import CONDITIONAL, CRASH, UNCHANGED, UNTRAINED, rule
from weightcheck.storage.header import CONFIG_DTYPES


@rule("WC201")
def no_config(ctx, finding):
    if ctx.drafter.source.config is None:
        from weightcheck.trainers import is_training_state

        detail = "the engines build the drafter from config.json: without it no engine starts"
        if is_training_state(ctx.drafter.source):  # SpecForge builds from the run's draft config
            detail += (
                "; a SpecForge checkpoint has none: --training-config, the run's draft config, "
                "stands in for it"
            )
        yield finding(
            "no config.json beside the weights; ship the config the drafter was trained with",
            "config.json",
            detail=detail,
        )


@rule("WC202")
def unknown_arch(ctx, finding):
    if ctx.drafter.architecture is None and not ctx.drafter.looks_like_target:
        yield finding(
            "no known drafter architecture; set `architectures` to the drafter's EAGLE-3 class",
            "architectures",
            detail=ctx.drafter.architecture_evidence,
        )


@rule("WC203")
def target_as_drafter(ctx, finding):
    if ctx.drafter.looks_like_target:
        # where each engine's EAGLE-3 loader stops on it: the engine lines' words, not others
        stops = [
            f"{e} fails at {v.failure.stage}"
            + (f" on {v.failure.subject}" if v.failure.subject else "")
            for e, v in ctx.views().items()
            if not v.starts
        ]
        where = f" ({'; '.join(stops)})" if stops else ""
        said = f"{ctx.drafter.target_said()}; pass it as --target"  # the reason, when it fits
        if len(said) > 120:
            said = f"{ctx.drafter.target_said(why=False)}; pass it as --target, the drafter as SRC"
        yield finding(
            said,
            None,
            detail=f"{ctx.drafter.target_said()}: no engine serves it as a drafter{where} and no "
            "convert makes one of it.",
        )


@rule("WC204")
def missing(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    present = ctx.drafter.covered()  # a fused tensor's parts too
    for name, e in inv.tensors.items():
        if name in present or e.presence != "required":
            continue
        if name == "lm_head.weight":
            continue  # WC302/WC303 say more precisely what a missing head means
        if name == "d2t":
            continue  # WC305
        yield finding(
            f"{name} is missing; ship it, or correct the config flag that asks for it",
            name,
            detail=f"its config requires {name} {list(e.shape) if e.shape else ''}"
            + (f" ({e.note})" if e.note else "")
            + ": the engine builds the parameter and nothing loads into it",
        )


@rule("WC205")
def unexpected(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    for c, t in ctx.drafter.by_canonical().items():
        if c not in inv.tensors and c not in inv.fused:
            tmpl = inv.architecture.template_for(c)
            if c in _MAPS:
                said = _full_vocab_map(ctx, finding, c, t)
                if said is not None:
                    yield said
                continue
            why = (
                f"`{tmpl.when}` is false"
                if tmpl and tmpl.when
                else "the architecture has no such tensor"
            )
            yield finding(
                f"{t.name}: not built ({why}); set the flag it was trained with",
                t.name,
                detail="the trainers build this module only under its flag and save only what "
                "they built, so it was trained; the engines build no parameter for it and serve "
                "the drafter without it (SGLang drops it, vLLM drops it or stops at load)",
            )


# the vocabulary maps: no module, written whatever the widths by SpecForge's export (t2d and d2t
# are required serving keys) and SafeAILab's EAGLE-3 trainer; the trainers' full-vocabulary map
# is the identity (used tokens sorted: d2t all zero, t2d all set)
_MAPS = ("d2t", "t2d")


def _full_vocab_map(ctx, finding, c: str, t):
    """d2t/t2d in a drafter whose draft vocabulary is the target's (Vd = V). Both engines skip
    t2d by name; SGLang reads d2t as the map whatever the widths (the identity when all zero),
    vLLM builds no parameter for it then and refuses it (WC703, an error under --engine vllm).
    Nothing when vocab_size only looks full, holding the draft vocabulary's size (WC313): the
    engines see a reduced vocabulary (vLLM compares draft_vocab_size with the target's), and
    dropping the maps would lose the run's map."""
    from weightcheck.rules.vocab import vocab_is_draft_evidence

    if vocab_is_draft_evidence(ctx) is not None:
        return None
    d2t, _ = ctx.vocab_maps()
    if c == "t2d" or (d2t is not None and not any(d2t)):
        return finding(
            f"{t.name}: an identity map in a full-vocabulary drafter (none is needed); vLLM "
            "refuses d2t: drop it",
            t.name,
            consequence=UNCHANGED,
            detail="draft_vocab_size = vocab_size: no map is built; both engines skip t2d, SGLang "
            "reads an all-zero d2t as the identity, vLLM stops at load on d2t (WC703)",
        )
    return finding(
        f"{t.name}: a map that is not the identity in a full-vocabulary drafter; only SGLang "
        "applies it",
        t.name,
        consequence=CONDITIONAL,
        detail="draft_vocab_size = vocab_size: SGLang remaps the drafter's ids through d2t (right "
        "only if it was trained with this map), vLLM stops at load on d2t (WC703)",
    )


@rule("WC206")
def shapes(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    by_canonical = ctx.drafter.by_canonical()
    wrong = held.mismatches(inv, {c: tuple(t.shape) for c, t in by_canonical.items()})
    for c, want in wrong.items():
        t = by_canonical[c]
        said = f"{t.name}: shape {list(t.shape)}, config implies {list(want)}"
        advice = shape_advice(ctx, c)
        if c in inv.fused:  # a fused tensor left whole: its shape is not its parts'
            yield _fused_shape(
                finding, t, inv.fused[c], inv, said + advice, _shape_evidence(ctx, c)
            )
            continue
        yield finding(
            said + advice,
            t.name,
            detail="the engine builds the parameter from the config and its weight loader "
            "asserts on another shape; " + _shape_evidence(ctx, c),
        )


def config_held(ctx) -> held.Solution:
    """The config fields the weights contradict, with the values they hold, and the tensors no
    config value fits (weightcheck/model/held.py). Computed once per check."""
    if "held" not in ctx._memo:
        ctx._memo["held"] = held.of_drafter(ctx.drafter)
    return ctx._memo["held"]


def shape_advice(ctx, canonical: str) -> str:
    """What to do about a tensor of another shape than its config implies, decided in this one
    place: a config field the weights contradict is named (WC409 says to set it), a tensor no
    config value fits is re-exported; where a value would fit but the shapes cannot say which
    field (fc's width), the config is corrected; nothing where another root says it (a
    transposed or swapped tensor)."""
    sol = config_held(ctx)
    h = sol.settles(canonical)
    if h is not None:
        return f"; {h.field} is wrong"
    if canonical in sol.wrong:
        return "; the tensor is wrong: re-export it"
    if canonical in sol.unsure:
        return "; correct the config or the tensor"
    if canonical in sol.fits:
        return "; correct the config"
    return ""


def _shape_evidence(ctx, canonical: str) -> str:
    sol = config_held(ctx)
    h = sol.settles(canonical)
    if h is not None:
        return (
            f"{h.field} {h.was()}, the weights hold {h.value} (WC409 names every tensor it sizes)"
        )
    if canonical in sol.wrong:
        return (
            "no value of a config size field gives this shape and keeps the other tensors' "
            "shapes: the tensor, not the config, is wrong (an export that wrote other rows or "
            "columns); re-export it with the shape the config implies"
        )
    if canonical in sol.fits:
        said = " or ".join(f"{f} {v}" for f, v in sol.fits[canonical])
        return f"{said} would give this shape; `weightcheck inspect SRC` shows each config value"
    return "`weightcheck inspect SRC` shows each config value and where it came from"


def _fused_shape(finding, t, f, inv, message, evidence):
    """A fused tensor whose shape is not its parts' config shapes concatenated: the engines split
    it at the config's offsets all the same (their weight loaders narrow each part's rows and
    assert its columns), so the parts they load are not the ones trained."""
    parts = " + ".join(
        f"{p.rsplit('.', 2)[-2].removesuffix('_proj')} {inv.tensors[p].shape[0]}" for p in f.parts
    )
    return finding(
        message,
        t.name,
        detail=f"{f.note}; the config implies rows {parts}: the engines' weight loaders split it "
        "at those offsets and assert each part's columns; rows past them are never read, too few "
        "stop the load, so the parts served are not the ones trained; " + evidence,
    )


@rule("WC207")
def config_incomplete(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    seen = set()
    for e in inv.tensors.values():
        if e.problem and e.problem not in seen:
            seen.add(e.problem)
            yield finding(
                f"{e.name}: {e.problem}",
                e.name,
                detail="the engine falls back to a default weightcheck cannot see",
            )
    for fld, msg in ctx.normalized.problems:
        if fld not in ctx.normalized.mistyped:  # WC212's
            yield finding(
                f"config {msg}",
                fld,
                detail="the engine falls back to a default weightcheck cannot see",
            )


@rule("WC208")
def dtype_mixed(ctx, finding):
    kinds = ctx.weights_by_dtype()
    if len(kinds) > 1:
        desc = ", ".join(f"{k} ({len(v)})" for k, v in sorted(kinds.items()))
        major = max(sorted(kinds), key=lambda k: len(kinds[k]))
        odd = [n for k, v in sorted(kinds.items()) if k != major for n in v]
        names = ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        yield finding(
            f"weights in several dtypes ({desc}); cast them to one (convert --dtype)",
            odd[0],
            detail=f"not {major}: {names}. The engines cast every tensor to the dtype they build "
            "the draft in; a partly cast export is usually a conversion accident",
        )


@rule("WC209")
def dtype_config(ctx, finding):
    declared = CONFIG_DTYPES.get(str(ctx.normalized.get("dtype") or "").lower())
    floats = set(ctx.weights_by_dtype())
    if declared and floats and floats != {declared}:
        built = ctx.built_dtypes()
        yield finding(
            f"config says {ctx.normalized.get('dtype')} but weights are "
            f"{', '.join(sorted(floats))}; cast them (convert --dtype) or correct the config",
            "dtype",
            detail=f"the dtype is read from {ctx.normalized.provenance.get('dtype')}"
            + (f"; {built}, casting the weights at load" if built else ""),
        )
    elif floats == {"F32"}:
        built = ctx.built_dtypes()
        yield finding(
            "weights are float32, twice the size of a bf16 export; cast them (convert --dtype)",
            "dtype",
            detail=(f"{built}, casting the weights at load" if built else "cast at load"),
        )


# the first line of each kind of shard-index drift (sources/base.py notes it), {name} the tensor
# (found in the note by _NAMED: tensor names hold no spaces, paths may)
_NAMED = {
    "index-duplicate-tensor": r"^(\S+) is in ",
    "index-missing-tensor": r" maps (\S+) to ",
    "index-wrong-shard": r" maps (\S+) to ",
    "index-unlisted-tensor": r" holds (\S+), which ",
    "index-unread-file": r" no tensor of (\S+), which ",
}
_INDEX = {
    "index-duplicate-tensor": "{name} is in two weight files; keep one copy",
    "index-missing-tensor": "the index maps {name} to a shard without it; harmless: regenerate it",
    "index-wrong-shard": "the index maps {name} to the wrong shard; harmless: regenerate it",
    "index-unlisted-tensor": "the index does not list {name}; its file loads anyway: regenerate it",
    "index-unread-file": "the index names nothing in {name}: no engine opens it; regenerate the "
    "index",
    "index-total-size": "the index's total_size is stale; no engine reads total_size, nothing "
    "served changes",
}
# what the engines do with each (sglang 0.5.23 / vllm 0.32.0 model_loader/weight_utils.py
# filter_duplicate_safetensors_files keeps the folder's files the weight_map names, then every
# tensor of those files is handed to load_weights; the map's entries are read for nothing else)
_WHY = {
    "index-missing-tensor": "the engines read the index only for which files to open, then every "
    "tensor those files hold: an entry no shard holds is never looked up",
    "index-wrong-shard": "the engines read the index only for which files to open, then every "
    "tensor those files hold: the tensor's own file is among them and it loads",
    "index-unlisted-tensor": "the engines read the index only for which files to open, then every "
    "tensor those files hold: this one loads like the others",
    "index-unread-file": "the engines open only the files the weight_map names: none of this "
    "file's tensors is loaded; right only if the drafter needs none of them (a parameter that "
    "needs one is reported as missing)",
    "index-total-size": "neither engine reads total_size (files are chosen by weight_map)",
}
_CONSEQUENCE = {
    "index-duplicate-tensor": CONDITIONAL,  # by the copies' values: _two_files
    "index-missing-tensor": UNCHANGED,
    "index-wrong-shard": UNCHANGED,
    "index-unlisted-tensor": UNCHANGED,
    "index-unread-file": CONDITIONAL,
    "index-total-size": UNCHANGED,
}


@rule("WC210")
def index_drift(ctx, finding):
    fix = ctx.fix_command(ctx.engine or "sglang")
    how = f"; `{fix}` reads every shard's header and writes a correct index" if fix else ""
    for note in ctx.drafter.source.notes:
        kind, _, said = note.partition(": ")
        if kind not in _INDEX:
            continue
        name = re.search(_NAMED[kind], said) if kind in _NAMED else None
        message = _INDEX[kind].format(name=name.group(1) if name else "a tensor")
        if kind == "index-duplicate-tensor":  # loads: the engines keep the later file's copy
            yield _two_files(ctx, finding, name.group(1) if name else None, said)
            continue
        if kind == "index-unread-file" and name:  # by what the unopened file holds
            yield _unread_file(ctx, finding, name.group(1), message, f"{said}{how}")
            continue
        why = f"; {_WHY[kind]}" if kind in _WHY else ""
        yield finding(
            message,
            ctx.drafter.source.index_file,
            consequence=_CONSEQUENCE[kind],
            detail=f"{said}{why}{how}",
        )


def _unread_file(ctx, finding, fname: str, message: str, said: str):
    """A weight file the index names nothing of: the engines never open it. Its tensors that no
    file the index names holds too (and that are no non-parameter buffer) are trained values the
    served drafter never gets: a parameter that needs one keeps its initial value (WC204 names
    it), a module no parameter takes is lost (an error, as WC205/WC702 say of it when the file is
    opened). A leftover copy of tensors the named files hold (a consolidated file beside the
    shards) changes nothing served."""
    src = ctx.drafter.source
    lost = sorted(
        n
        for n, t in src.unread.items()
        if t.file == fname and n not in src.tensors and name_table.buffer_of(n) is None
    )
    if not lost:
        return finding(
            message,
            src.index_file,
            consequence=UNCHANGED,
            detail=f"{said}; every tensor it holds is also in the files the index names (or a "
            "non-parameter buffer): nothing served changes",
        )
    few = ", ".join(lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
    return finding(
        f"the index names nothing in {fname}: no engine loads its {len(lost)} trained tensor(s)",
        src.index_file,
        consequence=UNTRAINED,
        detail=f"{said}; never loaded: {few}. Regenerate the index so that it names every "
        "weight file",
    )


def _two_files(ctx, finding, name: str | None, said: str):
    """A tensor in two weight files: both engines load both, the later file's copy stays. Equal
    values (in the dtype each engine builds): nothing served changes (info); else the served
    model is right only if the later copy is the trained one (a warning naming it)."""
    from weightcheck.engines import same_bytes

    src = ctx.drafter.source
    dtypes = tuple({getattr(v, "dtype", None) for v in ctx.views().values()}) or (None,)
    same = same_bytes.shadowed_equal(src, name, dtypes) if name in src.tensors else None
    if same:
        return finding(
            f"{name} is in two weight files with equal values; nothing served changes, keep one",
            src.index_file,
            consequence=UNCHANGED,
            detail=f"{said}; the copies hold equal values in the dtype each engine builds",
        )
    differ = "differs between" if same is False else "is not comparable across"
    kept = src.tensors[name].file if name in src.tensors else "the later file"
    message = f"{name} {differ} two weight files; engines serve {kept}'s, keep the trained copy"
    if len(message) > 120:
        message = f"{name} {differ} two weight files; engines serve the later file's copy"
    return finding(
        message,
        src.index_file,
        consequence=CONDITIONAL,
        detail=f"{said}: the served model is the trained one only if that copy is; convert "
        "refuses copies that differ",
    )


def swapped_pairs(ctx) -> list[tuple[str, str]]:
    """Pairs of canonical tensors that hold each other's expected shapes (model/held.py)."""
    return held.swapped_pairs(ctx.drafter)


@rule("WC211")
def swapped(ctx, finding):
    for a, b in swapped_pairs(ctx):
        shape_a, shape_b = list(ctx.tensor(a).shape), list(ctx.tensor(b).shape)
        yield finding(
            f"{_short(a)} and {_short(b)} hold each other's shapes: the names are swapped; swap "
            "them back",
            a,
            detail=f"{a} holds {shape_a} and {b} holds {shape_b}: each is the other's shape; the "
            "engines load them into the wrong parameters or stop on the shapes",
        )


def _short(canonical: str) -> str:
    """kv_a_proj_with_mqa for midlayer.self_attn.kv_a_proj_with_mqa.weight."""
    parts = canonical.split(".")
    return parts[-2] if len(parts) > 1 and parts[-1] in ("weight", "bias") else canonical


@rule("WC212")
def config_type(ctx, finding):
    if ctx.drafter.source.config is None:
        return
    v = ctx.engine_view
    for fld, msg in ctx.normalized.problems:
        if fld not in ctx.normalized.mistyped:
            continue
        w = v.type_fates.get(fld) if v is not None else None
        if w is None:  # every other engine, and plain check's own run: the page's consequence
            yield finding(
                msg,
                fld,
                detail="the engines' config classes compute with the value and stop at start-up "
                "(or read `true` as 1); nothing is computed with it here either",
            )
            continue
        # what this engine does with the field's value (mappings/engines/E.toml
        # [[speculators_adapter.wrong_type]]): a crash where it fails on it (at config, build,
        # load or its first forward), nothing served changes where it computes with the value as
        # the number it is or never reads it
        how = _TYPE_STAGE.get(w.stage) or f"fails at {w.stage}"
        t = ctx.tensor(w.tensor) if w.stage == "load" and w.tensor else None
        how += f" on {t.name}" if t is not None else ""  # its own WC703 is listed under this
        yield finding(
            msg,
            fld,
            consequence=UNCHANGED if w.stage in ("accepted", "unread") else CRASH,
            detail=f"{v.engine} {v.version} {how}: {w.why}" + (f" ({w.cite})" if w.cite else ""),
        )


_TYPE_STAGE = {
    "accepted": "starts and computes with the value",
    "unread": "starts",
    "forward": "starts, then its first forward fails",
    "load": "fails at load",
}


def transposed(ctx) -> list[str]:
    """Canonical 2-D tensors stored transposed (model/held.py)."""
    return held.transposed(ctx.drafter)


@rule("WC213")
def transposed_tensor(ctx, finding):
    for c in transposed(ctx):
        t, want = ctx.tensor(c), list(ctx.drafter.inventory.tensors[c].shape)
        yield finding(
            f"{t.name} is stored transposed: {list(t.shape)}, the engines build {want}; "
            "re-export it as [out, in]",
            t.name,
            detail=f"both engines build the parameter as {want} and their weight loaders "
            f"assert on {list(t.shape)} (SGLang's default_weight_loader, vLLM's "
            "ReplicatedLinear.weight_loader): the load stops. Store it as [out_features, "
            "in_features], as torch.nn.Linear does",
        )


def nonpositive_sizes(ctx) -> dict[str, tuple[int, list[str]]]:
    """Size fields written as 0 or a negative number (a field with a shape symbol,
    mappings/config.toml), each with the tensors whose shape it sizes (directly, or through a
    field whose default reads it). num_hidden_layers is WC406's."""
    n = ctx.normalized
    specs = [s for s in config_mod.field_specs() if s.symbol and s.type == "int"]
    bad = {
        s.name: n.get(s.name)
        for s in specs
        if s.name != "num_hidden_layers"
        and type(n.get(s.name)) is int
        and n.get(s.name) <= 0
        and n.provenance.get(s.name) not in ("default", None)
    }
    inv = ctx.drafter.inventory
    out = {}
    for fld, value in bad.items():
        reads = {fld}
        for s in specs:  # fields whose default is computed from it (head_dim from hidden_size)
            if n.provenance.get(s.name) == "default" and s.default and fld in expr.names(s.default):
                reads.add(s.name)
        reads |= {s.symbol for s in specs if s.name in reads}
        sized = []
        for c, t in ctx.drafter.by_canonical().items():
            tmpl = inv.architecture.template_for(c) if inv is not None else None
            if tmpl is not None and any(reads & expr.names(x) for x in tmpl.shape):
                sized.append(t.name)
        out[fld] = (value, sorted(sized))
    return out


@rule("WC214")
def nonpositive(ctx, finding):
    if ctx.drafter.source.config is None:
        return
    for fld, (value, sized) in nonpositive_sizes(ctx).items():
        where = ctx.normalized.provenance.get(fld)
        yield finding(
            f"{fld} is {value}: a size must be positive; write the value the drafter was trained "
            "with",
            fld,
            detail=f"read from {where}; it sizes {len(sized)} tensor(s) "
            f"({', '.join(sized) or 'none present'}) and the engines build each from it: a "
            "negative size stops them at build, a zero one at load (the weights hold other "
            "shapes)",
        )
