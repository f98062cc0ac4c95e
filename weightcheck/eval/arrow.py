"""One list column of a Hugging Face ``datasets`` folder, read without pyarrow (docs/eval.md §1.2).

speculators 0.9.0 keeps its loss mask in the preprocessed dataset ``prepare-data`` saves with
``Dataset.save_to_disk``: ``state.json`` lists the shards (``_data_files``, in order), each an
Arrow IPC *stream* (``datasets``' ``ArrowWriter``: ``pa.RecordBatchStreamWriter``) — messages of a
0xFFFFFFFF continuation marker, an int32 metadata length, a flatbuffer ``Message`` (the
``Schema``, then ``RecordBatch`` es) padded to 8 bytes, then the message's body. This module
parses the flatbuffers by hand (the tables of Arrow's Message.fbs and Schema.fbs that locate one
column: Message, Schema, Field, Int, Union, RecordBatch with its FieldNode and Buffer structs),
keeps each record batch's offsets and validity of that column, and reads a row's values from the
file when asked (a dataset can hold more mask than memory). Read: ``list`` or ``large_list`` of
int8..int64 (signed or not) or bool, null rows said when read, any number of record batches and
shards. Refused, one line naming the file (WeightcheckError, exit 2): another type, a
dictionary-encoded or compressed column, big-endian data, null values inside a list, an indices
mapping in state.json (``select``/``shuffle`` not flattened), metadata that does not parse.
"""

from __future__ import annotations

import bisect
import json
import os
import struct
import sys
from array import array

from weightcheck.errors import WeightcheckError

# Schema.fbs: Type union members
_TYPES = {
    1: "null", 2: "int", 3: "floating point", 4: "binary", 5: "utf8", 6: "bool", 7: "decimal",
    8: "date", 9: "time", 10: "timestamp", 11: "interval", 12: "list", 13: "struct", 14: "union",
    15: "fixed-size binary", 16: "fixed-size list", 17: "map", 18: "duration",
    19: "large binary", 20: "large utf8", 21: "large list", 22: "run-end encoded",
    23: "binary view", 24: "utf8 view", 25: "list view", 26: "large list view",
}  # fmt: skip
_LIST, _LARGE_LIST, _INT, _BOOL = 12, 21, 2, 6
# buffers of each type's own array in a record batch (its children's come after, depth first)
_BUFFERS = {1: 0, 4: 3, 5: 3, 12: 2, 13: 1, 16: 1, 17: 2, 19: 3, 20: 3, 21: 2, 22: 0, 23: 2,
            24: 2, 25: 3, 26: 3}  # fmt: skip
_VIEWS = (23, 24)  # + one variadic data buffer count each (RecordBatch.variadicBufferCounts)
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}  # signed array codes by width: nonzero is nonzero


class _Corrupt(Exception):
    """Metadata that does not parse as the flatbuffer it should be."""


