"""``weightcheck eval`` on MLA drafters and on drafters of several decoder layers (issue #25):
the bundled MLA example through the CLI, causal unrolling, the YaRN rotation against numbers
worked out by hand, later layers as vLLM builds them, every dialect alike, the refusals.

The agreement with transformers' and vLLM's own MLA code is tests/test_eval_mla_oracle.py
(``-m engine``)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import CONFIGS, example_module, run_cli
from helpers.bad_input import one_error_line

torch = pytest.importorskip("torch")

import synth  # noqa: E402

SAMPLES, SEQ = 4, 24


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """The bundled example's MLA drafter (examples/make_examples.py MLA_CONFIG) and data built
    from it by examples/make_eval_data.py (its step-0 drafts accepted ~70% of the time)."""
    root = tmp_path_factory.mktemp("eval-mla")
    cfg = example_module("make_examples", "make_examples").MLA_CONFIG
    mla = str(root / "kimi-k25-mla-drafter")
    synth.write_drafter(mla, cfg, seed=3)
    made = example_module("make_eval_data", "make_eval_data").write_eval_example(
        mla, str(root / "data"), samples=SAMPLES, seq=SEQ
    )
    return {"root": root, "mla": mla, "cfg": cfg, **made}


def _model(path, embed=None, dtype="float32"):
    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.model.drafter import load_drafter

    return Eagle3Drafter(load_drafter(str(path)), dtype=dtype, embed=embed)


def _target_embed(ex):
    from weightcheck.eval.target import TargetSide

    return TargetSide(ex["target"]).embed


def _sample(ex):
    from weightcheck.eval.data import open_data

    return next(open_data(ex["specforge"]).samples())


def _logits(m, s, steps=3):
    with torch.inference_mode():
        return torch.stack(list(m.step_logits(s.aux, s.input_ids, steps)))


# -- the bundled example -------------------------------------------------------------------------
def test_the_bundled_mla_drafter_gives_a_report(ex):
    r = run_cli("eval", ex["mla"], "--hidden-states", ex["specforge"], "--target", ex["target"])
    assert r.exit_code == 0, r.stderr
    assert "expected acceptance length, 3-step chain" in r.stdout
    j = run_cli(
        "eval", ex["mla"], "--hidden-states", ex["specforge"], "--target", ex["target"], "--json"
    ).json
    d = j["drafters"][0]
    assert d["dtype"] == "bfloat16" and d["draft_vocab"] == 400 and d["embed_from"] == "target"
    assert d["steps"][0]["acc"] > 0.4 and d["tau"] > 1.4


def test_the_acceptance_built_in_is_found_in_float32(ex):
    """make_eval_data made the next token the MLA drafter's own step-0 draft at known positions:
    eval finds those hits (float32, where drafts do not depend on batching)."""
    r = run_cli(
        "eval", ex["mla"], "--hidden-states", ex["specforge"], "--target", ex["target"],
        "--dtype", "float32", "--steps", "1", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    s0 = r.json["drafters"][0]["steps"][0]
    acc, drafted = ex["built_step0"]
    assert s0["given"] == drafted + SAMPLES  # column S-2 counts too (test_eval.py)
    assert abs(s0["hits"] - acc) <= 1 and s0["hits"] > 0.4 * s0["given"]


def test_mla_unrolling_is_causal(ex):
    """Step k at column t sees the target states of columns <= t and tokens up to t+k+1 only."""
    m = _model(ex["mla"], _target_embed(ex))
    s = _sample(ex)
    full = m.unroll(s.aux, s.input_ids, 3)
    n = 10
    assert torch.equal(full[:, :n], m.unroll(s.aux[:n], s.input_ids[: n + 3], 3))
    ids = s.input_ids.clone()
    ids[n + 3] = (ids[n + 3] + 1) % 2048
    changed = m.unroll(s.aux, ids, 3)
    assert torch.equal(changed[:, :n], full[:, :n]) and not torch.equal(changed, full)


def test_every_mla_dialect_gives_the_same_logits(ex, tmp_path):
    """TorchSpec's midlayer.*, the vLLM/speculators layers.0.* and ModelOpt's names: one drafter."""
    s = _sample(ex)
    embed = _target_embed(ex)
    ref = _logits(_model(ex["mla"], embed), s)
    for dialect in ("speculators", "modelopt"):
        other = tmp_path / dialect
        synth.write_drafter(str(other), ex["cfg"], dialect=dialect, seed=3)
        assert torch.equal(_logits(_model(other, embed), s), ref), dialect


def test_mla_drafts_are_target_ids_through_d2t(ex):
    m = _model(ex["mla"], _target_embed(ex))
    drafts = set(m.unroll(_sample(ex).aux, _sample(ex).input_ids, 2).flatten().tolist())
    assert drafts <= set(m.vocab_map.targets) and max(drafts) >= 400


# -- the rotation, by hand -----------------------------------------------------------------------
def _rope_of(cfg, kind="mla"):
    from weightcheck.eval.rope import llama_rope, mla_rope
    from weightcheck.model import config as config_mod

    norm = config_mod.normalize(cfg)
    if kind == "mla":
        return mla_rope(norm.get("qk_rope_head_dim"), norm, cfg, "x")
    return llama_rope(norm.get("head_dim"), norm, "x")


def test_kimi_k2_yarn_by_hand():
    """Kimi-K2's rope_scaling (factor 32, original 4096, beta_fast = beta_slow = 1, mscale =
    mscale_all_dim = 1), rope_theta 50000, 64 rope dims: the correction range is
    64 ln(4096 / 2pi) / (2 ln 50000) = 19.16 -> [19, 20]: pairs 0..19 keep their frequency, 20..31
    are divided by 32; cos/sin unscaled (mscale / mscale_all_dim = 1); the softmax scale
    192^-0.5 x (0.1 ln 32 + 1)^2 = 0.07217 x 1.8133 = 0.13086."""
    cfg = {
        **synth.KIMI_K25_MLA,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    }
    r = _rope_of(cfg)
    assert 64 * math.log(4096 / (2 * math.pi)) / (2 * math.log(50000)) == pytest.approx(
        19.164, 1e-4
    )
    for i in range(32):
        plain = 50000.0 ** (-2 * i / 64)
        want = plain if i <= 19 else plain / 32
        assert float(r.inv_freq[i]) == pytest.approx(want, rel=1e-6), i
    assert r.mscale == 1.0 and r.interleaved
    assert r.softmax_mscale == pytest.approx((0.1 * math.log(32) + 1) ** 2)
    assert 192**-0.5 * r.softmax_mscale == pytest.approx(0.1308608, abs=1e-6)


def test_deepseek_v3_yarn_ramp_by_hand():
    """DeepSeek-V3's (factor 40, original 4096, beta 32/1, theta 10000, 64 dims): range
    [floor(10.47), ceil(22.51)] = [10, 23]; pair i in between mixes the two frequencies with
    weight (i - 10) / 13 on the interpolated one."""
    cfg = {
        **synth.KIMI_K25_MLA,
        "qk_rope_head_dim": 64,
        "rope_theta": 10000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
    }
    r = _rope_of(cfg)
    for i in (0, 10, 15, 22, 23, 31):
        plain = 10000.0 ** (-2 * i / 64)
        w = min(max((i - 10) / 13, 0.0), 1.0)
        want = plain / 40 * w + plain * (1 - w)
        assert float(r.inv_freq[i]) == pytest.approx(want, rel=1e-6), i
    assert r.softmax_mscale == pytest.approx((0.1 * math.log(40) + 1) ** 2)


def test_mscale_unequal_scales_cos_and_sin_by_hand():
    """mscale 1, mscale_all_dim 0.707, factor 8: cos/sin times (0.1 ln 8 + 1) / (0.0707 ln 8 + 1),
    the softmax scale times (0.0707 ln 8 + 1)^2 (both engines; transformers agrees)."""
    cfg = {
        **synth.KIMI_K25_MLA,
        "rope_scaling": {"type": "yarn", "factor": 8.0, "mscale": 1.0, "mscale_all_dim": 0.707},
    }
    r = _rope_of(cfg)
    lg = math.log(8)
    assert r.mscale == pytest.approx((0.1 * lg + 1) / (0.0707 * lg + 1))
    assert r.softmax_mscale == pytest.approx((0.0707 * lg + 1) ** 2)


def test_any_other_rope_type_is_deepseek_yarn_for_mla():
    """Both engines turn every non-default rope_scaling of an MLA layer into DeepSeek-YaRN."""
    cfg = {**synth.KIMI_K25_MLA, "rope_scaling": {"type": "linear", "factor": 4.0}}
    lin = _rope_of(cfg)
    yarn = _rope_of({**cfg, "rope_scaling": {"type": "yarn", "factor": 4.0}})
    assert torch.equal(lin.inv_freq, yarn.inv_freq) and lin.mscale == yarn.mscale


def test_llama_yarn_by_hand():
    """A Llama drafter's yarn (factor 4, no mscale keys): cos/sin times 0.1 ln 4 + 1; the
    rotation of the whole head in neox halves."""
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    cfg["rope_scaling"] = {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 64,
    }
    r = _rope_of(cfg, "llama")
    assert r.mscale == pytest.approx(0.1 * math.log(4) + 1) and not r.interleaved
    assert r.softmax_mscale == 1.0
    base, d = float(cfg.get("rope_theta") or 10000.0), 32
    assert float(r.inv_freq[0]) == pytest.approx(1.0)
    assert float(r.inv_freq[-1]) == pytest.approx(base ** (-(d - 2) / d) / 4, rel=1e-6)


def test_the_interleaved_rotation_rotates_pairs():
    """MLA's rotation turns pair (2i, 2i+1) by angle pos x inv_freq[i] (GPT-J layout)."""
    from weightcheck.eval.rope import Rope

    inv = torch.tensor([1.0, 0.5])
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    y = Rope(inv, interleaved=True)(x, torch.tensor([1]))
    want = [math.cos(1), math.sin(1), -math.sin(0.5), math.cos(0.5)]
    assert y[0].tolist() == pytest.approx(want, abs=1e-7)


