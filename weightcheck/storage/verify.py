"""Verification of what ``convert`` writes: every byte re-read and checked before OUT appears.

Two parts, both used by :func:`weightcheck.commands.convert.write`:

* :class:`RangeChecker` — a thread that re-reads each range of an output file as soon as it is
  written and checks it: a renamed tensor byte for byte against its range in the source file
  (two reused buffers, memcmp), a produced one (cast, taken from a target) against the crc32 of
  the bytes that were produced. Where a range lies in the output comes from the header we wrote,
  parsed again by our strict parser, not from the writer's running offset, so a writer that puts
  bytes in the wrong place fails. The checker runs while the writer copies the next range
  (``copy_file_range`` and ``preadv`` release the GIL), so on two cores a verified conversion
  costs little more wall time than the copy alone (docs/benchmarks.md).
* :func:`reopen` — once a file is complete: its header bytes on disk are the ones we wrote, it is
  exactly as long as that header says (so together with the ranges above every byte of the file
  is checked), and the safetensors library reads the same names, dtypes, shapes and
  ``format: pt`` metadata.

Reads come from the page cache: this proves the file holds what the plan says, not that the disk
stored it (``--fsync`` makes it durable; docs/reliability.md).
"""

from __future__ import annotations

import os
import queue
import threading
import zlib

from weightcheck.errors import WeightcheckError
from weightcheck.storage.header import Header, read_local_header

CHECK_CHUNK = (
    256 << 10
)  # bytes per compare: both buffers stay in the L2 cache (8 MiB: +20% wall time)


