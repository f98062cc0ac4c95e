"""torch's import with the disk busy: what eval's read-ahead (weightcheck/eval/readahead.py) does to
the run's fixed cost when torch's libraries are not in the page cache (docs/eval.md §7).

Before every trial torch's libraries (readahead.torch_libraries) and the data file are evicted
from the page cache (``POSIX_FADV_DONTNEED``: no root needed; this process never imports torch, so
it maps none of them). Then ``python -c "import torch"`` is timed as a child while, in this
process, a ``ReadAhead`` reads (eight threads, as eval does):

- ``alone``: nothing (the baseline);
- ``data``: the data file, from the start (eval's read-ahead without its libraries first);
- ``libs+data``: torch's libraries first, whole, then the data (eval's default).

Printed per trial: the import's seconds, when the read-ahead was done, and each mode's median
import as a ratio to ``alone``.

    python bench/bench_readahead.py [--gb 6] [--trials 3] [--data PATH]

The data file (``--gb`` GiB of random bytes) is written once to bench/out/readahead-data.bin
unless ``--data`` names one.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_eval_gpu import evict, resident  # noqa: E402

from weightcheck.eval import readahead  # noqa: E402

MODES = ("alone", "data", "libs+data")


def data_file(path: str, gib: float) -> str:
    want = int(gib * (1 << 30))
    if os.path.exists(path) and os.path.getsize(path) >= want:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    block = os.urandom(64 << 20)
    with open(path + ".tmp", "wb") as f:
        for _ in range(max(1, want // len(block))):
            f.write(block)
    os.replace(path + ".tmp", path)
    return path


def trial(mode: str, data: str, libs: list[str]) -> tuple[float, float, float]:
    """(the import's seconds, the read-ahead's seconds, the libraries' fraction cached before)."""
    evict(libs + [data])
    cached = resident(libs)
    t0 = time.perf_counter()
    ahead = None
    if mode != "alone":
        ahead = readahead.ReadAhead(
            [data],
            mode="read",
            window=os.path.getsize(data),
            first=libs if mode.startswith("libs") else [],
        )
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    took = time.perf_counter() - t0
    done = took
    if ahead is not None:
        while ahead.finished is None:
            time.sleep(0.01)
        done = ahead.finished - t0
        ahead.close()
    return took, done, cached


def main() -> None:
    import click

    @click.command(context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("--gb", default=6.0, show_default=True, help="the data file's size, GiB")
    @click.option("--trials", default=3, show_default=True)
    @click.option("--data", default=None, help="a data file to read ahead (else one is written)")
    def bench(gb, trials, data):
        assert "torch" not in sys.modules
        libs = readahead.torch_libraries()
        data = data or data_file(os.path.join(HERE, "out", "readahead-data.bin"), gb)
        size = sum(map(os.path.getsize, libs))
        print(f"torch's libraries: {len(libs)} files, {size / 1e9:.2f} GB; the data "
              f"{os.path.getsize(data) / 1e9:.2f} GB; {os.cpu_count()} CPUs", flush=True)  # fmt: skip
        got: dict[str, list[float]] = {}
        for i in range(trials):
            for mode in MODES:
                took, done, cached = trial(mode, data, libs)
                got.setdefault(mode, []).append(took)
                print(f"  trial {i + 1}, {mode}: import {took:.2f} s, read-ahead done at "
                      f"{done:.2f} s (libraries {100 * cached:.0f}% cached before)", flush=True)  # fmt: skip
        base = statistics.median(got["alone"])
        for mode, ts in got.items():
            med = statistics.median(ts)
            print(f"{mode}: median import {med:.2f} s = {med / base:.2f}x alone "
                  f"({', '.join(f'{t:.2f}' for t in ts)})")  # fmt: skip

    bench()


if __name__ == "__main__":
    main()
