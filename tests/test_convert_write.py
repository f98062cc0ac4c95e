"""`weightcheck convert`'s write path: offsets kept modulo ALIGN, chunked copies checked while the
next chunk is copied (and stopping early on a mismatch), --fsync, the text after a write, a signal
while the checker thread starts, and what a rename imports.

Everything runs through the CLI in-process (conftest.run_cli) or in a fresh interpreter for the
import checks. Tensor bytes are read back with the safetensors library (tests/helpers/convert.py).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading

import pytest
import synth
from conftest import K25, ROOT, load_config, run_cli
from helpers.convert import (
    convert,
    leftovers,
    llama_target,
    refused,
    snapshot,
    tensor_bytes,
    weight_files,
)
from helpers.text import unwrapped

from weightcheck.commands import convert as convert_mod
from weightcheck.commands.convert import produce, publish
from weightcheck.storage import verify as verify_mod
from weightcheck.storage.header import read_local_header
from weightcheck.storage.writer import write_file

THREAD = "weightcheck-verify"


def llama_cfg(**kw):
    """The Kimi-K2.5 SpecForge config scaled down (as in test_convert.py): 15 tensors, ~680 KB."""
    return synth.scaled_config(load_config(K25), **kw)


def verify_threads() -> list:
    return [t for t in threading.enumerate() if t.name == THREAD and t.is_alive()]


@pytest.fixture(autouse=True)
def _no_verify_thread_outlives_a_test():
    before = set(verify_threads())
    yield
    assert not set(verify_threads()) - before, f"a {THREAD} thread outlived the conversion"


@pytest.fixture
def src(make_drafter):
    return make_drafter("src", llama_cfg())


def _copies(report: dict) -> list:
    return [t for t in report["tensors"] if t["how"] == "copy"]


def _chunks(report: dict, chunk: int) -> int:
    """copy_file_range calls a full conversion makes with COPY_CHUNK = chunk."""
    return sum(math.ceil(t["bytes"] / chunk) for t in _copies(report))


def _header_len_and_json(path) -> tuple[int, bytes]:
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return n, f.read(n)


class SpyChecker(verify_mod.RangeChecker):
    """The real checker; remembers its instances, signals the moment .error is set, and counts
    the bytes it reads back from the output (``out_read``: each range it checks, once)."""

    instances: list = []
    chunk = None

    def __init__(self, chunk=None):
        self.failed = threading.Event()
        self.out_fd, self.out_read = None, 0
        SpyChecker.instances.append(self)
        if chunk is None:
            chunk = SpyChecker.chunk or verify_mod.CHECK_CHUNK
        super().__init__(chunk=chunk)

    def _same(self, files, bufs, out_path, *rest):
        self.out_fd = self._fd(files, out_path)
        return super()._same(files, bufs, out_path, *rest)

    def _crc(self, files, buf, out_path, *rest):
        self.out_fd = self._fd(files, out_path)
        return super()._crc(files, buf, out_path, *rest)

    @property
    def error(self):
        return self._error

    @error.setter
    def error(self, value):
        self._error = value
        if value is not None:
            self.failed.set()


@pytest.fixture
def spy_checker(monkeypatch):
    monkeypatch.setattr(SpyChecker, "instances", [])
    monkeypatch.setattr(SpyChecker, "chunk", None)
    monkeypatch.setattr(verify_mod, "RangeChecker", SpyChecker)
    real = verify_mod._read_at

    def read_at(fd, view, offset):  # runs in a checker's thread
        k = real(fd, view, offset)
        for c in SpyChecker.instances:
            if c._thread is threading.current_thread() and fd == c.out_fd:
                c.out_read += k
        return k

    monkeypatch.setattr(verify_mod, "_read_at", read_at)
    return SpyChecker


# =============================================================================================
# 1. offsets kept modulo ALIGN
@pytest.mark.parametrize(
    "to, extra", [("vllm", ()), ("sglang", ()), ("speculators", ("--dtype", "fp32"))]
)
def test_copies_keep_the_source_offsets_modulo_align(tmp_path, src, monkeypatch, to, extra):
    monkeypatch.setattr(produce, "ALIGN_MIN_BYTES", 0)  # the tiny drafter counts as large
    out = tmp_path / "out"
    r = convert(src, out, "--to", to, "--target", llama_target(), *extra)
    copies = _copies(r)
    assert copies, r["tensors"]
    if extra:  # --dtype fp32: only d2t (I64) and t2d (BOOL) are copied; the rest is cast
        assert {t["source"] for t in copies} == {"d2t", "t2d"}
    sh = read_local_header(src / "model.safetensors")
    (path,) = weight_files(out)
    oh = read_local_header(path)
    align = produce.ALIGN
    n, raw = _header_len_and_json(path)
    assert oh.data_start == 8 + n and n >= len(raw.rstrip(b" ")) + 8  # padded beyond the usual 8
    for t in copies:
        s_off = sh.data_start + sh.tensors[t["source"]].begin
        o_off = oh.data_start + oh.tensors[t["output"]].begin
        assert o_off % align == s_off % align, (t["output"], o_off, s_off)
    assert oh.data_start % 8 == 0
    # the bytes are the source's, read by the safetensors library from the padded file
    a, b = tensor_bytes(src), tensor_bytes(out)
    for t in copies:  # (tensor_bytes names both sides canonically: midlayer.*)
        assert b[t["source"]] == a[t["source"]]
    if not extra:
        assert a == b


def test_alignment_follows_the_most_bytes(tmp_path, monkeypatch):
    """Two runs of copied tensors whose offsets differ modulo ALIGN (embed_tokens, 512000 bytes,
    sits between them in the source and is dropped): the data start is chosen for the run with
    more bytes, and every tensor of that run keeps its source offset modulo ALIGN."""
    monkeypatch.setattr(produce, "ALIGN_MIN_BYTES", 0)
    cfg = llama_cfg(vocab=2000)
    tensors = synth.drafter_tensors(cfg, include_embed=True)
    (emb,) = [t for t in tensors if t.name == "embed_tokens.weight"]
    assert emb.nbytes % produce.ALIGN != 0
    rest = [t for t in tensors if t is not emb]
    first, second = rest[:3], rest[3:]  # fc + q + k before the embedding, the rest after it
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(cfg))
    write_file(str(src / "model.safetensors"), first + [emb] + second, {"format": "pt"})
    heavy = {
        t.name
        for t in (first if sum(t.nbytes for t in first) > sum(t.nbytes for t in second) else second)
    }
    light = {t.name for t in first + second} - heavy

    r = convert(src, tmp_path / "out", "--to", "sglang", "--embeddings", "drop")
    assert {t["source"] for t in _copies(r)} == heavy | light
    sh = read_local_header(src / "model.safetensors")
    oh = read_local_header(tmp_path / "out" / "model.safetensors")
    same = {
        name
        for name in heavy | light
        if (oh.data_start + oh.tensors[name].begin) % produce.ALIGN
        == (sh.data_start + sh.tensors[name].begin) % produce.ALIGN
    }
    assert same == heavy
    assert tensor_bytes(tmp_path / "out") == {
        k: v for k, v in tensor_bytes(src).items() if k != "embed_tokens.weight"
    }


def test_sharded_source_to_sharded_output_keeps_offsets_per_shard(tmp_path, src, monkeypatch):
    """A sharded source (a first convert with a small --max-shard-size) converted again into
    shards with the padding on: each output shard chooses its own data start so that the most
    copied bytes keep their offset modulo ALIGN in their source file (tensors from different
    source files or after a gap form separate classes; the heaviest eligible class wins), the
    library opens every shard, and the tensors round-trip byte for byte."""
    sharded = tmp_path / "sharded"
    convert(src, sharded, "--to", "vllm", "--target", llama_target(), "--max-shard-size", "300KB")
    assert len(weight_files(sharded)) > 2
    monkeypatch.setattr(produce, "ALIGN_MIN_BYTES", 0)
    out = tmp_path / "out"
    r = convert(sharded, out, "--to", "sglang", "--max-shard-size", "400KB")
    files = weight_files(out)
    assert len(files) > 1
    src_headers = {p.name: read_local_header(p) for p in weight_files(sharded)}
    index = json.loads((sharded / "model.safetensors.index.json").read_text())["weight_map"]
    by_output = {t["output"]: t for t in _copies(r)}
    for path in files:
        oh = read_local_header(path)
        classes: dict = {}  # (source offset - output offset) mod ALIGN -> copied bytes
        for name in oh.tensors:
            if name not in by_output:
                continue
            t = by_output[name]
            sh = src_headers[index[t["source"]]]
            key = (
                (sh.data_start + sh.tensors[t["source"]].begin)
                - (oh.data_start + oh.tensors[name].begin)
            ) % produce.ALIGN
            classes[key] = classes.get(key, 0) + t["bytes"]
        eligible = {
            k: v for k, v in classes.items() if k % 8 == 0
        }  # the data start stays 8-aligned
        assert eligible and classes.get(0) == max(eligible.values()), (path.name, classes)
    assert tensor_bytes(out) == tensor_bytes(src)


def test_small_copy_is_not_padded(tmp_path, src):
    assert produce.ALIGN_MIN_BYTES > 1 << 20  # the tiny drafter is below it
    out = tmp_path / "out"
    convert(src, out, "--to", "vllm", "--target", llama_target())
    n, raw = _header_len_and_json(out / "model.safetensors")
    body = raw.rstrip(b" ")
    assert n % 8 == 0 and n < len(body) + 8  # the library's padding, nothing more
    assert read_local_header(out / "model.safetensors").data_start == 8 + n
    assert tensor_bytes(out) == tensor_bytes(src)


# =============================================================================================
# 2. chunked copies
def test_small_copy_chunks_give_the_same_bytes(tmp_path, src, monkeypatch, spy_checker):
    default = tmp_path / "default"
    r = convert(src, default, "--to", "vllm", "--target", llama_target())

    calls = []
    real = produce.copy_range

    def counting(src_path, src_off, n, out_fd, out_off):
        calls.append(n)
        return real(src_path, src_off, n, out_fd, out_off)

    monkeypatch.setattr(produce, "COPY_CHUNK", 4096)
    monkeypatch.setattr(produce, "copy_range", counting)
    spy_checker.chunk = 1000  # not a divisor of the copy chunk: compares straddle copy ranges
    chunked = tmp_path / "chunked"
    convert(src, chunked, "--to", "vllm", "--target", llama_target())
    assert len(calls) == _chunks(r, 4096) and max(calls) == 4096
    assert tensor_bytes(chunked) == tensor_bytes(default) == tensor_bytes(src)
    total = sum(t["bytes"] for t in r["tensors"])
    # the checker that ran re-read every byte of every tensor (the default run's checker too)
    assert [c.out_read for c in spy_checker.instances] == [total, total]
    assert (chunked / "model.safetensors").read_bytes() == (
        default / "model.safetensors"
    ).read_bytes()


def test_corruption_mid_tensor_stops_the_copy_early(tmp_path, src, monkeypatch, spy_checker):
    """The 3rd 4 KiB chunk of fc.weight is corrupted after it is copied. The writer polls the
    checker after each chunk, so it stops within a chunk of the failure. Deterministic: the 4th
    copy waits until the checker has set .error (it checks chunk 3 while chunk 4 is copied)."""
    before = snapshot(src)
    out = tmp_path / "out"
    plan = convert(src, tmp_path / "dry", "--to", "vllm", "--target", llama_target(), "--dry-run")
    monkeypatch.setattr(produce, "COPY_CHUNK", 4096)
    spy_checker.chunk = 1024
    real = produce.copy_range
    calls = []

    def corrupt_third(src_path, src_off, n, out_fd, out_off):
        calls.append((src_off, n))
        if len(calls) == 4:
            assert spy_checker.instances[-1].failed.wait(30), "the checker missed the corruption"
        real(src_path, src_off, n, out_fd, out_off)
        if len(calls) == 3:
            with open(src_path, "rb") as f:
                f.seek(src_off + n // 2)
                b = f.read(1)
            os.pwrite(out_fd, bytes([b[0] ^ 0x5A]), out_off + n // 2)

    monkeypatch.setattr(produce, "copy_range", corrupt_third)
    msg = refused(src, out, "--to", "vllm", "--target", llama_target())
    assert "verification failed" in msg and "differs from its source" in msg
    assert "fc.weight" in msg  # the first tensor in the source, 24 chunks of 4 KiB
    assert 3 <= len(calls) <= 4 < _chunks(plan, 4096)
    (checker,) = spy_checker.instances
    # checked in order: chunks 1 and 2, then chunk 3 up to the 1 KiB compare holding the bad byte
    # (at 2048 of 4096, the compare read and failed); chunk 4, queued behind the failure, was not
    assert checker.out_read == 2 * 4096 + 3 * 1024
    assert not out.exists() and leftovers(tmp_path) == []
    assert snapshot(src) == before


# =============================================================================================
# 3. --fsync
@pytest.fixture
def fsync_spy(monkeypatch):
    seen = []
    real_fsync = os.fsync

    def fsync(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(produce.os, "fsync", fsync)
    ranges = []
    real_wb = produce.start_writeback

    def start_writeback(fd, off, n):
        ranges.append((os.readlink(f"/proc/self/fd/{fd}"), off, n))
        return real_wb(fd, off, n)

    monkeypatch.setattr(produce, "start_writeback", start_writeback)
    monkeypatch.setattr(produce, "WRITEBACK_CHUNK", 64 << 10)
    return seen, ranges


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_fsync_flushes_every_file_and_folder(tmp_path, src, fsync_spy):
    seen, ranges = fsync_spy
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    r = convert(
        src, out, "--to", "vllm", "--target", llama_target(), "--fsync", "--max-shard-size", "300KB"
    )
    assert r["written"]["fsync"] is True
    shards = [f for f in r["written"]["files"] if f.endswith(".safetensors")]
    assert len(shards) >= 2 and "model.safetensors.index.json" in r["written"]["files"]
    parent = os.path.realpath(work)
    tmp = os.path.join(parent, f".out{convert_mod.TMP_MARK}{os.getpid()}")
    expected = {os.path.join(tmp, f) for f in r["written"]["files"] + ["config.json", "README.md"]}
    expected |= {tmp, parent}
    assert set(seen) == expected
    assert seen[-1] == parent  # OUT's parent last: after the rename that put OUT in place
    assert seen.index(tmp) < len(seen) - 1 and all(p.startswith(tmp) for p in seen[:-1])
    # writeback was started in WRITEBACK_CHUNK steps, each range following the previous one
    assert ranges
    by_file: dict = {}
    for path, off, n in ranges:
        by_file.setdefault(path, []).append((off, n))
    for path, rs in by_file.items():
        assert path in expected
        pos = 0
        for off, n in rs:
            assert off == pos and n >= produce.WRITEBACK_CHUNK
            pos += n
        assert pos <= os.path.getsize(os.path.join(out, os.path.basename(path)))
    assert tensor_bytes(out) == tensor_bytes(src)
    assert leftovers(work) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_no_fsync_without_the_flag(tmp_path, src, fsync_spy):
    seen, ranges = fsync_spy
    r = convert(
        src,
        tmp_path / "out",
        "--to",
        "vllm",
        "--target",
        llama_target(),
        "--max-shard-size",
        "300KB",
    )
    assert r["written"]["fsync"] is False
    assert seen == [] and ranges == []
    assert tensor_bytes(tmp_path / "out") == tensor_bytes(src)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux-only")
def test_sync_file_range_found_on_linux():
    assert produce.sync_file_range() is not None


# =============================================================================================
# 4. what the CLI prints after a write
def test_text_after_a_write_is_a_summary(tmp_path, src):
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "vllm", "--target", llama_target())
    assert r.exit_code == 0, r
    lines = r.stdout.strip().splitlines()
    # the first line, as wrapped to the width (two temp paths may not fit one line)
    assert " ".join(r.stdout.split()).startswith(f"converted: {src} (specforge) -> {out} [vllm]")
    assert lines[0].startswith("converted: ")
    wrote = [w for w in unwrapped(r.stdout).split(" wrote ")[1:]]
    wrote = ["wrote " + w for w in wrote]
    assert len(wrote) == 1
    assert (
        wrote[0].startswith("wrote 15 tensors (")
        and "; 10 renamed, 5 copied as they were) in model.safetensors, "
        "config.json, README.md — every byte re-read and verified"
        in wrote[0]
    )
    assert wrote[0].endswith("every byte re-read and verified")  # no --fsync here
    assert "source tensor" not in r.stdout and "--fsync" not in r.stdout
    assert "fc.weight" not in r.stdout  # no per-tensor rows


def test_text_after_a_write_counts_each_kind_and_mentions_fsync(tmp_path, src):
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "sglang", "--dtype", "fp32", "--fsync")
    assert r.exit_code == 0, r
    (wrote,) = ["wrote " + w for w in unwrapped(r.stdout).split(" wrote ")[1:]]
    assert "; 2 copied as they were, 13 cast)" in wrote  # BF16 tensors cast, d2t and t2d kept
    assert wrote.endswith("every byte re-read and verified, flushed to disk (--fsync)")
    assert "source tensor" not in r.stdout


def test_dry_run_text_has_the_table(tmp_path, src):
    out = tmp_path / "out"
    r = run_cli(
        "convert",
        src,
        out,
        "--to",
        "vllm",
        "--target",
        llama_target(),
        "--dry-run",
        env={"COLUMNS": "160"},  # a row per tensor
    )
    assert r.exit_code == 0, r
    assert r.stdout.startswith("plan: ")
    assert "source tensor" in r.stdout and "output" in r.stdout
    assert any(
        line.split()[:2] == ["midlayer.self_attn.q_proj.weight", "layers.0.self_attn.q_proj.weight"]
        for line in r.stdout.splitlines()
    )
    assert "dry run: nothing written" in r.stdout and "every byte" not in r.stdout
    assert not out.exists()


def test_json_written_fsync(tmp_path, src):
    a = convert(src, tmp_path / "a", "--to", "vllm", "--target", llama_target())
    b = convert(src, tmp_path / "b", "--to", "vllm", "--target", llama_target(), "--fsync")
    assert a["written"]["fsync"] is False and b["written"]["fsync"] is True
    assert a["written"]["files"] == b["written"]["files"] == ["model.safetensors"]
    assert tensor_bytes(tmp_path / "a") == tensor_bytes(tmp_path / "b")


# =============================================================================================
# 5. a signal while the checker thread starts
def test_signal_while_the_checker_starts(tmp_path, src, monkeypatch):
    """SIGTERM arrives inside RangeChecker() (convert's handler holds it there); once the thread
    exists it is raised: the usual one-line refusal, nothing left, no checker thread alive. A
    handler of our own stands in front: if convert's handler did not run, ours records it
    (instead of the default action killing pytest) and the test fails."""
    before = snapshot(src)
    started = []

    class SignalledChecker(verify_mod.RangeChecker):
        def __init__(self, *a, **kw):
            os.kill(os.getpid(), signal.SIGTERM)
            super().__init__(*a, **kw)
            started.append(self)

    monkeypatch.setattr(verify_mod, "RangeChecker", SignalledChecker)
    ours = []

    def sentinel(signum, frame):
        ours.append(signum)

    previous = signal.signal(signal.SIGTERM, sentinel)
    try:
        out = tmp_path / "out"
        r = run_cli("convert", src, out, "--to", "vllm", "--target", llama_target())
        assert signal.getsignal(signal.SIGTERM) is sentinel  # convert put ours back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ours == []  # convert's handler took the signal
    assert r.exit_code == 2, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("weightcheck: error:")
    assert f"interrupted by signal {int(signal.SIGTERM)}: nothing written" in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert len(started) == 1  # the thread was started, then stopped
    assert not verify_threads()
    assert not out.exists() and leftovers(tmp_path) == []
    assert snapshot(src) == before


def _refused_by_signal(r, signum, out, tmp_path):
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1, r
    assert f"interrupted by signal {int(signum)}: nothing written" in lines[0]
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert not out.exists() and leftovers(tmp_path) == []


def test_signal_as_the_checker_is_entered_stops_its_thread(tmp_path, src, monkeypatch):
    """SIGTERM between building the checker and entering its ``with`` (here: inside __enter__)
    is held until the with owns the thread, so the thread is stopped. (Regression: it used to
    escape before the with, leaving a weightcheck-verify thread running.)"""

    class EnteredChecker(verify_mod.RangeChecker):
        def __enter__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            return super().__enter__()

    monkeypatch.setattr(verify_mod, "RangeChecker", EnteredChecker)
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "vllm", "--target", llama_target())
    _refused_by_signal(r, signal.SIGTERM, out, tmp_path)
    assert not verify_threads()


def test_signal_right_after_the_handler_is_installed(tmp_path, src, monkeypatch):
    """SIGINT the moment convert's handler is in place, before anything is written: the usual
    one-line refusal (not an internal error), and the previous handler is back. (Regression: the
    handlers were installed outside the try that turns the signal into that refusal.)"""
    real = publish.signal.signal
    previous = signal.getsignal(signal.SIGINT)

    def install_then_signal(sig, handler):
        old = real(sig, handler)
        if sig == signal.SIGINT and getattr(handler, "__name__", "") == "on_signal":
            os.kill(os.getpid(), signal.SIGINT)
        return old

    monkeypatch.setattr(publish.signal, "signal", install_then_signal)
    out = tmp_path / "out"
    r = run_cli("convert", src, out, "--to", "vllm", "--target", llama_target())
    monkeypatch.undo()
    _refused_by_signal(r, signal.SIGINT, out, tmp_path)
    assert signal.getsignal(signal.SIGINT) is previous
    assert not verify_threads()


# =============================================================================================
# 6. what a conversion imports
_PROBE = (
    "import sys, json\nfrom weightcheck.cli import main\n"
    "try:\n    main(sys.argv[1:], prog_name='weightcheck')\n"
    "except SystemExit as e:\n    print('exit', e.code, file=sys.stderr)\n"
    "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'tabulate'})))"
)


@pytest.mark.parametrize(
    "args, imported",
    [
        ((), []),  # a rename, text report
        (("--json",), []),
        (("--dry-run",), ["tabulate"]),  # the plan is a table
    ],
    ids=["rename-text", "rename-json", "dry-run-text"],
)
def test_what_a_conversion_imports(tmp_path, src, args, imported):
    out = tmp_path / "out"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            "convert",
            str(src),
            str(out),
            "--to",
            "vllm",
            "--target",
            str(llama_target()),
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=120,
    )
    assert p.returncode == 0 and "exit" not in p.stderr, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == imported
    if "--dry-run" in args:
        assert "source tensor" in p.stdout and not out.exists()
    else:
        assert (out / "model.safetensors").exists()
