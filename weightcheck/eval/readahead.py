"""The data's files read into the page cache from the moment they are listed (docs/eval.md §7).

A run's fixed cost — importing torch, starting CUDA, putting the weights on the GPU — is seconds
during which the disk would sit idle. :class:`ReadAhead` starts before any of it: threads read the
files in order (each byte once, into a small reused buffer: the kernel keeps the pages), staying
at most a window of bytes ahead of the files already handed to the staging buffers (stream.py),
so that when the batches start, their reads come from memory while the disk goes on with the next
files. The process holds only the threads' buffers; the window is page cache, which the kernel
takes back under memory pressure (a page evicted before it was used is read again, never wrong).

``MODE``: ``read`` (the threads read), ``advise`` (one thread asks the kernel to read each file
ahead with ``posix_fadvise(WILLNEED)``; its progress is not seen, so it only keeps the window) or
``off``, the default, decided end to end by bench/bench_eval_gpu.py on one H200 (docs/eval.md §7):
a 200,000-position dump took 13.5 s with ``read``, 14.1 s ``off``, 15.7 s ``advise`` while torch's
libraries were in the page cache; with them cold, ``read`` took 20.8 s, its reads starving
torch's import of the disk (12.2 s against 4.9 s alone). Off, the staging buffers' readers
(stream.py) are the reading, from when the weights are on the device.
"""

from __future__ import annotations

import os
import threading
import time

MODE = "off"  # measured: see above
THREADS = 8  # the read-once bench's best on the GPU machine (BENCHMARKS.md)
CHUNK = 16 << 20  # each thread's buffer
WINDOW_MAX = 16 << 30
WINDOW_MIN = 256 << 20


def default_window() -> int:
    """Bytes read ahead at most: half the memory available (page cache the kernel can take back),
    between 256 MiB and 16 GiB."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        return 2 << 30
    return max(WINDOW_MIN, min(WINDOW_MAX, avail // 2))


class ReadAhead:
    """Read ``paths`` ahead (``ranges(path)``: the byte ranges of a file that will be read, None
    for all of it); :meth:`handed` says how many files the staging buffers have taken;
    :meth:`close` stops the threads."""

    def __init__(self, paths, ranges=None, mode: str | None = None, window: int | None = None,
                 threads: int | None = None):  # fmt: skip
        self.paths = list(paths)
        self.mode = mode or MODE
        self.window = window if window is not None else default_window()
        self._ranges = ranges
        self._cum = [0]
        for p in self.paths:
            self._cum.append(self._cum[-1] + _size(p))
        self._next = 0  # the next file to read ahead
        self._handed = 0  # files the consumer has taken
        self._cond = threading.Condition()
        self._stop = False
        self.bytes = 0  # read (or advised) ahead so far
        self.started = time.perf_counter()
        self.finished = None  # when every thread was done
        self._threads = []
        self._running = 0
        if self.mode == "off" or not self.paths:
            return
        n = 1 if self.mode == "advise" else max(1, min(threads or THREADS, len(self.paths)))
        self._running = n
        for i in range(n):
            t = threading.Thread(target=self._work, name=f"weightcheck-ahead-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def handed(self, n: int) -> None:
        """The first ``n`` files are the consumer's now: the window moves on."""
        with self._cond:
            if n > self._handed:
                self._handed = n
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=2)

    def _take(self) -> int | None:
        """The next file to read ahead, once it is inside the window (None: stop)."""
        with self._cond:
            while not self._stop:
                j = max(self._next, self._handed)
                if j >= len(self.paths):
                    return None
                if j == self._handed or self._cum[j + 1] - self._cum[self._handed] <= self.window:
                    self._next = j + 1
                    return j
                self._cond.wait(0.2)
            return None

    def _work(self) -> None:
        buf = bytearray(CHUNK) if self.mode == "read" else None
        try:
            while True:
                j = self._take()
                if j is None:
                    return
                path = self.paths[j]
                try:
                    spans = self._ranges(path) if self._ranges is not None else None
                    got = self._read(path, spans, buf)
                except (OSError, ValueError):  # the consumer's own read says what is wrong
                    got = 0
                with self._cond:
                    self.bytes += got
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self.finished = time.perf_counter()

    def _read(self, path: str, spans, buf) -> int:
        """Bring ``spans`` of ``path`` (all of it when None) into the page cache: bytes."""
        fd = os.open(path, os.O_RDONLY)
        try:
            if spans is None:
                spans = [(0, os.fstat(fd).st_size)]
            total = 0
            for a, b in spans:
                if buf is None:
                    if hasattr(os, "posix_fadvise"):
                        os.posix_fadvise(fd, a, b - a, os.POSIX_FADV_WILLNEED)
                    total += b - a
                    continue
                view = memoryview(buf)
                at = a
                while at < b and not self._stop:
                    n = _pread_into(fd, view[: min(len(buf), b - at)], at)
                    if not n:
                        break
                    at += n
                total += at - a
            return total
        finally:
            os.close(fd)


def _pread_into(fd: int, view: memoryview, at: int) -> int:
    if hasattr(os, "preadv"):
        return os.preadv(fd, [view], at)
    os.lseek(fd, at, os.SEEK_SET)
    return os.readv(fd, [view])


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
