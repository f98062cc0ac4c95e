"""Helpers for tests/test_convert.py: run `convert`, read what it wrote, build small targets.

Tensor bytes are read back with the safetensors library itself (``safe_open``, torch framework,
each tensor viewed as raw bytes), never with weightcheck's own reader, so a test compares what an
engine would load with what the source holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import struct

import synth
from conftest import PRODUCERS, run_cli

from weightcheck.storage.writer import OutTensor, write_file

TARGET = PRODUCERS / "target-llama"
TMP_MARK = ".weightcheck-tmp-"
# the engine each destination is checked with (speculators configs are served by vLLM)
ENGINE_OF = {"sglang": "sglang", "vllm": "vllm", "speculators": "vllm"}
# the engine whose aux-id convention a producer's drafters carry (docs/engines.md §3)
TRAINED_WITH = {
    "specforge-sglang": "sglang",
    "specforge-hf": "sglang",
    "modelopt": "sglang",
    "modelopt-default-aux": "sglang",
    "modelopt-fullvocab-fp32": "sglang",
    "speculators-train": "vllm",
    "speculators-convert": "vllm",
}


# ---------------------------------------------------------------------------------------------
# running the CLI
SESSION_DIR: pathlib.Path | None = None  # pytest's session temp folder (conftest.py sets it)


def llama_target(hidden: int = 128, vocab: int = 2048) -> pathlib.Path:
    """A 61-layer Llama target (config and embedding/head headers), written once per session.
    Its geometry must be the drafter's: convert is gated by check, which checks the output
    against the target it is given. The default is synth's scaled drafters' (hidden 128, vocab
    2048); the producer fixtures are hidden 64, vocab 512 (``fixture_target()``)."""
    folder = SESSION_DIR / f"target-llama61-h{hidden}-v{vocab}"
    if not (folder / "config.json").exists():
        write_target(folder, "llama", 61, hidden=hidden, vocab=vocab)
    return folder


def fixture_target() -> pathlib.Path:
    """llama_target() of the producer fixtures' geometry (hidden 64, vocab 512)."""
    return llama_target(64, 512)


def convert(src, out, *args):
    """``weightcheck convert SRC OUT ARGS --json`` in-process; asserts success, returns the report.
    A conversion between aux-id conventions needs the target family: a test converting a drafter
    whose config does not say it passes ``--target llama_target()`` (or another target)."""
    r = run_cli("convert", src, out, *args, "--json")
    assert r.exit_code == 0, r
    return r.json


def refused(src, out, *args):
    """A convert that must be refused: exit 2, one line on stderr, no traceback. Returns stderr."""
    r = run_cli("convert", src, out, *args)
    assert r.exit_code == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("weightcheck: error:"), r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    return lines[0]


def compare(a, b, *args) -> dict:
    r = run_cli("compare", a, b, "--json", *args)
    assert r.exit_code in (0, 1), r
    return r.json


def check(src, engine, target=None) -> dict:
    args = ["check", src, "--engine", engine, "--json"]
    if target is not None:
        args += ["--target", target]
    r = run_cli(*args)
    assert r.exit_code in (0, 1), r
    return r.json


def errors_of(report: dict) -> list:
    return [(f["code"], f["message"]) for f in report["findings"] if f["severity"] == "error"]


def captured(src, engine, target) -> list | None:
    """The 0-based target layers whose outputs ``engine`` captures for drafter ``src``."""
    return check(src, engine, target)["engine"]["aux_layers"].get("captures_output_of_layers")


