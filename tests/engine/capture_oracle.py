"""Capture oracle: which target hidden state lands in each aux slot, by the engines' OWN code.

For a drafter config and a target (family, layer count), each engine and model runner is asked,
with its own functions, in its side venv (marker ``engine``):

1. **where the runner reads the ids**: SGLang 0.5.23
   ``spec_aux_hidden_state.py _resolve_eagle_aux_hidden_state`` (over the draft hf_config SGLang's
   own ``get_config`` builds); vLLM 0.32's V1 runner ``GPUModelRunner._setup_eagle3_aux_hidden_
   state_outputs`` / ``_get_eagle3_aux_layers_from_config`` (v1/worker/gpu_model_runner.py; the CPU
   runner is V1) and V2 runner ``set_eagle3_aux_hidden_state_layers`` /
   ``get_eagle3_aux_layers_from_config`` (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py), over
   the draft hf_config vLLM builds (``get_config``, then ``EAGLEConfig(..., method="eagle3")`` as
   config/speculative.py does);
2. **what the target does with them**: the target class's own setter (SGLang
   ``set_eagle3_layers_to_capture``, vLLM ``set_aux_hidden_state_layers``) and its own model
   ``forward`` — SGLang ``LlamaModel.forward`` (models/llama.py) and ``DeepseekV2Model.forward``
   (models/deepseek_v2.py, the DeepSeek-V3 / Kimi-K2 path, with SGLang's
   ``AuxHiddenStatePacker``), vLLM ``LlamaModel.forward`` (``EagleModelMixin._maybe_add_hidden_
   state``) and ``DeepseekV2Model.forward`` (models/deepseek_v2.py).

A full forward cannot run on CPU (SGLang's MLA and MoE need sgl-kernel; a 61-layer Kimi-K2 is
hundreds of GB), so the forward loop runs with its decoder layers replaced by **tagging stubs**:
layer i returns a hidden state holding the number i (the embedding holds -1), so a captured
tensor says whose output it is. A stub also does what the real layer does with the capture hook
it is handed (SGLang passes the collector to the layer, whose ``attn_boundary.prepare`` captures
the residual stream ENTERING the layer: layers/layer_boundary/stage.py ``_prepare_attention``):
it captures the hidden state it was given, i.e. the output of layer i-1. Everything else — which
ids are read, how they are shifted, which loop index captures, the packer, the final capture
after the loop — is the engines' code. Infrastructure the loop touches but that does not decide
what is captured (SGLang's residual-stream batch object, the expert-distribution recorder, the
pipeline-parallel group: one rank) is replaced by pass-through stand-ins, listed in ``STANDINS``.

Usage (inside a side venv)::

    python capture_oracle.py sglang|vllm < cases.json > results.json

cases: ``[{"family": "llama"|"deepseek_v3"|"kimi_k2", "num_layers": L, "config": {...}}]``.
From the project's Python, :func:`run` (one subprocess per engine for a whole batch) is the
interface the generative differential calls: ``run(cases) -> [{"sglang": R, "vllm-V1": R,
"vllm-V2": R}]`` with ``R = {"ids": the ids the runner read (None: none, the target's default),
"slots": [the target layer whose output fills each slot (-1: the embedding; None: never written)],
"error": the exception the forward raised, or None}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import types

# what the oracle replaces besides the decoder layers (pass-through, deciding nothing captured)
STANDINS = {
    "sglang": [
        "layers.layer_boundary.residual.batch (start, final_norm, complete_output: identity)",
        "pp_group (one rank: first and last)",
        "eplb expert-distribution recorder (with_current_layer: a null context)",
        "the draft ModelConfig's construction (hf_config: SGLang's own get_config)",
    ],
    "vllm": [
        "get_pp_group (one rank: first and last)",
        "the draft hf_config's construction (vLLM's own get_config + EAGLEConfig)",
    ],
}
FAMILIES = ("llama", "deepseek_v3", "kimi_k2")
TOKENS = 2


def _config_dir(cfg: dict) -> str:
    d = tempfile.mkdtemp(prefix="capture-oracle-")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return d


# --- the stubs ------------------------------------------------------------------------------------


def _tagged(torch, tag: int):
    return torch.full((TOKENS, 1), float(tag))


def _stub_layer(torch, i: int, returns_residual: bool, returns_topk: bool):
    """Decoder layer i: captures what it is handed when asked (the stream entering it), returns
    the tag i."""

    class Stub(torch.nn.Module):
        use_sequence_parallel_moe = False

        def forward(self, positions, hidden_states, *args, **kw):
            collector = kw.get("captured_last_layer_outputs")
            if collector is not None:
                collector.capture(hidden_states)
            hook = kw.get("capture_output")
            if hook is not None:
                hook(hidden_states)
            out = _tagged(torch, i)
            if returns_residual:
                return out, torch.zeros_like(out)
            if returns_topk:
                return out, None
            return out

    return Stub()


def _slots(torch, aux) -> list:
    if isinstance(aux, torch.Tensor):  # SGLang's packed [tokens, K * hidden] (hidden = 1)
        return [int(aux[0, k].item()) for k in range(aux.shape[-1])]
    return [int(t[0, 0].item()) for t in aux]


# --- SGLang ---------------------------------------------------------------------------------------


def _sglang_ids(cfg: dict):
    """The ids SGLang 0.5.23's target runner reads from the draft config
    (_resolve_eagle_aux_hidden_state), over the hf_config SGLang's get_config builds."""
    from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state as sah
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils.hf_transformers.config import get_config

    path = _config_dir(cfg)
    hf = get_config(path, trust_remote_code=False)
    draft = types.SimpleNamespace(
        hf_config=hf,
        num_nextn_predict_layers=None,
        num_hidden_layers=getattr(hf, "num_hidden_layers", 1),
        num_attention_layers=getattr(hf, "num_hidden_layers", 1),
        is_hybrid_swa=False,
    )
    saved = (sah.get_spec, sah.ModelConfig.from_server_args)
    sah.get_spec = lambda: types.SimpleNamespace(
        speculative_draft_model_path=path, speculative_draft_model_revision=None
    )
    sah.ModelConfig.from_server_args = staticmethod(lambda *a, **k: draft)
    try:
        out = sah.SpecAuxHiddenStateConfig(is_dspark=False)
        sah._resolve_eagle_aux_hidden_state(
            config=out,
            server_args=None,
            model_config=None,
            spec_algorithm=SpeculativeAlgorithm.from_string("EAGLE3"),
            is_draft_worker=False,
        )
    finally:
        sah.get_spec, sah.ModelConfig.from_server_args = saved
    return out.eagle_use_aux_hidden_state, out.eagle_aux_hidden_state_layer_ids


