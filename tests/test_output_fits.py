"""Issue #32, items 2 and 3: every text output of the corpus fits its width (100 columns in a pipe,
or COLUMNS), no line splits an atom (a tensor name, a path, a fix command), and no text, Markdown,
concise or GitHub output holds a Python repr (``None``, ``True``, ``False``, ``{'``, ``['``)
outside a quoted config value or a backquoted piece of the engines' code.

The corpus: the differential corpus's variants (tests/engine/corpus.py: every producer's layout
and one defect or a few), each checked plainly, against the target, with each engine and
``--explain``, inspected, compared with the fixture it came from and planned for conversion; the
producer fixtures with a training config; the bundled example. A fixed sample of the variants in
the default run (every ``STEP``-th), all of them under ``-m stress``.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys
import tempfile

import pytest
import stress
from conftest import PRODUCERS, ROOT

from weightcheck import api
from weightcheck.output import Output, emit, fit
from weightcheck.output.findings import findings_block

sys.path.insert(0, str(ROOT / "tests" / "engine"))
import corpus  # noqa: E402

TARGET = corpus.TARGET
STEP = stress.count(1, 10)  # every 10th variant by default (51 of 508), all under -m stress
SHARDS = 4  # the variants in four tests, which xdist runs side by side
WIDTHS = (100, 80)
LEAD = 24  # the widest lead a line's first atom can follow (a field's key, a finding's head)
# a Python repr: None, True, False, a dict's or a list's repr
REPR = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\{'|\['")
QUOTED = re.compile(r'`[^`]*`|"[^"\n]*"')  # backquoted code, a JSON string: as written


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """id -> (the variant's folder, the fixture it was made from)."""
    chosen = sorted(corpus.variants(), key=lambda x: x.id)[::STEP]
    built = corpus.build(str(tmp_path_factory.mktemp("corpus")), only={x.id for x in chosen})
    fixture = {x.id: os.path.join(corpus.PRODUCERS, corpus.ALL_BASES[x.base]) for x in chosen}
    assert all(os.path.isdir(f) for f in fixture.values())
    return {x.id: (built[x.id], fixture[x.id]) for x in chosen}


def reports(path: str, base: str, out: str) -> list[tuple[object, dict]]:
    """Every report of one variant, and the options each is drawn with."""
    made = []
    for make, options in (
        (lambda: api.check(path), {}),
        (lambda: api.check(path, target=TARGET), {"verbose": True}),
        (lambda: api.check(path, engine="sglang", target=TARGET), {"explain": True}),
        (lambda: api.check(path, engine="vllm"), {"explain": True}),
        (lambda: api.inspect(path), {}),
        (lambda: api.compare(base, path), {}),
        (lambda: api.convert(path, out, to="vllm", dry_run=True, target=TARGET), {}),
    ):
        try:
            made.append((make(), options))
        except api.WeightcheckError:  # an input a command refuses: exit 2, one line (tested)
            continue
    assert len(made) >= 3, path  # inspect, compare and plain check read anything the corpus has
    return made


# what each report's document shows besides (check --explain, --verbose; convert --verbose)
SHOWS = {"CheckReport": ("explain", "verbose"), "ConvertReport": ("verbose",)}


def drawn(report, fmt: str, width: int | None, options: dict) -> str:
    shows = SHOWS.get(type(report).__name__, ())
    return emit(report, Output(fmt, width), **{k: v for k, v in options.items() if k in shows})


def assert_fits(text: str, width: int, where: str) -> None:
    """Every line fits, but one holding an atom too long to fit after any lead (a long path)."""
    for line in text.splitlines():
        if len(line) > width:
            longest = max((len(a) for a in fit.atoms(line)), default=0)
            assert longest > width - LEAD, (where, width, line)


def assert_atoms_whole(report, text: str, where: str) -> None:
    """Each finding's subject (a tensor, a field, a file) stands whole on one line of the text;
    a fix command whole, or broken before an option as a shell reads it back; a long condition
    of an engine's data (code in backquotes) at least whole once unwrapped."""
    lines, flat = text.splitlines(), " ".join(text.replace(" \\\n", " ").split())
    for row in findings_block(getattr(report, "findings", ()), True).rows:
        if row.subject and len(fit.atoms(row.subject)) == 1:
            assert any(row.subject in line for line in lines), (where, row.subject)
        for said in (row.subject, row.fix):
            assert not said or " ".join(said.split()) in flat, (where, said)


def assert_no_repr(text: str, where: str) -> None:
    """No repr outside quotes and backquotes (a long backquoted span may wrap over lines)."""
    for line in QUOTED.sub("", text).splitlines():
        assert REPR.search(line) is None, (where, line)


def check_all(report, options: dict, where: str) -> None:
    for width in WIDTHS:
        text = drawn(report, "text", width, options)
        assert_fits(text, width, where)
        assert_atoms_whole(report, text, where)
        assert_no_repr(text, where)
    for fmt in ("markdown", "concise", "github"):
        assert_no_repr(drawn(report, fmt, None, options), f"{where} {fmt}")


@pytest.mark.stress
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_output_of_the_corpus_fits_and_says_no_python(variants, tmp_path, shard):
    assert len(variants) >= 508 // 10
    for vid, (path, base) in sorted(variants.items())[shard::SHARDS]:
        for report, options in reports(path, base, str(tmp_path / "out" / vid)):
            check_all(report, options, f"{vid} {type(report).__name__} {options}")


@pytest.mark.parametrize(
    "fixture", sorted(p.name for p in PRODUCERS.iterdir() if (p / "config.json").exists())
)
def test_every_output_of_the_producers_fits_and_says_no_python(fixture):
    src = PRODUCERS / fixture
    other = PRODUCERS / ("modelopt" if fixture != "modelopt" else "specforge-sglang")
    made = [
        (api.check(src, training_config=other), {"verbose": True}),
        (api.check(src, training_config=src, target=TARGET), {}),
        (api.check(src, training_vocab=other), {}),
        (api.compare(src, other), {}),
        (api.inspect(src), {}),
    ]
    for report, options in made:
        check_all(report, options, f"{fixture} {type(report).__name__}")


def test_a_new_users_first_check_fits_80_columns(examples_out):
    """The README's first command, plain check of the bundled example, in an 80-column
    terminal: every line fits (the example in a folder of a short path, as a clone has)."""
    short = tempfile.mkdtemp(prefix="wc", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        src, target = (os.path.join(short, n) for n in ("kimi-k2-drafter", "kimi-k25-target"))
        os.symlink(examples_out / "kimi-k2-drafter", src)
        os.symlink(examples_out / "kimi-k25-target", target)
        for args in ({}, {"target": target}):
            text = drawn(api.check(src, **args), "text", 80, {})
            assert max(len(line) for line in text.splitlines()) <= 80, text
            assert_no_repr(text, "example")
    finally:
        shutil.rmtree(short)


def test_a_title_line_of_two_long_paths_is_wrapped():
    """convert's first line names SRC and OUT: with long paths it wrapped nowhere (170 columns
    in a 100-column pipe; the corpus sweep caught it only where the temp path was short enough
    for no single path to excuse the line). Paths each shorter than a line, together longer."""
    import shutil

    short = tempfile.mkdtemp(prefix="wc", dir="/tmp" if os.path.isdir("/tmp") else None)
    try:
        src = pathlib.Path(short) / "source-drafter-folder" / "ma.asis"
        shutil.copytree(PRODUCERS / "modelopt-default-aux", src)
        out = pathlib.Path(short) / "output-of-the-convert" / "ma.asis"
        report = api.convert(src, out, to="vllm", dry_run=True, target=TARGET)
        for width in WIDTHS:
            text = drawn(report, "text", width, {})
            assert_fits(text, width, "convert title")
            first = " ".join(text.split("\n(")[0].split())  # the title, unwrapped
            assert first.startswith(f"plan: {src} (modelopt) -> {out} [vllm]"), text[:400]
    finally:
        shutil.rmtree(short, ignore_errors=True)