def _read_at(fd: int, view: memoryview, offset: int) -> int:
    """Read into ``view`` from ``offset``; returns the bytes read (fewer only at end of file).
    ``os.preadv`` where the platform has it (Linux, the BSDs), else ``os.pread`` and a copy."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], offset)
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


def _differs(path: str, name: str) -> WeightcheckError:
    return WeightcheckError(path, f"verification failed: {name} differs from its source")


class RangeChecker:
    """Checks written ranges in a background thread, in the order they are submitted.

    ``same(...)``/``digest(...)`` queue a check and return at once; :attr:`error` is the first
    failure (the writer polls it to stop early); :meth:`finish` waits for every queued check and
    raises the first failure; :meth:`close` stops the thread without waiting for the queue (on
    an error or a signal). Use it as a context manager so the thread never outlives the write.
    """

    def __init__(self, chunk: int = CHECK_CHUNK):
        self._chunk = chunk
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="weightcheck-verify", daemon=True)
        self._thread.start()

    # -- submitting -----------------------------------------------------------------------
    def same(
        self,
        out_path: str,
        header: Header,
        name: str,
        rel: int,
        n: int,
        src_path: str,
        src_off: int,
    ) -> None:
        """Bytes [rel, rel+n) of tensor ``name`` in ``out_path`` (located by ``header``) must
        equal bytes [src_off, src_off+n) of ``src_path``."""
        self._q.put(("same", out_path, header, name, rel, n, src_path, src_off))

    def digest(self, out_path: str, header: Header, name: str, crc: int) -> None:
        """The whole of tensor ``name`` in ``out_path`` must have this crc32."""
        self._q.put(("crc", out_path, header, name, crc))

    # -- waiting --------------------------------------------------------------------------
    def finish(self) -> None:
        self._q.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._stop.set()
        self._q.put(None)
        self._thread.join()

    def __enter__(self) -> "RangeChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        # Nothing is imported here (numpy for reopen() would overlap the copy, ~50 ms): SIGINT/
        # SIGTERM raise in the main thread wherever it is, and one raised inside importlib's
        # bootstrap there can leave the global import lock held, so an import in this thread
        # waits forever and close() with it (seen: 1 run in 17 with SIGTERM as the temporary
        # folder appears). reopen() imports in the main thread, after the copy.
        bufs = (bytearray(self._chunk), bytearray(self._chunk))
        files: dict[str, int] = {}
        try:
            while True:
                job = self._q.get()
                if job is None or self._stop.is_set():
                    return
                if self.error is not None:
                    continue  # drain: the writer is stopping
                try:
                    if job[0] == "same":
                        self._same(files, bufs, *job[1:])
                    else:
                        self._crc(files, bufs[0], *job[1:])
                except WeightcheckError as e:
                    self.error = e
                except OSError as e:
                    self.error = WeightcheckError(
                        job[1], f"verification failed: cannot re-read ({e.strerror or e})"
                    )
                except BaseException as e:  # never die silently: the writer would wait forever
                    self.error = e
        finally:
            for fd in files.values():
                os.close(fd)

    @staticmethod
    def _fd(files: dict, path: str) -> int:
        fd = files.get(path)
        if fd is None:
            fd = files[path] = os.open(path, os.O_RDONLY)
        return fd

    def _same(self, files, bufs, out_path, header, name, rel, n, src_path, src_off) -> None:
        t = header.tensors[name]
        if rel < 0 or rel + n > t.nbytes:
            raise _differs(out_path, name)
        out_fd, src_fd = self._fd(files, out_path), self._fd(files, src_path)
        a = header.data_start + t.begin + rel
        ba, bb = bufs
        va, vb = memoryview(ba), memoryview(bb)
        done = 0
        while done < n:
            k = min(len(ba), n - done)
            ka = _read_at(out_fd, va[:k], a + done)
            kb = _read_at(src_fd, vb[:k], src_off + done)
            if ka != k or kb != k:
                raise _differs(out_path, name)
            if (ba != bb) if k == len(ba) else (va[:k] != vb[:k]):
                raise _differs(out_path, name)
            done += k

    def _crc(self, files, buf, out_path, header, name, expected) -> None:
        t = header.tensors[name]
        fd = self._fd(files, out_path)
        view = memoryview(buf)
        pos, end, crc = header.data_start + t.begin, header.data_start + t.end, 0
        while pos < end:
            k = _read_at(fd, view[: min(len(buf), end - pos)], pos)
            if not k:
                raise _differs(out_path, name)
            crc = zlib.crc32(view[:k], crc)
            pos += k
        if crc != expected:
            raise _differs(out_path, name)


def reopen(path: str, written_header: bytes, expected: dict) -> None:
    """Check a finished output file: the header on disk is ``written_header`` byte for byte, the
    file ends where that header's data ends (our strict parser), and the safetensors library reads
    ``expected`` — out name -> (dtype, shape) — and ``format: pt``."""
    with open(path, "rb") as f:
        on_disk = f.read(len(written_header))
    if on_disk != written_header:
        raise WeightcheckError(
            path, "verification failed: the header on disk is not the one written"
        )
    header = read_local_header(path)  # raises if the file is longer or shorter than the header says
    if {k: (t.dtype, tuple(t.shape)) for k, t in header.tensors.items()} != expected:
        raise WeightcheckError(
            path, "verification failed: the header does not list the planned tensors"
        )
    try:
        import numpy  # noqa: F401  (the library's numpy framework reads headers without torch)
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - both are dependencies; the strict parser still ran
        return
    with safe_open(path, framework="numpy") as f:
        keys = set(f.keys())
        if keys != set(expected):
            raise WeightcheckError(
                path,
                f"verification failed: the safetensors library reads "
                f"{sorted(keys ^ set(expected))[:3]} differently",
            )
        for k in keys:
            sl = f.get_slice(k)
            if (sl.get_dtype(), tuple(sl.get_shape())) != expected[k]:
                raise WeightcheckError(
                    path,
                    f"verification failed: {k} reads back as {sl.get_dtype()} {sl.get_shape()}",
                )
        if (f.metadata() or {}).get("format") != "pt":
            raise WeightcheckError(path, "verification failed: __metadata__ format is not pt")
