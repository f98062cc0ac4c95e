"""The data files in mappings/, and the one typed loader every kind of them goes through.

The repository's top-level mappings/ is linked into the package as ``weightcheck/_mappings`` (a
symlink), so the wheel ships it as package data and a source tree or an editable install reads it
in place. ``WEIGHTCHECK_MAPPINGS`` names another folder of the same layout (a copy to edit, the
tests' edited copies).

Every kind of file — dialect, architecture, config fields, rules (with the causes each rule
explains), engine and format, and a user's ``--mapping`` dialect file — is declared as
dataclasses (weightcheck/schema.py; the engine files in weightcheck/engines/data.py) and built by
:func:`build`, which follows their type hints: a key no dataclass names, a value of the wrong
type or outside its allowed values, a regex that does not compile, an expression
weightcheck/expr.py cannot read is one :class:`WeightcheckError` line naming the file, the key
path and what is allowed (exit status 2).

What is built from the files is kept in process and in one file of the user's cache folder,
keyed on every file it can depend on (:func:`memo`, below).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import hashlib
import os
import pathlib
import pickle
import re
import sys
import tomllib
import types
import typing
from importlib import resources
from typing import Literal, NewType, Union

from weightcheck import __version__, expr
from weightcheck.errors import WeightcheckError

# string kinds the loader checks beyond "a string"
Expr = NewType("Expr", str)  # an expression of weightcheck/expr.py
Regex = NewType("Regex", str)  # a Python regular expression (re.search on tensor names)
Path = NewType("Path", str)  # a dotted config path: eagle_config.norm_before_fc
Version = NewType("Version", str)  # an engine release: 0.5.12, 0.4.10.post2


# ---------------------------------------------------------------------------------------------
# the files


def load_toml_file(path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise WeightcheckError(str(path), f"cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise WeightcheckError(str(path), f"not valid TOML: {e}") from None


# -- what is built from the data files, memoised in process and kept on disk -------------------
#
# Every function that reads the data files is a ``@memo``: its results are kept by (function,
# arguments) in _STORE. Parsing and validating the files costs more than the rest of a header-level
# command, so _STORE is also kept on disk: one pickle in cache_dir(), named by a stamp of *every*
# file it can depend on — each file under the mappings folder and each module of the package (path,
# size, mtime) — with the weightcheck and Python versions. A process whose stamp matches starts from
# it; one that built something new writes it back at exit (temp file, then rename) and removes
# the other stamps' files, so the folder holds one entry. Nothing stale can be read: an edited data
# file or module is another stamp. A cache that cannot be read or written is rebuilt or skipped.

_STORE: dict = {}  # (function, arguments) -> value
_KEPT: dict = {}  # (function, arguments) -> the value pickled, as read from the disk cache
_STATE = {"stamp": None, "dirty": False}


def cache_dir() -> str | None:
    """Where the built data are kept: ``$WEIGHTCHECK_CACHE_DIR`` (empty: nowhere), else
    ``$XDG_CACHE_HOME/weightcheck``, else ``~/.cache/weightcheck``."""
    d = os.environ.get("WEIGHTCHECK_CACHE_DIR")
    if d is not None:
        return d or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "weightcheck")


def _files_under(top: str):
    for folder, dirs, names in os.walk(top, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        yield from (os.path.join(folder, n) for n in sorted(names))


def stamp() -> str:
    """A digest of every file the built data can depend on, and the versions."""
    h = hashlib.sha256(f"{__version__} {sys.version_info[:3]} {root()}".encode())
    package = os.path.dirname(os.path.abspath(__file__))
    for top in (str(root()), package):
        for f in _files_under(top):
            if top == package and not f.endswith(".py"):
                continue
            st = os.stat(f)
            h.update(f"\0{f}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


def _cache_file(d: str, key: str) -> str:
    return os.path.join(d, f"mappings-{key}.pickle")


def _start() -> None:
    """Once per process (and after :func:`forget`): the stamp, and the kept data if it matches.
    Each entry stays pickled until it is asked for: unpickling it imports the modules its value
    is made of, which a command that never asks for it does not need."""
    _STATE["stamp"] = key = stamp()
    d = cache_dir()
    if d is None:
        return
    try:
        with open(_cache_file(d, key), "rb") as f:
            kept = pickle.load(f)
    except Exception:  # absent, truncated, written by another release: built again
        return
    if isinstance(kept, dict):
        _KEPT.update(kept)


@atexit.register
def save() -> None:
    """Write the kept entries and those this process built, when it built any; remove the other
    stamps' files."""
    d, key = cache_dir(), _STATE["stamp"]
    if d is None or key is None or not _STATE["dirty"]:
        return
    try:
        entries = dict(_KEPT)
        for k, v in _STORE.items():
            if k not in entries:
                entries[k] = pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
        os.makedirs(d, exist_ok=True)
        final = _cache_file(d, key)
        tmp = f"{final}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(entries, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, final)
        for name in os.listdir(d):
            if name.startswith("mappings-") and os.path.join(d, name) != final:
                os.remove(os.path.join(d, name))
    except (OSError, pickle.PicklingError):
        pass  # a read-only home: no cache, same result
    _STATE["dirty"] = False


