"""Vocabulary maps: which target token each draft id (each lm_head row) stands for.

An EAGLE-3 drafter with a reduced draft vocabulary carries ``d2t`` (int64 [Vd], offsets: target
id = draft id + d2t[draft id]) and ``t2d`` (bool [V]); lm_head row j scores target token
j + d2t[j]. A drafter without d2t has draft vocab = vocab: the identity map.

Here: reading a map (a drafter's d2t/t2d by range; a SpecForge vocab-mapping ``.pt``, a dict of
``d2t`` and ``t2d`` tensors, through sources/pickled.py — ``torch.load(weights_only=True)``, only
when torch is installed —; a speculators
``d2t.npy``/``t2d.npy`` pair with numpy), the overlap of two maps (compare's ``vocab`` object,
check's WC311) and the re-index plan (convert ``--vocab-from``): for each output row, the source
row that holds the same token, or the target row when the source's head lacks it.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Callable

from weightcheck.errors import WeightcheckError
from weightcheck.record import record
from weightcheck.sources.pickled import load_pickled
from weightcheck.sources.tensors import read_small
from weightcheck.storage.header import INT_FORMATS, int_values


@record(frozen=True)
class VocabMap:
    """A draft vocabulary: ``targets[j]`` is the target id lm_head row j stands for."""

    targets: tuple[int, ...]
    vocab: int | None  # the target vocabulary's size (t2d's length, or the config's vocab_size)
    identity: bool  # no d2t: draft ids are target ids
    where: str  # what the map was read from, for messages
    # a d2t of all zeros for a draft vocabulary smaller than the target's (see is_placeholder)
    placeholder: bool = False

    @property
    def size(self) -> int:
        return len(self.targets)

    def index(self) -> dict[int, int]:
        """target id -> the first draft id that stands for it."""
        out: dict[int, int] = {}
        for j, t in enumerate(self.targets):
            out.setdefault(t, j)
        return out

    def d2t_bytes(self) -> bytes:
        return struct.pack(f"<{self.size}q", *[t - j for j, t in enumerate(self.targets)])

    def t2d_bytes(self, vocab: int) -> bytes:
        out = bytearray(vocab)
        for t in self.targets:
            if 0 <= t < vocab:
                out[t] = 1
        return bytes(out)


def from_offsets(d2t, vocab: int | None, where: str) -> VocabMap:
    targets = tuple(j + int(off) for j, off in enumerate(d2t))
    bad = [j for j, t in enumerate(targets) if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        j = bad[0]
        why = f"{TARGET_IDS_SAID}: " if reads_as_target_ids(list(d2t), vocab) else ""
        raise WeightcheckError(
            where,
            f"{why}d2t maps {len(bad)} draft id(s) outside [0, {vocab}); first: draft id {j} -> "
            f"target id {targets[j]}",
        )
    return VocabMap(targets, vocab, False, where, placeholder=is_placeholder(d2t, vocab))


def is_placeholder(d2t, vocab: int | None) -> bool:
    """The one test of the placeholder map: a d2t of all zeros (draft id j is target id j) while
    the draft vocabulary is smaller than the target's (``vocab``). It is what a trainer (SpecForge)
    writes before it builds the map from the data's token frequencies: the draft vocabulary is
    then simply the target's first ids, almost certainly not the one the head was trained on.
    A full-size all-zero d2t is the identity map, nothing odd."""
    n = len(d2t)
    return bool(n) and isinstance(vocab, int) and n < vocab and not any(d2t)


def placeholder_said(n: int, vocab: int) -> str:
    """The placeholder in words (check's WC312, compare's vocab line)."""
    return (
        f"d2t is all zeros: draft token j is target token j, the first {n:,} of {vocab:,} ids — "
        "the placeholder SpecForge writes before building the map from data"
    )


def reads_as_target_ids(d2t, vocab: int | None, t2d: bytes | None = None) -> bool:
    """The one test of a d2t that holds the draft tokens' target ids where the engines read
    offsets (target id = draft id + d2t[draft id]; SGLang and vLLM add the index): its values,
    read as ids, lie in the vocabulary and rise strictly, as a map built from sorted ids does
    (SpecForge's and speculators' maps are the sorted ids minus their index), and, with t2d, are
    exactly the ids t2d marks. Said where the map, read as offsets, fails (WC306, WC310)."""
    n = len(d2t)
    if not n or not isinstance(vocab, int) or not all(0 <= x < vocab for x in d2t):
        return False
    if any(b <= a for a, b in zip(d2t, d2t[1:])):
        return False
    if t2d is None:
        return True
    return {i for i, b in enumerate(t2d) if b} == set(d2t)


TARGET_IDS_SAID = "d2t holds target ids, not offsets; store d2t[i] = target_id - i"


def identity(n: int, where: str) -> VocabMap:
    return VocabMap(tuple(range(n)), n, True, where)


# -- reading -------------------------------------------------------------------------------------
T2D_DTYPES = ("BOOL", "U8")  # a t2d check reads: one byte per target token


def read_maps(
    d2t, t2d, read: Callable[[Any], bytes | None]
) -> tuple[list[int] | None, bytes | None]:
    """(d2t's offsets, t2d's bytes): the only tensor bytes check's rules read without --values
    (``Context.vocab_maps``), for a drafter on disk or convert's planned output (its gate).

    ``d2t``, ``t2d``: the tensors, anything with ``dtype`` and ``shape`` (a drafter's tensor, a
    planned item), or None where there is none; ``read(tensor)``: its bytes, or None where they
    are not known (a planned tensor cast or taken from a target), its own errors and byte limit
    left to the caller. d2t is read when it is a vector of an integer dtype (storage/header.py
    ``int_values``: signed or unsigned, any width); a d2t of floats, or of another rank, is None
    here (WC304 reads it). t2d is read when it is a vector of bool or uint8, else None."""
    offsets = mask = None
    if d2t is not None and d2t.dtype in INT_FORMATS and len(d2t.shape) == 1:
        raw = read(d2t)
        if raw is not None:
            offsets = int_values(raw, d2t.dtype)
    if t2d is not None and t2d.dtype in T2D_DTYPES and len(t2d.shape) == 1:
        mask = read(t2d)
    return offsets, mask


def from_drafter(d) -> VocabMap | None:
    """A drafter's map: its d2t (read by range: 8 bytes per draft token) and t2d's length; the
    identity when it has no d2t (its lm_head rows, or draft_vocab_size, or vocab_size tokens).
    None when nothing says how large its vocabulary is."""
    canon = d.by_canonical()
    where = d.source.spec
    t2d = canon.get("t2d")
    vocab = d.normalized.get("vocab_size")
    if t2d is not None and len(t2d.shape) == 1:
        vocab = t2d.shape[0]
    t = canon.get("d2t")
    if t is not None:
        if t.dtype not in INT_FORMATS or len(t.shape) != 1:
            raise WeightcheckError(
                where, f"{t.name} is {t.dtype} {list(t.shape)}, not an integer vector"
            )
        return from_offsets(int_values(read_small(d.source, t.name), t.dtype), vocab, where)
    head = canon.get("lm_head.weight")
    n = head.shape[0] if head is not None and head.shape else None
    n = n or d.normalized.get("draft_vocab_size") or vocab
    if not isinstance(n, int) or n <= 0:
        return None
    return identity(n, where)


def _tensor_list(x, what: str, where: str) -> list:
    if hasattr(x, "tolist"):
        x = x.tolist()
    if not isinstance(x, list) or any(isinstance(v, list) for v in x[:1]):
        raise WeightcheckError(where, f"{what} is not a vector")
    return x


def _load_pt(path: str) -> dict:
    """A pickled file's tensors, by weightcheck's one reader of pickles (sources/pickled.py:
    ``torch.load(weights_only=True)``, only when torch is installed; one-line errors)."""
    return load_pickled(path)[0]


def from_pt(path: str, obj: dict | None = None) -> VocabMap:
    """A SpecForge vocab mapping (cache/vocab_mapping/<hash>.pt): ``{"d2t": ..., "t2d": ...}``."""
    obj = _load_pt(path) if obj is None else obj
    if not is_map_dict(obj):
        raise WeightcheckError(path, "not a vocab mapping: expected a dict with d2t and t2d")
    d2t = _tensor_list(obj["d2t"], "d2t", path)
    vocab = len(_tensor_list(obj["t2d"], "t2d", path)) if obj.get("t2d") is not None else None
    return from_offsets(d2t, vocab, path)


def is_map_dict(obj) -> bool:
    """SpecForge's mapping: a dict holding d2t (and t2d), nothing else."""
    return isinstance(obj, dict) and "d2t" in obj and set(obj) <= {"d2t", "t2d"}


