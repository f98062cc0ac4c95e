"""Bad input: one line on stderr naming the file and the problem, exit 2, never a traceback.

Every malformed file is written here by hand (struct + JSON); see helpers.bad_input.st_bytes.
"""

from __future__ import annotations

import json
import os
import pickle
import struct

import pytest
from conftest import run_cli, run_subprocess
from helpers.bad_input import entry, one_error_line, st_bytes, tiny_st, write_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from weightcheck.errors import WeightcheckError
from weightcheck.storage.header import MAX_HEADER_BYTES, parse_header, read_local_header

F32_1 = entry("F32", [1], 0, 4)
DUP_RAW = (
    b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
    b'"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
)

# (id, file bytes, fragment the one-line error must contain, does the safetensors library also
# refuse it?) -- the last column proves each hand-made file is really malformed, not just
# something our parser happens to dislike; False marks where we are deliberately stricter.
MALFORMED = [
    ("empty-file", b"", "only 0 bytes", True),
    ("fewer-than-8-bytes", b"\x10\x00\x00", "only 3 bytes", True),
    ("header-length-zero", struct.pack("<Q", 0) + b"{}", "header length is 0", True),
    (
        "header-cut",
        struct.pack("<Q", 120) + b'{"a": {"dtype": "F32", "sha',
        "runs past the end",
        True,
    ),
    (
        "header-length-beyond-file",
        st_bytes({"a": F32_1}, b"\0" * 4, length=10_000),
        "runs past the end",
        True,
    ),
    ("header-length-2^63", struct.pack("<Q", 2**63) + b"{}", "exceeds the 100 MB limit", True),
    ("header-length-2^64-1", b"\xff" * 8 + b"{}", "exceeds the 100 MB limit", True),
    (
        "header-over-100MB-claimed",
        struct.pack("<Q", MAX_HEADER_BYTES + 1) + b"{}" * 8,
        "exceeds the 100 MB limit",
        True,
    ),
    ("data-cut-short", st_bytes({"a": entry("F32", [4], 0, 16)}, b"\0" * 9), "truncated", True),
    ("header-not-utf8", st_bytes(b'{"\xff\xfe": 1}'), "not UTF-8", True),
    ("header-invalid-json", st_bytes(b'{"a": {"dtype": '), "not valid JSON", True),
    ("header-json-list", st_bytes(b"[1, 2, 3]"), "is an array, not an object", True),
    ("header-json-number", st_bytes(b"42"), "is an integer, not an object", True),
    ("header-json-string", st_bytes(b'"abc"'), "is a string, not an object", True),
    ("header-json-null", st_bytes(b"null"), "not an object", True),
    (
        "header-nested-100000-lists",
        st_bytes(b"[" * 100_000 + b"]" * 100_000),
        "nested deeper",
        True,
    ),
    (
        "header-nested-100000-objects",
        st_bytes(b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        "nested deeper",
        True,
    ),
    ("header-nested-unclosed", st_bytes(b"[" * 100_000), "nested deeper", True),
    ("duplicate-tensor-names", st_bytes(DUP_RAW, b"\0" * 4), "'a' twice", False),
    (
        "offsets-overlapping",
        st_bytes({"a": entry("F32", [2], 0, 8), "b": entry("F32", [1], 4, 8)}, b"\0" * 8),
        "overlap",
        True,
    ),
    ("offsets-same-range", st_bytes({"a": F32_1, "b": F32_1}, b"\0" * 4), "overlap", True),
    (
        "offsets-out-of-bounds",
        st_bytes({"a": F32_1, "b": entry("F32", [1], 4, 8)}, b"\0" * 4),
        "truncated",
        True,
    ),
    (
        "hole-between-tensors",
        st_bytes({"a": F32_1, "b": entry("F32", [1], 8, 12)}, b"\0" * 12),
        "hole of 4 bytes",
        True,
    ),
    ("hole-at-start", st_bytes({"a": entry("F32", [1], 4, 8)}, b"\0" * 8), "hole of 4 bytes", True),
    ("trailing-bytes", st_bytes({"a": F32_1}, b"\0" * 7), "3 trailing bytes", True),
    (
        "unknown-dtype",
        st_bytes({"a": entry("F33", [1], 0, 4)}, b"\0" * 4),
        "unknown dtype 'F33'",
        True,
    ),
    ("dtype-not-string", st_bytes({"a": entry(32, [1], 0, 4)}, b"\0" * 4), "unknown dtype", True),
    (
        "shape-bytes-disagree",
        st_bytes({"a": entry("F32", [3], 0, 8)}, b"\0" * 8),
        "needs 12 bytes but data_offsets give 8",
        True,
    ),
    (
        "shape-bytes-disagree-dtype",
        st_bytes({"a": entry("BF16", [4], 0, 16)}, b"\0" * 16),
        "needs 8 bytes",
        True,
    ),
    (
        "negative-dimension",
        st_bytes({"a": entry("F32", [-1, -4], 0, 16)}, b"\0" * 16),
        "negative dimension",
        True,
    ),
    (
        "fractional-dimension",
        st_bytes({"a": entry("F32", [1.5], 0, 6)}, b"\0" * 6),
        "shape must be a list of integers",
        True,
    ),
    (
        "integral-float-dimension",
        st_bytes({"a": entry("F32", [2.0], 0, 8)}, b"\0" * 8),
        "shape must be a list of integers",
        True,
    ),
    (
        "boolean-dimension",
        st_bytes({"a": entry("F32", [True], 0, 4)}, b"\0" * 4),
        "shape must be a list of integers",
        True,
    ),
    (
        "string-dimension",
        st_bytes({"a": entry("F32", ["4"], 0, 16)}, b"\0" * 16),
        "shape must be a list of integers",
        True,
    ),
    (
        "shape-not-a-list",
        st_bytes({"a": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}}, b"\0" * 16),
        "shape must be a list of integers",
        True,
    ),
    (
        "dimensions-product-overflows",
        st_bytes({"a": entry("F32", [2**32, 2**32, 2**32], 0, 4)}, b"\0" * 4),
        "overflows 64 bits",
        True,
    ),
    (
        "dimension-10^400",
        st_bytes(
            b'{"a":{"dtype":"F32","shape":[1' + b"0" * 400 + b'],"data_offsets":[0,4]}}', b"\0" * 4
        ),
        "overflows 64 bits",
        True,
    ),
    (
        "zero-times-enormous",
        st_bytes({"a": entry("F32", [0, 2**70], 0, 0)}),
        "overflows 64 bits",
        True,
    ),
    (
        "bytes-overflow-not-elements",
        st_bytes({"a": entry("F64", [2**62], 0, 8)}, b"\0" * 8),
        "overflows 64 bits",
        True,
    ),
    (
        "offsets-boolean",
        st_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [False, 4]}}, b"\0" * 4),
        "data_offsets must be a list of integers",
        True,
    ),
    (
        "offsets-three",
        st_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}}, b"\0" * 4),
        "2 entries",
        True,
    ),
    (
        "offsets-reversed",
        st_bytes({"a": entry("F32", [1], 4, 0)}, b"\0" * 4),
        "bad data_offsets",
        True,
    ),
    (
        "offsets-negative",
        st_bytes({"a": entry("F32", [1], -4, 0)}, b"\0" * 4),
        "bad data_offsets",
        True,
    ),
    (
        "entry-missing-dtype",
        st_bytes({"a": {"shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
        "missing dtype",
        True,
    ),
    ("entry-not-object", st_bytes({"a": [1, 2]}), "entry is not an object", True),
    (
        "entry-extra-field",
        st_bytes({"a": {**F32_1, "strides": [1]}}, b"\0" * 4),
        "unexpected field(s) strides",
        False,
    ),
    (
        "metadata-not-strings",
        st_bytes({"__metadata__": {"format": 1}, "a": F32_1}, b"\0" * 4),
        "__metadata__",
        True,
    ),
    (
        "metadata-a-list",
        st_bytes({"__metadata__": ["pt"], "a": F32_1}, b"\0" * 4),
        "__metadata__",
        True,
    ),
    (
        "sub-byte-dtype-odd-count",
        st_bytes({"a": entry("F4", [3], 0, 2)}, b"\0" * 2),
        "not a whole number of bytes",
        True,
    ),
]
IDS = [c[0] for c in MALFORMED]


@pytest.mark.parametrize("name,content,fragment,lib_refuses", MALFORMED, ids=IDS)
def test_malformed_safetensors_file(tmp_path, name, content, fragment, lib_refuses):
    path = write_bytes(tmp_path / f"{name}.safetensors", content)
    line = one_error_line(run_cli("inspect", path), fragment, where=path)
    assert len(line) < 600, line  # one readable line, not a dump of the header


@pytest.mark.parametrize("name,content,fragment,lib_refuses", MALFORMED, ids=IDS)
def test_malformed_model_safetensors_in_folder(tmp_path, name, content, fragment, lib_refuses):
    folder = tmp_path / "ckpt"
    path = write_bytes(folder / "model.safetensors", content)
    (folder / "config.json").write_text("{}")
    one_error_line(run_cli("inspect", folder), fragment, where=path)


@pytest.mark.parametrize("name,content,fragment,lib_refuses", MALFORMED, ids=IDS)
def test_parser_refuses_directly(tmp_path, name, content, fragment, lib_refuses):
    path = write_bytes(tmp_path / "x.safetensors", content)
    with pytest.raises(WeightcheckError) as ei:
        read_local_header(path)
    assert ei.value.where == str(path)
    assert fragment.lower() in ei.value.message.lower()


@pytest.mark.parametrize(
    "name,content,fragment,lib_refuses",
    [c for c in MALFORMED if c[3]],
    ids=[c[0] for c in MALFORMED if c[3]],
)
def test_safetensors_library_agrees_it_is_malformed(tmp_path, name, content, fragment, lib_refuses):
    """The hand-made files are malformed for the reference implementation too."""
    from safetensors import safe_open

    path = write_bytes(tmp_path / "x.safetensors", content)
    with pytest.raises(Exception):
        with safe_open(str(path), framework="numpy") as f:
            for k in f.keys():
                f.get_tensor(k)


def test_library_is_laxer_where_we_are_stricter(tmp_path):
    """Duplicate names: json keeps the last one and so does the library; we refuse the file."""
    from safetensors import safe_open

    path = write_bytes(tmp_path / "x.safetensors", st_bytes(DUP_RAW, b"\0" * 4))
    with safe_open(str(path), framework="numpy") as f:
        assert list(f.keys()) == ["a"]
    with pytest.raises(WeightcheckError, match="twice"):
        read_local_header(path)


# --- valid edge cases: the strict parser must not refuse real files ----------------------------
def test_valid_edge_cases_are_accepted(tmp_path):
    zero = entry("F32", [0, 5], 0, 0)
    cases = {
        "empty": ({}, b""),
        "zero-size-reusing-offsets": ({"z1": zero, "z2": zero, "a": F32_1}, b"\0" * 4),
        "metadata-null": ({"__metadata__": None, "a": F32_1}, b"\0" * 4),
        "unordered-entries": ({"b": entry("F32", [1], 4, 8), "a": F32_1}, b"\0" * 8),
        "sub-byte-even": ({"a": entry("F4", [4], 0, 2)}, b"\0" * 2),
    }
    for name, (header, data) in cases.items():
        raw = json.dumps(header).encode() + b"   "  # padding spaces, as the library writes
        path = write_bytes(tmp_path / f"{name}.safetensors", st_bytes(raw, data))
        hdr = read_local_header(path)
        assert set(hdr.tensors) == {k for k in header if k != "__metadata__"}, name
        assert hdr.data_len == len(data), name


def test_parser_reports_absolute_offsets(tmp_path):
    path = tiny_st(tmp_path / "x.safetensors", names=("b", "a"))
    hdr = read_local_header(path)
    assert hdr.tensors["b"].begin == 0 and hdr.tensors["b"].end == 8
    assert hdr.tensors["a"].begin == 8 and hdr.tensors["a"].nbytes == 8
    assert hdr.data_start + hdr.data_len == path.stat().st_size


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_weightcheck_error(raw):
    try:
        parse_header(raw, "fuzz", file_size=8 + len(raw))
    except WeightcheckError as e:
        assert e.where == "fuzz" and "\n" not in e.message


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4)
    ),
    max_leaves=12,
)
_entry = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from(["F32", "BF16", "I64", "BOOL", "F4", "X"]) | _json,
        "shape": st.lists(st.integers(min_value=-3, max_value=2**65) | _json, max_size=3) | _json,
        "data_offsets": st.lists(st.integers(min_value=-3, max_value=64), min_size=0, max_size=3)
        | _json,
    }
)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.dictionaries(st.text(max_size=3), _entry | _json, max_size=4), st.integers(0, 80))
def test_structured_fuzz_never_crashes(header, datalen):
    raw = json.dumps(header).encode()
    try:
        h = parse_header(raw, "fuzz", file_size=8 + len(raw) + datalen)
    except WeightcheckError as e:
        assert "\n" not in e.message
    else:  # whatever we accept tiles the buffer exactly and agrees with its shapes
        pos = 0
        for t in sorted(h.tensors.values(), key=lambda t: (t.begin, t.end)):
            assert t.begin == pos
            pos = t.end
        assert pos == datalen
        assert all(d >= 0 for t in h.tensors.values() for d in t.shape)


