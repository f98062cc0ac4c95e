"""The drafter's own forward pass, with test-time unrolling (docs/eval.md §2).

A Llama EAGLE-3 drafter (one decoder layer over [embedding ; fc(aux hidden states)]) run the way
SpecForge 0.2.0 unrolls it in training (specforge/algorithms/eagle3/model.py
``OnlineEagle3Model.forward``, specforge/modeling/draft/llama3_eagle.py ``LlamaAttention.forward``
with ``cache_hidden``) and the engines draft a chain: at step k, column t holds the draft of
token t+k+2, from the token t+k+1 as input, the drafter's own step-(k-1) hidden state at that
column, attention over the target-conditioned keys of columns <= t (step 0) and the keys of the
same column at steps 1..k, rotary position t+k. Logits are ``lm_head(norm(h))``; the hidden state
fed forward is the pre-norm one (``norm(h)`` when the config says ``norm_output``, SGLang's
meaning: sglang 0.5.23 models/llama_eagle3.py:263-269).

Weights are read through the drafter's canonical names (every dialect weightcheck reads), in the
dtype the engine builds (the config's), or the one asked for.
"""

from __future__ import annotations

import math

from weightcheck.errors import WeightcheckError
from weightcheck.sources.tensors import from_bytes, read_range

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
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


def load_tensor(src, rec_name: str, shape, dtype):
    """One tensor of a source (by its own name), as a torch tensor of ``dtype`` (a view of the
    file when it is a local safetensors one of that dtype)."""
    import torch

    rec = src.tensors[rec_name]
    t = _mapped(src, rec)
    if t is None:
        t = from_bytes(bytearray(read_range(src, rec_name, 0, rec.nbytes)), rec.dtype)
    t = t.reshape(tuple(rec.shape))
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise WeightcheckError(
            src.spec, f"{rec_name} is {list(t.shape)}, the config implies {list(shape)}"
        )
    return t.to(getattr(torch, dtype)) if dtype else t


class RMSNorm:
    """SpecForge's / transformers' LlamaRMSNorm: float32 statistics, ``weight * x.to(dtype)``."""

    def __init__(self, weight, eps: float):
        self.weight, self.eps = weight, eps

    def __call__(self, x):
        import torch

        dt = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dt)


def _rope_inv_freq(hd: int, norm) -> object:
    import torch

    base = float(norm.get("rope_theta") or 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, hd, 2).float() / hd))
    rs = norm.get("rope_scaling")
    if isinstance(rs, dict):
        kind = rs.get("rope_type", rs.get("type"))
        if kind in (None, "default"):
            return inv
        if kind == "linear":
            return inv / float(rs["factor"])
        if kind == "llama3":
            f, lo, hi = (
                float(rs["factor"]),
                float(rs["low_freq_factor"]),
                float(rs["high_freq_factor"]),
            )
            om = float(rs["original_max_position_embeddings"])
            wave = 2 * math.pi / inv
            smooth = (om / wave - lo) / (hi - lo) if lo != hi else 0
            return torch.where(
                wave < om / hi,
                inv,
                torch.where(wave > om / lo, inv / f, (1 - smooth) * inv / f + smooth * inv),
            )
        raise WeightcheckError(None, f"rope_scaling type {kind!r}: not supported by eval yet")
    return inv


