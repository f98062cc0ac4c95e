"""A tiny Arrow IPC stream writer in the standard library, for weightcheck/eval/arrow.py's tests:
what ``datasets``' ``save_to_disk`` writes (state.json, dataset_info.json, data-*.arrow shards,
each an Arrow stream of a Schema then RecordBatch messages), for the column types the tests need.

Flatbuffers are laid out front to back (a table's vtable, the table, then what it points to), every
scalar aligned to its size, as Arrow's own verifier asks, so that pyarrow reads them too (the
engine-marked test checks that with ``datasets.load_from_disk``).

A column is ``(name, type, rows)``: type ``"int64"``/``"utf8"`` (plain), ``("list", "int64")``,
``("large_list", "int8")``, ``("list", "bool")``, ``("list", "float32")`` ...; rows are Python
values, None for a null row.
"""

from __future__ import annotations

import json
import os
import struct

# Schema.fbs Type ids, and each Int/FloatingPoint's parameters
_INTS = {f"{u}int{b}": (b, not u) for u in ("", "u") for b in (8, 16, 32, 64)}
_FLOATS = {"float16": (0, 2), "float32": (1, 4), "float64": (2, 8)}


class _FB:
    """Front-to-back flatbuffer: tables are lists of (kind, value) or None, by field id."""

    def __init__(self):
        self.buf = bytearray(4)  # the root offset

    def _align(self, n: int, rem: int = 0) -> None:
        while len(self.buf) % n != rem:
            self.buf.append(0)

    def finish(self, root) -> bytes:
        pos = self.table(root)
        struct.pack_into("<I", self.buf, 0, pos)
        self._align(8)
        return bytes(self.buf)

    def table(self, fields) -> int:
        sizes = {"u8": 1, "bool": 1, "i16": 2, "i32": 4, "i64": 8}
        inline = []  # (id, kind, value, size)
        for i, f in enumerate(fields):
            if f is not None:
                kind, value = f
                inline.append((i, kind, value, sizes.get(kind, 4)))  # 4: an offset
        inline.sort(key=lambda x: -x[3])
        layout, at = {}, 4
        for i, kind, value, size in inline:
            at += -(at + 4) % size  # the table starts at 4 mod 8
            layout[i] = at
            at += size
        self._align(2)
        vt = len(self.buf)
        self.buf += struct.pack(f"<HH{len(fields)}H", 4 + 2 * len(fields), at,
                                *(layout.get(i, 0) for i in range(len(fields))))  # fmt: skip
        self._align(8, 4)  # the table's 8-byte fields land on multiples of 8
        pos = len(self.buf)
        self.buf += bytes(at)
        struct.pack_into("<i", self.buf, pos, pos - vt)
        refs = []
        fmt = {"u8": "<B", "bool": "<?", "i16": "<h", "i32": "<i", "i64": "<q"}
        for i, kind, value, _size in inline:
            if kind in fmt:
                struct.pack_into(fmt[kind], self.buf, pos + layout[i], value)
            else:
                refs.append((pos + layout[i], kind, value))
        for field_pos, kind, value in refs:
            struct.pack_into("<I", self.buf, field_pos, self._object(kind, value) - field_pos)
        return pos

    def _object(self, kind: str, value) -> int:
        if kind == "table":
            return self.table(value)
        if kind == "str":
            self._align(4)
            pos = len(self.buf)
            raw = value.encode()
            self.buf += struct.pack("<I", len(raw)) + raw + b"\0"
            return pos
        if kind == "structs":  # (fmt, [tuples]): a vector of structs inline
            fmt, items = value
            self._align(8, 4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(items))
            for it in items:
                self.buf += struct.pack(fmt, *it)
            return pos
        assert kind == "tables", kind
        self._align(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(value)) + bytes(4 * len(value))
        for j, t in enumerate(value):
            at = pos + 4 + 4 * j
            struct.pack_into("<I", self.buf, at, self.table(t) - at)
        return pos


def _type(t) -> tuple[int, list, list]:
    """(Type id, its Type table, its children's Field tables)."""
    if isinstance(t, tuple):
        outer, inner = t
        tid = {"list": 12, "large_list": 21}[outer]
        return tid, [], [_field("item", inner)]
    if t in _INTS:
        bits, signed = _INTS[t]
        return 2, [("i32", bits), ("bool", signed)], []
    if t in _FLOATS:
        return 3, [("i16", _FLOATS[t][0])], []
    return {"bool": 6, "utf8": 5, "binary": 4}[t], [], []


