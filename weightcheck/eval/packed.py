"""Sequences packed along one axis, and the unrolled attention over them (docs/eval.md §2, §7).

A batch holds several samples end to end: every per-position operation of the drafter (the
projections, norms, rotations, MLP, lm_head) runs once over all of them, as one matrix. Only the
attention is per sequence: step k's query at column t sees the step-0 keys of columns <= t *of its
own sequence* and the keys of column t at steps 1..k. It runs over groups of whole sequences
padded to the group's longest (the padding masked out of the keys and dropped from the output),
or, for one sequence too long for the memory budget, over blocks of its query rows; either way the
softmax is in float32 over the same scores as one sequence alone, so one sample gives exactly
the computation of the unpacked forward.
"""

from __future__ import annotations

# bytes one attention score costs while it is alive: the scores in the compute dtype, their
# float32 softmax, the weights cast back, the additive mask (at most 8-byte dtypes: 24)
SCORE_BYTES = 16


def _to(t, device):
    """A host tensor on ``device``: through pinned memory, without waiting for the device (a
    copy from pageable memory would wait for every kernel queued before it)."""
    if device.type == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


class Layout:
    """Where each sequence of a packed batch lies: ``lengths`` in order, on ``device``."""

    def __init__(self, lengths, device="cpu", budget: int = 256 << 20):
        import torch

        self.lengths = [int(n) for n in lengths]
        self.device = torch.device(device)
        self.budget = budget
        self.total = sum(self.lengths)
        starts, at = [], 0
        for n in self.lengths:
            starts.append(at)
            at += n
        self.starts = starts
        n = torch.tensor(self.lengths, dtype=torch.long)
        seg = torch.repeat_interleave(torch.arange(len(self.lengths)), n)
        pos = torch.arange(self.total) - torch.tensor(starts, dtype=torch.long)[seg]
        self.seg = _to(seg, self.device)
        self.pos = _to(pos, self.device)  # t: the column within its sequence
        self.seg_len = _to(n[seg], self.device)  # the length of each row's sequence
        self._plans: dict = {}

    @classmethod
    def one(cls, length: int, device="cpu", budget: int = 256 << 20) -> Layout:
        return cls([length], device, budget)

    def shifted(self, ids, k: int):
        """Column t's input at step k: its sequence's token t+k+1, 0 past the end (SpecForge's
        ``padding(left=False)``, once per step)."""
        import torch

        src = torch.arange(self.total, device=ids.device) + (k + 1)
        inside = (self.pos + (k + 1)) < self.seg_len
        return torch.where(inside, ids[src.clamp(max=max(0, self.total - 1))], 0)

    def plan(self, row_cost: int):
        """The attention's pieces for scores of ``row_cost`` bytes per (query, key) pair:
        ("rows", start, length, [(a, b), ...]) for one sequence in blocks of query rows, and
        ("pad", Padding) for sequences padded together."""
        p = self._plans.get(row_cost)
        if p is None:
            p = _plan(self.lengths, self.starts, row_cost, self.budget)
            p = [(x[0], _Padding(self, x[1], x[2])) if x[0] == "pad" else x for x in p]
            self._plans[row_cost] = p
        return p


class _Padding:
    """Sequences ``members`` padded to ``n`` rows: the rows gathered (``idx`` [B, n], padding
    repeats a sequence's last row), the padded keys masked (``key_mask`` [B, n] additive), and
    where the real rows go back (``src`` into the flattened [B*n], ``dst`` into the batch)."""

    def __init__(self, layout: Layout, members, n: int):
        import torch

        self.members, self.n = list(members), n
        lens = torch.tensor([layout.lengths[i] for i in members])
        first = torch.tensor([layout.starts[i] for i in members])
        t = torch.arange(n)
        valid = t.view(1, n) < lens.view(-1, 1)
        idx = first.view(-1, 1) + torch.minimum(t.view(1, n), (lens - 1).view(-1, 1))
        dev = layout.device
        self.idx = _to(idx, dev)
        self.valid = _to(valid, dev)
        self.src = _to(valid.flatten().nonzero().flatten(), dev)
        self.dst = _to(idx[valid], dev)

    def key_mask(self, dtype):
        import torch

        m = torch.zeros(self.valid.shape, dtype=dtype, device=self.valid.device)
        return m.masked_fill_(~self.valid, torch.finfo(dtype).min)


