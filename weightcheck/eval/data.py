"""The trainers' offline hidden-state files, read one sample at a time (docs/eval.md §1).

SpecForge 0.2.0 (``scripts/prepare_hidden_states.py --enable-aux-hidden-states``): one file per
sample, ``rows_<a>-<b>/data_<i>.ckpt`` (``.ckpt.gz`` with ``--compress``), a ``torch.save``d dict
``input_ids`` [S] int64, ``loss_mask`` [S], ``aux_hidden_state`` [1, S, n_aux*T] and
``hidden_state`` [1, S, T] — the target's last hidden state *after* its final norm (SGLang's
logits processor input). speculators 0.9.0 (``speculators generate-offline-data``):
``hs_<i>.safetensors`` with ``token_ids`` [S] and ``hidden_states`` [S, n_aux+1, T], the last
slot the target's last layer output *before* its final norm; the loss mask stays in the
preprocessed Arrow dataset, the folder above ``hidden_states/``: its ``loss_mask`` column, row i
for ``hs_<i>`` (arrow.py reads it, without pyarrow), or every position counts when there is none.

Memory: a sample's tensors are read only when used: a SpecForge ``.ckpt``'s tensors are located
in the file (sources/torchzip.py, the one reader of a ``torch.save`` zip's index) and read
straight into a buffer when needed (the last hidden state without ``--target`` never is; a file
torchzip does not follow is memory-mapped by torch.load), speculators' file is read by slices.
stream.py reads files ahead into bounded buffers.
"""

from __future__ import annotations

import gzip
import io
import os
import re
from typing import Iterator

from weightcheck.errors import WeightcheckError
from weightcheck.record import record

SPECFORGE_SUFFIXES = (".ckpt", ".ckpt.gz")
SPECFORGE_KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")
SPECULATORS_KEYS = ("token_ids", "hidden_states")
_HS = re.compile(r"^hs_(\d+)\.safetensors$")


@record
class Sample:
    file: str  # the file it came from (relative to DATA), for messages
    input_ids: object  # LongTensor [S]
    # LongTensor [S] (0/1), where SpecForge's rule counts (metric.py): SpecForge's own mask;
    # speculators' shifted left once (its shift_batch aligns l[t+1] with column t), or all ones
    loss_mask: object
    aux: object  # [S, n_aux * T], not read until used (memory-mapped or a slice)
    last: object  # [S, T], likewise; None when not asked for (speculators)
    last_normed: bool  # True: after the target's final norm (SpecForge); False: before it
    n_aux: int | None = None  # known from the layout (speculators), else None
    hidden: int | None = None  # T, from the last hidden state's shape


