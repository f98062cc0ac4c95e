"""Benchmark: `weightcheck inspect DIR --json` on a full-size Kimi-K2 drafter vs what people do.

Makes (or reuses) the 2.4 GB drafter of bench/make_full_drafter.py, then in the same run measures,
each as a fresh subprocess (one untimed warm-up, then --repeat timed runs; median wall time, peak
RSS from /usr/bin/time -f %M, see bench/_measure.py):

  ours         python -m weightcheck inspect DIR --json
  load_file    safetensors.torch.load_file(path), print name/shape/dtype   (the notebook way)
  safe_open    safetensors.safe_open(path, "pt"), get_slice(k) shape/dtype (the library's lazy way)
  safe_open np the same with framework "np" (no torch import)               (reference)
  python       python -c pass                                                (interpreter floor)

and whether each imported torch (a separate `python -X importtime` run). Then inspect on a
scaled-down drafter (a few MB) beside the full one: peak RSS should not grow with file size.

All runs are warm-cache: the file was just written or read and fits in RAM; nothing drops the
page cache. inspect reads only the header (~2 KB) so cold cache changes little for it; load_file
would be slower cold (it reads all 2.4 GB).

    python bench/bench_inspect.py [--repeat 5] [--config k2|k25]
"""

from __future__ import annotations

import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import _measure as m  # noqa: E402
import make_full_drafter  # noqa: E402
from tabulate import tabulate  # noqa: E402

LOAD_FILE = """
import sys
from safetensors.torch import load_file
sd = load_file(sys.argv[1])
for k, v in sd.items():
    print(k, tuple(v.shape), v.dtype)
"""

SAFE_OPEN = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], sys.argv[2]) as f:
    for k in f.keys():
        s = f.get_slice(k)
        print(k, s.get_shape(), s.get_dtype())
"""


@m.bench_command(repeat=5)
def main(repeat, config):
    py = sys.executable
    m.compile_tree()  # as pip would: see _measure.compile_tree
    st, size, small, small_size = make_full_drafter.full_and_small(config)
    full = os.path.dirname(st)

    rows = [  # label, argv after python, is it ours
        ("weightcheck inspect --json", ["-m", "weightcheck", "inspect", full, "--json"], True),
        ("safetensors.torch.load_file + print", ["-c", LOAD_FILE, st], False),
        ('safe_open(path, "pt") + get_slice', ["-c", SAFE_OPEN, st, "pt"], False),
        ('safe_open(path, "np") + get_slice', ["-c", SAFE_OPEN, st, "np"], False),
        ("python -c pass (floor)", ["-c", "pass"], False),
    ]
    results = {}
    for label, args, _ in rows:
        r = m.repeat([py, *args], repeat)
        r["torch"] = "torch" in m.imported_modules(args)
        results[label] = r
        print(f"  {label}: median {r['median']:.3f} s, peak RSS {m.mb(r['rss'])}", file=sys.stderr)

    # sanity: ours saw the whole drafter, the competitors listed every tensor
    ours = results[rows[0][0]]
    report = json.loads(ours["last"]["stdout"])
    n_tensors = report["totals"]["tensors"]
    for label, _, is_ours in rows[1:4]:
        listed = results[label]["last"]["stdout"].decode().strip().splitlines()
        assert len(listed) == n_tensors, (label, len(listed), n_tensors)

    base = ours["median"]
    table = [
        [
            label,
            f"{r['median']:.3f}",
            f"{r['min']:.3f}",
            "1.0" if is_ours else f"{r['median'] / base:.1f}x",
            m.mb(r["rss"]),
            "yes" if r["torch"] else "no",
        ]
        for (label, _, is_ours), r in ((row, results[row[0]]) for row in rows)
    ]

    flat = m.repeat([py, "-m", "weightcheck", "inspect", small, "--json"], repeat)
    mach = m.machine()
    print(f"\n## inspect: full-size Kimi-K2 drafter ({config})\n")
    print(
        f"File: {st} — {size / 1e9:.2f} GB, {n_tensors} tensors, "
        f"{report['totals']['parameters'] / 1e9:.2f} B parameters, dialect "
        f"{report['dialect']['name']}. {repeat} timed runs each after one warm-up; "
        "warm page cache (the file was just written/read; nothing drops the cache). "
        f"Peak RSS: {m.RSS_METHOD}.\n"
    )
    print(
        tabulate(
            table,
            headers=["command", "median s", "min s", "time / ours", "peak RSS", "imports torch"],
            tablefmt="github",
        )
    )
    print("\nMemory flat in file size (weightcheck inspect --json, peak RSS):\n")
    print(
        tabulate(
            [
                [
                    "scaled-down drafter",
                    f"{small_size / 1e6:.1f} MB",
                    m.mb(flat["rss"]),
                    f"{flat['median']:.3f}",
                ],
                [
                    "full-size drafter",
                    f"{size / 1e9:.2f} GB",
                    m.mb(ours["rss"]),
                    f"{ours['median']:.3f}",
                ],
            ],
            headers=["input", "file size", "peak RSS", "median s"],
            tablefmt="github",
        )
    )
    print(
        f"\nMachine: {mach['nproc']} cores ({mach['cpu']}), {mach['ram']} RAM, {mach['os']}; "
        f"Python {mach['python']}, torch {mach['torch']}, safetensors {mach['safetensors']}. "
        f"Date: {datetime.date.today().isoformat()}."
    )


if __name__ == "__main__":
    main()