# --- paths that are not checkpoints -----------------------------------------------------------
def test_path_not_found(tmp_path):
    missing = tmp_path / "no" / "such" / "drafter"
    one_error_line(run_cli("inspect", missing), "path not found", where=missing)


def test_relative_path_to_missing_file_is_not_sent_to_the_hub(tmp_path, monkeypatch):
    """`dir/model.safetensors` looks like org/name, but a weights file name means a typo'd path."""
    monkeypatch.chdir(tmp_path)
    r = run_cli("inspect", "nodir/model.safetensors")
    line = one_error_line(r, "path not found", where="nodir/model.safetensors")
    assert "huggingface" not in line.lower()


def test_folder_that_is_not_a_checkpoint(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README.md").write_text("hello")
    (folder / "config.json").write_text("{}")
    one_error_line(run_cli("inspect", folder), "not a checkpoint", where=folder)


def test_empty_folder(tmp_path):
    one_error_line(run_cli("inspect", tmp_path), "not a checkpoint", where=tmp_path)


def test_folder_not_a_checkpoint_hints_at_subfolders(tmp_path):
    tiny_st(tmp_path / "run" / "step100" / "model.safetensors")
    line = one_error_line(
        run_cli("inspect", tmp_path / "run"), "not a checkpoint", where=tmp_path / "run"
    )
    assert "step100" in line


@pytest.mark.parametrize(
    "fname,content",
    [
        ("weights.txt", b"not weights"),
        ("model.gguf", b"GGUF\x03\x00\x00\x00"),
        ("config.json", b"{}"),
        ("model.safetensors.bak", b"\0" * 16),
        ("model.onnx", b"\x08\x07"),
    ],
)
def test_file_with_another_extension(tmp_path, fname, content):
    path = write_bytes(tmp_path / fname, content)
    line = one_error_line(run_cli("inspect", path), "not a checkpoint", where=path)
    # a config.json given for its checkpoint: the line names the folder to pass instead
    assert line.endswith(f"; pass its folder: {tmp_path}") == (fname == "config.json"), line


# --- indexes ---------------------------------------------------------------------------------
def _index(folder, weight_map, name="model.safetensors.index.json"):
    path = folder / name
    path.write_text(json.dumps({"metadata": {"total_size": 8}, "weight_map": weight_map}))
    return path


def test_index_naming_a_missing_shard(tmp_path):
    tiny_st(tmp_path / "model-00001-of-00002.safetensors", names=("a",))
    idx = _index(
        tmp_path, {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    )
    one_error_line(
        run_cli("inspect", tmp_path),
        "model-00002-of-00002.safetensors",
        "does not exist",
        where=idx,
    )


@pytest.mark.parametrize(
    "fname,fragment",
    [
        ("../outside.safetensors", "leaves the folder"),
        ("sub/../../outside.safetensors", "leaves the folder"),
        ("..\\outside.safetensors", "leaves the folder"),
        ("/etc/passwd", "absolute path"),
        ("OUTSIDE_ABS", "absolute path"),
        ("C:/Windows/x.safetensors", "absolute path"),
    ],
)
def test_index_names_escaping_the_folder_are_refused(tmp_path, fname, fragment):
    # a perfectly valid shard really exists outside: without the check it would be read
    outside = tiny_st(tmp_path / "outside.safetensors", names=("a",))
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    if fname == "OUTSIDE_ABS":
        fname = str(outside)
    idx = _index(folder, {"a": fname})
    one_error_line(run_cli("inspect", folder), "refused", fragment, where=idx)


def test_index_symlink_pointing_outside_is_refused(tmp_path):
    outside = tiny_st(tmp_path / "outside.safetensors", names=("a",))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.symlink(outside, folder / "model-00001-of-00001.safetensors")
    idx = _index(folder, {"a": "model-00001-of-00001.safetensors"})
    one_error_line(
        run_cli("inspect", folder), "refused", "link leading out of the folder", where=idx
    )


def test_index_symlinked_directory_pointing_outside_is_refused(tmp_path):
    tiny_st(tmp_path / "elsewhere" / "shard.safetensors", names=("a",))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.symlink(tmp_path / "elsewhere", folder / "shards")
    idx = _index(folder, {"a": "shards/shard.safetensors"})
    one_error_line(run_cli("inspect", folder), "refused", where=idx)


def test_index_symlink_inside_the_folder_is_fine(tmp_path):
    """Control for the symlink test: a link that stays inside the folder is followed."""
    folder = tmp_path / "ckpt"
    tiny_st(folder / "blobs" / "abc123", names=("a",))
    os.symlink(folder / "blobs" / "abc123", folder / "model-00001-of-00001.safetensors")
    _index(folder, {"a": "model-00001-of-00001.safetensors"})
    r = run_cli("inspect", folder, "--json")
    assert r.exit_code == 0, r
    assert [t["name"] for t in r.json["tensors"]] == ["a"]


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"{not json", "index is not valid JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"metadata": {}}', "no weight_map"),
        (b'{"weight_map": ["a.safetensors"]}', "no weight_map"),
        (b'["model-00001-of-00001.safetensors"]', "no weight_map"),
        (b"[" * 50_000, "nested deeper"),
        (b'{"weight_map": {"a": 7}}', "is not a file name"),
        (b'{"weight_map": {"a": ""}}', "not a file name"),
        (b'{"weight_map": {}}', "lists no tensors"),
        (b'{"weight_map": {"a": "notes.txt"}}', "not a .safetensors"),
        (b'{"weight_map": {"a": "model.safetensors.index.json"}}', "not a .safetensors"),
    ],
)
def test_bad_index(tmp_path, content, fragment):
    (tmp_path / "notes.txt").write_text("x")
    idx = write_bytes(tmp_path / "model.safetensors.index.json", content)
    one_error_line(run_cli("inspect", tmp_path), fragment, where=idx)


