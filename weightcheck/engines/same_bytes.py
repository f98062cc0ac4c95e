"""Whether a drafter tensor equals the target's once both are cast to the dtype the engine builds
in: vLLM shares the target's embedding / lm_head when ``torch.equal`` holds after the cast
(vllm 0.32.0 v1/spec_decode/llm_base_proposer.py:1450, :1530). Read by range (sources/tensors.py):
the whole tensor up to 1 MB, else 9 rows spread over it (first, last and between: a few Range
requests for a Hub target; a trained or re-initialised embedding differs in nearly every row).
numpy only (no torch).
"""

from __future__ import annotations

from weightcheck.sources.tensors import read_range

WHOLE = 1 << 20  # read whole tensors up to this size
SAMPLES = 8  # rows compared in a larger tensor (plus the last)
_NAMES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "float32": "F32",
    "BF16": "BF16",
    "F16": "F16",
    "F32": "F32",
}


def _floats(buf: bytes, dtype: str):
    import numpy as np

    if dtype == "F32":
        return np.frombuffer(buf, dtype="<f4")
    if dtype == "F16":
        return np.frombuffer(buf, dtype="<f2").astype("<f4")
    u = np.frombuffer(buf, dtype="<u2").astype("<u4") << 16  # BF16: the top half of an f32
    return u.view("<f4")


def _cast(x, dtype: str):
    """x (float32) rounded to ``dtype`` as the engine casts (nearest, ties to even), as float32."""
    import numpy as np

    if dtype == "F32":
        return x
    if dtype == "F16":
        return x.astype("<f2").astype("<f4")
    u = x.view("<u4")
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    r = np.where(np.isnan(x), u, r).astype("<u4")
    return r.view("<f4")


def equal_as(src_a, a, src_b, b, dtype: str | None) -> bool | None:
    """Tensor ``a`` of ``src_a`` equals tensor ``b`` of ``src_b`` in ``dtype`` (a torch or
    safetensors dtype name; None: ``b``'s). None when a dtype is not a float type it knows."""
    import numpy as np

    da, db = _NAMES.get(a.dtype), _NAMES.get(b.dtype)
    dt = _NAMES.get(dtype) if dtype else db
    if da is None or db is None or dt is None or tuple(a.shape) != tuple(b.shape):
        return None if (da is None or db is None or dt is None) else False
    rows = a.shape[0] if a.shape else 1
    ra, rb = a.nbytes // max(rows, 1), b.nbytes // max(rows, 1)
    if a.nbytes <= WHOLE and b.nbytes <= WHOLE:
        spans = [(0, rows)]
    else:
        step = max(1, rows // SAMPLES)
        spans = [(i, i + 1) for i in range(0, rows, step)] + [(rows - 1, rows)]
    for i, j in spans:
        x = _cast(_floats(_read(src_a, a, i * ra, j * ra), da), dt)
        y = _cast(_floats(_read(src_b, b, i * rb, j * rb), db), dt)
        if not np.array_equal(x, y):
            return False
    return True


def _read(src, t, a: int, b: int) -> bytes:
    """Bytes [a, b) of tensor ``t``; a fused tensor's part (model/drafter.py ``parts_of``) is a
    window of the fused tensor's bytes."""
    w = getattr(t, "window", None)
    base = w[0] if w else 0
    return read_range(src, t.name, base + a, base + b)


def same_raw(src_a, a, src_b, b) -> bool:
    """Tensors of one dtype and shape hold the same bytes (any dtype: an integer map, a bool
    mask); read in chunks of at most 1 MB."""
    if a.nbytes != b.nbytes:
        return False
    for i in range(0, a.nbytes, WHOLE):
        j = min(a.nbytes, i + WHOLE)
        if _read(src_a, a, i, j) != _read(src_b, b, i, j):
            return False
    return True


def copies_equal(src, copies: list, keep, dtypes=(None,)) -> bool | None:
    """Whether every tensor of ``copies`` (one canonical tensor given several times, WC103) holds
    the values of ``keep`` (the copy the engines keep) once cast to each of ``dtypes`` (the dtypes
    the engines build in; None: ``keep``'s). None when they cannot be compared (a dtype of no
    known kind with another dtype or shape, a read that fails)."""
    return _all_equal([(src, t) for t in copies if t is not keep], src, keep, dtypes)


def shadowed_equal(src, name: str, dtypes=(None,)) -> bool | None:
    """Whether the earlier files' copies of tensor ``name`` (a name in two weight files:
    sources/base.py ``Source.shadowed``) hold the values of the later one, which the engines
    keep (WC210); None when they cannot be compared."""
    import copy

    keep = src.tensors[name]
    pairs = []
    for old in src.shadowed.get(name, ()):
        view = copy.copy(src)  # the same files, reading the earlier record under the name
        view.tensors = {**src.tensors, name: old}
        view.planned_from = {}
        pairs.append((view, old))
    return _all_equal(pairs, src, keep, dtypes)


def _all_equal(pairs: list, src, keep, dtypes) -> bool | None:
    try:
        for src_t, t in pairs:
            for dt in dtypes:
                eq = equal_as(src_t, t, src, keep, dt)
                if eq is None and t.dtype == keep.dtype and tuple(t.shape) == tuple(keep.shape):
                    eq = same_raw(src_t, t, src, keep)
                if not eq:
                    return eq
    except Exception:  # a read failing must not fail a check: the copies are not compared
        return None
    return True
