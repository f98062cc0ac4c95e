"""What the weights say of the config: a size field every contradicting tensor agrees on.

A tensor whose shape is not the one its config implies (rule WC206) is one of two mistakes: the
config's value is wrong (``hidden_size`` copied from another model: every tensor it sizes
contradicts it, and all of them agree on one other value), or the tensor is (an export that wrote
four extra rows into one projection: no config value gives its shape beside the others').
:func:`solve` tells them apart as a reader would: a config value is what the weights hold when
writing that value into the config makes tensors that contradicted it agree and no tensor that
agreed contradict it. Fields are tried greedily, the one that settles the most tensors first, so
two wrong values are found one after the other; what no value settles is a wrong tensor.

The shapes come from the architecture's data (mappings/architectures/*.toml) and the config's
defaults from mappings/config.toml, so a field read through a default (``head_dim`` from
``hidden_size // num_attention_heads``, ``target_hidden_size`` from ``hidden_size``) counts for
every tensor it sizes. Header-level: no tensor data is read.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import field
from fractions import Fraction

from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.record import record

# tensors whose shape another rule judges (the head's rows: WC301; the vocabulary maps: WC304, WC308)
NOT_SHAPES = frozenset({"d2t", "t2d"})
HEAD = "lm_head.weight"
# fields never tried: the layer count is weighed against the names (WC406)
NOT_TRIED = frozenset({"num_hidden_layers"})
# fields tried but never named here: the aux count must agree with the aux layer ids (WC402 reads
# fc's width as a count of aux layers, WC403 weighs the ids); what it settles is a fit
NOT_SOLVED = frozenset({"num_aux_hidden_states"})
# the MLA dimensions rule WC408 reads from the weights itself (rules/geometry.py mla_dims_held)
MLA_DIMS = frozenset(
    {"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"}
)


@record(frozen=True)
class Held:
    """A config field the weights contradict, and the value they hold."""

    field: str
    said: object  # the config's value (or its default's; None when unknown)
    where: str  # its provenance: a path, "default" or "absent"
    value: int  # what the weights hold
    path: str  # where in config.json to write it
    tensors: tuple[str, ...]  # canonical names whose shape the value settles

    def was(self) -> str:
        """How the config has it: ``is 96``, ``is absent (the engines take 48)``."""
        if self.where == "default":
            return f"is absent (the engines take {self.said})"
        return "is absent" if self.said is None else f"is {self.said}"


@record(frozen=True)
class Solution:
    fields: tuple[Held, ...] = ()
    wrong: tuple[str, ...] = ()  # canonical names no config value settles: the tensor is wrong
    # canonical -> the (field, value)s that would each settle it, when the shapes cannot tell
    # which (fc's width is target_hidden_size x the aux count) or another rule weighs the field
    fits: dict = field(default_factory=dict)
    # of those, the tensors only one field would settle but no other tensor confirms: the config
    # or the tensor may be wrong
    unsure: frozenset = frozenset()
    config: dict | None = None  # the config with every field set to the value the weights hold

    def settles(self, canonical: str) -> Held | None:
        return next((h for h in self.fields if canonical in h.tensors), None)


def mismatches(inv: inventory.Inventory, got: dict[str, tuple]) -> dict[str, tuple]:
    """canonical -> the shape its config implies, for each tensor of ``got`` (canonical ->
    shape) whose shape is another: the one comparison rule WC206 reports. A fused tensor left
    whole is weighed against its parts' shapes concatenated."""
    out = {}
    for c, shape in got.items():
        if c in inv.fused:
            want = inv.fused[c].shape
        else:
            e = inv.tensors.get(c)
            want = e.shape if e is not None else None
        if want is None or c in NOT_SHAPES:
            continue
        if c == HEAD and tuple(shape[1:]) == tuple(want[1:]):
            continue  # rows are the vocabulary's business (WC301)
        if tuple(shape) != tuple(want):
            out[c] = tuple(want)
    return out


