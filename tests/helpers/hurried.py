"""Drafters a hurried user writes (issue #31): each a realistic deviation from the SpecForge
fixture, built at the byte level — a full-vocabulary head beside a reduced d2t, an fc exported
transposed, a hand-edited size of 0 or below, a head left out, a plain language model (GPT-2)
given as a drafter, the state_dict of a compiled model, vocab_size set to the draft vocabulary's,
a d2t of target ids, only the weights downloaded, a head left in float32, a d2t saved as [1, n],
a t2d saved as target ids, a config copied from a GELU model, a max_position_embeddings shorter
than the target's.
tests/test_root_causes.py checks what each command says of them;
tests/test_fix_commands.py runs every command printed for them.
"""

from __future__ import annotations

import importlib.util
import pathlib

import synth
from conftest import PRODUCERS

from helpers.builders import (
    edit,
    i64_bytes,
    i64_values,
    read_config,
    read_tensors,
    write_checkpoint,
)
from weightcheck.storage.writer import OutTensor

SPECFORGE = PRODUCERS / "specforge-sglang"  # H 64, vocab 512, draft vocab 128, 3 aux layers
SPECULATORS = PRODUCERS / "speculators-train"  # the same sizes, speculators' names and config


def full_head(out) -> pathlib.Path:
    """lm_head of the full vocabulary [512, 64] beside the 128-entry d2t (draft_vocab_size 128)."""

    def head(m):
        h = m["lm_head.weight"]
        m[h.name] = OutTensor(h.name, h.dtype, (512, 64), synth.random_data("BF16", 512 * 128, 3))

    return edit(SPECFORGE, out, tensors=head)


def transposed_fc(out) -> pathlib.Path:
    """fc.weight stored [3H, H] = [192, 64] instead of [H, 3H] (same bytes)."""

    def flip(m):
        f = m["fc.weight"]
        m[f.name] = OutTensor(f.name, f.dtype, (192, 64), f.data)

    return edit(SPECFORGE, out, tensors=flip)


def sized(out, **sizes) -> pathlib.Path:
    """The config hand-edited: ``hidden_size=0``, ``intermediate_size=-128``, ..."""
    return edit(SPECFORGE, out, cfg=lambda c: c.update(sizes))


def headless(out, full_vocab: bool) -> pathlib.Path:
    """No lm_head: with ``full_vocab`` draft_vocab_size = vocab_size (512) and no d2t/t2d, else
    the fixture's reduced vocabulary (128) and its d2t/t2d."""
    if full_vocab:
        return edit(
            SPECFORGE,
            out,
            cfg=lambda c: c.update(draft_vocab_size=512),
            drop=("lm_head.weight", "d2t", "t2d"),
        )
    return edit(SPECFORGE, out, drop=("lm_head.weight",))


def mixed(out) -> pathlib.Path:
    """One speculators name (layers.0.*) in a midlayer.* checkpoint: a partial rename."""
    return edit(
        SPECFORGE,
        out,
        rename={"midlayer.mlp.down_proj.weight": "layers.0.mlp.down_proj.weight"},
    )


_GPT2_BLOCK = (
    ("ln_1.weight", (64,)),
    ("ln_1.bias", (64,)),
    ("attn.c_attn.weight", (64, 192)),
    ("attn.c_attn.bias", (192,)),
    ("attn.c_proj.weight", (64, 64)),
    ("attn.c_proj.bias", (64,)),
    ("ln_2.weight", (64,)),
    ("ln_2.bias", (64,)),
    ("mlp.c_fc.weight", (64, 256)),
    ("mlp.c_fc.bias", (256,)),
    ("mlp.c_proj.weight", (256, 64)),
    ("mlp.c_proj.bias", (64,)),
)


def gpt2(out, layers: int = 2) -> pathlib.Path:
    """A GPT-2 checkpoint as the Hub ships it (GPT2LMHeadModel, `n_layer`/`n_embd`, `h.N.*`
    names, float32): a plain language model, no drafter at all."""
    cfg = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_embd": 64,
        "n_head": 2,
        "n_layer": layers,
        "n_positions": 128,
        "n_ctx": 128,
        "vocab_size": 512,
    }
    seed = iter(range(1000))

    def t(name, shape):
        n = 1
        for d in shape:
            n *= d
        return OutTensor(name, "F32", shape, synth.random_data("F32", 4 * n, next(seed)))

    ts = [t("wte.weight", (512, 64)), t("wpe.weight", (128, 64))]
    ts += [t(f"h.{i}.{n}", s) for i in range(layers) for n, s in _GPT2_BLOCK]
    ts += [t("ln_f.weight", (64,)), t("ln_f.bias", (64,))]
    return write_checkpoint(out, cfg, ts)


