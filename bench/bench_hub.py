"""Benchmark: Hub sources, `weightcheck inspect org/name` and `compare HUB HUB`, against the test
Hub server (tests/hubserver.py, the real huggingface_hub client over HTTP on 127.0.0.1) with a
delay added to every request (``--delay``, default 50 ms: a round trip to a distant Hub), beside
a bare huggingface_hub baseline that reads the same two things inspect needs:

  baseline     hf_hub_download(repo, "config.json") + get_safetensors_metadata(repo)
  inspect      python -m weightcheck inspect org/a --json
  compare      python -m weightcheck compare org/a org/b --json
  python       python -c pass                                  (interpreter floor)

Each command is a fresh subprocess with a fresh, empty HF_HOME (a cold cache: every run asks
the server everything); one untimed warm-up, then --repeat rounds of timed runs, each round
running every command once (so that changing load weighs on all alike); median wall time (min
too), the child's CPU time, the number of requests the server saw and the time they spanned
there (first arrival to last answer: what concurrency shortens), with the wall-time ratio to
the baseline. The repos are
two scaled-down Kimi-K2 drafters (bench/make_full_drafter.py make_small: the full-size config's
tensors at hidden 256, draft vocabulary 2,000, so d2t lies beyond the first 4 KiB read as in the
full-size one; seeds 1 and 2): small files, so the time is requests and imports, which is what
this measures.

    python bench/bench_hub.py [--repeat 5] [--delay 0.05] [--before OLD_CHECKOUT]
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import _measure as m  # noqa: E402
import click  # noqa: E402
import make_full_drafter  # noqa: E402
import synth  # noqa: E402
from hubserver import HubServer, hf_env  # noqa: E402
from tabulate import tabulate  # noqa: E402

BASELINE = """
from huggingface_hub import get_safetensors_metadata, hf_hub_download
hf_hub_download("org/a", "config.json")
get_safetensors_metadata("org/a")
"""


def _drafters() -> dict:
    """{repo id: folder}: make_small's drafter (seed 1) and the same config with seed 2."""
    a = make_full_drafter.make_small()
    b = a + "-seed2"
    if not os.path.isfile(os.path.join(b, "model.safetensors")):
        with open(os.path.join(a, "config.json")) as f:
            cfg = json.load(f)
        synth.write_drafter(b, cfg, seed=2)
    return {"org/a": a, "org/b": b}


def _files(d: str) -> dict:
    return {f: pathlib.Path(d, f) for f in os.listdir(d) if os.path.isfile(os.path.join(d, f))}


def _run(hub: HubServer, cmd: list[str], tree: str = ROOT) -> dict:
    """One cold run: wall seconds, CPU seconds of the child, the requests the server saw, and
    the time they spanned on the server (first arrival to last answer)."""
    with tempfile.TemporaryDirectory() as home:
        # huggingface_hub >= 2 fetches an agent-harness registry once a day into HF_HOME: an empty
        # one there, so that request (not one a user makes per command) is not counted
        with open(os.path.join(home, ".agent_harnesses.json"), "w") as f:
            json.dump({"standardEnvVars": [], "harnesses": {}}, f)
        env = hf_env(hub, home, PYTHONPATH=tree)
        hub.reset_counters()
        p, wall, cpu = m.run_cpu(cmd, env=env, capture_output=True, cwd=tree)
        if p.returncode not in (0, 1):
            sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr.decode()[-2000:]}")
        reqs = list(hub.requests)
        wire = max(r.answered for r in reqs) - min(r.arrived for r in reqs) if reqs else 0.0
        return {"wall": wall, "cpu": cpu, "requests": len(reqs), "wire": wire}


def _measure(hub: HubServer, cmds: dict, repeat: int) -> dict:
    """{label: medians} of ``cmds`` ({label: (command, tree)}): one untimed warm-up of each
    (the page cache, byte-compiled modules), then ``repeat`` rounds, each running every command
    once, so that a machine whose load changes weighs on all of them alike."""
    for cmd, tree in cmds.values():
        _run(hub, cmd, tree)
    runs: dict = {label: [] for label in cmds}
    for _ in range(repeat):
        for label, (cmd, tree) in cmds.items():
            runs[label].append(_run(hub, cmd, tree))
    out = {}
    for label, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "wire")}
        out[label] = {
            **med,
            "min": min(r["wall"] for r in rs),
            "requests": sorted({r["requests"] for r in rs}),
        }
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--repeat", type=int, default=5, show_default=True, help="Timed runs per command.")
@click.option(
    "--delay", type=float, default=0.05, show_default=True, help="Seconds added to every request."
)
@click.option(
    "--before",
    type=click.Path(exists=True, file_okay=False),
    help="Another checkout of weightcheck (e.g. `git archive` of an older commit): its inspect "
    "and compare measured in the same run, on the same server.",
)
def main(repeat, delay, before):
    m.compile_tree()
    py = sys.executable
    wc = [py, "-m", "weightcheck"]
    cmds = {
        "baseline: hf_hub_download(config.json) + get_safetensors_metadata": [py, "-c", BASELINE],
        "weightcheck inspect org/a --json": wc + ["inspect", "org/a", "--json"],
        "weightcheck compare org/a org/b --json": wc + ["compare", "org/a", "org/b", "--json"],
        "python -c pass": [py, "-c", "pass"],
    }
    runs = {label: (cmd, ROOT) for label, cmd in cmds.items()}
    if before:
        subprocess.run([py, "-m", "compileall", "-q", os.path.join(before, "weightcheck")])
        name = os.path.basename(before.rstrip("/"))
        for label, cmd in list(cmds.items())[1:3]:
            runs[f"{label} (before: {name})"] = (cmd, os.path.abspath(before))
    with HubServer(delay=delay) as hub:
        for repo, folder in _drafters().items():
            hub.add_repo(repo, _files(folder))
        res = _measure(hub, runs, repeat)
    base = res[next(iter(cmds))]["wall"]
    rows = [
        [
            label,
            "/".join(map(str, r["requests"])),
            f"{r['wire']:.3f} s",
            f"{r['cpu']:.2f} s",
            f"{r['wall']:.3f} s ({r['min']:.3f})",
            f"{r['wall'] / base:.2f}x",
        ]
        for label, r in res.items()
    ]
    print(
        f"Hub sources, {delay * 1000:.0f} ms added to every request, cold cache, "
        f"median of {repeat} (min) — {datetime.date.today()}"
    )
    head = ["command", "requests", "on the wire", "CPU", "wall", "vs baseline"]
    print(tabulate(rows, head, tablefmt="github"))


if __name__ == "__main__":
    main()
