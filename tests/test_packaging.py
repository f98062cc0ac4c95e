"""The installed package (not the source tree) carries mappings/ and finds it: build a wheel,
install it into a private folder, and run the CLI from there."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT


def test_wheel_carries_mappings_and_runs(tmp_path, make_drafter):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("weightcheck", "mappings"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("weightcheck-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in os.listdir(ROOT / "mappings" / "dialects"):
        if f.endswith(".toml"):
            assert f"weightcheck/_mappings/dialects/{f}" in names
    assert "weightcheck/_mappings/config.toml" in names
    assert "weightcheck/_mappings/engines/sglang.toml" in names
    assert "weightcheck/_mappings/rules.toml" in names  # `weightcheck rule` reads its pages
    assert "weightcheck/mappings.py" in names
    for f in os.listdir(ROOT / "weightcheck" / "schemas"):  # the reports' JSON Schemas
        assert f"weightcheck/schemas/{f}" in names
    assert not any(n.startswith("weightcheck/mappings/") for n in names), (
        "the loader module is shadowed"
    )
    (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(ep).decode()
    assert "weightcheck = weightcheck.cli:run" in scripts, scripts  # run(), not the click group

    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    drafter = make_drafter()
    code = (
        "import sys, json; sys.path.insert(0, sys.argv[1]);"
        "import weightcheck.mappings as m; print(json.dumps(str(m.root())));"
        "from weightcheck.cli import main; main(['inspect', sys.argv[2], '--json'])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(target), str(drafter)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    first, rest = p.stdout.split("\n", 1)
    assert json.loads(first).startswith(str(target)), first  # the installed data, not the repo's
    assert json.loads(rest)["dialect"]["name"] == "specforge"


def test_the_program_is_main_and_nothing_else(monkeypatch):
    """cli.run (the console script, python -m weightcheck) is main: it returns what main returns,
    exits as main exits, and plays no trick with the interpreter on the way out (no gc.freeze);
    the one exception, ending without the teardown after eval imported torch, is asked for by
    that command alone (tests/test_eval_stream.py), and forgotten by the next run."""
    import gc

    from weightcheck import cli

    calls = []
    cli._QUICK_END["asked"] = True  # as an in-process eval left it: not this run's
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(cli, "main", lambda: calls.append("main") or 7)
    assert cli.run() == 7
    assert calls == ["main"]

    def exits():
        calls.append("main")
        sys.exit(2)

    calls.clear()
    monkeypatch.setattr(cli, "main", exits)
    with pytest.raises(SystemExit) as e:
        cli.run()
    assert e.value.code == 2 and calls == ["main"]


def test_python_dash_m_runs_the_program():
    p = subprocess.run(
        [sys.executable, "-m", "weightcheck", "--version"],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    assert p.returncode == 0 and p.stdout.startswith("weightcheck, version "), (p.stdout, p.stderr)


def test_the_package_docstring_example_runs(monkeypatch):
    """weightcheck/__init__.py's example is a doctest: run as written, from the repository."""
    import doctest

    import weightcheck

    monkeypatch.chdir(ROOT)
    result = doctest.testmod(weightcheck, verbose=False, report=True)
    assert result.attempted >= 5 and result.failed == 0
