"""The console examples of README.md and docs/: found, run, compared, and re-synced.

A console example is a fenced block marked ``console`` whose first line starts with
``$ weightcheck``. Each ``$ `` line is a command (split as a POSIX shell would, no shell features:
no pipes, variables or globs); the lines after it, up to the next ``$ `` line or the fence, are
what it prints (stdout and stderr as a terminal shows them, in order). A command's exit status is
shown, when the block wants to show it, as a last output line ``[exit N]``; a block that shows none
is compared without it. The blocks of one file run in order in one working folder holding
``examples/out`` (examples/make_examples.py's output, made afresh), so a later block can read what
an earlier one wrote.

A block that cannot run here (a Hub id, a GPU, a real checkpoint) is marked in the source by an
HTML comment on the line before its fence, saying why::

    <!-- not-run: needs the Hub -->

The width is fixed: every command runs with ``COLUMNS=80`` (WIDTH), so that a documented output
is what an 80-column terminal shows and reads on GitHub and on the docs site without scrolling
sideways, the same on every machine. The working folder's path is as long as the placeholder
written for it (``/tmp/`` and 8 characters, 13 like ``~/weightcheck``, where /tmp exists), so
that text wrapped around a path wraps the same once the path is replaced.

Normalisation, the only one, applied to both sides before comparing:

* paths: the working folder's absolute path is written ``~/weightcheck`` (a clone in your home);
* padding: runs of spaces are one space, and runs of a table rule's dashes are one dash (a path of
  another length pads a table's columns differently);
* timings: a number followed by ``s`` or ``ms`` after ``in `` (``in 0.12 s``) is ``in <t>``.

    python tests/docs_examples.py            # run every block, list the ones that differ (exit 1)
    python tests/docs_examples.py --update   # rewrite every block's output from a real run

Run from the repository root. Nothing touches the network (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLACEHOLDER = "~/weightcheck"
WIDTH = 80  # the documented outputs' width (COLUMNS)
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(\S.*?)\s*-->\s*$")
EXIT = re.compile(r"^\[exit (\d+)\]$")
TIMING = re.compile(r"\bin \d+(?:\.\d+)? ?m?s\b")


@dataclass
class Command:
    argv: list[str]
    line: str  # the "$ ..." line as written
    output: list[str]  # the lines shown after it, [exit N] included when shown


@dataclass
class Block:
    path: pathlib.Path
    start: int  # 0-based index of the first line inside the fence
    end: int  # index of the closing fence
    commands: list[Command] = field(default_factory=list)
    not_run: str | None = None

    @property
    def where(self) -> str:
        p = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{p}:{self.start}"


def documents() -> list[pathlib.Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: pathlib.Path) -> list[Block]:
    """The console blocks of ``path`` whose first line is a ``$ `` command."""
    lines = path.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        body = lines[i + 1 : j]
        if body and body[0].startswith("$ "):
            b = Block(path, i + 1, j)
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = NOT_RUN.match(lines[k].strip()) if k >= 0 else None
            b.not_run = m.group(1) if m else None
            for ln in body:
                if ln.startswith("$ "):
                    b.commands.append(Command(shlex.split(ln[2:]), ln, []))
                else:
                    b.commands[-1].output.append(ln)
            out.append(b)
        i = j + 1
    return out


def problems(b: Block) -> list[str]:
    """What makes a block that is to run unrunnable: a command other than weightcheck."""
    if b.not_run:
        return []
    return [
        f"{b.where}: `{c.line}` is not a weightcheck command: mark the block <!-- not-run: why -->"
        for c in b.commands
        if not c.argv or c.argv[0] != "weightcheck"
    ]


def workspace(examples: pathlib.Path | None = None) -> pathlib.Path:
    """A fresh working folder holding examples/out (copied from ``examples``, else made)."""
    ws = _folder()
    dest = ws / "examples" / "out"
    if examples is not None:
        shutil.copytree(examples, dest)
    else:
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "make_examples", ROOT / "examples" / "make_examples.py"
        )
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            mod.main(str(dest))
    return ws


def _folder() -> pathlib.Path:
    """A fresh working folder whose path is as long as PLACEHOLDER where that can be had
    (``/tmp/`` and mkdtemp's 8 characters): wrapped text then wraps alike once it is replaced."""
    tmp = pathlib.Path("/tmp")
    if tmp.is_dir() and len(str(tmp.resolve())) + 9 == len(PLACEHOLDER):
        return pathlib.Path(tempfile.mkdtemp(prefix="", dir=tmp)).resolve()
    return pathlib.Path(tempfile.mkdtemp(prefix="weightcheck-docs-"))


ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_ENDPOINT": "http://127.0.0.1:9",
    "NO_COLOR": "1",
    "FORCE_COLOR": None,
    "COLUMNS": str(WIDTH),
}