def test_bad_pytorch_index(tmp_path):
    idx = write_bytes(
        tmp_path / "pytorch_model.bin.index.json", b'{"weight_map": {"a": "../x.bin"}}'
    )
    one_error_line(run_cli("inspect", tmp_path), "leaves the folder", "refused", where=idx)


def test_index_given_as_the_path(tmp_path):
    idx = write_bytes(
        tmp_path / "model.safetensors.index.json", b'{"weight_map": {"a": "/etc/passwd"}}'
    )
    one_error_line(run_cli("inspect", idx), "absolute path", "refused", where=idx)


# --- config.json ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content,fragment",
    [
        (b'{"hidden_size": 128,', "config.json is not valid JSON"),
        (b"", "config.json is not valid JSON"),
        (b"[1, 2, 3]", "config.json is an array, not an object"),
        (b'"LlamaForCausalLMEagle3"', "is a string, not an object"),
        (b"null", "config.json is null, not an object"),
        (b'{"hidden_size": "\xff"}', "not UTF-8"),
        (b'{"a":' * 20_000 + b"1" + b"}" * 20_000, "nested deeper"),
    ],
)
@pytest.mark.parametrize("layout", ["folder", "file"])
def test_bad_config_json(tmp_path, content, fragment, layout):
    st_path = tiny_st(tmp_path / "model.safetensors")
    cfg = write_bytes(tmp_path / "config.json", content)
    target = tmp_path if layout == "folder" else st_path
    one_error_line(run_cli("inspect", target), fragment, where=cfg)


