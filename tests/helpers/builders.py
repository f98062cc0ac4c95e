"""Helpers for tests/test_check_rules.py: build broken drafters from clean ones, run `check`.

Checkpoints are edited at the byte level (safetensors headers read with weightcheck's own strict
reader, tensors re-written with weightcheck.storage.writer), so a test states exactly which
name, shape, dtype or value it breaks and nothing else changes.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import struct

import synth
from conftest import PRODUCERS, run_cli

from weightcheck.storage.header import read_local_header
from weightcheck.storage.writer import OutTensor, write_file

TARGET = PRODUCERS / "target-llama"


# ---------------------------------------------------------------------------------------------
# reading and writing checkpoints
def read_tensors(path) -> list[OutTensor]:
    """Every tensor of a .safetensors file (or a folder's model.safetensors), bytes in memory."""
    path = pathlib.Path(path)
    if path.is_dir():
        path = path / "model.safetensors"
    h = read_local_header(str(path))
    raw = path.read_bytes()
    return [
        OutTensor(
            t.name, t.dtype, tuple(t.shape), raw[h.data_start + t.begin : h.data_start + t.end]
        )
        for t in h.tensors.values()
    ]


def tensor_map(path) -> dict[str, OutTensor]:
    return {t.name: t for t in read_tensors(path)}


def read_config(folder) -> dict:
    return json.loads((pathlib.Path(folder) / "config.json").read_text())


def write_checkpoint(folder, cfg: dict | None, tensors, metadata=None) -> pathlib.Path:
    """config.json (unless cfg is None) + model.safetensors; returns the folder."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if cfg is not None:
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    write_file(
        str(folder / "model.safetensors"),
        list(tensors),
        {"format": "pt"} if metadata is None else metadata,
    )
    return folder


def edit(src, out, cfg=None, tensors=None, drop=(), rename=None, add=()) -> pathlib.Path:
    """A copy of checkpoint folder ``src`` at ``out`` with edits:

    cfg(dict)                edits the config in place (its return value is ignored)
    tensors(dict name->OutTensor) edits tensors in place
    drop: names to leave out; rename: {old: new}; add: extra OutTensors (appended)
    """
    src = pathlib.Path(src)
    config = read_config(src) if (src / "config.json").exists() else None
    if cfg is not None:
        cfg(config)
    tmap = tensor_map(src)
    if tensors is not None:
        tensors(tmap)
    out_tensors = []
    for name, t in tmap.items():
        if name in drop:
            continue
        if rename and name in rename:
            t = OutTensor(rename[name], t.dtype, t.shape, t.data)
        out_tensors.append(t)
    out_tensors.extend(add)
    return write_checkpoint(out, config, out_tensors)


def copy_fixture(name: str, out) -> pathlib.Path:
    out = pathlib.Path(out)
    shutil.copytree(PRODUCERS / name, out)
    return out


def write_sharded(
    folder, cfg: dict, tensors, split: int, weight_map_edit=None, total_size_delta: int = 0
) -> pathlib.Path:
    """Two shards (tensors[:split], tensors[split:]) and a model.safetensors.index.json, edited by
    ``weight_map_edit(weight_map)`` and ``total_size_delta`` to make it lie."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    shards = {
        "model-00001-of-00002.safetensors": tensors[:split],
        "model-00002-of-00002.safetensors": tensors[split:],
    }
    weight_map = {}
    for fname, part in shards.items():
        write_file(str(folder / fname), part, {"format": "pt"})
        weight_map.update({t.name: fname for t in part})
    if weight_map_edit is not None:
        weight_map_edit(weight_map)
    total = sum(t.nbytes for t in tensors) + total_size_delta
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )
    return folder


def target_copy(out, **config_changes) -> pathlib.Path:
    """target-llama with its config changed (only config and the embed/lm_head headers are read)."""
    out = copy_fixture("target-llama", out)
    cfg = read_config(out)
    cfg.update(config_changes)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def target_head_rows(ids) -> bytes:
    """The target-llama lm_head rows at target ids ``ids``, as bytes (BF16 [len(ids), 64])."""
    head = tensor_map(TARGET)["lm_head.weight"]
    row = len(head.data) // head.shape[0]
    return b"".join(head.data[i * row : (i + 1) * row] for i in ids)


# ---------------------------------------------------------------------------------------------
# tensor bytes
def bf16_bytes(values) -> bytes:
    """bf16 little-endian: the high half of each float32 (exact for the values the tests use)."""
    return b"".join(struct.pack("<f", float(v))[2:] for v in values)