def _plan(lengths, starts, row_cost: int, budget: int) -> list:
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    pieces, group, longest = [], [], 0
    for i in order:
        n = lengths[i]
        if n == 0:
            continue
        if n * n * row_cost > budget or (not group and len(order) == 1):
            rows = max(1, budget // max(1, n * row_cost))
            blocks = [(a, min(n, a + rows)) for a in range(0, n, rows)]
            pieces.append(("rows", starts[i], n, blocks))
            continue
        if group and (len(group) + 1) * longest * longest * row_cost > budget:
            pieces.append(_group(group, longest))
            group = []
        if not group:
            longest = n
        group.append(i)
    if group:
        pieces.append(_group(group, longest))
    return pieces


def _group(group, longest):
    if len(group) == 1:
        return ("single", group[0], longest)
    return ("pad", list(group), longest)


def _causal(rows, keys, first_row, dtype, device):
    """The additive mask of query rows ``first_row ..`` over keys ``0 .. keys-1``."""
    import torch

    r = torch.arange(first_row, first_row + rows, device=device)
    k = torch.arange(keys, device=device)
    m = torch.zeros((rows, keys), dtype=dtype, device=device)
    return m.masked_fill_(k.view(1, keys) > r.view(rows, 1), torch.finfo(dtype).min)


def _block(q, k0, v0, extra, vextra, mask, score):
    """Softmax over [scores of k0 (masked) ; the step-1..k keys of the same column], float32."""
    import torch

    n = k0.shape[-2]
    w = score(torch.matmul(q, k0.transpose(-1, -2))) + mask
    if extra:
        w = torch.cat([w, *[e[..., None] for e in extra]], dim=-1)
    w = torch.softmax(w, dim=-1, dtype=torch.promote_types(q.dtype, torch.float32)).to(q.dtype)
    out = torch.matmul(w[..., :n], v0)
    for i, vi in enumerate(vextra):
        out = out + w[..., n + i][..., None] * vi
    return out


def attend(q, keys, values, layout: Layout, score):
    """Test-time attention of step k = len(keys) - 1 over a packed batch: ``q`` [heads, L, d];
    ``keys[0]``/``values[0]`` the step-0 keys and values (causal within each sequence);
    ``keys[i]``/``values[i]`` (i >= 1) column t's own at step i. Output [heads, L, dv]."""
    nh = q.shape[0]
    extra = [score((q * keys[i]).sum(-1)) for i in range(1, len(keys))]
    vextra = values[1:]
    cost = nh * SCORE_BYTES
    pieces = layout.plan(cost)
    if len(pieces) == 1 and pieces[0][0] in ("rows", "single") and layout.total:
        kind, *_ = pieces[0]
        if kind == "single" or len(pieces[0][3]) == 1:  # one sequence in one block
            mask = _causal(layout.total, layout.total, 0, q.dtype, q.device)
            return _block(q, keys[0], values[0], extra, vextra, mask, score)
    out = q.new_empty((nh, layout.total, values[0].shape[-1]))
    for piece in pieces:
        if piece[0] == "pad":
            _padded(out, q, keys, values, extra, piece, score)
            continue
        if piece[0] == "single":
            i, n = piece[1], piece[2]
            start, blocks = layout.starts[i], [(0, n)]
        else:
            _, start, n, blocks = piece
        for a, b in blocks:
            rows = slice(start + a, start + b)
            mask = _causal(b - a, b, a, q.dtype, q.device)
            out[:, rows] = _block(
                q[:, rows],
                keys[0][:, start : start + b],
                values[0][:, start : start + b],
                [e[:, rows] for e in extra],
                [v[:, rows] for v in vextra],
                mask,
                score,
            )
    return out


def _padded(out, q, keys, values, extra, piece, score) -> None:
    """Sequences padded together (a :class:`_Padding`): gathered, attended, written back."""
    pad = piece[1]
    idx, n = pad.idx, pad.n
    causal = _causal(n, n, 0, q.dtype, q.device)  # [n, n]
    mask = causal.unsqueeze(0) + pad.key_mask(q.dtype).unsqueeze(1)  # [B, n, n]
    o = _block(
        q[:, idx],
        keys[0][:, idx],
        values[0][:, idx],
        [e[:, idx] for e in extra],
        [v[:, idx] for v in values[1:]],
        mask,
        score,
    )  # [heads, B, n, dv]
    nh, B, _, dv = o.shape
    out[:, pad.dst] = o.reshape(nh, B * n, dv)[:, pad.src]
