"""``eval`` at scale, every path on the CPU (issue #33): packed batches (padding, blocks of query
rows) give the per-sample forward's answer; the read-ahead is bounded; --limit, --sample and
--seed; --device and its failures; the progress callback and when a bar is drawn; Ctrl-C; the
intervals on tiny counts (issue #32 item 4); SpecForge files located by sources/torchzip.py; the
bundled example counts the same on any CPU. The GPU's agreement with all this is tests/test_eval_gpu.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import CONFIGS, ROOT, example_module, run_cli, run_python
from helpers.text import unwrapped

torch = pytest.importorskip("torch")

import synth  # noqa: E402

SAMPLES, SEQ = 22, 24


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval-scale")
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    a, b = str(root / "a"), str(root / "b")
    synth.write_drafter(a, cfg, seed=1)
    synth.write_drafter(b, cfg, seed=2)
    made = example_module("make_eval_data", "med").write_eval_example(
        a, str(root / "data"), samples=SAMPLES, seq=SEQ, chain_steps=3, also=[b]
    )
    return {"root": root, "a": a, "b": b, "cfg": cfg, **made}


def _args(ex, *more):
    return [ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"], *more]


# -- packed batches ------------------------------------------------------------------------------
def _random_batch(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    L = sum(lengths)
    return torch.randn(L, 3 * 128, generator=g), torch.randint(2048, (L,), generator=g)


def test_packed_batches_give_the_per_sample_forward(ex):
    """Sequences of 1 to 40 positions packed in one batch, the attention in padded groups and in
    blocks of query rows (a tiny budget): each sequence's logits are its own forward's."""
    from weightcheck.eval.forward import Eagle3Drafter
    from weightcheck.eval.packed import SCORE_BYTES, Layout
    from weightcheck.eval.target import TargetSide
    from weightcheck.model.drafter import load_drafter

    m = Eagle3Drafter(load_drafter(ex["a"]), "float32", TargetSide(ex["target"]).embed)
    lengths = [1, 2, 40, 7, 33, 5, 12]
    aux, ids = _random_batch(lengths)
    budget = 9 * 9 * 4 * SCORE_BYTES * 3  # a few short ones padded together, a long one in rows
    layout = Layout(lengths, "cpu", budget)
    kinds = {p[0] for p in layout.plan(4 * SCORE_BYTES)}
    assert {"pad", "rows"} <= kinds
    with torch.inference_mode():
        packed = torch.stack(list(m.step_logits(aux, ids, 3, layout)))
        at = 0
        for n in lengths:
            alone = torch.stack(list(m.step_logits(aux[at : at + n], ids[at : at + n], 3)))
            # float32 noise only: another batch shape takes another GEMM/SDPA kernel, and the
            # reduction order differs with the CPU's (AVX2 vs AVX-512: up to 2.4e-5 on logits of
            # magnitude 8, three steps deep). 1e-4 is 1e-5 of the logits' scale; a sequence that
            # sees the one before it moves them by about 9 (measured on this fixture).
            torch.testing.assert_close(packed[:, at : at + n], alone, atol=1e-4, rtol=1e-5)
            at += n
    assert torch.equal(m.unroll(aux, ids, 3, layout), packed.argmax(-1).apply_(
        lambda j: int(m.d2t_targets[j])))  # fmt: skip


def test_batch_counts_are_the_per_sample_counts():
    from weightcheck.eval.metric import Counts, batch_counts
    from weightcheck.eval.packed import Layout

    g = torch.Generator().manual_seed(1)
    lengths = [1, 6, 2, 9]
    L = sum(lengths)
    ids = torch.randint(4, (L,), generator=g)
    ref = torch.randint(4, (L,), generator=g)
    preds = torch.randint(4, (3, L), generator=g)
    mask = torch.randint(2, (L,), generator=g)
    packed = Counts(3)
    layout = Layout(lengths)
    packed.absorb(batch_counts(preds, ref, ids, mask, layout), lengths)
    alone, at = Counts(3), 0
    for n in lengths:
        s = slice(at, at + n)
        alone.add_sample(preds[:, s], ref[s], ids[s], mask[s])
        at += n
    assert packed == alone
    assert packed.positions == L and len(packed.cond_num) == 4


def test_the_batch_size_does_not_change_the_report(ex, monkeypatch):
    from weightcheck.eval import device
    from weightcheck.eval.run import evaluate

    def run(positions):
        return evaluate([ex["a"], ex["b"]], ex["specforge"], target=ex["target"],
                        dtype="float32", batch_positions=positions)  # fmt: skip

    one = run(1)
    monkeypatch.setattr(device, "CPU_ATTENTION_BYTES", SEQ * SEQ * 4 * 16 * 3)
    assert run(100) == one and run(10_000) == one
    d = one["drafters"][0]
    assert d["samples"] == SAMPLES and all(s["hits"] > 0 for s in d["steps"])


# -- the read-ahead ------------------------------------------------------------------------------
def test_the_read_ahead_is_bounded_whatever_the_data(ex, monkeypatch):
    """One sample per batch, a consumer that keeps every batch: the producer stops at ``depth``
    buffers and a bounded number of files opened, and goes on once buffers come back."""
    from weightcheck.eval.data import open_data
    from weightcheck.eval.stream import Prefetch

    ds = open_data(ex["specforge"])
    opened = []
    real = ds.sample
    monkeypatch.setattr(ds, "sample", lambda i, *a, **k: (opened.append(i), real(i, *a, **k))[1])
    pf = Prefetch(ds, range(SAMPLES), SEQ, need_last=True, depth=2, workers=2)
    it = iter(pf)
    held = [next(it)]
    seen = -1
    for _ in range(100):  # until the producer is blocked: nothing new opened for a while
        time.sleep(0.05)
        if len(opened) == seen:
            break
        seen = len(opened)
    assert pf._made == 2
    assert len(opened) <= 2 + 2 * 2 + 2 + 1  # the buffers' batches, the files opened ahead
    assert len(opened) < SAMPLES
    for b in it:  # given back: it runs to the end on the same two buffers
        held.append(b)
        pf.release(b)
    pf.close()
    assert [f for b in held for f in b.files] == [ds.label(f) for f in ds.files]
    assert pf._made == 2


def test_a_bad_file_late_in_the_data_fails_with_its_name(ex, tmp_path):
    import shutil

    data = tmp_path / "data" / "rows_0-2000"
    shutil.copytree(os.path.join(ex["specforge"], "rows_0-2000"), data)
    obj = torch.load(data / "data_7.ckpt", weights_only=True)
    obj["aux_hidden_state"] = obj["aux_hidden_state"][..., :256].contiguous()
    torch.save(obj, data / "data_7.ckpt")
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path / "data", "--target", ex["target"])
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "data_7.ckpt" in r.stderr and "2 aux hidden states" in r.stderr


# -- SpecForge files read straight -----------------------------------------------------------------
def test_ckpt_index_reads_what_torch_load_reads(ex, tmp_path):
    """eval locates a .ckpt's tensors through sources/torchzip.py, the one reader of the format."""
    from weightcheck.eval.data import index_ckpt, open_data

    f = open_data(ex["specforge"]).files[3]
    idx = index_ckpt(f)
    ref = torch.load(f, weights_only=True)
    assert set(idx) == set(ref)
    for k, v in ref.items():
        assert idx[k].shape == tuple(v.shape) and idx[k].dtype == v.dtype
        assert torch.equal(idx[k].load(), v)
    aux = idx["aux_hidden_state"].squeeze0()
    into = torch.empty(aux.shape, dtype=aux.dtype)
    aux.read_into(into)
    assert torch.equal(into, ref["aux_hidden_state"][0])
    into32 = torch.empty(aux.shape, dtype=torch.float32)  # another dtype: through a copy
    aux.read_into(into32)
    assert torch.equal(into32, ref["aux_hidden_state"][0].float())
    # a tensor stored as a view of a larger one, another dtype: still found
    torch.save({"x": torch.arange(12.0).view(3, 4)[1:], "y": torch.ones(3, dtype=torch.int32)},
               tmp_path / "v.ckpt")  # fmt: skip
    idx = index_ckpt(str(tmp_path / "v.ckpt"))
    assert torch.equal(idx["x"].load(), torch.arange(4.0, 12.0).view(2, 4))
    assert torch.equal(idx["y"].load(), torch.ones(3, dtype=torch.int32))
    # not a layout read here: None (torch.load reads it, or says what is wrong)
    torch.save({"x": torch.arange(12.0).view(3, 4)[:, :2]}, tmp_path / "strided.ckpt")
    torch.save({"x": torch.zeros(2), "f": os.system}, tmp_path / "code.ckpt")
    torch.save({"state_dict": {"x": torch.zeros(2)}}, tmp_path / "state.ckpt")
    (tmp_path / "junk.ckpt").write_bytes(b"PK\x03\x04 not a zip")
    for name in ("strided", "code", "state", "junk"):
        assert index_ckpt(str(tmp_path / f"{name}.ckpt")) is None