# ---------------------------------------------------------------------------------------------
# reading outputs
def aux_ids(cfg: dict):
    """Aux layer ids wherever a config keeps them (top level first, then eagle_config)."""
    if isinstance(cfg.get("eagle_aux_hidden_state_layer_ids"), list):
        return cfg["eagle_aux_hidden_state_layer_ids"]
    return (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")


def canon(name: str) -> str:
    """midlayer.* and layers.0.* are the same tensors (the only rename the three layouts need)."""
    return "midlayer." + name[len("layers.0.") :] if name.startswith("layers.0.") else name


def weight_files(folder) -> list[pathlib.Path]:
    return sorted(p for p in pathlib.Path(folder).iterdir() if p.name.endswith(".safetensors"))


def tensor_bytes(folder, canonical: bool = True) -> dict:
    """{name: (dtype, shape, raw bytes)} over every .safetensors file of ``folder``, read with
    safetensors.safe_open."""
    import torch
    from safetensors import safe_open

    out = {}
    for path in weight_files(folder):
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                name = canon(k) if canonical else k
                assert name not in out, f"{name} twice in {folder}"
                out[name] = (str(t.dtype).replace("torch.", ""), tuple(t.shape), raw)
    return out


def torch_tensors(folder, canonical: bool = True) -> dict:
    from safetensors.torch import load_file

    out = {}
    for path in weight_files(folder):
        for k, v in load_file(str(path)).items():
            out[canon(k) if canonical else k] = v
    return out


def header(path) -> tuple[dict, dict]:
    """(tensors, __metadata__) of one safetensors file, parsed here (8-byte length + JSON)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        obj = json.loads(f.read(n))
    meta = obj.pop("__metadata__", {})
    return obj, meta


# ---------------------------------------------------------------------------------------------
# the source is never touched, nothing is left behind
def snapshot(folder) -> dict:
    """{relative path: (sha256, size, mtime_ns)} of every file below ``folder`` (symlinks followed)."""
    folder = pathlib.Path(folder)
    out = {}
    for root, dirs, files in os.walk(folder, followlinks=True):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = pathlib.Path(root) / name
            if p.is_dir():
                out[str(p.relative_to(folder))] = "dir-link"
                continue
            st = p.stat()
            out[str(p.relative_to(folder))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                st.st_size,
                st.st_mtime_ns,
            )
    return out


def leftovers(parent) -> list[str]:
    """convert's temporary folders in ``parent`` (a killed run's, or a replaced OUT moved aside)."""
    return sorted(e for e in os.listdir(parent) if TMP_MARK in e)


# ---------------------------------------------------------------------------------------------
# building inputs
def write_target(
    folder,
    model_type: str,
    layers: int,
    hidden: int = 128,
    vocab: int = 2048,
    architecture: str = "LlamaForCausalLM",
    seed: int = 11,
) -> pathlib.Path:
    """A target model as weightcheck reads one: config.json plus a safetensors file holding the
    embedding and lm_head (and a norm), with deterministic BF16 values."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "architectures": [architecture],
        "model_type": model_type,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
        "intermediate_size": 4 * hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    n = vocab * hidden * 2
    tensors = [
        OutTensor(
            "model.embed_tokens.weight", "BF16", (vocab, hidden), synth.random_data("BF16", n, seed)
        ),
        OutTensor(
            "model.norm.weight",
            "BF16",
            (hidden,),
            synth.random_data("BF16", hidden * 2, seed + 1, near_one=True),
        ),
        OutTensor(
            "lm_head.weight", "BF16", (vocab, hidden), synth.random_data("BF16", n, seed + 2)
        ),
    ]
    write_file(str(folder / "model.safetensors"), tensors, {"format": "pt"})
    return folder


def with_aux_ids(cfg: dict, ids, model_type: str | None = None) -> dict:
    """A copy of a SpecForge-style config with other aux ids (and model_type)."""
    cfg = json.loads(json.dumps(cfg))
    cfg.setdefault("eagle_config", {})["eagle_aux_hidden_state_layer_ids"] = list(ids)
    if model_type is not None:
        cfg["model_type"] = model_type
    return cfg


def repo_files(folder) -> dict:
    return {p.name: p for p in pathlib.Path(folder).iterdir() if p.is_file()}