@record
class Dataset:
    path: str
    format: str  # "specforge" | "speculators"
    files: list[str]  # absolute paths, in the producer's order
    note: str | None = None
    mask: str = (
        "file"  # where the loss mask is: "file" (SpecForge), "arrow" or "none" (speculators)
    )
    mask_from: str | None = None  # the Arrow dataset's folder (mask "arrow"), as DATA names it
    column: object = None  # arrow.ListColumn of loss_mask (mask "arrow")

    def label(self, f: str) -> str:
        """File ``f`` as messages name it: DATA's last folder and the path below it, or DATA
        itself when it is one file."""
        if not os.path.isdir(self.path):
            return self.path
        rel = os.path.relpath(f, self.path)
        return os.path.join(os.path.basename(self.path.rstrip("/")), rel) if rel != "." else f

    def samples(self, limit: int | None = None, need_last: bool = True) -> Iterator[Sample]:
        for i in range(len(self.files) if limit is None else min(limit, len(self.files))):
            yield self.sample(i, need_last)

    def sample(self, i: int, need_last: bool = True, direct: bool = False) -> Sample:
        """File ``i``'s sample (its last hidden state only when ``need_last``). ``direct``: a
        SpecForge ``.ckpt``'s hidden states as :class:`FileTensor` s, read straight into a buffer
        later (a file :func:`index_ckpt` does not index is read by torch.load)."""
        f = self.files[i]
        if self.format == "specforge":
            if direct and f.endswith(".ckpt"):
                s = _read_specforge_direct(f, self.label(f))
                if s is not None:
                    return s
            return _read_specforge(f, self.label(f))
        s = _read_speculators(f, self.label(f), need_last)
        if self.format == "speculators":
            s.loss_mask = self._speculators_mask(f, s)
        return s

    def _speculators_mask(self, f: str, s: Sample):
        """What SpecForge's rule counts by, from row i of the Arrow dataset's loss_mask for
        ``hs_<i>``: speculators' ``shift_batch`` drops position 0 of the mask (and of the targets)
        and keeps the hidden states' first S-1, so column t counts by ``loss_mask[t+1]``; the last
        column has no target (all ones without the dataset)."""
        import torch

        S = int(s.input_ids.shape[0])
        if self.column is None:
            return torch.ones(S, dtype=torch.long)
        col = self.column
        i = int(_HS.match(os.path.basename(f)).group(1))
        if i >= col.rows:
            raise WeightcheckError(
                s.file, f"no row {i} in the dataset {self.mask_from} ({col.rows} rows)"
            )
        raw, size = col.row(i)
        dt = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
        m = torch.frombuffer(bytearray(raw), dtype=dt) if raw else torch.zeros(0, dtype=dt)
        if m.numel() != S:
            raise WeightcheckError(
                s.file,
                f"token_ids has {S} positions, but row {i}'s loss_mask in {col.where(i)} has "
                f"{m.numel()}: the hidden states are not that row's",
            )
        out = torch.zeros(S, dtype=torch.long)
        out[: S - 1] = (m[1:] != 0).long()
        return out


def open_data(path: str, loss_mask: str | None = None) -> Dataset:
    """DATA: a SpecForge output folder (or one ``.ckpt``/``.ckpt.gz``), or a speculators
    hidden-states folder (``hs_<i>.safetensors``, or the preprocessed-data folder holding
    ``hidden_states/``). ``loss_mask``: speculators' preprocessed dataset whose ``loss_mask``
    column applies, where the files were moved away from it (``--loss-mask``)."""
    ds = _open_data(path, loss_mask)
    if loss_mask is not None and ds.format != "speculators":
        raise WeightcheckError(
            loss_mask,
            f"--loss-mask is for speculators' hs_<i>.safetensors: {path} is SpecForge's, whose "
            "files carry their own loss_mask",
        )
    return ds


def _open_data(path: str, loss_mask: str | None) -> Dataset:
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        raise WeightcheckError(path, "hidden-state data not found")
    if os.path.isfile(p):
        if p.endswith(SPECFORGE_SUFFIXES):
            return Dataset(p, "specforge", [os.path.abspath(p)])
        if _HS.match(os.path.basename(p)):
            hs_dir = os.path.dirname(os.path.abspath(p))
            return _speculators(p, hs_dir, [os.path.abspath(p)], loss_mask)
        raise WeightcheckError(
            path,
            "not a hidden-state file: expected SpecForge's data_<i>.ckpt[.gz] or "
            "speculators' hs_<i>.safetensors",
        )
    # SpecForge: every *.ckpt / *.ckpt.gz below, sorted by path (as its OfflineManifestReader
    # lists them: specforge/runtime/data_plane/offline_reader.py list_feature_files)
    sf = []
    for root, _dirs, names in os.walk(p):
        for n in names:
            if n.endswith(SPECFORGE_SUFFIXES):
                sf.append(os.path.abspath(os.path.join(root, n)))
    if sf:
        sf.sort()
        return Dataset(p, "specforge", sf)
    for d in (p, os.path.join(p, "hidden_states")):
        if os.path.isdir(d):
            hs = sorted(
                ((int(m.group(1)), n) for n in os.listdir(d) for m in [_HS.match(n)] if m),
            )
            if hs:
                files = [os.path.abspath(os.path.join(d, n)) for _, n in hs]
                return _speculators(p, d, files, loss_mask)
    raise WeightcheckError(
        path,
        "no hidden-state files: expected SpecForge's rows_*/data_<i>.ckpt[.gz] or speculators' "
        "hs_<i>.safetensors",
    )