# -- several decoder layers ----------------------------------------------------------------------
def _two_layers(tmp_path, name, base_cfg, zero_layer1=False, edit=None):
    """A two-layer drafter (layer 1 as layers.1.*); ``zero_layer1``: its o_proj and down_proj
    zero; ``edit``: that tensor's values times 1.5."""
    from safetensors.torch import load_file, save_file

    cfg = {**base_cfg, "num_hidden_layers": 2}
    folder = tmp_path / name
    synth.write_drafter(str(folder), cfg, seed=3, layers=2)
    w = load_file(str(folder / "model.safetensors"))
    for n in list(w):
        if zero_layer1 and n.startswith("layers.1.") and ("o_proj" in n or "down_proj" in n):
            w[n] = torch.zeros_like(w[n])
        if n == edit:
            w[n] = w[n] * 1.5
    save_file(w, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _header(folder) -> str:
    raw = (folder / "model.safetensors").read_bytes()
    return raw[8 : 8 + int.from_bytes(raw[:8], "little")].decode()


def _base(ex, kind):
    if kind == "mla":
        return ex["cfg"]
    return synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))


@pytest.mark.parametrize("kind", ["llama", "mla"])
def test_a_drafter_of_two_layers_runs(ex, tmp_path, kind):
    base = _base(ex, kind)
    two = _two_layers(tmp_path, "two", base)
    r = run_cli("eval", two, "--hidden-states", ex["specforge"], "--target", ex["target"], "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json["drafters"][0]["steps"][2]["trained_valid"] > 0


@pytest.mark.parametrize("kind", ["llama", "mla"])
def test_a_later_layer_that_adds_nothing_changes_nothing(ex, tmp_path, kind):
    """Layer 1 with o_proj and down_proj zero adds 0 to the residual stream: the two-layer
    drafter's logits are the one-layer drafter's, bit for bit, at every unrolled step."""
    from helpers.engine import variant

    two = _two_layers(tmp_path, "two", _base(ex, kind), zero_layer1=True)
    layer1 = [n for n in json.loads(_header(two)) if n.startswith("layers.1.")]
    one = variant(two, tmp_path / "one", drop=layer1, config={"num_hidden_layers": 1})
    s, embed = _sample(ex), _target_embed(ex)
    assert torch.equal(_logits(_model(two, embed), s), _logits(_model(one, embed), s))


@pytest.mark.parametrize("kind", ["llama", "mla"])
def test_a_later_layer_reads_input_layernorm_not_hidden_norm(ex, tmp_path, kind):
    """vLLM's later layers read input_layernorm(h) and never hidden_norm (llama_eagle3.py:131-138,
    deepseek_eagle3.py:127-134): changing layer 1's hidden_norm changes nothing, its
    input_layernorm changes the logits."""
    base = _base(ex, kind)
    s, embed = _sample(ex), _target_embed(ex)
    ref = _logits(_model(_two_layers(tmp_path, "ref", base), embed), s)
    hn = _two_layers(tmp_path, "hn", base, edit="layers.1.hidden_norm.weight")
    assert torch.equal(_logits(_model(hn, embed), s), ref)
    iln = _two_layers(tmp_path, "iln", base, edit="layers.1.input_layernorm.weight")
    assert not torch.equal(_logits(_model(iln, embed), s), ref)


def test_a_missing_later_layer_is_one_line(ex, tmp_path):
    cfg = {**ex["cfg"], "num_hidden_layers": 2}
    folder = tmp_path / "short"
    synth.write_drafter(str(folder), cfg, seed=3)  # layer 0 only
    r = run_cli("eval", folder, "--hidden-states", ex["specforge"], "--target", ex["target"])
    one_error_line(r, "has no layers.1.", "cannot run", where=folder)


# -- refusals: one line, exit 2 ------------------------------------------------------------------
REFUSED = [
    ({"rope_interleave": False}, ["rope_interleave", "SGLang", "vLLM"]),
    ({"rope_scaling": {"type": "yarn", "factor": 4.0, "attn_factor": 0.9}}, ["attn_factor"]),
    (
        {"rope_scaling": {"type": "yarn", "factor": 4.0, "attention_factor": 1.0}},
        ["attention_factor", "deepseek_llama_scaling"],
    ),
    ({"rope_scaling": {"type": "yarn", "extrapolation_factor": 2}}, ["extrapolation_factor"]),
    ({"rope_scaling": {"type": "yarn"}}, ["has no factor"]),
    ({"hidden_act": "gelu"}, ["hidden_act 'gelu'", "silu"]),
    ({"qk_rope_head_dim": 8}, ["q_b_proj", "the config implies"]),
]


@pytest.mark.parametrize("change,words", REFUSED, ids=[str(c) for c, _ in REFUSED])
def test_what_eval_does_not_run_is_refused_in_one_line(ex, tmp_path, change, words):
    folder = tmp_path / "d"
    synth.write_drafter(str(folder), ex["cfg"], seed=3)
    cfg = {**ex["cfg"], **change}
    (folder / "config.json").write_text(json.dumps(cfg))
    r = run_cli("eval", folder, "--hidden-states", ex["specforge"], "--target", ex["target"])
    one_error_line(r, *words, where=folder)


@pytest.mark.parametrize(
    "rope_scaling,words",
    [
        ({"type": "dynamic", "factor": 2.0}, ["'dynamic'", "yarn"]),
        ({"type": "yarn", "factor": 2.0, "attention_factor": 0.8}, ["attention_factor"]),
        ({"type": "yarn", "factor": 2.0, "mscale": 0, "mscale_all_dim": 1}, ["mscale"]),
    ],
)
def test_llama_rope_scalings_eval_does_not_run(ex, tmp_path, rope_scaling, words):
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    cfg["rope_scaling"] = rope_scaling
    folder = tmp_path / "l"
    synth.write_drafter(str(folder), cfg, seed=1)
    r = run_cli("eval", folder, "--hidden-states", ex["specforge"], "--target", ex["target"])
    one_error_line(r, *words, where=folder)
