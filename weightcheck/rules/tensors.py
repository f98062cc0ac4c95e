"""WC2xx: the inventory the config implies, shapes, dtypes, the shard index."""

from __future__ import annotations

from weightcheck.rules.base import WARNING, rule
from weightcheck.storage.header import CONFIG_DTYPES, FLOAT_DTYPES


@rule(
    "WC201", "no-config", "error", "No config.json: nothing tells the engine the drafter's shape."
)
def no_config(ctx):
    if ctx.d.source.config is None:
        from weightcheck.trainers import is_training_state

        said = "no config.json beside the weights"
        if is_training_state(ctx.d.source):  # SpecForge builds from the run's draft config
            said += (
                " (a SpecForge checkpoint has none: --training-config, the run's draft config, "
                "stands in for it)"
            )
        yield ctx.f("WC201", said, "config.json")


@rule(
    "WC202",
    "unknown-architecture",
    "error",
    "Neither config nor tensors identify a known drafter architecture.",
)
def unknown_arch(ctx):
    if ctx.d.architecture is None and not ctx.d.looks_like_target:
        yield ctx.f("WC202", ctx.d.architecture_evidence, "architectures")


@rule(
    "WC203",
    "target-as-drafter",
    "error",
    "The checkpoint looks like a target model (many layers, no fc, no d2t), not a drafter.",
)
def target_as_drafter(ctx):
    if ctx.d.looks_like_target:
        # where each engine's EAGLE-3 loader stops on it: the engine lines' words, not others
        stops = [
            f"{e} fails at {v.failure.stage}"
            + (f" on {v.failure.subject}" if v.failure.subject else "")
            for e, v in ctx.views().items()
            if not v.starts
        ]
        said = f" ({'; '.join(stops)})" if stops else ""
        yield ctx.f(
            "WC203",
            f"{ctx.d.target_said()}: no engine serves it as a drafter{said} and no convert "
            "makes one of it; pass it as --target and give the drafter as SRC",
            None,
        )


