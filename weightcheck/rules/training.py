"""WC9xx: the pre-training gate (--training-config)."""

from __future__ import annotations

from weightcheck.engines import aux
from weightcheck.errors import json_value
from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.model.drafter import Drafter
from weightcheck.rules.base import TrainingGate, rule


@rule(
    "WC901",
    "training-shape",
    "error",
    "SRC cannot initialize the training architecture: a tensor's shape differs.",
    needs="training",
)
def training_shapes(ctx):
    for c, mine, want in ctx.training.mismatch:
        yield ctx.f("WC901", f"{c}: {list(mine)} here, the training config builds {list(want)}", c)


@rule(
    "WC902",
    "training-reinit",
    "info",
    "Tensors the training architecture has and SRC lacks: training starts them from scratch.",
    needs="training",
)
def training_reinit(ctx):
    for c in ctx.training.reinit:
        if c == "embed_tokens.weight":
            yield ctx.f(
                "WC902",
                f"{c}: not in SRC; SpecForge takes the target's embedding (and "
                "freezes it), others initialize it",
                c,
            )
        else:
            yield ctx.f("WC902", f"{c}: not in SRC; training would initialize it from scratch", c)


@rule(
    "WC903",
    "training-ignored",
    "warning",
    "Tensors SRC has and the training architecture lacks: training would ignore them.",
    needs="training",
)
def training_ignored(ctx):
    for c in ctx.training.ignored:
        yield ctx.f(
            "WC903", f"{c}: in SRC but not in the training architecture; it would be ignored", c
        )


@rule(
    "WC904",
    "training-config-differs",
    "warning",
    "A serving-relevant config field differs between SRC and the training config.",
    needs="training",
)
def training_config(ctx):
    for fld, mine, theirs in ctx.training.fields:
        yield ctx.f(
            "WC904",
            f"config {fld}: {json_value(mine)} in SRC, {json_value(theirs)} in the training config",
            fld,
        )


def training_gate(d: Drafter, training_cfg: dict) -> TrainingGate:
    """The WC9xx rules' input: can SRC initialize exactly that architecture?"""
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
    for name, e in inv.tensors.items():
        t = mine.get(name)
        if t is None:
            if e.presence == "required" or name == "embed_tokens.weight":
                reinit.append(name)
        elif e.shape is not None and tuple(t.shape) != tuple(e.shape):
            mism.append((name, t.shape, e.shape))
    for name in mine:
        if name not in inv.tensors:
            ignored.append(name)
    fields = []
    for spec in config_mod.field_specs():
        if spec.category != "serving":
            continue
        a, b = d.normalized.get(spec.name), norm.get(spec.name)
        if a == b:
            continue
        if spec.name == "aux_layer_ids":  # by meaning: the target layers each captures
            fam = aux.target_family(d)[0] or _family_of(training_cfg)
            conv_b = aux.config_convention(training_cfg)
            if aux.same_layers(a, aux.convention_of(d), b, conv_b, fam) is not None:
                continue
        fields.append((spec.name, a, b))
    return TrainingGate(training_cfg, mism, reinit, ignored, fields)


def _family_of(cfg: dict) -> str | None:
    """A training config's own word on the target family (SpecForge copies the target's
    model_type, e.g. kimi_k2), if it names a family other than Llama."""
    mt = cfg.get("model_type")
    return (
        mt if isinstance(mt, str) and mt in aux.family_model_types() and mt != aux.LLAMA else None
    )