def memo(fn):
    """Keep ``fn``'s results by arguments, in process and in the disk cache (above)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def cached(*args):
        if _STATE["stamp"] is None:
            _start()
        k = (name, args)
        try:
            return _STORE[k]
        except KeyError:
            pass
        kept = _KEPT.get(k)
        if kept is not None:
            try:
                value = _STORE[k] = pickle.loads(kept)
                return value
            except Exception:  # a class changed shape without a change of file: build it
                del _KEPT[k]
        value = _STORE[k] = fn(*args)
        _STATE["dirty"] = True
        return value

    return cached


def forget() -> None:
    """Drop everything built so far: the next call stamps the files again (a test that edits a
    data file, or points ``WEIGHTCHECK_MAPPINGS`` elsewhere, in the same process)."""
    save()
    _STORE.clear()
    _KEPT.clear()
    _STATE["stamp"] = None


def root():
    """The mappings folder: ``$WEIGHTCHECK_MAPPINGS``, else the bundled one."""
    override = os.environ.get("WEIGHTCHECK_MAPPINGS")
    if override:
        return pathlib.Path(override)
    return resources.files("weightcheck") / "_mappings"


def path(relpath: str) -> str:
    """The file system path of ``mappings/<relpath>``."""
    return str(root().joinpath(*relpath.split("/")))


def load(relpath: str) -> dict:
    """``mappings/<relpath>`` parsed (e.g. ``"config.toml"``, ``"dialects/speculators.toml"``):
    read each time; what is built from it is memoised (:func:`load_as`, :func:`memo`)."""
    return load_toml_file(path(relpath))


@memo
def list_dir(sub: str) -> tuple[str, ...]:
    """Names of the .toml files in ``mappings/<sub>/``, sorted."""
    d = root().joinpath(sub)
    return tuple(sorted(p.name for p in d.iterdir() if p.name.endswith(".toml")))


def where(relpath: str) -> str:
    """How errors name a bundled file."""
    return f"mappings/{relpath}"


@memo
def load_as(relpath: str, kind: type):
    """``mappings/<relpath>`` built into the dataclass ``kind`` (once per process)."""
    return build(kind, load(relpath), where(relpath))


# ---------------------------------------------------------------------------------------------
# the typed loader


class Bad(Exception):
    """A value the schema refuses: ``path`` is its key path (``names.rewrite[0].pattern``).
    :func:`build` turns it into the one-line :class:`WeightcheckError`; checks beyond the types
    (weightcheck/engines/data.py, weightcheck/model/dialects.py) raise it too."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


def build(kind: type, raw: dict, where: str, check=None):
    """``raw`` (a parsed TOML file) as the dataclass ``kind``; ``check(value)`` (optional) may
    raise :class:`Bad` for what the types cannot say. ``where`` names the file in errors."""
    try:
        value = table(kind, raw, "")
        if check is not None:
            check(value)
    except Bad as e:
        raise WeightcheckError(where, f"{e.path}: {e.message}") from None
    return value


def key(f: dataclasses.Field) -> str:
    """The TOML key of a dataclass field (``from`` for ``from_``: metadata ``key``)."""
    return f.metadata.get("key", f.name)


def _with_article(word: str) -> str:
    return ("an " if word[:1] in "aeiou" else "a ") + word