def compiled(out) -> pathlib.Path:
    """``model.state_dict()`` of a ``torch.compile``d drafter: every name under ``_orig_mod.``."""
    return write_checkpoint(
        out,
        read_config(SPECFORGE),
        [
            OutTensor("_orig_mod." + t.name, t.dtype, t.shape, t.data)
            for t in read_tensors(SPECFORGE)
        ],
    )


def d2t_target_ids(out) -> pathlib.Path:
    """d2t holding the draft tokens' target ids (``hot_ids``), not ``hot_ids - arange``."""

    def ids(m):
        v = i64_values(m["d2t"].data)
        m["d2t"].data = i64_bytes([i + off for i, off in enumerate(v)])

    return edit(SPECFORGE, out, tensors=ids)


def f32_head(out) -> pathlib.Path:
    """lm_head left in float32 beside bfloat16 weights (cast all but one)."""

    def head(m):
        h = m["lm_head.weight"]
        n = h.shape[0] * h.shape[1]
        m[h.name] = OutTensor(h.name, "F32", h.shape, synth.random_data("F32", 4 * n, 4))

    return edit(SPECFORGE, out, tensors=head)


def d2t_rank2(out) -> pathlib.Path:
    """d2t saved as [1, n] (an ``unsqueeze(0)`` left in)."""

    def rank2(m):
        d = m["d2t"]
        m[d.name] = OutTensor(d.name, d.dtype, (1, d.shape[0]), d.data)

    return edit(SPECFORGE, out, tensors=rank2)


def nested_bin(out) -> pathlib.Path:
    """A training checkpoint's dict saved as the weights: pytorch_model.bin holding
    {"state_dict": ..., "epoch": 3} (needs torch to write)."""
    import torch

    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text((SPECFORGE / "config.json").read_text())
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "I64": torch.int64, "BOOL": torch.bool}
    state = {}
    for t in read_tensors(SPECFORGE):
        state[t.name] = torch.frombuffer(bytearray(t.data), dtype=dtypes[t.dtype]).reshape(t.shape)
    torch.save({"state_dict": state, "epoch": 3}, str(out / "pytorch_model.bin"))
    return out


def t2d_ids(out) -> pathlib.Path:
    """t2d saved as the target ids of the draft vocabulary (int64 [128], ``nonzero(mask)``)
    instead of the [512] bool mask."""

    def ids(m):
        t = m["t2d"]
        m[t.name] = OutTensor(
            t.name, "I64", (128,), i64_bytes([i for i, b in enumerate(t.data) if b])
        )

    return edit(SPECFORGE, out, tensors=ids)


def config_edit(out, **fields) -> pathlib.Path:
    """The fixture's weights with its config hand-edited: ``hidden_act="gelu"`` (a config copied
    from a GELU model), ``max_position_embeddings=128`` (shorter than target-llama's 256: a config
    copied from a short-context model, or the training run's sequence length written there)."""
    return edit(SPECFORGE, out, cfg=lambda c: c.update(fields))


ROPE_SCALING = {  # rope_scaling dicts as Hub configs write them, by type
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "yarn": {"rope_type": "yarn", "factor": 4.0},
    "linear": {"rope_type": "linear", "factor": 2.0},
}


def rope_scaled(out, kind: str) -> pathlib.Path:
    """max_position_embeddings 128 with the target's rope_scaling of ``kind`` copied in (and
    rope_parameters removed, as in a transformers 4 config)."""

    def cfg(c):
        c.pop("rope_parameters", None)
        c.update(max_position_embeddings=128, rope_scaling=ROPE_SCALING[kind])

    return edit(SPECFORGE, out, cfg=cfg)


FUSED = {  # fused tensor -> its parts, in the order they are concatenated (rows)
    "midlayer.self_attn.qkv_proj.weight": (
        "midlayer.self_attn.q_proj.weight",
        "midlayer.self_attn.k_proj.weight",
        "midlayer.self_attn.v_proj.weight",
    ),
    "midlayer.mlp.gate_up_proj.weight": (
        "midlayer.mlp.gate_proj.weight",
        "midlayer.mlp.up_proj.weight",
    ),
}


