"""A torch zip checkpoint (``torch.save``'s format: ``<name>/data.pkl`` + one stored member per
storage) read for its tensors' names, dtypes, shapes and byte ranges WITHOUT torch and without
unpickling: ``data.pkl``'s opcodes are walked (``pickletools.genops``, a disassembler) by a small
stack machine that builds only strings, numbers, tuples, lists and dicts, and records a tensor for
each call of torch's ``_rebuild_tensor_v2`` on a persistent storage id. Nothing from the file is
imported or called; any global but the few torch.save writes for tensors and dicts makes
:func:`read` answer None, and the caller falls back to ``torch.load(weights_only=True)``
(sources/pickled.py), which refuses what it must.

A SpecForge ``training_state.pt`` is such a file: the draft's state (``draft_state_dict``) beside
the optimizer's and counters (specforge 0.2.0 specforge/training/controller.py:839-870). Header-
level checks of a run folder thus need no torch; a tensor's bytes are a range of the file (the
storage member is stored, not compressed), read like a safetensors tensor.
"""

from __future__ import annotations

import pickletools
import struct
import zipfile

from weightcheck.record import record
from weightcheck.sources.base import STATE_KEYS

# torch.<X>Storage -> safetensors dtype, element size (torch/storage.py _LegacyStorage types)
_STORAGES = {
    "BFloat16Storage": ("BF16", 2),
    "HalfStorage": ("F16", 2),
    "FloatStorage": ("F32", 4),
    "DoubleStorage": ("F64", 8),
    "LongStorage": ("I64", 8),
    "IntStorage": ("I32", 4),
    "ShortStorage": ("I16", 2),
    "CharStorage": ("I8", 1),
    "ByteStorage": ("U8", 1),
    "BoolStorage": ("BOOL", 1),
}
_REBUILD = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor")}
_ALLOWED = _REBUILD | {("collections", "OrderedDict"), ("torch._utils", "_rebuild_parameter")}
# every global the stream may name: the calls above and the storage types of persistent ids
_GLOBALS = _ALLOWED | {("torch", name) for name in _STORAGES}
MAX_PICKLE = 256 << 20


class NotStatic(Exception):
    """Something this reader does not follow: the caller uses torch instead."""


@record(frozen=True)
class Global:
    module: str
    name: str


@record(frozen=True)
class Storage:
    dtype: str
    itemsize: int
    key: str
    numel: int


@record(frozen=True)
class TensorMeta:
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    begin: int | None  # absolute byte range in the zip file, when contiguous and stored
    end: int | None


class _Mark:
    pass


def _interpret(data: bytes):
    """Run ``data.pkl``'s opcodes on :class:`_Machine`: the object it builds, of plain values,
    Globals and tensor records only."""
    m = _Machine()
    for op, arg, _pos in pickletools.genops(data):
        n = op.name
        if n in ("PROTO", "FRAME"):
            continue
        if n == "STOP":
            if len(m.stack) != 1:
                raise NotStatic("stack at STOP")
            return m.stack[0]
        if n in _PUSH_ARG:
            m.stack.append(bytes(arg) if "BYTES" in n else arg)
        elif n in _PUSH_NEW:
            m.stack.append(_PUSH_NEW[n]())
        elif n in _OPS:
            _OPS[n](m, arg)
        else:
            raise NotStatic(f"opcode {n}")
    raise NotStatic("no STOP")


class _Machine:
    """The unpickler's state: the stack, the memo and the marks."""

    def __init__(self):
        self.stack: list = []
        self.memo: dict = {}
        self.marks: list[int] = []

    def pop_mark(self) -> list:
        if not self.marks:
            raise NotStatic("MARK missing")
        i = self.marks.pop()
        items = self.stack[i:]
        del self.stack[i:]
        return items