_WORDS = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Expr: "expression",
    Regex: "regular expression",
    Path: "dotted config path",
    Version: "version",
}


def noun(hint, plural: bool = False) -> str:
    """What a type hint accepts, in words: "string", "list of strings", "table"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return " or ".join(noun(a, plural) for a in args if a is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return ("lists" if plural else "list") + " of " + noun(args[0], True)
    if origin is dict:
        return ("tables" if plural else "table") + " of " + noun(args[1], True)
    if dataclasses.is_dataclass(hint):
        return "tables" if plural else "table"
    word = _WORDS[hint]
    return word + "s" if plural else word


def _expected(hint) -> str:
    text = noun(hint)
    return text if text.startswith("one of") else _with_article(text)


def found(v) -> str:
    """A TOML value in words: "a string 'x'", "an integer 4", "a table"."""
    if isinstance(v, bool):
        return f"a boolean {str(v).lower()}"
    if isinstance(v, int):
        return f"an integer {v}"
    if isinstance(v, float):
        return f"a number {v}"
    if isinstance(v, str):
        return f"a string {v!r}" if len(v) <= 40 else "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    return f"a {type(v).__name__}"  # dates and times: TOML has them


def _mismatch(hint, v, path: str) -> Bad:
    return Bad(path, f"expected {_expected(hint)}, found {found(v)}")


def _union(hint, v, path: str):
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    for a in options:  # X | None: None is a missing key, not a TOML value
        try:
            return value(a, v, path)
        except Bad:
            if len(options) == 1:
                raise
    raise _mismatch(hint, v, path)


_SCALAR = {
    bool: lambda x: isinstance(x, bool),
    int: lambda x: type(x) is int,
    float: lambda x: type(x) in (int, float),
}


def _string(hint, v: str, path: str) -> str:
    """The checks of the string kinds (Regex, Expr, Path, Version)."""
    if hint is Regex:
        try:
            re.compile(v)
        except re.error as e:
            raise Bad(path, f"not a regular expression: {e}") from None
    elif hint is Expr:
        try:
            expr.names(v)
        except expr.ExprError as e:
            raise Bad(path, str(e)) from None
    elif hint is Path and not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", v):
        raise Bad(path, f"expected a dotted config path, found {found(v)}")
    elif hint is Version and not re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", v):
        raise Bad(path, f"expected a version (e.g. 0.5.12), found {found(v)}")
    return v


def value(hint, v, path: str):
    """``v`` as the type ``hint`` says, or :class:`Bad` naming ``path``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return _union(hint, v, path)
    if dataclasses.is_dataclass(hint):
        if not isinstance(v, dict):
            raise Bad(path, f"expected a table, found {found(v)}")
        return table(hint, v, path)
    if origin is tuple:
        if not isinstance(v, list):
            raise _mismatch(hint, v, path)
        return tuple(value(args[0], x, f"{path}[{i}]") for i, x in enumerate(v))
    if origin is dict:
        if not isinstance(v, dict):
            raise _mismatch(hint, v, path)
        return {k: value(args[1], x, f"{path}.{k}") for k, x in v.items()}
    if origin is Literal:
        if not isinstance(v, str) or v not in args:
            raise _mismatch(hint, v, path)
        return v
    if not _SCALAR.get(hint, lambda x: isinstance(x, str))(v):
        raise _mismatch(hint, v, path)
    return _string(hint, v, path) if hint in _WORDS and _WORDS[hint] != "string" else v


@functools.cache
def _schema(cls) -> tuple[dict, dict]:
    """A dataclass's type hints and its fields by TOML key, worked out once per class."""
    return typing.get_type_hints(cls), {key(f): f for f in dataclasses.fields(cls)}


def table(cls, v: dict, path: str):
    """A TOML table as the dataclass ``cls``: every key known, every required key there."""
    hints, fields = _schema(cls)
    at = f"{path}." if path else ""
    for k in v:
        if k not in fields:
            raise Bad(at + k, f"unknown key; allowed: {', '.join(fields)}")
    kwargs = {}
    for k, f in fields.items():
        if k in v:
            kwargs[f.name] = value(hints[f.name], v[k], at + k)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise Bad(at + k, "missing (a required key)")
    return cls(**kwargs)
