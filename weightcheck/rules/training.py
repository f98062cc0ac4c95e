"""WC9xx: the pre-training gate (--training-config)."""

from __future__ import annotations

from weightcheck.engines import aux
from weightcheck.errors import json_value
from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.model.compatibility import (
    architecture_differences,
    declared_architecture,
    same_field,
)
from weightcheck.model.drafter import Drafter
from weightcheck.rules.base import WARNING, TrainingGate, rule


@rule("WC901", needs="training")
def training_shapes(ctx, finding):
    for c, mine, want in ctx.training.mismatch:
        yield finding(f"{c}: {list(mine)} here, the training config builds {list(want)}", c)


@rule("WC902", needs="training")
def training_reinit(ctx, finding):
    r = ctx.training.replay
    for c in ctx.training.reinit:
        if c == "embed_tokens.weight":
            said = (
                r.says_embedding
                if r is not None
                else "SpecForge takes the target's embedding (and freezes it), others initialize it"
            )
            yield finding(f"{c}: not in SRC; {said}", c)
        else:
            yield finding(f"{c}: not in SRC; training would initialize it from scratch", c)


@rule("WC903", needs="training")
def training_ignored(ctx, finding):
    for c in ctx.training.ignored:
        yield finding(f"{c}: in SRC but not in the training architecture; it would be ignored", c)


@rule("WC904", needs="training")
def training_config(ctx, finding):
    for fld, mine, theirs in ctx.training.fields:
        yield finding(
            f"config {fld}: {json_value(mine)} in SRC, {json_value(theirs)} in the training config",
            fld,
        )


@rule("WC905", needs="training")
def training_architecture(ctx, finding):
    g = ctx.training
    sev = WARNING if g.allow_partial_init else None
    share = f"SRC initializes {_share(g)} of it"
    if g.architectures is not None:
        src, want = g.architectures
        yield finding(
            f"SRC is a {src or 'drafter of no known architecture'}, the training config builds "
            f"a {want}: {share}; from scratch: {_scratch(g)}"
            + ("" if g.allow_partial_init else " (--allow-partial-init if you mean it)"),
            "architectures",
            severity=sev,
        )
    for fld, mine, theirs in g.arch_fields:
        bad = ctx.normalized.unknown_because.get(fld)
        said = (
            f"unusable in SRC (WC212: {bad} is mistyped)" if bad else f"{json_value(mine)} in SRC"
        )
        yield finding(
            f"config {fld}: {said}, {json_value(theirs)} in the training "
            "config: another architecture (compare says incompatible)"
            + ("" if g.allow_partial_init else " (--allow-partial-init if you mean it)"),
            fld,
            severity=sev,
        )


@rule("WC906", needs="training")
def training_init(ctx, finding):
    g = ctx.training
    if g.replay is not None and g.replay.raises:  # WC908 says what happens instead
        return
    if not g.from_scratch:  # all of it: the report's training section says so
        return
    yield finding(
        f"SRC initializes {_share(g)} of the training architecture; from scratch: {_scratch(g)}",
        "training",
    )


@rule("WC907", needs="training")
def training_vocab_unmapped(ctx, finding):
    if ctx.training_vocab is not None:
        return
    n = ctx.normalized
    dv, v = n.get("draft_vocab_size"), n.get("vocab_size")
    reduced = ctx.tensor("d2t") is not None or (type(dv) is int and type(v) is int and dv < v)
    if not reduced:
        return
    r = ctx.training.replay
    how = r.says_without_map if r is not None else "SpecForge builds d2t/t2d from the training data"
    yield finding(
        f"no vocabulary map given: {how}; pass --training-vocab to check the map the run will use",
        "d2t",
    )


@rule("WC908", needs="training")
def trainer_raises(ctx, finding):
    r = ctx.training.replay
    if r is None or not r.raises:
        return
    if r.kind == "mismatch" and _all_said(ctx.training, r):
        return  # WC901 says these shapes already (an error too)
    fix = f"; {r.fix}" if r.fix else ""
    yield finding(f"{r.pretty} raises at init: {r.raises} ({r.cite}){fix}", "trainer")


def _all_said(g: TrainingGate, r) -> bool:
    said = {c for c, _, _ in g.mismatch}
    return all(_canonical(n) in said for n, _, _ in r.mismatched)


def _canonical(own: str) -> str:
    return "midlayer." + own[len("layers.0.") :] if own.startswith("layers.0.") else own


def said(g: TrainingGate) -> str:
    """The gate's answer in a line (check's header, the JSON's training.says)."""
    r = g.replay
    if r is not None and r.raises:
        return f"{r.pretty} raises at init: {r.raises}"
    if r is not None:
        return f"{r.pretty}: " + _said(g)
    return _said(g)


def _said(g: TrainingGate) -> str:
    what = g.architectures[1] if g.architectures else ("its model" if g.replay else "it")
    head = f"SRC initializes {_share(g)} of {what}"
    return head + (f"; from scratch: {_scratch(g)}" if g.from_scratch else "")


def _share(g: TrainingGate) -> str:
    n = sum(g.initialized.values())
    m = n + sum(g.from_scratch.values())
    return f"{n:,} of {m:,} parameters ({100 * g.fraction:.1f}%)"


