"""Shared by the engine tests (marker ``engine``): the side venvs' interpreters and stdlib
rewriting of drafters into variants (no weightcheck code, so a variant is not shaped by the code
under test)."""

from __future__ import annotations

import json
import os
import pathlib
import struct

import pytest

# the Llama drafters written by the producers' own code (tests/fixtures/producers/README.md)
PRODUCER_FIXTURES = [
    "specforge-sglang",
    "specforge-hf",
    "speculators-train",
    "speculators-convert",
    "modelopt",
    "modelopt-default-aux",
    "modelopt-fullvocab-fp32",
]

SIDE_VENVS = {
    # engine: (the variable that names its interpreter, what it is, the script that builds it)
    "sglang": ("WEIGHTCHECK_SGLANG_PYTHON", "SGLang", "tests/engine/setup_sglang_venv.sh"),
    "vllm": ("WEIGHTCHECK_VLLM_PYTHON", "vLLM CPU", "tests/engine/setup_vllm_venv.sh"),
    # the trainers (tests/test_trainer_differential.py)
    "specforge": (
        "WEIGHTCHECK_SPECFORGE_PYTHON",
        "SpecForge",
        "tests/engine/setup_specforge_venv.sh",
    ),
    "speculators": (
        "WEIGHTCHECK_SPECULATORS_PYTHON",
        "speculators",
        "tests/engine/setup_speculators_venv.sh",
    ),
}


def side_python_path(engine: str) -> str:
    """Where the engine's side-venv interpreter is (it may not exist): its variable, else the venv
    its setup script builds under WEIGHTCHECK_VENVS or ~/.cache/weightcheck/venvs."""
    var = SIDE_VENVS[engine][0]
    p = os.environ.get(var)
    if p:
        return p
    venvs = os.environ.get("WEIGHTCHECK_VENVS") or os.path.expanduser("~/.cache/weightcheck/venvs")
    return os.path.join(venvs, engine, "bin", "python")


def side_python(engine: str) -> str:
    """The engine's side-venv interpreter, or skip, naming what to run."""
    var, what, script = SIDE_VENVS[engine]
    p = side_python_path(engine)
    if not (os.path.isfile(p) and os.access(p, os.X_OK)):
        pytest.skip(f"no {what} interpreter: {p} is absent (run `bash {script}` or set {var})")
    return p


# --- stdlib safetensors rewriting (the variants) --------------------------------------------------


def read_st(path: pathlib.Path) -> tuple[dict, dict[str, bytes], dict]:
    """(metadata, name -> raw bytes, name -> {dtype, shape}) in file (data offset) order."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    data, info = {}, {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        data[name] = raw[base + b : base + en]
        info[name] = {"dtype": e["dtype"], "shape": e["shape"]}
    return meta, data, info


def write_st(path: pathlib.Path, meta: dict, data: dict[str, bytes], info: dict) -> None:
    """Header entries and data in the order of ``data``."""
    header, off = {}, 0
    if meta:
        header["__metadata__"] = meta
    for name, b in data.items():
        header[name] = {
            "dtype": info[name]["dtype"],
            "shape": info[name]["shape"],
            "data_offsets": [off, off + len(b)],
        }
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(data.values()))


def variant(
    src: pathlib.Path,
    out: pathlib.Path,
    rename=None,
    drop=(),
    add=None,
    first=None,
    config=None,
    drop_config=(),
):
    """A copy of drafter SRC with tensors renamed / dropped / added (``first``: added tensors go
    before the others in the file) and config keys set or removed."""
    out.mkdir(parents=True, exist_ok=True)
    meta, data, info = read_st(src / "model.safetensors")
    new_data, new_info = {}, {}
    for name, (dtype, shape, b) in (first or {}).items():
        new_data[name], new_info[name] = b, {"dtype": dtype, "shape": list(shape)}
    for name in data:
        if name in drop:
            continue
        nn = rename(name) if callable(rename) else (rename or {}).get(name, name)
        new_data[nn], new_info[nn] = data[name], info[name]
    for name, (dtype, shape, b) in (add or {}).items():
        new_data[name], new_info[name] = b, {"dtype": dtype, "shape": list(shape)}
    write_st(out / "model.safetensors", meta, new_data, new_info)
    cfg = json.loads((src / "config.json").read_text())
    for k in drop_config:
        cfg.pop(k, None)
    for k, v in (config or {}).items():
        cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
