"""``convert``: producing the output's bytes. Renamed tensors are copied as byte ranges with
``os.copy_file_range`` (kernel-side, no deserialization, no torch), each range handed to the
checker (storage/verify.py) as soon as it is written; casts stream in chunks with torch; tensors
from a target are read by range. Memory stays flat."""

from __future__ import annotations

import functools
import json
import os
import zlib

from weightcheck import __version__
from weightcheck.commands.convert.items import Item, Plan
from weightcheck.commands.convert.provenance import CARD_MARK, MARK, origins
from weightcheck.engines.data import ENGINES, loader_for
from weightcheck.errors import WeightcheckError
from weightcheck.model.vocab import runs
from weightcheck.sources.tensors import (
    CastOverflow,
    iter_chunks,
    read_range,
    read_small,
    write_cast,
)
from weightcheck.storage.header import itemsize, parse_header, read_header_length
from weightcheck.storage.writer import OutTensor, header_bytes

CHUNK = 16 << 20  # bytes per read or cast step of a produced tensor
COPY_CHUNK = 8 << 20  # bytes per copy_file_range call; each is checked while the next is copied
WRITEBACK_CHUNK = 64 << 20  # with --fsync: start writing to disk every this many bytes
ALIGN = 64 << 10  # copies keep the source's file offsets modulo this (see aligned_order)
ALIGN_MIN_BYTES = 64 << 20  # ... when at least this much is copied (a header pad is up to ALIGN)


def copy_range(src_path: str, src_off: int, n: int, out_fd: int, out_off: int) -> None:
    fd = os.open(src_path, os.O_RDONLY)
    try:
        done = 0
        use_cfr = hasattr(os, "copy_file_range")
        while done < n:
            if use_cfr:
                try:
                    k = os.copy_file_range(fd, out_fd, n - done, src_off + done, out_off + done)
                except OSError:
                    use_cfr = False
                    continue
                if k == 0:
                    raise WeightcheckError(src_path, "source ended inside a tensor")
            else:
                buf = os.pread(fd, min(CHUNK, n - done), src_off + done)
                if not buf:
                    raise WeightcheckError(src_path, "source ended inside a tensor")
                k = os.pwrite(out_fd, buf, out_off + done)
            done += k
    finally:
        os.close(fd)


def produce(plan: Plan, it: Item, write) -> None:
    """Stream the bytes of a non-copy item to ``write``; a value the cast to ``--dtype`` makes
    infinite refuses the conversion (nothing is left written: publish.py removes the temp)."""
    try:
        _produce(plan, it, write)
    except CastOverflow as e:
        tgt = {"embed-from-target": plan.embed_target, "head-from-target": plan.head_target}
        where = tgt[it.kind].source.spec if it.kind in tgt else plan.src.source.spec
        raise WeightcheckError(
            where,
            f"{it.src_name} {e}: refused; keep its dtype (no --dtype) or choose bf16 or fp32 "
            "(float32's range)",
        ) from None


