"""Weights put on a GPU from their files (docs/eval.md §7).

A tensor's byte range is cut into pieces; a few threads each read a piece into a pinned host
buffer of their own (one ``readinto``: from the page cache, one copy) and copy it to the GPU on
their own CUDA stream while the other threads read, so that reading and the copies overlap. The
process holds the buffers only (``THREADS`` x ``PIECE``), not the file: nothing is mapped, no page
of a weight file counts in its memory. A tensor that is not a byte range of a local file (the
Hub, a compressed record) is read the slow way by forward.py.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor

PIECE = 32 << 20
THREADS = 8

_UPLOADERS: dict = {}


def located(src, rec):
    """(local path, first byte) of a tensor that is a byte range of a local file, else None."""
    wf = src.files.get(rec.file)
    if wf is None or not wf.local_path or rec.begin is None or rec.end is None:
        return None
    return wf.local_path, rec.begin


def get(device):
    """The uploader of ``device`` (made on first use, kept until :func:`close`)."""
    key = str(device)
    up = _UPLOADERS.get(key)
    if up is None:
        up = _UPLOADERS[key] = Uploader(device, THREADS, PIECE)
    return up


def close() -> None:
    """Stop the uploaders' threads and let their pinned buffers go."""
    for up in list(_UPLOADERS.values()):
        up.close()
    _UPLOADERS.clear()


class Uploader:
    """``load(path, begin, dtype, shape)``: a tensor of ``device`` read from a file's bytes."""

    def __init__(self, device, threads: int = THREADS, piece: int = PIECE):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.piece = piece
        self._free: queue.Queue = queue.Queue()
        for _ in range(threads):
            buf = torch.empty(piece, dtype=torch.uint8, pin_memory=self.cuda)
            stream = torch.cuda.Stream(self.device) if self.cuda else None
            self._free.put((buf, stream))
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="weightcheck-upload")

    def load(self, path: str, begin: int, dtype, shape):
        """The tensor of ``dtype`` and ``shape`` whose bytes start at ``begin`` in ``path``."""
        import torch

        out = torch.empty(tuple(shape), dtype=dtype, device=self.device)
        nbytes = out.numel() * out.element_size()
        if not nbytes:
            return out
        raw = out.view(-1).view(torch.uint8)
        jobs = [
            self._pool.submit(self._piece, path, begin + a, raw[a : min(nbytes, a + self.piece)])
            for a in range(0, nbytes, self.piece)
        ]
        for j in jobs:
            j.result()
        return out

    def _piece(self, path: str, at: int, dst) -> None:
        buf, stream = self._free.get()
        try:
            n = dst.numel()
            view = memoryview(buf.numpy()).cast("B")[:n]
            with open(path, "rb", buffering=0) as f:
                f.seek(at)
                got = 0
                while got < n:
                    k = f.readinto(view[got:])
                    if not k:
                        raise OSError(f"{path}: file ends inside a tensor")
                    got += k
            if self.cuda:
                import torch

                with torch.cuda.stream(stream):
                    dst.copy_(buf[:n], non_blocking=True)
                stream.synchronize()  # the buffer is free again
            else:
                dst.copy_(buf[:n])
        finally:
            self._free.put((buf, stream))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        while not self._free.empty():
            self._free.get()
        if self.cuda:
            _empty_host_cache()


def _empty_host_cache() -> None:
    """The pinned blocks torch keeps for reuse given back to the system
    (``torch.accelerator.empty_host_cache`` in recent torch, a private call in older ones; nothing
    when neither is there)."""
    import torch

    acc = getattr(torch, "accelerator", None)
    fn = getattr(acc, "empty_host_cache", None) or getattr(torch._C, "_host_emptyCache", None)
    if fn is None:
        return
    try:
        fn()
    except RuntimeError:
        pass
