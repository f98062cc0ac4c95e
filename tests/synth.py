"""Synthetic drafters from a config, in any dialect: the bundled example, the tests and bench/.

The weights are deterministic pseudo-random values of sane magnitude (never NaN/Inf), norms near
1 (but not exactly 1), and a valid d2t/t2d pair; no torch or numpy needed, and a full-size Kimi-K2
drafter (2.4 GB) is written at disk speed.
"""

from __future__ import annotations

import json
import os
import random
import struct

from weightcheck.model import config as config_mod
from weightcheck.model import dialects, inventory
from weightcheck.storage.header import CONFIG_DTYPES
from weightcheck.storage.writer import OutTensor, write_file

# high byte of a little-endian bf16 (sign + 7 exponent bits) -> a magnitude in [2^-9, 2^-2)
_BF16_HI = bytes((b & 0x80) | (0x3B + (b & 0x7F) % 4) for b in range(256))
# f16: sign | 5 exponent bits | 2 mantissa bits -> exponents 8..12 (2^-7 .. 2^-3)
_F16_HI = bytes((b & 0x80) | ((8 + (b >> 2) % 5) << 2) | (b & 3) for b in range(256))
# f32 highest byte: sign + 7 exponent bits -> like bf16
_F32_HI = _BF16_HI

_BLOCK = 1 << 20


def _random_block(dtype: str, rng: random.Random, n: int, near_one: bool = False) -> bytes:
    buf = bytearray(rng.randbytes(n))
    if dtype == "BF16":
        if near_one:
            buf[1::2] = b"\x3f" * (n // 2)
            buf[0::2] = bytes(b | 0x80 for b in buf[0::2])  # [1, 2)
            buf[0::2] = bytes(0x80 | (b & 0x07) for b in buf[0::2])  # 1.0 .. 1.05
        else:
            buf[1::2] = buf[1::2].translate(_BF16_HI)
    elif dtype == "F16":
        if near_one:
            buf[1::2] = b"\x3c" * (n // 2)
            buf[0::2] = bytes(b & 0x1F for b in buf[0::2])
        else:
            buf[1::2] = buf[1::2].translate(_F16_HI)
    elif dtype == "F32":
        if near_one:
            buf[3::4] = b"\x3f" * (n // 4)
            buf[2::4] = bytes(0x80 | (b & 0x07) for b in buf[2::4])
        else:
            buf[3::4] = buf[3::4].translate(_F32_HI)
    return bytes(buf)


def random_data(dtype: str, nbytes: int, seed: int, near_one: bool = False):
    """A data callable for OutTensor producing ``nbytes`` deterministic bytes."""

    def produce(write):
        rng = random.Random(seed)
        left = nbytes
        block = _random_block(dtype, rng, min(_BLOCK, nbytes), near_one) if nbytes else b""
        while left > 0:
            write(block[: min(left, len(block))])
            left -= len(block)

    return produce


def vocab_maps(vocab: int, draft_vocab: int, seed: int = 0) -> tuple[bytes, bytes]:
    """(d2t as I64 bytes, t2d as BOOL bytes): Vd distinct target ids, sorted."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(vocab), draft_vocab))
    d2t = struct.pack(f"<{draft_vocab}q", *[t - i for i, t in enumerate(ids)])
    t2d = bytearray(vocab)
    for t in ids:
        t2d[t] = 1
    return d2t, bytes(t2d)


def drafter_tensors(
    cfg: dict,
    dialect: str = "specforge",
    seed: int = 0,
    include_embed: bool = False,
    skip=(),
    layers: int = 1,
) -> list[OutTensor]:
    """Every tensor the config's inventory expects for ``layers`` decoder layers (layer 0 only
    by default, whatever num_hidden_layers says), named in ``dialect``."""
    norm = config_mod.normalize(cfg)
    arch = inventory.by_name("llama_eagle3")
    for a in inventory.architectures():
        if (cfg.get("architectures") or [None])[0] in a.config_architectures:
            arch = a
    inv = inventory.expected(arch, norm.symbols(), layers)
    d = dialects.by_name(dialect)
    model_dtype = CONFIG_DTYPES.get(str(norm.get("dtype", "bfloat16")).lower(), "BF16")
    sym = norm.symbols()
    d2t = t2d = None
    if "d2t" in inv.tensors or "t2d" in inv.tensors:
        d2t, t2d = vocab_maps(sym["V"], sym["Vd"], seed)
    out = []
    for i, (name, e) in enumerate(inv.tensors.items()):
        if name in skip or (name == "embed_tokens.weight" and not include_embed):
            continue
        if e.shape is None:
            raise ValueError(f"{name}: {e.problem}")
        dtype = e.dtype or model_dtype
        t = OutTensor(d.from_canonical(name), dtype, tuple(e.shape), b"")
        if name == "d2t":
            t.data = d2t
        elif name == "t2d":
            t.data = t2d
        else:
            near_one = (
                name.endswith("norm.weight") or ".fc_norm." in name or name.startswith("fc_norm.")
            )
            t.data = random_data(dtype, t.nbytes, seed * 1000 + i, near_one)
        out.append(t)
    return out


def write_drafter(
    out_dir: str,
    cfg: dict,
    dialect: str = "specforge",
    seed: int = 0,
    include_embed: bool = False,
    skip=(),
    metadata=None,
    layers: int = 1,
) -> str:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tensors = drafter_tensors(cfg, dialect, seed, include_embed, skip, layers)
    path = os.path.join(out_dir, "model.safetensors")
    write_file(path, tensors, metadata or {"format": "pt"})
    return path


# A tiny MLA drafter (Eagle3DeepseekV2ForCausalLM): the Kimi-K2.5 MLA layout scaled down, with
# midlayer.* names (TorchSpec's native export) and d2t/t2d for a 400-token draft vocabulary. The
# tests' MLA drafter (helpers.builders.MLA_CFG) and the bundled example's (examples/make_examples.py).
KIMI_K25_MLA = {
    "architectures": ["Eagle3DeepseekV2ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 128,
    "intermediate_size": 320,
    "num_attention_heads": 4,
    "num_hidden_layers": 1,
    "q_lora_rank": 96,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "vocab_size": 2048,
    "draft_vocab_size": 400,
    "torch_dtype": "bfloat16",
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
}


def scaled_config(
    cfg: dict,
    hidden: int = 128,
    intermediate: int = 320,
    heads: int = 4,
    head_dim: int = 32,
    vocab: int = 2048,
    draft_vocab: int = 400,
) -> dict:
    """A copy of a real drafter config with its sizes scaled down (key layout kept as it is)."""
    out = json.loads(json.dumps(cfg))
    kvh = (
        heads
        if cfg.get("num_key_value_heads") == cfg.get("num_attention_heads")
        else max(1, heads // 4)
    )
    sizes = {
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kvh,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab,
    }
    layer = out.get("transformer_layer_config")
    for k, v in sizes.items():
        if k in out:
            out[k] = v
        if isinstance(layer, dict) and k in layer:
            layer[k] = v
    if "target_hidden_size" in out:
        out["target_hidden_size"] = hidden
    for k in ("bos_token_id", "eos_token_id"):
        if isinstance(out.get(k), int) and out[k] >= vocab:
            out[k] = vocab - 2 + (k == "eos_token_id")
    return out