def test_a_file_ckpt_does_not_index_is_read_by_torch_load(ex, tmp_path):
    """A sample whose hidden states are a strided view: the same report as the plain files."""
    from weightcheck.eval.data import open_data

    out = tmp_path / "rows_0-2000"
    out.mkdir()
    for i, f in enumerate(open_data(ex["specforge"]).files[:3]):
        o = torch.load(f, weights_only=True)
        wide = torch.cat([o["aux_hidden_state"], o["aux_hidden_state"]], -1)
        o["aux_hidden_state"] = wide[..., : o["aux_hidden_state"].shape[-1]]  # not contiguous
        torch.save(o, out / f"data_{i}.ckpt")
    a = run_cli("eval", *_args(ex, "--limit", 3, "--json")).json
    b = run_cli("eval", ex["a"], "--hidden-states", tmp_path, "--target", ex["target"], "--json")
    assert a["drafters"] == b.json["drafters"]


# -- odd data ------------------------------------------------------------------------------------
def test_sequences_of_one_two_and_three_positions(ex, tmp_path):
    """Both layouts, sequences shorter than the chain: every length runs and they agree."""
    from safetensors.torch import save_file

    sf, sp = tmp_path / "sf" / "rows_0-2000", tmp_path / "sp"
    sf.mkdir(parents=True)
    sp.mkdir()
    g = torch.Generator().manual_seed(3)
    for i, n in enumerate([1, 2, 3, 30]):
        ids = torch.randint(2048, (n,), generator=g)
        hs = torch.randn(n, 4, 128, generator=g).to(torch.bfloat16)
        torch.save({"input_ids": ids, "loss_mask": torch.ones(n, dtype=torch.long),
                    "aux_hidden_state": hs[:, :3].reshape(1, n, 384).clone(),
                    "hidden_state": hs[:, 3:].reshape(1, n, 128).clone()},
                   sf / f"data_{i}.ckpt")  # fmt: skip
        save_file({"token_ids": ids, "hidden_states": hs}, str(sp / f"hs_{i}.safetensors"))
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path / "sf", "--json")
    assert r.exit_code == 2 and "give --target" in r.stderr  # no embedding, no target
    a = run_cli("eval", ex["a"], "--hidden-states", tmp_path / "sf", "--target", ex["target"],
                "--json", "--dtype", "float32").json  # fmt: skip
    b = run_cli("eval", ex["a"], "--hidden-states", sp, "--target", ex["target"], "--json",
                "--dtype", "float32").json  # fmt: skip
    assert a["drafters"][0]["positions"] == b["drafters"][0]["positions"] == 36
    for x, y in zip(a["drafters"][0]["steps"], b["drafters"][0]["steps"]):
        assert (x["trained_valid"], x["given"]) == (y["trained_valid"], y["given"])


