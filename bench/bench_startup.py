"""Benchmark: the CPU time of the header-level commands (inspect, check) on a full-size Kimi-K2
drafter, this tree beside an earlier one (``--before DIR``, a ``git archive`` of it) and beside the
safetensors library's own header read (``safe_open(path, "np")``: what reading names, dtypes and
shapes costs without weightcheck).

A header-level command reads ~2 KB of the file; what it costs is Python's start-up, the imports
and the rules. Wall time moves with the machine's load; the CPU time of the child (user + sys,
bench/_measure.py ``run_cpu``) moves much less, so that is what is compared. The
commands take turns (each round runs every command once, in both trees), after one untimed
round; median and min over ``--repeat`` rounds. Each tree has its own mappings cache
(``WEIGHTCHECK_CACHE_DIR``), warmed by the untimed round.

    git archive 3ac096c | tar -x -C /tmp/before
    python bench/bench_startup.py --repeat 21 --before /tmp/before
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import _measure as m  # noqa: E402
import click  # noqa: E402
import make_full_drafter  # noqa: E402
from tabulate import tabulate  # noqa: E402

SAFE_OPEN = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], "np") as f:
    print([(k, f.get_slice(k).get_shape(), f.get_slice(k).get_dtype()) for k in f.keys()])
"""


@m.bench_command(repeat=21, repeat_help="Rounds (every command once per round).")
@click.option("--before", default=None, help="A checkout of an earlier weightcheck to run beside.")
def main(repeat: int, config: str, before: str | None) -> None:
    folder = make_full_drafter.make(config=config, quiet=True)
    path = os.path.join(folder, "model.safetensors")
    m.compile_tree()
    trees = {"this tree": ROOT}
    if before:
        trees["before"] = os.path.abspath(before)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", os.path.join(before, "weightcheck")]
        )
    cache = tempfile.mkdtemp(prefix="wc-bench-startup-")
    cmds = {}
    for label, root in trees.items():
        env = dict(os.environ, PYTHONPATH=root, WEIGHTCHECK_CACHE_DIR=os.path.join(cache, label))
        for name, args in (
            ("inspect --json", ["inspect", folder, "--json"]),
            ("check --json", ["check", folder, "--json"]),
            ("check --engine sglang --json", ["check", folder, "--engine", "sglang", "--json"]),
            ("check (text)", ["check", folder]),
        ):
            # run from the tree's root: `python -m` puts the working folder first on sys.path,
            # before PYTHONPATH and before an editable install's finder of another checkout
            cmds[(name, label)] = ([sys.executable, "-m", "weightcheck", *args], env, root)
    plain = dict(os.environ)
    cmds[("safe_open(path, 'np') header read", "safetensors")] = (
        [sys.executable, "-c", SAFE_OPEN, path],
        plain,
        ROOT,
    )
    cmds[("python -c pass", "interpreter")] = ([sys.executable, "-c", "pass"], plain, ROOT)
    times: dict = {k: [] for k in cmds}
    for i in range(repeat + 1):
        for k, (argv, env, cwd) in cmds.items():
            _, _, t = m.run_cpu(
                argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if i:  # round 0 warms the caches
                times[k].append(t)
    rows = []
    for (name, label), ts in times.items():
        med = statistics.median(ts)
        row = [name, label, f"{med:.3f} s ({min(ts):.3f})"]
        if label == "this tree" and (name, "before") in times:
            row.append(f"{med / statistics.median(times[(name, 'before')]):.2f}x")
        else:
            row.append("")
        rows.append(row)
    print(
        f"CPU time (user + sys) of each fresh process, median (min) of {repeat} rounds; {m.machine()}"
    )
    print(tabulate(rows, headers=["command", "tree", "CPU", "this / before"], tablefmt="github"))


if __name__ == "__main__":
    main()