def _field(name: str, t) -> list:
    tid, table, children = _type(t)
    return [("str", name), ("bool", True), ("u8", tid), ("table", table), None,
            ("tables", children)]  # fmt: skip


def _message(header_type: int, header: list, body: bytes) -> bytes:
    meta = _FB().finish([("i16", 4), ("u8", header_type), ("table", header), ("i64", len(body))])
    meta += bytes(-(8 + len(meta)) % 8)
    return struct.pack("<Ii", 0xFFFFFFFF, len(meta)) + meta + body


def _bitmap(flags) -> bytes:
    out = bytearray((len(flags) + 7) // 8)
    for j, f in enumerate(flags):
        if f:
            out[j >> 3] |= 1 << (j & 7)
    return bytes(out)


def _values(t, vals) -> bytes:
    if t == "bool":
        return _bitmap(vals)
    if t in _INTS:
        bits, signed = _INTS[t]
        code = {8: "b", 16: "h", 32: "i", 64: "q"}[bits]
        return struct.pack(f"<{len(vals)}{code if signed else code.upper()}", *vals)
    if t in _FLOATS:
        return struct.pack(f"<{len(vals)}{'efd'[_FLOATS[t][0]]}", *vals)
    raise ValueError(t)


def _array(t, rows, nodes: list, buffers: list) -> None:
    """Append the array of ``rows`` (type ``t``) to nodes and buffers (raw bytes), depth first."""
    nulls = sum(r is None for r in rows)
    nodes.append((len(rows), nulls))
    buffers.append(_bitmap([r is not None for r in rows]) if nulls else b"")
    if isinstance(t, tuple):
        outer, inner = t
        offs, flat = [0], []
        for r in rows:
            flat += r or []
            offs.append(len(flat))
        buffers.append(struct.pack(f"<{len(offs)}{'q' if outer == 'large_list' else 'i'}", *offs))
        _array(inner, flat, nodes, buffers)
    elif t in ("utf8", "binary"):
        raw = [(r or "").encode() if t == "utf8" else (r or b"") for r in rows]
        offs = [0]
        for r in raw:
            offs.append(offs[-1] + len(r))
        buffers.append(struct.pack(f"<{len(offs)}i", *offs))
        buffers.append(b"".join(raw))
    else:
        buffers.append(_values(t, [0 if r is None else r for r in rows]))


def _record_batch(columns, lo: int, hi: int, compressed: bool = False) -> bytes:
    nodes, raw = [], []
    for _name, t, rows in columns:
        _array(t, rows[lo:hi], nodes, raw)
    body, bufs = bytearray(), []
    for b in raw:
        bufs.append((len(body), len(b)))
        body += b + bytes(-len(b) % 8)
    header = [("i64", hi - lo), ("structs", ("<qq", nodes)), ("structs", ("<qq", bufs))]
    if compressed:  # BodyCompression: LZ4_FRAME, per buffer (the bytes left as they are)
        header.append(("table", [("u8", 0), ("u8", 0)]))
    return _message(3, header, bytes(body))


def arrow_stream(
    columns, batch_rows: int | None = None, end: bool = True, compressed: bool = False
) -> bytes:
    """The Arrow stream of ``columns``, in record batches of ``batch_rows`` rows."""
    n = len(columns[0][2])
    meta = [("table", [("str", "huggingface"), ("str", "{}")])]
    schema = [("i16", 0), ("tables", [_field(name, t) for name, t, _ in columns]),
              ("tables", [m[1] for m in meta])]  # fmt: skip
    out = _message(1, schema, b"")
    step = batch_rows or max(n, 1)
    for lo in range(0, n, step):
        out += _record_batch(columns, lo, min(n, lo + step), compressed)
    return out + (struct.pack("<Ii", 0xFFFFFFFF, 0) if end else b"")


def write_dataset(folder, shards, batch_rows: int | None = None, state_extra=None) -> list[str]:
    """A ``save_to_disk`` folder: ``shards`` a list of column lists (one per data-*.arrow)."""
    os.makedirs(folder, exist_ok=True)
    names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
    for name, columns in zip(names, shards):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(arrow_stream(columns, batch_rows))
    state = {
        "_data_files": [{"filename": n} for n in names],
        "_fingerprint": "0",
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
        **(state_extra or {}),
    }
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump(state, f, indent=2)
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        json.dump({"citation": "", "description": ""}, f)  # features: from the schema
    return [os.path.join(folder, n) for n in names]