def f32_bytes(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *map(float, values))


def const_bytes(dtype: str, value: float, n: int) -> bytes:
    one = bf16_bytes([value]) if dtype == "BF16" else f32_bytes([value])
    assert dtype in ("BF16", "F32"), dtype
    return one * n


def i64_bytes(values) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def i64_values(raw: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(raw) // 8}q", raw))


def numel(shape) -> int:
    return math.prod(shape)


def with_value(t: OutTensor, value: float, at: int | None = None) -> OutTensor:
    """A copy of ``t`` whose every element (or only element ``at``) is ``value``."""
    size = {"BF16": 2, "F32": 4}[t.dtype]
    if at is None:
        return OutTensor(t.name, t.dtype, t.shape, const_bytes(t.dtype, value, numel(t.shape)))
    data = bytearray(t.data)
    data[at * size : (at + 1) * size] = const_bytes(t.dtype, value, 1)
    return OutTensor(t.name, t.dtype, t.shape, bytes(data))


# ---------------------------------------------------------------------------------------------
# running check
def check(src, *args) -> tuple[int, dict]:
    """``weightcheck check SRC ARGS --json`` in-process: (exit code, report)."""
    r = run_cli("check", src, *args, "--json")
    assert r.exit_code in (0, 1), r
    rep = json.loads(r.stdout)
    assert rep["ok"] == (r.exit_code == 0), rep
    return r.exit_code, rep


def by_code(report: dict, code: str) -> list[dict]:
    """The findings of ``code``, top-level only (a consequence is listed under its root)."""
    return [f for f in report["findings"] if f["code"] == code]


def consequences_of(f: dict, code: str) -> list[dict]:
    """The findings of ``code`` a root finding explains, at any depth under it."""
    out = []
    for c in f.get("consequences", []):
        if c["code"] == code:
            out.append(c)
        out += consequences_of(c, code)
    return out


def codes(report: dict) -> set[str]:
    return {f["code"] for f in report["findings"]}


def said(f: dict) -> str:
    """All a finding says: its first line (``message``) and its detail (the evidence, the engine's
    code path, the long command), as ``--explain`` shows them."""
    return f["message"] + ("\n" + f["detail"] if f.get("detail") else "")


def mentions(f: dict, text: str) -> bool:
    """The finding names ``text`` as its subject, in its message or in its detail."""
    return f.get("subject") == text or text in (f.get("subject") or "") or text in said(f)


def fixture_variant(tmp_path, name, cfg_edit=None, tensors_edit=None, src=None) -> pathlib.Path:
    """A producer fixture (default: specforge-sglang) with one thing changed, as a real trainer
    might have written it: ``cfg_edit(cfg)`` edits the config in place, ``tensors_edit(tensors)``
    returns the new tensor list. Written to ``tmp_path / name``."""
    src = PRODUCERS / "specforge-sglang" if src is None else src
    cfg, ts = read_config(src), read_tensors(src)
    if cfg_edit is not None:
        cfg_edit(cfg)
    if tensors_edit is not None:
        ts = tensors_edit(ts)
    return write_checkpoint(tmp_path / name, cfg, ts)


def model_prefixed(tensors) -> list:
    """The tensor list with ``model.`` before every ``midlayer.`` name (the HF-style export)."""
    return [
        OutTensor(
            "model." + t.name if t.name.startswith("midlayer.") else t.name,
            t.dtype,
            t.shape,
            t.data,
        )
        for t in tensors
    ]


MLA_CFG = synth.KIMI_K25_MLA  # the Kimi-K2.5 MLA drafter, scaled down


def mla_drafter(folder, seed: int = 0, drop=(), **cfg) -> pathlib.Path:
    """MLA_CFG with ``cfg`` over it and the keys ``drop`` removed, written by synth (the tensors
    the config implies, with its defaults)."""
    c = {k: v for k, v in {**MLA_CFG, **cfg}.items() if k not in drop}
    synth.write_drafter(str(folder), c, seed=seed)
    return pathlib.Path(folder)


def placeholder_drafter(src, out) -> pathlib.Path:
    """``src`` with the placeholder map SpecForge writes before it builds one from data: d2t all
    zeros (draft id j is target id j) and t2d marking the first draft_vocab_size ids."""

    def zeros(m):
        n = m["d2t"].shape[0]
        m["d2t"].data = i64_bytes([0] * n)
        t2d = m["t2d"]
        t2d.data = bytes([1] * n + [0] * (t2d.shape[0] - n))

    return edit(src, out, tensors=zeros)
