"""Reading a tensor's bytes, in bounded chunks, from wherever its source keeps them.

safetensors tensors are byte ranges of a file (Hub files are first fetched through
huggingface_hub's cache); pickled tensors come from ``torch.load(weights_only=True)``. Nothing here
holds more than one chunk of a tensor in memory.
"""

from __future__ import annotations

import ctypes
import math
import os
from typing import Iterator

from weightcheck.errors import WeightcheckError
from weightcheck.sources.base import Source
from weightcheck.sources.pickled import load_pickled
from weightcheck.storage.header import TORCH_NAMES

CHUNK = 64 << 20  # 64 MiB
VALUES_CHUNK_ELEMS = 4 << 20  # elements per chunk in --values: ~16 MB of float32 per side


def _pickle_tensors(src: Source, fname: str) -> dict:
    cache = src.pickle_cache
    if fname not in cache:
        cache[fname] = load_pickled(src.local_path(fname))[0]
    return cache[fname]


def torch_tensor_bytes(t) -> bytes:
    """The raw bytes of a CPU torch tensor (no numpy needed): a copy of its view."""
    return bytes(torch_tensor_view(t.detach().contiguous()))


def torch_tensor_view(t) -> memoryview:
    """A zero-copy view of a contiguous CPU torch tensor's bytes; keep ``t`` alive while it is used."""
    n = t.numel() * t.element_size()
    if not n:
        return memoryview(b"")
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def iter_chunks(
    src: Source, name: str, chunk: int = CHUNK, align: int = 1, window: tuple | None = None
) -> Iterator[bytes]:
    """Yield the bytes of tensor ``name`` (a source name) in chunks of at most ``chunk`` bytes,
    each a multiple of ``align`` bytes except possibly the last; ``window`` (a, b): only its
    bytes [a, b) (a part of a fused tensor: Tensor.window)."""
    rec = src.tensors[name]
    wf = src.files[rec.file]
    chunk = max(align, chunk - chunk % align)
    a, b = window if window is not None else (0, rec.nbytes)
    if wf.format == "pickle" and rec.begin is None:
        data = torch_tensor_bytes(_pickle_tensors(src, rec.file)[name])[a:b]
        for i in range(0, len(data), chunk):
            yield data[i : i + chunk]
        return
    path = src.local_path(rec.file)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise WeightcheckError(path, f"cannot read: {e.strerror}") from None
    try:
        pos, end = rec.begin + a, rec.begin + b
        while pos < end:
            n = min(chunk, end - pos)
            buf = os.pread(fd, n, pos)
            if len(buf) != n:
                raise WeightcheckError(path, f"file ends inside tensor {name!r}: truncated")
            yield buf
            pos += n
    finally:
        os.close(fd)


def read_range(src: Source, name: str, a: int, b: int) -> bytes:
    """Bytes [a, b) of tensor ``name``: a Range read for a Hub file not downloaded, a pread for a
    local one, a slice of torch's bytes for a pickled one."""
    if name in src.planned_from:  # convert's planned output: the bytes it will copy
        origin, origin_name, off = src.planned_from[name]  # off: a fused tensor's part
        return read_range(origin, origin_name, off + a, off + b)
    rec = src.tensors[name]
    if b <= a:
        return b""
    wf = src.files[rec.file]
    if wf.format == "pickle" and rec.begin is None:  # a byte view, sliced before it is copied
        import torch

        t = _pickle_tensors(src, rec.file)[name].detach().contiguous().reshape(-1)
        return torch_tensor_bytes(t.view(torch.uint8)[a:b])
    if src.kind == "hub" and wf.local_path is None:
        data, _ = src.hub.read_range(rec.file, rec.begin + a, rec.begin + b)
    else:
        path = src.local_path(rec.file)
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.pread(fd, b - a, rec.begin + a)
        finally:
            os.close(fd)
    if len(data) != b - a:
        raise WeightcheckError(
            f"{src.spec}/{rec.file}", f"short read of tensor {name!r}: truncated"
        )
    return data


def read_small(src: Source, name: str, limit: int = 16 << 20) -> bytes:
    """The bytes of one small tensor (d2t, t2d, a norm): a Range read for Hub sources, so the
    file it sits in is not downloaded."""
    rec = src.tensors[name]
    if rec.nbytes > limit:
        raise ValueError(f"{name} is {rec.nbytes} bytes, more than read_small reads")
    return read_range(src, name, 0, rec.nbytes)


def torch_dtype(dtype: str):
    """The torch dtype for a safetensors dtype name (safetensors_header.TORCH_NAMES)."""
    import torch

    return getattr(torch, TORCH_NAMES[dtype])


def from_bytes(chunk, dtype: str):
    """A torch tensor viewing ``chunk`` (read-only buffers are only read, never written)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.frombuffer(chunk, dtype=torch_dtype(dtype))


def _narrower(src, dst) -> bool:
    """Whether a cast from torch dtype ``src`` to ``dst`` can turn a finite value infinite
    (``dst`` ends below ``src``: to float16 from bfloat16 or float32; float32 to bfloat16 at its
    last values)."""
    import torch

    return (
        src.is_floating_point
        and dst.is_floating_point
        and torch.finfo(dst).max < torch.finfo(src).max
    )


class CastOverflow(ValueError):
    """A finite value the cast makes infinite (float16 ends at 65504): written, the served model
    would compute with inf. The message says the largest such value and where the dtype ends."""


def write_cast(write, chunk, src_dtype: str, dst_dtype: str) -> None:
    """``write`` the bytes of ``chunk`` cast from one dtype to another (as they are when equal),
    without copying the cast chunk again. Raises :class:`CastOverflow` before writing a chunk in
    which a finite value became infinite."""
    if src_dtype == dst_dtype:
        write(chunk)
        return
    import torch

    x = from_bytes(chunk, src_dtype)
    y = x.to(torch_dtype(dst_dtype)).contiguous()
    # aminmax: one pass and no mask, about half a cast (isinf().any() took twice a cast); a NaN
    # in its answer could hide an inf, so that chunk is looked at too
    if _narrower(x.dtype, y.dtype) and y.numel() and not all(map(math.isfinite, torch.aminmax(y))):
        over = torch.isinf(y) & torch.isfinite(x)
        if bool(over.any()):
            big = float(x[over].abs().max())
            end = float(torch.finfo(y.dtype).max)
            raise CastOverflow(
                f"holds {big:.6g}, beyond {TORCH_NAMES.get(dst_dtype, dst_dtype)}'s largest "
                f"{end:.6g} (cast, it would be inf)"
            )
    write(torch_tensor_view(y))  # y stays alive until write returns