@rule(
    "WC204",
    "missing-tensor",
    "error",
    "A tensor the config implies is absent: the engine parameter keeps its random init.",
)
def missing(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    present = set(ctx.d.by_canonical())
    for name, e in inv.tensors.items():
        if name in present or e.presence != "required":
            continue
        if name == "lm_head.weight":
            continue  # WC302/WC303 say more precisely what a missing head means
        if name == "d2t":
            continue  # WC305
        yield ctx.f(
            "WC204",
            f"{name} {list(e.shape) if e.shape else ''} is missing; its config "
            "requires it" + (f" ({e.note})" if e.note else ""),
            name,
        )


@rule(
    "WC205",
    "unexpected-tensor",
    "warning",
    "A canonical tensor the config does not imply (e.g. fc_norm without fc_norm: true): the engine ignores it.",
)
def unexpected(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    for c, t in ctx.d.by_canonical().items():
        if c not in inv.tensors:
            tmpl = inv.architecture.template_for(c)
            why = (
                f"its condition `{tmpl.when}` is false in the config"
                if tmpl and tmpl.when
                else "the architecture has no such tensor"
            )
            yield ctx.f("WC205", f"{t.name}: not expected ({why}); engines ignore it", t.name)


@rule(
    "WC206",
    "shape-mismatch",
    "error",
    "A tensor's shape disagrees with the shape its config implies.",
)
def shapes(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    for c, t in ctx.d.by_canonical().items():
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
            yield ctx.f(
                "WC206", f"{t.name}: shape {list(t.shape)}, config implies {list(e.shape)}", t.name
            )


@rule(
    "WC207",
    "config-incomplete",
    "warning",
    "The config lacks a field needed to compute an expected shape.",
)
def config_incomplete(ctx):
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return
    seen = set()
    for e in inv.tensors.values():
        if e.problem and e.problem not in seen:
            seen.add(e.problem)
            yield ctx.f("WC207", f"{e.name}: {e.problem}", e.name)
    for fld, msg in ctx.n.problems:
        if fld not in ctx.n.mistyped:  # WC212's
            yield ctx.f("WC207", f"config {msg}", fld)


@rule("WC208", "dtype-mixed", "warning", "Floating-point tensors in more than one dtype.")
def dtype_mixed(ctx):
    kinds = {}
    for t in ctx.d.tensors:
        if t.dtype in FLOAT_DTYPES:
            kinds.setdefault(t.dtype, []).append(t.name)
    if len(kinds) > 1:
        desc = ", ".join(f"{k} ({len(v)})" for k, v in sorted(kinds.items()))
        major = max(sorted(kinds), key=lambda k: len(kinds[k]))
        odd = [n for k, v in sorted(kinds.items()) if k != major for n in v]
        names = ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        yield ctx.f("WC208", f"weights in several dtypes: {desc}; not {major}: {names}", odd[0])


@rule(
    "WC209",
    "dtype-vs-config",
    "warning",
    "Weights stored in another dtype than the config declares (fp32 exports are twice the size).",
)
def dtype_config(ctx):
    declared = CONFIG_DTYPES.get(str(ctx.n.get("dtype") or "").lower())
    floats = {t.dtype for t in ctx.d.tensors if t.dtype in FLOAT_DTYPES}
    if declared and floats and floats != {declared}:
        built = ctx.built_dtypes()
        yield ctx.f(
            "WC209",
            f"config says {ctx.n.get('dtype')} ({ctx.n.provenance.get('dtype')}) "
            f"but weights are {', '.join(sorted(floats))}"
            + (f": {built}, casting the weights at load" if built else ""),
            "dtype",
        )
    elif floats == {"F32"}:
        built = ctx.built_dtypes()
        yield ctx.f(
            "WC209",
            "weights are float32: twice the size of a bf16 export"
            + (f"; {built}" if built else ", cast at load"),
            "dtype",
        )


@rule(
    "WC210",
    "index-inconsistent",
    "error",
    "The shard index and the shards disagree (a tensor in another shard, unlisted, or a wrong total).",
)
def index_drift(ctx):
    for note in ctx.d.source.notes:
        if note.startswith("index-duplicate-tensor"):  # loads: the engines keep the later copy
            yield ctx.f("WC210", note.split(": ", 1)[1], ctx.d.source.index_file, severity=WARNING)
        elif note.startswith("index-"):
            yield ctx.f("WC210", note.split(": ", 1)[1], ctx.d.source.index_file)


def swapped_pairs(ctx) -> list[tuple[str, str]]:
    """Pairs of canonical tensors that hold each other's expected shapes (and not their own):
    names swapped in an export (MLA's kv_a_proj_with_mqa / kv_b_proj, q_a_proj / q_b_proj)."""
    inv = ctx.d.inventory
    if inv is None or ctx.d.source.config is None:
        return []
    got = {c: tuple(t.shape) for c, t in ctx.d.by_canonical().items()}
    want = {c: e.shape for c, e in inv.tensors.items() if e.shape is not None and c in got}
    wrong = sorted(c for c in want if got[c] != want[c])
    pairs = []
    for i, a in enumerate(wrong):
        for b in wrong[i + 1 :]:
            if got[a] == want[b] and got[b] == want[a]:
                pairs.append((a, b))
    return pairs


@rule(
    "WC211",
    "swapped-tensors",
    "error",
    "Two tensors hold each other's shapes: their names are swapped.",
)
def swapped(ctx):
    for a, b in swapped_pairs(ctx):
        shape_a, shape_b = list(ctx.tensor(a).shape), list(ctx.tensor(b).shape)
        yield ctx.f(
            "WC211",
            f"{a} holds {shape_a} and {b} holds {shape_b}: each is the other's shape, the names "
            "are swapped (the engines load them into the wrong parameters or stop on the shapes)",
            a,
        )


@rule(
    "WC212",
    "config-type",
    "error",
    'A config value has the wrong JSON type ("hidden_size": "128", a bool where an integer '
    "belongs): no engine builds such a config.",
)
def config_type(ctx):
    if ctx.d.source.config is None:
        return
    for fld, msg in ctx.n.problems:
        if fld in ctx.n.mistyped:
            yield ctx.f("WC212", msg, fld)
