"""The source model: a checkpoint's config and tensor index, whatever it was read from.

:class:`Source` is what every opener (local.py, hub.py) returns: its weight files, each tensor's
dtype, shape and byte range, the config and the index. The JSON readers and the index checks here
are shared by both openers.
"""

from __future__ import annotations

import json
import os
from dataclasses import field
from typing import Literal, Protocol

from weightcheck.errors import WeightcheckError, json_type
from weightcheck.record import record
from weightcheck.storage.header import MAX_JSON_DEPTH, Header, json_depth_ok

# config.json we accept (a real drafter config is a few KB)
MAX_CONFIG_BYTES = 10_000_000
MAX_INDEX_BYTES = 50_000_000

# where trainers keep the drafter's tensors inside a pickled dict, in order of preference
STATE_KEYS = ("draft_state_dict", "state_dict", "model_state_dict", "model", "module")


SourceKind = Literal["hub", "folder", "file"]
FileFormat = Literal["safetensors", "pickle"]


class Remote(Protocol):
    """Where a remote source's bytes come from (sources/hub.py's HubRepo)."""

    def download(self, fname: str) -> str: ...

    def read_range(self, fname: str, start: int, end: int) -> tuple[bytes, int | None]: ...


@record
class WeightFile:
    name: str  # path relative to the source root, '/'-separated
    format: FileFormat
    local_path: str | None = None
    url: str | None = None
    size: int | None = None
    sha256: str | None = None  # content hash, when the Hub gives one (LFS)
    header: Header | None = None
    pickle_key: str | None = None  # e.g. "draft_state_dict" for training_state.pt
    # a pickled dict's top-level scalars beside the state (training_state.pt: strategy, run_id,
    # global_step): read without torch (sources/torchzip.py) when the file allows
    pickle_meta: dict | None = None
    # set with pickle_key by both readers: the top-level entries of the pickled dict, in order —
    # what the engines see (they iterate torch.load(file).items(), never under pickle_key)
    pickle_top: tuple[str, ...] | None = None


@record
class TensorRecord:
    name: str
    dtype: str  # safetensors spelling (BF16, F32, I64, BOOL, ...)
    shape: tuple[int, ...]
    nbytes: int
    file: str  # WeightFile.name
    # absolute byte range in the file (safetensors; a torch zip's stored, contiguous tensor)
    begin: int | None = None
    end: int | None = None


@record
class Source:
    spec: str  # as given on the command line
    kind: SourceKind
    location: str  # repo id or absolute path
    layout: str = ""  # what kind of checkpoint: "model.safetensors", "sharded safetensors", ...
    revision: str | None = None
    commit: str | None = None
    config: dict | None = None
    config_file: str | None = None
    files: dict[str, WeightFile] = field(default_factory=dict)
    tensors: dict[str, TensorRecord] = field(default_factory=dict)
    index: dict | None = None
    index_file: str | None = None
    notes: list[str] = field(default_factory=list)  # non-fatal findings (index drift, ...)
    # a SpecForge run output folder: which checkpoint was picked and how (sources/local.py)
    picked: str | None = None
    hub: Remote | None = None  # sources/hub.py's HubRepo for hub sources
    # a partial read (a target: only the shards holding the tensors asked for) keeps the index's
    # map, so a later read can find a tensor in a shard not read yet
    weight_map: dict[str, str] | None = None
    # pickled files' tensors once loaded for their bytes (sources/tensors.py), by file name
    pickle_cache: dict[str, dict] = field(default_factory=dict, repr=False)
    # a planned output not written yet (convert's gate): tensor name -> (the source, its name
    # there, the byte offset there: a fused tensor's part) whose bytes it will hold, read from there (sources/tensors.py read_range)
    planned_from: dict[str, tuple] = field(default_factory=dict, repr=False)
    # a Hub repo's top-level file names (its listing); None for a local source (read the folder)
    listing: tuple[str, ...] | None = None
    # how the engine will be given this source (its model path: a folder as typed, a Hub id),
    # when not as given here (check --served-as): SGLang picks a config parser from it
    served_as: str | None = None
    # tensors of weight files in the folder that a safetensors index names no tensor of: the
    # engines open only the files the index names (SGLang and vLLM filter_duplicate_safetensors_
    # files), so these are never read; kept apart from ``tensors`` (docs/differential.md R31)
    unread: dict[str, TensorRecord] = field(default_factory=dict)
    # a tensor name in two weight files: the earlier files' records (``tensors`` keeps the later
    # one, the copy the engines keep), so their bytes can be compared (WC210)
    shadowed: dict[str, list[TensorRecord]] = field(default_factory=dict, repr=False)

    def engine_path(self) -> str:
        """The model path as the engine sees it: ``--served-as`` when given, else a Hub id, else
        the folder or file as given on the command line."""
        if self.served_as:
            return self.served_as
        return self.location if self.kind == "hub" else self.spec

    def has_file(self, fname: str) -> bool | None:
        """Whether the checkpoint folder (or Hub repo) holds ``fname`` at its top; None: unknown."""
        if self.kind == "hub":
            return None if self.listing is None else fname in self.listing
        folder = self.location if os.path.isdir(self.location) else os.path.dirname(self.location)
        return os.path.isfile(os.path.join(folder, fname))

    @property
    def label(self) -> str:
        """How messages and outputs name this source: a Hub id as given, a local one by its file
        or folder name only (no path of the machine that read it)."""
        return self.spec if self.kind == "hub" else os.path.basename(self.location.rstrip("/\\"))

    def local_path(self, fname: str) -> str:
        """A local path to a weight file, downloading it through the HF cache for Hub sources."""
        wf = self.files[fname]
        if wf.local_path is None:
            wf.local_path = self.hub.download(fname)
        return wf.local_path


