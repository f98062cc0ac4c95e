"""The one canonical model of a drafter: load -> normalize.

``load_drafter(SRC)`` reads a source (weightcheck/sources.py), normalizes its config
(weightcheck/config.py), maps its tensor names to canonical ones (weightcheck/dialects.py),
decides its architecture, and expands the inventory its config implies
(weightcheck/inventory.py). Every command starts from a :class:`Drafter`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from weightcheck.model import config as config_mod
from weightcheck.model import dialects as dialects_mod
from weightcheck.model import inventory
from weightcheck.sources import Source, TensorRecord, open_source


@dataclass
class Tensor:
    """A tensor of the checkpoint: its own name, its canonical name, and where its bytes are."""

    name: str
    canonical: str | None
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str
    begin: int | None = None
    end: int | None = None
    via: str | None = None  # the dialect that explained the name

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class Drafter:
    source: Source
    config: dict
    normalized: config_mod.NormalizedConfig
    naming: dialects_mod.Naming
    tensors: list[Tensor]
    architecture: inventory.Architecture | None
    architecture_evidence: str
    inventory: inventory.Inventory | None
    looks_like_target: str | None = None  # why we think this is a target model, not a drafter
    notes: list[str] = field(default_factory=list)

    @property
    def dialect(self) -> str | None:
        return self.naming.dialect

    def by_canonical(self) -> dict[str, Tensor]:
        out = {}
        for t in self.tensors:
            if t.canonical is not None and t.canonical not in out:
                out[t.canonical] = t
        return out

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def total_params(self) -> int:
        return sum(t.numel for t in self.tensors)


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _detect_target(names, naming) -> str | None:
    """A target model passed as a drafter (FORMATS.md §4.12): many decoder layers, no fc."""
    layers = {int(m.group(1)) for n in names for m in [_LAYER.search(n)] if m}
    has_fc = any(c in ("fc.weight",) for c in naming.canonical.values())
    if len(layers) > 1 and not has_fc:
        return (
            f"{len(layers)} decoder layers (layers.{min(layers)}..{max(layers)}) and no fc.weight"
        )
    return None


def from_source(src: Source, extra_dialects=()) -> Drafter:
    cfg = src.config or {}
    names = list(src.tensors)
    naming = dialects_mod.canonicalize(names, cfg, tuple(extra_dialects))
    norm = config_mod.normalize(cfg)
    tensors = []
    for n in names:
        r: TensorRecord = src.tensors[n]
        tensors.append(
            Tensor(
                n,
                naming.canonical.get(n),
                r.dtype,
                r.shape,
                r.nbytes,
                r.file,
                r.begin,
                r.end,
                naming.via.get(n),
            )
        )
    canonical = {t.canonical for t in tensors if t.canonical}
    arch, why = inventory.architecture_for(cfg, canonical)
    inv = inventory.expected(arch, norm.symbols()) if arch else None
    d = Drafter(
        source=src,
        config=cfg,
        normalized=norm,
        naming=naming,
        tensors=tensors,
        architecture=arch,
        architecture_evidence=why,
        inventory=inv,
    )
    d.looks_like_target = _detect_target(names, naming)
    if src.config is None:
        d.notes.append("no config.json: shapes cannot be checked against a config")
    return d


def source_report(d: Drafter) -> dict:
    s = d.source
    return {
        "spec": s.spec,
        "kind": s.kind,
        "location": s.location,
        "layout": s.layout,
        "revision": s.revision,
        "commit": s.commit,
        "config_file": s.config_file,
        "index_file": s.index_file,
        "files": [
            {
                "name": f.name,
                "format": f.format,
                "size": f.size,
                "sha256": f.sha256,
                **({"pickle_key": f.pickle_key} if f.pickle_key else {}),
            }
            for f in s.files.values()
        ],
    }


def load_drafter(
    spec: str, revision: str | None = None, token: str | None = None, extra_dialects=()
) -> Drafter:
    return from_source(open_source(spec, revision=revision, token=token), extra_dialects)