def _speculators(path: str, hs_dir: str, files: list[str], given: str | None) -> Dataset:
    """speculators' files, with the loss mask of the Arrow dataset ``given`` (--loss-mask), else
    of the one in the folder above ``hs_dir`` (``PREPROCESSED/hidden_states/``) when it holds
    one."""
    from weightcheck.eval import arrow

    if given is not None:
        pre, shown = os.path.abspath(os.path.expanduser(given)), given
        if not os.path.isdir(pre):
            raise WeightcheckError(given, "--loss-mask: not a folder (speculators' preprocessed "
                                   "dataset, the folder that held hidden_states/)")  # fmt: skip
    else:
        pre = os.path.dirname(os.path.normpath(os.path.abspath(hs_dir)))
        shown = _as_given(path, pre)
    if not arrow.is_dataset(pre):
        if given is not None:
            raise WeightcheckError(given, "--loss-mask: not a datasets save (no state.json, "
                                   "dataset_dict.json or data-*.arrow)")  # fmt: skip
        note = (
            "speculators keeps the loss mask in its preprocessed Arrow dataset, not in "
            f"hs_<i>.safetensors, and {shown} holds none (no state.json): every position "
            "counts (--loss-mask names the dataset)"
        )
        return Dataset(path, "speculators", files, note, mask="none")
    col = arrow.ListColumn(pre, "loss_mask")
    note = f"the loss mask: the loss_mask column of {shown} ({col.type}, row i for hs_<i>)"
    return Dataset(path, "speculators", files, note, mask="arrow", mask_from=shown, column=col)


def _as_given(path: str, folder: str) -> str:
    """``folder`` named as DATA (``path``) names it: relative when DATA is relative."""
    if os.path.isabs(os.path.expanduser(path)):
        return folder
    rel = os.path.relpath(folder)
    return rel if not rel.startswith("..") else folder


# A producer writes each file in place (SpecForge: torch.save / gzip to the final name;
# speculators: a move that is a byte copy across filesystems), so a run stopped while writing
# leaves a file cut short under its final name — and SpecForge, run again, skips files that exist.
_CUT_SHORT = "cut short ({}): a run stopped while writing it? delete it and run the producer again"


def cut_short(path: str) -> str | None:
    """What shows ``path`` was not written to its end — no bytes, a ``.ckpt`` zip without its end
    record, a ``.safetensors`` file shorter than its header says — or None."""
    import zipfile

    try:
        size = os.path.getsize(path)
        if size == 0:
            return "0 bytes"
        with open(path, "rb") as f:
            head = f.read(8)
            if path.endswith(".ckpt") and head[:4] == b"PK\x03\x04":
                return None if zipfile.is_zipfile(path) else f"{size} bytes, no zip end record"
            if path.endswith(".safetensors"):
                return _safetensors_short(f, size)
    except OSError:
        return None
    return None


def _safetensors_short(f, size: int) -> str | None:
    import json
    import struct

    f.seek(0)
    head = f.read(8)
    if len(head) < 8:
        return f"{size} bytes"
    n = struct.unpack("<Q", head)[0]
    if n > 100_000_000:
        return None  # not a header's length: safetensors says what is wrong
    if size < 8 + n:
        return f"{size} bytes, its header alone is {8 + n}"
    try:
        header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    need = 8 + n + max(ends, default=0)
    return f"{size} of the {need} bytes its header describes" if size < need else None


