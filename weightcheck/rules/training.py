"""WC9xx: the pre-training gate (--training-config)."""

from __future__ import annotations

import re

from weightcheck.engines import aux
from weightcheck.errors import json_value
from weightcheck.model import config as config_mod
from weightcheck.model import held, inventory
from weightcheck.model.compatibility import (
    architecture_differences,
    declared_architecture,
    same_field,
)
from weightcheck.model.drafter import Drafter
from weightcheck.rules.base import CONDITIONAL, UNTRAINED, TrainingGate, rule


@rule("WC901", needs="training")
def training_shapes(ctx, finding):
    r = loads_all_the_same(ctx.training)
    for c, mine, want in ctx.training.mismatch:
        if r is not None:  # the trainer builds another shape, or not that tensor: it loads SRC
            yield finding(
                f"{c}: {list(mine)} here, the training config builds {list(want)}; "
                f"{r.pretty} loads SRC all the same",
                c,
                consequence=CONDITIONAL,
                detail=f"{trains(r)}: right only if that is the model you mean to fine-tune; "
                "`weightcheck compare SRC REF` lists the architecture fields that differ",
            )
            continue
        yield finding(
            f"{c}: {list(mine)} here, the training config builds {list(want)}; train SRC's shape",
            c,
            detail="the trainer fails at load on it, or re-initializes it; `weightcheck compare "
            "SRC REF` lists the architecture fields that differ",
        )


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
            yield finding(f"{c}: not in SRC; the trainer supplies it", c, detail=said)
        else:
            yield finding(
                f"{c}: not in SRC; training initializes it from scratch",
                c,
                detail="nothing SRC holds is lost; ship the tensor in SRC if it was trained",
            )


@rule("WC903", needs="training")
def training_ignored(ctx, finding):
    for c in ctx.training.ignored:
        yield finding(
            f"{c}: in SRC, not built by the training config; set its flag as SRC was trained",
            c,
            detail="training ignores it: the fine-tune drops it unless the training config's "
            "flags (fc_norm, norm_before_fc, bias) build it",
        )
    r = loads_all_the_same(ctx.training)
    if r is None:  # no trainer replayed, or it raises (WC908 says why)
        return
    by_name = {t.name: t for t in ctx.drafter.tensors}
    for name, parts in r.unsplit().items():
        if any(r.params.get(p) != "init" for p in parts):
            continue
        t = by_name.get(name)
        c = t.canonical if t is not None and t.canonical else name
        command, said = as_run(r.fix_command)
        yield finding(
            f"{c}: {r.pretty} never splits it: its parts start from scratch; convert SRC first",
            c,
            consequence=UNTRAINED,
            fix=command,
            detail=f"{r.pretty} loads SRC by name and splits no fused tensor ({r.cite_fused}): "
            f"{name} is not in its model and is dropped, and {', '.join(parts)} stay at their "
            f"initial values, SRC's trained rows unused; {said} writes them split, under its "
            "names",
        )


def as_run(command: str | None) -> tuple[str | None, str]:
    """A trainer's convert command as it runs (convert converts aux ids between conventions for
    the target family: --target TARGET added), and the same in backticks for a detail."""
    if not command:
        return None, ""
    if "--target" not in command:
        command += " --target TARGET"
    return command, f"`{command}`"


@rule("WC904", needs="training")
def training_config(ctx, finding):
    for fld, mine, theirs in ctx.training.fields:
        yield finding(
            f"config {fld} differs from the training config; copy SRC's value unless that is "
            "the point",
            fld,
            detail=f"{json_value(mine)} in SRC, {json_value(theirs)} in the training config: "
            "the fine-tune would be trained on other layers or positions than SRC was",
        )


