"""One pass over the data for every drafter (docs/eval.md §7): batches read ahead (stream.py),
moved to the device, each drafter unrolled over the packed batch (forward.py, packed.py), its
hits counted there (metric.py ``batch_counts``) and brought back while the device computes the
next batch; the walk over each sequence (metric.py ``walk``) runs on the host meanwhile."""

from __future__ import annotations

import os
import time

from weightcheck.errors import WeightcheckError
from weightcheck.eval import metric
from weightcheck.eval.checks import check_sample
from weightcheck.eval.packed import Layout

DEPTH = 3  # batches read ahead (the staging buffers)
PHASES: list = []  # (what, time.perf_counter()) of the last run's phases: bench_eval_gpu.py


def mark(what: str) -> None:
    """Note when a phase of the run began (PHASES)."""
    PHASES.append((what, time.perf_counter()))


def _workers(device) -> int:
    n = os.cpu_count() or 1
    return max(1, min(8 if device.type == "cuda" else 2, n))


def run_batches(
    ds, chosen, models, tgt, counts, steps, device, progress, positions=None, ahead=None
):
    """Evaluate ``models`` on the files ``chosen`` of ``ds``, adding to ``counts`` (one per
    model); ``progress(done, total)`` in positions (the total estimated from the files' sizes);
    ``ahead``: the files' readahead.ReadAhead, told how far the staging buffers have got."""
    from weightcheck.eval import device as device_mod
    from weightcheck.eval.stream import Prefetch

    if not chosen:
        return

    def check(s):
        for m in models:
            check_sample(s, m, tgt)

    width = models[0].n_aux * models[0].T
    if positions is None:
        extra = tgt.bytes_per_position() if tgt is not None else 0
        positions = device_mod.batch_positions(device, models, width, extra)
    budget = device_mod.attention_bytes(device)
    total_bytes = sum(_size(ds.files[i]) for i in chosen)
    stream = Prefetch(
        ds,
        chosen,
        positions,
        need_last=tgt is not None,
        check=check,
        pin=device.type == "cuda",
        depth=DEPTH,
        workers=_workers(device),
        ahead=ahead,
    )
    done = [0, 0]  # positions, bytes
    pending = None
    try:
        for b in stream:
            if pending is None:
                mark("first batch read")
            work = _launch(b, models, tgt, steps, device, budget, stream)
            if pending is not None:
                _finish(pending, counts, done, total_bytes, progress)
            pending = work
        if pending is not None:
            _finish(pending, counts, done, total_bytes, progress)
        mark("last batch done")
    finally:
        stream.close()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _launch(b, models, tgt, steps, device, budget, stream):
    """Queue a batch's work on the device: its copy there, the target's top-1, each drafter's
    drafts and counts, and the counts' copy back; returns what :func:`_finish` needs."""
    import torch

    cuda = device.type == "cuda"
    layout = Layout(b.lengths, device, budget)
    aux, ids, mask = (x.to(device, non_blocking=True) for x in (b.aux, b.ids, b.mask))
    last = b.last.to(device, non_blocking=True) if b.last is not None else None
    if cuda:
        ev = torch.cuda.Event()
        ev.record()
        stream.release(b, ev)  # the staging buffer is free once the copy is done
    try:
        if tgt is not None:
            ref = tgt.top1(last, b.normed, b.files[0])
        else:  # the data's own next token stands for the target's top-1
            row = torch.arange(layout.total, device=device)
            nxt = ids[(row + 1).clamp(max=max(0, layout.total - 1))]
            ref = torch.where(layout.pos + 1 < layout.seg_len, nxt, -1)
        out = []
        for m in models:
            preds = m.unroll(aux, ids, steps, layout)
            bc = metric.batch_counts(preds, ref, ids, mask, layout)
            out.append({k: v.to("cpu", non_blocking=cuda) for k, v in bc.items()})
    except torch.cuda.OutOfMemoryError:
        raise _out_of_memory(device, layout.total) from None
    done = None
    if cuda:
        done = torch.cuda.Event()
        done.record()
    else:
        stream.release(b)
    return b.lengths, b.nbytes, out, done


def _out_of_memory(device, positions: int) -> WeightcheckError:
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return WeightcheckError(
        None,
        f"{device} ran out of memory on a batch of {positions} positions "
        f"({free / 2**30:.1f} of {total / 2**30:.1f} GiB free now): another process may hold "
        "it; retry, or use --device cpu",
    )


def _finish(work, counts, done, total_bytes, progress) -> None:
    lengths, nbytes, out, event = work
    if event is not None:
        event.synchronize()
    for c, bc in zip(counts, out):
        c.absorb(bc, lengths)
    done[0] += sum(lengths)
    done[1] += nbytes
    if progress is not None:
        total = round(done[0] * total_bytes / done[1]) if done[1] else done[0]
        progress(done[0], max(total, done[0]))