def _produce(plan: Plan, it: Item, write) -> None:
    if it.kind in ("cast", "pickle"):
        isz = itemsize(it.src_dtype)
        n = it.nbytes // itemsize(it.dtype) * isz  # the source bytes (a part's: a window)
        window = (it.src_offset, it.src_offset + n)
        for chunk in iter_chunks(plan.src.source, it.src_name, CHUNK // isz * isz, isz, window):
            write_cast(write, chunk, it.src_dtype, it.dtype)
        return
    if it.kind == "embed-from-target":
        tgt = plan.embed_target
        rec = tgt.embed
        step = CHUNK // itemsize(rec.dtype) * itemsize(rec.dtype)
        for a in range(0, rec.nbytes, step):
            chunk = read_range(tgt.source, rec.name, a, min(rec.nbytes, a + step))
            write_cast(write, chunk, it.src_dtype, it.dtype)
        return
    if it.kind == "vocab-map":
        write(it.data)
        return
    if it.kind == "head-from-target":
        import struct

        tgt = plan.head_target
        rec = tgt.lm_head or tgt.embed
        raw = (
            read_small(plan.src.source, plan.src.by_canonical()["d2t"].name)
            if "d2t" in plan.src.by_canonical()
            else None
        )
        vd = it.shape[0]
        d2t = list(struct.unpack(f"<{vd}q", raw)) if raw else [0] * vd
        ids = [i + d2t[i] for i in range(vd)]
        if any(not 0 <= x < rec.shape[0] for x in ids):
            raise WeightcheckError(tgt.source.spec, "d2t maps outside the target's lm_head rows")
        gather_rows([("target", t) for t in ids], {"target": (tgt.source, rec)}, it.dtype, write)
        return
    if it.kind == "reindex":
        rows, thead = it.data
        src = plan.src.source
        sources = {"src": (src, src.tensors[it.src_name])} if rows.kept + rows.moved else {}
        if thead is not None and rows.from_target:
            sources["target"] = (plan.head_target.source, thead)
        gather_rows(list(rows.rows), sources, it.dtype, write)
        return
    raise AssertionError(it.kind)


GATHER_GAP = 64  # rows: needed rows closer than this share one read (Range reads of a Hub file)


def gather_rows(rows: list, sources: dict, dtype: str, write) -> None:
    """Write the rows ``rows`` — (source key, row index) each, in output order — of 2-D tensors
    ``sources`` (key -> (Source, TensorRecord)), cast to ``dtype``. Output rows go in batches of
    about CHUNK bytes; each batch reads what it needs by ranges of neighbouring rows (at most
    CHUNK bytes a read), so memory stays at a batch and a read whatever the tensors' sizes."""
    if not rows:
        return
    meta = {}
    for key, (source, rec) in sources.items():
        meta[key] = (source, rec, rec.nbytes // rec.shape[0])
    out_row = max(rb for _, _, rb in meta.values())
    per = max(1, CHUNK // out_row)
    for b0 in range(0, len(rows), per):
        part = rows[b0 : b0 + per]
        got: list = [None] * len(part)
        for key, (source, rec, rb) in meta.items():
            want: dict[int, list[int]] = {}
            for k, (s, x) in enumerate(part):
                if s == key:
                    want.setdefault(x, []).append(k)
            for a, b in runs(list(want), GATHER_GAP, max(1, CHUNK // rb)):
                data = read_range(source, rec.name, a * rb, b * rb)
                for x in range(a, b):
                    for k in want.get(x, ()):
                        got[k] = (data[(x - a) * rb : (x - a + 1) * rb], rec.dtype)
                del data
        if all(d == dtype for _, d in got):
            write(b"".join(c for c, _ in got))
        else:
            for c, d in got:
                write_cast(write, c, d, dtype)


def write_shards(plan: Plan, tmp: str, progress, checker, fsync: bool) -> dict:
    """Write every shard; hand each written range to ``checker`` as soon as it is on the page
    cache, so verification runs beside the copy. Where a tensor lies in the output is read back
    from the header bytes written (our strict parser), not taken from the running offset.
    Returns shard file name -> the header bytes written, in shard order."""
    headers = {}
    for shard in range(plan.shards):
        items, residue = aligned_order(plan, [it for it in plan.items if it.shard == shard])
        name = plan.shard_name(shard)
        path = os.path.join(tmp, name)
        head = header_bytes(
            [OutTensor(it.out_name, it.dtype, it.shape, b"") for it in items],
            plan.metadata,
            None if residue is None else (residue, ALIGN),
        )
        headers[name] = head
        layout = parse_header(head[8 : 8 + read_header_length(head, path)], path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, head, 0)
            off = len(head)
            flushed = [0]

            def written(end, _fd=fd, _flushed=flushed):  # bytes [0, end) are in the page cache
                if fsync and end - _flushed[0] >= WRITEBACK_CHUNK:
                    start_writeback(_fd, _flushed[0], end - _flushed[0])
                    _flushed[0] = end

            for it in items:
                if it.kind == "copy":
                    rec = plan.src.source.tensors[it.src_name]
                    spath = plan.src.source.local_path(rec.file)
                    begin = rec.begin + it.src_offset  # a fused tensor's part: its rows
                    for rel in range(0, it.nbytes, COPY_CHUNK):
                        n = min(COPY_CHUNK, it.nbytes - rel)
                        copy_range(spath, begin + rel, n, fd, off + rel)
                        checker.same(path, layout, it.out_name, rel, n, spath, begin + rel)
                        if checker.error is not None:
                            raise checker.error
                        written(off + rel + n)
                        if progress:
                            progress(n)
                else:
                    crc = [0]
                    pos = [off]

                    def w(chunk, _fd=fd, _crc=crc, _pos=pos):
                        _pos[0] = write_all(_fd, chunk, _pos[0])
                        _crc[0] = zlib.crc32(chunk, _crc[0])

                    produce(plan, it, w)
                    if pos[0] - off != it.nbytes:
                        raise WeightcheckError(
                            it.src_name,
                            f"produced {pos[0] - off} bytes for "
                            f"{it.out_name}, expected {it.nbytes}",
                        )
                    checker.digest(path, layout, it.out_name, crc[0])
                    if it.kind == "reindex":
                        check_reindexed_rows(plan, it, checker, path, layout)
                    written(off + it.nbytes)
                    if progress:
                        progress(it.nbytes)
                off += it.nbytes
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return headers


def check_reindexed_rows(plan: Plan, it: Item, checker, path: str, layout) -> None:
    """--vocab-from: beyond the digest of what was produced, each lm_head row taken from a local
    safetensors file without a cast is compared byte for byte with its row there (runs of
    consecutive rows as one range), so a row moved to the wrong place fails verification."""
    rows, thead = it.data
    srcs = {"src": (plan.src.source, plan.src.source.tensors.get(it.src_name))}
    if thead is not None and plan.head_target is not None:
        srcs["target"] = (plan.head_target.source, thead)
    where = {}
    for key, (source, rec) in srcs.items():
        if rec is None or rec.dtype != it.dtype or source.files[rec.file].format == "pickle":
            continue
        if source.kind == "hub" and source.files[rec.file].local_path is None:
            continue  # a Hub file read by range: its rows are covered by the digest only
        where[key] = (source.local_path(rec.file), rec.begin, rec.nbytes // rec.shape[0])
    run = None  # (key, first output row, first source row, length)
    out_row = it.nbytes // it.shape[0] if it.shape[0] else 0

    def flush(r):
        if r is None:
            return
        key, j0, i0, n = r
        spath, begin, rb = where[key]
        checker.same(path, layout, it.out_name, j0 * out_row, n * rb, spath, begin + i0 * rb)

    for j, (key, i) in enumerate(rows.rows):
        if key not in where or where[key][2] != out_row:
            flush(run)
            run = None
            continue
        if run is not None and run[0] == key and run[2] + run[3] == i:
            run = (key, run[1], run[2], run[3] + 1)
        else:
            flush(run)
            run = (key, j, i, 1)
    flush(run)
    if checker.error is not None:
        raise checker.error


def write_index(plan: Plan, tmp: str) -> list:
    """model.safetensors.index.json for a sharded output; returns the names written."""
    if plan.shards == 1:
        return []
    index = {
        "metadata": {"total_size": sum(it.nbytes for it in plan.items), MARK: plan.to},
        "weight_map": {
            it.out_name: plan.shard_name(it.shard)
            for it in sorted(plan.items, key=lambda it: it.out_name)
        },
    }
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return ["model.safetensors.index.json"]


def aligned_order(plan: Plan, items: list) -> tuple[list, int | None]:
    """The order of a shard's tensors in the file, and where its data buffer should start.

    Renamed tensors keep their order in the source file, so consecutive ones keep their distance,
    and the header is padded (spaces, allowed by the format) so that the bytes most of them
    take land at the same offset modulo ALIGN as in the source. That is the copy ``cp`` gets: the
    kernel copies whole pages and large folios (measured here: a 2.38 GB copy_file_range takes
    0.70 s with equal offsets modulo 64 KiB, 0.82 s modulo 4 KiB, 0.90 s at an offset of 1576
    bytes), and a filesystem with reflinks (XFS, btrfs) can share the blocks instead of copying
    them. Returns (items, data start residue modulo ALIGN, or None for no padding)."""

    def src_pos(it):
        rec = plan.src.source.tensors[it.src_name]
        return (rec.file, rec.begin + it.src_offset)

    copies = sorted((it for it in items if it.kind == "copy"), key=src_pos)
    ordered = copies + [it for it in items if it.kind != "copy"]
    weight: dict[int, int] = {}
    pos = 0
    for it in copies:
        r = (plan.src.source.tensors[it.src_name].begin + it.src_offset - pos) % ALIGN
        if r % 8 == 0:  # the data buffer itself stays 8-byte aligned, as the library writes it
            weight[r] = weight.get(r, 0) + it.nbytes
        pos += it.nbytes
    if not weight or sum(weight.values()) < ALIGN_MIN_BYTES:
        return ordered, None  # too little to copy for alignment to matter: no padding
    return ordered, max(weight, key=lambda r: (weight[r], -r))


def write_all(fd: int, data, pos: int) -> int:
    view = memoryview(data)
    while view:
        k = os.pwrite(fd, view, pos)
        pos += k
        view = view[k:]
    return pos


@functools.lru_cache(maxsize=None)
def sync_file_range():
    """libc's sync_file_range (Linux), or None. Python has no binding; ctypes is the standard
    library. Used only with --fsync, to start writing a range to disk while the next is copied,
    so the final fsync waits for the tail instead of the whole file."""
    try:
        import ctypes

        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, ImportError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range, do not wait


def start_writeback(fd: int, off: int, n: int) -> None:
    f = sync_file_range()
    if f is not None:
        f(fd, off, n, SYNC_FILE_RANGE_WRITE)  # a hint: the fsync that follows is what counts


def write_config_and_card(plan: Plan, tmp: str) -> list:
    """config.json and the README model card; returns the names written."""
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(plan.config, f, indent=2)
        f.write("\n")
    s = plan.src.source
    rev = f" at revision `{s.commit}`" if s.commit else ""
    archs = plan.config.get("architectures") or [None]
    layout = (  # the file of the loader that reads it: sglang_mla.toml for an MLA drafter
        loader_for(plan.to, archs[0]) if plan.to in ENGINES else plan.to
    )
    lines = [
        CARD_MARK,
        f"# EAGLE-3 drafter for {plan.to}",
        "",
        f"Converted by weightcheck {__version__} from `{plan.metadata['weightcheck_source']}`{rev} "
        f"({plan.src.dialect} dialect, {s.layout}) to the {plan.to} layout "
        f"(mappings/engines/{layout}.toml).",
        "",
        f"- tensors: {len(plan.items)} in {plan.shards} file(s), "
        f"{sum(it.nbytes for it in plan.items)} bytes; every tensor re-read and verified against "
        "its source",
    ]
    lines += [f"- from {where}: {'; '.join(what)}" for where, what in origins(plan)]
    for c in plan.config_changes:
        lines.append(f"- config: {c}")
    for n in plan.notes:
        lines.append(f"- {n}")
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return ["config.json", "README.md"]
