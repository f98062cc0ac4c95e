"""A strict reader of safetensors headers — the only part of a weights file we normally read.

Format (https://huggingface.co/docs/safetensors, docs/formats.md §5): 8-byte little-endian header
length N, N bytes of UTF-8 JSON ``{name: {"dtype", "shape", "data_offsets": [begin, end]}}`` plus an
optional ``__metadata__`` of string -> string, then the data buffer. Offsets are relative to the
buffer, end-exclusive, tensors back to back without holes, and the buffer ends with the last one.

The safetensors library enforces most of this when it *loads*; we enforce all of it when we only
*read the header*, because the engines load what we pass. Every violation is a WeightcheckError
naming the file. Nothing here imports torch or numpy.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import field

from weightcheck.errors import WeightcheckError, json_type
from weightcheck.record import record

# The safetensors library refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# json nesting we accept in a header: a real one is 3 deep.
MAX_JSON_DEPTH = 64
# the safetensors library reads shapes and offsets as usize and refuses products that overflow it
USIZE_MAX = 2**64 - 1

# dtype name -> size in bits, as the safetensors library (0.8) spells them.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

FLOAT_DTYPES = {"F16", "BF16", "F32", "F64", "F8_E5M2", "F8_E4M3", "F4", "F6_E2M3", "F6_E3M2"}

# safetensors spelling -> torch.<name> (the dtypes torch can read and write; used by --values,
# casts and pickled checkpoints)
TORCH_NAMES = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "F64": "float64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


# integer dtypes -> struct format (little-endian, as safetensors stores them)
INT_FORMATS = {
    "I8": "b",
    "U8": "B",
    "I16": "h",
    "U16": "H",
    "I32": "i",
    "U32": "I",
    "I64": "q",
    "U64": "Q",
}


def int_values(raw: bytes, dtype: str) -> list[int] | None:
    """The values of a tensor of an integer dtype (d2t as any trainer may store it); None for
    any other dtype."""
    fmt = INT_FORMATS.get(dtype)
    if fmt is None:
        return None
    import struct

    return list(struct.unpack(f"<{len(raw) // struct.calcsize(fmt)}{fmt}", raw))


def float_values(raw: bytes, dtype: str) -> list[float] | None:
    """The values of a tensor of F16, BF16, F32 or F64 (a d2t stored as floats); None for any
    other dtype."""
    import struct

    if dtype == "BF16":  # the upper half of a float32
        raw = b"".join(b"\0\0" + raw[i : i + 2] for i in range(0, len(raw) - 1, 2))
        dtype = "F32"
    fmt = {"F16": "e", "F32": "f", "F64": "d"}.get(dtype)
    if fmt is None:
        return None
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(fmt)}{fmt}", raw))


def itemsize(dtype: str) -> int:
    """Bytes per element of a whole-byte dtype."""
    return DTYPE_BITS[dtype] // 8


# what config.json calls them (torch_dtype / dtype) -> safetensors spelling
CONFIG_DTYPES = {
    "bfloat16": "BF16",
    "float16": "F16",
    "half": "F16",
    "float32": "F32",
    "float": "F32",
    "float64": "F64",
    "int64": "I64",
    "int32": "I32",
    "bool": "BOOL",
}


# what a --dtype option accepts (convert's cast, eval's compute dtype): torch's names, as config.json
# and the engines' own --dtype say them, and the short ones -> safetensors spelling
DTYPE_OPTIONS = {
    "bf16": "BF16",
    "bfloat16": "BF16",
    "fp16": "F16",
    "float16": "F16",
    "fp32": "F32",
    "float32": "F32",
}


def dtype_option(d: str) -> str:
    """A --dtype as given (a key of DTYPE_OPTIONS) in safetensors spelling; anything else is a
    usage error naming the choices (the API passes what a caller wrote)."""
    from weightcheck.errors import UsageError

    if d not in DTYPE_OPTIONS:
        raise UsageError(None, f"--dtype {d!r}: choose one of {', '.join(DTYPE_OPTIONS)}")
    return DTYPE_OPTIONS[d]


def tensor_nbytes(dtype: str, shape) -> int:
    """Bytes a tensor of this dtype and shape takes in a safetensors file."""
    return math.prod(shape) * DTYPE_BITS[dtype] // 8


@record(frozen=True)
class TensorEntry:
    """One tensor as its header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offset in the data buffer, inclusive
    end: int  # offset in the data buffer, exclusive

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@record
class Header:
    """A parsed, validated header. ``data_start`` is the file offset of the data buffer."""

    tensors: dict[str, TensorEntry]
    metadata: dict[str, str] = field(default_factory=dict)
    header_len: int = 0

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    @property
    def data_len(self) -> int:
        return max((t.end for t in self.tensors.values()), default=0)


def read_header_length(first8: bytes, where: str, file_size: int | None = None) -> int:
    """Decode and sanity-check the 8-byte header length."""
    if len(first8) < 8:
        raise WeightcheckError(
            where,
            f"not a safetensors file: only {len(first8)} bytes, less than the 8-byte header length",
        )
    (n,) = struct.unpack("<Q", first8[:8])
    if n == 0:
        raise WeightcheckError(where, "not a safetensors file: header length is 0")
    if n > MAX_HEADER_BYTES:
        raise WeightcheckError(
            where, f"header length {n} bytes exceeds the 100 MB limit of the safetensors library"
        )
    if file_size is not None and 8 + n > file_size:
        raise WeightcheckError(
            where,
            f"header length {n} bytes runs past the end of the file "
            f"({file_size} bytes): truncated or not safetensors",
        )
    return n


