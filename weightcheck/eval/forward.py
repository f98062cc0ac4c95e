"""The drafter's own forward pass, with test-time unrolling (docs/eval.md §2).

An EAGLE-3 drafter (decoder layers over [embedding ; fc(aux hidden states)]: Llama attention,
llama.py, or DeepSeek multi-head latent attention, mla.py) run the way SpecForge 0.2.0 unrolls
it in training (specforge/algorithms/eagle3/model.py
``OnlineEagle3Model.forward``, specforge/modeling/draft/llama3_eagle.py ``LlamaAttention.forward``
with ``cache_hidden``) and the engines draft a chain: at step k, column t holds the draft of
token t+k+2, from the token t+k+1 as input, the drafter's own step-(k-1) hidden state at that
column, attention over the target-conditioned keys of columns <= t (step 0) and the keys of the
same column at steps 1..k, rotary position t+k. Logits are ``lm_head(norm(h))``; the hidden state
fed forward is the pre-norm one (``norm(h)`` when the config says ``norm_output``, SGLang's
meaning: sglang 0.5.23 models/llama_eagle3.py:263-269).

Layer 0 reads [input_layernorm(embedding) ; hidden_norm(h)] (2H); a later layer reads
``input_layernorm(h)`` (H), as vLLM 0.32.0 builds them (models/llama_eagle3.py:131-138,
models/deepseek_eagle3.py:127-134); each layer attends over its own unrolled keys.

Weights are read through the drafter's canonical names (every dialect weightcheck reads), in the
dtype the engine builds (the config's), or the one asked for.
"""

from __future__ import annotations

import os

from weightcheck.errors import WeightcheckError
from weightcheck.eval import upload
from weightcheck.eval.packed import Layout, attend
from weightcheck.sources.tensors import from_bytes, read_range

_CONFIG_DTYPE = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


def engine_dtype(norm) -> str:
    """The dtype the engines build the drafter in: the config's ``torch_dtype``/``dtype``
    (bfloat16 when it says nothing, as SpecForge's exports are)."""
    raw = str(norm.get("dtype") or "bfloat16").lower().replace("torch.", "")
    return _CONFIG_DTYPE.get(raw, "bfloat16")


_MAPS: dict = {}  # local safetensors file -> its read-only mmap, kept while tensors view it