# opcodes that push their argument (strings, numbers, bytes) or a new empty or constant value
_PUSH_ARG = frozenset(
    ("BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE")
    + ("BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG", "BINFLOAT")
    + ("SHORT_BINBYTES", "BINBYTES", "BINBYTES8")
)
_PUSH_NEW = {
    "EMPTY_DICT": dict,
    "EMPTY_LIST": list,
    "EMPTY_TUPLE": tuple,
    "NONE": lambda: None,
    "NEWTRUE": lambda: True,
    "NEWFALSE": lambda: False,
}


def _tuple_n(m: _Machine, k: int) -> None:
    items = tuple(m.stack[-k:])
    del m.stack[-k:]
    m.stack.append(items)


def _get(m: _Machine, arg) -> None:
    if arg not in m.memo:
        raise NotStatic("memo miss")
    m.stack.append(m.memo[arg])


def _setitem_op(m: _Machine, _arg) -> None:
    v = m.stack.pop()
    k = m.stack.pop()
    _setitem(m.stack[-1], k, v)


def _setitems_op(m: _Machine, _arg) -> None:
    items = m.pop_mark()
    for k, v in zip(items[::2], items[1::2]):
        _setitem(m.stack[-1], k, v)


def _append_op(m: _Machine, _arg) -> None:
    v = m.stack.pop()
    _append(m.stack[-1], [v])


def _appends_op(m: _Machine, _arg) -> None:
    items = m.pop_mark()
    _append(m.stack[-1], items)


def _global(module: str, name: str) -> Global:
    """A global the stream names: only those torch.save writes for tensors and dicts (a bare
    function among the values, never called here, would still make torch.load refuse)."""
    if (module, name) not in _GLOBALS:
        raise NotStatic(f"global {module}.{name}")
    return Global(module, name)


def _stack_global(m: _Machine, _arg) -> None:
    name, module = m.stack.pop(), m.stack.pop()
    m.stack.append(_global(str(module), str(name)))


def _reduce_op(m: _Machine, _arg) -> None:
    args = m.stack.pop()
    fn = m.stack.pop()
    m.stack.append(_reduce(fn, args))


_OPS = {
    "MARK": lambda m, _: m.marks.append(len(m.stack)),
    "TUPLE": lambda m, _: m.stack.append(tuple(m.pop_mark())),
    "TUPLE1": lambda m, _: _tuple_n(m, 1),
    "TUPLE2": lambda m, _: _tuple_n(m, 2),
    "TUPLE3": lambda m, _: _tuple_n(m, 3),
    "BINPUT": lambda m, arg: m.memo.__setitem__(arg, m.stack[-1]),
    "LONG_BINPUT": lambda m, arg: m.memo.__setitem__(arg, m.stack[-1]),
    "PUT": lambda m, arg: m.memo.__setitem__(arg, m.stack[-1]),
    "MEMOIZE": lambda m, _: m.memo.__setitem__(len(m.memo), m.stack[-1]),
    "BINGET": _get,
    "LONG_BINGET": _get,
    "GET": _get,
    "SETITEM": _setitem_op,
    "SETITEMS": _setitems_op,
    "APPEND": _append_op,
    "APPENDS": _appends_op,
    "GLOBAL": lambda m, arg: m.stack.append(_global(*_module_name(arg))),
    "STACK_GLOBAL": _stack_global,
    "BINPERSID": lambda m, _: m.stack.append(_storage(m.stack.pop())),
    "REDUCE": _reduce_op,
    "BUILD": lambda m, _: m.stack.pop(),  # an object's state: OrderedDict's is none here
}


def _module_name(arg: str) -> tuple[str, str]:
    module, _, name = arg.partition(" ")
    return module, name


def _setitem(d, k, v):
    if not isinstance(d, dict) or isinstance(k, (dict, list)):
        raise NotStatic("SETITEM on a non-dict")
    d[k] = v


def _append(lst, items):
    if not isinstance(lst, list):
        raise NotStatic("APPEND on a non-list")
    lst.extend(items)


