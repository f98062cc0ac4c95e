"""Are two drafters the same model? Tensors paired by canonical name across dialects, shapes,
presence against each side's inventory, and the normalized configs' architecture fields:
everything but the bytes (commands/compare.py adds those; convert --config-from asks this).

Verdicts:
  identical     same canonical tensors, shapes, dtypes and bytes (and no architecture difference)
  compatible    every canonical tensor pairs with an equal shape, no required tensor is missing on
                either side, and the architecture fields of the normalized configs agree: B's
                weights load into A's architecture and vice versa
  incompatible  anything else, with each reason
"""

from __future__ import annotations

from dataclasses import field
from typing import Callable, Literal

from weightcheck.errors import json_value
from weightcheck.model import config as config_mod
from weightcheck.model import held, inventory
from weightcheck.model.drafter import Drafter, Tensor
from weightcheck.record import record

# how byte identity was decided: equal Hub LFS hashes at the same place, the bytes read, or
# different dtypes (never equal)
Decided = Literal["lfs-sha256", "bytes", "dtype"]


# what a difference is about: a side that is a target model, the architectures, the drafter
# classes the configs build, a tensor on one side only, a tensor's shape or dtype, a config field,
# tensors stored fused on one side and separately on the other (the same parts: not identical),
# a side's config that contradicts its own weights (rule WC409: a config mistake, said first)
Kind = Literal[
    "target", "architecture", "declared", "only", "shape", "dtype", "config", "layout", "own"
]


@record(frozen=True)
class Difference:
    """One reason compare gives (incompatible) or one difference ``--strict`` fails on:
    ``kind``, ``subject`` (the tensor or config field, if one), the values in A and B, and
    ``text``, the sentence the report says (``--json``'s reasons are these sentences)."""

    kind: Kind
    subject: str | None
    a: object
    b: object
    text: str

    # the kinds a compare report also lists in a table of their own (only in one, shape
    # mismatch, dtype mismatch, config field): its text view counts them instead of saying each
    TABLED = ("only", "shape", "dtype", "config")

    @property
    def tabled(self) -> bool:
        return self.kind in self.TABLED

    def __str__(self) -> str:
        return self.text

    def to_json_value(self) -> str:
        return self.text

    @classmethod
    def json_schema(cls, defs: dict | None = None) -> dict:
        return {"type": "string"}


@record
class Pair:
    canonical: str | None  # None: a name no dialect explains, paired by the name itself
    a: Tensor | None
    b: Tensor | None
    bytes_equal: bool | None = None
    how: Decided | None = None
    values: dict | None = None

    @property
    def label(self) -> str:
        """The canonical name, or the raw name where no dialect explains it."""
        return self.canonical if self.canonical is not None else (self.a or self.b).name


@record
class Comparison:
    a: Drafter
    b: Drafter
    pairs: list[Pair] = field(default_factory=list)
    reasons: list[Difference] = field(default_factory=list)
    strict_failures: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config_differences: list[dict] = field(default_factory=list)


def presence(d: Drafter, canonical: str | None) -> str | None:
    if d.inventory is None or canonical is None:
        return None
    e = d.inventory.tensors.get(canonical)
    return e.presence if e else None


def _key(t: Tensor) -> tuple[bool, str]:
    """Tensors pair by canonical name; a name no dialect explains pairs by itself (sorted last)."""
    return (False, t.canonical) if t.canonical is not None else (True, t.name)


def pair_tensors(a: Drafter, b: Drafter) -> list[Pair]:
    """Pairs by canonical name, a fused tensor as its parts (Drafter.logical): q/k/v stored
    fused pair with q/k/v stored apart."""
    ma = {_key(t): t for t in a.logical()}
    mb = {_key(t): t for t in b.logical()}
    return [
        Pair(
            None if unexplained else name, ma.get((unexplained, name)), mb.get((unexplained, name))
        )
        for unexplained, name in sorted(set(ma) | set(mb))
    ]


# (field, a, b, value in A, value in B) -> a note when the two values mean the same to the engines
# (e.g. aux ids spelled in two conventions that capture the same target layers), else None. The
# engines layer supplies it (engines/aux.py same_aux_layers); the model layer knows no engine.
Equivalence = Callable[[str, Drafter, Drafter, object, object], "str | None"]


def same_value(va, vb) -> bool:
    """Two normalized config values are the same (numbers by value: 1 and 1.0 are one)."""
    if (
        isinstance(va, (int, float))
        and isinstance(vb, (int, float))
        and not isinstance(va, bool)
        and not isinstance(vb, bool)
    ):
        return float(va) == float(vb)
    return va == vb


