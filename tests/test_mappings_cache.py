"""The parsed-mappings cache (weightcheck/mappings.py ``cached``): a result is reused only while
every file it was built from is unchanged; a broken or unwritable cache is rebuilt or skipped."""

from __future__ import annotations

import os

from weightcheck import mappings
from weightcheck.engines import data


def _counting(value):
    calls = []

    def build():
        calls.append(1)
        return value

    return build, calls


def test_built_once_then_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "data.toml"
    src.write_text("a = 1\n")
    build, calls = _counting({"a": 1})
    assert mappings.cached("t", build, (str(src),)) == {"a": 1}
    assert mappings.cached("t", build, (str(src),)) == {"a": 1}
    assert len(calls) == 1
    # the file changes: built again
    src.write_text("a = 22\n")
    os.utime(src, ns=(1, 1))
    assert mappings.cached("t", build, (str(src),)) == {"a": 1} and len(calls) == 2


def test_a_corrupt_cache_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", str(tmp_path))
    src = tmp_path / "x"
    src.write_text("x")
    build, calls = _counting([1, 2])
    mappings.cached("c", build, (str(src),))
    (f,) = [p for p in tmp_path.iterdir() if p.name.startswith("c-")]
    f.write_bytes(b"\x80garbage")
    assert mappings.cached("c", build, (str(src),)) == [1, 2] and len(calls) == 2


def test_off_and_unwritable(tmp_path, monkeypatch):
    src = tmp_path / "x"
    src.write_text("x")
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", "")
    build, calls = _counting(3)
    assert mappings.cached("o", build, (str(src),)) == 3
    assert mappings.cached("o", build, (str(src),)) == 3 and len(calls) == 2
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", str(blocker / "cache"))
    assert mappings.cached("o", build, (str(src),)) == 3


def test_cached_engine_data_equals_the_parsed(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTCHECK_CACHE_DIR", str(tmp_path))
    for engine in ("sglang", "vllm", "speculators"):
        data.load.cache_clear()
        first = data.load(engine)  # built and written
        data.load.cache_clear()
        again = data.load(engine)  # read back
        fresh = data.parse(
            mappings.load_toml_file(mappings.path(f"engines/{engine}.toml")),
            engine,
            data.Format if engine == "speculators" else data.Engine,
        )
        assert first == again == fresh
    assert any(p.name.startswith("engine-sglang-") for p in tmp_path.iterdir())
    data.load.cache_clear()
