"""weightcheck: inspect, compare, check and convert EAGLE-3 drafter checkpoints.

The public pipeline is load -> normalize -> (compare | check | plan+write) -> render:

    from weightcheck.model.drafter import load_drafter
    d = load_drafter("org/name@main")      # or a folder, or a file
    d.dialect, d.config.normalized, d.tensors
"""

# The one place the version is written: pyproject.toml reads it from here ([tool.setuptools.dynamic]).
# A literal, not importlib.metadata: that import costs ~14 ms of every command's start-up.
__version__ = "0.1.0"
