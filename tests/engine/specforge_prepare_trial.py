"""SpecForge 0.2.0 writes offline hidden states with its own ``scripts/prepare_hidden_states.py``
on CPU, for a tiny Llama target, and exports a drafter with its own exporter (issue #33's trial).

Runs in the side venv of tests/engine/setup_specforge_eval_venv.sh (never weightcheck's Python):

    python specforge_prepare_trial.py SCRIPT WORK [--compress] [--batch-size N]
        [--file-group-size N] [--conversations N]

SCRIPT is SpecForge's ``scripts/prepare_hidden_states.py`` (not in the wheel; the setup script
fetches it at the commit the wheel matches). Under WORK it writes:

- ``target/``: a tiny Llama (transformers ``LlamaForCausalLM``, random weights, bfloat16) and a
  byte-level BPE tokenizer trained here on the conversations, with a Llama-3 chat template;
- ``conversations.jsonl``: ShareGPT-style conversations (``{"conversations": [...]}``);
- ``draft_config.json``: a SpecForge ``LlamaForCausalLMEagle3`` config;
- ``hidden-states/``: what the script writes (``rows_*/data_<i>.ckpt[.gz]``,
  ``vocab_mapping/vocab_mapping.pt``) — its ``main()`` run whole: argument parsing, the capture
  plan (``resolve_offline_capture_plan``: the aux layers from the draft config or the target),
  ``build_eagle3_dataset`` (the chat template, the loss mask), the vocab mapping,
  ``prepare_dp_dataloaders`` (padding, ``drop_last``), ``HiddenStatesGenerator`` (the records,
  the file names and groups, ``torch.save`` / gzip);
- ``drafter/``: the drafter exported by SpecForge's ``export_to_sglang`` from a
  ``training_state.pt`` (its weights set here, see :func:`drafter_state`), with the script's
  vocab mapping.

What is not SpecForge's own, and why:

- the target's forward: SGLang's model runner (``OfflineSGLangCaptureBackend``) needs CUDA and
  SGLang's kernels; a transformers forward of the same model stands in for it behind SpecForge's
  own ``OfflineSGLangCapture`` (:class:`HFCaptureBackend`: each padded row whole, causal, as SGLang
  is given it; the aux states the outputs of the layers ``i`` of the plan — SGLang captures the
  input of layer ``i + 1``, models/llama.py ``set_eagle3_layers_to_capture`` — concatenated in
  order; the last state after the final norm, SGLang's logits-processor input);
- device placement: the script moves batches with ``.cuda()`` and builds one tensor on
  ``device="cuda"``; both stay on the CPU here (``torch.distributed`` runs gloo,
  ``SPECFORGE_DEVICE=cpu``).

Prints one JSON line: the capture layers, the files written, the script's own log lines.
"""

import argparse
import contextlib
import importlib.util
import io
import json
import os
import random
import socket
import sys

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
os.environ["SPECFORGE_DEVICE"] = "cpu"

import torch  # noqa: E402

TARGET = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=8,
    num_attention_heads=2,  # head_dim 32: vLLM's CPU attention has no kernel for 16
    num_key_value_heads=1,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)
DRAFT_VOCAB = 384
CAPTURED = {}  # what the script's capture plan asked the target for
SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<unk>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
WORDS = (
    "the model drafts tokens and the target checks them in one pass so the answer comes sooner "
    "when the drafter guesses right a cycle accepts several tokens at once otherwise one "
    "speculative decoding needs a small fast drafter trained on hidden states of the target "
    "layers aux features loss mask assistant user question answer why how what when where "
    "please explain short long numbers one two three four five six seven eight nine ten"
).split()


def conversations(n: int, seed: int = 0) -> list:
    rng = random.Random(seed)

    def text(lo, hi):
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."

    rows = []
    for i in range(n):
        turns = []
        for _ in range(rng.randint(1, 2)):
            turns.append({"role": "user", "content": text(4, 12)})
            turns.append({"role": "assistant", "content": text(10, 40)})
        rows.append({"id": f"c{i}", "conversations": turns})
    return rows


def write_tokenizer(out: str, rows: list) -> object:
    from specforge.data.template import TEMPLATE_REGISTRY
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET["vocab_size"],
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [TEMPLATE_REGISTRY.get("llama3").system_prompt]
    corpus += [m["content"] for r in rows for m in r["conversations"]]
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        unk_token="<unk>",
        pad_token="<unk>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def write_target(out: str, tokenizer, seed: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **TARGET,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        # a residual stream led by the token's embedding: the target's top-1 after a position
        # is mostly a function of that position's token (what the drafter of drafter_state can
        # learn without training), the layers adding the rest
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        # a final norm that is not all ones, so that whether a reader applies it (speculators'
        # last slot is before it, SpecForge's hidden_state after) changes the top-1
        g = torch.Generator().manual_seed(seed + 1)
        model.model.norm.weight.copy_(0.25 + 1.5 * torch.rand(cfg.hidden_size, generator=g))
    model.to(torch.bfloat16).save_pretrained(out)


