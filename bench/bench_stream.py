"""eval's data pass without the compute: the read-ahead (weightcheck/eval/readahead.py) and the
staging readers (stream.py) over a SpecForge dump whose pages are evicted first, beside reading
every file once with eight threads (the competitor: what the disk gives). The consumer takes each
batch and gives it back at once, so the pass is bound by reading alone: eval's own bar is the run
<= 1.25x the read (issue #33), and this is the part of it that the disk decides.

    python bench/bench_stream.py [--files 300] [--positions 1000] [--hidden 1024] [--trials 3]
                                 [--workers 8]

Modes: ``read`` (the default read-ahead), ``off`` (the staging readers alone). Prints each
trial's seconds and the medians' ratios to the read.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench_eval_gpu as gpu  # noqa: E402


def data_pass(data: str, mode: str, workers: int) -> float:
    from weightcheck.eval import readahead
    from weightcheck.eval.data import open_data
    from weightcheck.eval.stream import Prefetch

    ds = open_data(data)
    chosen = list(range(len(ds.files)))
    t0 = time.perf_counter()
    ahead = readahead.ReadAhead([ds.files[i] for i in chosen], mode=mode, first=[])
    stream = Prefetch(ds, chosen, 8192, need_last=True, depth=3, workers=workers, ahead=ahead)
    try:
        for b in stream:
            stream.release(b)
    finally:
        stream.close()
        ahead.close()
    return time.perf_counter() - t0


def main() -> None:
    import click

    @click.command()
    @click.option("--files", default=300, show_default=True)
    @click.option("--positions", default=1000, show_default=True)
    @click.option("--hidden", default=1024, show_default=True)
    @click.option("--trials", default=3, show_default=True)
    @click.option("--workers", default=8, show_default=True, help="staging readers (8 on a GPU)")
    def bench(files, positions, hidden, trials, workers):
        out = os.path.join(HERE, "out", f"stream-{files}x{positions}-{hidden}")
        gpu.write_dump(out, files, positions, hidden, 32000)
        paths = gpu.bench_eval.data_files(out)
        size = sum(map(os.path.getsize, paths))
        print(f"{len(paths)} files, {size / 1e9:.2f} GB; {os.cpu_count()} cores")
        got = {"read once": [], "read": [], "off": []}
        for _ in range(trials):
            for what in got:
                gpu.evict(paths)
                if what == "read once":
                    t = gpu.read_all(paths, 8)
                else:
                    t = data_pass(out, what, workers)
                got[what].append(t)
                print(f"  {what}: {t:.2f} s ({size / t / 1e9:.2f} GB/s)", flush=True)
        base = statistics.median(got["read once"])
        for what, ts in got.items():
            m = statistics.median(ts)
            print(f"{what}: median {m:.2f} s = {m / base:.2f}x the read", flush=True)

    bench.main(standalone_mode=False)
    os._exit(0)  # as eval ends (cli._end): torch's threads are not joined at teardown


if __name__ == "__main__":
    main()
