"""Sources: one string argument -> a checkpoint's config and tensor index, without its weights.

SRC is
  * a Hub repo id ``org/name`` or ``org/name@revision`` (see weightcheck/hub.py),
  * a local folder: ``model.safetensors``, a sharded ``model.safetensors.index.json``,
    ``pytorch_model.bin`` (and its index), other ``*.safetensors``/``*.bin``/``*.pt`` files, or a
    SpecForge run folder holding ``training_state.pt`` (tensors under ``draft_state_dict``), or
  * a single ``.safetensors``, ``.bin`` or ``.pt`` file (its folder's config.json is used).

safetensors sources are indexed from headers alone (weightcheck/safetensors_header.py). Pickled
files are read only with ``torch.load(..., weights_only=True)`` and only when torch is installed.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field

from weightcheck.errors import WeightcheckError
from weightcheck.safetensors_header import TORCH_NAMES, Header, json_depth_ok, read_local_header

# config.json we accept (a real drafter config is a few KB; FORMATS.md §5 spirit)
MAX_CONFIG_BYTES = 10_000_000
MAX_INDEX_BYTES = 50_000_000
MAX_JSON_DEPTH = 64

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[\w.\-/]+))?$")


@dataclass
class WeightFile:
    name: str  # path relative to the source root, '/'-separated
    format: str  # safetensors | pickle
    local_path: str | None = None
    url: str | None = None
    size: int | None = None
    sha256: str | None = None  # content hash, when the Hub gives one (LFS)
    header: Header | None = None
    pickle_key: str | None = None  # e.g. "draft_state_dict" for training_state.pt


@dataclass
class TensorRecord:
    name: str
    dtype: str  # safetensors spelling (BF16, F32, I64, BOOL, ...)
    shape: tuple[int, ...]
    nbytes: int
    file: str  # WeightFile.name
    begin: int | None = None  # absolute byte range in the file (safetensors only)
    end: int | None = None


@dataclass
class Source:
    spec: str  # as given on the command line
    kind: str  # hub | folder | file
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
    hub: object | None = None  # weightcheck.hub.HubRepo for hub sources

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
        raise WeightcheckError(path, f"config.json is a JSON {type(cfg).__name__}, not an object")
    return cfg


def check_member_name(root: str, fname: object, where: str) -> str:
    """A file named by an index must stay inside the checkpoint folder: no absolute paths, no
    ``..``, no symlink leading out. Returns the resolved path."""
    if not isinstance(fname, str) or not fname:
        raise WeightcheckError(where, f"index names a file {fname!r} that is not a file name")
    if "\x00" in fname:  # os.path functions raise ValueError on it
        raise WeightcheckError(where, f"index names {fname!r}, which holds a NUL byte: refused")
    if os.path.isabs(fname) or fname.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", fname):
        raise WeightcheckError(where, f"index names an absolute path {fname!r}: refused")
    parts = re.split(r"[\\/]", fname)
    if ".." in parts:
        raise WeightcheckError(where, f"index names {fname!r}, which leaves the folder: refused")
    full = os.path.join(root, *parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(full)
    if os.path.commonpath([real_root, real]) != real_root and not _in_hf_blobs(real_root, real):
        raise WeightcheckError(where, f"index names {fname!r}, a link leading out of the folder "
                                      f"(to {real}): refused")
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
        if os.path.basename(parent) == "snapshots" and \
                os.path.basename(grand).startswith(("models--", "datasets--", "spaces--")):
            blobs = os.path.join(grand, "blobs")
            return os.path.dirname(real) == blobs
        d = parent


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
            raise WeightcheckError(wf.local_path or wf.url or wf.name,
                                   f"tensor {t.name!r} is also in {src.tensors[t.name].file}")
        src.tensors[t.name] = TensorRecord(t.name, t.dtype, t.shape, t.nbytes, wf.name,
                                           header.data_start + t.begin, header.data_start + t.end)


def finish_index(src: Source, weight_map: dict | None, index_name: str | None,
                 only: set | None) -> None:
    """After the shards are read: record index drift, or (a partial read for a target) keep the map."""
    if weight_map is None:
        return
    if only is None:
        check_index_against_headers(src, weight_map, index_name)
    else:
        src.__dict__["weight_map"] = weight_map


def check_index_against_headers(src: Source, weight_map: dict[str, str], where: str) -> None:
    """Record (not raise) drift between an index and the shards' own headers."""
    for name, fname in weight_map.items():
        rec = src.tensors.get(name)
        if rec is None:
            src.notes.append(f"index-missing-tensor: {where} maps {name!r} to {fname}, "
                             "which does not hold it")
        elif rec.file != fname:
            src.notes.append(f"index-wrong-shard: {where} maps {name!r} to {fname}, "
                             f"but it is in {rec.file}")
    for name, rec in src.tensors.items():
        if name not in weight_map:
            src.notes.append(f"index-unlisted-tensor: {rec.file} holds {name!r}, "
                             f"which {where} does not list")
    total = (src.index or {}).get("metadata", {}).get("total_size") \
        if isinstance((src.index or {}).get("metadata"), dict) else None
    if isinstance(total, int):
        actual = sum(r.nbytes for r in src.tensors.values())
        if total != actual:
            src.notes.append(f"index-total-size: {where} says total_size {total}, "
                             f"the shards hold {actual} bytes of tensors")