def run(argv: list[str], ws: pathlib.Path) -> tuple[list[str], int]:
    """One command in-process (click's runner) in ``ws``: its output lines and exit status."""
    from click.testing import CliRunner

    from weightcheck.cli import main

    old = os.getcwd()
    os.chdir(ws)
    try:
        r = CliRunner().invoke(main, argv[1:], prog_name="weightcheck", env=ENV)
    finally:
        os.chdir(old)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    lines = _placeholder(r.output.split("\n"), ws)
    if lines and lines[-1] == "":
        lines.pop()
    return lines, r.exit_code


RULE = re.compile(r"^-+(?:  -+)*$")


def _placeholder(lines: list[str], ws: pathlib.Path) -> list[str]:
    """``lines`` with the working folder written as PLACEHOLDER. A table (a header, a rule of
    dashes, rows up to a blank line) holding it is laid out again for the shorter cells, column
    by column as the rule marks them, so it reads as the program prints it."""
    paths = sorted({str(ws.resolve()), str(ws)}, key=len, reverse=True)

    def sub(text: str) -> str:
        for p in paths:
            text = text.replace(p, PLACEHOLDER)
        return text

    out, i = [], 0
    while i < len(lines):
        if i + 1 < len(lines) and RULE.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and lines[j].strip():
                j += 1
            table = lines[i:j]
            if any(p in ln for p in paths for ln in table):
                spans = [m.start() for m in re.finditer(r"-+", lines[i + 1])]
                rows = [
                    [
                        sub(ln[a : spans[k + 1] if k + 1 < len(spans) else None].rstrip())
                        for k, a in enumerate(spans)
                    ]
                    for ln in table
                ]
                # a column is as wide as its longest cell or its header (output/fit.py)
                widths = [
                    max([len(rows[0][k])] + [len(r[k]) for r in rows[2:]])
                    for k in range(len(spans))
                ]
                rows[1] = ["-" * w for w in widths]
                table = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
            out += table
            i = j
        else:
            out.append(sub(lines[i]))
            i += 1
    return out


def normalize(lines: list[str]) -> list[str]:
    out = []
    for ln in lines:
        ln = TIMING.sub("in <t>", ln.rstrip())
        ln = re.sub(r"-{2,}", "-", ln)
        out.append(re.sub(r" {2,}", " ", ln))
    return out


def shown(c: Command, got: list[str], status: int) -> list[str]:
    """The real run as the block shows it: with ``[exit N]`` when the block shows one."""
    if c.output and EXIT.match(c.output[-1].strip()):
        return [*got, f"[exit {status}]"]
    return got


def run_block(b: Block, ws: pathlib.Path) -> list[tuple[Command, list[str]]]:
    """Each command of ``b`` with what it really prints, as the block would show it."""
    out = []
    for c in b.commands:
        got, status = run(c.argv, ws)
        out.append((c, shown(c, got, status)))
    return out


def differences(path: pathlib.Path, ws: pathlib.Path) -> list[str]:
    """Every block of ``path`` run in ``ws``: a unified diff per command that differs, and every
    unrunnable block."""
    import difflib

    report = []
    for b in blocks(path):
        report += problems(b)
        if b.not_run or problems(b):
            continue
        for c, got in run_block(b, ws):
            if normalize(c.output) != normalize(got):
                diff = difflib.unified_diff(c.output, got, "documented", "real run", lineterm="")
                report.append(f"{b.where}: {c.line}\n" + "\n".join(diff))
    return report


def update(path: pathlib.Path, ws: pathlib.Path) -> bool:
    """Rewrite the output of every runnable block of ``path`` from a real run; True if changed."""
    lines = path.read_text().split("\n")
    new = list(lines)
    bodies = []
    for b in blocks(path):  # run in order: a later block may read what an earlier one wrote
        if not (b.not_run or problems(b)):
            bodies.append((b, [ln for c, got in run_block(b, ws) for ln in (c.line, *got)]))
    for b, body in reversed(bodies):  # replaced from the end: earlier indices stay valid
        new[b.start : b.end] = body
    if new != lines:
        path.write_text("\n".join(new))
    return new != lines


def _ordered_run(fn, paths):
    """``fn(path, ws)`` for each path in a workspace of its own (blocks of a file share one)."""
    results = {}
    examples = workspace()
    try:
        for p in paths:
            ws = workspace(examples / "examples" / "out")
            try:
                results[p] = fn(p, ws)
            finally:
                shutil.rmtree(ws, ignore_errors=True)
    finally:
        shutil.rmtree(examples, ignore_errors=True)
    return results


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))
    os.environ["WEIGHTCHECK_CACHE_DIR"] = ""
    paths = [p for p in documents() if blocks(p)]
    if "--update" in argv:
        for p, changed in _ordered_run(update, paths).items():
            print(f"{'updated' if changed else 'unchanged'}: {p.relative_to(ROOT)}")
        return 0
    bad = [d for ds in _ordered_run(differences, paths).values() for d in ds]
    print("\n\n".join(bad) if bad else f"every console example matches ({len(paths)} files)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
