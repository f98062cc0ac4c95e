"""The one error type the tool raises for bad input.

Every problem with what the user gave us (a path, a file, a header, a config, a repo) is a
WeightcheckError naming *where* (a file, a repo path) and *what* is wrong. The CLI prints it as a
single line and exits with status 2; anything else escaping is a bug in weightcheck.
"""

from __future__ import annotations


class WeightcheckError(Exception):
    """Bad input: rendered as ``weightcheck: error: WHERE: WHAT`` with exit status 2."""

    exit_code = 2

    def __init__(self, where: str | None, message: str):
        self.where = str(where) if where is not None else None
        self.message = message
        super().__init__(self.line())

    def line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        # one line, whatever a file name or a header contains
        return text.replace("\r", "\\r").replace("\n", "\\n")


class UsageError(WeightcheckError):
    """The command line itself asks for something impossible (e.g. OUT inside SRC)."""


_JSON_NAMES = {
    type(None): "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "an array",
    dict: "an object",
}


def json_type(v) -> str:
    """The JSON type of a parsed JSON value, as a message says it: ``a string``, ``null``, ..."""
    return _JSON_NAMES.get(type(v), "a value of unknown type")


def json_value(v, limit: int = 60) -> str:
    """A config value as a message quotes it: in JSON's spelling (null, true, "text"), cut to
    ``limit`` characters."""
    import json

    try:
        text = json.dumps(v, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def require_torch(what: str) -> None:
    """An option that needs torch, asked for without it: one line, exit 2, before anything is
    read."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise WeightcheckError(
            None, f"{what} needs torch: pip install 'weightcheck[torch]'"
        ) from None
