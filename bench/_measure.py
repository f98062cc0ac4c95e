"""Shared helpers for bench/: run a command as a subprocess and measure it.

Peak RSS comes from ``/usr/bin/time -f %M`` when it exists. Two pitfalls it avoids:
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` is the maximum over *all* children waited for
so far (a small run measured after a big one reports the big one), and even the per-child
``os.wait4`` rusage has the *parent's* RSS as a floor on Linux (the child starts as a fork/vfork
of this ~35 MB Python process and exec keeps the old high-water mark). /usr/bin/time is a ~2 MB
C program, so its floor is negligible. Without it we fall back to os.wait4 and say so.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")

# run `python -m weightcheck` from this source tree, whatever is installed
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
RSS_METHOD = (
    "/usr/bin/time -f %M"
    if TIME
    else "os.wait4 ru_maxrss (floor = the bench process's own RSS, ~35 MB)"
)
_MARK = "BENCH_MAXRSS_KB"


def bench_command(repeat: int, repeat_help: str = "Timed runs per command."):
    """The click command every bench is: -h/--help, ``--repeat N`` (this default) and
    ``--config k2|k25`` (which drafter make_full_drafter writes); a bench's own options go below
    this decorator."""
    import click

    def deco(f):
        f = click.option(
            "--config", type=click.Choice(["k2", "k25"]), default="k2", show_default=True
        )(f)
        f = click.option("--repeat", type=int, default=repeat, show_default=True, help=repeat_help)(
            f
        )
        return click.command(context_settings={"help_option_names": ["-h", "--help"]})(f)

    return deco


def run_cpu(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """``subprocess.run(cmd, **kw)``: (the process, wall seconds, the child's CPU seconds: user +
    sys from ``getrusage(RUSAGE_CHILDREN)`` before and after, which the machine's load moves less
    than wall time)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p, wall, cpu


def run(cmd: list[str]) -> dict:
    """Run ``cmd``; return wall seconds, peak RSS (bytes), exit code, stdout and stderr."""
    full = [TIME, "-f", f"{_MARK} %M", *cmd] if TIME else cmd
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=out, stderr=err, env=ENV)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    rss = ru.ru_maxrss * 1024
    if TIME:
        head, _, last = stderr.rstrip().rpartition(b"\n")
        if last.startswith(_MARK.encode()):
            rss, stderr = int(last.split()[1]) * 1024, head
    return {"wall": wall, "rss": rss, "rc": p.returncode, "stdout": stdout, "stderr": stderr}


def compile_tree() -> None:
    """Byte-compile weightcheck/ before measuring it. pip compiles an installed package; a source
    tree run with PYTHONDONTWRITEBYTECODE=1 (set in this environment) would otherwise compile
    every module again in every run (~25 ms)."""
    r = subprocess.run(
        [sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "weightcheck")],
        capture_output=True,
        text=True,
    )
    if r.returncode:
        sys.exit(f"compileall failed: {r.stdout}{r.stderr}")


def repeat(cmd: list[str], n: int, ok=(0,)) -> dict:
    """One untimed warm-up run, then ``n`` timed runs: median/min wall, max peak RSS."""
    runs = [run(cmd) for _ in range(n + 1)]
    for r in runs:
        if r["rc"] not in ok:
            sys.exit(
                f"{' '.join(cmd)}: exit {r['rc']}\n{r['stderr'].decode(errors='replace')[-2000:]}"
            )
    timed = runs[1:]
    return {
        "median": statistics.median(r["wall"] for r in timed),
        "min": min(r["wall"] for r in timed),
        "rss": max(r["rss"] for r in timed),
        "last": timed[-1],
    }


def imported_modules(cmd_after_python: list[str]) -> set[str]:
    """Top-level modules a ``python -X importtime ...`` run imports (read from its stderr)."""
    r = run([sys.executable, "-X", "importtime", *cmd_after_python])
    mods = set()
    for line in r["stderr"].decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name and not name.startswith("package"):
                mods.add(name.split(".")[0])
    return mods


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def machine() -> dict:
    import safetensors

    try:
        from importlib.metadata import version

        torch_v = version("torch")
    except Exception:
        torch_v = "not installed"
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        mem = f"{kb / 2**20:.1f} GiB"
    except OSError:
        pass
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram": mem,
        "python": platform.python_version(),
        "torch": torch_v,
        "safetensors": safetensors.__version__,
        "os": platform.platform(),
    }
