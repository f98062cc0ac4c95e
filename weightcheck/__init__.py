"""weightcheck: inspect, compare, check and convert EAGLE-3 drafter checkpoints.

The public pipeline is load -> normalize -> (compare | check | plan+write) -> render:

    from weightcheck.drafter import load_drafter
    d = load_drafter("org/name@main")      # or a folder, or a file
    d.dialect, d.config.normalized, d.tensors
"""
from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("weightcheck")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