def test_config_json_that_is_a_folder_is_ignored(tmp_path):
    tiny_st(tmp_path / "model.safetensors")
    (tmp_path / "config.json").mkdir()
    r = run_cli("inspect", tmp_path, "--json")
    assert r.exit_code == 0, r
    assert r.json["source"]["config_file"] is None


# --- pickles that would run code --------------------------------------------------------------
class _MakesMarker:
    """Unpickling this calls os.mkdir(marker): proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _evil_pickle(marker, protocol=2) -> bytes:
    return pickle.dumps({"fc.weight": _MakesMarker(marker)}, protocol=protocol)


def test_evil_pickle_really_runs_code_when_loaded_unsafely(tmp_path):
    """Control: the payload used below does create the marker under plain pickle.loads."""
    marker = tmp_path / "control-marker"
    pickle.loads(_evil_pickle(marker))
    assert marker.is_dir()


@pytest.mark.parametrize(
    "layout",
    [
        "pytorch_model.bin",
        "file.bin",
        "file.pt",
        "training_state.pt",
        "torch-zip.pt",
        "sharded-bin",
    ],
)
def test_evil_pickle_is_refused_and_never_runs(tmp_path, layout):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "PWNED"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    if layout == "torch-zip.pt":  # torch.save's zip container around the same payload
        path = folder / "evil.pt"
        torch.save({"fc.weight": _MakesMarker(marker)}, path)
        target = path
    elif layout == "sharded-bin":
        path = write_bytes(folder / "pytorch_model-00001-of-00001.bin", _evil_pickle(marker))
        (folder / "pytorch_model.bin.index.json").write_text(
            json.dumps({"weight_map": {"fc.weight": "pytorch_model-00001-of-00001.bin"}})
        )
        target = folder
    elif layout.startswith("file."):
        path = write_bytes(folder / ("evil" + layout[4:]), _evil_pickle(marker))
        target = path
    else:
        path = write_bytes(folder / layout, _evil_pickle(marker))
        target = folder
    r = run_cli("inspect", target)
    line = one_error_line(r, "refused", "weights_only=True", where=path)
    assert "posix.mkdir" in line or "mkdir" in line or "Unsupported" in line
    assert not marker.exists(), "the pickle's code ran"
    assert "weights_only` set to `False`" not in line  # never suggest the unsafe load


def test_evil_pickle_in_a_real_process(tmp_path):
    """Default pickle protocol: torch warns about it on stderr; we still print one line only."""
    pytest.importorskip("torch")
    marker = tmp_path / "PWNED"
    path = write_bytes(
        tmp_path / "pytorch_model.bin", pickle.dumps({"fc.weight": _MakesMarker(marker)})
    )
    r = run_subprocess("inspect", tmp_path)
    one_error_line(r, "refused", where=path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"", "EOFError"),
        (b"hello, not a pickle", "cannot load pickled checkpoint"),
        (b"PK\x03\x04broken zip", "cannot load pickled checkpoint"),
    ],
)
def test_corrupt_pickles(tmp_path, content, fragment):
    pytest.importorskip("torch")
    path = write_bytes(tmp_path / "model.pt", content)
    one_error_line(run_cli("inspect", path), fragment, where=path)


def test_pickle_without_a_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    p1 = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], p1)
    one_error_line(run_cli("inspect", p1), "holds a list, not a state dict", where=p1)
    p2 = tmp_path / "nothing.pt"
    torch.save({"step": 3, "lr": 0.1}, p2)
    one_error_line(run_cli("inspect", p2), "holds no tensors", where=p2)


# --- a real process: no traceback ever reaches stderr ------------------------------------------
SUBPROCESS_CASES = [
    "header-length-2^63",
    "header-nested-100000-lists",
    "duplicate-tensor-names",
    "dimension-10^400",
    "trailing-bytes",
    "header-not-utf8",
]


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_safetensors_in_a_real_process(tmp_path, case):
    name, content, fragment, _ = next(c for c in MALFORMED if c[0] == case)
    path = write_bytes(tmp_path / "model.safetensors", content)
    r = run_subprocess("inspect", path, "--json")
    one_error_line(r, fragment, where=path)


def test_bad_paths_in_a_real_process(tmp_path):
    missing = tmp_path / "missing"
    one_error_line(run_subprocess("inspect", missing), "path not found", where=missing)
    (tmp_path / "cfgdir").mkdir()
    cfg = write_bytes(tmp_path / "cfgdir" / "config.json", b"[]")
    tiny_st(tmp_path / "cfgdir" / "model.safetensors")
    one_error_line(run_subprocess("inspect", tmp_path / "cfgdir"), "is an array", where=cfg)
    idx = _index(tmp_path, {"a": "../../etc/passwd.safetensors"})
    one_error_line(run_subprocess("inspect", tmp_path), "refused", where=idx)