# ---------------------------------------------------------------------------------------------
# pickled checkpoints (torch)
_TORCH_DTYPES = {f"torch.{name}": st for st, name in TORCH_NAMES.items()}

# where trainers keep the drafter's tensors inside a pickled dict, in order of preference
_STATE_KEYS = ("draft_state_dict", "state_dict", "model_state_dict", "model", "module")


def load_pickled(path: str) -> tuple[dict, str | None]:
    """``torch.load(path, weights_only=True)`` -> (flat name -> tensor dict, the key used)."""
    try:
        import torch
    except ImportError:
        raise WeightcheckError(path, "a pickled checkpoint; reading it needs torch "
                                     "(pip install 'weightcheck[torch]'). It is read only with "
                                     "torch.load(weights_only=True), never unpickled otherwise") from None
    import warnings
    try:
        # torch warns on stderr (e.g. about the pickle protocol); the one-line error says enough
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as e:
                if "mmap" not in str(e):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, zipfile errors
        text = str(e).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        msg = f"{type(e).__name__}: {lines[0][:200]}" if lines else type(e).__name__
        if "weights_only" in text or "nsupported global" in text or "GLOBAL" in text:
            # the informative line names what the pickle wanted to call (e.g. posix.system)
            why = next((ln for ln in lines if "GLOBAL" in ln or "nsupported" in ln), lines[0])
            msg = ("refused: the pickle needs more than tensors to load, so it was not loaded "
                   f"(torch.load weights_only=True: {why[:200]})")
        raise WeightcheckError(path, f"cannot load pickled checkpoint: {msg}") from None
    key = None
    if isinstance(obj, dict):
        for k in _STATE_KEYS:
            if isinstance(obj.get(k), dict):
                obj, key = obj[k], k
                break
    if not isinstance(obj, dict):
        raise WeightcheckError(path, f"pickled checkpoint holds a {type(obj).__name__}, not a state dict")
    flat = {}

    def walk(prefix, d):
        for k, v in d.items():
            name = f"{prefix}{k}"
            if isinstance(v, torch.Tensor):
                flat[name] = v
            elif isinstance(v, dict):
                walk(name + ".", v)
    walk("", obj)
    if not flat:
        raise WeightcheckError(path, "pickled checkpoint holds no tensors")
    return flat, key


def add_pickled_file(src: Source, wf: WeightFile) -> None:
    tensors, key = load_pickled(wf.local_path)
    wf.pickle_key = key
    src.files[wf.name] = wf
    for name, t in tensors.items():
        if name in src.tensors:
            raise WeightcheckError(wf.local_path, f"tensor {name!r} is also in {src.tensors[name].file}")
        dtype = _TORCH_DTYPES.get(str(t.dtype), str(t.dtype).replace("torch.", "").upper())
        src.tensors[name] = TensorRecord(name, dtype, tuple(t.shape),
                                         t.numel() * t.element_size(), wf.name)


# ---------------------------------------------------------------------------------------------
# local sources
_PICKLE_EXT = (".bin", ".pt", ".pth")


