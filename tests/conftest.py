"""Shared test helpers: run the CLI in-process, build synthetic drafters, find the fixtures."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import schema_check
from click.testing import CliRunner

# One thread per torch process: the suite runs one worker per core (-n auto), and torch's
# default (a thread per core) in every worker, and in the processes they start, makes the threads
# wait on each other: the examples' eval data took 13 s for two workers at once instead of 5.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:
    sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# Text is drawn at COLUMNS when it is set, else at 100 columns in a pipe (weightcheck/terminal.py);
# pytest-xdist exports COLUMNS=80 to its workers and a plain run does not: unset, so that every run
# draws at the pipe's width (a test that wants another passes COLUMNS itself)
os.environ.pop("COLUMNS", None)

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "examples" / "configs"
PRODUCERS = ROOT / "tests" / "fixtures" / "producers"


class Result:
    def __init__(self, code, out, err):
        self.exit_code, self.stdout, self.stderr = code, out, err

    @property
    def json(self):
        return json.loads(self.stdout)

    def __repr__(self):
        return f"<Result exit={self.exit_code} stdout={self.stdout[:300]!r} stderr={self.stderr[:300]!r}>"


def run_cli(*args, env=None) -> Result:
    """Run ``weightcheck ARGS`` in-process (click's runner); stderr kept apart."""
    from weightcheck.cli import main

    runner = CliRunner()
    r = runner.invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)
    schema_check.check_output(args, r.stdout)
    return Result(r.exit_code, r.stdout, r.stderr)


def run_python(code: str, *args, env=None, timeout=300, stdout=None):
    """``python -c CODE ARGS`` in a fresh interpreter with this checkout first on the path:
    the CompletedProcess (text; stdout captured unless ``stdout`` is a file to write it to)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    out = subprocess.PIPE if stdout is None else stdout
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], stdout=out,
                          stderr=subprocess.PIPE, text=True, env=e, timeout=timeout)  # fmt: skip


def run_subprocess(*args, env=None, timeout=120) -> Result:
    """Run ``python -m weightcheck ARGS`` in a fresh interpreter (for import-level checks)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-m", "weightcheck", *map(str, args)],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
        cwd=str(ROOT),
    )
    schema_check.check_output(args, p.stdout)
    return Result(p.returncode, p.stdout, p.stderr)


def pytest_configure(config):
    """``-m stress`` (alone or in an expression) runs the randomized tests at their full counts."""
    import stress

    stress.FULL = "stress" in (config.option.markexpr or "")


def pytest_collection_modifyitems(config, items):
    """Tests that mount filesystems (marker ``root``) need root: skipped, with the reason, if not."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (mounts a tmpfs)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _mappings_cache(tmp_path_factory):
    """The built mappings data (weightcheck/mappings.py ``memo``) are kept in a folder of this
    session, never the user's home: every process the tests start inherits it."""
    os.environ["WEIGHTCHECK_CACHE_DIR"] = str(tmp_path_factory.mktemp("mappings-cache"))
    os.environ.pop("WEIGHTCHECK_MAPPINGS", None)


@pytest.fixture(scope="session", autouse=True)
def _session_dir(tmp_path_factory):
    """A folder for inputs shared by a whole session (helpers.convert.llama_target)."""
    from helpers import convert as convert_helpers

    convert_helpers.SESSION_DIR = tmp_path_factory.mktemp("session")


def load_config(name: str) -> dict:
    """A real SpecForge config from examples/configs."""
    with open(CONFIGS / name) as f:
        return json.load(f)


K2 = "specforge-kimi-k2-eagle3.json"
K25 = "specforge-kimi-k25-eagle3.json"


@pytest.fixture
def tiny_cfg():
    """The Kimi-K2 SpecForge drafter config scaled down (hidden 128, vocab 2048, draft 400)."""
    import synth

    return synth.scaled_config(load_config(K2))


@pytest.fixture
def make_drafter(tmp_path):
    """make_drafter(name, cfg, dialect="specforge", **kw) -> folder with config.json + model.safetensors."""
    import synth

    def make(name="drafter", cfg=None, dialect="specforge", **kw):
        cfg = cfg or synth.scaled_config(load_config(K2))
        out = tmp_path / name
        synth.write_drafter(str(out), cfg, dialect=dialect, **kw)
        return out

    return make


@pytest.fixture(autouse=True)
def _isolated_hf(tmp_path_factory, monkeypatch):
    """No test touches ~/.cache/huggingface or the network by accident."""
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("WEIGHTCHECK_CACHE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: fail fast
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield


def example_module(stem: str, name: str | None = None):
    """examples/<stem>.py loaded as a module (the examples are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name or stem, ROOT / "examples" / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def examples_out(tmp_path_factory):
    """The bundled example drafters (examples/make_examples.py), written for the test session
    (examples/out is generated and not in the repository)."""
    mod = example_module("make_examples")
    out = tmp_path_factory.mktemp("examples-out")
    mod.main(str(out))
    return out