def of_drafter(d) -> Solution:
    """:func:`solve` for a drafter (weightcheck/model/drafter.py), over the tensors a
    transposition (WC213) or a swap of names (WC211) has not explained: their shapes are not
    sizes."""
    inv = d.inventory
    if inv is None or d.source.config is None or d.normalized.mistyped:
        return Solution()
    skip = set(transposed(d)) | {n for pair in swapped_pairs(d) for n in pair}
    got = {c: tuple(t.shape) for c, t in d.by_canonical().items() if c not in skip}
    mla = MLA_DIMS if inv.architecture.attention == "mla" else frozenset()
    layers = inv.architecture.layers_held(d.covered())
    return solve(d.config, d.normalized, inv.architecture, layers, got, mla)


def weights_say(d, sol: Solution | None = None) -> config_mod.NormalizedConfig:
    """``d``'s normalized config with every field its weights contradict set as they hold it
    (``sol``, :func:`of_drafter`'s when not given): the architecture of its weights.
    ``d.normalized`` when none is."""
    sol = of_drafter(d) if sol is None else sol
    return config_mod.normalize(sol.config) if sol.fields else d.normalized


def transposed(d) -> list[str]:
    """Canonical 2-D tensors stored transposed: their shape is the reverse of the shape the
    config implies (and that shape is not square)."""
    inv = d.inventory
    if inv is None or d.source.config is None:
        return []
    return [
        c
        for c, t in d.by_canonical().items()
        if c in inv.tensors and inventory.transposed(t.shape, inv.tensors[c].shape)
    ]


def swapped_pairs(d) -> list[tuple[str, str]]:
    """Pairs of canonical tensors that hold each other's expected shapes (and not their own):
    names swapped in an export (MLA's kv_a_proj_with_mqa / kv_b_proj, q_a_proj / q_b_proj)."""
    inv = d.inventory
    if inv is None or d.source.config is None:
        return []
    got = {c: tuple(t.shape) for c, t in d.by_canonical().items()}
    want = {c: e.shape for c, e in inv.tensors.items() if e.shape is not None and c in got}
    wrong = sorted(c for c in want if got[c] != want[c])
    pairs = []
    for i, a in enumerate(wrong):
        for b in wrong[i + 1 :]:
            if got[a] == want[b] and got[b] == want[a]:
                pairs.append((a, b))
    return pairs


def solve(
    raw: dict,
    norm: config_mod.NormalizedConfig,
    arch: inventory.Architecture,
    layers: int,
    got: dict[str, tuple],
    skip: frozenset[str] = frozenset(),
) -> Solution:
    """The fields ``got`` (canonical -> shape, the tensors other rules have not explained: a
    transposed or swapped tensor is not a size) contradicts, each with the value it holds, and the
    tensors no value settles. ``skip``: fields another rule infers (MLA dims: WC408)."""
    off = _dims(mismatches(inventory.expected(arch, norm.symbols(), layers), got), got)
    fields: list[Held] = []
    fits: dict[str, list] = {}
    parked: set = set()  # dimensions a value would settle, but not one the shapes can name
    unsure: set = set()  # tensors one config value would fit, with no other tensor to confirm it
    while off:
        tried = _tried(raw, norm, arch, layers, got, off, parked, skip | {h.field for h in fields})
        if not tried:
            break
        n, name, value, raw2, norm2, off2 = tried[0]
        same = [(t[1], t[2]) for t in tried if t[0] == n and t[5] == off2]
        settled = tuple(sorted({c for c, _ in off - off2}))
        # the shapes cannot say which field, the field is another rule's, its value is no size
        # at all (0 or below: WC214 names it), or one tensor alone says so (a tensor exported
        # wrong looks the same): a config value fits, none is named here
        sized = norm.values[name] > 0
        lone = len(settled) == 1 and sized
        if len({f for f, _ in same}) > 1 or name in NOT_SOLVED or not sized or lone:
            for c in settled:
                fits.setdefault(c, []).extend(same)
            unsure |= set(settled) if lone else set()
            parked |= off - off2
            off = off2
            continue
        path = _path_for(name, norm)
        fields.append(
            Held(
                name,
                norm.values.get(name),
                norm.provenance.get(name, "absent"),
                value,
                path,
                settled,
            )
        )
        raw, norm, off = raw2, norm2, off2
    fits = {c: tuple(v) for c, v in fits.items()}
    return Solution(tuple(fields), tuple(sorted({c for c, _ in off})), fits, frozenset(unsure), raw)


