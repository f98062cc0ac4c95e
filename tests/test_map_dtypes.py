"""d2t in another dtype than int64, as hand-made or old exports store it. Both engines load an
integer d2t as the values stored (vLLM copies it into its int64 ``draft_id_to_target_id``
parameter, SGLang adds an int64 ``arange`` to it), so WC304 is info there and the map is read
like an int64 one (its range and agreement checks run on it); a d2t of floats is an error (SGLang
keeps a float map and fails indexing with it; vLLM casts whole values and serves them). A map is no weight: WC208/WC209 leave it out."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import edit, tensor_map

from weightcheck.model.vocab import read_maps
from weightcheck.storage.header import float_values, int_values
from weightcheck.storage.writer import OutTensor

SRC = PRODUCERS / "specforge-hf"
FMT = {"I32": "i", "I16": "h", "U32": "I", "F32": "f"}


def _d2t_as(tmp_path, dtype: str, shift: int = 0):
    d2t = tensor_map(SRC)["d2t"]
    vals = [v + shift for v in struct.unpack(f"<{d2t.shape[0]}q", d2t.data)]
    raw = struct.pack(f"<{len(vals)}{FMT[dtype]}", *vals)
    out = tmp_path / f"d2t-{dtype}-{shift}"
    edit(SRC, out, drop=["d2t"], add=[OutTensor("d2t", dtype, d2t.shape, raw)])
    return out, vals


def _findings(src, *args):
    done = run_cli("check", src, "--json", *args)
    return done.exit_code, done.json["findings"]


@pytest.mark.parametrize("dtype", ["I32", "I16"])
@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_integer_d2t_is_info(tmp_path, dtype, engine):
    src, _ = _d2t_as(tmp_path, dtype)
    code, found = _findings(src, "--engine", engine)
    (wc304,) = [f for f in found if f["code"] == "WC304"]
    assert wc304["severity"] == "info" and f"d2t is {dtype}; {engine} widens it" in wc304["message"]
    assert code == 0, [(f["code"], f["severity"]) for f in found if f["severity"] == "error"]
    assert not [f for f in found if f["code"] in ("WC208", "WC209")]


def test_an_unsigned_d2t_fails_in_sglang_and_loads_in_vllm(tmp_path):
    """SGLang adds an int64 arange to d2t, and torch does not promote uint16/32/64: the load
    stops (the SGLang oracle: 'Promotion for uint16, uint32, uint64 types is not supported');
    vLLM copies it into its int64 parameter. WC304 is the root, the engine's WC703 under it."""
    src, _ = _d2t_as(tmp_path, "U32")
    said = {}
    for args in (("--engine", "sglang"), ("--engine", "vllm"), ()):
        code, found = _findings(src, *args)
        (wc304,) = [f for f in found if f["code"] == "WC304"]
        said[args[-1] if args else "plain"] = (wc304["severity"], code)
        if args != ("--engine", "vllm"):
            assert [c["code"] for c in wc304["consequences"]] == ["WC703"], wc304
            assert "sglang fails to load it" in wc304["message"]
    assert said == {"sglang": ("error", 1), "vllm": ("info", 0), "plain": ("warning", 0)}


def test_an_integer_d2t_is_read_for_the_range_check(tmp_path):
    """The map's values are read whatever integer dtype holds them: an entry past vocab_size is
    WC306 in an I32 map as in an I64 one."""
    src, vals = _d2t_as(tmp_path, "I32", shift=10_000)
    _, found = _findings(src)
    assert [f for f in found if f["code"] == "WC306" and f["severity"] == "error"], found


def test_a_float_d2t_fails_in_sglang_and_loads_in_vllm(tmp_path):
    """SGLang indexes with a float map (a crash at the first draft step); vLLM casts whole
    values into its int64 parameter (info); plain check names SGLang (a warning). A map is no
    weight: no WC208/WC209 for it."""
    src, _ = _d2t_as(tmp_path, "F32")
    severity = {}
    for args in (("--engine", "sglang"), ("--engine", "vllm"), ()):
        code, found = _findings(src, *args)
        (wc304,) = [f for f in found if f["code"] == "WC304"]
        severity[args[-1] if args else "plain"] = (wc304["severity"], code)
        assert not [f for f in found if f["code"] in ("WC208", "WC209")], found
    assert severity == {"sglang": ("error", 1), "vllm": ("info", 0), "plain": ("warning", 0)}