def fused(
    out, which=tuple(FUSED), extra_rows: int = 0, cfg=None, src=SPECFORGE, prefix="midlayer."
) -> pathlib.Path:
    """q/k/v and/or gate/up stored fused, as a vLLM/SGLang-internal export writes them
    (``qkv_proj.weight`` = cat([q, k, v]) [(nh + 2 nkv) hd, 2H], ``gate_up_proj.weight`` =
    cat([gate, up]) [2I, H]); ``extra_rows`` appends rows of zeros to each (negative: drops its
    last rows), ``cfg`` edits the config (a wrong fused shape either way); ``src``: the
    checkpoint fused (bfloat16), the SpecForge fixture by default; ``prefix``: its decoder
    layer's prefix (``layers.0.`` for speculators' names: ``which`` still names midlayer.*)."""

    def own(name):
        return prefix + name.removeprefix("midlayer.")

    def fuse(m):
        for name in which:
            parts = [m.pop(own(p)) for p in FUSED[name]]
            name = own(name)
            rows = sum(p.shape[0] for p in parts)
            cols = parts[0].shape[1]
            data = b"".join(p.data for p in parts) + bytes(2 * max(extra_rows, 0) * cols)
            data = data[: 2 * (rows + extra_rows) * cols]
            m[name] = OutTensor(name, parts[0].dtype, (rows + extra_rows, cols), data)

    return edit(src, out, cfg=cfg, tensors=fuse)


def both_spellings(out, which=tuple(FUSED), differ=()) -> pathlib.Path:
    """The parts kept and the fused tensor written beside them (a half-done export or merge):
    ``midlayer.self_attn.qkv_proj.weight`` beside q/k/v_proj, ``gate_up_proj`` beside
    gate/up_proj. ``differ``: the parts whose rows in the fused copy hold other values (seeded
    random; True: every part's), the others exactly the part's."""

    def add(m):
        for name in which:
            parts = [m[p] for p in FUSED[name]]
            rows, cols = sum(p.shape[0] for p in parts), parts[0].shape[1]
            data = b"".join(
                _bytes(synth.random_data(p.dtype, len(p.data), 11 + i), len(p.data))
                if differ is True or p.name in differ
                else p.data
                for i, p in enumerate(parts)
            )
            m[name] = OutTensor(name, parts[0].dtype, (rows, cols), data)

    return edit(SPECFORGE, out, tensors=add)


FUSED_BIAS = {  # a fused bias -> its parts (rows), with the config flag that builds them
    "midlayer.self_attn.qkv_proj.bias": (
        "attention_bias",
        ("midlayer.self_attn.q_proj.bias", "midlayer.self_attn.k_proj.bias",
         "midlayer.self_attn.v_proj.bias"),
    ),
    "midlayer.mlp.gate_up_proj.bias": (
        "mlp_bias",
        ("midlayer.mlp.gate_proj.bias", "midlayer.mlp.up_proj.bias"),
    ),
}  # fmt: skip
_BIASES = {  # what each flag adds to the fixture's layer (nh 2, nkv 1, hd 32, H 64, I 128)
    "attention_bias": (
        ("midlayer.self_attn.q_proj.bias", 64),
        ("midlayer.self_attn.k_proj.bias", 32),
        ("midlayer.self_attn.v_proj.bias", 32),
        ("midlayer.self_attn.o_proj.bias", 64),
    ),
    "mlp_bias": (
        ("midlayer.mlp.gate_proj.bias", 128),
        ("midlayer.mlp.up_proj.bias", 128),
        ("midlayer.mlp.down_proj.bias", 64),
    ),
}


def biased(out, flags=("attention_bias",), fuse=(), fuse_weights=False) -> pathlib.Path:
    """The config's ``flags`` (attention_bias, mlp_bias) set and the biases they build written
    (seeded bfloat16); ``fuse``: the fused biases (FUSED_BIAS) written in place of their parts;
    ``fuse_weights``: the weights beside them fused too (as an engine-internal export writes
    both)."""

    def add(m):
        for flag in flags:
            for i, (name, n) in enumerate(_BIASES[flag]):
                m[name] = OutTensor(name, "BF16", (n,), synth.random_data("BF16", 2 * n, 40 + i))
        fused_weights = [w for w, (f, _) in zip(FUSED, FUSED_BIAS.values()) if f in flags]
        for name, parts in [(w, FUSED[w]) for w in fused_weights if fuse_weights] + [
            (b, FUSED_BIAS[b][1]) for b in fuse
        ]:
            ts = [m.pop(p) for p in parts]
            data = b"".join(_bytes(t.data, t.nbytes) for t in ts)
            shape = (sum(t.shape[0] for t in ts), *ts[0].shape[1:])
            m[name] = OutTensor(name, ts[0].dtype, shape, data)

    return edit(SPECFORGE, out, cfg=lambda c: c.update({f: True for f in flags}), tensors=add)