# -- selection -----------------------------------------------------------------------------------
def test_sample_is_reproducible_and_a_larger_draw_holds_a_smaller_one():
    from weightcheck.eval.run import select

    a = select(1000, None, 50, seed=4)
    assert a == select(1000, None, 50, seed=4) and a == sorted(a) and len(set(a)) == 50
    assert set(a) <= set(select(1000, None, 200, seed=4))
    assert a != select(1000, None, 50, seed=5)
    assert select(8, None, 500, seed=0) == list(range(8))  # more than there are: all
    assert select(8, 3, None, seed=0) == [0, 1, 2] and select(8, None, None, 0) == list(range(8))


def test_sample_and_limit_through_the_cli(ex):
    r1 = run_cli("eval", *_args(ex, "--sample", 5, "--seed", 2, "--json"))
    r2 = run_cli("eval", *_args(ex, "--sample", 5, "--seed", 2, "--json"))
    assert r1.exit_code == 0 and r1.json == r2.json
    d = r1.json["data"]
    assert (d["files"], d["available"], d["selection"], d["seed"]) == (5, SAMPLES, "sample", 2)
    assert r1.json["drafters"][0]["samples"] == 5
    text = unwrapped(run_cli("eval", *_args(ex, "--sample", 5, "--seed", 2)).stdout)
    assert f"5 of {SAMPLES} samples drawn at random: --sample 5 --seed 2" in text
    assert "too few sequences for an interval: 5 < 20" in text  # intervals for what was evaluated
    big = unwrapped(run_cli("eval", *_args(ex, "--sample", 500)).stdout)
    assert f"all {SAMPLES} samples: --sample 500 asks for more than there are" in big
    lim = unwrapped(run_cli("eval", *_args(ex, "--limit", 2)).stdout)
    assert f"the first 2 of {SAMPLES} samples: --limit 2" in lim
    for bad, words in (
        (["--limit", 2, "--sample", 3], "give one"),
        (["--sample", 0], "at least 1"),
    ):
        r = run_cli("eval", *_args(ex, *bad))
        assert r.exit_code == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1


