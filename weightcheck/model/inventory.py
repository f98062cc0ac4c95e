"""Architectures as data: the tensors a config implies (mappings/architectures/*.toml).

``expected(arch, normalized_config)`` expands an architecture's tensor templates against a normalized
config into :class:`Expected` entries — canonical name, shape, dtype, presence — or reports which
config value it could not evaluate (``shape=None`` and ``problem`` set).
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck import expr, mappings, schema
from weightcheck.model import config as config_mod
from weightcheck.record import record
from weightcheck.schema import FusedTemplate, TensorTemplate
from weightcheck.storage.header import CONFIG_DTYPES

# most copies a for_each template expands to (n_aux is 3 in practice; SGLang reads at most a few)
MAX_FOR_EACH = 64
# most decoder layers a drafter's names are read as (drafters have one to a few)
MAX_LAYERS = 64


@record(frozen=True)
class Layers:
    """[layers]: the decoder layers. Templates named under ``first`` (``midlayer.``) are layer 0's;
    layer i >= 1 repeats them under ``other`` with ``{layer}`` = i, with ``layer`` in their shape
    and ``when`` expressions."""

    first: str
    other: str

    def name(self, layer0_name: str, layer: int) -> str:
        if layer == 0:
            return layer0_name
        return self.other.format(layer=layer) + layer0_name[len(self.first) :]

    def split(self, canonical: str) -> tuple[int, str] | None:
        """(layer, layer 0's canonical name) of a decoder-layer name; None for any other name."""
        if canonical.startswith(self.first):
            return 0, canonical
        head, _, tail = self.other.partition("{layer}")
        if canonical.startswith(head):
            idx, dot, rest = canonical[len(head) :].partition(tail or ".")
            if dot and idx.isdigit() and str(int(idx)) == idx and 0 < int(idx) < MAX_LAYERS:
                return int(idx), self.first + rest
        return None


@record(frozen=True)
class Architecture:
    name: str
    description: str
    config_architectures: tuple[str, ...]
    signature: tuple[str, ...]
    tensors: tuple[TensorTemplate, ...]
    attention: Literal["gqa", "mla"] = "gqa"
    default: bool = False
    layers: Layers | None = None
    fused: tuple[FusedTemplate, ...] = ()

    def canonical_names(self, max_aux: int = 8, max_layers: int = MAX_LAYERS) -> set[str]:
        """Every canonical name this architecture can have (for_each expanded up to max_aux,
        decoder layers up to max_layers), its fused spellings ([[fused]]) included."""
        out = set(self.fused_names(max_layers))
        for t in self.tensors:
            if t.for_each:
                out.update(t.name.format(i=i) for i in range(max_aux))
            elif self.layers is not None and t.name.startswith(self.layers.first):
                out.update(self.layers.name(t.name, i) for i in range(max_layers))
            else:
                out.add(t.name)
        return out

    def shape_fields(self) -> frozenset[str]:
        """The normalized config fields its tensor shapes read (mappings/config.toml symbols or
        names): the dimensions a drafter of this architecture has — head_dim and
        num_key_value_heads for a Llama drafter, the MLA ranks and head dims for an MLA one."""

        by_symbol = {s.symbol: s.name for s in config_mod.field_specs() if s.symbol}
        read = {n for t in self.tensors for s in t.shape for n in expr.names(s)}
        return frozenset(by_symbol.get(n, n) for n in read)

    def layer_of(self, canonical: str) -> int | None:
        """The decoder layer a canonical name belongs to (None: not a decoder-layer tensor)."""
        got = self.layers.split(canonical) if self.layers is not None else None
        return got[0] if got is not None else None

    def layers_held(self, canonical_names) -> int:
        """How many decoder layers names reach: one more than the highest layer index, at least
        one (a drafter without layer tensors is still expected to have layer 0)."""
        idx = [self.layer_of(c) for c in canonical_names if c]
        return 1 + max((i for i in idx if i is not None), default=0)

    def fused_names(self, max_layers: int) -> set[str]:
        """Every fused name ([[fused]]): a decoder layer's in each of ``max_layers`` layers."""
        out = set()
        for f in self.fused:
            out.add(f.name)
            if self.layers is not None and f.name.startswith(self.layers.first):
                out.update(self.layers.name(f.name, i) for i in range(max_layers))
        return out

    def with_parts(self, canonical) -> set[str]:
        """``canonical`` and the parts of every fused name in it (:meth:`fused_of`)."""
        out = set(canonical)
        for c in canonical:
            got = self.fused_of(c)
            out.update(got[1] if got else ())
        return out

    def fused_of(self, canonical: str) -> tuple[FusedTemplate, tuple[str, ...]] | None:
        """The [[fused]] entry a fused name is, with the canonical parts it stands for in their
        order along dim 0 (in its own decoder layer); None for any other name."""
        got = self.layers.split(canonical) if self.layers is not None else None
        layer, base = got if got is not None else (0, canonical)
        for f in self.fused:
            if f.name == base:
                return f, tuple(self.layers.name(p, layer) if got else p for p in f.parts)
        return None

    def template_for(self, canonical: str) -> TensorTemplate | None:
        got = self.layers.split(canonical) if self.layers is not None else None
        if got is not None:
            canonical = got[1]
        for t in self.tensors:
            if t.for_each:
                prefix, _, suffix = t.name.partition("{i}")
                if (
                    canonical.startswith(prefix)
                    and canonical.endswith(suffix)
                    and canonical[len(prefix) : len(canonical) - len(suffix)].isdigit()
                ):
                    return t
            elif t.name == canonical:
                return t
        return None


@record
class Expected:
    name: str
    shape: tuple[int, ...] | None
    dtype: str | None  # safetensors spelling; None when the config names no dtype
    presence: str
    note: str = ""
    problem: str | None = None  # why the shape could not be computed


@record
class Fused:
    """A fused spelling of some expected tensors ([[fused]]): the shape it has when its parts
    have their config shapes (None: a part's shape is not known)."""

    name: str
    parts: tuple[str, ...]
    shape: tuple[int, ...] | None
    note: str = ""

    def offsets(self, inv: "Inventory") -> list[tuple[str, int, int]] | None:
        """(part, first row, rows) of each part along dim 0; None when a shape is not known."""
        if self.shape is None:
            return None
        out, row = [], 0
        for p in self.parts:
            rows = inv.tensors[p].shape[0]
            out.append((p, row, rows))
            row += rows
        return out


@record
class Inventory:
    architecture: Architecture
    tensors: dict[str, Expected] = field(default_factory=dict)
    not_applicable: set[str] = field(default_factory=set)  # templates whose `when` is false
    fused: dict[str, Fused] = field(default_factory=dict)  # fused name -> its parts' shapes


def _architecture(data: schema.ArchitectureFile) -> Architecture:
    a = data.architecture
    return Architecture(
        name=a.name,
        description=a.description,
        config_architectures=a.config_architectures,
        signature=a.signature,
        tensors=data.tensor,
        attention=a.attention,
        default=a.default,
        layers=Layers(data.layers.first, data.layers.other) if data.layers else None,
        fused=data.fused,
    )


@mappings.memo
def architectures() -> tuple[Architecture, ...]:
    return tuple(
        _architecture(mappings.load_as(f"architectures/{f}", schema.ArchitectureFile))
        for f in mappings.list_dir("architectures")
    )


def by_name(name: str) -> Architecture:
    for a in architectures():
        if a.name == name:
            return a
    raise KeyError(name)


def default() -> Architecture:
    """The architecture assumed when neither a config nor tensors name one (``default = true``)."""
    return next(a for a in architectures() if a.default)


def declared(cfg: dict) -> list[str] | None:
    """A config's ``architectures``: its class names when it is a list whose first item (the one
    the engines read) is a string, [] when absent, None when it is anything else (WC212 says so;
    nothing reads it as names). A later item of another type is left out (WC207 says it)."""
    names = cfg.get("architectures")
    if names is None:
        return []
    if isinstance(names, list) and (not names or isinstance(names[0], str)):
        return [n for n in names if isinstance(n, str)]
    return None


def named_by(cfg: dict) -> Architecture | None:
    """The architecture a config's ``architectures[0]`` names, if any."""
    names = declared(cfg) or []
    for a in architectures():
        if names and names[0] in a.config_architectures:
            return a
    return None


def architecture_for(cfg: dict, canonical: set[str]) -> tuple[Architecture | None, str]:
    """The one place an architecture is chosen: the config's word, unless the tensors clearly
    say another; else the tensors' signature. Returns it with the evidence."""
    archs = architectures()
    named = named_by(cfg)
    if named is not None:
        first = cfg["architectures"][0]
        if named.signature and all(s in canonical for s in named.signature):
            # the tensors agree with the config (an MLA drafter with a q_proj has Llama's
            # signature too): the config's word stands
            return named, f"config architectures[0] = {first}"
        for b in archs:
            if b is not named and b.signature and all(s in canonical for s in b.signature):
                return b, f"tensors {', '.join(b.signature)} (config says {first})"
        return named, f"config architectures[0] = {first}"
    for a in sorted(archs, key=lambda a: -len(a.signature)):
        if a.signature and all(s in canonical for s in a.signature):
            return a, f"tensors {', '.join(a.signature)}"
    return None, "no known drafter architecture in config or tensors"


@mappings.memo
def transposed(shape, expected) -> bool:
    """A 2-D tensor stored transposed: its shape is the reverse of the one expected (a square
    shape cannot tell). The one test: check's WC213 and inspect's status read it."""
    want = tuple(expected) if expected is not None else ()
    return len(want) == 2 and want[0] != want[1] and tuple(shape) == want[::-1]


def with_parts(canonical: set[str]) -> set[str]:
    """``canonical`` and the parts of every fused name in it (of any architecture): the names a
    signature is looked for in (a drafter with q/k/v fused still has q_proj)."""
    out = set(canonical)
    for a in architectures():
        out |= a.with_parts(canonical)
    return out


def all_canonical_names() -> frozenset[str]:
    out = set()
    for a in architectures():
        out |= a.canonical_names()
    return frozenset(out)


def expected(arch: Architecture, symbols: dict, layers: int = 1) -> Inventory:
    """Expand ``arch`` for a config given as expression symbols (NormalizedConfig.symbols()),
    with ``layers`` decoder layers (the layers the weights reach, Architecture.layers_held: the
    config's num_hidden_layers is weighed against them by rule WC406, not here)."""
    inv = Inventory(architecture=arch)
    for t in arch.tensors:
        in_layer = arch.layers is not None and t.name.startswith(arch.layers.first)
        for layer in range(min(max(layers, 1), MAX_LAYERS)) if in_layer else [0]:
            u = t
            if layer:
                u = TensorTemplate(
                    arch.layers.name(t.name, layer),
                    t.shape,
                    t.dtype,
                    t.when,
                    t.later_presence or t.presence,
                    t.for_each,
                    t.later_note or t.note,
                )
            _expand(inv, u, {**symbols, "layer": layer})
    for name in sorted(arch.fused_names(min(max(layers, 1), MAX_LAYERS))):
        got = arch.fused_of(name)
        if got is not None and all(p in inv.tensors for p in got[1]):
            inv.fused[name] = _fused(inv, name, *got)
    return inv


def _fused(inv: Inventory, name: str, f: FusedTemplate, parts: tuple[str, ...]) -> Fused:
    """The shape of ``parts`` concatenated along dim 0, when every part's is known and they
    agree past it (a weight's column count; a bias has none)."""
    shapes = [inv.tensors[p].shape for p in parts]
    if any(not s for s in shapes) or len({tuple(s[1:]) for s in shapes}) != 1:
        return Fused(name, parts, None, f.note)
    return Fused(name, parts, (sum(s[0] for s in shapes), *shapes[0][1:]), f.note)


def _expand(inv: Inventory, t: TensorTemplate, symbols: dict) -> None:
    model_dtype = CONFIG_DTYPES.get(str(symbols.get("dtype") or "").lower())
    try:
        if t.when and not expr.evaluate(t.when, symbols):
            inv.not_applicable.add(t.name)
            return
    except (expr.Undefined, ArithmeticError) as e:
        # a condition we cannot decide: the tensor is expected only if present
        inv.tensors[t.name] = Expected(
            t.name,
            None,
            None,
            "optional",
            t.note,
            problem=f"cannot tell whether it is expected: {e}",
        )
        return
    count = 1
    if t.for_each:
        try:
            count = expr.evaluate(t.for_each, symbols)
        except expr.Undefined:
            count = None
        count = int(count) if isinstance(count, (int, float)) else 0
        if count > MAX_FOR_EACH:
            # a config claiming a million aux layers must not make us build a million names
            inv.tensors[t.name] = Expected(
                t.name,
                None,
                None,
                t.presence,
                t.note,
                problem=f"{t.for_each} = {count} is more than {MAX_FOR_EACH}: not expanded",
            )
            return
    names = [t.name.format(i=i) for i in range(count)] if t.for_each else [t.name]
    dtype = model_dtype if t.dtype == "model" else t.dtype
    for name in names:
        try:
            dims = [expr.evaluate(s, symbols) for s in t.shape]
            unknown = [s for s, v in zip(t.shape, dims) if not isinstance(v, (int, float))]
            if unknown:  # a bare symbol whose config value is unknown evaluates to None
                raise expr.Undefined(f"{', '.join(unknown)} is not known")
            shape = tuple(int(v) for v in dims)
            problem = None
        except (expr.Undefined, ArithmeticError) as e:
            shape, problem = None, f"shape unknown: {e}"
        inv.tensors[name] = Expected(name, shape, dtype, t.presence, t.note, problem)
