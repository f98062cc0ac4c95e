"""SpecForge's ``.ckpt`` files (a ``torch.save`` zip) indexed without loading them: where each
tensor's bytes lie, so that eval reads a sample's hidden states straight into its staging buffer
with one ``readinto`` (docs/eval.md §7) instead of faulting a memory map in page by page.

The pickle is read by an unpickler that knows tensors and nothing else (``_rebuild_tensor_v2``,
the typed storages, ``OrderedDict``), as ``torch.load(weights_only=True)`` does; a file it does
not understand (another layout, a compressed record, another pickle) gives None, and the caller
falls back to ``torch.load``, which then says what is wrong.
"""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile

_DTYPES = {
    "BFloat16Storage": "bfloat16",
    "HalfStorage": "float16",
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


class FileTensor:
    """A contiguous tensor's bytes in a file: ``shape``, ``dtype``; :meth:`read_into` a CPU
    tensor of that shape, :meth:`load` a new one."""

    def __init__(self, path: str, offset: int, dtype_name: str, shape, stride, contiguous: bool):
        import torch

        self.path, self.offset = path, offset
        self.dtype = getattr(torch, dtype_name)
        self.shape = torch.Size(shape)
        self._stride, self._contiguous = tuple(stride), contiguous

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def squeeze0(self) -> FileTensor:
        """Without its leading axis of 1 (SpecForge's batch axis)."""
        return FileTensor(
            self.path,
            self.offset,
            str(self.dtype).replace("torch.", ""),
            self.shape[1:],
            self._stride[1:],
            self._contiguous,
        )

    def read_into(self, dst) -> None:
        """Fill ``dst`` (a contiguous CPU tensor of this shape) from the file: one read when the
        dtypes match, else through a temporary copy."""
        if dst.dtype != self.dtype or not dst.is_contiguous():
            dst.copy_(self.load())
            return
        import torch

        view = memoryview(dst.view(-1).view(torch.uint8).numpy()).cast("B")
        _read_exact(self.path, self.offset, view)

    def load(self):
        import torch

        out = torch.empty(self.shape, dtype=self.dtype)
        if self.numel():
            self.read_into(out)
        return out


def _read_exact(path: str, offset: int, view: memoryview) -> None:
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        got = 0
        while got < len(view):
            n = f.readinto(view[got:])
            if not n:
                raise OSError(f"file ends inside a tensor ({got} of {len(view)} bytes)")
            got += n


class _Storage:
    def __init__(self, dtype_name: str, key: str, numel: int):
        self.dtype_name, self.key, self.numel = dtype_name, key, numel


class _Ref:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, offset
        self.size, self.stride = tuple(size), tuple(stride)


class _StorageType:
    def __init__(self, name: str):
        self.dtype_name = _DTYPES[name]


def _rebuild(storage, storage_offset, size, stride, *_rest):
    return _Ref(storage, storage_offset, size, stride)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor")

    def persistent_load(self, pid):
        kind, stype, key, _location, numel = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"persistent id {kind!r}")
        return _Storage(stype.dtype_name, str(key), int(numel))


def _contiguous(size, stride) -> bool:
    want = 1
    for d, s in zip(reversed(size), reversed(stride)):
        if d != 1 and s != want:
            return False
        want *= d
    return True


def index(path: str) -> dict | None:
    """The file's top-level tensors as :class:`FileTensor` s (None: not a layout read here)."""
    try:
        with open(path, "rb") as f:
            zf = zipfile.ZipFile(f)
            pkl = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pkl) != 1:
                return None
            prefix = pkl[0][: -len("data.pkl")]
            if prefix + "byteorder" in zf.namelist():
                if zf.read(prefix + "byteorder").strip() != b"little":
                    return None
            obj = _Unpickler(io.BytesIO(zf.read(pkl[0]))).load()
            if not isinstance(obj, dict):
                return None
            out = {}
            for k, v in obj.items():
                if not isinstance(v, _Ref):
                    return None
                t = _locate(f, zf, prefix, path, v)
                if t is None:
                    return None
                out[k] = t
            return out
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, KeyError, ValueError,
            struct.error, EOFError, AttributeError, TypeError, IndexError):  # fmt: skip
        return None


def _locate(f, zf, prefix: str, path: str, v: _Ref) -> FileTensor | None:
    """Where ``v``'s bytes lie: its storage's record (stored, not compressed), after the local
    header and the alignment padding torch writes in its extra field."""
    import torch

    info = zf.getinfo(f"{prefix}data/{v.storage.key}")
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    f.seek(info.header_offset)
    head = f.read(30)
    if head[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    size = getattr(torch, v.storage.dtype_name).itemsize
    if not _contiguous(v.size, v.stride):
        return None
    numel = 1
    for d in v.size:
        numel *= d
    if (v.offset + numel) * size > info.file_size:
        return None
    start = info.header_offset + 30 + name_len + extra_len + v.offset * size
    return FileTensor(path, start, v.storage.dtype_name, v.size, v.stride, True)
