"""The vLLM oracle's reading of a parameter after loading (tests/engine/vllm_oracle.py): its
state (init, partial, loaded: the marked values left) and whether it equals the checkpoint
tensors that wrote it, each write applied in load order. Runs inside the vLLM side venv (torch
only)."""

from __future__ import annotations

# marked NaN / sentinel bit patterns, per element size: a checkpoint NaN (0x7fc0...) differs
_SENTINEL_FLOAT = {2: 0x7FD5, 4: 0x7FD5D5D5, 8: 0x7FD5D5D5D5D5D5D5}
_INT_VIEW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def bit_view(t):
    import torch

    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t.view(getattr(torch, _INT_VIEW[t.element_size()]))


def sentinel(t) -> int:
    """The marked value of a tensor's dtype, as an integer of its bit view."""
    if t.dtype.is_floating_point:
        return _SENTINEL_FLOAT[t.element_size()]
    return {1: 0xA5, 2: -0x2A2B, 4: -0x2A2A2A2B, 8: -0x2A2A2A2A2A2A2A2B}[t.element_size()]


def expected_and_state(p, writes: list, keys: dict) -> dict:
    """State of one parameter from its elements and the writes recorded for it (``writes``:
    [(key, shard, mask of the elements it changed)] in load order; ``keys``: checkpoint key ->
    {"tensor": what vLLM's iterator yielded})."""
    import torch

    data = p.data
    bits = bit_view(data).reshape(-1)
    written = bits != sentinel(data)
    n = int(written.sum())
    state = "init" if n == 0 else ("loaded" if n == bits.numel() else "partial")
    if bits.numel() == 0 and writes:
        # an empty parameter (intermediate_size 0) its weight loader was called for: loaded, as
        # vLLM counts it (vllm==0.32.0 vllm/model_executor/models/utils.py:299-345
        # AutoWeightsLoader._load_param yields its name once its weight_loader returned;
        # model_loader/default_loader.py:562-566 checks that set)
        state = "loaded"
    equals = None
    if writes:
        exp = bits.clone()
        ok = True
        last_mask: dict = {}
        for key, shard, changed in writes:
            src = keys.get(key, {}).get("tensor") if key is not None else None
            if src is None:
                ok = False
                continue
            vals = bit_view(src.to(data.dtype).contiguous()).reshape(-1)
            mask = changed.reshape(-1)
            if int(mask.sum()) == 0:  # rewrote what was there: same place as the last same shard
                if shard not in last_mask:  # the first of its shard, after a whole write: nothing
                    continue
                mask = last_mask[shard]
            if int(mask.sum()) == vals.numel():
                exp[mask] = vals
            elif (
                shard is not None
                and src.dim() == data.dim() >= 1
                and src.shape[1:] == data.shape[1:]
            ):
                # a shard that rewrote some equal values (after its fused copy): its rows start at
                # the first it changed
                a = int(changed.reshape(data.shape[0], -1).any(dim=1).nonzero().min())
                mask = torch.zeros_like(changed).reshape(data.shape)
                mask[a : a + src.shape[0]] = True
                mask = mask.reshape(-1)
                if int(mask.sum()) != vals.numel():
                    ok = False
                    continue
                exp[mask] = vals
            elif src.dim() == data.dim() and all(a <= b for a, b in zip(src.shape, data.shape)):
                # e.g. a padded vocab: the tensor fills the leading block, padding got zeros
                region = tuple(slice(0, s) for s in src.shape)
                e2 = exp.view(data.shape)
                e2[region] = bit_view(src.to(data.dtype).contiguous())
            else:
                ok = False
            last_mask[shard] = mask
        equals = bool(ok and torch.equal(exp[written], bits[written]))
    return {"shape": list(data.shape), "state": state, "equals_checkpoint": equals}