def _scratch(g: TrainingGate) -> str:
    """The tensors training starts from scratch, by block (self_attn.* is "the attention
    block"), largest first."""
    blocks: dict[str, list[str]] = {}
    for name in sorted(g.from_scratch, key=lambda n: -g.from_scratch[n]):
        parts = name.split(".")
        block = ".".join(parts[:2]) if parts[0] in ("midlayer",) or parts[0] == "layers" else name
        if parts[0] == "layers" and len(parts) > 2:
            block = ".".join(parts[:3])
        blocks.setdefault(block, []).append(parts[-2] if len(parts) > 1 else name)
    said = []
    for block, names in blocks.items():
        if block.endswith("self_attn"):
            said.append(f"the attention block ({', '.join(sorted(set(names)))})")
        elif block.endswith("mlp"):
            said.append(f"the MLP ({', '.join(sorted(set(names)))})")
        else:
            said.append(block)
    return ", ".join(said) if said else "nothing"


def training_gate(
    d: Drafter,
    training_cfg: dict,
    allow_partial_init: bool = False,
    trainer: str | None = None,
    target=None,
    training_vocab=None,
) -> TrainingGate:
    """The WC9xx rules' input: can SRC initialize exactly that architecture? ``trainer``
    (specforge | speculators; None: detected from the training config) is replayed
    (weightcheck/trainers/): what it loads, takes, leaves at init, or that it raises."""
    # the trainers' replay, like the engines', is imported when it runs (--training-config):
    # every other check would pay for it at start-up
    from weightcheck import trainers

    g = _gate(d, training_cfg, allow_partial_init)
    name = trainer or trainers.detect(training_cfg)
    if name is not None:
        g.replay = r = trainers.replay(d, training_cfg, name, target, training_vocab)
        # N of M: the trainer's own parameters (buffers and what it takes elsewhere left out)
        g.initialized = {
            n: r.numel[n] for n, o in r.params.items() if o == "src" and n not in r.buffers
        }
        g.from_scratch = {
            n: r.numel[n] for n, o in r.params.items() if o == "init" and n not in r.buffers
        }
    return g


def _gate(d: Drafter, training_cfg: dict, allow_partial_init: bool = False) -> TrainingGate:
    norm = config_mod.normalize(training_cfg)
    arch = inventory.named_by(training_cfg) or d.architecture or inventory.default()
    # the decoder layers that architecture builds: num_hidden_layers (SRC's, when the training
    # config does not say a usable number)
    L = norm.get("num_hidden_layers")
    held = arch.layers_held(mine := d.by_canonical())
    inv = inventory.expected(
        arch, norm.symbols(), L if isinstance(L, int) and 1 <= L <= inventory.MAX_LAYERS else held
    )
    mism, reinit, ignored = [], [], []
    initialized: dict[str, int] = {}
    from_scratch: dict[str, int] = {}
    for name, e in inv.tensors.items():
        t = mine.get(name)
        size = _numel(e.shape)
        if t is None:
            if e.presence == "required" or name == "embed_tokens.weight":
                reinit.append(name)
                # maps are no parameters; a missing embedding is the trainer's to fill (SpecForge
                # takes the target's): counted neither way
                if name not in ("d2t", "t2d", "embed_tokens.weight"):
                    from_scratch[name] = size
        elif e.shape is not None and tuple(t.shape) != tuple(e.shape):
            mism.append((name, t.shape, e.shape))
            from_scratch[name] = size
        elif name not in ("d2t", "t2d"):
            initialized[name] = size
    for name in mine:
        if name not in inv.tensors:
            ignored.append(name)
    fields = []
    for spec in config_mod.field_specs():
        if spec.category != "serving":
            continue
        a, b = d.normalized.get(spec.name), norm.get(spec.name)
        if same_field(spec.name, a, b):  # by meaning: RoPE in either spelling
            continue
        if spec.name == "aux_layer_ids":  # by meaning: the target layers each captures
            fam = aux.target_family(d)[0] or _family_of(training_cfg)
            conv_b = aux.config_convention(training_cfg)
            if aux.same_layers(a, aux.convention_of(d), b, conv_b, fam) is not None:
                continue
        fields.append((spec.name, a, b))
    src_arch = d.architecture.name if d.architecture else None
    # SRC's weights' architecture, and the one its own config names (compare weighs both:
    # model/compatibility.py): either differing from what the training config builds
    said = declared_architecture(d)
    if src_arch == arch.name and said is not None and said != arch.name:
        src_arch = f"{src_arch} (its config names {said})"
    return TrainingGate(
        training_cfg,
        mism,
        reinit,
        ignored,
        fields,
        architectures=None if src_arch == arch.name else (src_arch, arch.name),
        arch_fields=architecture_differences(d.normalized.values, norm.values),
        initialized=initialized,
        from_scratch=from_scratch,
        allow_partial_init=allow_partial_init,
    )


def _numel(shape) -> int:
    n = 1
    for x in shape or ():
        n *= x if type(x) is int else 0
    return n


def _family_of(cfg: dict) -> str | None:
    """A training config's own word on the target family (SpecForge copies the target's
    model_type, e.g. kimi_k2), if it names a family other than Llama."""
    mt = cfg.get("model_type")
    return (
        mt if isinstance(mt, str) and mt in aux.family_model_types() and mt != aux.LLAMA else None
    )