def _dims(wrong: dict[str, tuple], got: dict[str, tuple]) -> set[tuple[str, int]]:
    """(tensor, axis) of each contradicted dimension; axis -1 for another number of axes."""
    out = set()
    for c, want in wrong.items():
        have = got[c]
        if len(have) != len(want):
            out.add((c, -1))
        else:
            out |= {(c, k) for k, (a, e) in enumerate(zip(have, want)) if a != e}
    return out


def _tried(raw, norm, arch, layers, got, off, parked, skip) -> list:
    """Each field set to each candidate value that settles some contradicted dimensions and
    unsettles none, as (settled count, field, value, raw', norm', dimensions still off), the most
    settled first (then the field's order in mappings/config.toml)."""
    wrong = mismatches(inventory.expected(arch, norm.symbols(), layers), got)
    tried = []
    for name, value in _candidates(norm, wrong, got, skip):
        raw2 = _with_value(raw, _path_for(name, norm), value)
        norm2 = config_mod.normalize(raw2)
        off2 = _dims(mismatches(inventory.expected(arch, norm2.symbols(), layers), got), got)
        off2 -= parked
        if off2 < off:  # settles some, unsettles none
            tried.append((len(off) - len(off2), name, value, raw2, norm2, off2))
    order = [s.name for s in config_mod.field_specs()]
    tried.sort(key=lambda t: (-t[0], order.index(t[1]), t[2]))
    return tried


def _candidates(norm, wrong, got, skip):
    """(field, value) pairs worth trying: for each contradicted dimension and each integer size
    field, the value that scales the field as the dimension is scaled (shapes are products of
    sizes), the one that scales it inversely (a default that divides by it: ``head_dim`` is
    ``hidden_size // num_attention_heads``), and the dimension itself."""
    sizes = [
        s.name
        for s in config_mod.field_specs()
        if s.symbol
        and s.type == "int"
        and s.name not in NOT_TRIED
        and s.name not in skip
        and s.name not in norm.unknown_because
        and type(norm.values.get(s.name)) is int
    ]
    seen = set()
    for c, want in wrong.items():
        have = got[c]
        if len(have) != len(want):
            continue
        for a, e in zip(have, want):
            if a == e:
                continue
            for name in sizes:
                f0 = norm.values[name]
                values = [Fraction(a)]
                if f0 > 0 and e > 0:  # a size that scales the dimension, or divides it
                    values[:0] = [Fraction(f0) * a / e, Fraction(f0) * e / a]
                for value in values:
                    if value.denominator == 1 and value > 0 and value != f0:
                        key = (name, int(value))
                        if key not in seen:
                            seen.add(key)
                            yield key


def _path_for(name: str, norm: config_mod.NormalizedConfig) -> str:
    """Where config.json keeps ``name``: the path it was read from, else the path of its spec
    inside the object the config keeps its other fields in (``transformer_layer_config`` for
    speculators, top level for SpecForge)."""
    spec = next(s for s in config_mod.field_specs() if s.name == name)
    where = norm.provenance.get(name, "")
    if where in spec.paths:
        return where
    homes = Counter(
        p.rpartition(".")[0]
        for s in config_mod.field_specs()
        if s.symbol and (p := norm.provenance.get(s.name, "")) in s.paths
    )
    for home, _ in homes.most_common():
        for p in spec.paths:
            if p.rpartition(".")[0] == home:
                return p
    return spec.paths[0]


def _with_value(raw: dict, path: str, value) -> dict:
    out = copy.deepcopy(raw)
    node = out
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out