def _rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaEagle3:
    """A Llama EAGLE-3 drafter, loaded from a :class:`weightcheck.model.drafter.Drafter`."""

    def __init__(self, d, dtype: str | None = None, embed=None):
        import torch

        self.d = d
        norm = d.normalized
        self.label = d.source.spec
        self._runs(d, norm)
        self.dtype_name = dtype or engine_dtype(norm)
        self.dtype = getattr(torch, self.dtype_name)
        sym = norm.symbols()
        self.H, self.T, self.n_aux = sym["H"], sym["T"], sym["n_aux"]
        self.nh, self.nkv = sym["nh"], sym["nkv"]
        self.hd = sym["hd"] or self.H // self.nh
        self.V, self.Vd = sym["V"], sym["Vd"]
        self.eps = float(norm.get("rms_norm_eps") or 1e-6)
        self.norm_output = bool(norm.get("norm_output"))
        self.norm_before_residual = bool(norm.get("norm_before_residual"))
        self._canon = d.by_canonical()
        self._load_input(norm)
        self._load_layer()
        self.norm = RMSNorm(self._w("norm.weight"), self.eps)
        self.lm_head = self._w("lm_head.weight")
        own_embed = self._w("embed_tokens.weight", False)
        self.embed = own_embed if own_embed is not None else embed
        self.embed_from = (
            "drafter" if own_embed is not None else ("target" if embed is not None else None)
        )
        self.inv_freq = _rope_inv_freq(self.hd, norm)
        from weightcheck.model import vocab as vocab_mod

        vm = vocab_mod.from_drafter(d)
        self.vocab_map = vm
        self.d2t_targets = torch.tensor(vm.targets, dtype=torch.long) if vm else None

    def _runs(self, d, norm) -> None:
        """What eval runs: one-layer Llama EAGLE-3 drafters with silu (else exit 2, saying why)."""
        arch = d.architecture.name if d.architecture else None
        if arch != "llama_eagle3":
            raise WeightcheckError(
                self.label,
                f"eval runs Llama EAGLE-3 drafters; this one is {arch or 'of no known architecture'}",
            )
        layers = norm.get("num_hidden_layers") or 1
        if layers != 1:
            raise WeightcheckError(
                self.label, f"eval runs one-layer drafters; this one has {layers} layers"
            )
        act = norm.get("hidden_act") or "silu"
        if act != "silu":
            raise WeightcheckError(self.label, f"hidden_act {act!r}: eval runs silu drafters")

    def _w(self, name: str, required: bool = True):
        """The drafter's tensor of canonical ``name`` in the compute dtype (None when optional
        and absent)."""
        t = self._canon.get(name)
        if t is None:
            if required:
                raise WeightcheckError(self.label, f"has no {name}: the drafter cannot run")
            return None
        return load_tensor(self.d.source, t.name, None, self.dtype_name)

    def _load_input(self, norm) -> None:
        """fc and the norms before it."""
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
        self.input_norm = (
            RMSNorm(w("input_norm.weight"), self.eps) if norm.get("norm_before_fc") else None
        )

    def _load_layer(self) -> None:
        """The decoder layer (midlayer.*): attention, MLP, its three norms."""
        w, p = self._w, "midlayer."
        self.q = w(p + "self_attn.q_proj.weight")
        self.k = w(p + "self_attn.k_proj.weight")
        self.v = w(p + "self_attn.v_proj.weight")
        self.o = w(p + "self_attn.o_proj.weight")
        self.qb = w(p + "self_attn.q_proj.bias", False)
        self.kb = w(p + "self_attn.k_proj.bias", False)
        self.vb = w(p + "self_attn.v_proj.bias", False)
        self.ob = w(p + "self_attn.o_proj.bias", False)
        self.gate = w(p + "mlp.gate_proj.weight")
        self.up = w(p + "mlp.up_proj.weight")
        self.down = w(p + "mlp.down_proj.weight")
        self.in_norm = RMSNorm(w(p + "input_layernorm.weight"), self.eps)
        self.hidden_norm = RMSNorm(w(p + "hidden_norm.weight"), self.eps)
        self.post_norm = RMSNorm(w(p + "post_attention_layernorm.weight"), self.eps)

    @property
    def has_embed(self) -> bool:
        return self.embed is not None

    def _embed(self, ids):
        import torch

        if isinstance(self.embed, torch.Tensor):
            return torch.nn.functional.embedding(ids, self.embed).to(self.dtype)
        return self.embed.gather(ids).to(self.dtype)  # target rows (eval/target.py Rows)

    def project(self, aux):
        import torch

        h = aux.to(self.dtype)
        if self.input_norm is not None:
            h = self.input_norm(h)
        if self.fc_norms is not None:
            h = torch.cat([n(c) for n, c in zip(self.fc_norms, h.chunk(self.n_aux, dim=-1))], -1)
        out = torch.nn.functional.linear(h, self.fc, self.fc_bias)
        return out

    def _rope(self, x, pos):
        import torch

        freqs = torch.outer(pos.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        return x * cos + _rotate_half(x) * sin

    def unroll(self, aux, input_ids, steps: int):
        """Draft ids (target ids, through d2t) [steps, S] for one sample: ``aux`` [S, n_aux*T];
        ``input_ids`` [S] the sample's tokens (column t's step-k input is token t+k+1)."""
        import torch
        import torch.nn.functional as F

        S = aux.shape[0]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        rep = nh // nkv
        h = self.project(aux)
        pos = torch.arange(S)
        mask = torch.full((S, S), torch.finfo(self.dtype).min)
        mask.masked_fill_(pos < (pos + 1).view(S, 1), 0)
        mask = mask.to(self.dtype)
        keys, values, preds = [], [], []
        for k in range(steps):
            # SpecForge's padding(left=False), once per step: column t's input is token t+k+1
            ids = input_ids[k + 1 : k + 1 + S]
            if ids.shape[0] < S:
                ids = torch.cat((ids, ids.new_zeros(S - ids.shape[0])))
            emb = self._embed(ids)
            residual = self.hidden_norm(h) if self.norm_before_residual else h
            x = torch.cat((self.in_norm(emb), self.hidden_norm(h)), dim=-1)
            q = F.linear(x, self.q, self.qb).view(S, nh, hd).transpose(0, 1)
            kk = F.linear(x, self.k, self.kb).view(S, nkv, hd).transpose(0, 1)
            vv = F.linear(x, self.v, self.vb).view(S, nkv, hd).transpose(0, 1)
            q, kk = self._rope(q, pos + k), self._rope(kk, pos + k)
            if rep > 1:
                kk = kk.repeat_interleave(rep, dim=0)
                vv = vv.repeat_interleave(rep, dim=0)
            keys.append(kk)
            values.append(vv)
            scale = math.sqrt(hd)
            wts = torch.matmul(q, keys[0].transpose(1, 2)) / scale + mask
            extra = [((q * keys[i]).sum(-1) / scale)[..., None] for i in range(1, len(keys))]
            if extra:
                wts = torch.cat([wts, *extra], dim=-1)
            wts = torch.softmax(wts, dim=-1, dtype=torch.float32).to(self.dtype)
            out = torch.matmul(wts[..., :S], values[0])
            for i in range(1, len(keys)):
                out = out + wts[..., S + i - 1][..., None] * values[i]
            out = out.transpose(0, 1).reshape(S, nh * hd)
            h = residual + F.linear(out, self.o, self.ob)
            residual = h
            m = self.post_norm(h)
            h = residual + F.linear(
                F.silu(F.linear(m, self.gate)) * F.linear(m, self.up), self.down
            )
            normed = self.norm(h)
            logits = F.linear(normed, self.lm_head)
            draft = logits.argmax(-1)
            preds.append(self.d2t_targets[draft] if self.d2t_targets is not None else draft)
            if self.norm_output:
                h = normed
        return torch.stack(preds)
