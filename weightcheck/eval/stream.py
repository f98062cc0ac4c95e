"""The data read ahead while the drafters compute (docs/eval.md §7).

A producer thread opens the selected files in order (a SpecForge ``.ckpt`` is indexed through
sources/torchzip.py: where its tensors' bytes lie; another file is memory-mapped or read by
slices), checks each
against the drafters (one line naming the file, raised where the batches are taken), and gathers
them into batches of at most ``positions`` positions (a longer sample is a batch of its own).
Reader threads read each sample of a batch into a staging buffer (one ``readinto`` per tensor;
pinned host memory when the device is a GPU, so the copy to it runs asynchronously); a bounded
pool of buffers is the read-ahead: the producer waits for one to come back before it reads more,
so the memory held is ``depth`` batches whatever the dump's size. Beside it, readahead.py keeps
the disk busy further ahead (page cache, not this process's memory; docs/eval.md §7): each batch
handed to the readers moves its window on.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

from weightcheck.record import record

_DONE = object()
_POLL = 0.1  # seconds a blocked thread waits before it looks at the stop flag again


@record
class Batch:
    """Samples packed end to end: host tensors (views of a staging buffer)."""

    files: list  # the samples' labels, in order
    lengths: list  # their positions
    aux: object  # [L, n_aux * T]
    ids: object  # [L] long
    mask: object  # [L] long
    last: object  # [L, T] or None (no --target)
    normed: bool  # the last hidden state is after the target's final norm
    nbytes: int  # the files' sizes
    buffer: object = None  # the staging buffer to give back (Prefetch.release)


class _Buffer:
    def __init__(self, rows: int, width: int, dtype, last_width: int | None, last_dtype, pin):
        import torch

        def alloc(shape, dt):
            return torch.empty(shape, dtype=dt, pin_memory=pin)

        self.rows = rows
        self.aux = alloc((rows, width), dtype)
        self.ids = alloc((rows,), torch.long)
        self.mask = alloc((rows,), torch.long)
        self.last = alloc((rows, last_width), last_dtype) if last_width else None
        self.event = None  # set when the device copy from it is queued (CUDA)
        self.pooled = True


class Prefetch:
    """Iterate over :class:`Batch` es of ``dataset``'s files ``indices``; ``check(sample)``
    raises on a sample the drafters cannot take. ``close()`` stops the threads."""

    def __init__(
        self,
        dataset,
        indices,
        positions: int,
        need_last: bool,
        check=None,
        pin: bool = False,
        depth: int = 3,
        workers: int = 4,
        ahead=None,
    ):
        self.ds, self.indices = dataset, list(indices)
        self.positions, self.need_last, self.check = max(1, positions), need_last, check
        self.pin, self.depth = pin, max(1, depth)
        self.ahead, self._handed = ahead, 0  # readahead.ReadAhead, files handed to the readers
        self._out: queue.Queue = queue.Queue(maxsize=self.depth)
        self._free: queue.Queue = queue.Queue()
        self._made = 0  # pooled buffers allocated so far (at most depth)
        self._shape = None  # (width, dtype, last width, last dtype) of the first sample
        self._stop = threading.Event()
        self._inflight: collections.deque = collections.deque()  # (Batch, its reads), in order
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="weightcheck-read")
        self._openers = ThreadPoolExecutor(2, thread_name_prefix="weightcheck-open")
        self._thread = threading.Thread(target=self._produce, name="weightcheck-prefetch")
        self._thread.daemon = True
        self._thread.start()

    # -- the consumer's side ----------------------------------------------------------------------
    def __iter__(self):
        while True:
            item = self._get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _get(self):
        while True:
            try:
                return self._out.get(timeout=_POLL)
            except queue.Empty:
                if not self._thread.is_alive() and self._out.empty():
                    return _DONE

    def release(self, batch: Batch, event=None) -> None:
        """Give ``batch``'s buffer back once ``event`` (the device copy from it) completes."""
        buf = batch.buffer
        batch.buffer = None
        if buf is not None and buf.pooled:
            buf.event = event
            self._free.put(buf)

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._openers.shutdown(wait=False, cancel_futures=True)

    # -- the producer's side ----------------------------------------------------------------------
    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._out.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            ahead = []  # futures of opened samples, in order
            batch, size = [], 0
            it = iter(self.indices)
            while not self._stop.is_set():
                while len(ahead) < 2 * self.depth + 2:
                    i = next(it, None)
                    if i is None:
                        break
                    ahead.append(self._openers.submit(self._open, i))
                if not ahead:
                    break
                s = ahead.pop(0).result()
                n = int(s[0].input_ids.shape[0])
                if batch and size + n > self.positions:
                    if not self._start(batch):
                        return
                    batch, size = [], 0
                batch.append(s)
                size += n
            if batch and not self._stop.is_set() and not self._start(batch):
                return
            while self._inflight:
                if not self._finish_oldest():
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(e)
            return
        self._put(_DONE)

    def _open(self, i: int):
        s = self.ds.sample(i, self.need_last, direct=True)
        if self.check is not None:
            self.check(s)
        try:
            nbytes = os.path.getsize(self.ds.files[i])
        except OSError:
            nbytes = 0
        return s, nbytes, self.ds.files[i]

    def _buffer(self, rows: int, first):
        """A staging buffer of at least ``rows`` rows: a pooled one (waiting for one to come back
        when ``depth`` are out), or one of its own for a sample longer than a batch."""
        if self._shape is None:
            last = first.last if self.need_last else None
            self._shape = (
                int(first.aux.shape[1]),
                first.aux.dtype,
                int(last.shape[1]) if last is not None else None,
                last.dtype if last is not None else None,
            )
        if rows > self.positions:
            b = _Buffer(rows, *self._shape, self.pin)
            b.pooled = False
            return b
        if self._made < self.depth:
            self._made += 1
            return _Buffer(self.positions, *self._shape, self.pin)
        while not self._stop.is_set():
            try:
                b = self._free.get(timeout=_POLL)
            except queue.Empty:
                # every buffer is out: one comes back only once the consumer has a batch
                if self._inflight and not self._finish_oldest():
                    return None
                continue
            if b.event is not None:
                b.event.synchronize()
            return b
        return None

    def _start(self, batch) -> bool:
        """Queue the reads of ``batch`` into a buffer (they run while earlier batches' do); hand
        over the batches whose reads are done, in order."""
        lengths = [int(s.input_ids.shape[0]) for s, *_ in batch]
        buf = self._buffer(sum(lengths), batch[0][0])
        if buf is None:
            return False
        starts, at = [], 0
        for n in lengths:
            starts.append(at)
            at += n
        jobs = [
            self._pool.submit(self._copy, s, path, buf, a, n, self.ahead)
            for (s, _, path), a, n in zip(batch, starts, lengths)
        ]
        L = at
        b = Batch(
            files=[s.file for s, *_ in batch],
            lengths=lengths,
            aux=buf.aux[:L],
            ids=buf.ids[:L],
            mask=buf.mask[:L],
            last=buf.last[:L] if buf.last is not None else None,
            normed=bool(batch[0][0].last_normed),
            nbytes=sum(nb for _, nb, _ in batch),
            buffer=buf,
        )
        batch.clear()  # the samples go with their reads
        self._handed += len(lengths)
        if self.ahead is not None:
            self.ahead.handed(self._handed)
        self._inflight.append((b, jobs))
        while self._inflight and all(j.done() for j in self._inflight[0][1]):
            if not self._finish_oldest():
                return False
        return True

    def _finish_oldest(self) -> bool:
        b, jobs = self._inflight.popleft()
        for j in jobs:
            j.result()
        return self._put(b)

    @staticmethod
    def _copy(s, path: str, buf: _Buffer, a: int, n: int, ahead=None) -> None:
        if ahead is not None:  # read from the page cache once the read-ahead has read the file
            ahead.wait(path)
        _fill(buf.aux[a : a + n], s.aux)
        buf.ids[a : a + n].copy_(s.input_ids)
        buf.mask[a : a + n].copy_(s.loss_mask)
        if buf.last is not None:
            _fill(buf.last[a : a + n], s.last)


def _fill(dst, src) -> None:
    """``dst`` from a tensor, or from a file (data.py ``FileTensor``: one read into it)."""
    if hasattr(src, "read_into"):
        src.read_into(dst)
    else:
        dst.copy_(src)
