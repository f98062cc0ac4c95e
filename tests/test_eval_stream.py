"""What eval reads and when (issue #33): the data's files read ahead into the page cache from the
moment they are listed (weightcheck/eval/readahead.py: within a window of the staging buffers'
progress, each mode, only the ranges asked for, before torch is imported) and the weights read in
pieces straight into their tensors (weightcheck/eval/upload.py; on a GPU through pinned buffers,
checked in tests/test_eval_gpu.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest
import synth
from conftest import CONFIGS, ROOT, run_python

KB = 1000


def _files(tmp_path, n: int, size: int = 100 * KB) -> list[str]:
    out = []
    for i in range(n):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(bytes([i % 251]) * size)
        out.append(str(p))
    return out


def _settle(ahead, want: int) -> int:
    """Wait until the read-ahead has read ``want`` bytes (or 20 s), then a little longer: what it
    read by then."""
    for _ in range(200):
        if ahead.bytes >= want:
            break
        time.sleep(0.1)
    time.sleep(0.3)  # had it gone past the window, it would have by now
    return ahead.bytes


def test_the_read_ahead_stays_within_its_window(tmp_path):
    from weightcheck.eval.readahead import ReadAhead

    files = _files(tmp_path, 10)
    ahead = ReadAhead(files, mode="read", window=250 * KB, threads=2)
    try:
        assert _settle(ahead, 200 * KB) == 200 * KB  # files 0 and 1: a third would pass 250 KB
        ahead.handed(5)  # the consumer took files 0-4 (it waits for them): 2-6 now
        assert _settle(ahead, 700 * KB) == 700 * KB
        ahead.handed(10)  # the rest: every file, in order
        assert _settle(ahead, 1000 * KB) == 1000 * KB
    finally:
        ahead.close()
    assert ahead.finished is not None and ahead.bytes == 1000 * KB
    # advise: the files the consumer has taken are its own to read, never advised
    advise = ReadAhead(files, mode="advise", window=250 * KB)
    try:
        assert _settle(advise, 200 * KB) == 200 * KB
        advise.handed(5)
        assert _settle(advise, 400 * KB) == 400 * KB
    finally:
        advise.close()


def test_the_consumer_reads_a_file_once_the_read_ahead_has(tmp_path):
    """In read mode the staging readers wait for the read-ahead's threads to have read a file
    (the disk serves their in-order reads alone); at once in another mode, for a file it does not
    read, and once it is closed."""
    import threading

    from weightcheck.eval import readahead

    files = _files(tmp_path, 4)
    gate, events = threading.Event(), []

    class Slow(readahead.ReadAhead):
        def _read(self, path, spans, buf):
            if path == files[2]:
                gate.wait(20)
            got = super()._read(path, spans, buf)
            events.append(("read", os.path.basename(path)))
            return got

    ahead = Slow(files, mode="read", window=10 << 20, threads=2)
    try:
        waiter = threading.Thread(
            target=lambda: (ahead.wait(files[2]), events.append(("waited", "f2.bin")))
        )
        waiter.start()
        ahead.wait(files[0])  # read (or being read): returns once it is
        assert ("read", "f0.bin") in events
        time.sleep(0.3)
        assert ("waited", "f2.bin") not in events  # f2's read is held: so is the wait
        gate.set()
        waiter.join(20)
        assert events.index(("read", "f2.bin")) < events.index(("waited", "f2.bin"))
        ahead.wait(str(tmp_path / "not-listed.bin"))  # not one of its files: at once
    finally:
        ahead.close()
    held = threading.Event()
    gate.clear()  # f2's read held again: f3 is never read while the waiter waits for it
    stuck = Slow(files, mode="read", window=10 << 20, threads=1)
    t = threading.Thread(target=lambda: (stuck.wait(files[3]), held.set()))
    t.start()
    stuck.close()  # closed: the waiter goes on (its own read says what is wrong, if anything)
    gate.set()
    t.join(20)
    assert held.is_set()
    off = readahead.ReadAhead(files, mode="off")
    off.wait(files[0])  # nothing to wait for
    off.close()


def test_one_file_always_goes_ahead_and_the_modes(tmp_path):
    from weightcheck.eval.readahead import ReadAhead

    files = _files(tmp_path, 3)
    small = ReadAhead(files, mode="read", window=1, threads=4)  # a window smaller than a file
    assert _settle(small, 100 * KB) == 100 * KB
    small.close()
    advise = ReadAhead(files, mode="advise", window=10 << 20)  # the kernel asked, all of it
    assert _settle(advise, 300 * KB) == 300 * KB
    advise.close()
    off = ReadAhead(files, mode="off")
    off.close()
    assert off.bytes == 0 and off.finished is None


def test_only_the_ranges_asked_for_and_a_bad_file_left_to_the_consumer(tmp_path):
    from weightcheck.eval.readahead import ReadAhead

    files = _files(tmp_path, 2)
    files.append(str(tmp_path / "missing.bin"))
    ahead = ReadAhead(files, ranges=lambda p: [(10, 20), (50, 70)], mode="read")
    got = _settle(ahead, 60)
    ahead.close()
    assert got == 60  # 30 bytes of each file there, nothing of the missing one, no exception


def test_ckpt_ranges_leave_out_the_last_hidden_state(tmp_path):
    """Without --target eval reads no last hidden state: nor does the read-ahead."""
    torch = pytest.importorskip("torch")
    from weightcheck.eval.data import ckpt_ranges, index_ckpt

    f = str(tmp_path / "data_0.ckpt")
    torch.save({"input_ids": torch.arange(5), "loss_mask": torch.ones(5, dtype=torch.long),
                "aux_hidden_state": torch.zeros(1, 5, 12), "hidden_state": torch.ones(1, 5, 4)},
               f)  # fmt: skip
    idx = index_ckpt(f)
    spans = ckpt_ranges(f)
    assert len(spans) == 3 and sum(b - a for a, b in spans) == 40 + 40 + 240
    assert (idx["hidden_state"].begin, idx["hidden_state"].begin + 80) not in spans
    assert ckpt_ranges(str(tmp_path / "x.ckpt.gz")) is None


def test_the_libraries_go_first_whole_and_outside_the_window(tmp_path):
    """``first`` (torch's libraries in a run) is read before any data file, whole, whatever the
    window; only in ``read`` mode."""
    from weightcheck.eval import readahead

    files = _files(tmp_path, 3)
    libs = [str(tmp_path / "libbig.so"), str(tmp_path / "libsmall.so.1")]
    (tmp_path / "libbig.so").write_bytes(b"x" * (500 * KB))
    (tmp_path / "libsmall.so.1").write_bytes(b"y" * (50 * KB))
    order = []

    class Traced(readahead.ReadAhead):
        def _read(self, path, spans, buf):
            order.append(os.path.basename(path))
            return super()._read(path, spans, buf)

    ahead = Traced(files, mode="read", window=1, threads=1, first=libs)
    try:
        _settle(ahead, 100 * KB)
    finally:
        ahead.close()
    assert order[:3] == ["libbig.so", "libsmall.so.1", "f0.bin"]
    assert ahead.first_bytes == 550 * KB and ahead.bytes == 100 * KB  # the window: one data file
    assert ahead.first_done is not None
    advise = Traced(files, mode="advise", window=10 << 20, first=libs)
    advise.close()
    assert advise.first == [] and advise.first_bytes == 0


def test_a_cuda_builds_libraries_are_not_read_first(monkeypatch):
    """libraries(): none for a CUDA build (libtorch_cuda beside libtorch_cpu: GBs the import and a
    forward mostly never touch; measured slower, docs/eval.md §7), a CPU build's all."""
    from weightcheck.eval import readahead

    monkeypatch.delitem(__import__("sys").modules, "torch", raising=False)
    cpu = ["/t/lib/libtorch_cpu.so", "/t/lib/libc10.so"]
    monkeypatch.setattr(readahead, "torch_libraries", lambda: cpu)
    assert readahead.libraries() == cpu
    monkeypatch.setattr(readahead, "torch_libraries", lambda: ["/t/lib/libtorch_cuda.so", *cpu])
    assert readahead.libraries() == []


def test_torchs_libraries_are_found_without_importing_torch():
    """readahead.libraries(): torch's shared libraries, largest first, found without importing
    torch; none once it is imported (nothing left for its import to wait for)."""
    pytest.importorskip("torch")
    from weightcheck.eval.readahead import libraries

    code = (
        "import json, sys\n"
        "from weightcheck.eval.readahead import libraries\n"
        "found = libraries()\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'found': found}))\n"
    )
    p = run_python(code)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout)
    assert got["torch"] is False
    names = [os.path.basename(f) for f in got["found"]]
    assert any(n.startswith("libtorch_cpu.so") for n in names), names
    sizes = [os.path.getsize(f) for f in got["found"]]
    assert sizes == sorted(sizes, reverse=True)
    assert libraries() == []  # this process has imported torch


