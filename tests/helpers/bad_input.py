"""Helpers for the bad-input, local-source and dialect/config tests.

Malformed safetensors files are written by hand here (8-byte little-endian length + JSON + data,
with struct), never taken from opaque binaries, so each test shows exactly what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import struct

import synth

from weightcheck.model import dialects
from weightcheck.storage.writer import OutTensor, write_file


# --- hand-made safetensors bytes --------------------------------------------------------------
def entry(dtype: str, shape, begin: int, end: int) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}


def st_bytes(header, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file: ``header`` (a dict, dumped as JSON, or raw bytes), then ``data``.
    ``length`` overrides the 8-byte header length (to lie about it)."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    return struct.pack("<Q", n) + raw + data


def write_bytes(path, content: bytes) -> pathlib.Path:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def tiny_st(path, names=("a",), dtype="F32", numel=2) -> pathlib.Path:
    """A small *valid* safetensors file holding ``names`` (each [numel] of dtype F32)."""
    header, pos = {}, 0
    for n in names:
        header[n] = entry(dtype, [numel], pos, pos + 4 * numel)
        pos += 4 * numel
    return write_bytes(path, st_bytes(header, bytes(i % 251 for i in range(pos))))


# --- checking a CLI failure -------------------------------------------------------------------
def one_error_line(result, *fragments, where=None) -> str:
    """Exit 2, exactly one line on stderr starting ``weightcheck: error:``, naming ``where`` (when
    given) and every fragment (case-insensitive), no traceback, not an internal error; on stdout
    nothing, or (``--json``) the same error as one JSON object. The line."""
    assert result.exit_code == 2, result
    err = result.stderr
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err!r}"
    line = lines[0]
    assert line.startswith("weightcheck: error: "), line
    assert "Traceback" not in err and "internal error" not in line, line
    if where is not None:
        assert str(where) in line, f"{where!s} not named in {line!r}"
    for frag in fragments:
        assert frag.lower() in line.lower(), f"{frag!r} not in {line!r}"
    if result.stdout:  # --json: the error as data, the same words as stderr's
        obj = json.loads(result.stdout)
        assert obj["error"] == line[len("weightcheck: error: ") :] and obj["exit_status"] == 2
    return line


# --- hashing a source before/after ------------------------------------------------------------
def tree_digest(root) -> dict:
    """relative path -> (kind, sha256 or link target, mtime_ns) for everything under root."""
    root = pathlib.Path(root)
    out = {}
    if root.is_file():
        st = root.stat()
        return {root.name: ("file", hashlib.sha256(root.read_bytes()).hexdigest(), st.st_mtime_ns)}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = pathlib.Path(dirpath) / n
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p), None)
            elif p.is_dir():
                out[rel] = ("dir", None, None)
            else:
                out[rel] = (
                    "file",
                    hashlib.sha256(p.read_bytes()).hexdigest(),
                    p.stat().st_mtime_ns,
                )
    return out


# --- synthetic drafters under any names -------------------------------------------------------
def canonical_tensors(cfg: dict, **kw) -> list[OutTensor]:
    """The synthetic drafter's tensors under their canonical (specforge) names."""
    return synth.drafter_tensors(cfg, "specforge", **kw)


def out_bytes(t: OutTensor) -> bytes:
    if isinstance(t.data, (bytes, bytearray)):
        return bytes(t.data)
    chunks = []
    t.data(chunks.append)
    return b"".join(chunks)


def write_renamed(folder, cfg: dict, rename, extra=(), config=True, **kw) -> dict:
    """Write config.json + model.safetensors with each canonical name passed through ``rename``
    (a callable; returning None drops the tensor). ``extra``: more OutTensors. Returns
    {written name: canonical name}."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if config:
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    out, mapping = [], {}
    for t in canonical_tensors(cfg, **kw):
        new = rename(t.name)
        if new is None:
            continue
        mapping[new] = t.name
        out.append(OutTensor(new, t.dtype, t.shape, out_bytes(t)))
    out.extend(extra)
    write_file(str(folder / "model.safetensors"), out, {"format": "pt"})
    return mapping


def dialect_names(cfg: dict, dialect: str, **kw) -> dict:
    """{name in dialect: canonical name} for everything synth writes for ``cfg``."""
    d = dialects.by_name(dialect)
    return {d.from_canonical(t.name): t.name for t in canonical_tensors(cfg, **kw)}


def torch_state_dict(cfg: dict, rename=lambda n: n, **kw) -> dict:
    """The synthetic drafter as a torch state dict (same bytes as the safetensors version)."""
    import torch

    dt = {
        "BF16": torch.bfloat16,
        "F16": torch.float16,
        "F32": torch.float32,
        "I64": torch.int64,
        "BOOL": torch.bool,
    }
    out = {}
    for t in canonical_tensors(cfg, **kw):
        buf = bytearray(out_bytes(t))
        x = (
            torch.frombuffer(buf, dtype=dt[t.dtype]).reshape(t.shape).clone()
            if buf
            else torch.empty(t.shape, dtype=dt[t.dtype])
        )
        new = rename(t.name)
        if new is not None:
            out[new] = x
    return out


def inspect_json(run_cli, path, *extra):
    r = run_cli("inspect", path, "--json", *extra)
    assert r.exit_code == 0, r
    assert r.stderr == "", r.stderr
    return r.json
