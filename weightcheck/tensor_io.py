"""Reading a tensor's bytes, in bounded chunks, from wherever its source keeps them.

safetensors tensors are byte ranges of a file (Hub files are first fetched through
huggingface_hub's cache); pickled tensors come from ``torch.load(weights_only=True)``. Nothing here
holds more than one chunk of a tensor in memory.
"""
from __future__ import annotations

import ctypes
import os
from typing import Iterator

from weightcheck.errors import WeightcheckError
from weightcheck.sources import Source, load_pickled

CHUNK = 64 << 20  # 64 MiB


def _pickle_tensors(src: Source, fname: str) -> dict:
    cache = src.__dict__.setdefault("_pickle_cache", {})
    if fname not in cache:
        cache[fname] = load_pickled(src.local_path(fname))[0]
    return cache[fname]


def torch_tensor_bytes(t) -> bytes:
    """The raw bytes of a CPU torch tensor (no numpy needed)."""
    t = t.detach().contiguous()
    n = t.numel() * t.element_size()
    return ctypes.string_at(t.data_ptr(), n) if n else b""


def iter_chunks(src: Source, name: str, chunk: int = CHUNK, align: int = 1) -> Iterator[bytes]:
    """Yield the bytes of tensor ``name`` (a source name) in chunks of at most ``chunk`` bytes,
    each a multiple of ``align`` bytes except possibly the last."""
    rec = src.tensors[name]
    wf = src.files[rec.file]
    chunk = max(align, chunk - chunk % align)
    if wf.format == "pickle":
        data = torch_tensor_bytes(_pickle_tensors(src, rec.file)[name])
        for i in range(0, len(data), chunk):
            yield data[i:i + chunk]
        return
    path = src.local_path(rec.file)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise WeightcheckError(path, f"cannot read: {e.strerror}") from None
    try:
        pos, end = rec.begin, rec.end
        while pos < end:
            n = min(chunk, end - pos)
            buf = os.pread(fd, n, pos)
            if len(buf) != n:
                raise WeightcheckError(path, f"file ends inside tensor {name!r}: truncated")
            yield buf
            pos += n
    finally:
        os.close(fd)


def read_all(src: Source, name: str) -> bytes:
    return b"".join(iter_chunks(src, name))
