"""Loading the data files in mappings/. The repository's top-level mappings/ is linked into the
package as ``weightcheck/_mappings`` (a symlink), so the wheel ships it as package data and a
source tree or an editable install reads it in place.

A user's own file (``--mapping FILE``) is read with :func:`load_toml_file` and validated the same
way as the bundled ones.

The bundled files are parsed (and the engine files validated into typed data) once per change:
:func:`cached` keeps the result, pickled, in the user's cache folder, keyed by the size and
modification time of every file it was built from and by the weightcheck and Python versions —
~20 ms less per command. ``WEIGHTCHECK_CACHE_DIR`` names the folder (default
``$XDG_CACHE_HOME/weightcheck``, else ``~/.cache/weightcheck``); set it empty to turn the cache
off. A cache that cannot be read or written is rebuilt or skipped, never an error.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import tomllib
from importlib import resources

from weightcheck.errors import WeightcheckError


def load_toml_file(path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise WeightcheckError(str(path), f"cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise WeightcheckError(str(path), f"not valid TOML: {e}") from None


@functools.lru_cache(maxsize=None)
def root():
    """The mappings folder."""
    return resources.files("weightcheck") / "_mappings"


def cache_dir() -> str | None:
    """Where :func:`cached` keeps its files, or None when the cache is off."""
    d = os.environ.get("WEIGHTCHECK_CACHE_DIR")
    if d is not None:
        return d or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "weightcheck")


def _stamp(paths) -> str:
    from weightcheck import __version__

    h = hashlib.sha256(f"{__version__} {sys.version_info[:3]}".encode())
    for p in paths:
        st = os.stat(p)
        h.update(f"\0{p}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def cached(name: str, build, paths) -> object:
    """``build()``, or what it returned the last time ``paths`` (files; the data and the code
    the result depends on) were as they are now."""
    d = cache_dir()
    if d is None:
        return build()
    try:
        key = os.path.join(d, f"{name}-{_stamp(paths)}.pickle")
    except OSError:
        return build()
    try:
        with open(key, "rb") as f:
            return pickle.load(f)
    except Exception:  # absent, truncated, written by another release: build it again
        pass
    value = build()
    try:
        os.makedirs(d, exist_ok=True)
        tmp = f"{key}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, key)
    except OSError:
        pass  # a read-only home: no cache, same result
    return value


def path(relpath: str) -> str:
    """The file system path of ``mappings/<relpath>``."""
    return str(root().joinpath(*relpath.split("/")))


@functools.lru_cache(maxsize=None)
def load(relpath: str) -> dict:
    """Load ``mappings/<relpath>`` (e.g. ``"config.toml"``, ``"dialects/speculators.toml"``)."""

    def parse() -> dict:
        with open(path(relpath), "rb") as f:
            return tomllib.load(f)

    return cached("toml-" + relpath.replace("/", "-"), parse, (path(relpath),))


@functools.lru_cache(maxsize=None)
def list_dir(sub: str) -> tuple[str, ...]:
    """Names of the .toml files in ``mappings/<sub>/``, sorted."""
    d = root().joinpath(sub)
    return tuple(sorted(p.name for p in d.iterdir() if p.name.endswith(".toml")))
