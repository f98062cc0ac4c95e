"""Writing safetensors files from byte sources, without torch or numpy.

``header_bytes(entries, metadata)`` lays out a header exactly as the safetensors library does
(tensors back to back in the given order, JSON padded with spaces to a multiple of 8 bytes);
``write_file`` streams each tensor's bytes from a callable or a bytes object into a file.
"""

from __future__ import annotations

import json
import struct
from typing import Callable, Iterable

from weightcheck.record import record
from weightcheck.storage.header import tensor_nbytes


@record
class OutTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    # bytes, or a callable(write) that calls write(chunk) with the tensor's bytes in order
    data: bytes | Callable[[Callable[[bytes], object]], None]

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.shape)


def header_bytes(
    tensors: Iterable[OutTensor],
    metadata: dict[str, str] | None = None,
    data_start_mod: tuple[int, int] | None = None,
) -> bytes:
    """The 8-byte length and the header JSON, padded with spaces to a multiple of 8 bytes.

    ``data_start_mod=(r, m)``: pad further (up to ``m`` bytes of spaces, which the format allows)
    so the data buffer starts at a file offset ``≡ r (mod m)``; ``r`` must be a multiple of 8."""
    obj: dict = {}
    if metadata:
        obj["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    pos = 0
    for t in tensors:
        obj[t.name] = {
            "dtype": t.dtype,
            "shape": list(t.shape),
            "data_offsets": [pos, pos + t.nbytes],
        }
        pos += t.nbytes
    raw = json.dumps(obj, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    if data_start_mod is not None:
        r, m = data_start_mod
        if r % 8:
            raise ValueError(f"data start residue {r} is not a multiple of 8")
        raw += b" " * ((r - 8 - len(raw)) % m)
    return struct.pack("<Q", len(raw)) + raw


def write_file(path: str, tensors: list[OutTensor], metadata: dict[str, str] | None = None) -> int:
    """Write a safetensors file; returns its size. Raises ValueError if a source gives the wrong
    number of bytes (the file is then incomplete: callers write to a temporary path)."""
    with open(path, "wb") as f:
        f.write(header_bytes(tensors, metadata))
        for t in tensors:
            if isinstance(t.data, (bytes, bytearray, memoryview)):
                written = f.write(t.data)
            else:
                count = [0]

                def w(chunk, _f=f, _c=count):
                    _c[0] += len(chunk)
                    _f.write(chunk)

                t.data(w)
                written = count[0]
            if written != t.nbytes:
                raise ValueError(f"{t.name}: wrote {written} bytes, expected {t.nbytes}")
        return f.tell()
