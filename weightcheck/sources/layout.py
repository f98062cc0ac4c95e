"""Which files make a checkpoint: one chooser for every kind of source.

A folder on disk and a Hub repo hold the same layouts; :func:`choose` picks the weight files (or
the index naming them) from a listing of top-level file names, and :func:`check_member` is the
name-level check of a file an index names. Each opener adds only what its kind of storage needs
(local.py: symlinks and existence; hub.py: presence in the repo listing).
"""

from __future__ import annotations

import re

from weightcheck.errors import WeightcheckError
from weightcheck.record import record
from weightcheck.sources.pickled import PICKLE_EXT

# the files that mark a checkpoint, in order of preference (named in the "not a checkpoint" line)
MARKERS = (
    "model.safetensors.index.json",
    "model.safetensors",
    "*.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
    "training_state.pt",
)


@record(frozen=True)
class Layout:
    kind: str  # shown to the user: "model.safetensors", "sharded safetensors", ...
    files: tuple[str, ...]  # weight files (empty when an index names them)
    index: str | None = None  # the index file's name


def choose(names: list[str]) -> Layout | None:
    """The checkpoint layout of a listing of top-level file names, or None if it holds none."""
    names = sorted(names)
    if "model.safetensors.index.json" in names:
        return Layout("sharded safetensors", (), "model.safetensors.index.json")
    if "model.safetensors" in names:
        return Layout("model.safetensors", ("model.safetensors",))
    st = tuple(n for n in names if n.endswith(".safetensors"))
    if st:
        return Layout("safetensors", st)
    if "pytorch_model.bin.index.json" in names:
        return Layout("sharded pytorch_model.bin", (), "pytorch_model.bin.index.json")
    if "pytorch_model.bin" in names:
        return Layout("pytorch_model.bin", ("pytorch_model.bin",))
    if "training_state.pt" in names:
        return Layout("SpecForge training_state.pt", ("training_state.pt",))
    pk = tuple(n for n in names if n.endswith(PICKLE_EXT))
    if pk:
        return Layout("pickled", pk)
    return None


def not_a_checkpoint(where: str, hint: str = "") -> WeightcheckError:
    marks = ", ".join(MARKERS[:-1]) + f" or {MARKERS[-1]}"
    return WeightcheckError(where, f"not a checkpoint: no {marks}{hint}")


def check_member(fname: object, where: str, inside: str = "the folder") -> list[str]:
    """A file an index names, checked as a name: a relative path inside the checkpoint to a
    weight file. Returns its path components."""
    if not isinstance(fname, str) or not fname:
        raise WeightcheckError(where, f"index names a file {fname!r} that is not a file name")
    if "\x00" in fname:  # os.path functions raise ValueError on it
        raise WeightcheckError(where, f"index names {fname!r}, which holds a NUL byte: refused")
    if fname.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", fname):
        raise WeightcheckError(
            where, f"index names an absolute path {fname!r}, which leaves {inside}: refused"
        )
    parts = re.split(r"[\\/]", fname)
    if ".." in parts:
        raise WeightcheckError(where, f"index names {fname!r}, which leaves {inside}: refused")
    if not fname.endswith((".safetensors",) + PICKLE_EXT):
        raise WeightcheckError(
            where, f"index names {fname!r}, which is not a .safetensors, .bin or .pt file: refused"
        )
    return parts


def shards(weight_map: dict[str, str], only: set[str] | None) -> list[str]:
    """The files an index makes us read: all of them, or (a target) those holding ``only``."""
    if only is None:
        return sorted(set(weight_map.values()))
    return sorted({weight_map[n] for n in only if n in weight_map})