def _mapped(src, rec):
    """A read-only view of a tensor of a local safetensors file, mapped, not read: pages come in
    as the forward touches them (an embedding's unused rows never do), as safetensors' own
    ``load_file`` does. None when the tensor cannot be viewed so (Hub, pickled, misaligned)."""
    import mmap
    import warnings

    import torch

    from weightcheck.sources.tensors import torch_dtype

    wf = src.files.get(rec.file)
    if wf is None or wf.format != "safetensors" or not wf.local_path or rec.begin is None:
        return None
    dt = torch_dtype(rec.dtype)
    size = torch.empty((), dtype=dt).element_size()
    if rec.begin % size or rec.nbytes % size:
        return None
    mm = _MAPS.get(wf.local_path)
    if mm is None:
        with open(wf.local_path, "rb") as f:
            mm = _MAPS[wf.local_path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if rec.end > len(mm):
        raise WeightcheckError(src.spec, f"{rec.file}: file ends inside {rec.name}: truncated")
    if not rec.nbytes:
        return torch.empty(0, dtype=dt)
    with warnings.catch_warnings():  # read-only memory: only ever read
        warnings.simplefilter("ignore")
        return torch.frombuffer(mm, dtype=dt, count=rec.nbytes // size, offset=rec.begin)


def release_maps() -> None:
    """Unmap the weight files no tensor views any longer (on a GPU, what a fallback mapped: the
    pages it touched stop counting in the process's memory); a map still viewed stays."""
    for path in list(_MAPS):
        try:
            _MAPS[path].close()
        except BufferError:
            continue
        del _MAPS[path]


def load_tensor(src, rec_name: str, shape, dtype, device=None):
    """One tensor of a source (by its own name), as a torch tensor of ``dtype`` on ``device``
    (the CPU when None): on a GPU read straight there from a local file (upload.py); on the CPU a
    view of the file when it is a local safetensors one of that dtype."""
    import torch

    rec = src.tensors[rec_name]
    on_gpu = device is not None and torch.device(device).type != "cpu"
    where = upload.located(src, rec) if on_gpu else None
    if where is not None:
        from weightcheck.sources.tensors import torch_dtype

        if rec.end > os.path.getsize(where[0]):
            raise WeightcheckError(src.spec, f"{rec.file}: file ends inside {rec.name}: truncated")
        t = upload.get(device).load(*where, torch_dtype(rec.dtype), tuple(rec.shape))
    else:
        t = None if on_gpu else _mapped(src, rec)
    if t is None:
        t = from_bytes(bytearray(read_range(src, rec_name, 0, rec.nbytes)), rec.dtype)
    if device is not None and t.device != device:
        t = t.to(device)
    t = t.reshape(tuple(rec.shape))
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise WeightcheckError(
            src.spec, f"{rec_name} is {list(t.shape)}, the config implies {list(shape)}"
        )
    return t.to(getattr(torch, dtype)) if dtype else t


class RMSNorm:
    """SpecForge's / transformers' LlamaRMSNorm: float32 statistics (float64 for float64),
    ``weight * x.to(dtype)``."""

    def __init__(self, weight, eps: float):
        self.weight, self.eps = weight, eps

    def __call__(self, x):
        import torch

        dt = x.dtype
        h = x.to(torch.promote_types(dt, torch.float32))  # float64 stays float64
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dt)


class DecoderLayer:
    """One decoder layer: its attention (llama.py GQA or mla.py MLA), the dense silu MLP, the
    norms; layer 0 reads [input_layernorm(embedding) ; hidden_norm(h)], a later one
    ``input_layernorm(h)``."""

    def __init__(self, m, index: int):
        p = m.layer_prefix(index)
        w = m._w
        self.index, self.eps = index, m.eps
        self.norm_before_residual = m.norm_before_residual
        width = (2 if index == 0 else 1) * m.H
        self.attn = m.attention_class(m, p, width)
        self.gate = w(p + "mlp.gate_proj.weight")
        self.up = w(p + "mlp.up_proj.weight")
        self.down = w(p + "mlp.down_proj.weight")
        self.in_norm = RMSNorm(w(p + "input_layernorm.weight"), m.eps)
        # layers >= 1: vLLM builds hidden_norm and never reads it (speculators writes none)
        self.hidden_norm = RMSNorm(w(p + "hidden_norm.weight"), m.eps) if index == 0 else None
        self.post_norm = RMSNorm(w(p + "post_attention_layernorm.weight"), m.eps)

    def __call__(self, h, emb, pos, layout, keys, values):
        """The layer's output (the residual stream) at one step over a packed batch (packed.py
        ``Layout``); its keys and values of this step are appended to ``keys``/``values`` (this
        layer's, steps 0..k-1 so far)."""
        import torch
        import torch.nn.functional as F

        S = h.shape[0]
        if self.index == 0:
            residual = self.hidden_norm(h) if self.norm_before_residual else h
            x = torch.cat((self.in_norm(emb), self.hidden_norm(h)), dim=-1)
        else:
            residual, x = h, self.in_norm(h)
        q, kk, vv = self.attn.qkv(x, pos)
        keys.append(kk)
        values.append(vv)
        out = attend(q, keys, values, layout, self.attn.score)
        out = out.transpose(0, 1).reshape(S, -1)
        h = residual + self.attn.out(out)
        residual = h
        m = self.post_norm(h)
        return residual + F.linear(F.silu(F.linear(m, self.gate)) * F.linear(m, self.up), self.down)


class Eagle3Drafter:
    """An EAGLE-3 drafter (Llama or MLA attention, one or more decoder layers), loaded from a
    :class:`weightcheck.model.drafter.Drafter`."""

    def __init__(self, d, dtype: str | None = None, embed=None, device="cpu"):
        import torch

        self.d = d
        norm = d.normalized
        self.label = d.source.spec
        self.attention_class = self._runs(d, norm)
        self.dtype_name = dtype or engine_dtype(norm)
        self.dtype = getattr(torch, self.dtype_name)
        self.device = torch.device(device)
        sym = norm.symbols()
        self.H, self.T, self.n_aux = sym["H"], sym["T"], sym["n_aux"]
        self.V, self.Vd = sym["V"], sym["Vd"]
        self.eps = float(norm.get("rms_norm_eps") or 1e-6)
        self.norm_output = bool(norm.get("norm_output"))
        self.norm_before_residual = bool(norm.get("norm_before_residual"))
        self._canon = d.by_canonical()
        self._fused: dict = {}  # a fused tensor's source name -> the whole of it (_w's parts view it)
        self._load_input(norm)
        self.n_layers = int(norm.get("num_hidden_layers") or 1)
        self.layers = [DecoderLayer(self, i) for i in range(self.n_layers)]
        self.norm = RMSNorm(self._w("norm.weight"), self.eps)
        self.lm_head = self._w("lm_head.weight")
        own_embed = self._w("embed_tokens.weight", False)
        self.embed = own_embed if own_embed is not None else embed
        self.embed_from = (
            "drafter" if own_embed is not None else ("target" if embed is not None else None)
        )
        from weightcheck.model import vocab as vocab_mod

        vm = vocab_mod.from_drafter(d)
        self.vocab_map = vm
        self.d2t_targets = (
            torch.tensor(vm.targets, dtype=torch.long, device=self.device) if vm else None
        )

    def _runs(self, d, norm):
        """What eval runs: Llama EAGLE-3 and MLA drafters with silu (else exit 2, saying why);
        the attention class of the architecture."""
        arch = d.architecture.name if d.architecture else None
        if arch == "llama_eagle3":
            from weightcheck.eval.llama import LlamaAttention as cls
        elif arch == "deepseek_mla_eagle3":
            from weightcheck.eval.mla import MlaAttention as cls
        else:
            raise WeightcheckError(
                self.label,
                "eval runs Llama EAGLE-3 and MLA (deepseek_mla_eagle3) drafters; this one is "
                f"{arch or 'of no known architecture'}",
            )
        layers = norm.get("num_hidden_layers") or 1
        if layers < 1:
            raise WeightcheckError(self.label, f"num_hidden_layers {layers}: no decoder layer")
        act = norm.get("hidden_act") or "silu"
        if act != "silu":
            raise WeightcheckError(self.label, f"hidden_act {act!r}: eval runs silu drafters")
        return cls

    def rms_norm(self, weight) -> RMSNorm:
        """An RMSNorm of ``weight`` with the config's eps (every norm of the drafter's)."""
        return RMSNorm(weight, self.eps)

    def layer_prefix(self, index: int) -> str:
        """Layer ``index``'s canonical name prefix (``midlayer.``, ``layers.1.``, ...)."""
        return self.d.architecture.layers.name("midlayer.", index)

    def _w(self, name: str, required: bool = True, shape=None):
        """The drafter's tensor of canonical ``name`` in the compute dtype (None when optional
        and absent); ``shape``, when given, is checked (one line naming the tensor)."""
        t = self._canon.get(name)
        if t is None:
            if required:
                raise WeightcheckError(self.label, f"has no {name}: the drafter cannot run")
            return None
        if t.window is None:
            return load_tensor(self.d.source, t.name, shape, self.dtype_name, self.device)
        # a part of a fused tensor (Drafter.parts_of: qkv_proj, gate_up_proj): its rows of the
        # whole, loaded once, where the engines' weight loaders split it
        whole = self._fused.get(t.name)
        if whole is None:
            whole = load_tensor(self.d.source, t.name, None, self.dtype_name, self.device)
            self._fused[t.name] = whole
        row = self.d.source.tensors[t.name].nbytes // max(whole.shape[0], 1)
        part = whole[t.window[0] // row : t.window[1] // row]
        if shape is not None and tuple(part.shape) != tuple(shape):
            raise WeightcheckError(self.d.source.spec, f"{name} (rows of {t.name}) is "
                                   f"{list(part.shape)}, the config implies {list(shape)}")  # fmt: skip
        return part

    def _load_input(self, norm) -> None:
        """fc and the norms before it (``input_norm`` only for a Llama drafter: neither engine
        builds one for an MLA drafter)."""
        w = self._w
        self.fc = w("fc.weight")
        self.fc_bias = w("fc.bias", False)
        if self.fc.shape[1] != self.T * self.n_aux:
            raise WeightcheckError(
                self.label,
                f"fc.weight is {list(self.fc.shape)}: not [hidden, {self.n_aux} x {self.T}]",
            )
        self.fc_norms = None
        if norm.get("fc_norm"):
            self.fc_norms = [RMSNorm(w(f"fc_norm.{i}.weight"), self.eps) for i in range(self.n_aux)]
        self.input_norm = None
        if norm.get("norm_before_fc") and self.d.architecture.attention == "gqa":
            self.input_norm = RMSNorm(w("input_norm.weight"), self.eps)

    @property
    def has_embed(self) -> bool:
        return self.embed is not None

    def _embed(self, ids):
        import torch

        if isinstance(self.embed, torch.Tensor):
            if self.embed.device != ids.device:
                self.embed = self.embed.to(ids.device)
            return torch.nn.functional.embedding(ids, self.embed).to(self.dtype)
        rows = self.embed.gather(ids)  # target rows (eval/target.py Rows)
        return rows.to(device=ids.device, dtype=self.dtype)

    def project(self, aux):
        import torch

        h = aux.to(self.dtype)
        if self.input_norm is not None:
            h = self.input_norm(h)
        if self.fc_norms is not None:
            h = torch.cat([n(c) for n, c in zip(self.fc_norms, h.chunk(self.n_aux, dim=-1))], -1)
        out = torch.nn.functional.linear(h, self.fc, self.fc_bias)
        return out

    def step_logits(self, aux, input_ids, steps: int, layout: Layout | None = None):
        """The draft logits [L, Vd] of steps 0..steps-1, one step at a time. One sample:
        ``aux`` [S, n_aux*T], ``input_ids`` its tokens (column t's step-k input is token t+k+1,
        0 past the end; the tokens may run past the S columns). Several, packed: ``layout``
        (packed.py) says where each lies in ``aux`` [L, n_aux*T] and ``input_ids`` [L]."""
        import torch
        import torch.nn.functional as F

        S = aux.shape[0]
        h = self.project(aux)
        if layout is None:
            layout = Layout.one(S, aux.device)
            one = input_ids
        else:
            one = None
        cache = [([], []) for _ in self.layers]  # per layer: keys, values of each step
        for k in range(steps):
            if one is not None:  # SpecForge's padding(left=False), once per step
                ids = one[k + 1 : k + 1 + S]
                if ids.shape[0] < S:
                    ids = torch.cat((ids, ids.new_zeros(S - ids.shape[0])))
            else:
                ids = layout.shifted(input_ids, k)
            emb = self._embed(ids)
            for layer, (keys, values) in zip(self.layers, cache):
                h = layer(h, emb, layout.pos + k, layout, keys, values)
            normed = self.norm(h)
            yield F.linear(normed, self.lm_head)
            if self.norm_output:
                h = normed

    def unroll(self, aux, input_ids, steps: int, layout: Layout | None = None):
        """Draft ids (target ids, through d2t) [steps, L] (see step_logits)."""
        import torch

        preds = []
        for logits in self.step_logits(aux, input_ids, steps, layout):
            draft = logits.argmax(-1)
            preds.append(self.d2t_targets[draft] if self.d2t_targets is not None else draft)
        return torch.stack(preds)


# the name eval's callers used when it ran Llama drafters only
LlamaEagle3 = Eagle3Drafter
