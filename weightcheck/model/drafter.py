"""The one canonical model of a drafter: load -> normalize.

``load_drafter(SRC)`` reads a source (weightcheck/sources/), normalizes its config
(weightcheck/model/config.py), maps its tensor names to canonical ones (weightcheck/model/dialects.py),
decides its architecture, and expands the inventory its config implies
(weightcheck/model/inventory.py). Every command starts from a :class:`Drafter`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import field

from weightcheck.model import config as config_mod
from weightcheck.model import dialects as dialects_mod
from weightcheck.model import inventory
from weightcheck.record import record
from weightcheck.sources import Source, TensorRecord, open_source


@record
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
    # a part of a fused tensor (Drafter.parts_of): its bytes [a, b) within tensor ``name``
    window: tuple[int, int] | None = None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@record
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

    def target_said(self, label: str | None = None, why: bool = True) -> str | None:
        """``this is a target model, not an EAGLE-3 drafter: WHY`` (``label`` for "this"), the
        words every command uses for :attr:`looks_like_target`; None for a drafter. ``why``:
        False leaves the reason out (a finding's first line; its detail says it)."""
        if not self.looks_like_target:
            return None
        said = f"{label or 'this'} is a target model, not an EAGLE-3 drafter"
        return f"{said}: {self.looks_like_target}" if why else said

    @property
    def dialect(self) -> str | None:
        return self.naming.dialect

    def as_handed(self) -> tuple[list[Tensor], list[Tensor]]:
        """(what a loader that iterates each weight file's entries is handed, in order; the
        tensors it never sees). A pickled ``*.bin`` whose tensors sit under a key of its dict
        (``state_dict``, ``model``: sources/pickled.py reads them there) hands its top-level
        entries instead — one entry named after the key (and ``epoch``, ...), none of its tensors:
        SGLang's and vLLM's ``pt_weights_iterator`` and the trainers' loaders iterate
        ``torch.load(file).items()`` (seen by the SGLang, vLLM and SpecForge oracles; WC106)."""
        from weightcheck.sources.pickled import nested_files

        nested = nested_files(self.source)
        if not nested:
            return list(self.tensors), []
        handed = [t for t in self.tensors if t.file not in nested]
        never = [t for t in self.tensors if t.file in nested]
        for name, wf in nested.items():
            handed += [Tensor(k, None, "dict" if k == wf.pickle_key else "object", (), 0, name)
                       for k in wf.pickle_top]  # fmt: skip
        return handed, never

    def parts_of(self, t: Tensor) -> list[Tensor] | None:
        """A fused tensor (mappings/architectures [[fused]]) whose shape is its parts' config
        shapes, as its parts: one view per part, its rows' bytes a window of ``t`` — where the
        engines' weight loaders split it. None for any other tensor (a fused one of another
        shape stays whole: WC206 says so)."""
        inv = self.inventory
        f = inv.fused.get(t.canonical) if inv is not None and t.canonical else None
        if f is None or f.shape is None or tuple(t.shape) != f.shape or t.window is not None:
            return None
        row = t.nbytes // f.shape[0] if f.shape[0] else 0
        out = []
        for part, r0, rows in f.offsets(inv):
            a, b = r0 * row, (r0 + rows) * row
            out.append(dataclasses.replace(
                t, canonical=part, shape=(rows, *f.shape[1:]), nbytes=b - a, window=(a, b),
                begin=None if t.begin is None else t.begin + a,
                end=None if t.begin is None else t.begin + b,
            ))  # fmt: skip
        return out

    def logical(self) -> list[Tensor]:
        """The tensors with every fused one that splits (:meth:`parts_of`) replaced by its parts:
        what the engines' parameters receive, one canonical tensor each."""
        out: list[Tensor] = []
        for t in self.tensors:
            out += self.parts_of(t) or [t]
        return out

    def fused_copies(self) -> dict[str, list[Tensor]]:
        """Canonical part -> its copies, where a fused tensor that splits and the part stored
        apart (or a second fused tensor) are both given: the rows of the fused tensor
        (:meth:`parts_of`) and the tensor itself. Both engines load every copy into the part's
        rows, files in order and names sorted within a file, and the last write stays (the one
        :meth:`by_canonical` picks; the SGLang and vLLM oracles: docs/differential.md R34)."""
        out: dict[str, list[Tensor]] = {}
        for t in self.logical():
            if t.canonical is not None:
                out.setdefault(t.canonical, []).append(t)
        return {c: ts for c, ts in out.items() if len(ts) > 1 and any(t.window for t in ts)}

    def covered(self) -> set[str]:
        """Every canonical name the checkpoint holds: its tensors', and the parts of each fused
        tensor (split or not: one of another shape is a shape error, not missing parts)."""
        out = set(self.by_canonical())
        return self.architecture.with_parts(out) if self.architecture is not None else out

    def by_canonical(self) -> dict[str, Tensor]:
        """Canonical name -> the tensor (a fused tensor's parts: :meth:`logical`); of several for
        one canonical tensor (WC103), the one the engines keep: both load files in order and
        names sorted within a file, the last write stays (engines/parameters.py winner)."""
        copies: dict[str, list[Tensor]] = {}
        for t in self.logical():
            if t.canonical is not None:
                copies.setdefault(t.canonical, []).append(t)
        return {c: last_loaded(ts) for c, ts in copies.items()}

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def total_params(self) -> int:
        return sum(t.numel for t in self.tensors)


def last_loaded(copies: list[Tensor]) -> Tensor:
    """Of several copies of one canonical tensor (WC103), the one the engines keep: both load
    files in order and names sorted within a file, and the last write stays (the first of equals
    when two tie; engines/parameters.py winner)."""
    return max(copies, key=lambda t: (t.file or "", t.name))


# a numbered decoder block, as model families name them: Llama/Qwen/Mistral `layers.N.`,
# GPT-2/Falcon/BLOOM `h.N.`, BERT-style `layer.N.`, `blocks.N.`
_LAYER = re.compile(r"(?:^|\.)(layers|h|layer|blocks)\.(\d+)\.")
# what a plain model config calls its layer count when it is not num_hidden_layers (GPT-2's
# n_layer, others' num_layers)
_LAYER_KEYS = ("n_layer", "num_layers")
# the class suffixes of a model with a language-model head (a target, or any plain LM)
_LM_CLASSES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _drafter_classes(extra_dialects=()) -> set[str]:
    """Every ``architectures[0]`` that names an EAGLE-3 drafter (architectures and dialects data)."""
    out = set()
    for a in inventory.architectures():
        out.update(a.config_architectures)
    for d in tuple(extra_dialects) + dialects_mod.bundled():
        out.update(d.architectures)
    return out


def _detect_target(names, naming, cfg=None, norm=None, extra_dialects=()) -> str | None:
    """A target model (or any plain language model: GPT-2) passed as a drafter (docs/formats.md
    §4.12), decided here once for every command (inspect, check, compare, convert, eval): many
    decoder layers and no fc; or, when its tensors do not show the layers (a multimodal target
    whose text model is nested, a shard of embeddings only), a config naming a class that is no
    drafter's with more than one layer (Kimi-K2.5: ``KimiK25ForConditionalGeneration``, 61 layers
    in ``text_config``); or a language model's class whose tensors no drafter has (a one-block
    toy LM)."""
    has_fc = any(c in ("fc.weight",) for c in naming.canonical.values())
    if has_fc:
        return None
    found = [(m.group(1), int(m.group(2))) for n in names for m in [_LAYER.search(n)] if m]
    for kind in dict.fromkeys(k for k, _ in found):
        layers = {i for k, i in found if k == kind}
        if len(layers) > 1:
            return (
                f"{len(layers)} decoder layers ({kind}.{min(layers)}..{max(layers)}) and no "
                "fc.weight"
            )
    cfg = cfg or {}
    archs = cfg.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    n_layers = norm.get("num_hidden_layers") if norm is not None else None
    where = norm.provenance.get("num_hidden_layers") if norm is not None else None
    if n_layers is None:
        key = next((k for k in _LAYER_KEYS if type(cfg.get(k)) is int), None)
        n_layers, where = (cfg[key], key) if key else (None, None)
    drafter_class = first in _drafter_classes(extra_dialects)
    if first and not drafter_class and (n_layers or 0) > 1:
        return (
            f"config architectures[0] is {first}, not an EAGLE-3 drafter class, with "
            f"{n_layers} layers ({where}), and no fc.weight"
        )
    no_drafter_tensor = names and not any(naming.canonical.get(n) for n in names)
    if first and not drafter_class and first.endswith(_LM_CLASSES) and no_drafter_tensor:
        return (
            f"config architectures[0] is {first}, a language model's class, and no tensor is a "
            "drafter's (no fc.weight)"
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
    canonical = inventory.with_parts({t.canonical for t in tensors if t.canonical})
    arch, why = inventory.architecture_for(cfg, canonical)
    inv = inventory.expected(arch, norm.symbols(), arch.layers_held(canonical)) if arch else None
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
    d.looks_like_target = _detect_target(names, naming, cfg, norm, extra_dialects)
    if d.looks_like_target and not naming.evidence:
        # no drafter dialect explains these names: the fallback layout is no finding of ours
        naming.dialect = None
        naming.evidence = [
            "no drafter dialect explains these names: they look like a target model's"
        ]
    if src.config is None:
        d.notes.append("no config.json: shapes cannot be checked against a config")
    return d


def load_drafter(
    spec: str, revision: str | None = None, token: str | None = None, extra_dialects=()
) -> Drafter:
    return from_source(open_source(spec, revision=revision, token=token), extra_dialects)