def _unreadable(path: str, where: str, e: Exception) -> WeightcheckError:
    """The one line for a file its reader refused: cut short (:func:`cut_short`) when it is,
    else the reader's own words."""
    short = cut_short(path)
    if short is None and isinstance(e, EOFError):  # gzip: no end-of-stream marker
        short = "the gzip stream ends early"
    if short is not None:
        return WeightcheckError(where, _CUT_SHORT.format(short))
    text = " ".join(str(e).split())[:200]
    if "weights_only" in text or "GLOBAL" in text or "nsupported global" in text:
        text = "the pickle needs more than tensors to load, so it was not loaded"
    return WeightcheckError(where, f"cannot read: {type(e).__name__}: {text}")


def _torch_load(path: str, where: str) -> dict:
    import torch

    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read()
            obj = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # UnpicklingError, RuntimeError, OSError, EOFError, gzip errors
        raise _unreadable(path, where, e) from None
    if not isinstance(obj, dict):
        raise WeightcheckError(where, f"holds a {type(obj).__name__}, not a dict of tensors")
    return obj


def _need(obj: dict, keys, where: str, producer: str) -> None:
    missing = [k for k in keys if k not in obj]
    if missing:
        raise WeightcheckError(
            where,
            f"missing key(s) {', '.join(missing)} (a {producer} hidden-state file holds "
            f"{', '.join(keys)}; it has {', '.join(sorted(map(str, obj))) or 'none'})",
        )
    import torch

    for k in keys:
        if not isinstance(obj[k], torch.Tensor):
            raise WeightcheckError(where, f"{k} is a {type(obj[k]).__name__}, not a tensor")


def _squeeze_batch(t, key: str, where: str, ndim: int):
    if t.dim() == ndim + 1 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != ndim:
        raise WeightcheckError(where, f"{key} has shape {list(t.shape)}: expected {ndim} dims")
    return t


def _read_specforge(path: str, where: str) -> Sample:
    obj = _torch_load(path, where)
    _need(obj, SPECFORGE_KEYS, where, "SpecForge")
    ids = _squeeze_batch(obj["input_ids"], "input_ids", where, 1).long()
    mask = _squeeze_batch(obj["loss_mask"], "loss_mask", where, 1).long()
    aux = _squeeze_batch(obj["aux_hidden_state"], "aux_hidden_state", where, 2)
    last = _squeeze_batch(obj["hidden_state"], "hidden_state", where, 2)
    _same_length(where, input_ids=ids, loss_mask=mask, aux_hidden_state=aux, hidden_state=last)
    return Sample(where, ids, mask, aux, last, last_normed=True, hidden=int(last.shape[1]))


class FileTensor:
    """A contiguous tensor's bytes in a file, located by sources/torchzip.py (the one reader of
    a ``torch.save`` zip's index): ``shape``, ``dtype``; :meth:`read_into` a CPU tensor of that
    shape with one ``readinto``, :meth:`load` a new one."""

    def __init__(self, path: str, begin: int, dtype: str, shape):
        from weightcheck.sources.tensors import torch_dtype

        self.path, self.begin, self.st_dtype = path, begin, dtype  # torchzip's dtype name
        self.dtype = torch_dtype(dtype)
        self.shape = tuple(int(d) for d in shape)

    def squeeze0(self) -> FileTensor:
        """Without its leading axis of 1 (SpecForge's batch axis)."""
        return FileTensor(self.path, self.begin, self.st_dtype, self.shape[1:])

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def read_into(self, dst) -> None:
        """Fill ``dst`` (a contiguous CPU tensor of this shape) from the file: one read when the
        dtypes match, else through a temporary copy."""
        if dst.dtype != self.dtype or not dst.is_contiguous():
            dst.copy_(self.load())
            return
        import torch

        view = memoryview(dst.view(-1).view(torch.uint8).numpy()).cast("B")
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.begin)
            got = 0
            while got < len(view):
                n = f.readinto(view[got:])
                if not n:
                    raise OSError(f"file ends inside a tensor ({got} of {len(view)} bytes)")
                got += n

    def load(self):
        import torch

        out = torch.empty(self.shape, dtype=self.dtype)
        if self.numel():
            self.read_into(out)
        return out