def _no_duplicates(where: str):
    def hook(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise WeightcheckError(where, f"header names {k!r} twice")
            seen.add(k)
        return dict(pairs)

    return hook


def json_depth_ok(raw: str) -> bool:
    """Reject absurd nesting before json.loads recurses into it."""
    depth = 0
    in_str = False
    esc = False
    for ch in raw:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _int_list(value, what: str, name: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(type(v) is not int for v in value):
        raise WeightcheckError(
            where,
            f"tensor {name!r}: {what} must be a list of integers, got {json.dumps(value)[:80]}",
        )
    return tuple(value)


def _short(shape) -> str:
    text = str(list(shape))
    return text if len(text) <= 80 else text[:77] + "..."


def parse_header(raw: bytes, where: str, file_size: int | None = None) -> Header:
    """Parse header bytes (without the 8-byte length) and validate every entry.

    ``file_size`` (when known) lets us check that the data buffer ends exactly at the end of file.
    """
    obj = _header_object(raw, where)
    metadata = obj.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise WeightcheckError(where, "__metadata__ must map strings to strings")
    tensors = {name: _entry(name, spec, where) for name, spec in obj.items()}
    _check_tiling(tensors, where, None if file_size is None else file_size - 8 - len(raw))
    return Header(tensors=tensors, metadata=dict(metadata), header_len=len(raw))


def _header_object(raw: bytes, where: str) -> dict:
    """The header's JSON object: UTF-8, not too deep, no key twice."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WeightcheckError(where, f"header is not UTF-8 (byte {e.start})") from None
    if not json_depth_ok(text):
        raise WeightcheckError(where, f"header JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates(where))
    except WeightcheckError:
        raise
    except (ValueError, RecursionError) as e:
        raise WeightcheckError(where, f"header is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise WeightcheckError(where, f"header is {json_type(obj)}, not an object")
    return obj


def _entry(name: str, spec, where: str) -> TensorEntry:
    """One tensor's entry: exactly dtype, shape and data_offsets, and a byte range as long as
    the shape and dtype need."""
    if not isinstance(spec, dict):
        raise WeightcheckError(where, f"tensor {name!r}: entry is not an object")
    unknown = set(spec) - {"dtype", "shape", "data_offsets"}
    missing = {"dtype", "shape", "data_offsets"} - set(spec)
    if missing:
        raise WeightcheckError(where, f"tensor {name!r}: missing {', '.join(sorted(missing))}")
    if unknown:
        raise WeightcheckError(
            where, f"tensor {name!r}: unexpected field(s) {', '.join(sorted(unknown))}"
        )
    dtype = spec["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise WeightcheckError(where, f"tensor {name!r}: unknown dtype {dtype!r}")
    shape = _int_list(spec["shape"], "shape", name, where)
    if any(d < 0 for d in shape):
        raise WeightcheckError(
            where, f"tensor {name!r}: negative dimension in shape {_short(shape)}"
        )
    numel = 1
    for d in shape:
        numel *= d
        if d > USIZE_MAX or numel > USIZE_MAX:
            raise WeightcheckError(
                where, f"tensor {name!r}: shape {_short(shape)} overflows 64 bits"
            )
    offsets = _int_list(spec["data_offsets"], "data_offsets", name, where)
    if len(offsets) != 2:
        raise WeightcheckError(where, f"tensor {name!r}: data_offsets must have 2 entries")
    begin, end = offsets
    if begin < 0 or end < begin or end > USIZE_MAX:
        raise WeightcheckError(where, f"tensor {name!r}: bad data_offsets [{begin}, {end}]")
    bits = numel * DTYPE_BITS[dtype]
    if bits > USIZE_MAX:
        raise WeightcheckError(
            where, f"tensor {name!r}: shape {_short(shape)} of {dtype} overflows 64 bits"
        )
    if bits % 8:
        raise WeightcheckError(
            where,
            f"tensor {name!r}: shape {_short(shape)} of {dtype} is "
            f"{bits} bits, not a whole number of bytes",
        )
    if bits // 8 != end - begin:
        raise WeightcheckError(
            where,
            f"tensor {name!r}: shape {_short(shape)} of {dtype} needs {bits // 8} bytes "
            f"but data_offsets give {end - begin}",
        )
    return TensorEntry(name, dtype, shape, begin, end)


def _check_tiling(tensors: dict, where: str, buffer: int | None) -> None:
    """Offsets must tile the buffer exactly: sorted, back to back, starting at 0, and (when the
    file's size is known) ending at its last byte."""
    pos = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin < pos:
            raise WeightcheckError(
                where,
                f"tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] "
                f"overlap the previous tensor (ends at {pos})",
            )
        if t.begin > pos:
            raise WeightcheckError(
                where,
                f"tensor {t.name!r}: hole of {t.begin - pos} bytes before it in the data buffer",
            )
        pos = t.end
    if buffer is None:
        return
    if pos > buffer:
        raise WeightcheckError(
            where,
            f"data_offsets reach byte {pos} of the data buffer but "
            f"the file holds only {buffer}: truncated",
        )
    if pos < buffer:
        raise WeightcheckError(where, f"{buffer - pos} trailing bytes after the last tensor")


def read_local_header(path, where: str | None = None) -> Header:
    """Read and validate the header of a local .safetensors file (reads only the header)."""
    import os

    where = where or str(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            n = read_header_length(f.read(8), where, size)
            raw = f.read(n)
    except OSError as e:
        raise WeightcheckError(where, f"cannot read: {e.strerror or e}") from None
    return parse_header(raw, where, size)
