"""Benchmark: `weightcheck compare A B --values --json` on two full-size Kimi-K2 drafters vs the
obvious script.

Makes (or reuses) two 2.4 GB drafters of bench/make_full_drafter.py (seeds 0 and 1: every weight
differs), then in the same run measures, each as a fresh subprocess (one untimed warm-up, then
--repeat timed runs; median wall time, peak RSS from /usr/bin/time -f %M, see bench/_measure.py):

  ours        python -m weightcheck compare A B --values --json   (exit 0 or 1 both accepted)
  torch script safetensors.torch.load_file both files, then per tensor in float32:
              max|a-b|, relative L2 ||a-b||/||a||, cosine   (what people write in a notebook)

Runs are warm-cache (both files were just written or read and fit in RAM together).
If `weightcheck compare` does not exist yet, only the script is measured and no ratio is printed.

    python bench/bench_compare_values.py [--repeat 3] [--config k2|k25]
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

SCRIPT = """
import json, sys
import torch
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
out = {}
for k in sorted(a.keys() & b.keys()):
    x, y = a[k].float().flatten(), b[k].float().flatten()
    if x.shape != y.shape:
        out[k] = "shape differs"
        continue
    d = x - y
    out[k] = {"max_abs": d.abs().max().item(),
              "rel_l2": (d.norm() / x.norm().clamp_min(1e-30)).item(),
              "cosine": torch.nn.functional.cosine_similarity(x, y, dim=0).item()}
print(json.dumps(out))
"""


def have_compare() -> bool:
    return m.run([sys.executable, "-m", "weightcheck", "compare", "--help"])["rc"] == 0


@m.bench_command(repeat=3)
def main(repeat, config):
    py = sys.executable
    m.compile_tree()  # as pip would: see _measure.compile_tree
    a = make_full_drafter.make(config=config, seed=0)
    b = make_full_drafter.make(config=config, seed=1)
    fa, fb = (os.path.join(d, "model.safetensors") for d in (a, b))

    rows = []
    if have_compare():
        rows.append(
            (
                "weightcheck compare --values --json",
                ["-m", "weightcheck", "compare", a, b, "--values", "--json"],
                (0, 1),
            )
        )
    else:
        print("weightcheck compare does not exist yet: measuring the script alone", file=sys.stderr)
    rows.append(("load_file x2 + torch float32 metrics", ["-c", SCRIPT, fa, fb], (0,)))

    results = {}
    for label, args, ok in rows:
        r = m.repeat([py, *args], repeat, ok=ok)
        r["torch"] = "torch" in m.imported_modules(args)
        json.loads(r["last"]["stdout"])  # both print one JSON document
        results[label] = r
        print(f"  {label}: median {r['median']:.2f} s, peak RSS {m.mb(r['rss'])}", file=sys.stderr)

    ours = results[rows[0][0]] if len(rows) == 2 else None
    agree = ""
    if ours:  # both computed the same numbers? (the names are canonical already in specforge)
        mine = json.loads(ours["last"]["stdout"])["values"]
        theirs = json.loads(results[rows[1][0]]["last"]["stdout"])
        worst = {
            k: max(abs(mine[t][k2] - theirs[t][k]) for t in theirs)
            for k, k2 in (("max_abs", "max_abs_diff"), ("rel_l2", "rel_l2"), ("cosine", "cosine"))
        }
        agree = (
            "Agreement with the script over all tensors (largest absolute difference): "
            + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
            + ".\n"
        )
    table = [
        [
            label,
            f"{r['median']:.2f}",
            f"{r['min']:.2f}",
            (f"{r['median'] / ours['median']:.1f}x" if ours else "n/a"),
            m.mb(r["rss"]),
            "yes" if r["torch"] else "no",
        ]
        for label, r in results.items()
    ]
    mach = m.machine()
    size = os.path.getsize(fa)
    print(f"\n## compare --values: two full-size Kimi-K2 drafters ({config})\n")
    print(
        f"Files: {fa} and {fb} — {size / 1e9:.2f} GB each, seeds 0 and 1 (every tensor differs). "
        f"{repeat} timed runs each after one warm-up; warm page cache. "
        f"Peak RSS: {m.RSS_METHOD}.\n"
    )
    print(
        tabulate(
            table,
            headers=["command", "median s", "min s", "time / ours", "peak RSS", "imports torch"],
            tablefmt="github",
        )
    )
    print(f"\n{agree}" if agree else "", end="")
    print(
        f"\nMachine: {mach['nproc']} cores ({mach['cpu']}), {mach['ram']} RAM, {mach['os']}; "
        f"Python {mach['python']}, torch {mach['torch']}, safetensors {mach['safetensors']}. "
        f"Date: {datetime.date.today().isoformat()}."
    )


if __name__ == "__main__":
    main()