class _Table:
    """A flatbuffer table at ``pos`` of ``buf``: its fields by index (absent: the default)."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        self.vt = pos - _unpack("<i", buf, pos)
        self.vt_len = _unpack("<H", buf, self.vt)

    def _at(self, i: int) -> int:
        o = 4 + 2 * i
        return 0 if o + 2 > self.vt_len else _unpack("<H", self.buf, self.vt + o)

    def scalar(self, i: int, fmt: str, default=0):
        o = self._at(i)
        return default if not o else _unpack(fmt, self.buf, self.pos + o)

    def _ref(self, i: int) -> int | None:
        o = self._at(i)
        if not o:
            return None
        p = self.pos + o
        return p + _unpack("<I", self.buf, p)

    def table(self, i: int) -> _Table | None:
        p = self._ref(i)
        return None if p is None else _Table(self.buf, p)

    def _vector(self, i: int) -> tuple[int, int]:
        p = self._ref(i)
        return (0, 0) if p is None else (p + 4, _unpack("<I", self.buf, p))

    def tables(self, i: int) -> list[_Table]:
        start, n = self._vector(i)
        out = []
        for j in range(n):
            e = start + 4 * j
            out.append(_Table(self.buf, e + _unpack("<I", self.buf, e)))
        return out

    def structs(self, i: int, fmt: str) -> list[tuple]:
        start, n = self._vector(i)
        size = struct.calcsize(fmt)
        if start + n * size > len(self.buf):
            raise _Corrupt("a vector runs past the metadata")
        return [struct.unpack_from(fmt, self.buf, start + j * size) for j in range(n)]

    def string(self, i: int) -> str:
        p = self._ref(i)
        if p is None:
            return ""
        n = _unpack("<I", self.buf, p)
        if p + 4 + n > len(self.buf):
            raise _Corrupt("a string runs past the metadata")
        return self.buf[p + 4 : p + 4 + n].decode("utf-8")


def _unpack(fmt: str, buf: bytes, pos: int):
    if pos < 0:
        raise _Corrupt(f"an offset points before the metadata ({pos})")
    return struct.unpack_from(fmt, buf, pos)[0]


def _messages(f, where: str):
    """(header type, header table, body offset, body length) of each message of the stream."""
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    pos = 8 if f.read(8)[:6] == b"ARROW1" else 0  # the file format: the stream after its magic
    while True:
        f.seek(pos)
        head = f.read(8)
        if not head:
            return  # the stream ends without its end marker, at a message's end: accepted
        n = struct.unpack_from("<i", head.ljust(4, b"\0"))[0]
        if n == -1:  # the continuation marker, then the length
            if len(head) < 8:
                raise WeightcheckError(where, "cut short: the file ends inside a message's length")
            n, pos = struct.unpack_from("<i", head, 4)[0], pos + 8
        else:
            pos += 4  # the format before Arrow 0.15: the length alone
        if n == 0:
            return  # end of stream
        if n < 0:
            raise WeightcheckError(where, f"not an Arrow stream: a message length of {n} at {pos}")
        f.seek(pos)
        meta = f.read(n)
        if len(meta) < n:
            raise WeightcheckError(where, f"cut short: the file ends inside a message at {pos}")
        msg = _Table(meta, _unpack("<I", meta, 0))
        body_len = msg.scalar(3, "<q")
        if body_len < 0 or pos + n + body_len > size:
            raise WeightcheckError(
                where,
                f"cut short: a message's body of {body_len} bytes at {pos + n} ends past "
                f"the file's {size} bytes",
            )
        yield msg.scalar(1, "<B"), msg.table(2), pos + n, body_len
        pos += n + body_len


def _type_name(field: _Table) -> str:
    t = field.scalar(2, "<B")
    name = _TYPES.get(t, f"type {t}")
    if t == _INT:
        it = field.table(3)
        bits = it.scalar(0, "<i") if it else 0
        name = f"{'' if it and it.scalar(1, '<?', False) else 'u'}int{bits}"
    if t in (_LIST, _LARGE_LIST, 16, 25, 26, 17):
        kids = field.tables(5)
        name += f"<{_type_name(kids[0]) if kids else '?'}>"
    return name


def _count(field: _Table, where: str) -> tuple[int, int, int]:
    """(nodes, buffers, view fields) a field takes in a record batch, its children included."""
    t = field.scalar(2, "<B")
    if field.table(4) is not None:  # dictionary-encoded: the indices alone are in the batch
        return 1, 2, 0
    if t == 14:  # union: a type-ids buffer, and offsets when dense
        u = field.table(3)
        own = 2 if (u is not None and u.scalar(0, "<h") == 1) else 1
    elif t in _BUFFERS:
        own = _BUFFERS[t]
    elif t in _TYPES:
        own = 2  # a validity bitmap and one buffer of fixed-width values
    else:
        raise WeightcheckError(where, f"unknown Arrow type {t} in the schema")
    nodes, buffers, views = 1, own, int(t in _VIEWS)
    for child in field.tables(5):
        n, b, v = _count(child, where)
        nodes, buffers, views = nodes + n, buffers + b, views + v
    return nodes, buffers, views


class _Column:
    """Where the column lies in each record batch of one file."""

    def __init__(self, where: str, name: str, schema: _Table):
        if schema.scalar(0, "<h") != 0:
            raise WeightcheckError(where, "big-endian Arrow data: not read")
        fields = schema.tables(1)
        names = [f.string(0) for f in fields]
        if name not in names:
            raise WeightcheckError(
                where, f"no {name} column (its columns: {', '.join(names) or 'none'})"
            )
        self.node = self.buffer = self.views = 0
        for f in fields[: names.index(name)]:
            n, b, v = _count(f, where)
            self.node, self.buffer, self.views = self.node + n, self.buffer + b, self.views + v
        field = fields[names.index(name)]
        t, kids = field.scalar(2, "<B"), field.tables(5)
        child = kids[0] if len(kids) == 1 else None
        ct = child.scalar(2, "<B") if child is not None else None
        it = child.table(3) if ct == _INT else None
        width = it.scalar(0, "<i") // 8 if it is not None else 0
        ok = t in (_LIST, _LARGE_LIST) and (ct == _BOOL or width in _CODES)
        if not ok or field.table(4) is not None or child.table(4) is not None:
            raise WeightcheckError(
                where,
                f"{name} is {_type_name(field)}"
                + (", dictionary-encoded" if field.table(4) is not None else "")
                + ": weightcheck reads a list or large_list of integers or bools",
            )
        self.large = t == _LARGE_LIST
        self.width = 0 if ct == _BOOL else width  # 0: bools, one bit each
        self.type = _type_name(field)


class _Batch:
    """One record batch's part of the column: its rows' offsets and validity, where its values
    lie in the file."""

    def __init__(self, path: str, where: str, col: _Column, rb: _Table, body: int, body_len: int):
        if rb.table(3) is not None:
            raise WeightcheckError(where, "compressed record batches (LZ4/ZSTD): not read")
        self.path, self.where = path, where
        self.rows = rb.scalar(0, "<q")
        nodes, buffers = rb.structs(1, "<qq"), rb.structs(2, "<qq")
        variadic = [v for (v,) in rb.structs(4, "<q")]
        bi = col.buffer + sum(variadic[: col.views])
        if len(nodes) < col.node + 2 or len(buffers) < bi + 4:
            raise WeightcheckError(where, "a record batch has fewer columns than its schema")
        (n, nulls), (cn, cnulls) = nodes[col.node], nodes[col.node + 1]
        if n != self.rows:
            raise WeightcheckError(where, f"a record batch of {self.rows} rows holds {n} lists")
        if cnulls:
            raise WeightcheckError(where, f"{cnulls} null values inside {col.type} lists")
        for off, length in buffers[bi : bi + 4]:
            if off < 0 or length < 0 or off + length > body_len:
                raise WeightcheckError(where, "a buffer lies outside its record batch's body")
        self.width, self.child_len = col.width, cn
        self.values = body + buffers[bi + 3][0]
        self.valid = self._read(body + buffers[bi][0], (n + 7) // 8) if nulls else None
        self.offsets = array("q" if col.large else "i", [0])
        if n:
            off, length = buffers[bi + 1]
            size = (n + 1) * self.offsets.itemsize
            if length < size:
                raise WeightcheckError(where, f"{col.type}: {length} bytes of offsets for {n} rows")
            self.offsets = array(self.offsets.typecode)
            self.offsets.frombytes(self._read(body + off, size))
            if sys.byteorder == "big":
                self.offsets.byteswap()
        need = (cn + 7) // 8 if not col.width else cn * col.width
        if n and (buffers[bi + 3][1] < need or not 0 <= self.offsets[0] <= self.offsets[n] <= cn):
            raise WeightcheckError(where, f"{col.type}: offsets or values out of range")

    def _read(self, at: int, n: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(at)
            b = f.read(n)
        if len(b) < n:
            raise WeightcheckError(self.where, "cut short: the file ends inside a record batch")
        return b

    def row(self, r: int, label: str) -> tuple[bytes, int]:
        if self.valid is not None and not (self.valid[r >> 3] >> (r & 7)) & 1:
            raise WeightcheckError(self.where, f"{label} is null")
        a, b = self.offsets[r], self.offsets[r + 1]
        if not 0 <= a <= b <= self.child_len:
            raise WeightcheckError(self.where, f"{label}: offsets {a}..{b} out of range")
        if self.width:
            return self._read(self.values + a * self.width, (b - a) * self.width), self.width
        first = a >> 3
        bits = self._read(self.values + first, ((b + 7) >> 3) - first) if b > a else b""
        return bytes((bits[(j >> 3) - first] >> (j & 7)) & 1 for j in range(a, b)), 1


class ListColumn:
    """Column ``name`` of the ``datasets`` folder ``folder``: :meth:`row` ``i`` is the i-th row
    of the dataset (the shards in ``state.json``'s order), as bytes of little-endian integers of
    ``itemsize`` bytes; :meth:`values` as ints."""

    def __init__(self, folder: str, name: str = "loss_mask"):
        self.folder, self.name = folder, name
        self.batches: list[_Batch] = []
        self.starts: list[int] = []  # the first row of each batch
        self.rows = 0
        self.type = ""  # as the first shard's schema has it: "list<int64>"
        for path in data_files(folder):
            self._add(path)

    def _add(self, path: str) -> None:
        where = _label(self.folder, path)
        col = None
        try:
            with open(path, "rb") as f:
                for kind, header, body, body_len in _messages(f, where):
                    if header is None or kind not in (_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH):
                        raise WeightcheckError(where, f"an Arrow message of type {kind}: not read")
                    if kind == _SCHEMA:
                        col = _Column(where, self.name, header)
                        self.type = self.type or col.type
                    elif kind == _RECORD_BATCH:
                        if col is None:
                            raise WeightcheckError(where, "a record batch before the schema")
                        b = _Batch(path, where, col, header, body, body_len)
                        self.starts.append(self.rows)
                        self.batches.append(b)
                        self.rows += b.rows
        except (_Corrupt, struct.error, IndexError, UnicodeDecodeError) as e:
            raise WeightcheckError(where, f"not an Arrow stream datasets wrote: {e}") from None
        except OSError as e:
            raise WeightcheckError(where, f"cannot read: {e.strerror or e}") from None
        if col is None:
            raise WeightcheckError(where, "no Arrow schema: not an Arrow stream")

    def where(self, i: int) -> str:
        """The shard holding row ``i``, as messages name it."""
        return self.batches[self._batch(i)].where

    def _batch(self, i: int) -> int:
        if not 0 <= i < self.rows:
            raise IndexError(i)
        return bisect.bisect_right(self.starts, i) - 1

    def row(self, i: int) -> tuple[bytes, int]:
        j = self._batch(i)
        return self.batches[j].row(i - self.starts[j], f"row {i}'s {self.name}")

    def values(self, i: int) -> list[int]:
        raw, size = self.row(i)
        a = array(_CODES[size])
        a.frombytes(raw)
        if sys.byteorder == "big":
            a.byteswap()
        return a.tolist()


def _label(folder: str, path: str) -> str:
    return os.path.join(os.path.basename(os.path.normpath(folder)), os.path.relpath(path, folder))


def is_dataset(folder: str) -> bool:
    """Whether ``folder`` holds a ``datasets`` save (``state.json``, ``dataset_dict.json`` or a
    ``data-*.arrow`` shard): :func:`data_files` reads it or says why not."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(
        n in ("state.json", "dataset_dict.json") or (n.startswith("data-") and n.endswith(".arrow"))
        for n in names
    )


