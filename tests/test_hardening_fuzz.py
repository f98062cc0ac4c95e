"""Hardening, part 1: the malformed-input corpus's missing cases and property-based fuzzing.

Extends tests/test_bad_input.py (its MALFORMED list and two hypothesis tests are not repeated):

* corpus gaps: nesting just past the header's depth limit and inside strings, a 50 MB and a
  10,000-deep config.json, zero-size tensors sharing offsets (decided by what the safetensors
  library itself does), ``../../etc/passwd`` and NUL bytes in an index, an HF cache snapshot
  whose shards are links into ``../../blobs``, a FIFO, a revision that walks out of the cache;
* fuzzing with a fixed budget (``derandomize=True``: the same examples on every run):
  (a) the header reader on mutated real headers, byte-level and structural, checked against the
      safetensors library whenever we accept; (b) the index reader, with every file it opens
      audited; (c) the source resolver on fuzzed SRC strings, offline and with a dead endpoint.

Each fuzz test prints how many examples ran (``pytest -s``; the totals are in docs/reliability.md)
and fails if fewer than its floor ran.
"""

from __future__ import annotations

import json
import os
import signal
import struct

import pytest
import stress
import synth
from conftest import run_cli, run_subprocess
from helpers.bad_input import entry, one_error_line, st_bytes, tiny_st, write_bytes
from helpers.hardening import OpenAudit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from weightcheck.errors import WeightcheckError
from weightcheck.sources import open_source
from weightcheck.sources.base import MAX_CONFIG_BYTES
from weightcheck.sources.local import open_local
from weightcheck.storage.header import DTYPE_BITS, MAX_JSON_DEPTH, parse_header, read_local_header
from weightcheck.storage.writer import header_bytes

FUZZ_COUNTS: dict[str, int] = {}


