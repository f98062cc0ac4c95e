"""What eval reads and when (issue #33): the data's files read ahead into the page cache from the
moment they are listed (weightcheck/eval/readahead.py: within a window of the staging buffers'
progress, each mode, only the ranges asked for, before torch is imported) and the weights read in
pieces straight into their tensors (weightcheck/eval/upload.py; on a GPU through pinned buffers,
checked in tests/test_eval_gpu.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import synth
from conftest import CONFIGS, ROOT

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
        ahead.handed(5)  # the consumer took files 0-4: 5 and 6 now, never 2-4
        assert _settle(ahead, 400 * KB) == 400 * KB
        ahead.handed(10)  # the rest is the consumer's: the threads end
    finally:
        ahead.close()
    assert ahead.finished is not None and ahead.bytes == 400 * KB


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


def test_the_data_is_read_ahead_before_torch_is_imported(tmp_path):
    """With a read-ahead mode on, `weightcheck eval` lists the files and starts reading them
    before it imports torch (the fixed cost of importing it and loading the weights is spent with
    the disk busy)."""
    pytest.importorskip("torch")
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    d = str(tmp_path / "d")
    synth.write_drafter(d, cfg, seed=1)
    spec = importlib.util.spec_from_file_location("med", ROOT / "examples" / "make_eval_data.py")
    med = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(med)
    made = med.write_eval_example(d, str(tmp_path / "data"), samples=3, seq=8)
    code = (
        "import sys\n"
        "from weightcheck.eval import readahead\n"
        "readahead.MODE = 'read'\n"
        "real = readahead.ReadAhead.__init__\n"
        "def init(self, *a, **k):\n"
        "    print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
        "    real(self, *a, **k)\n"
        "readahead.ReadAhead.__init__ = init\n"
        "from weightcheck.cli import run\n"
        "sys.argv[0] = 'weightcheck'\n"
        "run()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["eval", d, "--hidden-states", made["specforge"], "--target", made["target"],
            "--device", "cpu", "--json"]  # fmt: skip
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env=env, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert "torch imported: False" in p.stderr
    assert json.loads(p.stdout)["drafters"][0]["samples"] == 3


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