def from_npy(d2t_path: str, t2d_path: str | None) -> VocabMap:
    """A speculators pair: d2t.npy (int64 offsets) and t2d.npy (bool)."""
    import numpy as np

    def load(p):
        try:
            return np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise WeightcheckError(p, f"cannot read as .npy: {e}") from None

    d2t = load(d2t_path)
    if d2t.ndim != 1 or d2t.dtype.kind not in "iu":
        raise WeightcheckError(d2t_path, f"d2t is {d2t.dtype} {list(d2t.shape)}, not an int vector")
    vocab = None
    if t2d_path is not None and os.path.isfile(t2d_path):
        vocab = int(load(t2d_path).shape[0])
    return from_offsets(d2t.tolist(), vocab, d2t_path)


def load_map(spec: str, token: str | None = None, load_drafter=None) -> VocabMap:
    """``--training-vocab`` / ``--vocab-from``: a SpecForge .pt mapping (a pickle holding only d2t
    and t2d), a d2t.npy (t2d.npy beside it) or a folder holding them, else a drafter (folder,
    file — a pickled one included — or Hub id), through ``load_drafter``."""
    spec = str(spec)
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "d2t.npy")):
        return from_npy(os.path.join(spec, "d2t.npy"), os.path.join(spec, "t2d.npy"))
    if os.path.isfile(spec) and spec.endswith(".npy"):
        return from_npy(spec, os.path.join(os.path.dirname(spec), "t2d.npy"))
    if os.path.isfile(spec) and spec.endswith((".pt", ".pth")):
        obj = _load_pt(spec)
        if is_map_dict(obj):
            return from_pt(spec, obj)
    if load_drafter is None:
        from weightcheck.model.drafter import load_drafter
    m = from_drafter(load_drafter(spec, token=token))
    if m is None:
        raise WeightcheckError(spec, "no d2t, no lm_head and no vocab size: no vocabulary map")
    return m


