"""What tests/engine/gen_kinds.py builds drafters from: a tensor with its role (GT), seeded new
bytes, values kept across dtypes, a transposed matrix, dotted config paths, and the files and the
shard index a drafter is written as."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import corpus

H, V, INTER, HD = corpus.H, corpus.V, corpus.INTER, 32
MAX_POS = 256
# bytes per element of every dtype the generator writes (map_dtype writes the maps as I32, I16,
# U32 and U8 too: a dtype missing here stops the whole run at writing its drafters)
_SIZE = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "I16": 2, "U32": 4, "U8": 1, "BOOL": 1}


@dataclass
class GT:
    """A tensor of a drafter being built: its name, bytes, role (the name it has in the SpecForge
    layout, ``midlayer.*``; ``buffer:*``, ``copy:*``, ``stale:*`` for the rest) and whether it holds
    trained values the served drafter must use."""

    name: str
    dtype: str
    shape: tuple
    data: bytes
    role: str
    trained: bool

    @property
    def nbytes(self) -> int:
        return len(self.data)


def _seed(*parts) -> int:
    return zlib.crc32(":".join(map(str, parts)).encode())


def new(name: str, dtype: str, shape, role: str, trained: bool, *seed) -> GT:
    t = corpus.new_tensor(name, dtype, tuple(shape), _seed(name, *seed))
    return GT(name, dtype, tuple(shape), t.data, role, trained)


# --- values ----------------------------------------------------------------------------------------


def _floats(t: GT) -> list[float]:
    n = len(t.data) // _SIZE[t.dtype]
    if t.dtype == "F32":
        return list(struct.unpack(f"<{n}f", t.data))
    if t.dtype == "F16":
        return list(struct.unpack(f"<{n}e", t.data))
    raw = bytearray(4 * n)  # BF16: the high half of an f32
    raw[2::4], raw[3::4] = t.data[0::2], t.data[1::2]
    return list(struct.unpack(f"<{n}f", bytes(raw)))


def _pack(vals: list[float], dtype: str) -> bytes:
    if dtype == "F32":
        return struct.pack(f"<{len(vals)}f", *vals)
    if dtype == "F16":
        return struct.pack(f"<{len(vals)}e", *(max(-65504.0, min(65504.0, v)) for v in vals))
    raw = struct.pack(f"<{len(vals)}f", *vals)  # BF16: truncate (exact for values from BF16)
    out = bytearray(2 * len(vals))
    out[0::2], out[1::2] = raw[2::4], raw[3::4]
    return bytes(out)


def retyped(t: GT, dtype: str) -> GT:
    """The same values in another floating dtype (what an export in another dtype writes)."""
    if t.dtype not in corpus.TORCH_DTYPE or t.dtype == dtype:
        return t
    return GT(t.name, dtype, t.shape, _pack(_floats(t), dtype), t.role, t.trained)


def transposed(t: GT) -> GT:
    r, c = t.shape
    s = _SIZE[t.dtype]
    rows = [t.data[i * c * s : (i + 1) * c * s] for i in range(r)]
    out = b"".join(rows[i][j * s : (j + 1) * s] for j in range(c) for i in range(r))
    return GT(t.name, t.dtype, (c, r), out, t.role, t.trained)


# --- config helpers --------------------------------------------------------------------------------


def cset(cfg: dict, path: str, value) -> None:
    node = cfg
    parts = path.split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


def cunset(cfg: dict, path: str) -> None:
    node = cfg
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.get(p)
        if not isinstance(node, dict):
            return
    node.pop(parts[-1], None)


def cget(cfg: dict, path: str, default=None):
    node = cfg
    for p in path.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node


def layout_files(g) -> tuple[list, dict | None]:
    """[(file name, tensors)] and the index (or None) the shards deviation asks for."""
    ts = list(g.tensors)
    if not g.shards:
        return [("model.safetensors", ts)], None
    n = g.shards["n"]
    per = -(-len(ts) // n)
    files = [
        (f"model-{i + 1:05d}-of-{n:05d}.safetensors", ts[i * per : (i + 1) * per]) for i in range(n)
    ]
    files = [(f, x) for f, x in files if x]
    mode = g.shards["index"]
    if mode == "none":
        return files, None
    wmap = {t.name: f for f, x in files for t in x}
    total = sum(t.nbytes for t in ts)
    meta: dict = {"total_size": total}
    if mode == "stale_total":
        meta["total_size"] = total * 2 + 4096
    elif mode == "no_total":
        meta = {}
    elif mode == "extra_meta":
        meta.update(total_parameters=sum(t.nbytes // _SIZE[t.dtype] for t in ts), format="pt")
    elif mode == "missing_file":
        last = files[-1][0]
        wmap = {k: v for k, v in wmap.items() if v != last}
    elif mode == "extra_entry":
        wmap["midlayer.self_attn.rotary_emb.inv_freq_old"] = files[0][0]
    elif mode == "wrong_shard" and len(files) > 1:  # an entry naming another shard it names
        wmap[files[0][1][0].name] = files[-1][0]
    elif mode == "unlisted" and len(files[0][1]) > 1:  # left out; its file named by the others
        wmap.pop(files[0][1][0].name)
    elif mode == "dup_tensor" and len(files) > 1:  # one tensor written into two shards
        files[-1] = (files[-1][0], files[-1][1] + [files[0][1][0]])
    return files, {"metadata": meta, "weight_map": dict(sorted(wmap.items()))}
