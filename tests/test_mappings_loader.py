"""The one typed loader of every mappings file kind (weightcheck/mappings.py ``build``, the
schemas in weightcheck/schema.py and weightcheck/engines/data.py): a bad key or value in a
dialect, architecture, config-fields, rules or engine file, or in a user's ``--mapping`` file, is
one line naming the file, the key path and what is allowed, exit status 2, no traceback.

What is built from the files is kept in process and in one file of the cache folder, keyed on
every file it can depend on: an edited data file (in a copy of mappings/, ``WEIGHTCHECK_MAPPINGS``)
is what the next process reads, the folder holds one entry, and the tests never write to the
user's home.
"""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import PRODUCERS, ROOT, run_cli, run_subprocess
from helpers.bad_input import one_error_line

from weightcheck import mappings

SRC = PRODUCERS / "specforge-sglang"


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A copy of mappings/ that this process (and the processes it starts) reads instead."""
    dst = tmp_path / "mappings"
    shutil.copytree(ROOT / "mappings", dst)
    monkeypatch.setenv("WEIGHTCHECK_MAPPINGS", str(dst))
    mappings.forget()
    yield dst
    mappings.forget()


def edit(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


# --- a user's --mapping dialect file --------------------------------------------------------

USER_DIALECT = """[dialect]
name = "mine"
kind = "layout"

[[rename]]
prefix = "layers.0."
to = "midlayer."
"""


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('kind = "layout"', 'kind = "layuot"', "dialect.kind: expected one of 'layout', 'wrapper'"),
        (
            "[[rename]]",
            "[[renmae]]",
            "renmae: unknown key; allowed: dialect, detect, strip, rename",
        ),
        ('to = "midlayer."', 'too = "midlayer."', "rename[0].too: unknown key; allowed: to, exact"),
        ('prefix = "layers.0."', 'regex = "layers.("', "rename[0].regex: not a regular expression"),
        (
            'prefix = "layers.0."',
            'prefix = "layers.0."\nexact = "x"',
            "rename[0]: needs exactly one of exact, prefix, regex",
        ),
        ('name = "mine"\n', "", "dialect.name: missing (a required key)"),
    ],
)
def test_a_bad_user_mapping_file_is_one_line_exit_2(tmp_path, old, new, message):
    f = tmp_path / "mine.toml"
    f.write_text(USER_DIALECT.replace(old, new, 1))
    out = tmp_path / "out"
    r = run_cli("convert", SRC, out, "--to", "sglang", "--dry-run", "--mapping", f)
    one_error_line(r, message, where=str(f))
    assert not out.exists()


def test_a_good_user_mapping_file_is_read(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(USER_DIALECT)
    r = run_cli("convert", SRC, tmp_path / "out", "--to", "sglang", "--dry-run", "--mapping", f)
    assert r.exit_code == 0, r


# --- every bundled kind, edited in a copy -----------------------------------------------------


@pytest.mark.parametrize(
    "file, old, new, message",
    [
        (
            "dialects/speculators.toml",
            'kind = "layout"',
            'kind = "layuot"',
            "dialect.kind: expected one of 'layout', 'wrapper', found a string 'layuot'",
        ),
        (
            "dialects/modelopt.toml",
            "[[rename]]",
            "[[renmae]]",
            "renmae: unknown key; allowed: dialect, detect, strip, rename",
        ),
        (
            "architectures/llama_eagle3.toml",
            'presence = "required"',
            'presence = "requried"',
            "tensor[0].presence: expected one of 'required', 'optional'",
        ),
        (
            "architectures/llama_eagle3.toml",
            'attention = "gqa"',
            'atention = "gqa"',
            "architecture.atention: unknown key; allowed: name, description",
        ),
        (
            "config.toml",
            'category = "architecture"',
            'category = "architectural"',
            "field[0].category: expected one of 'architecture', 'serving', 'informational'",
        ),
        ("config.toml", 'symbol = "H"', 'symbl = "H"', "field[0].symbl: unknown key; allowed: "),
        (
            "rules.toml",
            'kind = "untrained"',
            'kind = "untraned"',
            "rule.WC101.consequence.kind: expected one of 'crash', 'untrained', 'misfed'",
        ),
        ("rules.toml", "[rule.WC101]\n", "[rule.WC101]\nseverty = 1\n", "rule.WC101.severty"),
        (
            "rules.toml",
            'subject = "same"',
            'subjet = "same"',
            "explains[0].subjet: unknown key; allowed: codes, why, subject",
        ),
        (
            "engines/vllm.toml",
            'unknown = "error"',
            'unknown = "eror"',
            "names.unknown: expected one of 'drop', 'error', 'warn'",
        ),
    ],
)
def test_a_bad_bundled_file_is_one_line_exit_2(data_dir, file, old, new, message):
    edit(data_dir / file, old, new)
    r = run_cli("check", SRC)
    one_error_line(r, message, where=f"mappings/{file}")


def test_an_edited_data_file_is_seen(data_dir):
    """Nothing stale, in this process (after ``forget``, what a new process starts with) and in a
    new one: a rule's summary edited in the copy is what ``rule`` says."""
    assert run_cli("rule", "WC101", "--json").json["summary"].startswith("A tensor name no")
    edit(
        data_dir / "rules.toml",
        'summary = "A tensor name no',
        'summary = "Edited: a tensor name no',
    )
    mappings.forget()
    assert run_cli("rule", "WC101", "--json").json["summary"].startswith("Edited: ")
    r = run_subprocess("rule", "WC101", "--json")
    assert r.exit_code == 0 and r.json["summary"].startswith("Edited: ")