def _sglang_target(torch, family: str, L: int):
    from sglang.srt.models import deepseek_v2, llama

    one_rank = types.SimpleNamespace(is_first_rank=True, is_last_rank=True)
    deep = family != "llama"
    outer_cls = deepseek_v2.DeepseekV3ForCausalLM if deep else llama.LlamaForCausalLM
    inner_cls = deepseek_v2.DeepseekV2Model if deep else llama.LlamaModel
    inner = inner_cls.__new__(inner_cls)
    torch.nn.Module.__init__(inner)
    inner.pp_group = one_rank
    inner.start_layer, inner.end_layer = 0, L
    inner.layers = torch.nn.ModuleList([_stub_layer(torch, i, False, deep) for i in range(L)])
    inner.embed_tokens = lambda ids: _tagged(torch, -1)
    inner.norm = lambda h: h
    inner.layers_to_capture = []
    if deep:
        inner.use_dsa = False
        inner.llama_4_scaling_config = None
        inner.first_k_dense_replace = 0
        inner.next_full_attention_layer_id = {}
    outer = outer_cls.__new__(outer_cls)
    torch.nn.Module.__init__(outer)
    outer.pp_group = one_rank
    outer.config = types.SimpleNamespace(num_hidden_layers=L)
    outer.model = inner
    return outer


class _Passthrough:
    """SGLang's residual-stream batch object, as one rank without a residual of its own."""

    def start(self, forward_batch):
        return None

    def complete_output(self, hidden_states, forward_batch):
        return hidden_states

    def final_norm(self, hidden_states, forward_batch, norm):
        return norm(hidden_states)


