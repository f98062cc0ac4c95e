"""``weightcheck inspect SRC``: what is in a checkpoint.

:func:`run`: the request -> load -> normalize (weightcheck/model/drafter.py) -> :func:`report` (reports.InspectReport, schema
``weightcheck.inspect/1``) -> render (weightcheck/output/).
"""

from __future__ import annotations

from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.model.dialects import user_dialects
from weightcheck.model.drafter import Drafter, load_drafter
from weightcheck.reports import (
    ArchitectureInfo,
    DialectInfo,
    InspectConfig,
    InspectReport,
    InspectTensor,
    MissingTensor,
    Totals,
    source_info,
)
from weightcheck.requests import InspectRequest

# the config fields inspect shows besides the dimensions the architecture's tensor shapes read
# (Architecture.shape_fields: mappings/architectures/*.toml): the aux capture, rope and dtype
OTHER_FIELDS = ("aux_layer_ids", "rope_theta", "rope_scaling", "max_position_embeddings", "dtype")


def run(req: InspectRequest) -> InspectReport:
    """``inspect`` as ``req`` asks it."""
    d = load_drafter(
        req.src, revision=req.revision, token=req.token, extra_dialects=user_dialects(req.mapping)
    )
    return report(d)


def key_fields(d: Drafter) -> list[str]:
    """The config fields inspect shows for ``d``, in mappings/config.toml's order: those of its
    architecture (the default one when nothing names it), then OTHER_FIELDS."""
    arch = d.architecture or inventory.default()
    shown = arch.shape_fields() | set(OTHER_FIELDS)
    return [s.name for s in config_mod.field_specs() if s.name in shown]


def tensor_status(d: Drafter, t) -> str:
    n = d.naming
    if t.name in n.buffers:
        return "buffer (not a weight: dropped by both engines)"
    if t.canonical is None:
        return "unknown"
    if t.name in n.foreign:
        return f"other dialect ({n.foreign[t.name]})"
    if t.canonical in n.duplicates:
        return "duplicate"
    if d.inventory is None:
        return "ok"
    f = d.inventory.fused.get(t.canonical)
    if f is not None and d.parts_of(t):  # split where the engines split it
        return "fused " + "+".join(p.rsplit(".", 2)[-2].removesuffix("_proj") for p in f.parts)
    exp = f or d.inventory.tensors.get(t.canonical)
    if exp is None:
        return "not expected by config"
    if exp.shape is not None and inventory.transposed(t.shape, exp.shape):
        return f"transposed: config {list(exp.shape)}"
    if exp.shape is not None and tuple(exp.shape) != tuple(t.shape):
        return f"shape != config {list(exp.shape)}"
    return "ok"


def report(d: Drafter) -> InspectReport:
    norm = d.normalized
    tensors = []
    for t in sorted(d.tensors, key=lambda t: (t.canonical is None, t.canonical or t.name, t.name)):
        inv = d.inventory if t.canonical else None
        exp = (inv.fused.get(t.canonical) or inv.tensors.get(t.canonical)) if inv else None
        tensors.append(
            InspectTensor(
                name=t.name,
                canonical=t.canonical,
                dtype=t.dtype,
                shape=list(t.shape),
                parameters=t.numel,
                bytes=t.nbytes,
                file=t.file,
                via=t.via,
                expected_shape=list(exp.shape) if exp and exp.shape is not None else None,
                status=tensor_status(d, t),
            )
        )
    present = d.covered()
    missing = [
        MissingTensor(name, e.presence, list(e.shape) if e.shape is not None else None, e.note)
        for name, e in (d.inventory.tensors.items() if d.inventory else ())
        if name not in present
    ]
    return InspectReport(
        source_info=source_info(d),
        dialect_info=DialectInfo(d.naming.dialect, d.naming.wrappers, d.naming.evidence),
        architecture_info=ArchitectureInfo(
            d.architecture.name if d.architecture else None, d.architecture_evidence
        ),
        looks_like_target=d.looks_like_target,
        config_info=InspectConfig(
            raw=d.config,
            normalized={k: norm.values.get(k) for k in norm.values},
            provenance=dict(norm.provenance),
            problems=[f"{f}: {m}" for f, m in norm.problems],
            key_fields=key_fields(d),
        ),
        tensors=tensors,
        unknown_names=list(d.naming.unknown),
        other_dialect=dict(d.naming.foreign),
        duplicates={k: v for k, v in d.naming.duplicates.items()},
        missing_tensors=missing,
        totals=Totals(len(d.tensors), d.total_params, d.total_bytes),
        notes=list(d.source.notes) + list(d.notes),
    )