def test_a_config_field_the_engine_data_reads_cannot_go(data_dir):
    """The pickled cache once handed back engine data validated against the old config.toml."""
    text = (data_dir / "config.toml").read_text()
    start = text.index('[[field]]\nname = "norm_before_residual"')
    end = text.index("[[field]]", start + 1)
    (data_dir / "config.toml").write_text(text[:start] + text[end:])
    r = run_subprocess("check", SRC, "--engine", "sglang")
    one_error_line(r, "`norm_before_residual` is not", where="mappings/engines/sglang.toml")


def test_the_tests_cache_is_not_in_the_home_folder():
    d = os.environ["WEIGHTCHECK_CACHE_DIR"]
    assert d and not d.startswith(os.path.expanduser("~") + os.sep)


# --- the disk cache -----------------------------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", str(d))
    return d


def test_a_warm_cache_never_hides_an_edit_of_any_file(data_dir, cache):
    """The stale answer the cache once gave: engine data validated against config.toml were
    kept under a key of the engine file only, so removing a field they read went unnoticed."""
    assert run_subprocess("check", SRC, "--engine", "sglang").exit_code == 0
    (entry,) = cache.iterdir()
    text = (data_dir / "config.toml").read_text()
    start = text.index('[[field]]\nname = "norm_before_residual"')
    end = text.index("[[field]]", start + 1)
    (data_dir / "config.toml").write_text(text[:start] + text[end:])
    r = run_subprocess("check", SRC, "--engine", "sglang")
    one_error_line(r, "`norm_before_residual` is not", where="mappings/engines/sglang.toml")
    edit(
        data_dir / "rules.toml",
        'summary = "A tensor name no',
        'summary = "Edited: a tensor name no',
    )
    (data_dir / "config.toml").write_text(text)
    r = run_subprocess("rule", "WC101", "--json")
    assert r.exit_code == 0 and r.json["summary"].startswith("Edited: ")
    assert [p.name for p in cache.iterdir()] != [entry.name] and len(list(cache.iterdir())) == 1


def test_a_corrupt_or_unwritable_cache_is_rebuilt_or_skipped(cache, tmp_path):
    assert run_subprocess("rule", "WC101", "--json").exit_code == 0
    (entry,) = cache.iterdir()
    entry.write_bytes(b"\x80garbage")
    r = run_subprocess("rule", "WC101", "--json")
    assert r.exit_code == 0 and r.json["code"] == "WC101"
    assert entry.read_bytes() != b"\x80garbage"  # written again
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = run_subprocess("rule", "WC101", "--json", env={"WEIGHTCHECK_CACHE_DIR": str(blocker / "c")})
    assert r.exit_code == 0 and r.stderr == ""


def test_the_cached_data_equal_the_built(cache, monkeypatch):
    """What a process reads back from the cache is what it would build, and reading it back
    parses no file."""
    from weightcheck.engines import data
    from weightcheck.rules import causes

    def everything():
        return [data.load(n) for n in data.files()] + [causes.table()]

    mappings.forget()
    built = everything()
    mappings.forget()  # written, then read back
    assert len(list(cache.iterdir())) == 1

    def no_parsing(path):
        raise AssertionError(f"parsed {path}")

    monkeypatch.setattr(mappings, "load_toml_file", no_parsing)
    again = everything()
    assert again == built and again[0] is not built[0]
    monkeypatch.undo()
    mappings.forget()


# --- the trainers' files go through the same loader -----------------------------------------------
@pytest.mark.parametrize(
    "old, new, message",
    [
        ('missing = "raises"', 'missng = "raises"', "load.missng: unknown key; allowed: missing"),
        (
            'missing = "raises"',
            'missing = "raise"',
            "load.missing: expected one of 'raises', 'init'",
        ),
        ('\norigin = "target"', '\norigin = "the target"', "param[0].origin: expected one of"),
        ("layers_built = 1", "layers_built = 1.5", "trainer.layers_built: expected"),
    ],
)
def test_a_wrong_trainer_file_is_one_line_naming_the_key(data_dir, old, new, message):
    from weightcheck import trainers

    trainers.load.cache_clear()
    edit(data_dir / "trainers" / "specforge.toml", old, new)
    r = run_cli("check", SRC, "--training-config", SRC / "config.json")
    trainers.load.cache_clear()
    one_error_line(r, message, where="mappings/trainers/specforge.toml")