def sglang_case(case: dict) -> dict:
    import contextlib

    import torch
    from sglang.srt.layers import aux_hidden_states as ahs
    from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
        configure_aux_hidden_state_capture,
    )
    from sglang.srt.models import deepseek_v2, llama

    L = case["num_layers"]
    res = {"ids": None, "slots": None, "error": None, "layers_to_capture": None}
    use, ids = _sglang_ids(case["config"])
    res["ids"] = ids
    if not use:
        res["slots"] = []
        return res
    model = _sglang_target(torch, case["family"], L)
    configure_aux_hidden_state_capture(
        model=model,
        eagle_use_aux_hidden_state=True,
        eagle_aux_hidden_state_layer_ids=ids,
        dflash_use_aux_hidden_state=False,
        dflash_target_layer_ids=None,
        is_dspark=False,
    )
    res["layers_to_capture"] = list(model.model.layers_to_capture)
    written = {}
    real_finalize = ahs.AuxHiddenStatePacker.finalize

    def finalize(self):  # observe the packed buffer before SGLang's own check
        written["slots"] = (
            [
                int(self._buffer[0, k].item()) if k < self._idx else None
                for k in range(self._num_captures)
            ]
            if self._buffer is not None
            else [None] * self._num_captures
        )
        return real_finalize(self)

    fb = types.SimpleNamespace(
        can_run_tbo=False, forward_mode=types.SimpleNamespace(is_idle=lambda: False)
    )
    saved = (llama.residual_batch, deepseek_v2.residual_batch)
    recorder = types.SimpleNamespace(with_current_layer=lambda i: contextlib.nullcontext())
    saved_rec = deepseek_v2.get_global_expert_distribution_recorder
    llama.residual_batch = deepseek_v2.residual_batch = _Passthrough()
    deepseek_v2.get_global_expert_distribution_recorder = lambda: recorder
    ahs.AuxHiddenStatePacker.finalize = finalize
    try:
        out = model.model.forward(torch.zeros(TOKENS, dtype=torch.long), torch.arange(TOKENS), fb)
        res["slots"] = _slots(torch, out[1]) if isinstance(out, tuple) else []
    except Exception as e:  # noqa: BLE001 - the engine's own failure is the answer
        res["error"] = f"{type(e).__name__}: {e}"
        res["slots"] = written.get("slots")
    finally:
        llama.residual_batch, deepseek_v2.residual_batch = saved
        deepseek_v2.get_global_expert_distribution_recorder = saved_rec
        ahs.AuxHiddenStatePacker.finalize = real_finalize
    return res


# --- vLLM -----------------------------------------------------------------------------------------


def _vllm_hf_config(cfg: dict):
    from vllm.transformers_utils.config import get_config
    from vllm.transformers_utils.configs.eagle import EAGLEConfig
    from vllm.transformers_utils.configs.speculators import SpeculatorsConfig

    hf = get_config(_config_dir(cfg), trust_remote_code=False)
    if not isinstance(hf, (EAGLEConfig, SpeculatorsConfig)):
        hf = EAGLEConfig(hf, method="eagle3", model_type="eagle")
    return hf


def _vllm_target(torch, family: str, L: int):
    from vllm.model_executor.models import deepseek_v2, llama

    deep = family != "llama"
    outer_cls = deepseek_v2.DeepseekV3ForCausalLM if deep else llama.LlamaForCausalLM
    inner_cls = deepseek_v2.DeepseekV2Model if deep else llama.LlamaModel
    inner = inner_cls.__new__(inner_cls)
    torch.nn.Module.__init__(inner)
    inner.start_layer, inner.end_layer = 0, L
    inner.layers = torch.nn.ModuleList([_stub_layer(torch, i, True, False) for i in range(L)])
    inner.embed_input_ids = lambda ids: _tagged(torch, -1)
    inner.embed_tokens = inner.embed_input_ids
    inner.norm = lambda h, r: (h, r)
    inner.config = types.SimpleNamespace(num_hidden_layers=L)
    if deep:
        inner.aux_hidden_state_layers = ()
    outer = outer_cls.__new__(outer_cls)
    torch.nn.Module.__init__(outer)
    outer.model = inner
    return outer