def _eval_example(tmp_path):
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    d = str(tmp_path / "d")
    synth.write_drafter(d, cfg, seed=1)
    spec = importlib.util.spec_from_file_location("med", ROOT / "examples" / "make_eval_data.py")
    med = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(med)
    made = med.write_eval_example(d, str(tmp_path / "data"), samples=3, seq=8)
    return d, made


# the program, with a probe: whether torch was imported when the read-ahead began and what it was
# given to read first, and a teardown handler that the program's os._exit must skip
_PROBED = (
    "import atexit, sys\n"
    "from weightcheck.eval import readahead\n"
    "real = readahead.ReadAhead.__init__\n"
    "def init(self, *a, **k):\n"
    "    libs = [f for f in k.get('first', ()) if 'libtorch' in f]\n"
    "    print('torch imported:', 'torch' in sys.modules, 'libtorch first:', bool(libs),\n"
    "          file=sys.stderr)\n"
    "    real(self, *a, **k)\n"
    "readahead.ReadAhead.__init__ = init\n"
    "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
    "from weightcheck.cli import run\n"
    "sys.argv[0] = 'weightcheck'\n"
    "run()\n"
)


def test_the_data_is_read_ahead_before_torch_is_imported(tmp_path):
    """`weightcheck eval` (read-ahead on by default) lists the files and starts reading torch's
    libraries, then the data, before it imports torch (the fixed cost of importing it and loading
    the weights is spent with the disk busy); the report out, it ends without the interpreter's
    teardown (cli._end), its output whole in a file as in a pipe, the mappings' cache it built
    saved (its own exit work, done before)."""
    pytest.importorskip("torch")
    d, made = _eval_example(tmp_path)
    cache = tmp_path / "cache"
    args = ["eval", d, "--hidden-states", made["specforge"], "--target", made["target"],
            "--device", "cpu", "--json"]  # fmt: skip
    out = tmp_path / "report.json"
    with open(out, "w") as f:
        p = run_python(_PROBED, *args, env={"WEIGHTCHECK_CACHE_DIR": str(cache)}, stdout=f)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "torch imported: False libtorch first: True" in p.stderr
    assert json.loads(out.read_text())["drafters"][0]["samples"] == 3
    assert "TEARDOWN" not in p.stderr
    assert [f.name for f in cache.iterdir() if f.name.startswith("mappings-")]


