"""The target's side of the metric: its top-1 token from its lm_head (and final norm), read by
ranges as ``convert --lm-head-from`` reads it — never the whole model, and the head itself in row
chunks unless it is small — and the embedding rows of the tokens a sample holds (the engines give
a drafter without ``embed_tokens`` the target's: docs/engines.md §1.5, §2.5).
"""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod
from weightcheck.model.target import EMBED_NAMES, HEAD_NAMES
from weightcheck.sources import open_source
from weightcheck.sources.tensors import CHUNK, from_bytes, read_range

NORM_NAMES = (
    "model.norm.weight",
    "language_model.model.norm.weight",
    "model.language_model.norm.weight",
    "norm.weight",
)
KEEP_BYTES = 256 << 20  # a head this small is read once and kept


def _runs(ids):
    out = []
    for x in sorted(set(ids)):
        if out and x == out[-1][1]:
            out[-1] = (out[-1][0], x + 1)
        else:
            out.append((x, x + 1))
    return out


class Rows:
    """Rows of a 2-D tensor of a source, read by range on demand (on a CPU), or the whole tensor
    kept on the device (on a GPU, or when it is small). ``lazy``: on a GPU, loaded there on first
    use (:meth:`load`), not before: the target's embedding, which a drafter with its own never
    uses."""

    def __init__(self, src, rec, dtype, device=None, lazy: bool = False):
        self.src, self.rec, self.dtype = src, rec, dtype
        self.rows, self.width = rec.shape
        self.row_bytes = rec.nbytes // self.rows
        self.full = None
        self.on_gpu = device is not None and device.type != "cpu"
        self.device = device if self.on_gpu else None
        if (rec.nbytes <= KEEP_BYTES or self.on_gpu) and not (lazy and self.on_gpu):
            self.load()

    def load(self) -> None:
        """Keep the whole tensor (on the GPU, or small on the CPU) from now on."""
        if self.full is None:
            self.full = self._whole(self.device)

    def _whole(self, device=None):
        """The whole tensor in the compute dtype, on ``device``: read straight there from a local
        file (forward.py ``load_tensor``: upload.py on a GPU, a map on the CPU) when it can be,
        else read in chunks."""
        import torch

        from weightcheck.eval import upload
        from weightcheck.eval.forward import _mapped, load_tensor

        local = upload.located(self.src, self.rec) if device is not None else None
        if local is not None or _mapped(self.src, self.rec) is not None:
            name = str(self.dtype).replace("torch.", "")
            return load_tensor(self.src, self.rec.name, None, name, device)
        step = max(1, CHUNK // max(1, self.row_bytes))
        parts = [self.read(a, min(self.rows, a + step)) for a in range(0, self.rows, step)]
        return torch.cat([p.to(device) if device is not None else p for p in parts])

    def read(self, a: int, b: int):
        if self.full is not None:
            return self.full[a:b]
        data = bytearray(
            read_range(self.src, self.rec.name, a * self.row_bytes, b * self.row_bytes)
        )
        return from_bytes(data, self.rec.dtype).reshape(b - a, self.width).to(self.dtype)

    def gather(self, ids):
        """``F.embedding(ids, W)`` reading only the rows ``ids`` names (on a GPU: the whole
        tensor, loaded there on first use)."""
        import torch

        if self.on_gpu:
            self.load()
        if self.full is not None:
            return self.full[ids.to(self.full.device)]
        flat = ids.reshape(-1).tolist()
        bad = [x for x in flat if not 0 <= x < self.rows]
        if bad:
            raise WeightcheckError(
                self.src.spec, f"token id {bad[0]} is outside the {self.rows}-row {self.rec.name}"
            )
        pos, parts, at = {}, [], 0
        for a, b in _runs(flat):
            parts.append(self.read(a, b))
            for x in range(a, b):
                pos[x] = at + x - a
            at += b - a
        table = torch.cat(parts)
        return table[torch.tensor([pos[x] for x in flat], dtype=torch.long)].reshape(
            *ids.shape, self.width
        )

    def top1(self, h):
        """argmax over rows of ``h @ W.T`` [N], streaming W in chunks (first max wins, as
        torch.argmax)."""
        import torch

        if self.full is not None:
            per = max(1, (1 << 30) // max(1, self.rows * 6))  # ~1 GiB of logits at a time
            return torch.cat(
                [
                    torch.nn.functional.linear(h[a : a + per], self.full).float().argmax(-1)
                    for a in range(0, h.shape[0], per)
                ]
            )
        step = max(1, CHUNK // max(1, self.row_bytes))
        best = best_i = None
        for a in range(0, self.rows, step):
            b = min(self.rows, a + step)
            logits = torch.nn.functional.linear(h, self.read(a, b)).float()
            v, i = logits.max(-1)
            i = i + a
            if best is None:
                best, best_i = v, i
            else:
                better = v > best
                best = torch.where(better, v, best)
                best_i = torch.where(better, i, best_i)
        return best_i


class TargetSide:
    """``--target``: its config, lm_head and final norm (and embedding rows) by ranges."""

    def __init__(self, spec: str, dtype: str | None = None, token: str | None = None, device=None):
        import torch

        names = set(EMBED_NAMES) | set(HEAD_NAMES) | set(NORM_NAMES)
        self.src = open_source(spec, token=token, only=names)
        self.spec = spec
        if self.src.config is None:
            raise WeightcheckError(spec, "target has no config.json")
        self.norm_cfg = config_mod.normalize(self.src.config)
        from weightcheck.eval.forward import engine_dtype

        self.dtype_name = dtype or engine_dtype(self.norm_cfg)
        self.dtype = getattr(torch, self.dtype_name)
        t = self.src.tensors
        head = next((t[n] for n in HEAD_NAMES if n in t), None)
        embed = next((t[n] for n in EMBED_NAMES if n in t), None)
        if head is None and self.norm_cfg.get("tie_word_embeddings"):
            head = embed
        if head is None:
            raise WeightcheckError(spec, f"target has no lm_head ({', '.join(HEAD_NAMES)})")
        if len(head.shape) != 2:
            raise WeightcheckError(spec, f"{head.name} is {list(head.shape)}, not a matrix")
        self.vocab, self.hidden = head.shape
        self.device = device
        el = self.dtype.itemsize
        self._sizes = {f"{spec} {head.name}": head.shape[0] * head.shape[1] * el}
        self._fits(device)
        self.head = Rows(self.src, head, self.dtype, device)
        self.embed = None
        self.embed_bytes = 0  # on a GPU, should a drafter need it there (run.load_models)
        if embed is head:  # tied: the head's rows
            self.embed = self.head
        elif embed is not None and len(embed.shape) == 2:
            self.embed = Rows(self.src, embed, self.dtype, device, lazy=True)
            self.embed_bytes = embed.shape[0] * embed.shape[1] * el
        nrec = next((t[n] for n in NORM_NAMES if n in t), None)
        self.final_norm = None
        if nrec is not None:
            from weightcheck.eval.forward import RMSNorm, load_tensor

            eps = float(self.norm_cfg.get("rms_norm_eps") or 1e-6)
            w = load_tensor(self.src, nrec.name, None, self.dtype_name, device)
            self.final_norm = RMSNorm(w, eps)

    def _fits(self, device) -> None:
        """On a GPU the head is kept there: exit 2 when it does not fit."""
        if device is not None and device.type == "cuda":
            from weightcheck.eval.device import check_fits

            check_fits(device, self._sizes, self.spec)

    def bytes_per_position(self) -> int:
        """Working memory of one position of a batch: the last hidden state and the logits'
        chunk share."""
        return self.hidden * 4 * 2

    @property
    def label(self) -> str:
        return self.spec

    def top1(self, last, normed: bool, where: str):
        """The target's top-1 at each row of its last hidden state ``last`` [N, T]."""
        h = last.to(self.dtype)
        if not normed:
            if self.final_norm is None:
                raise WeightcheckError(
                    self.spec,
                    f"{where} holds the target's last hidden state before its final norm; the "
                    f"target has no final norm weight ({', '.join(NORM_NAMES[:2])})",
                )
            h = self.final_norm(h)
        return self.head.top1(h)