def _choose_local_files(root: str) -> tuple[str, list[str], str | None]:
    """(layout, weight file names, index file name) for a folder."""
    try:
        names = sorted(os.listdir(root))
    except OSError as e:  # e.g. a folder we may not list (another user's)
        raise WeightcheckError(root, f"cannot list the folder: {e.strerror or e}") from None
    files = [n for n in names if os.path.isfile(os.path.join(root, n))]
    if "model.safetensors.index.json" in files:
        return "sharded safetensors", [], "model.safetensors.index.json"
    if "model.safetensors" in files:
        return "model.safetensors", ["model.safetensors"], None
    st = [n for n in files if n.endswith(".safetensors")]
    if st:
        return "safetensors", st, None
    if "pytorch_model.bin.index.json" in files:
        return "sharded pytorch_model.bin", [], "pytorch_model.bin.index.json"
    if "pytorch_model.bin" in files:
        return "pytorch_model.bin", ["pytorch_model.bin"], None
    if "training_state.pt" in files:
        return "SpecForge training_state.pt", ["training_state.pt"], None
    pk = [n for n in files if n.endswith(_PICKLE_EXT)]
    if pk:
        return "pickled", pk, None

    def _listing(sub):  # a hint only: a subfolder we may not list is skipped, not an error
        try:
            return os.listdir(sub)
        except OSError:
            return []
    subs = [n for n in names if os.path.isdir(os.path.join(root, n))
            and any(m in _listing(os.path.join(root, n))
                    for m in ("model.safetensors", "model.safetensors.index.json", "training_state.pt"))]
    hint = f"; checkpoints in subfolders: {', '.join(subs[:5])}" if subs else ""
    raise WeightcheckError(root, "not a checkpoint: no model.safetensors, "
                                 "model.safetensors.index.json, *.safetensors, pytorch_model.bin "
                                 f"or training_state.pt{hint}")


def open_local(spec: str, path: str, only: set[str] | None = None) -> Source:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        src = Source(spec=spec, kind="folder", location=path)
        root = path
        layout, fnames, index_name = _choose_local_files(root)
        src.layout = layout
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
        elif base.endswith(_PICKLE_EXT):
            index_name, fnames, src.layout = None, [base], "pickled file"
        else:
            raise WeightcheckError(path, "not a checkpoint: expected a .safetensors, .bin, .pt "
                                         "file or a folder")
    cfg_path = os.path.join(root, "config.json")
    if os.path.isfile(cfg_path):
        src.config = read_config(cfg_path)
        src.config_file = cfg_path

    weight_map = None
    if index_name:
        ipath = os.path.join(root, index_name)
        src.index_file = ipath
        obj = read_json_file(ipath, "index", MAX_INDEX_BYTES)
        weight_map = parse_index(obj, ipath)
        if not weight_map:
            raise WeightcheckError(ipath, "index has an empty weight_map: it lists no tensors")
        src.index = obj
        fnames = sorted(set(weight_map.values()))
        if only is not None:  # a target: read just the shards holding these tensors
            fnames = sorted({weight_map[n] for n in only if n in weight_map})
        for f in fnames:
            full = check_member_name(root, f, ipath)
            if not f.endswith((".safetensors",) + _PICKLE_EXT):
                raise WeightcheckError(ipath, f"index names {f!r}, which is not a .safetensors, "
                                              ".bin or .pt file: refused")
            if not os.path.isfile(full):
                raise WeightcheckError(ipath, f"index names shard {f!r}, which does not exist")
    for f in fnames:
        full = os.path.join(root, *re.split(r"[\\/]", f)) if index_name else os.path.join(root, f)
        if f.endswith(".safetensors"):
            wf = WeightFile(name=f, format="safetensors", local_path=full,
                            size=os.path.getsize(full))
            add_safetensors_file(src, wf, read_local_header(full))
        else:
            wf = WeightFile(name=f, format="pickle", local_path=full, size=os.path.getsize(full))
            add_pickled_file(src, wf)
    finish_index(src, weight_map, index_name, only)
    return src


def open_source(spec: str, revision: str | None = None, token: str | None = None,
                only: set[str] | None = None) -> Source:
    """Resolve SRC: an existing local path first, else a Hub repo id."""
    if not spec:
        raise WeightcheckError(None, "empty source")
    expanded = os.path.expanduser(spec)
    if os.path.exists(expanded):
        if revision:
            raise WeightcheckError(spec, "a revision was given for a local path")
        return open_local(spec, expanded, only)
    m = HUB_ID.match(spec)
    # a missing `dir/model.safetensors` is a mistyped path, not a Hub repo id
    looks_like_file = spec.endswith((".safetensors", ".json") + _PICKLE_EXT)
    if m and not spec.startswith((".", "/", "~")) and not looks_like_file:
        rev = m.group("rev")
        if rev and revision and rev != revision:
            raise WeightcheckError(spec, f"two revisions given: @{rev} and {revision}")
        from weightcheck import hub
        return hub.open_hub(spec, m.group("repo"), rev or revision, token, only)
    raise WeightcheckError(spec, "path not found (and not a Hub repo id of the form org/name[@revision])")