def fuzz_settings(n: int):
    """``n`` examples under ``-m stress``, a fifth by default; always the same examples."""
    return settings(
        max_examples=stress.count(n, n // 5),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def _report(name: str, n: int, minimum: int) -> None:
    minimum = stress.count(minimum, minimum // 5)
    FUZZ_COUNTS[name] = n
    print(f"\nfuzz {name}: {n} examples")
    assert n >= minimum, f"{name}: only {n} examples ran"


class Hang(BaseException):
    """Not an Exception (TimeoutError is an OSError, which the code under test handles)."""


class _Watchdog:
    """A hang (e.g. open() on a FIFO) fails the test instead of stalling the suite."""

    def __init__(self, seconds: int):
        self.seconds = seconds

    def _fire(self, *_):
        raise Hang(f"no answer within {self.seconds} s: something blocked")

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._fire)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


def library_view(path) -> dict:
    """name -> (dtype, shape) as the safetensors library reads the file (headers only)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        out = {}
        for k in f.keys():
            sl = f.get_slice(k)
            out[k] = (sl.get_dtype(), tuple(sl.get_shape()))
        return out


# =============================================================================================
# corpus gaps
def _nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


HEADER_NESTING = [
    # (id, header bytes, fragment): the limit is MAX_JSON_DEPTH (64); a real header is 3 deep
    (
        "shape-nested-65",
        b'{"a":{"dtype":"F32","shape":' + _nested(63) + b',"data_offsets":[0,4]}}',
        "nested deeper",
    ),
    ("metadata-nested-65", b'{"__metadata__":{"k":' + _nested(64) + b"}}", "nested deeper"),
    ("objects-nested-65", b'{"a":' * 65 + b"1" + b"}" * 65, "nested deeper"),
    # at the limit: parsed (no RecursionError), then refused for what it is
    (
        "shape-nested-64",
        b'{"a":{"dtype":"F32","shape":' + _nested(61) + b',"data_offsets":[0,4]}}',
        "shape must be a list of integers",
    ),
    ("metadata-nested-64", b'{"__metadata__":{"k":' + _nested(62) + b"}}", "__metadata__"),
    ("closing-brackets-only", b"]" * 100_000, "not valid JSON"),
]


@pytest.mark.parametrize("name,raw,fragment", HEADER_NESTING, ids=[c[0] for c in HEADER_NESTING])
def test_header_nesting_around_the_limit(tmp_path, name, raw, fragment):
    path = write_bytes(tmp_path / f"{name}.safetensors", st_bytes(raw, b"\0" * 4))
    one_error_line(run_cli("inspect", path), fragment, where=path)


def test_brackets_inside_strings_are_not_nesting(tmp_path):
    """The depth pre-check skips strings: a tensor named with 10,000 '[' is a valid file."""
    name = "[" * 10_000 + "{" * 10
    path = write_bytes(
        tmp_path / "x.safetensors",
        st_bytes({name: entry("F32", [1], 0, 4), "__metadata__": {"k": "]" * 500}}, b"\0" * 4),
    )
    hdr = read_local_header(path)
    assert list(hdr.tensors) == [name] and hdr.metadata == {"k": "]" * 500}
    assert library_view(path) == {name: ("F32", (1,))}
    assert MAX_JSON_DEPTH == 64


def test_config_json_of_50_mb_is_refused_without_reading_it(tmp_path):
    tiny_st(tmp_path / "model.safetensors")
    cfg = tmp_path / "config.json"
    with open(cfg, "wb") as f:  # valid JSON, 50 MB
        f.write(b'{"pad": "')
        f.write(b"x" * (50_000_000 - 11))
        f.write(b'"}')
    assert cfg.stat().st_size == 50_000_000 > MAX_CONFIG_BYTES
    with OpenAudit() as audit:
        r = run_cli("inspect", tmp_path)
    one_error_line(r, "50000000 bytes", "more than", where=cfg)
    assert str(cfg) not in [p for p, _ in audit.opened], "the 50 MB config was opened"
    cfg.unlink()  # not kept in pytest's retained tmp folders


@pytest.mark.parametrize("layout", ["folder", "file"])
def test_config_json_nested_10000_deep_lists(tmp_path, layout):
    """test_bad_input has 20,000-deep objects; lists inside a real field, and in a real process
    (where a RecursionError would surface as a traceback)."""
    st_path = tiny_st(tmp_path / "model.safetensors")
    cfg = write_bytes(tmp_path / "config.json", b'{"rope_scaling": ' + _nested(10_000) + b"}")
    target = tmp_path if layout == "folder" else st_path
    one_error_line(run_cli("inspect", target), "nested deeper", where=cfg)
    one_error_line(run_subprocess("inspect", target, "--json"), "nested deeper", where=cfg)


def test_index_nested_10000_deep_in_weight_map(tmp_path):
    tiny_st(tmp_path / "model-00001-of-00001.safetensors")
    idx = write_bytes(
        tmp_path / "model.safetensors.index.json",
        b'{"weight_map": {"a": ' + _nested(10_000, b'"x"') + b"}}",
    )
    one_error_line(run_cli("inspect", tmp_path), "nested deeper", where=idx)


# --- zero-size tensors sharing offsets: we follow the safetensors library ----------------------
def _z(begin, shape=(0,)):
    return entry("F32", shape, begin, begin)


A4 = entry("F32", [1], 0, 4)
ZERO_SIZE = [
    # (id, header, data bytes): the library's rule (Metadata::validate): entries sorted by
    # (begin, end) must tile the buffer, so an empty tensor may sit at any tensor boundary,
    # shared with as many other empty tensors as you like, but not inside a tensor or past the end
    ("two-empty-at-0-then-a", {"z1": _z(0), "z2": _z(0), "a": A4}, 4),
    ("a-then-empty-at-end", {"a": A4, "z": _z(4)}, 4),
    ("empty-between-two", {"a": A4, "z": _z(4), "b": entry("F32", [1], 4, 8)}, 8),
    (
        "100-empty-at-one-boundary",
        {**{f"z{i}": _z(4) for i in range(100)}, "a": A4, "b": entry("F32", [1], 4, 8)},
        8,
    ),
    ("empty-0x5-at-end", {"a": A4, "z": _z(4, (0, 5))}, 4),
    ("only-empty-tensors", {"z": _z(0), "y": _z(0, (3, 0))}, 0),
    ("empty-inside-a-tensor", {"a": A4, "z": _z(2)}, 4),
    ("empty-past-the-end", {"a": A4, "z": _z(8)}, 4),
    ("lone-empty-at-4", {"z": _z(4)}, 4),
    ("empty-shape-with-bytes", {"z": entry("F32", [0], 0, 4)}, 4),
]


def _library_accepts(path) -> bool:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            for k in f.keys():
                f.get_tensor(k)
        return True
    except Exception:
        return False


@pytest.mark.parametrize("name,header,ndata", ZERO_SIZE, ids=[c[0] for c in ZERO_SIZE])
def test_zero_size_tensors_follow_the_safetensors_library(tmp_path, name, header, ndata):
    path = write_bytes(tmp_path / f"{name}.safetensors", st_bytes(header, b"\0" * ndata))
    lib = _library_accepts(path)
    r = run_cli("inspect", path, "--json")
    if lib:
        assert r.exit_code == 0, r
        assert {t["name"] for t in r.json["tensors"]} == set(header)
        assert {k: v[1] for k, v in library_view(path).items()} == {
            k: tuple(v["shape"]) for k, v in header.items()
        }
    else:
        one_error_line(r, where=path)
    # the table above is not vacuous: both outcomes occur
    assert lib == (
        name
        not in {
            "empty-inside-a-tensor",
            "empty-past-the-end",
            "lone-empty-at-4",
            "empty-shape-with-bytes",
        }
    )


# --- index names ------------------------------------------------------------------------------
def _index(folder, weight_map):
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


@pytest.mark.parametrize(
    "fname,fragment",
    [
        (
            "../../etc/passwd",
            "leaves the folder",
        ),  # no .safetensors suffix: refused for leaving first
        ("sub/../../../etc/passwd", "leaves the folder"),
        ("model\x00.safetensors", "NUL byte"),
        ("../../etc/passwd\x00.safetensors", "NUL byte"),
    ],
)
def test_index_escapes_and_nul_bytes(tmp_path, fname, fragment):
    folder = tmp_path / "a" / "b" / "ckpt"
    folder.mkdir(parents=True)
    tiny_st(folder / "model-00001-of-00001.safetensors")
    idx = _index(folder, {"a": "model-00001-of-00001.safetensors", "b": fname})
    with OpenAudit() as audit:
        r = run_cli("inspect", folder)
    one_error_line(r, "refused", fragment, where=idx)
    assert not audit.outside(folder), audit.outside(folder)


def _hf_snapshot(tmp_path, repo="models--org--d", link_to=None):
    """A sharded checkpoint laid out like the HF cache: snapshots/<sha>/x -> ../../blobs/<hash>."""
    root = tmp_path / "hub" / repo
    snap = root / "snapshots" / ("a" * 40)
    (root / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    for i, n in enumerate(names):
        tiny_st(root / "blobs" / f"blob{i}", names=(f"t{i}",))
        os.symlink(f"../../blobs/blob{i}", snap / n)
    if link_to is not None:
        os.unlink(snap / names[1])
        os.symlink(link_to, snap / names[1])
    wm = {"t0": names[0], "t1": names[1]}
    (root / "blobs" / "idx").write_text(json.dumps({"weight_map": wm}))
    os.symlink("../../blobs/idx", snap / "model.safetensors.index.json")
    return snap


def test_hf_cache_snapshot_with_linked_shards_is_read(tmp_path):
    """What `hf download` prints is a snapshot folder whose files link to ../../blobs/<hash>: those
    links leave the snapshot folder but stay in the same repo's blobs. (Was refused as 'a link
    leading out of the folder' -- fixed in sources.check_member_name.)"""
    snap = _hf_snapshot(tmp_path)
    with OpenAudit() as audit:
        r = run_cli("inspect", snap, "--json")
    assert r.exit_code == 0, r
    assert {t["name"] for t in r.json["tensors"]} == {"t0", "t1"}
    assert not audit.outside(snap.parent.parent), audit.outside(snap.parent.parent)


@pytest.mark.parametrize("where", ["other-repo-blobs", "outside"])
def test_hf_cache_snapshot_links_elsewhere_are_still_refused(tmp_path, where):
    target = tmp_path / "elsewhere" / "x.safetensors"
    if where == "other-repo-blobs":
        target = tmp_path / "hub" / "models--evil--x" / "blobs" / "x"
    tiny_st(target, names=("t1",))
    snap = _hf_snapshot(tmp_path, link_to=target)
    with OpenAudit() as audit:
        r = run_cli("inspect", snap)
    one_error_line(r, "link leading out of the folder", "refused")
    assert str(target) not in [os.path.realpath(p) for p, _ in audit.opened]


def test_fifo_given_as_the_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    r = run_subprocess("inspect", fifo, timeout=30)  # it used to block in open() forever
    one_error_line(r, "not a regular file", where=fifo)


@pytest.mark.parametrize("which", ["the folder", "a subfolder"])
def test_folders_we_may_not_list(tmp_path, monkeypatch, which):
    """Another user's folder: os.listdir raises PermissionError (simulated here, since root may
    list everything). It used to escape as an internal error."""
    run = tmp_path / "run"
    (run / "secret").mkdir(parents=True)
    tiny_st(run / "step1" / "model.safetensors")
    blocked = run if which == "the folder" else run / "secret"
    real = os.listdir

    def listdir(p="."):
        if os.path.abspath(p) == str(blocked):
            raise PermissionError(13, "Permission denied", str(p))
        return real(p)

    monkeypatch.setattr(os, "listdir", listdir)
    r = run_cli("inspect", run)
    if which == "the folder":
        one_error_line(r, "cannot list the folder", "Permission denied", where=run)
    else:  # the hint skips what it cannot list and still names the readable checkpoint
        one_error_line(r, "not a checkpoint", "subfolders: step1", where=run)


@pytest.mark.parametrize(
    "args",
    [
        ("org/name@../../../../etc",),
        ("org/name", "--revision", "../../x"),
        ("org/name", "--revision", "refs/../../x"),
        ("org/name", "--revision", "/etc/passwd"),
    ],
)
@pytest.mark.parametrize("offline", [True, False])
def test_revision_cannot_walk_out_of_the_cache(tmp_path, monkeypatch, args, offline):
    """A revision is a path component in our caches (refs/<revision>): '..' is refused before any
    file is opened or request sent (git refs never contain '..')."""
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with OpenAudit() as audit:
        r = run_cli("inspect", *args)
    one_error_line(r, "not a valid revision", "refused")
    assert not audit.outside(), audit.outside()  # no data file at all, let alone a ref


# =============================================================================================
# (a) the header reader, fuzzed
@pytest.fixture(scope="module")
def real_header():
    """A real drafter header (the tiny Kimi-K2 SpecForge drafter, as synth writes it)."""
    from conftest import K2, load_config

    cfg = synth.scaled_config(load_config(K2))
    tensors = synth.drafter_tensors(cfg)
    blob = header_bytes(tensors, {"format": "pt"})
    data_len = sum(t.nbytes for t in tensors)
    return blob, data_len


def _write_sparse(path, head: bytes, total: int) -> None:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(max(total, len(head)))


def _check_accepted(path, hdr) -> None:
    """What we accept tiles the buffer and is what the safetensors library reads."""
    pos = 0
    for t in sorted(hdr.tensors.values(), key=lambda t: (t.begin, t.end)):
        assert t.begin == pos
        pos = t.end
    assert hdr.data_start + pos == os.path.getsize(path)
    assert library_view(path) == {n: (t.dtype, t.shape) for n, t in hdr.tensors.items()}


_BYTE_OP = st.tuples(
    st.sampled_from(["set", "insert", "delete", "truncate", "duplicate"]),
    st.floats(0, 1, allow_nan=False),
    st.sampled_from(list(b'{}[]",:0123456789-+.eE \\u\x00\xff') + [0x7F, 0x80])
    | st.integers(0, 255),
)


def _apply_bytes(blob: bytes, ops) -> bytes:
    b = bytearray(blob)
    for kind, where, val in ops:
        i = min(len(b), int(where * len(b)))
        if kind == "set" and i < len(b):
            b[i] = val
        elif kind == "insert":
            b[i:i] = bytes([val])
        elif kind == "delete":
            del b[i : i + 1 + val % 8]
        elif kind == "truncate":
            del b[i:]
        elif kind == "duplicate":
            b[i:i] = b[i : i + 1 + val % 64]
    return bytes(b)


@pytest.mark.stress
def test_fuzz_header_byte_mutations(tmp_path, real_header):
    """(a) bytes: a real header mutated byte by byte (the 8-byte length kept right or mutated
    too), read from a file of a fuzzed size: only WeightcheckError; whatever is accepted agrees
    with the safetensors library."""
    blob, data_len = real_header
    n = [0]
    accepted = [0]

    @fuzz_settings(1500)
    @given(st.lists(_BYTE_OP, min_size=1, max_size=6), st.booleans(), st.integers(-9, 9))
    # a harmless mutation whatever hypothesis draws: one more space of padding after the JSON
    @example([("insert", 1.0, 0x20)], True, 0)
    def prop(ops, fix_length, size_delta):
        n[0] += 1
        if fix_length:
            raw = _apply_bytes(blob[8:], ops)
            head = struct.pack("<Q", len(raw)) + raw
        else:
            head = _apply_bytes(blob, ops)
        path = tmp_path / "f.safetensors"
        _write_sparse(path, head, len(head) + data_len + size_delta)
        try:
            hdr = read_local_header(path)
        except WeightcheckError as e:
            assert e.where == str(path) and "\n" not in e.line()
        else:
            accepted[0] += 1
            _check_accepted(path, hdr)

    prop()
    _report("header-bytes", n[0], 1200)
    assert accepted[0] > 0  # some mutations are harmless (e.g. inside padding): both paths ran


_JUNK = (
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.lists(st.integers(-3, 2**64), max_size=3)
    | st.just({})
)


@st.composite
def _structural_mutation(draw, names):
    kind = draw(
        st.sampled_from(
            [
                "dtype",
                "dim",
                "add-dim",
                "drop-dim",
                "offset",
                "swap-offsets",
                "field",
                "drop-field",
                "drop-tensor",
                "rename",
                "metadata",
                "empty-tensor",
                "junk-entry",
            ]
        )
        | st.sampled_from(
            ["shift", "gap", "fit", "empty-tensor", "drop-tensor", "negate", "zero-times-huge"]
        )
    )
    return (
        kind,
        draw(st.sampled_from(names)),
        draw(st.sampled_from(names)),
        draw(st.integers(-5, 5)),
        draw(_JUNK),
        draw(
            st.sampled_from(sorted(DTYPE_BITS) + ["F33", "bf16", ""])
            | st.sampled_from(["F4", "F6_E2M3", "F6_E3M2"])
        ),
    )  # sub-byte: bit counts matter


def _apply_structure(h: dict, muts) -> dict:
    h = json.loads(json.dumps(h))
    for kind, a, b, delta, junk, dtype in muts:
        if a not in h or b not in h:
            continue
        e = h[a]
        if not isinstance(e, dict):
            continue
        if kind == "dtype":
            e["dtype"] = dtype
        elif kind == "dim" and isinstance(e.get("shape"), list) and e["shape"]:
            e["shape"][abs(delta) % len(e["shape"])] += delta
        elif kind == "add-dim" and isinstance(e.get("shape"), list):
            e["shape"].append(abs(delta))
        elif kind == "drop-dim" and isinstance(e.get("shape"), list) and e["shape"]:
            e["shape"].pop()
        elif kind == "offset" and isinstance(e.get("data_offsets"), list):
            e["data_offsets"][abs(delta) % 2] += delta
        elif kind == "swap-offsets" and isinstance(h[b], dict):
            e["data_offsets"], h[b]["data_offsets"] = (
                h[b].get("data_offsets"),
                e.get("data_offsets"),
            )
        elif kind == "field":
            e[["dtype", "shape", "data_offsets", "strides"][abs(delta) % 4]] = junk
        elif kind == "drop-field":
            e.pop(["dtype", "shape", "data_offsets"][abs(delta) % 3], None)
        elif kind == "drop-tensor":
            del h[a]
        elif kind == "rename":
            h[f"{a}.{delta}"] = h.pop(a)
        elif kind == "metadata":
            h["__metadata__"] = junk if delta % 2 else {"format": "pt", str(delta): str(junk)}
        elif kind == "empty-tensor":
            pos = (
                e["data_offsets"][abs(delta) % 2]
                if isinstance(e.get("data_offsets"), list) and e["data_offsets"]
                else 0
            )
            h[f"empty{delta}"] = {
                "dtype": "F32",
                "shape": [0, abs(delta)],
                "data_offsets": [pos, pos],
            }
        elif kind == "junk-entry":
            h[a] = junk
        elif kind in ("shift", "gap") and _offsets(e):
            b0 = e["data_offsets"][0]
            delta = delta or 1
            for x in [e] if kind == "shift" else h.values():  # gap: everything from e on moves
                if _offsets(x) and (kind == "shift" or x["data_offsets"][0] >= b0):
                    x["data_offsets"] = [x["data_offsets"][0] + delta, x["data_offsets"][1] + delta]
        elif (
            kind == "negate"
            and isinstance(e.get("shape"), list)
            and len(e["shape"]) >= 2
            and all(type(d) is int for d in e["shape"][:2])
        ):
            e["shape"][0], e["shape"][1] = -e["shape"][0], -e["shape"][1]  # same product
        elif kind == "zero-times-huge" and _offsets(e):
            b0 = e["data_offsets"][0]  # an empty tensor whose other dimension overflows 64 bits
            h[f"huge{delta}"] = {
                "dtype": "F32",
                "shape": [0, 2**64 + delta * 2**62],
                "data_offsets": [b0, b0],
            }
        elif kind == "fit" and _offsets(e) and dtype in DTYPE_BITS:
            # another dtype, with a shape and offsets that agree (maybe not in whole bytes)
            nbytes = e["data_offsets"][1] - e["data_offsets"][0]
            count = max(0, nbytes * 8 // DTYPE_BITS[dtype] + delta % 2)
            e["dtype"], e["shape"] = dtype, [count]
            e["data_offsets"][1] = e["data_offsets"][0] + count * DTYPE_BITS[dtype] // 8
    return h


def _offsets(e) -> bool:
    return (
        isinstance(e, dict)
        and isinstance(e.get("data_offsets"), list)
        and len(e["data_offsets"]) == 2
        and all(type(v) is int for v in e["data_offsets"])
    )


@pytest.mark.stress
def test_fuzz_header_structural_mutations(tmp_path, real_header):
    """(a) structure: a real header's entries edited (dtypes, dimensions, offsets, fields, names,
    empty tensors, metadata); if we accept the result, so does the safetensors library, reading
    the same names, dtypes and shapes."""
    blob, data_len = real_header
    base = json.loads(blob[8:])
    names = sorted(base)
    n = [0]
    accepted = [0]

    @fuzz_settings(1500)
    @given(
        st.lists(_structural_mutation(names), min_size=1, max_size=3),
        st.sampled_from(["fit", "fit", 0, -4, 4, 1]),
        st.integers(0, 7),
    )
    def prop(muts, size_delta, pad):
        n[0] += 1
        h = _apply_structure(base, muts)
        raw = json.dumps(h).encode() + b" " * pad
        head = struct.pack("<Q", len(raw)) + raw
        path = tmp_path / "s.safetensors"
        if size_delta == "fit":  # the file ends where the header's last tensor ends
            ends = [v["data_offsets"][1] for v in h.values() if _offsets(v)]
            size = len(head) + max(ends + [0])
        else:
            size = len(head) + data_len + size_delta
        _write_sparse(path, head, size)
        try:
            hdr = read_local_header(path)
        except WeightcheckError as e:
            assert "\n" not in e.line()
        else:
            accepted[0] += 1
            _check_accepted(path, hdr)

    prop()
    _report("header-structure", n[0], 1200)
    assert accepted[0] > 0


@pytest.mark.stress
def test_fuzz_header_against_parse_header_directly(real_header):
    """(a) arbitrary bytes after a real header's first k bytes (parse_header, no file)."""
    blob, data_len = real_header
    raw0 = blob[8:]
    n = [0]

    @fuzz_settings(1000)
    @given(st.integers(0, len(raw0)), st.binary(max_size=64), st.integers(0, data_len + 8))
    def prop(k, tail, data):
        n[0] += 1
        raw = raw0[:k] + tail
        try:
            parse_header(raw, "x", file_size=8 + len(raw) + data)
        except WeightcheckError as e:
            assert e.where == "x" and "\n" not in e.line()

    prop()
    _report("header-prefix-tail", n[0], 800)


# =============================================================================================
# (b) the index reader: nothing outside the folder is ever opened
@pytest.fixture
def index_sandbox(tmp_path, tiny_cfg):
    """outside/ (a valid shard and a pickle: bait) and ckpt/ with shards, links and traps."""
    from weightcheck.storage.writer import write_file

    out = tmp_path / "outside"
    out.mkdir()
    tiny_st(out / "secret.safetensors", names=("secret",))
    (out / "secret.bin").write_bytes(b"bait")
    ck = tmp_path / "ckpt"
    (ck / "sub").mkdir(parents=True)
    (ck / "config.json").write_text(json.dumps(tiny_cfg))
    tensors = synth.drafter_tensors(tiny_cfg, seed=3)
    half = len(tensors) // 2
    write_file(str(ck / "model-00001-of-00002.safetensors"), tensors[:half], {"format": "pt"})
    write_file(str(ck / "model-00002-of-00002.safetensors"), tensors[half:], {"format": "pt"})
    tiny_st(ck / "sub" / "inner.safetensors", names=("inner",))
    (ck / "garbage.safetensors").write_bytes(os.urandom(64))
    (ck / "weird.bin").write_bytes(b"not a pickle at all")
    os.symlink("../outside/secret.safetensors", ck / "link-out.safetensors")
    os.symlink("model-00001-of-00002.safetensors", ck / "link-in.safetensors")
    os.symlink("../outside", ck / "dirlink")
    os.mkfifo(ck / "fifo.safetensors")
    wm = {t.name: "model-00001-of-00002.safetensors" for t in tensors[:half]}
    wm.update({t.name: "model-00002-of-00002.safetensors" for t in tensors[half:]})
    return tmp_path, ck, out, wm


def _shard_names(base, out):
    return [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "sub/inner.safetensors",
        "link-in.safetensors",
        "./model-00001-of-00002.safetensors",
        "sub//inner.safetensors",
        "garbage.safetensors",
        "weird.bin",
        "fifo.safetensors",
        "missing.safetensors",
        "config.json",
        "model.safetensors.index.json",
        "sub",
        "",
        # bait: each of these reaches outside/ if followed
        "link-out.safetensors",
        "dirlink/secret.safetensors",
        "dirlink/secret.bin",
        "../outside/secret.safetensors",
        "sub/../../outside/secret.safetensors",
        str(out / "secret.safetensors"),
        "/" + str(out / "secret.safetensors"),
        "..\\outside\\secret.safetensors",
        "sub\\..\\..\\outside\\secret.bin",
        "C:\\outside\\secret.safetensors",
        "~/secret.safetensors",
        "\u2025/outside/secret.safetensors",
        "%2e%2e/outside/secret.safetensors",
        "..",
        "../../etc/passwd",
        "/etc/passwd",
        "ckpt/../../outside/secret.safetensors",
        "x\x00/../../outside/secret.safetensors",
        "model\x00.safetensors",
        "sub/\x00",
        "fifo.safetensors\x00.safetensors",
    ]


@pytest.mark.stress
def test_fuzz_index_reader_never_opens_outside_the_folder(index_sandbox):
    """(b) fuzzed model.safetensors.index.json over shards, links out, a FIFO, traversals and
    absolute paths: open_local raises only WeightcheckError, and every file it opens (audit
    hook on open/os.open, symlinks resolved) is inside the checkpoint folder."""
    base, ck, out, good_wm = index_sandbox
    pool = _shard_names(base, out)
    tensor_names = sorted(good_wm)
    from weightcheck.sources.pickled import load_pickled

    try:  # import torch (and let it open its own files) before auditing
        load_pickled(str(ck / "weird.bin"))
    except WeightcheckError:
        pass
    n = [0]
    outcomes = {"ok": 0, "refused": 0}

    name_st = st.one_of(
        st.sampled_from(pool),
        st.sampled_from(pool),
        st.sampled_from(pool),
        st.text(max_size=12),
        st.builds(
            lambda a, b: f"{a}/{b}",
            st.sampled_from(["..", ".", "sub", "dirlink", "", "~"]),
            st.sampled_from(pool),
        ),
    )
    seen: set[str] = set()
    wm_st = st.one_of(
        st.just(good_wm),
        st.builds(
            lambda d, extra: {**d, **extra},
            st.just(good_wm),
            st.dictionaries(
                st.text(max_size=6) | st.sampled_from(tensor_names), name_st, max_size=3
            ),
        ),
        st.dictionaries(st.sampled_from(tensor_names) | st.text(max_size=6), name_st, max_size=5),
    )
    index_st = st.one_of(
        st.builds(
            lambda wm, md: {"metadata": md, "weight_map": wm},
            wm_st,
            st.just({}) | _JUNK | st.fixed_dictionaries({"total_size": st.integers(-1, 2**70)}),
        ),
        _JUNK | st.lists(name_st, max_size=3),
        st.builds(lambda v: {"weight_map": {"a": v}}, _JUNK),
    )

    @fuzz_settings(1000)
    @given(index_st, st.booleans())
    def prop(index, as_file):
        n[0] += 1
        (ck / "model.safetensors.index.json").write_text(json.dumps(index))
        if isinstance(index, dict) and isinstance(index.get("weight_map"), dict):
            seen.update(v for v in index["weight_map"].values() if isinstance(v, str))
        target = ck / "model.safetensors.index.json" if as_file else ck
        with _Watchdog(20), OpenAudit() as audit:
            try:
                src = open_local(str(target), str(target))
            except WeightcheckError as e:
                outcomes["refused"] += 1
                assert "\n" not in e.line()
            else:
                outcomes["ok"] += 1
                for wf in src.files.values():
                    real = os.path.realpath(wf.local_path)
                    assert real.startswith(str(ck) + os.sep), real
        bad = audit.outside(ck)
        assert not bad, f"opened outside the folder: {bad}"
        assert audit.opened, "the audit saw nothing: it is not working"

    for name in pool:  # every bait name at least once, whatever the random part draws
        prop = example({"metadata": {}, "weight_map": {**good_wm, "extra": name}}, False)(prop)
        prop = example({"weight_map": {"a": name}}, True)(prop)
    prop()
    _report("index-reader", n[0], 800)
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0, outcomes
    assert set(pool) <= seen, f"the fuzz never tried {sorted(set(pool) - seen)}"


# =============================================================================================
# (c) the source resolver
def _special_srcs(sandbox):
    return [
        str(sandbox),
        str(sandbox / "missing"),
        str(sandbox / "fifo.safetensors"),
        str(sandbox / "config.json"),
        str(sandbox / "model.safetensors"),
        "/dev/null",
        "/",
        "/proc/self/status",
        ".",
        "..",
        "../../../../etc/passwd",
        "~",
        "~nobody/x",
        "nodir/model.safetensors",
        "org/name.safetensors",
        "a/b.bin",
        "x" * 5000,
        "a/" * 2000 + "b",
        "org/name@../../../../etc",
        "org/name@refs/pr/1",
        "org/naïve",
        "org/..",
        "a/--b",
        "org/name@" + "a" * 40,
        "./org/name",
        "org/name@main@main",
        "org/name/extra",
        "fifo.safetensors",
        "model.safetensors",
    ]


def _src_strings(sandbox):
    seg = st.sampled_from(
        [
            "org",
            "name",
            "a",
            "0",
            "x.y",
            "-",
            "_",
            "..",
            ".",
            "--",
            "naïve",
            "ॐ",
            "\u202e",
            "a b",
            "~",
            "models--org--d",
            "\\",
            "C:",
            "%2e%2e",
            "",
        ]
    )
    rev = st.sampled_from(
        [
            "main",
            "v1.0",
            "refs/pr/1",
            "../../etc",
            "..",
            "a/../../b",
            "/abs",
            "a" * 40,
            "A" * 40,
            "",
            "é",
            "x/",
            "//",
            "\x00",
            "@",
            "\udcff",
        ]
    )
    hub_like = st.builds(
        lambda o, n, at, r: f"{o}/{n}" + (f"@{r}" if at else ""), seg, seg, st.booleans(), rev
    )
    paths = st.sampled_from(_special_srcs(sandbox))
    return st.one_of(
        hub_like,
        paths,
        st.text(max_size=40),
        st.builds(lambda a, b: a + b, paths, st.text(max_size=8)),
    )


@pytest.mark.parametrize("mode", ["offline", "dead-endpoint"])
@pytest.mark.stress
def test_fuzz_source_resolver(tmp_path, monkeypatch, mode):
    """(c) open_source on fuzzed SRC strings (Hub ids with and without @revision, '..', unicode,
    absolute and relative paths, a FIFO, a NUL): only WeightcheckError, one line, and nothing is
    written outside HF_HOME."""
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    tiny_st(sandbox / "model.safetensors")
    (sandbox / "config.json").write_text("{}")
    os.mkfifo(sandbox / "fifo.safetensors")
    monkeypatch.chdir(sandbox)
    if mode == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "2")
    home = os.environ["HF_HOME"]
    try:
        open_source("org/warmup")  # import huggingface_hub before auditing
    except WeightcheckError:
        pass
    n = [0]
    kinds: dict[str, int] = {}

    @fuzz_settings(600)
    @given(_src_strings(sandbox), st.sampled_from([None, None, "main", "../x", "v1"]))
    def prop(spec, revision):
        n[0] += 1
        with _Watchdog(20), OpenAudit() as audit:
            try:
                src = open_source(spec, revision=revision)
            except WeightcheckError as e:
                line = e.line()
                assert "\n" not in line and "\r" not in line
                key = e.message.split(":")[0][:40]
                kinds[key] = kinds.get(key, 0) + 1
            else:  # only the one real checkpoint in the sandbox can open
                assert src.kind in ("folder", "file"), spec
                assert os.path.realpath(src.location).startswith(str(sandbox)), spec
        bad = audit.outside(home, writes_only=True)
        assert not bad, f"{spec!r} wrote outside HF_HOME: {bad}"

    for spec in _special_srcs(sandbox):  # each special string at least once
        prop = example(spec, None)(prop)
    prop = example("org/name", "../../x")(prop)
    prop()
    _report(f"source-resolver-{mode}", n[0], 500)
    assert len(kinds) >= 3, kinds  # path errors, Hub errors, refusals: not one canned answer


@pytest.mark.parametrize("spec", ["org/naïve", "org/..", "a/--b"])
def test_invalid_repo_ids_are_called_invalid_not_unreachable(spec):
    """huggingface_hub's HFValidationError used to read 'cannot reach http://...'."""
    r = run_cli("inspect", spec)
    line = one_error_line(r, "not a valid Hub repo id")
    assert "cannot reach" not in line