def index_ckpt(path: str) -> dict | None:
    """A SpecForge ``.ckpt``'s top-level tensors as :class:`FileTensor` s, through
    sources/torchzip.py (no unpickling, no torch); None when it is not a layout read so (another
    pickle, a compressed or strided tensor, a state dict): torch.load reads it, or says what is
    wrong."""
    from weightcheck.sources import torchzip

    got = torchzip.read(path)
    if got is None:
        return None
    flat, key, _scalars, _top = got
    if key is not None or any(m.begin is None for m in flat.values()):
        return None
    return {k: FileTensor(path, m.begin, m.dtype, m.shape) for k, m in flat.items()}


def ckpt_ranges(path: str, skip=("hidden_state",)):
    """The byte ranges of a ``.ckpt``'s tensors but ``skip`` (what eval reads of it without the
    last hidden state), in order; None: the whole file."""
    idx = index_ckpt(path) if path.endswith(".ckpt") else None
    if idx is None:
        return None
    return sorted((t.begin, t.begin + t.nbytes) for k, t in idx.items() if k not in skip)


def _read_specforge_direct(path: str, where: str) -> Sample | None:
    """The sample with its hidden states left in the file (None: read it with torch.load)."""
    idx = index_ckpt(path)
    if idx is None or any(k not in idx for k in SPECFORGE_KEYS):
        return None
    shaped = {}
    for key, ndim in (("input_ids", 1), ("loss_mask", 1), ("aux_hidden_state", 2),
                      ("hidden_state", 2)):  # fmt: skip
        t = idx[key]
        if t.dim() == ndim + 1 and t.shape[0] == 1:
            t = t.squeeze0()
        if t.dim() != ndim:
            return None  # torch.load's reading says what is wrong
        shaped[key] = t
    ids = shaped["input_ids"].load().long()
    mask = shaped["loss_mask"].load().long()
    aux, last = shaped["aux_hidden_state"], shaped["hidden_state"]
    _same_length(where, input_ids=ids, loss_mask=mask, aux_hidden_state=aux, hidden_state=last)
    return Sample(where, ids, mask, aux, last, last_normed=True, hidden=int(last.shape[1]))


def _read_speculators(path: str, where: str, need_last: bool = True) -> Sample:
    """``hidden_states`` read by slices: the aux layers, and the last one when asked for."""
    import torch
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            keys = set(f.keys())
            missing = [k for k in SPECULATORS_KEYS if k not in keys]
            if missing:
                raise WeightcheckError(
                    where,
                    f"missing key(s) {', '.join(missing)} (a speculators hidden-state file holds "
                    f"{', '.join(SPECULATORS_KEYS)}; it has {', '.join(sorted(keys)) or 'none'})",
                )
            ids = _squeeze_batch(f.get_tensor("token_ids"), "token_ids", where, 1).long()
            sl = f.get_slice("hidden_states")
            shape = list(sl.get_shape())
            if len(shape) != 3 or shape[1] < 2:
                raise WeightcheckError(
                    where,
                    f"hidden_states has shape {shape}: expected [seq, n_aux + 1, hidden] "
                    "(the aux layers, then the last layer)",
                )
            aux = sl[:, : shape[1] - 1].flatten(1)
            last = sl[:, shape[1] - 1] if need_last else None
    except (SafetensorError, OSError, ValueError) as e:
        short = cut_short(path)
        if short is not None:
            raise WeightcheckError(where, _CUT_SHORT.format(short)) from None
        raise WeightcheckError(where, f"cannot read: {' '.join(str(e).split())[:200]}") from None
    if int(ids.shape[0]) != shape[0]:
        _same_length(where, token_ids=ids, hidden_states=aux)
    mask = torch.ones_like(ids)
    return Sample(
        where, ids, mask, aux, last, last_normed=False, n_aux=shape[1] - 1, hidden=shape[2]
    )


def _same_length(where: str, **tensors) -> None:
    lengths = {k: int(v.shape[0]) for k, v in tensors.items()}
    if len(set(lengths.values())) > 1:
        said = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise WeightcheckError(where, f"sequence lengths differ: {said}")
