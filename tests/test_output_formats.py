"""Issue #14, items 3 and 4: one ``--format`` (text, json, markdown, concise, github), text that
fits the terminal and is coloured on a terminal only (NO_COLOR, FORCE_COLOR), valid GitHub tables,
and progress drawn on a terminal only — never a ``\\r`` in a pipe.

A real terminal is a pseudo-terminal here (``pty``): the program runs in a subprocess whose stdout
(or stderr) is the terminal, with the window size set on it.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest
from conftest import PRODUCERS, ROOT, run_cli

from weightcheck import progress, terminal
from weightcheck.output import fit
from weightcheck.output import lines as out_lines
from weightcheck.output import text as out_text

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SPEC_TRAIN = PRODUCERS / "speculators-train"  # 3 errors, a warning and an info with sglang


def run_tty(*args, cols=80, env=None, tty="stdout"):
    """Run ``python -m weightcheck ARGS`` with ``tty`` (stdout or stderr) on a pseudo-terminal of
    ``cols`` columns; returns (exit code, the terminal's text, the other stream's text)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    e = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM")
    }
    e.update({"TERM": "xterm", **(env or {})})
    other = subprocess.PIPE
    p = subprocess.Popen(
        [sys.executable, "-m", "weightcheck", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=slave if tty == "stdout" else other,
        stderr=slave if tty == "stderr" else other,
        env=e,
        cwd=str(ROOT),
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the program closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    rest = (p.stderr if tty == "stdout" else p.stdout).read().decode()
    p.wait(timeout=120)
    os.close(master)
    return p.returncode, b"".join(chunks).decode().replace("\r\n", "\n"), rest


def _long_config_drafter(make_drafter, tiny_cfg):
    """A drafter whose rope_scaling value alone is ~180 characters (the report's ~200 columns)."""
    cfg = dict(
        tiny_cfg,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "type": "yarn",
        },
        num_hidden_layers=3,
    )
    return make_drafter("long", cfg)


# =============================================================================================
# text fits the terminal; a pipe gets whole lines
@pytest.mark.parametrize("cols", [80, 120])
def test_text_fits_the_terminal(make_drafter, tiny_cfg, cols):
    d = _long_config_drafter(make_drafter, tiny_cfg)
    for args in (
        ["inspect", d],
        ["check", SPEC_TRAIN, "--engine", "sglang"],
        ["compare", d, SPEC_TRAIN],
    ):
        code, text, _ = run_tty(*args, cols=cols)
        assert code in (0, 1), text
        assert_fits(text, cols)


def assert_fits(drawn: str, cols: int) -> None:
    """Every line fits ``cols``, but in a table (a block between blank lines) holding a word too
    long for its cell (a path, a tensor name, a JSON key): never split, it makes the table
    overflow."""
    for block in ANSI.sub("", drawn).split("\n\n"):
        lines = block.splitlines()
        if any(len(line) > cols for line in lines):
            assert max(len(w) for line in lines for w in line.split()) >= 25, (cols, block)


def test_columns_overrides_the_terminal_width(make_drafter, tiny_cfg):
    d = _long_config_drafter(make_drafter, tiny_cfg)
    _, text, _ = run_tty("inspect", d, cols=200, env={"COLUMNS": "90"})
    assert_fits(text, 90)
    assert any(str(d) in line for line in ANSI.sub("", text).splitlines())  # the path, whole


def test_a_pipe_is_100_columns_or_columns(make_drafter, tiny_cfg):
    """In a pipe (a CI log, ``| less``) text is drawn at COLUMNS when set, else at 100 columns:
    the 200-column rope_scaling row wraps between its JSON items, never inside one."""
    d = _long_config_drafter(make_drafter, tiny_cfg)
    for env, cols in (({}, 100), ({"COLUMNS": "60"}, 60)):
        r = run_cli("inspect", d, env=env)
        assert_fits(r.stdout, cols)
        assert '"mscale_all_dim": 1.0' in " ".join(r.stdout.split()), r.stdout


def test_wrapped_cells_never_split_a_word():
    """Cells wrap between atoms only: a tensor name, or a fix command written out in a sentence,
    longer than its cell overflows it whole (copy-paste still runs)."""
    name = "midlayer.self_attn.q_proj.weight"
    fix = "weightcheck convert SRC OUT --to sglang --lm-head-from=org/some-target-model"
    rows = [("WC101", "error", f"{name}: " + "word " * 30 + f"(fix: {fix})")]
    drawn = out_text.table(["code", "severity", "message"], rows, 60, False, prose=(2,))
    lines = drawn.splitlines()
    assert any(f"{fix})" in line for line in lines), drawn  # the command on one line, whole
    assert any(name in line for line in lines)
    assert all(len(line) <= 60 for line in lines if fix not in line)  # the rest fits
    assert out_text.wrap_cell(name, 20) == name  # longer than its cell: whole, not split
    assert out_text.wrap_cell("a b c " + name, 10).splitlines() == ["a b c", name]


def test_atoms_are_words_backquoted_spans_and_commands():
    said = (
        "run `weightcheck convert A OUT --to sglang` first, or weightcheck convert A OUT --to "
        "ENGINE --vocab-from B re-indexes A's head; see weightcheck rule WC305."
    )
    got = fit.atoms(said)
    assert "`weightcheck convert A OUT --to sglang`" in got
    assert "weightcheck convert A OUT --to ENGINE --vocab-from B" in got
    assert "re-indexes" in got and "weightcheck rule WC305." in got
    # a short bracketed list is one value; a long one breaks between its items
    assert fit.atoms("ids [2, 30, 58] and shape [128, 384].") == [
        "ids",
        "[2, 30, 58]",
        "and",
        "shape",
        "[128, 384].",
    ]
    assert len(fit.atoms("[" + ", ".join(map(str, range(40))) + "]")) == 40
    for width in range(20, 90, 7):
        lines = fit.wrap(said, width)
        assert " ".join(lines).split() == said.split()  # nothing lost or added
        for a in got:  # every atom on one line
            assert any(a in line for line in lines), (width, a)
        assert all(len(x) <= width or x.strip() in got for x in lines)


def test_a_long_fix_command_is_broken_as_a_shell_reads_it():
    fix = (
        "weightcheck convert SRC OUT --to sglang --vocab-from examples/out/kimi-k25-drafter "
        "--lm-head-from TARGET --target TARGET"
    )
    lines = fit.wrap_command(fix, 60, "    fix: ", "           ")
    assert len(lines) > 1 and all(len(x) <= 60 for x in lines)
    assert all(x.endswith(" \\") for x in lines[:-1])
    assert " ".join(x.strip().removesuffix(" \\") for x in lines) == "fix: " + fix
    assert "--to sglang" in lines[0]  # an option keeps its value
    assert fit.wrap_command(fix, None, "", "") == [fix]
    # an option whose value cannot follow it in the width (a long checkout path): the value on a
    # line of its own, the same argument to a shell; only a path wider than the line overflows
    path = "/home/runner/work/weightcheck/weightcheck/tests/fixtures/producers/modelopt"
    long_fix = f"weightcheck convert SRC OUT --to sglang --vocab-from {path} --target TARGET"
    lines = fit.wrap_command(long_fix, 90, "    fix: ", "           ")
    assert all(len(x) <= 90 for x in lines), lines
    assert any(x.strip() == f"{path} \\" for x in lines), lines
    assert " ".join(x.strip().removesuffix(" \\") for x in lines) == "fix: " + long_fix


@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_every_table_layout_fits(width):
    """A table fits in columns, or with its first column above each row, or stacked: every line
    fits (at 60 columns and more, where each of these names fits a line)."""
    long = "model.layers.0.self_attn.qkv_proj.weight[q]"
    rows = [
        (f"midlayer.self_attn.q_proj.weight.{i}", long, "loaded", "why " * (i + 1))
        for i in range(4)
    ]
    lines = fit.draw_table(["tensor", "parameter", "fate", "why"], rows, width, lambda t, s: t)
    assert all(len(x) <= width for x in lines), (width, lines)
    text = " ".join(lines)
    assert all(r[0] in text and long in text for r in rows)


@pytest.mark.parametrize("cols", [60, 80])
def test_tables_fit_the_terminal(cols):
    """A table whose longest words fit is drawn within the width: its prose columns wrap first,
    then the others, each down to its longest word (60 columns came out 72-79 wide)."""
    rows = [
        ("WC%03d" % i, "warning", "subject_%d" % i, "a message of several words " * 4)
        for i in range(5)
    ]
    drawn = out_text.table(
        ["code", "severity", "subject", "message"], rows, cols, False, prose=(3, 2)
    )
    assert max(map(len, drawn.splitlines())) <= cols
    assert drawn.count("WC00") == 5 and "subject_4" in drawn


def test_commands_fit_60_columns_but_for_words_longer_than_a_cell():
    code, drawn, _ = run_tty("check", SPEC_TRAIN, "--engine", "sglang", cols=60)
    assert code == 1
    assert_fits(drawn, 60)


def test_a_terminal_of_no_size_is_80_columns():
    """A pty that reports 0x0 (some CI runners): 80 columns, not the 40 of a narrow terminal."""
    code, drawn, _ = run_tty("check", SPEC_TRAIN, "--engine", "sglang", cols=0)
    # a line holding an atom no line can hold after its lead (the checkout's long path) overflows
    # whole, as it must: those are left out
    lines = [
        x for x in ANSI.sub("", drawn).splitlines() if max(map(len, fit.atoms(x)), default=0) < 56
    ]
    assert code == 1 and 60 < max(len(x) for x in lines) <= 80


def test_the_width_rule(monkeypatch):
    """COLUMNS first (a positive number), else the terminal's, else 100 in a pipe; at least 40."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal.terminal_width(io.StringIO()) == terminal.PIPE_WIDTH == 100
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal.terminal_width(io.StringIO()) == 72
    monkeypatch.setenv("COLUMNS", "12")
    assert terminal.terminal_width(io.StringIO()) == terminal.MIN_WIDTH
    monkeypatch.setenv("COLUMNS", "0")  # no number: the rule goes on
    assert terminal.terminal_width(io.StringIO()) == 100


# =============================================================================================
# colour: a terminal only, NO_COLOR, FORCE_COLOR
def test_colour_on_a_terminal_and_not_with_no_color():
    code, text, _ = run_tty("check", SPEC_TRAIN, "--engine", "sglang")
    assert code == 1 and ANSI.search(text), text
    code, text, _ = run_tty("check", SPEC_TRAIN, "--engine", "sglang", env={"NO_COLOR": "1"})
    assert code == 1 and not ANSI.search(text)
    _, text, _ = run_tty(
        "check", SPEC_TRAIN, "--engine", "sglang", env={"NO_COLOR": "1", "FORCE_COLOR": "1"}
    )
    assert not ANSI.search(text)  # NO_COLOR wins
    _, text, _ = run_tty("check", SPEC_TRAIN, "--engine", "sglang", "--json")
    assert not ANSI.search(text) and json.loads(text)["ok"] is False


def test_no_colour_in_a_pipe_unless_forced():
    r = run_cli("check", SPEC_TRAIN, "--engine", "sglang")
    assert r.exit_code == 1 and not ANSI.search(r.stdout)
    forced = run_cli("check", SPEC_TRAIN, "--engine", "sglang", env={"FORCE_COLOR": "1"})
    assert "\x1b[1;31merror\x1b[0m" in forced.stdout
    for fmt in ("json", "markdown", "github"):
        r = run_cli(
            "check", SPEC_TRAIN, "--engine", "sglang", "--format", fmt, env={"FORCE_COLOR": "1"}
        )
        assert not ANSI.search(r.stdout), fmt


def test_use_color_rules(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    for k in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(k, raising=False)
    assert terminal.use_color(Tty()) and not terminal.use_color(io.StringIO())
    monkeypatch.setenv("FORCE_COLOR", "0")
    assert not terminal.use_color(io.StringIO())
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert terminal.use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not terminal.use_color(Tty())


# =============================================================================================
# markdown: valid GitHub tables
def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line)
    assert parts[0].strip() == "" and parts[-1].strip() == "", line
    return parts[1:-1]


def _tables(md: str):
    """Each table of a Markdown text as its rows of cells (header first)."""
    tables, cur = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            cur.append(_cells(line))
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return tables


@pytest.mark.parametrize(
    "args",
    [
        ["check", SPEC_TRAIN, "--engine", "sglang", "--explain"],
        ["check", SPEC_TRAIN],
        ["inspect", SPEC_TRAIN],
        ["compare", SPEC_TRAIN, PRODUCERS / "modelopt"],
        ["convert", SPEC_TRAIN, "/nonexistent/out", "--to", "vllm", "--dry-run"],
        ["rule", "WC305"],
    ],
)
def test_markdown_tables_are_valid(args, make_drafter, tiny_cfg):
    r = run_cli(*args, "--format", "markdown")
    assert r.exit_code in (0, 1), r
    for t in _tables(r.stdout):
        assert len(t) >= 2 and all(set(c.strip()) <= {"-"} for c in t[1]), t[:2]
        assert all(len(row) == len(t[0]) for row in t), t


def test_markdown_draws_the_header_fields_as_a_table():
    md = run_cli("check", SPEC_TRAIN, "--format", "markdown").stdout.splitlines()
    assert any(line.startswith("| source ") for line in md)
    assert any(line.startswith("| sglang 0.5.23 |") for line in md)


def test_markdown_cells_escape_pipes_and_line_breaks():
    md = out_text.md_table(["a", "b"], [["x | y", "one\ntwo"], ["only one"]])
    rows = [_cells(line) for line in md.splitlines()]
    assert all(len(r) == 2 for r in rows)
    assert "x \\| y" in md and "one<br>two" in md


# =============================================================================================
# concise and github
def test_concise_is_one_line_per_finding():
    r = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--format", "concise")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    j = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--json").json
    assert len(lines) == len(j["findings"]) + 1
    for line, f in zip(lines, j["findings"]):
        assert line.startswith(f"{SPEC_TRAIN}: {f['code']} {f['message']}")  # + (explains ...)
    # no info: SGLang stops at its config step, nothing is replaced by the target's (no WC711)
    assert lines[-1] == (
        f"Found 2 error(s), 0 warning(s), 0 info in {SPEC_TRAIN} — {j['conclusion']}"
    )
    clean = run_cli(
        "check", PRODUCERS / "specforge-sglang", "--engine", "sglang", "--format", "concise"
    )
    assert clean.exit_code == 0 and clean.stdout.splitlines()[-1].startswith("All checks passed")


def test_github_workflow_commands_annotate_each_finding():
    r = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--format", "github")
    assert r.exit_code == 1
    cmds = [line for line in r.stdout.splitlines() if line.startswith("::")]
    j = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--json").json
    assert len(cmds) == len(j["findings"])
    level = {"error": "error", "warning": "warning", "info": "notice"}
    for c, f in zip(cmds, j["findings"]):
        m = re.fullmatch(r"::(\w+) file=([^,]+),title=(WC\d{3}) ([a-z0-9-]+)::(.*)", c)
        assert m, c
        assert m.group(1) == level[f["severity"]] and m.group(3) == f["code"]
        assert m.group(2) == os.path.relpath(SPEC_TRAIN / "config.json", ROOT)
        assert "\n" not in m.group(5) and str(SPEC_TRAIN) in m.group(5)


def test_github_escapes_what_would_end_a_command():
    line = out_lines.gh_command("warning", "WC1: a,b", "50% done\nnext line")
    assert line == "::warning title=WC1%3A a%2Cb::50%25 done%0Anext line"


def test_compare_concise_and_github(make_drafter, tiny_cfg):
    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", tiny_cfg, seed=1, skip=("lm_head.weight", "norm.weight"))
    r = run_cli("compare", a, b, "--format", "concise")
    assert r.exit_code == 1
    assert r.stdout.splitlines()[0] == (
        f"{a} vs {b}: error: {{lm_head.weight, norm.weight}} missing in B (its config requires it)"
    )
    assert r.stdout.splitlines()[-1] == f"{a} vs {b}: verdict: incompatible"
    g = run_cli("compare", a, b, "--format", "github").stdout.splitlines()
    assert g[0].startswith("::error title=weightcheck compare%3A incompatible::")


# =============================================================================================
# progress: a terminal only
class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_on_a_terminal_only():
    tty = _Tty()
    p = progress.Progress("convert", 1000, stream=tty, delay=0)
    p.update(500)
    p.close()
    drawn = tty.getvalue()
    assert drawn.startswith("\rconvert:") and "1.00k" in drawn  # of 1000 bytes
    assert drawn.endswith("\r") and drawn.split("\r")[-2].strip() == ""  # cleared when done
    pipe = io.StringIO()
    q = progress.Progress("convert", 1000, stream=pipe, delay=0)
    q.update(500)
    q.close()
    assert pipe.getvalue() == "" and not q.enabled and q.done == 500


def test_progress_waits_before_drawing_a_short_job():
    tty = _Tty()
    p = progress.Progress("check", 10, stream=tty, delay=3600)
    p.update(10)
    p.close()
    assert tty.getvalue() == ""


class _Recorder:
    """progress.Progress, recording how a command uses it (and drawing nothing)."""

    made: list = []

    def __init__(self, desc, total=None, stream=None, enabled=None, delay=0.5):
        self.desc, self.total, self.done, self.closed = desc, total, 0, False
        self.enabled = True
        _Recorder.made.append(self)

    def update(self, n):
        self.done += n

    def close(self):
        self.closed = True


def test_every_command_that_reads_weights_has_progress(make_drafter, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from weightcheck.commands import check as check_mod
    from weightcheck.commands.convert import run as convert_run

    src = make_drafter("src")
    for module in (check_mod, convert_run):  # each command's pipeline draws its own
        monkeypatch.setattr(module, "Progress", _Recorder)
    _Recorder.made = []
    assert run_cli("check", src, "--values").exit_code in (0, 1)
    (bar,) = _Recorder.made
    assert bar.desc.startswith("check --values") and bar.done == bar.total > 0 and bar.closed
    _Recorder.made = []
    assert run_cli("convert", src, tmp_path / "out", "--to", "sglang").exit_code == 0
    (bar,) = _Recorder.made
    assert bar.desc == "convert" and bar.done == bar.total > 0 and bar.closed


def test_no_carriage_return_in_a_pipe(make_drafter, tmp_path):
    pytest.importorskip("torch")
    src = make_drafter("src")
    other = make_drafter("other", seed=5)
    for args in (
        ["compare", src, other, "--values"],
        ["check", src, "--values"],
        ["convert", src, tmp_path / "out", "--to", "sglang"],
    ):
        r = run_cli(*args)
        assert r.exit_code in (0, 1), r
        assert "\r" not in r.stderr and "\x1b" not in r.stderr and "\r" not in r.stdout, args


# =============================================================================================
# a finding in two parts: the message in every format, the detail under --verbose/--explain
def test_the_detail_is_shown_under_verbose_and_carried_by_json():
    from weightcheck.output.findings import findings_block
    from weightcheck.rules.base import Finding

    root = Finding(
        "WC402",
        "error",
        "fc.weight is [384, 128], stored transposed: the engine needs [128, 384]",
        "fc.weight",
        "fc-width",
        consequences=(Finding("WC206", "error", "fc.weight: shape [384, 128]", "fc.weight"),),
        fix="weightcheck convert SRC OUT --to sglang --target TARGET",
        detail="sglang 0.5.23 srt/models/llama_eagle3.py:120 builds fc as Linear(3H, H): its "
        "weight is [H, 3H]; a checkpoint exported with fc.weight.T loads nowhere",
    )
    text = out_text.TextEmitter(60)
    short = text([findings_block([root])])
    long = text([findings_block([root], explain=True)])
    assert "detail:" not in short and "llama_eagle3.py:120" not in short
    assert "    detail: sglang 0.5.23" in long and "llama_eagle3.py:120" in long
    assert all(len(line) <= 60 for line in long.splitlines())
    lines = short.splitlines()
    assert lines[0].startswith("WC402 error  fc.weight is [384, 128]")  # the subject is named
    assert any(x.startswith("    fix: weightcheck convert SRC OUT") for x in lines)
    assert any(x.startswith("↳ WC206 error") for x in lines)
    md = out_text.MarkdownEmitter()([findings_block([root], explain=True)])
    assert "(fix: `weightcheck convert SRC OUT --to sglang --target TARGET`)" in md
    assert "llama_eagle3.py:120" in md and "<br>" in md
    assert root.as_dict()["detail"] == root.detail  # --json


def test_check_verbose_and_explain_print_the_detail(monkeypatch):
    """The CLI's --verbose (and --explain) reach the document: a finding's detail is printed
    under it (checked on a finding the check makes, given a detail)."""
    import dataclasses

    from weightcheck.commands import check as check_mod

    real = check_mod.report

    def with_detail(ctx, findings):
        findings = [dataclasses.replace(f, detail=f"DETAIL OF {f.code}") for f in findings]
        return real(ctx, findings)

    monkeypatch.setattr(check_mod, "report", with_detail)
    plain = run_cli("check", SPEC_TRAIN, "--engine", "sglang").stdout
    verbose = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--verbose").stdout
    explained = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--explain").stdout
    assert "DETAIL OF" not in plain
    assert "detail: DETAIL OF WC" in verbose and "checkpoint tensor" not in verbose
    assert "detail: DETAIL OF WC" in explained and "checkpoint tensor" in explained
    j = run_cli("check", SPEC_TRAIN, "--engine", "sglang", "--json").json
    assert all(f["detail"].startswith("DETAIL OF") for f in j["findings"])