def test_a_float_d2t_with_fractions_is_misfed_in_vllm(tmp_path):
    d2t = tensor_map(SRC)["d2t"]
    vals = [v + 0.5 for v in struct.unpack(f"<{d2t.shape[0]}q", d2t.data)]
    out = tmp_path / "frac"
    edit(
        SRC,
        out,
        drop=["d2t"],
        add=[OutTensor("d2t", "F32", d2t.shape, struct.pack(f"<{len(vals)}f", *vals))],
    )
    code, found = _findings(out, "--engine", "vllm")
    (wc304,) = [f for f in found if f["code"] == "WC304"]
    assert wc304["severity"] == "error" and "not whole" in wc304["detail"] and code == 1


def test_int_values_reads_every_integer_dtype():
    for dtype, fmt in {
        "I8": "b",
        "U8": "B",
        "I16": "h",
        "U16": "H",
        "I32": "i",
        "I64": "q",
    }.items():
        assert int_values(struct.pack(f"<3{fmt}", 1, 2, 3), dtype) == [1, 2, 3], dtype
    assert int_values(b"\0" * 8, "F32") is None and int_values(b"\0", "BOOL") is None
    assert float_values(struct.pack("<2f", 1.0, 2.5), "F32") == [1.0, 2.5]
    assert float_values(
        struct.pack("<2f", 3.0, -4.0)[2:4] + struct.pack("<f", -4.0)[2:], "BF16"
    ) == [3.0, -4.0]
    assert float_values(b"\0" * 8, "I64") is None


def _t(dtype: str, *shape: int):
    return SimpleNamespace(dtype=dtype, shape=shape)


def test_read_maps_reads_integer_d2t_and_byte_t2d_and_nothing_else():
    """model/vocab.py ``read_maps``, the one reading of d2t/t2d behind check's
    ``Context.vocab_maps`` and convert's gate: an integer d2t of any width or sign as its values,
    a bool or uint8 t2d as its bytes; a float d2t (whole or not: WC304 reads it), another rank,
    another t2d dtype or no map at all as None, without reading its bytes."""
    vals = [3, 0, -2]
    raw = {
        "I64": struct.pack("<3q", *vals),
        "I32": struct.pack("<3i", *vals),
        "I8": struct.pack("<3b", *vals),
        "U16": struct.pack("<3H", 3, 0, 2),
        "U64": struct.pack("<3Q", 3, 0, 2),
        "F32 whole": struct.pack("<3f", *vals),
        "F32 frac": struct.pack("<3f", 3.5, 0.0, -2.25),
        "mask": bytes([1, 0, 1, 1, 0]),
    }
    read_log = []

    def reader(key: str):
        def read(t):
            read_log.append(t)
            return raw[key]

        return read

    for dtype in ("I64", "I32", "I8"):
        assert read_maps(_t(dtype, 3), None, reader(dtype)) == (vals, None), dtype
    for dtype in ("U16", "U64"):
        assert read_maps(_t(dtype, 3), None, reader(dtype)) == ([3, 0, 2], None), dtype
    for dtype in ("BOOL", "U8"):
        assert read_maps(None, _t(dtype, 5), reader("mask")) == (None, raw["mask"]), dtype
    read_log.clear()
    for key in ("F32 whole", "F32 frac"):
        assert read_maps(_t("F32", 3), None, reader(key)) == (None, None), key
    assert read_maps(_t("BF16", 3), _t("I64", 5), reader("mask")) == (None, None)
    assert read_maps(_t("I64", 3, 1), _t("BOOL", 5, 1), reader("I64")) == (None, None)
    assert read_maps(None, None, reader("I64")) == (None, None)
    assert read_log == []  # nothing read that is not used
    # both maps at once, each read once
    d2t, t2d = _t("I32", 3), _t("BOOL", 5)
    both = {id(d2t): raw["I32"], id(t2d): raw["mask"]}
    got = read_maps(d2t, t2d, lambda t: read_log.append(t) or both[id(t)])
    assert got == (vals, raw["mask"]) and read_log == [d2t, t2d]


def test_read_maps_bytes_not_known_and_read_errors():
    """A planned tensor whose bytes are not known (cast, taken from a target): the reader says
    None and so does the map; the reader's own refusal (read_small's byte limit) reaches the
    caller as before."""
    assert read_maps(_t("I64", 3), _t("BOOL", 5), lambda t: None) == (None, None)

    def too_large(t):
        raise ValueError("d2t is 20000000 bytes, more than read_small reads")

    with pytest.raises(ValueError, match="more than read_small reads"):
        read_maps(_t("I64", 2_500_000), None, too_large)
