"""weightcheck/storage/verify.py: the RangeChecker thread, reopen(), and header_bytes' data_start_mod.

Every file here is real (tmp_path): a safetensors header built with safetensors_writer.header_bytes
and parsed back with safetensors_header.parse_header, followed by data bytes, and a "source" file
holding the same bytes at another offset. The checker thread is always finished or closed, and no
test waits on a timer: a failure is made visible by submitting jobs in order (the checker handles
them in submission order) and finishing.
"""

from __future__ import annotations

import os
import random
import threading
import time
import zlib

import pytest

from weightcheck.errors import WeightcheckError
from weightcheck.storage import verify as verify_mod
from weightcheck.storage.header import parse_header, read_header_length, read_local_header
from weightcheck.storage.writer import OutTensor, header_bytes

THREAD = "weightcheck-verify"
CHUNK = 4096
A_BYTES = 50_000  # spans 13 checker chunks of 4096: 12 full ones and a partial one (848 bytes)
SRC_OFF = 777  # where tensor a's bytes sit in the source file (not the output's offset)


def verify_threads() -> set:
    return {t for t in threading.enumerate() if t.name == THREAD}


@pytest.fixture(autouse=True)
def _no_thread_outlives_a_test():
    before = verify_threads()
    yield
    leaked = {t for t in verify_threads() - before if t.is_alive()}
    assert not leaked, f"a {THREAD} thread outlived the test"


def _data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _layout(entries, metadata=None, data_start_mod=None):
    head = header_bytes(
        [OutTensor(n, d, s, b"") for n, d, s, _ in entries], metadata, data_start_mod
    )
    n = read_header_length(head, "test")
    return head, parse_header(head[8 : 8 + n], "test")


@pytest.fixture
def files(tmp_path):
    """An output file (header + tensors a, b) and a source file holding a's bytes at SRC_OFF."""
    a = _data(A_BYTES, 1)
    b = _data(64 * 4, 2)
    entries = [("a", "U8", (A_BYTES,), a), ("b", "F32", (8, 8), b)]
    head, header = _layout(entries, {"format": "pt"})
    out = tmp_path / "out.safetensors"
    out.write_bytes(head + a + b)
    src = tmp_path / "src.bin"
    src.write_bytes(_data(SRC_OFF, 3) + a + _data(100, 4))
    return {
        "out": str(out),
        "src": str(src),
        "header": header,
        "head": head,
        "a": a,
        "b": b,
        "tmp": tmp_path,
    }


def _wait_until(cond, limit: float = 30.0) -> None:
    """Poll ``cond`` (as the writer polls .error); ``limit`` only guards against a hang."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:  # pragma: no cover
            pytest.fail("the checker never reported the failure")
        time.sleep(0.001)


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)
        f.seek(offset)
        f.write(bytes([old[0] ^ 0xFF]))


# =============================================================================================
# RangeChecker.same
class Reads:
    """The bytes the checker reads from the output file (each range it checks is read once;
    counted in the checker's thread, read after finish or close)."""

    def __init__(self, out: str):
        self.ino, self.n = os.stat(out).st_ino, 0

    def __eq__(self, other) -> bool:
        return self.n == other

    def __repr__(self) -> str:
        return f"<{self.n} bytes read from the output>"


@pytest.fixture
def out_reads(files, monkeypatch) -> Reads:
    reads = Reads(files["out"])
    real = verify_mod._read_at

    def read_at(fd, view, offset):
        k = real(fd, view, offset)
        if os.fstat(fd).st_ino == reads.ino:
            reads.n += k
        return k

    monkeypatch.setattr(verify_mod, "_read_at", read_at)
    return reads


def test_same_identical_ranges_pass(out_reads, files):
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        # the whole tensor at once, then in two pieces (rel > 0), as the writer submits them
        c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
        c.same(files["out"], files["header"], "a", 0, 10_000, files["src"], SRC_OFF)
        c.same(
            files["out"],
            files["header"],
            "a",
            10_000,
            A_BYTES - 10_000,
            files["src"],
            SRC_OFF + 10_000,
        )
        # a digest between two compares reuses one of the two buffers: a short compare after it
        # must look at the bytes it read, not at what the digest left in the buffer
        c.digest(files["out"], files["header"], "a", zlib.crc32(files["a"]))
        c.same(files["out"], files["header"], "a", 100, 1000, files["src"], SRC_OFF + 100)
        c.finish()
    assert c.error is None
    assert out_reads == 3 * A_BYTES + 1000


def test_without_preadv_the_checker_reads_with_pread(out_reads, files, monkeypatch):
    """Platforms without os.preadv (some macOS builds): the same checks, through os.pread."""
    monkeypatch.delattr(os, "preadv", raising=False)
    calls = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: calls.append(off) or real(fd, n, off))
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
        c.digest(files["out"], files["header"], "b", zlib.crc32(files["b"]))
        c.finish()
    assert out_reads == A_BYTES + len(files["b"]) and calls
    _flip(files["out"], files["header"].data_start + files["header"].tensors["a"].begin + 5000)
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
        with pytest.raises(WeightcheckError, match="a differs from its source"):
            c.finish()