def write_draft_config(path: str, tokenizer) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "hidden_act": "silu",
        "hidden_size": TARGET["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": 2048,
        "model_type": "llama",
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "num_hidden_layers": 1,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1e6,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": TARGET["vocab_size"],
        "draft_vocab_size": DRAFT_VOCAB,
    }
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return cfg


class HFCaptureBackend:
    """Stands in for SpecForge's ``OfflineSGLangCaptureBackend`` (whose SGLang model runner
    needs CUDA): the same ``set_capture_layers`` / ``capture`` contract, a transformers forward."""

    def __init__(self, path: str, dtype):
        from safetensors.torch import load_file
        from transformers import AutoConfig, LlamaForCausalLM

        # built from its config and filled (strict) rather than from_pretrained: every buffer
        # computed on the CPU at construction, nothing left to a lazy materialization
        self.model = LlamaForCausalLM(AutoConfig.from_pretrained(path))
        self.model.load_state_dict(load_file(os.path.join(path, "model.safetensors")))
        self.model = self.model.to(dtype).eval()
        self.layers = None

    def set_capture_layers(self, layer_ids, *, capture_method: str) -> None:
        if capture_method != "eagle3" or layer_ids is None:
            raise ValueError(f"trial captures eagle3 layers only, got {capture_method!r}")
        self.layers = list(layer_ids)
        CAPTURED["layers"] = self.layers

    @torch.no_grad()
    def capture(self, *, input_ids, attention_mask, loss_mask):
        layers = self.model.model.layers
        data, aux_rows, last_rows = [], [], []
        for row in range(input_ids.shape[0]):
            # SGLang is given each padded row whole (origin_input_ids = the row's every id)
            ids = input_ids[row : row + 1]
            outs = {}
            hooks = [
                layers[i].register_forward_hook(
                    lambda mod, args, out, i=i: outs.__setitem__(
                        i, out[0] if isinstance(out, tuple) else out
                    )
                )
                for i in sorted(set(self.layers))
            ]
            try:
                res = self.model.model(input_ids=ids, use_cache=False)
            finally:
                for h in hooks:
                    h.remove()
            aux_rows.append(torch.cat([outs[i][0] for i in self.layers], dim=-1))
            last_rows.append(res.last_hidden_state[0])
            if not (aux_rows[-1].isfinite().all() and last_rows[-1].isfinite().all()):
                # the script would skip the sample ("NaN found ... Skipping save"): say so here
                raise RuntimeError(f"the stand-in target's forward is not finite (row {row})")
            data.append(
                (input_ids[row : row + 1], attention_mask[row : row + 1], loss_mask[row : row + 1])
            )
        return data, aux_rows, last_rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_placement() -> None:
    """The script's ``.cuda()`` moves and its one ``device="cuda"`` tensor, kept on the CPU."""
    torch.Tensor.cuda = lambda self, *a, **k: self
    real_tensor = torch.tensor

    def tensor(*a, **k):
        if str(k.get("device", "")).startswith("cuda"):
            k["device"] = "cpu"
        return real_tensor(*a, **k)

    torch.tensor = tensor


