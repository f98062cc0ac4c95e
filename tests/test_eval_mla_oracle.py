"""``weightcheck eval``'s MLA drafter forward against transformers' and vLLM's own code (issue #25).

Opt-in group (marker ``engine``): ``python -m pytest -m engine tests/test_eval_mla_oracle.py``.
The oracle (tests/engine/mla_eval_oracle.py) runs in vLLM's side venv (``bash
tests/engine/setup_vllm_venv.sh``: vllm 0.32.0 CPU, transformers 5.19.0); without it the test is
skipped.

Why transformers' attention and not the engines' whole drafter: neither engine's MLA attention
runs on a plain CPU torch — SGLang's ``DeepseekV2AttentionMLA`` dispatches to absorbed-MLA kernels
of sgl-kernel (not installed: no CPU build of it here) behind its RadixAttention/ForwardBatch
machinery, vLLM's ``DeepseekV2MLAAttention`` to the AMX/CPU MLA backends behind a KV-cache
manager and forward context (docs/mla-drafters.md §9.1). What the engines' MLA computes is
DeepSeek-V2's attention, which transformers' ``DeepseekV3Attention`` computes in plain torch,
naive form and latent cache; its rotation is cross-checked against vLLM's own DeepSeek-YaRN
module (``"rope": "vllm"``: vLLM's ``get_rope`` built as ``DeepseekV2MLAAttention`` builds it,
and vLLM's softmax scale), swapped into the same attention.

The same drafters (synthetic, float32 unless said, their own embedding) and inputs on both sides;
weightcheck's ``Eagle3Drafter.step_logits`` against the oracle's logits of every unrolled step
(the step-0 keys of columns <= t and column t's keys at steps 1..k, transformers' DynamicCache
with a 4D mask): within 1e-4 in float32 (measured: at most 1.7e-5, logits up to ~8; step 0
with vLLM's rotary bit-equal), the same drafts everywhere; in bfloat16 (both sides rounding
their own way) the same drafts at >= 95% of the positions.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import ROOT
from helpers.engine import side_python

pytestmark = pytest.mark.engine
torch = pytest.importorskip("torch")

import synth  # noqa: E402

STEPS, S = 3, 24
BASE = dict(
    synth.KIMI_K25_MLA,
    torch_dtype="float32",
    rms_norm_eps=1e-5,  # not transformers' 1e-6 for the q_a/kv_a norms: the engines' eps counts
    rope_theta=50000.0,
    max_position_embeddings=4096,
)
KIMI_YARN = {  # Kimi-K2's own rope_scaling, its ranges scaled to the test's few positions
    "type": "yarn",
    "factor": 16.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 1.0,
    "beta_slow": 1.0,
}
CASES = {
    # name: (config changes, layers written)
    "default-rope": ({}, 1),
    "yarn-kimi": ({"rope_scaling": KIMI_YARN}, 1),
    # mscale != mscale_all_dim: cos/sin scaled and the softmax scale's mscale^2 both matter
    "yarn-mscale": (
        {
            "rope_scaling": {
                "type": "yarn",
                "factor": 8.0,
                "mscale": 1.0,
                "mscale_all_dim": 0.707,
                "original_max_position_embeddings": 64,
                "beta_fast": 32,
                "beta_slow": 1,
            }
        },
        1,
    ),
    "q-proj-fc-norm-norm-output": (
        {"q_lora_rank": None, "fc_norm": True, "norm_output": True},
        1,
    ),
    "two-layers": ({"num_hidden_layers": 2, "rope_scaling": KIMI_YARN}, 2),
    "bf16-yarn": ({"torch_dtype": "bfloat16", "rope_scaling": KIMI_YARN}, 1),
}
ROPES = ("transformers", "vllm")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    from safetensors.torch import save_file

    py = side_python("vllm")
    root = tmp_path_factory.mktemp("eval-mla-oracle")
    g = torch.Generator().manual_seed(0)
    aux = torch.randn(S, 3 * BASE["hidden_size"], generator=g)
    ids = torch.randint(0, BASE["vocab_size"], (S,), generator=g)
    inputs = str(root / "inputs.safetensors")
    save_file({"aux": aux, "input_ids": ids}, inputs)
    jobs = []
    for name, (changes, layers) in CASES.items():
        cfg = {**BASE, **changes}
        folder = str(root / name)
        synth.write_drafter(folder, cfg, seed=7, include_embed=True, layers=layers)
        for rope in ROPES:
            jobs.append(
                {
                    "name": f"{name}/{rope}",
                    "drafter": folder,
                    "inputs": inputs,
                    "out": str(root / f"{name}-{rope}.safetensors"),
                    "steps": STEPS,
                    "rope": rope,
                    "dtype": cfg["torch_dtype"],
                }
            )
    (root / "jobs.json").write_text(json.dumps(jobs, indent=1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    p = subprocess.run(
        [py, str(ROOT / "tests" / "engine" / "mla_eval_oracle.py"), str(root / "jobs.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        cwd=str(root),
    )
    assert p.returncode == 0, p.stderr[-3000:]
    said = {r["name"]: r for r in map(json.loads, p.stdout.strip().splitlines())}
    assert set(said) == {j["name"] for j in jobs}
    return {"aux": aux, "ids": ids, "jobs": {j["name"]: j for j in jobs}, "said": said}


def _ours(folder: str, dtype: str):
    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.model.drafter import load_drafter

    return Eagle3Drafter(load_drafter(folder), dtype=dtype)


def _compare(oracle, name: str, rope: str):
    from safetensors.torch import load_file

    job = oracle["jobs"][f"{name}/{rope}"]
    m = _ours(job["drafter"], job["dtype"])
    with torch.inference_mode():
        ours = torch.stack(list(m.step_logits(oracle["aux"], oracle["ids"], STEPS))).float()
    theirs = load_file(job["out"])["logits"]
    assert ours.shape == theirs.shape == (STEPS, S, BASE["draft_vocab_size"])
    return m, ours, theirs, oracle["said"][f"{name}/{rope}"]


@pytest.mark.parametrize("rope", ROPES)
@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("bf16")])
def test_unrolled_logits_equal_the_oracles_in_float32(oracle, name, rope):
    m, ours, theirs, said = _compare(oracle, name, rope)
    diff = (ours - theirs).abs().amax(dim=(1, 2))
    print(name, rope, said["rope_class"], "max |diff| per step", [f"{x:.1e}" for x in diff])
    assert float(diff.max()) <= 1e-4, diff
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    # the softmax scale, mscale^2 included, is the oracle's
    assert m.layers[0].attn.scaling == pytest.approx(said["scaling"], rel=1e-12)


def test_step0_with_vllms_rotary_is_bit_equal(oracle):
    """Step 0 (plain causal attention) with vLLM's DeepSeek-YaRN rotary: the same float32 bits."""
    for name in ("default-rope", "yarn-kimi", "yarn-mscale"):
        _, ours, theirs, said = _compare(oracle, name, "vllm")
        assert torch.equal(ours[0], theirs[0]), (name, float((ours[0] - theirs[0]).abs().max()))
    assert said["rope_class"] == "DeepseekScalingRotaryEmbedding"


def test_yarn_is_not_a_no_op(oracle):
    """The yarn cases are not plain rope in disguise: the scale and the logits differ."""
    _, plain, _, _ = _compare(oracle, "default-rope", "vllm")
    m, yarn, _, said = _compare(oracle, "yarn-kimi", "vllm")
    assert said["scaling"] > 1.5 * (32 + 16) ** -0.5  # mscale_all_dim 1, factor 16: x 1.63
    assert float((plain - yarn).abs().max()) > 0.1


@pytest.mark.parametrize("rope", ROPES)
def test_bfloat16_drafts_agree(oracle, rope):
    _, ours, theirs, _ = _compare(oracle, "bf16-yarn", rope)
    same = (ours.argmax(-1) == theirs.argmax(-1)).float().mean()
    print("bfloat16", rope, f"drafts agree at {float(same):.3f}")
    assert float(same) >= 0.95