def rope_scaling_meaning(v):
    """What a rope_scaling / rope_parameters value says about RoPE scaling, in one spelling: None
    for no scaling (null, absent, ``{}``, ``{"rope_type": "default"}``, ``{"type": "default"}``),
    else the object without rope_theta (transformers 5's rope_parameters carries the base; the
    rope_theta field compares it) and with ``type`` spelled ``rope_type``. A value that is no
    object is returned as it is."""
    if not isinstance(v, dict):
        return v
    m = {k: x for k, x in v.items() if k != "rope_theta"}
    if "type" in m and ("rope_type" not in m or m["rope_type"] == m["type"]):
        m["rope_type"] = m.pop("type")
    return None if m in ({}, {"rope_type": "default"}) else m


def same_field(name: str, va, vb) -> bool:
    """Two normalized values of config field ``name`` mean the same (RoPE scaling by meaning:
    rope_scaling_meaning; anything else by same_value). compare and the training gate (WC904)
    both ask this."""
    if name == "rope_scaling":
        return same_value(rope_scaling_meaning(va), rope_scaling_meaning(vb))
    return same_value(va, vb)


def architecture_differences(a_values: dict, b_values: dict) -> list[tuple[str, object, object]]:
    """The architecture fields (mappings/config.toml category) two normalized configs disagree
    on: what makes ``compare`` say incompatible and the training gate refuse (WC905)."""
    return [
        (s.name, a_values.get(s.name), b_values.get(s.name))
        for s in config_mod.field_specs()
        if s.category == "architecture"
        and not same_field(s.name, a_values.get(s.name), b_values.get(s.name))
    ]


def config_differences(
    a: Drafter, b: Drafter, solved: tuple, equivalent: Equivalence | None = None
) -> list[dict]:
    """The config fields A and B differ on; ``solved``: each side's :func:`held.of_drafter`."""
    out = []
    fields = [s.name for s in config_mod.field_specs()] + ["dtype_key"]
    weights = {k: held.weights_say(d, sol).values for k, d, sol in zip("ab", (a, b), solved)}
    for f in fields:
        va, vb = a.normalized.values.get(f), b.normalized.values.get(f)
        if not same_field(f, va, vb):
            note = equivalent(f, a, b, va, vb) if equivalent else None
            # the value a side's weights hold where its config contradicts them (WC409)
            own = {
                f"{k}_weights": weights[k].get(f)
                for k, v in (("a", va), ("b", vb))
                if not same_field(f, weights[k].get(f), v)
            }
            out.append(
                {
                    "field": f,
                    # the same meaning in another spelling is no difference to serving
                    "category": "informational" if note else config_mod.category_of(f),
                    "a": va,
                    "b": vb,
                    "a_from": a.normalized.provenance.get(f),
                    "b_from": b.normalized.provenance.get(f),
                    **({"note": note} if note else {}),
                    **own,
                }
            )
    return out


def _own_weights_say(
    label: str, d: Drafter, sol: held.Solution, other: Drafter, fields: list[str]
) -> str | None:
    """When a side's config contradicts its own weights (``sol``: model/held.py, rule WC409):
    which fields, what the weights hold, and which of the differing ``fields`` agree once it is
    corrected (a config mistake, not another model)."""
    if not sol.fields:
        return None
    fixed = held.weights_say(d, sol).values
    agree = [f for f in fields if same_field(f, fixed.get(f), other.normalized.values.get(f))]
    wrong = ", ".join(f"{h.field} is {json_value(h.said)}, they hold {h.value}" for h in sol.fields)
    tail = f"; corrected, it agrees on {', '.join(agree)}" if agree else ""
    return f"{label}'s config contradicts its own weights ({wrong}: `weightcheck check {label}`, WC409){tail}"


def declared_architecture(d: Drafter) -> str | None:
    """The drafter architecture a drafter's config names (architectures[0]), if it names one."""
    named = inventory.named_by(d.config or {})
    return named.name if named is not None else None


def judge(a: Drafter, b: Drafter, equivalent: Equivalence | None = None) -> Comparison:
    """Pair the tensors and judge shapes, presence and configs: everything but the bytes.
    ``equivalent`` says when two config values differ in spelling only (see Equivalence)."""
    c = Comparison(a, b, pairs=pair_tensors(a, b))
    _judge_models(c)
    for p in c.pairs:
        _judge_pair(c, p)
    _judge_layout(c)
    if a.source.config is None or b.source.config is None:
        diffs = []
        c.notes.append(
            "config not compared: "
            + " and ".join(
                f"{label} has no config.json"
                for label, d in (("A", a), ("B", b))
                if d.source.config is None
            )
        )
    else:
        # what each side's weights say of its config (model/held.py), solved once for both uses
        solved = (held.of_drafter(a), held.of_drafter(b))
        diffs = config_differences(a, b, solved, equivalent)
    arch = [d for d in diffs if d["category"] == "architecture"]
    sides = (("A", a, solved[0], b), ("B", b, solved[1], a)) if arch else ()
    for label, d, sol, other in sides:
        said = _own_weights_say(label, d, sol, other, [x["field"] for x in arch])
        if said:
            c.reasons.append(Difference("own", None, None, None, said))
    for dif in diffs:
        f, va, vb = dif["field"], dif["a"], dif["b"]
        if dif["category"] == "architecture":
            said = f"config {f}: {json_value(va)} in A, {json_value(vb)} in B"
            c.reasons.append(Difference("config", f, va, vb, said))
        elif dif["category"] == "serving":
            said = f"config {f} (serving): {json_value(va)} in A, {json_value(vb)} in B"
            c.strict_failures.append(Difference("config", f, va, vb, said))
    c.config_differences = diffs
    return c