def run_script(script: str, argv: list) -> str:
    """SpecForge's ``prepare_hidden_states.main()`` with ``argv``; its stdout."""
    from specforge.offline_capture import OfflineSGLangCapture

    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
    )  # fmt: skip
    _cpu_placement()
    spec = importlib.util.spec_from_file_location("prepare_hidden_states", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def load_offline_capture(path, *, torch_dtype=None, trust_remote_code=False, **_sglang):
        return OfflineSGLangCapture(HFCaptureBackend(path, torch_dtype))

    mod.load_offline_capture = load_offline_capture
    out = io.StringIO()
    sys.argv = ["prepare_hidden_states.py", *argv]
    with contextlib.redirect_stdout(out):
        mod.main()
    return out.getvalue()


def drafter_state(draft, target_dir: str, seed: int) -> dict:
    """The drafter's weights (SpecForge's own module, its names): step k's draft is
    ``lm_head(norm(h))`` over the draft vocabulary, with ``h`` mostly the input token's normed
    embedding — carried by the attention (each column's value its token's embedding, the query
    most like its own key) — plus ``fc(aux)``, small, so that the aux hidden states move the
    drafts. ``lm_head`` is the target's rows of the draft vocabulary and ``norm`` the target's."""
    from safetensors import safe_open

    g = torch.Generator().manual_seed(seed)
    H = draft.config.hidden_size
    with safe_open(os.path.join(target_dir, "model.safetensors"), framework="pt") as f:
        head = f.get_tensor("lm_head.weight").float()
        norm = f.get_tensor("model.norm.weight").float()
    sd = {k: v.clone().float() for k, v in draft.state_dict().items() if "embed" not in k}
    d2t = sd["d2t"].long()
    ids = torch.arange(d2t.numel()) + d2t
    sd["lm_head.weight"] = head[ids]
    sd["norm.weight"] = norm
    for k in sd:
        if k.startswith("midlayer.") and k.endswith("norm.weight"):
            sd[k] = torch.ones_like(sd[k])
    eye = torch.eye(H)
    q = torch.randn(H, H, generator=g) / H**0.5
    sd["midlayer.self_attn.q_proj.weight"] = torch.cat([8.0 * q, 0.5 * q], dim=1)
    sd["midlayer.self_attn.k_proj.weight"] = torch.cat([q, 0.5 * q], dim=1)
    sd["midlayer.self_attn.v_proj.weight"] = torch.cat([eye, torch.zeros(H, H)], dim=1)
    sd["midlayer.self_attn.o_proj.weight"] = eye.clone()
    sd["midlayer.mlp.down_proj.weight"] = 0.05 * torch.randn(
        H, sd["midlayer.mlp.down_proj.weight"].shape[1], generator=g
    )
    w = sd["fc.weight"].shape[1]
    sd["fc.weight"] = torch.randn(H, w, generator=g) * (0.3 / w**0.5)
    return sd


def export_drafter(work: str, seed: int) -> None:
    from specforge.export.to_sglang import export_to_sglang
    from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig

    cfg_path = os.path.join(work, "draft_config.json")
    mapping = os.path.join(work, "hidden-states", "vocab_mapping", "vocab_mapping.pt")
    draft = AutoDraftModel.from_config(AutoDraftModelConfig.from_file(cfg_path))
    draft.load_vocab_mapping(mapping)
    state = {
        "strategy": "eagle3",
        "draft_state_dict": drafter_state(draft, os.path.join(work, "target"), seed),
    }
    ckpt = os.path.join(work, "training_state.pt")
    torch.save(state, ckpt)
    export_to_sglang(ckpt, cfg_path, os.path.join(work, "drafter"), vocab_mapping_path=mapping)


def check_vllm_slots(hs_file: str, target: str, ids: list) -> dict:
    """How far each slot of a speculators ``hs_<i>.safetensors`` (written by vLLM) is from the
    target's hidden states, by transformers: the input of decoder layer ``j`` for each vLLM id
    ``j`` < L, and for id L the last layer's output before the final norm and after it."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, LlamaForCausalLM

    model = LlamaForCausalLM(AutoConfig.from_pretrained(target))
    model.load_state_dict(load_file(os.path.join(target, "model.safetensors")))
    model = model.to(torch.bfloat16).eval()
    d = load_file(hs_file)
    layers = model.model.layers
    outs = {}
    hook = layers[-1].register_forward_hook(
        lambda mod, args, out: outs.__setitem__("last", out[0] if isinstance(out, tuple) else out)
    )
    with torch.no_grad():
        res = model.model(input_ids=d["token_ids"][None], output_hidden_states=True)
    hook.remove()
    got = d["hidden_states"].float()

    def dist(a, b):
        return float((a.float() - b[0].float()).abs().max())

    slots = []
    for slot, j in enumerate(ids):
        if j < len(layers):
            slots.append(
                {"id": j, "input_of_layer": dist(got[:, slot][None], res.hidden_states[j])}
            )
        else:
            slots.append(
                {
                    "id": j,
                    "before_norm": dist(got[:, slot][None], outs["last"]),
                    "after_norm": dist(got[:, slot][None], res.last_hidden_state),
                }
            )
    scale = float(res.last_hidden_state.float().abs().max())
    return {"slots": slots, "scale": scale, "shape": list(d["hidden_states"].shape)}


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "check-vllm-slots":
        ids = [int(x) for x in argv[3].split(",")]
        print(json.dumps(check_vllm_slots(argv[1], argv[2], ids)))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("work")
    ap.add_argument("--compress", action="store_true")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--file-group-size", type=int, default=2000)
    ap.add_argument("--conversations", type=int, default=26)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    rows = conversations(a.conversations, a.seed)
    data = os.path.join(work, "conversations.jsonl")
    with open(data, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    target = os.path.join(work, "target")
    tok = write_tokenizer(target, rows)
    write_target(target, tok, a.seed)
    write_draft_config(os.path.join(work, "draft_config.json"), tok)
    out = os.path.join(work, "hidden-states")
    args = [
        "--target-model-path", target, "--data-path", data, "--output-path", out,
        "--draft-model-config", os.path.join(work, "draft_config.json"),
        "--chat-template", "llama3", "--max-length", str(a.max_length),
        "--batch-size", str(a.batch_size), "--build-dataset-num-proc", "1",
        "--num-workers", "0", "--num-io-threads", "2", "--cache-dir", os.path.join(work, "cache"),
        "--file-group-size", str(a.file_group_size),
    ]  # fmt: skip
    if a.compress:
        args.append("--compress")
    log = run_script(a.script, args)
    export_drafter(work, a.seed)
    files = sorted(
        os.path.relpath(os.path.join(r, n), out) for r, _d, ns in os.walk(out) for n in ns
    )
    done = [ln.strip() for ln in log.splitlines() if "Generation loop finished" in ln]
    print(json.dumps({"files": files, "capture_layers": CAPTURED.get("layers"), "log": done}))


if __name__ == "__main__":
    main()