# ---------------------------------------------------------------------------------------------
def read_json_file(path: str, what: str, limit: int) -> object:
    try:
        size = os.path.getsize(path)
        if size > limit:
            raise WeightcheckError(path, f"{what} is {size} bytes, more than the {limit} we accept")
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise WeightcheckError(path, f"cannot read {what}: {e.strerror or e}") from None
    return parse_json(raw, path, what)


def parse_json(raw: bytes, where: str, what: str) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WeightcheckError(where, f"{what} is not UTF-8 text") from None
    if not json_depth_ok(text):
        raise WeightcheckError(where, f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise WeightcheckError(where, f"{what} is not valid JSON ({e})") from None


def read_config(path: str) -> dict:
    cfg = read_json_file(path, "config.json", MAX_CONFIG_BYTES)
    if not isinstance(cfg, dict):
        raise WeightcheckError(path, f"config.json is {json_type(cfg)}, not an object")
    return cfg


def parse_index(obj: object, where: str) -> dict[str, str]:
    if not isinstance(obj, dict) or not isinstance(obj.get("weight_map"), dict):
        raise WeightcheckError(where, "index has no weight_map object")
    wm = obj["weight_map"]
    for k, v in wm.items():
        if not isinstance(v, str):
            raise WeightcheckError(where, f"weight_map[{k!r}] is not a file name")
    return wm


def add_safetensors_file(src: Source, wf: WeightFile, header: Header) -> None:
    wf.header = header
    src.files[wf.name] = wf
    for t in header.tensors.values():
        if t.name in src.tensors:
            note_duplicate(src, t.name, wf.name)
        src.tensors[t.name] = TensorRecord(
            t.name,
            t.dtype,
            t.shape,
            t.nbytes,
            wf.name,
            header.data_start + t.begin,
            header.data_start + t.end,
        )


def note_duplicate(src: Source, name: str, later: str) -> None:
    """A tensor name in two weight files: SGLang and vLLM both load every file in order and keep
    the later file's copy (sglang 0.5.23 model_loader/weight_utils.py, vllm 0.32.0
    model_loader/weight_utils.py: files in sorted order, each tensor handed to load_weights), so
    the record kept is the later one, and the note says so (WC210)."""
    src.shadowed.setdefault(name, []).append(src.tensors[name])
    src.notes.append(
        f"index-duplicate-tensor: {name} is in {src.tensors[name].file} and in {later}: the "
        f"engines load both and keep {later}'s (the later file)"
    )


def finish_index(
    src: Source, weight_map: dict | None, index_name: str | None, only: set | None
) -> None:
    """After the shards are read: record index drift, or (a partial read for a target) keep the map."""
    if weight_map is None:
        return
    if only is None:
        check_index_against_headers(src, weight_map, index_name)
    else:
        src.weight_map = weight_map


def check_index_against_headers(src: Source, weight_map: dict[str, str], where: str) -> None:
    """Record (not raise) drift between an index and the shards' own headers. The engines read
    only which FILES the index names and then every tensor those files hold (sglang 0.5.23 /
    vllm 0.32.0 model_loader/weight_utils.py filter_duplicate_safetensors_files, then
    safetensors_weights_iterator): an entry naming another shard, or no shard holding it, and a
    tensor the map leaves out of a file it names change nothing loaded (docs/differential.md
    R30); a file it names no tensor of is never opened (``Source.unread``, R31)."""
    for name, fname in weight_map.items():
        rec = src.tensors.get(name)
        if rec is None:
            src.notes.append(
                f"index-missing-tensor: {where} maps {name} to {fname}, which does not hold it"
            )
        elif rec.file != fname:
            src.notes.append(
                f"index-wrong-shard: {where} maps {name} to {fname}, but it is in {rec.file}"
            )
    for name, rec in src.tensors.items():
        if name not in weight_map:
            src.notes.append(
                f"index-unlisted-tensor: {rec.file} holds {name}, which {where} does not list"
            )
    files: dict[str, list[str]] = {}
    for name, rec in src.unread.items():
        files.setdefault(rec.file, []).append(name)
    for fname, names in sorted(files.items()):
        src.notes.append(
            f"index-unread-file: {where} names no tensor of {fname}, which holds "
            f"{len(names)} tensor(s) ({', '.join(sorted(names)[:4])}"
            f"{', ...' if len(names) > 4 else ''}): the engines never open it"
        )
    total = (
        (src.index or {}).get("metadata", {}).get("total_size")
        if isinstance((src.index or {}).get("metadata"), dict)
        else None
    )
    if isinstance(total, int):
        actual = sum(r.nbytes for r in src.tensors.values())
        if total != actual:
            src.notes.append(
                f"index-total-size: {where} says total_size {total}, the shards hold {actual} "
                "bytes of tensors; no engine reads total_size (both choose the files by "
                "weight_map), so nothing served changes"
            )