# -- devices -------------------------------------------------------------------------------------
def test_device_selection(monkeypatch):
    from weightcheck.errors import UsageError
    from weightcheck.eval import device

    assert device.resolve("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve(None) == device.resolve("auto") == torch.device("cpu")
    with pytest.raises(UsageError, match="torch sees no CUDA device"):
        device.resolve("cuda")
    with pytest.raises(UsageError, match="expected auto, cpu, cuda or cuda:N"):
        device.resolve("tpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert device.resolve("auto") == torch.device("cuda", 0)
    assert device.resolve("CUDA:1") == torch.device("cuda", 1)
    with pytest.raises(UsageError, match="2 CUDA device"):
        device.resolve("cuda:2")
    assert device.describe(torch.device("cpu")) == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU")
def test_cuda_without_cuda_is_one_line(ex):
    r = run_cli("eval", *_args(ex, "--device", "cuda"))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.splitlines() == [r.stderr.strip()]
        and "--device cuda: torch sees no CUDA device" in r.stderr
    )
    j = run_cli("eval", *_args(ex, "--json"))
    assert j.json["device"] == "cpu"  # auto, without a GPU
    assert "device  cpu" in run_cli("eval", *_args(ex)).stdout


def test_a_drafter_that_does_not_fit_says_what_it_needs_and_what_is_free(monkeypatch):
    from weightcheck.errors import WeightcheckError
    from weightcheck.eval import device

    monkeypatch.setattr(device, "free_bytes", lambda d: 3 << 30)
    gpu = torch.device("cuda", 0)
    device.check_fits(gpu, {"d": 1 << 30}, "d")  # 1 GiB + 1 GiB to work in: fits in 3
    with pytest.raises(WeightcheckError) as e:
        device.check_fits(gpu, {"drafter": 5 << 30, "target lm_head": 300 << 20}, "drafter")
    line = e.value.line()
    assert "needs 6.3 GiB (drafter 5.0 GiB, target lm_head 300 MiB, 1.0 GiB to work in)" in line
    assert "3.0 GiB free" in line
    device.check_fits(torch.device("cpu"), {"drafter": 1 << 50}, "drafter")  # no check on a CPU
    assert device.batch_positions(torch.device("cpu"), [], 384) == device.CPU_BATCH_POSITIONS


# -- progress ------------------------------------------------------------------------------------
def test_progress_counts_positions_up_to_the_total(ex):
    from weightcheck.eval.run import evaluate

    calls = []
    evaluate([ex["a"]], ex["specforge"], target=ex["target"], batch_positions=SEQ * 5,
             progress=lambda done, total: calls.append((done, total)))  # fmt: skip
    assert len(calls) == 5  # 22 samples of 24, 5 a batch
    done = [c[0] for c in calls]
    assert done == sorted(done) and done[-1] == SAMPLES * SEQ
    assert calls[-1][1] == SAMPLES * SEQ and all(t >= d for d, t in calls)


def test_a_bar_only_where_one_is_read(ex, monkeypatch):
    """No bar with --json, nor in a pipe (click's runner: stderr is no terminal)."""
    from weightcheck import api

    asked = []
    real = api.evaluate
    monkeypatch.setattr(api, "evaluate", lambda *a, **k: (asked.append(k["progress"]),
                                                          real(*a, **k))[1])  # fmt: skip
    text = run_cli("eval", *_args(ex, "--limit", 2))
    run_cli("eval", *_args(ex, "--limit", 2, "--json"))
    assert asked == [True, False]
    assert text.stderr == ""  # asked for, but stderr is a pipe: nothing drawn


# -- Ctrl-C --------------------------------------------------------------------------------------
def _interrupt_at(monkeypatch, call: int):
    from weightcheck.eval import metric

    real, n = metric.Counts.absorb, [0]

    def absorb(self, b, lengths):
        n[0] += 1
        if n[0] == call:
            raise KeyboardInterrupt
        return real(self, b, lengths)

    monkeypatch.setattr(metric.Counts, "absorb", absorb)


def test_ctrl_c_prints_what_was_evaluated(ex, monkeypatch):
    """Two drafters, stopped between their counts of the third batch: the report covers the
    two batches both have; exit 130, no traceback."""
    from weightcheck.eval import device

    monkeypatch.setattr(device, "CPU_BATCH_POSITIONS", SEQ * 4)
    _interrupt_at(monkeypatch, 6)  # batch 3, the second drafter
    r = run_cli("eval", ex["a"], ex["b"], "--hidden-states", ex["specforge"], "--target",
                ex["target"], "--json")  # fmt: skip
    assert r.exit_code == 130 and "Traceback" not in r.stderr
    assert r.json["data"]["interrupted"] is True and r.json["data"]["files"] == 8
    assert [d["samples"] for d in r.json["drafters"]] == [8, 8]
    assert r.stderr.strip() == "weightcheck: interrupted: the report covers the 8 samples evaluated"
    _interrupt_at(monkeypatch, 3)
    text = run_cli("eval", *_args(ex))
    assert text.exit_code == 130
    said = unwrapped(text.stdout)
    assert f"(specforge, {SAMPLES} samples; interrupted: the 8 evaluated before it)" in said


def test_ctrl_c_before_anything_was_evaluated_prints_nothing(ex, monkeypatch):
    _interrupt_at(monkeypatch, 1)
    r = run_cli("eval", *_args(ex))
    assert r.exit_code == 130 and r.stdout == ""
    assert r.stderr.strip() == "weightcheck: interrupted"  # click puts a new line first


def test_the_api_raises_with_the_partial_report(ex, monkeypatch):
    import weightcheck
    from weightcheck.eval import device
    from weightcheck.reports.eval import EvalInterrupted

    monkeypatch.setattr(device, "CPU_BATCH_POSITIONS", SEQ * 4)
    _interrupt_at(monkeypatch, 2)
    with pytest.raises(EvalInterrupted) as e:
        weightcheck.evaluate(ex["a"], ex["specforge"], target=ex["target"])
    assert isinstance(e.value, KeyboardInterrupt) and e.value.report.drafters[0].samples == 4


# a Ctrl-C sent to the program while torch is being imported: a finder sees torch's first
# submodule asked for (its import under way), says whether SIGINT is held then, and sends it
_CTRL_C_IN_IMPORT = (
    "import os, signal, sys\n"
    "class Finder:\n"
    "    sent = False\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.startswith('torch.') and not Finder.sent:\n"
    "            Finder.sent = True\n"
    "            held = signal.getsignal(signal.SIGINT) is not signal.default_int_handler\n"
    "            print('held during the import:', held, file=sys.stderr, flush=True)\n"
    "            os.kill(os.getpid(), signal.SIGINT)\n"
    "        return None\n"
    "sys.meta_path.insert(0, Finder())\n"
    "from weightcheck.cli import run\n"
    "sys.argv[0] = 'weightcheck'\n"
    "run()\n"
)


def test_ctrl_c_during_torchs_import_is_held_then_ends_the_run(ex):
    """torch's import is not safe to interrupt (weightcheck/eval/interrupt.py: a SIGINT in it was
    swallowed or aborted the process): eval holds Ctrl-C over it, then ends as for any Ctrl-C
    before the first sample (nothing on stdout, one line, 130)."""
    p = run_python(_CTRL_C_IN_IMPORT, "eval", *_args(ex))
    assert "held during the import: True" in p.stderr
    assert p.returncode == 130 and p.stdout == "" and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == "weightcheck: interrupted"


def test_held_keeps_a_ctrl_c_until_the_block_is_done():
    """interrupt.held(): a SIGINT inside the block is raised after it; another thread, or a
    program's own SIGINT handler, is left as it is."""
    code = (
        "import os, signal, sys, threading\n"
        "from weightcheck.eval.interrupt import held\n"
        "done = []\n"
        "try:\n"
        "    with held():\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        done.append('after the signal')\n"
        "except KeyboardInterrupt:\n"
        "    done.append('raised after the block')\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "seen = []\n"
        "def mine(signum, frame):\n"
        "    seen.append(signum)\n"
        "signal.signal(signal.SIGINT, mine)\n"
        "with held():\n"
        "    assert signal.getsignal(signal.SIGINT) is mine\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "def other():\n"
        "    with held():\n"
        "        done.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
        "t = threading.Thread(target=other); t.start(); t.join()\n"
        "print(done)\n"
    )
    p = run_python(code, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['after the signal', 'raised after the block', True]"


@pytest.mark.stress
def test_ctrl_c_at_any_moment_of_the_start_ends_the_run(ex):
    """Real SIGINTs at seeded moments of the first second (torch's import among them): every
    run ends with exit 130, one line and no traceback — never runs on, never aborts (or, on a
    machine that was done before the signal came, with its report)."""
    import random

    import stress

    rng = random.Random(33)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _ in range(stress.count(24, 1)):
        delay = rng.uniform(0.05, 1.0)
        p = subprocess.Popen([sys.executable, "-m", "weightcheck", "eval", *_args(ex)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             cwd=str(ROOT))  # fmt: skip
        time.sleep(delay)
        p.send_signal(__import__("signal").SIGINT)
        out, err = p.communicate(timeout=300)
        said = (delay, p.returncode, err[-500:])
        assert "Traceback" not in err, said
        if p.returncode == 0:  # a machine fast enough to be done before the signal: the report
            assert out.startswith("data"), said
            continue
        assert p.returncode == 130, said  # never run on, never -2 or an abort (-6)
        assert err.strip().splitlines()[-1].startswith("weightcheck: interrupted"), said


# -- intervals on tiny counts ----------------------------------------------------------------------
def test_wilson_intervals_widen_as_counts_shrink():
    from weightcheck.eval.metric import MIN_POSITIONS, wilson

    assert wilson(0, 0) is None and wilson(0, 1) is None and wilson(3, MIN_POSITIONS - 1) is None
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    uppers = [wilson(0, n)[1] for n in (10, 40, 280, 10_000)]
    assert uppers == sorted(uppers, reverse=True) and uppers[0] > 0.25 and uppers[-1] > 0
    assert wilson(280, 280)[1] == 1.0 and wilson(280, 280)[0] < 1.0


def test_tiny_counts_read_as_too_few_never_as_certainty():
    """A step with 0 of 0, 0 of 1 and 0 of 280 accepted; four sequences: no bootstrap."""
    from weightcheck.eval.metric import Counts, summarize
    from weightcheck.output.blocks import Table
    from weightcheck.output.eval import eval_document
    from weightcheck.reports.eval import EvalReport

    c = Counts(3)
    for i in range(4):
        c.trained_num.append([0, 0, 0])
        c.trained_den.append([70, 70, 70])
        c.cond_num.append([0, 0, 0])
        c.cond_den.append([70, 1 if i == 0 else 0, 0])
        c.walk_cycles.append(70)
        c.walk_accepted.append(0)
        c.walk_per_step.append([0, 0, 0])
        c.lengths.append(71)
        c.agree.append(70)
        c.agree_den.append(70)
    r = summarize(c)
    r.update(drafter="d", dialect="specforge", dtype="float32", embed_from="target",
             draft_vocab=400, rank=1)  # fmt: skip
    report = EvalReport.from_dict({
        "data": {"path": "p", "format": "specforge", "files": 4, "note": None, "available": 4},
        "target": None, "reference": "r", "device": "cpu", "steps": 3, "drafters": [r],
    })  # fmt: skip
    lines = [getattr(b, "text", "") for b in eval_document(report)]
    table = next(b for b in eval_document(report) if isinstance(b, Table))
    cells = [row[2] for row in table.rows]
    assert cells[0].startswith("0.0% - 1.") and cells[0] != "0.0% - 0.0%"  # 0 of 280
    assert cells[1] == "too few positions (< 10)" and cells[2] == "-"  # 0 of 1, 0 of 0
    assert any("too few sequences for an interval: 4 < 20" in t for t in lines)
    assert r["interval"]["tau"] is None and r["walked"]["tau_interval"] is None


def test_enough_sequences_give_the_bootstrap_interval(ex):
    r = run_cli("eval", *_args(ex, "--json")).json
    d = r["drafters"][0]
    lo, hi = d["interval"]["tau"]
    assert lo <= d["tau"] <= hi and lo < hi
    lo, hi = d["walked"]["tau_interval"]
    assert lo <= d["walked"]["tau"] <= hi and lo < hi
    assert d["interval"]["min_sequences"] == 20 <= d["samples"]


# -- the bundled example, the same on any CPU -------------------------------------------------------
def test_the_example_counts_the_same_hits_on_another_cpu_path(ex):
    """float32 eval of data make_eval_data drew for two drafters, here and in a process whose
    kernels take other paths (oneDNN and MKL held to AVX2, ATen's default vectors): the same."""
    args = [ex["a"], ex["b"], "--hidden-states", ex["specforge"], "--target", ex["target"],
            "--dtype", "float32", "--json"]  # fmt: skip
    here = run_cli("eval", *args).json
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ONEDNN_MAX_CPU_ISA": "AVX2",
           "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "default"}  # fmt: skip
    other = subprocess.run([sys.executable, "-m", "weightcheck", "eval", *args],
                           capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout) == here


# -- the newcomer's path ---------------------------------------------------------------------------
def test_the_readme_setup_says_what_writes_the_eval_example(tmp_path):
    """README.md's set-up line installs without torch; the Quickstart says the line that installs
    torch and writes the example's hidden states before eval, and make_examples.py run without
    torch says that very line (issue #32 item 6)."""
    readme = (ROOT / "README.md").read_text()
    setup = readme[readme.index("## Set-up") : readme.index("## Quickstart")]
    quick = readme[readme.index("## Quickstart") : readme.index("## Commands")]
    line = example_module("make_examples", "mex2").EVAL_SETUP
    assert "```bash\npip install . && python examples/make_examples.py" in setup  # no torch
    said = " ".join(quick[: quick.index("$ weightcheck")].split())
    assert f"(`eval` after `{line}`: its data needs torch)" in said
    code = (
        "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['make_examples.py', sys.argv[1]]; "
        "runpy.run_path('examples/make_examples.py', run_name='__main__')"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], capture_output=True,
                       text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"skipped: eval's example needs torch: {line}" in r.stdout
    assert (tmp_path / "out" / "kimi-k2-drafter").is_dir()
    assert not (tmp_path / "out" / "eval").exists()