# -- arithmetic ----------------------------------------------------------------------------------
def overlap(a: VocabMap, b: VocabMap) -> dict:
    """compare's ``vocab`` object: draft sizes, target ids in both draft vocabularies, draft ids
    at which both stand for the same target id."""
    shared = len(set(a.targets) & set(b.targets))
    same = sum(1 for x, y in zip(a.targets, b.targets) if x == y)
    return {
        "a_draft": a.size,
        "b_draft": b.size,
        "shared": shared,
        "same_index": same,
        "a_identity": a.identity,
        "b_identity": b.identity,
        "a_placeholder": a.placeholder,
        "b_placeholder": b.placeholder,
    }


@record(frozen=True)
class Reindex:
    """Where each row of the re-indexed lm_head comes from: ``rows[j]`` is ("src", i) — SRC's
    row i — or ("target", t) — the target head's row t."""

    rows: tuple[tuple[str, int], ...]
    kept: int  # SRC row j at row j
    moved: int  # SRC row i != j at row j
    from_target: int  # not in SRC's draft vocabulary

    def target_ids(self) -> list[int]:
        return [x for k, x in self.rows if k == "target"]


def reindex(src: VocabMap, ref: VocabMap) -> Reindex:
    idx = src.index()
    rows, kept, moved, tgt = [], 0, 0, 0
    for j, t in enumerate(ref.targets):
        i = idx.get(t)
        if i is None:
            rows.append(("target", t))
            tgt += 1
        else:
            rows.append(("src", i))
            if i == j:
                kept += 1
            else:
                moved += 1
    return Reindex(tuple(rows), kept, moved, tgt)


def misread_rows(src: VocabMap, training: VocabMap) -> int:
    """How many of SRC's head rows the training run's map would read as another token: the rows
    at draft ids where the two maps stand for different target ids (or that the map lacks)."""
    n = 0
    for j, t in enumerate(src.targets):
        if j >= training.size or training.targets[j] != t:
            n += 1
    return n


def runs(ids: list[int], gap: int, most: int) -> list[tuple[int, int]]:
    """Ranges [a, b) of rows covering the sorted unique ``ids``: neighbours closer than ``gap``
    rows share one read, a read spans at most ``most`` rows (or one row)."""
    out: list[tuple[int, int]] = []
    for x in sorted(set(ids)):
        if out and x - out[-1][1] < gap and x + 1 - out[-1][0] <= most:
            out[-1] = (out[-1][0], x + 1)
        else:
            out.append((x, x + 1))
    return out