@rule("WC905", needs="training")
def training_architecture(ctx, finding):
    g = ctx.training
    # the trainer the config belongs to loads SRC all the same (its replay does not raise): the
    # fine-tune is right only if the architecture it trains is the one meant (a warning naming
    # it); --allow-partial-init: the partial warm start is what the user asked for
    r = loads_all_the_same(g)
    kind = CONDITIONAL if g.allow_partial_init or r is not None else None
    share = f"SRC initializes {_share(g)} of it"
    ask = "" if g.allow_partial_init else " (--allow-partial-init if you mean it)"
    then = f"; {trains(r)}: right only if that is the model you mean to fine-tune" if r else ""
    if g.architectures is not None:
        src, want = g.architectures
        yield finding(
            "SRC is another architecture than the training config builds; "
            + (f"{r.pretty} loads it all the same" if r else f"train SRC's{ask}"),
            "architectures",
            consequence=kind,
            detail=f"SRC is a {src or 'drafter of no known architecture'}, the training config "
            f"builds a {want}: {share}; from scratch: {_scratch(g)}{then}",
        )
    for fld, mine, theirs in g.arch_fields:
        bad = ctx.normalized.unknown_because.get(fld)
        said = (
            f"unusable in SRC (WC212: {bad} is mistyped)" if bad else f"{json_value(mine)} in SRC"
        )
        if not bad and ctx.normalized.get(fld) != mine:  # WC409: SRC's config says otherwise
            said += f"'s weights (its config says {json_value(ctx.normalized.get(fld))}: WC409)"
        yield finding(
            f"config {fld}: another architecture than SRC's; "
            + (f"{r.pretty} {_what(r)}" if r else f"train SRC's{ask}"),
            fld,
            consequence=kind,
            detail=f"{said}, {json_value(theirs)} in the training config: compare says "
            f"incompatible{then}",
        )


def loads_all_the_same(g: TrainingGate):
    """The trainer's replay when the trainer the training config belongs to starts training from
    SRC (it raises on nothing): an architecture the training config describes otherwise is then
    no failed start but a question of which model is fine-tuned (WC905, WC901 warnings). None when
    no trainer is replayed, or it raises."""
    r = g.replay
    return r if r is not None and not r.raises else None


def _what(r) -> str:
    return (
        "trains SRC's own, not this config's"
        if r.built_from == "src"
        else "trains this config's, loaded from SRC"
    )


def trains(r) -> str:
    """Which architecture the trainer fine-tunes, and why (its cited line)."""
    cite = f" ({r.cite_built_from})" if r.cite_built_from else ""
    if r.built_from == "src":
        what = (
            f"{r.pretty} builds its model from SRC's own config.json and never reads the "
            f"training config{cite}: the fine-tune is SRC's architecture"
        )
    else:
        what = (
            f"{r.pretty} builds its model from the training config and never reads SRC's "
            f"config.json{cite}, loading SRC's tensors by name: the fine-tune is the training "
            "config's architecture"
        )
    unused = [n for n in r.unexpected if n not in ("d2t", "t2d")]
    if unused:
        more = f" and {len(unused) - 3} more" if len(unused) > 3 else ""
        what += f"; SRC's {', '.join(unused[:3])}{more} are not in its model (not used)"
    return what


@rule("WC906", needs="training")
def training_init(ctx, finding):
    g = ctx.training
    if g.replay is not None and g.replay.raises:  # WC908 says what happens instead
        return
    if not g.from_scratch:  # all of it: the report's training section says so
        return
    yield finding(
        f"SRC initializes {_share(g)} of the training architecture",
        "training",
        detail=f"from scratch: {_scratch(g)}",
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
        "no vocabulary map given; pass --training-vocab to check the map the run will use",
        "d2t",
        detail=f"{how}: a map other than SRC's reads SRC's head rows as other tokens (WC311)",
    )


@rule("WC908", needs="training")
def trainer_raises(ctx, finding):
    r = ctx.training.replay
    if r is None or not r.raises:
        return
    if r.kind == "mismatch" and _all_said(ctx.training, r):
        return  # WC901 says these shapes already (an error too)
    found = _COMMAND.search(r.fix or "")
    command = as_run(found.group(0) if found else None)[0]
    # the detail shows the same command
    fix = re.sub(f"`?{re.escape(found.group(0))}`?", f"`{command}`", r.fix, 1) if found else r.fix
    yield finding(
        f"{r.pretty} raises at init"
        + (
            "; convert SRC first (the detail has the command)"
            if command
            else ("; the detail says what to do" if r.fix else "")
        ),
        "trainer",
        fix=command,
        detail=f"{r.raises} ({r.cite})" + (f"; {fix}" if fix else ""),
    )


# the command a trainer replay's fix names ("weightcheck convert SRC OUT --to sglang first: ...")
_COMMAND = re.compile(r"weightcheck convert SRC OUT(?: --?[\w-]+(?: [A-Z]+|=\S+| \w+)?)*")


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
    layers = arch.layers_held(mine := d.by_canonical())
    inv = inventory.expected(
        arch, norm.symbols(), L if isinstance(L, int) and 1 <= L <= inventory.MAX_LAYERS else layers
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
        # SRC's architecture is its weights': a config field they contradict (WC409) is
        # weighed as they hold it
        arch_fields=architecture_differences(held.weights_say(d).values, norm.values),
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