def _bytes(data, n: int) -> bytes:
    """An OutTensor's data as bytes (a synth.random_data callable written out)."""
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    chunks = []
    data(chunks.append)
    return b"".join(chunks)[:n]


# every hurried drafter, by id: build(folder) -> folder
BUILDERS = {
    "full-head": full_head,
    "transposed-fc": transposed_fc,
    "hidden-0": lambda out: sized(out, hidden_size=0),
    "hidden-negative": lambda out: sized(out, hidden_size=-64),
    "intermediate-0": lambda out: sized(out, intermediate_size=0),
    "headless-full": lambda out: headless(out, full_vocab=True),
    "headless-reduced": lambda out: headless(out, full_vocab=False),
    "mixed": mixed,
    "gpt2": gpt2,
    "gpt2-one-block": lambda out: gpt2(out, layers=1),
    "compiled": compiled,
    "vocab-is-draft": lambda out: edit(
        SPECFORGE, out, cfg=lambda c: c.update(vocab_size=c["draft_vocab_size"])
    ),
    "d2t-target-ids": d2t_target_ids,
    "weights-only": lambda out: write_checkpoint(out, None, read_tensors(SPECFORGE)),
    "f32-head": f32_head,
    "d2t-rank2": d2t_rank2,
    "t2d-ids": t2d_ids,
    "gelu": lambda out: config_edit(out, hidden_act="gelu"),
    "short-context": lambda out: config_edit(out, max_position_embeddings=128),
    "fused": fused,
    "fused-qkv": lambda out: fused(out, which=("midlayer.self_attn.qkv_proj.weight",)),
    "fused-gate-up": lambda out: fused(out, which=("midlayer.mlp.gate_up_proj.weight",)),
    "fused-qkv-long": lambda out: fused(
        out, which=("midlayer.self_attn.qkv_proj.weight",), extra_rows=32
    ),
    "fused-qkv-short": lambda out: fused(
        out, which=("midlayer.self_attn.qkv_proj.weight",), extra_rows=-32
    ),
    "fused-speculators": lambda out: fused(out, src=SPECULATORS, prefix="layers.0."),
    "both-qkv": lambda out: both_spellings(out, which=("midlayer.self_attn.qkv_proj.weight",)),
    "both-gate-up": lambda out: both_spellings(out, which=("midlayer.mlp.gate_up_proj.weight",)),
    "both-differ": lambda out: both_spellings(out, differ=True),
    # q differs, kept from qkv_proj's rows (it sorts after q_proj); v differs, kept from v_proj
    "both-differ-q": lambda out: both_spellings(
        out,
        which=("midlayer.self_attn.qkv_proj.weight",),
        differ=("midlayer.self_attn.q_proj.weight",),
    ),
    "both-differ-v": lambda out: both_spellings(
        out,
        which=("midlayer.self_attn.qkv_proj.weight",),
        differ=("midlayer.self_attn.v_proj.weight",),
    ),
    # attention_bias with its q/k/v/o biases; the same with q/k/v and their biases fused;
    # mlp_bias with gate/up and their biases fused (vLLM loads them, SGLang drops the biases)
    "biased-attention": biased,
    "fused-bias-qkv": lambda out: biased(
        out, fuse=("midlayer.self_attn.qkv_proj.bias",), fuse_weights=True
    ),
    "fused-bias-mlp": lambda out: biased(
        out, flags=("mlp_bias",), fuse=("midlayer.mlp.gate_up_proj.bias",), fuse_weights=True
    ),
    # the config's intermediate_size halved (64): gate_up [256, 64] is twice the rows it implies
    "fused-gate-up-wide": lambda out: fused(
        out,
        which=("midlayer.mlp.gate_up_proj.weight",),
        cfg=lambda c: c.update(intermediate_size=64),
    ),
}
if importlib.util.find_spec("torch") is not None:  # writing it needs torch (not imported here)
    BUILDERS["nested-bin"] = nested_bin


def all_of(root) -> dict[str, pathlib.Path]:
    """Every hurried drafter, by id, written under ``root``."""
    root = pathlib.Path(root)
    return {k: build(root / k) for k, build in BUILDERS.items()}