def _vllm_forward(torch, model) -> tuple:
    from vllm.model_executor.models import deepseek_v2, llama

    one_rank = types.SimpleNamespace(is_first_rank=True, is_last_rank=True, world_size=1)
    saved = (llama.get_pp_group, deepseek_v2.get_pp_group)
    llama.get_pp_group = deepseek_v2.get_pp_group = lambda: one_rank
    try:
        return model.model.forward(
            torch.zeros(TOKENS, dtype=torch.long), torch.arange(TOKENS), None
        )
    finally:
        llama.get_pp_group, deepseek_v2.get_pp_group = saved


def vllm_case(case: dict, runner: str) -> dict:
    import torch
    from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    res = {"ids": None, "slots": None, "error": None, "layers_to_capture": None}
    hf = _vllm_hf_config(case["config"])
    model = _vllm_target(torch, case["family"], case["num_layers"])
    spec = types.SimpleNamespace(draft_model_config=types.SimpleNamespace(hf_config=hf))
    if runner == "V2":
        res["ids"] = eagle3_utils.get_eagle3_aux_layers_from_config(spec)
        eagle3_utils.set_eagle3_aux_hidden_state_layers(model, spec)
    else:
        fake = types.SimpleNamespace(
            speculative_config=spec, use_aux_hidden_state_outputs=True, model=model
        )
        fake.get_model = lambda: model
        fake._get_eagle3_aux_layers_from_config = types.MethodType(
            GPUModelRunner._get_eagle3_aux_layers_from_config, fake
        )
        res["ids"] = fake._get_eagle3_aux_layers_from_config()
        GPUModelRunner._setup_eagle3_aux_hidden_state_outputs(fake)
    res["ids"] = list(res["ids"]) if res["ids"] else None
    res["layers_to_capture"] = list(model.model.aux_hidden_state_layers)
    try:
        out = _vllm_forward(torch, model)
        res["slots"] = _slots(torch, out[1]) if isinstance(out, tuple) else []
    except Exception as e:  # noqa: BLE001 - the engine's own failure is the answer
        res["error"] = f"{type(e).__name__}: {e}"
    return res


# --- the driver -----------------------------------------------------------------------------------


def _each(cases: list, fn) -> list:
    out = []
    for case in cases:
        try:
            out.append(fn(case))
        except Exception as e:  # noqa: BLE001 - reading the config failed: also an answer
            out.append(
                {"ids": None, "slots": None, "error": f"{type(e).__name__}: {e}", "stage": "config"}
            )
    return out


def main(argv=None) -> int:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    engine = (argv or sys.argv[1:])[0]
    cases = json.load(sys.stdin)
    if engine == "sglang":
        res = [{"sglang": r} for r in _each(cases, sglang_case)]
    else:
        v1 = _each(cases, lambda c: vllm_case(c, "V1"))
        v2 = _each(cases, lambda c: vllm_case(c, "V2"))
        res = [{"vllm-V1": a, "vllm-V2": b} for a, b in zip(v1, v2)]
    json.dump(res, sys.stdout)
    return 0


def run(cases: list, engines=("sglang", "vllm"), timeout: int = 600) -> list:
    """From the project's Python: each engine's answers for every case (one side-venv process
    per engine for the whole batch), merged per case. An engine whose venv is absent is left out
    (``helpers.engine.side_python_path`` says where it is looked for)."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.dirname(here))
    try:
        from helpers.engine import side_env, side_python_path
    finally:
        sys.path.pop(0)
    merged = [{} for _ in cases]
    for engine in engines:
        py = side_python_path(engine)
        if not os.path.isfile(py):
            continue
        p = subprocess.run(
            [py, os.path.join(here, "capture_oracle.py"), engine],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=side_env(),
            cwd=here,
        )
        if p.returncode != 0:
            raise RuntimeError(f"capture oracle ({engine}) failed:\n{p.stderr[-3000:]}")
        for m, r in zip(merged, json.loads(p.stdout)):
            m.update(r)
    return merged


if __name__ == "__main__":
    sys.exit(main())