def _judge_models(c: Comparison) -> None:
    """A side that is a target model; the architectures, or the classes the configs build."""
    a, b = c.a, c.b
    for label, d in (("A", a), ("B", b)):
        if d.looks_like_target:
            c.reasons.append(Difference("target", label, None, None, d.target_said(label)))
        if d.architecture is None:
            c.notes.append(f"{label}: {d.architecture_evidence}")
    if a.architecture and b.architecture and a.architecture.name != b.architecture.name:
        na, nb = a.architecture.name, b.architecture.name
        said = f"architectures differ: A is {na}, B is {nb}"
        c.reasons.append(Difference("architecture", None, na, nb, said))
    else:
        # what each config builds (its architectures[0]), as the training gate reads a training
        # config: a config that names another drafter class than the other's is another model,
        # whatever its weights look like (rules/training.py uses the same two facts)
        da, db = declared_architecture(a), declared_architecture(b)
        if da is not None and db is not None and da != db:
            said = f"the configs build different architectures: A's {da}, B's {db}"
            c.reasons.append(Difference("declared", None, da, db, said))


def _judge_pair(c: Comparison, p: Pair) -> None:
    """A tensor on one side only (a reason when a config requires it), or its shape or dtype."""
    a, b = c.a, c.b
    if p.a is None or p.b is None:
        have, lack, lack_label = (p.a, b, "B") if p.b is None else (p.b, a, "A")
        has_label = "A" if lack_label == "B" else "B"
        theirs = presence(lack, p.canonical)  # the lacking side's own config
        how = theirs or presence(a if lack is b else b, p.canonical)
        va, vb = (have.name, None) if p.b is None else (None, have.name)
        if p.canonical is None:
            said = f"{have.name} (a name no dialect explains) only in {has_label}"
        elif theirs == "required":
            said = f"{p.canonical} missing in {lack_label} (its config requires it)"
        elif how == "required":  # only the side that has it requires it (another layer count)
            said = (
                f"{p.canonical} only in {has_label} ({has_label}'s config requires it, "
                f"{lack_label}'s has no such tensor)"
            )
        else:
            said = f"{p.canonical} ({how or 'not expected'}) only in {has_label}"
            c.strict_failures.append(Difference("only", p.label, va, vb, said))
            return
        c.reasons.append(Difference("only", p.label, va, vb, said))
        return
    if tuple(p.a.shape) != tuple(p.b.shape):
        sa, sb = list(p.a.shape), list(p.b.shape)
        said = f"{p.canonical}: shape {sa} in A, {sb} in B"
        c.reasons.append(Difference("shape", p.label, sa, sb, said))
    elif p.a.dtype != p.b.dtype:
        said = f"{p.canonical}: dtype {p.a.dtype} in A, {p.b.dtype} in B"
        c.strict_failures.append(Difference("dtype", p.label, p.a.dtype, p.b.dtype, said))


def _judge_layout(c: Comparison) -> None:
    """A fused tensor on one side whose parts the other stores apart (or fused under another
    name): the same parameters, compared part by part; the files differ, so not identical."""
    seen: dict[tuple, list[tuple[int, str]]] = {}  # (fused in A, in B) -> (byte offset, part)
    for p in c.pairs:
        if p.a is None or p.b is None:
            continue
        fa = p.a.name if p.a.window is not None else None
        fb = p.b.name if p.b.window is not None else None
        if fa != fb and (fa or fb):
            at = (p.a.window if fa else p.b.window)[0]
            seen.setdefault((fa, fb), []).append((at, p.canonical))
    for (fa, fb), parts in seen.items():
        short = "+".join(x.rsplit(".", 2)[-2].removesuffix("_proj") for _, x in sorted(parts))
        said = (
            f"layout: {short} fused in "
            + " and ".join(f"{s} ({n})" for s, n in (("A", fa), ("B", fb)) if n)
            + (", apart in " + ("B" if fa else "A") if not (fa and fb) else "")
            + "; compared part by part"
        )
        c.strict_failures.append(Difference("layout", fa or fb, fa, fb, said))


def verdict(c: Comparison) -> str:
    if c.reasons:
        return "incompatible"
    sides_match = all(p.a is not None and p.b is not None for p in c.pairs)
    if any(d.kind == "layout" for d in c.strict_failures):
        return "compatible"  # the same parameters, not the same files
    if (
        sides_match
        and all(p.bytes_equal is True for p in c.pairs)
        and all(p.a.dtype == p.b.dtype for p in c.pairs)
    ):
        return "identical"
    return "compatible"
