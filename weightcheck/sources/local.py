"""Local sources: a folder, a sharded index, or a single weight file on disk."""

from __future__ import annotations

import os

from weightcheck.errors import WeightcheckError
from weightcheck.sources import layout
from weightcheck.sources.base import (
    MAX_INDEX_BYTES,
    Source,
    WeightFile,
    add_safetensors_file,
    finish_index,
    parse_index,
    read_config,
    read_json_file,
)
from weightcheck.sources.pickled import PICKLE_EXT, add_pickled_file
from weightcheck.storage.header import read_local_header


def _member_path(root: str, fname: object, where: str) -> str:
    """A file named by an index must stay inside the checkpoint folder: no absolute paths, no
    ``..``, no symlink leading out. Returns its path."""
    parts = layout.check_member(fname, where)
    full = os.path.join(root, *parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(full)
    if os.path.commonpath([real_root, real]) != real_root and not _in_hf_blobs(real_root, real):
        raise WeightcheckError(
            where, f"index names {fname!r}, a link leading out of the folder (to {real}): refused"
        )
    return full


def _in_hf_blobs(real_root: str, real: str) -> bool:
    """A Hugging Face cache snapshot (``<cache>/models--org--name/snapshots/<commit>/...``, what
    ``hf download`` prints) links every file to ``../../blobs/<hash>``: that ``blobs`` folder of the
    same repo belongs to the checkpoint, and nothing else outside it does."""
    d = real_root
    while True:
        parent = os.path.dirname(d)
        if parent == d:
            return False
        grand = os.path.dirname(parent)
        if os.path.basename(parent) == "snapshots" and os.path.basename(grand).startswith(
            ("models--", "datasets--", "spaces--")
        ):
            blobs = os.path.join(grand, "blobs")
            return os.path.dirname(real) == blobs
        d = parent


def _choose(root: str) -> layout.Layout:
    try:
        names = sorted(os.listdir(root))
    except OSError as e:  # e.g. a folder we may not list (another user's)
        raise WeightcheckError(root, f"cannot list the folder: {e.strerror or e}") from None
    chosen = layout.choose([n for n in names if os.path.isfile(os.path.join(root, n))])
    if chosen is not None:
        return chosen

    def _listing(sub):  # a hint only: a subfolder we may not list is skipped, not an error
        try:
            return os.listdir(sub)
        except OSError:
            return []

    subs = [
        n
        for n in names
        if os.path.isdir(os.path.join(root, n))
        and any(
            m in _listing(os.path.join(root, n))
            for m in ("model.safetensors", "model.safetensors.index.json", "training_state.pt")
        )
    ]
    hint = f"; checkpoints in subfolders: {', '.join(subs[:5])}" if subs else ""
    raise layout.not_a_checkpoint(root, hint)


def open_local(spec: str, path: str, only: set[str] | None = None) -> Source:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        src = Source(spec=spec, kind="folder", location=path)
        root = path
        chosen = _choose(root)
        src.layout, fnames, index_name = chosen.kind, list(chosen.files), chosen.index
    else:
        if not os.path.isfile(path):  # a FIFO or a device would block open() or never end
            raise WeightcheckError(path, "not a regular file (a pipe, socket or device): refused")
        src = Source(spec=spec, kind="file", location=path)
        root = os.path.dirname(path)
        base = os.path.basename(path)
        if base.endswith(".index.json"):
            index_name, fnames = base, []
            src.layout = "sharded safetensors" if "safetensors" in base else "sharded pickled"
        elif base.endswith(".safetensors"):
            index_name, fnames, src.layout = None, [base], "safetensors file"
        elif base.endswith(PICKLE_EXT):
            index_name, fnames, src.layout = None, [base], "pickled file"
        else:
            raise WeightcheckError(
                path, "not a checkpoint: expected a .safetensors, .bin, .pt file or a folder"
            )
    cfg_path = os.path.join(root, "config.json")
    if os.path.isfile(cfg_path):
        src.config = read_config(cfg_path)
        src.config_file = cfg_path

    weight_map = None
    paths = {f: os.path.join(root, f) for f in fnames}
    if index_name:
        ipath = os.path.join(root, index_name)
        src.index_file = ipath
        obj = read_json_file(ipath, "index", MAX_INDEX_BYTES)
        weight_map = parse_index(obj, ipath)
        if not weight_map:
            raise WeightcheckError(ipath, "index has an empty weight_map: it lists no tensors")
        src.index = obj
        fnames = layout.shards(weight_map, only)
        paths = {}
        for f in fnames:
            full = _member_path(root, f, ipath)
            if not os.path.isfile(full):
                raise WeightcheckError(ipath, f"index names shard {f!r}, which does not exist")
            paths[f] = full
    for f in fnames:
        full = paths[f]
        if f.endswith(".safetensors"):
            wf = WeightFile(
                name=f, format="safetensors", local_path=full, size=os.path.getsize(full)
            )
            add_safetensors_file(src, wf, read_local_header(full))
        else:
            wf = WeightFile(name=f, format="pickle", local_path=full, size=os.path.getsize(full))
            add_pickled_file(src, wf)
    finish_index(src, weight_map, index_name, only)
    return src