def test_same_locates_the_tensor_from_the_header_not_the_source_offset(files):
    """Tensor b lies after a in the output: checking it against a's source bytes must fail
    (the checker reads the output at header.data_start + b.begin, not at some running offset)."""
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(files["out"], files["header"], "b", 0, 256, files["src"], SRC_OFF)
        with pytest.raises(WeightcheckError, match="verification failed: b differs"):
            c.finish()


@pytest.mark.parametrize(
    "where",
    [0, A_BYTES // 2, A_BYTES - 1],
    ids=["first-byte", "middle-full-chunk", "last-byte-partial-chunk"],
)
def test_same_one_flipped_byte_fails(out_reads, files, where):
    _flip(files["out"], files["header"].data_start + files["header"].tensors["a"].begin + where)
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
        with pytest.raises(WeightcheckError) as e:
            c.finish()
    msg = str(e.value)
    assert "verification failed" in msg and "a differs from its source" in msg
    assert files["out"] in msg
    assert c.error is e.value
    # the chunks up to the one holding the flipped byte were read, no more
    assert out_reads == min(A_BYTES, (where // CHUNK + 1) * CHUNK)


@pytest.mark.parametrize(
    "name, rel, n",
    [("a", 0, A_BYTES + 1), ("a", A_BYTES - 10, 11), ("b", -1, 10), ("b", -100, 200)],
    ids=["longer-than-tensor", "ends-past-tensor", "negative-start", "straddles-the-start"],
)
def test_same_range_outside_the_tensor_fails(out_reads, files, name, rel, n):
    """The "source" is the output file itself at the very same offset, so the bytes compare equal:
    only the check that the range lies inside the named tensor can fail."""
    out, header = files["out"], files["header"]
    same_place = header.data_start + header.tensors[name].begin + rel
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(out, header, name, rel, n, out, same_place)
        with pytest.raises(WeightcheckError, match=f"verification failed: {name} differs"):
            c.finish()
    assert out_reads == 0


def test_same_range_at_the_tensor_edges_passes(out_reads, files):
    """The counterpart of the test above: the same comparison inside the bounds passes."""
    out, header = files["out"], files["header"]
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        for name, rel, n in (
            ("a", 0, A_BYTES),
            ("a", A_BYTES - 10, 10),
            ("b", 0, 256),
            ("b", 255, 1),
        ):
            c.same(
                out, header, name, rel, n, out, header.data_start + header.tensors[name].begin + rel
            )
        c.finish()
    assert out_reads == 2 * (A_BYTES + 10 + 256 + 1)  # the source is the output itself


def test_same_source_shorter_than_the_range_fails(out_reads, files):
    src = files["tmp"] / "short.bin"
    src.write_bytes(_data(SRC_OFF, 3) + files["a"][: A_BYTES - 1])  # one byte short
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, str(src), SRC_OFF)
        with pytest.raises(WeightcheckError, match="verification failed: a differs"):
            c.finish()
    assert out_reads == A_BYTES  # every chunk read: the short source's tail failed the last


def test_same_output_shorter_than_its_header_says_fails(files):
    with open(files["out"], "r+b") as f:
        f.truncate(files["header"].data_start + A_BYTES - 1)
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
        with pytest.raises(WeightcheckError, match="a differs from its source"):
            c.finish()


def test_same_missing_source_cannot_re_read(files):
    missing = str(files["tmp"] / "gone.bin")
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(files["out"], files["header"], "a", 0, A_BYTES, missing, SRC_OFF)
        with pytest.raises(WeightcheckError) as e:
            c.finish()
    msg = str(e.value)
    assert "verification failed: cannot re-read" in msg
    assert "No such file" in msg


# =============================================================================================
# RangeChecker.digest
def test_digest_right_crc_passes_wrong_crc_fails(out_reads, files):
    good = zlib.crc32(files["b"])
    with verify_mod.RangeChecker(chunk=100) as c:  # 256 bytes in 3 reads of at most 100
        c.digest(files["out"], files["header"], "b", good)
        c.digest(files["out"], files["header"], "a", zlib.crc32(files["a"]))
        c.finish()
    assert c.error is None and out_reads == 256 + A_BYTES

    with verify_mod.RangeChecker(chunk=100) as c:
        c.digest(files["out"], files["header"], "b", good ^ 1)
        with pytest.raises(WeightcheckError) as e:
            c.finish()
    assert "verification failed: b differs from its source" in str(e.value)
    assert out_reads == 256 + A_BYTES + 256  # every byte of b read again; the sum did not match


def test_digest_detects_a_flipped_byte(files):
    _flip(files["out"], files["header"].data_start + files["header"].tensors["b"].begin + 200)
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        c.digest(files["out"], files["header"], "b", zlib.crc32(files["b"]))
        with pytest.raises(WeightcheckError, match="b differs from its source"):
            c.finish()


def test_digest_of_a_truncated_output_fails(files):
    with open(files["out"], "r+b") as f:
        f.truncate(files["header"].data_start + files["header"].tensors["b"].begin + 100)
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        c.digest(files["out"], files["header"], "b", zlib.crc32(files["b"]))
        with pytest.raises(WeightcheckError, match="b differs from its source"):
            c.finish()


# =============================================================================================
# errors, stopping, the thread's lifetime
def test_error_is_polled_and_later_jobs_are_not_checked(out_reads, files):
    out, header, src = files["out"], files["header"], files["src"]
    _flip(out, header.data_start + header.tensors["a"].begin + 3 * CHUNK + 5)  # in chunk 3
    c = verify_mod.RangeChecker(chunk=CHUNK)
    try:
        c.same(out, header, "a", 0, 2 * CHUNK, src, SRC_OFF)  # fine: 8192 bytes checked
        c.same(out, header, "a", 0, A_BYTES, src, SRC_OFF)  # fails in its 4th chunk
        # the writer polls .error after each submission; wait for it the same way
        _wait_until(lambda: c.error is not None)
        assert isinstance(c.error, WeightcheckError)
        assert "a differs from its source" in str(c.error)
        checked = out_reads.n
        assert checked == 2 * CHUNK + 4 * CHUNK  # up to the chunk that failed
        # jobs submitted after the failure are drained, not checked (they would all pass)
        for _ in range(5):
            c.same(out, header, "a", 0, A_BYTES, src, SRC_OFF)
            c.digest(out, header, "b", zlib.crc32(files["b"]))
        with pytest.raises(WeightcheckError) as e:
            c.finish()
        assert e.value is c.error  # finish raises the first failure itself
        assert out_reads == checked
    finally:
        c.close()


def test_jobs_queued_behind_a_failure_are_skipped_in_order(out_reads, files):
    """No polling needed: the thread handles jobs in submission order, so after finish() the
    count of checked bytes shows exactly where it stopped."""
    out, header, src = files["out"], files["header"], files["src"]
    c = verify_mod.RangeChecker(chunk=CHUNK)
    with c:
        c.same(out, header, "a", 0, CHUNK, src, SRC_OFF)  # passes
        c.digest(out, header, "b", 12345)  # fails after reading b's 256 bytes
        c.same(out, header, "a", 0, A_BYTES, src, SRC_OFF)  # skipped
        c.digest(out, header, "a", 0)  # skipped (would fail too, but is never looked at)
        with pytest.raises(WeightcheckError, match="b differs"):
            c.finish()
    assert out_reads == CHUNK + 256


def test_close_without_finish_stops_the_thread_and_drops_the_queue(out_reads, files, tmp_path):
    """close() does not drain the queue: the first job is held until close() has asked the thread
    to stop, so the jobs behind it are deterministically never checked."""
    out, header, src = files["out"], files["header"], files["src"]
    held = tmp_path / "held.bin"
    held.write_bytes(_data(SRC_OFF, 3) + files["a"])

    entered = threading.Event()

    class Held(verify_mod.RangeChecker):
        def _fd(self, files_, path):  # hold the first job until close() sets the stop flag
            if path == str(held):
                entered.set()
                assert self._stop.wait(30), "close() never asked the thread to stop"
            return verify_mod.RangeChecker._fd(files_, path)

    before = verify_threads()
    c = Held(chunk=CHUNK)
    mine = verify_threads() - before
    assert len(mine) == 1 and all(t.is_alive() for t in mine)
    c.same(out, header, "a", 0, A_BYTES, str(held), SRC_OFF)
    for _ in range(50):
        c.same(out, header, "a", 0, A_BYTES, src, SRC_OFF)
    assert entered.wait(30), "the checker never started the first job"
    c.close()
    assert not any(t.is_alive() for t in mine)
    assert c.error is None
    assert out_reads == A_BYTES  # the held job finished; the 50 behind it were dropped


def test_close_is_prompt_when_nothing_is_queued():
    before = verify_threads()
    c = verify_mod.RangeChecker()
    mine = verify_threads() - before
    assert len(mine) == 1
    (t,) = mine
    assert t.daemon  # never keeps the interpreter alive
    c.close()
    assert not t.is_alive()
    c.close()  # twice is harmless
    assert not t.is_alive()


def test_context_manager_closes_the_thread_when_the_body_raises(files):
    before = verify_threads()
    with pytest.raises(RuntimeError, match="body failed"):
        with verify_mod.RangeChecker(chunk=CHUNK) as c:
            mine = verify_threads() - before
            assert len(mine) == 1 and all(t.is_alive() for t in mine)
            c.same(files["out"], files["header"], "a", 0, A_BYTES, files["src"], SRC_OFF)
            raise RuntimeError("body failed")
    assert not any(t.is_alive() for t in mine)
    assert not {t for t in verify_threads() - before if t.is_alive()}


def test_an_unexpected_exception_in_the_thread_is_reported_not_swallowed(files):
    """A job the checker cannot even start (unknown tensor name) must still reach finish(): a
    thread that died silently would leave the writer waiting, or publishing unchecked bytes."""
    with verify_mod.RangeChecker(chunk=CHUNK) as c:
        c.same(files["out"], files["header"], "no-such-tensor", 0, 1, files["src"], SRC_OFF)
        with pytest.raises(KeyError):
            c.finish()


# =============================================================================================
# reopen()
EXPECTED = {"a": ("U8", (A_BYTES,)), "b": ("F32", (8, 8))}


def test_reopen_passes_on_a_correct_file(files):
    verify_mod.reopen(files["out"], files["head"], dict(EXPECTED))


def test_reopen_header_byte_differs_on_disk(files):
    """A difference the JSON parser cannot see (a padding space replaced by a newline, still valid
    JSON with the same meaning) is caught: the header is compared byte for byte."""
    head = files["head"]
    pad = head.rindex(b" ")
    assert pad > 8 and head.rstrip(b" ").endswith(b"}"), "the test needs a padded header"
    with open(files["out"], "r+b") as f:
        f.seek(pad)
        f.write(b"\n")
    read_local_header(files["out"])  # still a valid file with the same tensors
    with pytest.raises(WeightcheckError, match="the header on disk is not the one written"):
        verify_mod.reopen(files["out"], head, dict(EXPECTED))


def test_reopen_header_differs_from_the_one_written(files):
    written = bytearray(files["head"])
    i = written.index(b'"a"')
    written[i + 1 : i + 2] = b"c"  # we "wrote" tensor c, the disk says a
    with pytest.raises(WeightcheckError, match="the header on disk is not the one written"):
        verify_mod.reopen(files["out"], bytes(written), dict(EXPECTED))


def test_reopen_trailing_bytes(files):
    with open(files["out"], "ab") as f:
        f.write(b"\0")
    with pytest.raises(WeightcheckError, match="1 trailing bytes after the last tensor"):
        verify_mod.reopen(files["out"], files["head"], dict(EXPECTED))


def test_reopen_truncated(files):
    size = os.path.getsize(files["out"])
    with open(files["out"], "r+b") as f:
        f.truncate(size - 1)
    with pytest.raises(WeightcheckError, match="truncated"):
        verify_mod.reopen(files["out"], files["head"], dict(EXPECTED))


@pytest.mark.parametrize(
    "expected",
    [
        {"a": ("U8", (A_BYTES,))},  # a tensor the plan does not have
        {
            "a": ("U8", (A_BYTES,)),
            "b": ("F32", (8, 8)),
            "c": ("F32", (1,)),
        },  # one missing from the file
        {"a": ("U8", (A_BYTES,)), "bb": ("F32", (8, 8))},  # another name
        {"a": ("I8", (A_BYTES,)), "b": ("F32", (8, 8))},  # another dtype
        {"a": ("U8", (A_BYTES,)), "b": ("F32", (64,))},  # another shape, same bytes
    ],
    ids=["extra-in-file", "missing-in-file", "name", "dtype", "shape"],
)
def test_reopen_planned_tensors_differ(files, expected):
    with pytest.raises(
        WeightcheckError, match="verification failed: the header does not list the planned tensors"
    ):
        verify_mod.reopen(files["out"], files["head"], expected)


@pytest.mark.parametrize(
    "metadata",
    [None, {"format": "np"}, {"weightcheck_version": "x"}],
    ids=["no-metadata", "format-np", "no-format-key"],
)
def test_reopen_metadata_without_format_pt(tmp_path, metadata):
    a = _data(64, 5)
    head, _ = _layout([("a", "U8", (64,), a)], metadata)
    path = tmp_path / "m.safetensors"
    path.write_bytes(head + a)
    with pytest.raises(WeightcheckError, match="__metadata__ format is not pt"):
        verify_mod.reopen(str(path), head, {"a": ("U8", (64,))})


def test_reopen_missing_file_is_an_os_error(tmp_path):
    """(The writer turns an OSError into 'cannot write'; reopen itself does not wrap it.)"""
    with pytest.raises(OSError):
        verify_mod.reopen(str(tmp_path / "none.safetensors"), b"x" * 16, {})


# =============================================================================================
# header_bytes(..., data_start_mod=(r, m))
M = 65536


@pytest.mark.parametrize("r", [0, 8, 1488, 4096, 32768, 65520, 65528])
def test_header_bytes_data_start_residue(tmp_path, r):
    import numpy as np
    from safetensors import safe_open

    a = np.arange(300, dtype=np.float32)
    b = np.arange(7 * 3, dtype=np.int64).reshape(7, 3)
    entries = [OutTensor("x.weight", "F32", (300,), b""), OutTensor("y", "I64", (7, 3), b"")]
    meta = {"format": "pt", "k": "v"}
    plain = header_bytes(entries, meta)
    head = header_bytes(entries, meta, (r, M))
    assert len(head) % M == r  # len(head) == 8 + header length == the data start
    assert len(head) % 8 == 0
    assert len(plain) <= len(head) < len(plain) + M  # the least padding that reaches r
    assert head[8:].rstrip(b" ") == plain[8:].rstrip(b" ")  # padding is spaces only
    path = tmp_path / "p.safetensors"
    path.write_bytes(head + a.tobytes() + b.tobytes())

    h = read_local_header(str(path))  # our strict parser: lengths and offsets agree
    assert h.data_start % M == r and h.data_start == len(head)
    assert h.metadata == meta
    assert h.tensors["x.weight"].begin == 0 and h.tensors["y"].begin == a.nbytes
    with safe_open(str(path), framework="numpy") as f:  # the library itself
        assert f.metadata() == meta
        np.testing.assert_array_equal(f.get_tensor("x.weight"), a)
        np.testing.assert_array_equal(f.get_tensor("y"), b)


def test_header_bytes_without_mod_is_the_usual_padding():
    entries = [OutTensor("x", "F32", (3,), b"")]
    head = header_bytes(entries, {"format": "pt"})
    n = read_header_length(head, "t")
    body = head[8:].rstrip(b" ")
    assert len(head) == 8 + n and n % 8 == 0 and n < len(body) + 8


@pytest.mark.parametrize("r", [1, 4, 12, 65527])
def test_header_bytes_data_start_residue_not_multiple_of_8_refused(r):
    with pytest.raises(ValueError, match="not a multiple of 8"):
        header_bytes([OutTensor("x", "F32", (3,), b"")], {"format": "pt"}, (r, M))
