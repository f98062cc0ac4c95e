"""weightcheck: inspect, compare, check and convert EAGLE-3 drafter checkpoints.

The Python API (weightcheck/api.py) is the command line's, as functions returning the commands'
typed reports (weightcheck/reports/) — the same reports ``--json`` prints. Run from the
repository's root (tests/test_packaging.py runs this example)::

    >>> import weightcheck
    >>> r = weightcheck.check("tests/fixtures/producers/speculators-train", engine="sglang")
    >>> r.ok, [f.code for f in r.errors]
    (False, ['WC701', 'WC706'])
    >>> r.to_dict()["summary"]
    {'errors': 2, 'warnings': 0, 'info': 0}

``inspect``, ``compare``, ``check``, ``convert``, ``clean``, ``rule`` and ``rule_pages``; bad input
raises :class:`WeightcheckError`. The names are loaded on first use: ``import weightcheck`` itself
imports nothing else (no torch, no huggingface_hub).

The pipeline underneath is load -> normalize -> (compare | check | plan+write) -> render::

    >>> from weightcheck.model.drafter import load_drafter
    >>> d = load_drafter("tests/fixtures/producers/specforge-sglang")  # or a file, or org/name
    >>> d.dialect, d.architecture.name, d.normalized.values["hidden_size"], len(d.tensors)
    ('specforge', 'llama_eagle3', 64, 15)
"""

# The one place the version is written: pyproject.toml reads it from here ([tool.setuptools.dynamic]).
# A literal, not importlib.metadata: that import costs ~14 ms of every command's start-up.
__version__ = "0.1.0"

_API = (
    "inspect",
    "compare",
    "check",
    "convert",
    "clean",
    "rule",
    "rule_pages",
    "evaluate",
    "InspectResult",
    "CompareResult",
    "CheckResult",
    "ConvertResult",
    "CleanResult",
    "EvalResult",
    "Finding",
)
__all__ = ["__version__", "WeightcheckError", *_API]


def __getattr__(name: str):
    """The API's names, imported when first asked for (PEP 562)."""
    if name in _API:
        from weightcheck import api

        return getattr(api, name)
    if name == "WeightcheckError":
        from weightcheck.errors import WeightcheckError

        return WeightcheckError
    raise AttributeError(f"module 'weightcheck' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(__all__))