def _storage(pid) -> Storage:
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
        raise NotStatic("persistent id")
    _, typ, key, _location, numel = pid
    if not (isinstance(typ, Global) and typ.module == "torch" and typ.name in _STORAGES):
        raise NotStatic(f"storage type {typ}")
    if not isinstance(key, str) or not isinstance(numel, int):
        raise NotStatic("storage key")
    dtype, size = _STORAGES[typ.name]
    return Storage(dtype, size, key, numel)


@record(frozen=True)
class _Tensor:
    storage: Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _reduce(fn, args):
    if not isinstance(fn, Global) or (fn.module, fn.name) not in _ALLOWED:
        raise NotStatic(f"global {fn}")
    if (fn.module, fn.name) == ("collections", "OrderedDict"):
        return {}
    if fn.name == "_rebuild_parameter":
        return args[0]
    st, offset, shape, stride = args[0], args[1], args[2], args[3]
    if not (isinstance(st, Storage) and isinstance(offset, int)):
        raise NotStatic("tensor args")
    if not all(isinstance(x, int) for x in (*shape, *stride)):
        raise NotStatic("tensor shape")
    return _Tensor(st, offset, tuple(shape), tuple(stride))


def _contiguous(shape, stride) -> bool:
    want = 1
    for dim, s in zip(reversed(shape), reversed(stride)):
        if dim != 1 and s != want:
            return False
        want *= dim
    return True


def _data_start(f, zi: zipfile.ZipInfo) -> int:
    f.seek(zi.header_offset)
    head = f.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise NotStatic("local header")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return zi.header_offset + 30 + name_len + extra_len


def read(path: str):
    """(flat name -> TensorMeta, the dict key holding the state, top-level scalars, the top-level
    entries when the state is under a key) of a torch zip checkpoint, or None when it is not one
    this reader follows."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    try:
        with zf:
            pkl = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pkl) != 1:
                return None
            prefix = pkl[0][: -len("data.pkl")]
            zi = zf.getinfo(pkl[0])
            if zi.file_size > MAX_PICKLE:
                return None
            order = prefix + "byteorder"
            if order in zf.namelist() and zf.read(order).strip() not in (b"little", b""):
                return None
            obj = _interpret(zf.read(pkl[0]))
            key = None
            top = obj
            if isinstance(obj, dict):
                for k in STATE_KEYS:
                    if isinstance(obj.get(k), dict):
                        obj, key = obj[k], k
                        break
            if not isinstance(obj, dict):
                return None
            meta = (
                {k: v for k, v in top.items() if isinstance(v, (str, int, float, bool))}
                if isinstance(top, dict)
                else {}
            )
            flat: dict[str, TensorMeta] = {}
            with open(path, "rb") as f:

                def walk(prefix_, d):
                    for k, v in d.items():
                        name = f"{prefix_}{k}"
                        if isinstance(v, _Tensor):
                            flat[name] = _meta(zf, f, prefix, v)
                        elif isinstance(v, dict):
                            walk(name + ".", v)

                walk("", obj)
            return flat, key, meta, (tuple(map(str, top)) if key is not None else None)
    except (NotStatic, KeyError, ValueError, IndexError, TypeError, struct.error, OSError):
        return None
    except Exception:  # a malformed stream pickletools cannot parse: torch decides
        return None


def _meta(zf: zipfile.ZipFile, f, prefix: str, t: _Tensor) -> TensorMeta:
    numel = 1
    for x in t.shape:
        numel *= x
    nbytes = numel * t.storage.itemsize
    begin = end = None
    zi = zf.getinfo(f"{prefix}data/{t.storage.key}")
    if (
        zi.compress_type == zipfile.ZIP_STORED
        and _contiguous(t.shape, t.stride)
        and (t.offset + numel) * t.storage.itemsize <= zi.file_size
    ):
        begin = _data_start(f, zi) + t.offset * t.storage.itemsize
        end = begin + nbytes
    return TensorMeta(t.storage.dtype, t.shape, nbytes, begin, end)
