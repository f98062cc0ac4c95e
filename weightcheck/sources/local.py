"""Local sources: a folder, a sharded index, or a single weight file on disk."""

from __future__ import annotations

import os

from weightcheck.errors import WeightcheckError
from weightcheck.sources import layout
from weightcheck.sources.base import (
    MAX_INDEX_BYTES,
    Source,
    TensorRecord,
    WeightFile,
    add_safetensors_file,
    finish_index,
    parse_index,
    read_config,
    read_json_file,
)
from weightcheck.sources.pickled import PICKLE_EXT, add_pickled_file
from weightcheck.storage.header import read_local_header


def _files(root: str) -> list[str]:
    try:
        return [n for n in os.listdir(root) if os.path.isfile(os.path.join(root, n))]
    except OSError:
        return []


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


STATE_FILE = "training_state.pt"


def resolve_run_dir(root: str) -> tuple[str, str] | None:
    """A SpecForge run output folder -> (the checkpoint folder SpecForge resumes or warm-starts
    from, how it was picked), or None when ``root`` is none. As SpecForge 0.2.0 resolves it
    (specforge/training/checkpoint.py:322-375 CheckpointManager.resolve_resume_dir, called by
    specforge/training/model_loading.py:334-344): the one complete ``*-latest`` pointer; else the
    highest complete ``<run-id>-stepN`` of a single run; several runs are refused as SpecForge
    refuses them. A pointer leading out of the folder is refused."""
    import glob
    import re

    real_root = os.path.realpath(root)
    latest: dict[str, str] = {}
    for cand in sorted(glob.glob(os.path.join(glob.escape(root), "*-latest"))):
        real = os.path.realpath(cand)
        if os.path.commonpath([real_root, real]) != real_root:
            raise WeightcheckError(
                cand, f"a run pointer leading out of the folder (to {real}): refused"
            )
        if os.path.isfile(os.path.join(real, STATE_FILE)):
            latest.setdefault(real, os.path.basename(cand))
    if len(latest) > 1:
        raise WeightcheckError(
            root,
            f"a SpecForge run folder with {len(latest)} complete *-latest runs "
            f"({', '.join(sorted(latest.values()))}): SpecForge refuses to choose; give one "
            "checkpoint folder",
        )
    if latest:
        real, ptr = next(iter(latest.items()))
        return real, f"{ptr} -> {os.path.basename(real)}"
    by_run: dict[str, list[tuple[int, str]]] = {}
    for cand in glob.glob(os.path.join(glob.escape(root), "*-step*")):
        m = re.match(r"^(.+)-step(\d+)$", os.path.basename(cand))
        if m and os.path.isfile(os.path.join(cand, STATE_FILE)):
            by_run.setdefault(m.group(1), []).append((int(m.group(2)), cand))
    if not by_run:
        return None
    if len(by_run) > 1:
        raise WeightcheckError(
            root,
            f"a SpecForge run folder with checkpoints of {len(by_run)} runs "
            f"({', '.join(sorted(by_run))}): SpecForge refuses to choose; give one checkpoint folder",
        )
    step, path = max(next(iter(by_run.values())))
    return path, f"the highest step ({os.path.basename(path)}; no *-latest pointer)"


def _choose(root: str, config_only: bool = False) -> layout.Layout | None:
    try:
        names = sorted(os.listdir(root))
    except OSError as e:  # e.g. a folder we may not list (another user's)
        raise WeightcheckError(root, f"cannot list the folder: {e.strerror or e}") from None
    chosen = layout.choose([n for n in names if os.path.isfile(os.path.join(root, n))])
    if chosen is not None:
        return chosen
    if config_only and "config.json" in names:
        return None

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


def open_local(
    spec: str, path: str, only: set[str] | None = None, config_only: bool = False
) -> Source:
    path = os.path.abspath(path)
    picked = None
    if os.path.isdir(path) and layout.choose(_files(path)) is None:
        run = resolve_run_dir(path)
        if run is not None:  # a SpecForge run output folder: the checkpoint SpecForge picks
            path, how = run
            picked = f"SpecForge run folder: checkpoint {os.path.basename(path)} ({how})"
    if os.path.isdir(path):
        src = Source(spec=spec, kind="folder", location=path)
        if picked:
            src.notes.append(picked)
            src.picked = picked
        root = path
        chosen = _choose(root, config_only)
        if chosen is None:  # config only (a target read for its config)
            cfg_path = os.path.join(root, "config.json")
            src.config, src.config_file, src.layout = read_config(cfg_path), cfg_path, "config only"
            return src
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
            # a config.json (or any file beside the weights) names its folder: say so
            hint = f"; pass its folder: {root or '.'}" if base.endswith(".json") else ""
            raise WeightcheckError(
                path, f"not a checkpoint: expected a .safetensors, .bin, .pt file or a folder{hint}"
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
    if index_name and only is None and index_name.endswith(".safetensors.index.json"):
        _unread(src, root, set(fnames))
    finish_index(src, weight_map, index_name, only)
    return src


def _unread(src: Source, root: str, named: set) -> None:
    """The tensors of the folder's other .safetensors files: the engines list the folder's
    ``*.safetensors`` and keep those the index names (sglang 0.5.23 / vllm 0.32.0
    model_loader/weight_utils.py filter_duplicate_safetensors_files), so these are never read."""
    for f in sorted(_files(root)):
        if not f.endswith(".safetensors") or f in named:
            continue
        try:  # never a link leading out of the folder: it is not the checkpoint's
            header = read_local_header(_member_path(root, f, os.path.join(root, f)))
        except WeightcheckError:
            continue  # a file no engine opens need not be readable either
        for t in header.tensors.values():
            src.unread[t.name] = TensorRecord(
                t.name,
                t.dtype,
                t.shape,
                t.nbytes,
                f,
                header.data_start + t.begin,
                header.data_start + t.end,
            )
