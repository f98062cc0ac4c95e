"""Architectures as data: the tensors a config implies (mappings/architectures/*.toml).

``expected(arch, normalized_config)`` expands an architecture's tensor templates against a normalized
config into :class:`Expected` entries — canonical name, shape, dtype, presence — or reports which
config value it could not evaluate (``shape=None`` and ``problem`` set).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from weightcheck import expr, mappings
from weightcheck.storage.header import CONFIG_DTYPES

# most copies a for_each template expands to (n_aux is 3 in practice; SGLang reads at most a few)
MAX_FOR_EACH = 64


@dataclass(frozen=True)
class TensorTemplate:
    name: str
    shape: tuple[str, ...]
    dtype: str = "model"
    when: str | None = None
    presence: str = "required"
    for_each: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Architecture:
    name: str
    description: str
    config_architectures: tuple[str, ...]
    signature: tuple[str, ...]
    tensors: tuple[TensorTemplate, ...]
    attention: Literal["gqa", "mla"] = "gqa"
    default: bool = False

    def canonical_names(self, max_aux: int = 8) -> set[str]:
        """Every canonical name this architecture can have (for_each expanded up to max_aux)."""
        out = set()
        for t in self.tensors:
            if t.for_each:
                out.update(t.name.format(i=i) for i in range(max_aux))
            else:
                out.add(t.name)
        return out

    def template_for(self, canonical: str) -> TensorTemplate | None:
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


@dataclass
class Expected:
    name: str
    shape: tuple[int, ...] | None
    dtype: str | None  # safetensors spelling; None when the config names no dtype
    presence: str
    note: str = ""
    problem: str | None = None  # why the shape could not be computed


@dataclass
class Inventory:
    architecture: Architecture
    tensors: dict[str, Expected] = field(default_factory=dict)
    not_applicable: set[str] = field(default_factory=set)  # templates whose `when` is false


@functools.lru_cache(maxsize=None)
def architectures() -> tuple[Architecture, ...]:
    out = []
    for fname in mappings.list_dir("architectures"):
        data = mappings.load(f"architectures/{fname}")
        a = data["architecture"]
        out.append(
            Architecture(
                name=a["name"],
                description=a.get("description", ""),
                config_architectures=tuple(a.get("config_architectures", ())),
                attention=a.get("attention", "gqa"),
                default=bool(a.get("default", False)),
                signature=tuple(a.get("signature", ())),
                tensors=tuple(
                    TensorTemplate(
                        name=t["name"],
                        shape=tuple(t["shape"]),
                        dtype=t.get("dtype", "model"),
                        when=t.get("when"),
                        presence=t.get("presence", "required"),
                        for_each=t.get("for_each"),
                        note=t.get("note", ""),
                    )
                    for t in data["tensor"]
                ),
            )
        )
    return tuple(out)


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


def all_canonical_names() -> set[str]:
    out = set()
    for a in architectures():
        out |= a.canonical_names()
    return out


def expected(arch: Architecture, symbols: dict) -> Inventory:
    """Expand ``arch`` for a config given as expression symbols (NormalizedConfig.symbols())."""
    inv = Inventory(architecture=arch)
    model_dtype = CONFIG_DTYPES.get(str(symbols.get("dtype") or "").lower())
    for t in arch.tensors:
        try:
            if t.when and not expr.evaluate(t.when, symbols):
                inv.not_applicable.add(t.name)
                continue
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
            continue
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
                continue
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
    return inv
