"""The data's files read into the page cache from the moment they are listed (docs/eval.md §7).

A run's fixed cost — importing torch, starting CUDA, putting the weights on the GPU — is seconds
during which the disk would sit idle. :class:`ReadAhead` starts before any of it: threads read the
files in order (each byte once, into a small reused buffer: the kernel keeps the pages), staying
at most a window of bytes ahead of the files already handed to the staging buffers (stream.py),
so that when the batches start, their reads come from memory while the disk goes on with the next
files; a staging reader that reaches a file before the threads have read it waits for them
(:meth:`ReadAhead.wait`), so that the disk serves the threads' in-order reads alone. The process
holds only the threads' buffers; the window is page cache, which the kernel takes back under
memory pressure (a page evicted before it was used is read again, never wrong).

Before the data, the threads read ``first``: the shared libraries torch's import is about to map
(:func:`libraries`: a CPU build's; a CUDA build's are GBs its import never touches). Read by the
import's own page faults, a few pages at a time, they wait behind the data's large reads in the
disk's queue: on the H200, with torch's libraries cold, reading the
data ahead made torch's import 12.2 s against 4.9 s alone. Read first, in large reads, they are
mostly in the page cache when the import faults them in: on the build machine (2 cores, torch
2.13's 0.47 GB of libraries and a 6.4 GB data file evicted before each trial; bench/
bench_readahead.py, medians of 4 and 6 trials) the cold import took 1.53-1.63 s alone, 1.65-1.76x
that beside the data's read-ahead, 1.32-1.41x with the libraries read first.

``MODE``: ``read`` (the threads read: a CPU build's libraries, then the data; the staging readers
wait for them), ``advise`` (one thread asks the kernel to read each data file ahead with
``posix_fadvise(WILLNEED)``; its progress is not seen, so it only keeps the window) or ``off``
(the staging buffers' readers, stream.py, are the reading, from when the weights are on the
device). Measured end to end on one H200 with a 600,000-position dump (34.42 GB) and torch's
libraries in the page cache, before the staging readers waited: 28.0 s ``read``, 29.2 s ``off``;
earlier, at 200,000 positions, ``advise`` was the slowest (docs/eval.md §7).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
import threading
import time

MODE = "read"  # measured: see above
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


def libraries() -> list[str]:
    """What a run reads first: :func:`torch_libraries` of a CPU build; none once torch is
    imported (nothing left for its import to wait for), and none for a CUDA build: its libraries
    (3.8 GB on the H200 machine: cuBLAS's and cuDNN's kernels for every GPU, NCCL) are mostly
    never touched by the import or a forward, and reading them whole cost more of the disk than
    the import gained — with them cold, 27.5 s against 25.7 s for the whole run (torch in at
    10.1 s against 7.6 s), and 5 s of the disk's time with them half cached (docs/eval.md §7).
    A CPU build's (0.47 GB on the build machine) are what its import reads."""
    if "torch" in sys.modules:
        return []
    found = torch_libraries()
    if any(os.path.basename(f).startswith("libtorch_cuda.") for f in found):
        return []
    return found


def torch_libraries() -> list[str]:
    """The shared libraries importing torch maps, largest first: torch's own (``torch/lib``) and
    the CUDA libraries of the ``nvidia-*`` wheels installed beside it (a CUDA build from pip loads
    them when imported); none where torch is not installed. Found without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    root = list(spec.submodule_search_locations)[0]
    dirs = [os.path.join(root, "lib")]
    dirs += sorted(glob.glob(os.path.join(os.path.dirname(root), "nvidia", "*", "lib")))
    found = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if ".so" in name and os.path.isfile(path):
                found.append((_size(path), path))
    return [p for _, p in sorted(found, key=lambda x: (-x[0], x[1]))]


class ReadAhead:
    """Read ``paths`` ahead (``ranges(path)``: the byte ranges of a file that will be read, None
    for all of it), after the files of ``first`` (whole, outside the window: what the run maps
    before its first batch, e.g. :func:`libraries`); :meth:`handed` says how many files the
    staging buffers have taken; :meth:`close` stops the threads."""

    def __init__(self, paths, ranges=None, mode: str | None = None, window: int | None = None,
                 threads: int | None = None, first=()):  # fmt: skip
        self.paths = list(paths)
        self.mode = mode or MODE
        self.first = list(first) if self.mode == "read" else []
        self._first_next = 0
        self.first_bytes = 0  # of ``first``, read so far
        self.first_done = None  # when the last of ``first`` was read
        self.window = window if window is not None else default_window()
        self._ranges = ranges
        self._cum = [0]
        for p in self.paths:
            self._cum.append(self._cum[-1] + _size(p))
        self._next = 0  # the next file to read ahead
        self._handed = 0  # files the consumer has taken
        self._at = {p: j for j, p in enumerate(self.paths)}
        self._done = [False] * len(self.paths)  # read ahead (or failed: the consumer says why)
        self._cond = threading.Condition()
        self._stop = False
        self.bytes = 0  # read (or advised) ahead so far
        self.started = time.perf_counter()
        self.finished = None  # when every thread was done
        self._threads = []
        self._running = 0
        if self.mode == "off" or not (self.paths or self.first):
            return
        wide = max(len(self.paths), len(self.first))
        n = 1 if self.mode == "advise" else max(1, min(threads or THREADS, wide))
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

    def wait(self, path: str) -> None:
        """Return once ``path`` has been read ahead (at once in another mode, for a file it does
        not read, or once it stopped): in ``read`` mode the consumer reads each file from the
        page cache after the threads, so that the disk serves the threads' large in-order reads
        alone. A consumer reading the files it had been handed itself, beside the threads reading
        the next ones, made 12 streams in the disk's queue: the data came at 1.59 GB/s where the
        threads alone read 1.78-1.88 GB/s (H200 machine, 34 GB dump; docs/eval.md §7)."""
        j = self._at.get(path)
        if j is None or self.mode != "read":
            return
        with self._cond:
            while not self._done[j] and not self._stop and self._running:
                self._cond.wait(0.5)

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
                # read mode: every file, in order (the consumer waits for it: wait); advise: the
                # files the consumer has not taken yet
                j = self._next if self.mode == "read" else max(self._next, self._handed)
                if j >= len(self.paths):
                    return None
                if j <= self._handed or self._cum[j + 1] - self._cum[self._handed] <= self.window:
                    self._next = j + 1
                    return j
                self._cond.wait(0.2)
            return None

    def _take_first(self) -> str | None:
        """The next of ``first`` to read (None: all taken, or stopped)."""
        with self._cond:
            if self._stop or self._first_next >= len(self.first):
                return None
            self._first_next += 1
            return self.first[self._first_next - 1]

    def _read_first(self, buf) -> None:
        while (path := self._take_first()) is not None:
            try:
                got = self._read(path, None, buf)
            except (OSError, ValueError):  # a library that is not there is the import's to say
                got = 0
            with self._cond:
                self.first_bytes += got
                self.first_done = time.perf_counter()

    def _work(self) -> None:
        buf = bytearray(CHUNK) if self.mode == "read" else None
        try:
            self._read_first(buf)
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
                    self._done[j] = True
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._running -= 1
                if not self._running:
                    self.finished = time.perf_counter()
                self._cond.notify_all()

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