def data_files(folder: str) -> list[str]:
    """The shards of the ``datasets`` save in ``folder``, in ``state.json``'s order."""
    state = os.path.join(folder, "state.json")
    where = _label(folder, state)
    if not os.path.isfile(state):
        if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
            raise WeightcheckError(
                _label(folder, os.path.join(folder, "dataset_dict.json")),
                "a DatasetDict (splits): not read; the loss mask is read from one Dataset's "
                "folder (state.json), as speculators' prepare-data saves it",
            )
        raise WeightcheckError(where, "missing: it lists the dataset's data-*.arrow shards")
    try:
        with open(state, encoding="utf-8") as f:
            st = json.load(f)
        files = [d["filename"] for d in st["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WeightcheckError(
            where, f"not a datasets state.json: {type(e).__name__} {e}"
        ) from None
    if st.get("_indices_data_files"):
        raise WeightcheckError(
            where,
            "an indices mapping (select/shuffle, not flattened): not read; save the dataset "
            "again with datasets 2 or later (save_to_disk flattens it)",
        )
    if not files:
        raise WeightcheckError(where, "lists no data files")
    out = []
    for name in files:
        p = os.path.join(folder, name)
        if not os.path.isfile(p):
            raise WeightcheckError(_label(folder, p), "listed in state.json but missing")
        out.append(p)
    return out
