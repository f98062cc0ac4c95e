"""WC2xx: the inventory the config implies, shapes, dtypes, the shard index."""

from __future__ import annotations

from weightcheck.rules.base import INFO, WARNING, rule
from weightcheck.storage.header import CONFIG_DTYPES, FLOAT_DTYPES


@rule("WC201")
def no_config(ctx, finding):
    if ctx.drafter.source.config is None:
        from weightcheck.trainers import is_training_state

        said = "no config.json beside the weights"
        if is_training_state(ctx.drafter.source):  # SpecForge builds from the run's draft config
            said += (
                " (a SpecForge checkpoint has none: --training-config, the run's draft config, "
                "stands in for it)"
            )
        yield finding(said, "config.json")


@rule("WC202")
def unknown_arch(ctx, finding):
    if ctx.drafter.architecture is None and not ctx.drafter.looks_like_target:
        yield finding(ctx.drafter.architecture_evidence, "architectures")


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
        said = f" ({'; '.join(stops)})" if stops else ""
        yield finding(
            f"{ctx.drafter.target_said()}: no engine serves it as a drafter{said} and no convert "
            "makes one of it; pass it as --target and give the drafter as SRC",
            None,
        )


@rule("WC204")
def missing(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    present = set(ctx.drafter.by_canonical())
    for name, e in inv.tensors.items():
        if name in present or e.presence != "required":
            continue
        if name == "lm_head.weight":
            continue  # WC302/WC303 say more precisely what a missing head means
        if name == "d2t":
            continue  # WC305
        yield finding(
            f"{name} {list(e.shape) if e.shape else ''} is missing; its config "
            "requires it" + (f" ({e.note})" if e.note else ""),
            name,
        )


@rule("WC205")
def unexpected(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    for c, t in ctx.drafter.by_canonical().items():
        if c not in inv.tensors:
            tmpl = inv.architecture.template_for(c)
            why = (
                f"its condition `{tmpl.when}` is false in the config"
                if tmpl and tmpl.when
                else "the architecture has no such tensor"
            )
            yield finding(f"{t.name}: not expected ({why}); engines ignore it", t.name)


@rule("WC206")
def shapes(ctx, finding):
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return
    for c, t in ctx.drafter.by_canonical().items():
        e = inv.tensors.get(c)
        if e is None:
            continue
        if e.shape is None:
            continue
        if c == "lm_head.weight" and tuple(t.shape[1:]) == tuple(e.shape[1:]):
            continue  # rows are WC301's business
        if c == "d2t":
            continue  # WC304
        if tuple(t.shape) != tuple(e.shape):
            yield finding(
                f"{t.name}: shape {list(t.shape)}, config implies {list(e.shape)}", t.name
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
            yield finding(f"{e.name}: {e.problem}", e.name)
    for fld, msg in ctx.normalized.problems:
        if fld not in ctx.normalized.mistyped:  # WC212's
            yield finding(f"config {msg}", fld)


@rule("WC208")
def dtype_mixed(ctx, finding):
    kinds = {}
    for t in ctx.drafter.tensors:  # a non-parameter buffer (float32 RoPE table) is never loaded
        if t.dtype in FLOAT_DTYPES and t.name not in ctx.drafter.naming.buffers:
            kinds.setdefault(t.dtype, []).append(t.name)
    if len(kinds) > 1:
        desc = ", ".join(f"{k} ({len(v)})" for k, v in sorted(kinds.items()))
        major = max(sorted(kinds), key=lambda k: len(kinds[k]))
        odd = [n for k, v in sorted(kinds.items()) if k != major for n in v]
        names = ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        yield finding(f"weights in several dtypes: {desc}; not {major}: {names}", odd[0])


@rule("WC209")
def dtype_config(ctx, finding):
    declared = CONFIG_DTYPES.get(str(ctx.normalized.get("dtype") or "").lower())
    floats = {
        t.dtype
        for t in ctx.drafter.tensors
        if t.dtype in FLOAT_DTYPES and t.name not in ctx.drafter.naming.buffers
    }
    if declared and floats and floats != {declared}:
        built = ctx.built_dtypes()
        yield finding(
            f"config says {ctx.normalized.get('dtype')} ({ctx.normalized.provenance.get('dtype')}) "
            f"but weights are {', '.join(sorted(floats))}"
            + (f": {built}, casting the weights at load" if built else ""),
            "dtype",
        )
    elif floats == {"F32"}:
        built = ctx.built_dtypes()
        yield finding(
            "weights are float32: twice the size of a bf16 export"
            + (f"; {built}" if built else ", cast at load"),
            "dtype",
        )


@rule("WC210")
def index_drift(ctx, finding):
    for note in ctx.drafter.source.notes:
        if note.startswith("index-duplicate-tensor"):  # loads: the engines keep the later copy
            yield finding(note.split(": ", 1)[1], ctx.drafter.source.index_file, severity=WARNING)
        elif note.startswith("index-total-size"):  # no engine reads it: nothing served changes
            yield finding(note.split(": ", 1)[1], ctx.drafter.source.index_file, severity=INFO)
        elif note.startswith("index-"):
            yield finding(note.split(": ", 1)[1], ctx.drafter.source.index_file)


def swapped_pairs(ctx) -> list[tuple[str, str]]:
    """Pairs of canonical tensors that hold each other's expected shapes (and not their own):
    names swapped in an export (MLA's kv_a_proj_with_mqa / kv_b_proj, q_a_proj / q_b_proj)."""
    inv = ctx.drafter.inventory
    if inv is None or ctx.drafter.source.config is None:
        return []
    got = {c: tuple(t.shape) for c, t in ctx.drafter.by_canonical().items()}
    want = {c: e.shape for c, e in inv.tensors.items() if e.shape is not None and c in got}
    wrong = sorted(c for c in want if got[c] != want[c])
    pairs = []
    for i, a in enumerate(wrong):
        for b in wrong[i + 1 :]:
            if got[a] == want[b] and got[b] == want[a]:
                pairs.append((a, b))
    return pairs


@rule("WC211")
def swapped(ctx, finding):
    for a, b in swapped_pairs(ctx):
        shape_a, shape_b = list(ctx.tensor(a).shape), list(ctx.tensor(b).shape)
        yield finding(
            f"{a} holds {shape_a} and {b} holds {shape_b}: each is the other's shape, the names "
            "are swapped (the engines load them into the wrong parameters or stop on the shapes)",
            a,
        )


@rule("WC212")
def config_type(ctx, finding):
    if ctx.drafter.source.config is None:
        return
    for fld, msg in ctx.normalized.problems:
        if fld in ctx.normalized.mistyped:
            yield finding(msg, fld)
