"""weightcheck: inspect, compare, check and convert EAGLE-3 drafter checkpoints.

The Python API (weightcheck/api.py) is the command line's, as functions returning typed results —
the same reports ``--json`` prints::

    import weightcheck

    r = weightcheck.check("./drafter", engine="sglang", target="org/target")
    if not r.ok:
        raise SystemExit([f"{f.code} {f.message}" for f in r.errors])

``inspect``, ``compare``, ``check``, ``convert``, ``clean``, ``rule`` and ``rule_pages``; bad input
raises :class:`WeightcheckError`. The names are loaded on first use: ``import weightcheck`` itself
imports nothing else (no torch, no huggingface_hub, no tabulate).

The pipeline underneath is load -> normalize -> (compare | check | plan+write) -> render::

    from weightcheck.model.drafter import load_drafter
    d = load_drafter("org/name@main")      # or a folder, or a file
    d.dialect, d.normalized, d.tensors     # the config as given is d.config
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
    "InspectResult",
    "CompareResult",
    "CheckResult",
    "ConvertResult",
    "CleanResult",
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
