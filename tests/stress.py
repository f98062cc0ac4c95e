"""How many randomized trials a test runs.

Every randomized test (kill trials, fuzzing) is marked ``stress`` and runs in the default suite
with a fixed seed and a bounded count that cannot flake; ``python -m pytest -m stress`` runs the
same tests at their full counts (conftest.py sets FULL from the marker expression).
"""

from __future__ import annotations

FULL = False


def count(full: int, bounded: int) -> int:
    """``full`` trials under ``-m stress``, else ``bounded``."""
    return full if FULL else bounded