def test_the_program_exits_as_asked_after_torch(tmp_path):
    """After torch is imported the program still ends with the status asked for: 2 and one line
    for bad input found late (data of another hidden size), the report in a pipe; a header command
    (no torch) ends the ordinary way, its teardown run."""
    pytest.importorskip("torch")
    d, made = _eval_example(tmp_path)
    other = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()),
                                hidden=96)  # fmt: skip
    d2 = str(tmp_path / "d2")
    synth.write_drafter(d2, other, seed=2)
    bad = run_python(_PROBED, "eval", d2, "--hidden-states", made["specforge"], "--device", "cpu")
    assert bad.returncode == 2, bad.stderr[-2000:]
    lines = [x for x in bad.stderr.splitlines() if x.startswith("weightcheck:")]
    assert len(lines) == 1 and "Traceback" not in bad.stderr
    assert "TEARDOWN" not in bad.stderr
    head = run_python(_PROBED, "inspect", d, "--json")
    assert head.returncode == 0 and json.loads(head.stdout)
    assert "TEARDOWN" in head.stderr


def test_the_uploader_reads_a_tensor_in_pieces(tmp_path):
    """upload.py's pieces (threads, each its own buffer) put together give the file's tensor, on
    the CPU here (the pinned buffers and streams of a GPU: tests/test_eval_gpu.py)."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    from weightcheck.eval import forward, upload
    from weightcheck.sources import open_source

    g = torch.Generator().manual_seed(0)
    save_file({"a": torch.randn(37, 29, generator=g).to(torch.bfloat16),
               "b": torch.randn(3, generator=g), "e": torch.zeros(0, 4)},
              str(tmp_path / "model.safetensors"))  # fmt: skip
    src = open_source(str(tmp_path / "model.safetensors"))
    ref = load_file(str(tmp_path / "model.safetensors"))
    up = upload.Uploader("cpu", threads=3, piece=100)  # 21 pieces for "a", 3 buffers
    try:
        for name, t in ref.items():
            rec = src.tensors[name]
            path, begin = upload.located(src, rec)
            got = up.load(path, begin, t.dtype, t.shape)
            assert got.dtype == t.dtype and torch.equal(got, t)
    finally:
        up.close()
    # the file cut short after it was opened: one line naming it, as the CPU's map says
    with open(tmp_path / "model.safetensors", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / "model.safetensors") - 10)
    from weightcheck.errors import WeightcheckError

    with pytest.raises(WeightcheckError, match="file ends inside a: truncated"):
        forward.load_tensor(src, "a", None, None, torch.device("meta"))  # "a GPU": the uploader
