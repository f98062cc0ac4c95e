"""``weightcheck eval`` (issue #25): hidden-state formats, the drafter's forward with test-time
unrolling, the metric and its interval, the break-even arithmetic, ranking, bad input."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil

import pytest
from conftest import CONFIGS, ROOT, run_cli

torch = pytest.importorskip("torch")

import synth  # noqa: E402

SAMPLES, SEQ, PROMPT = 4, 24, 4


def _make_eval_module():
    spec = importlib.util.spec_from_file_location(
        "make_eval_data", ROOT / "examples" / "make_eval_data.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _drafter(path, seed=1, dialect="specforge", **sizes):
    cfg = json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text())
    cfg = synth.scaled_config(cfg, **sizes)
    synth.write_drafter(str(path), cfg, dialect=dialect, seed=seed)
    return str(path)


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """A tiny drafter, a second one, a tiny target and the data (both layouts)."""
    root = tmp_path_factory.mktemp("eval")
    a = _drafter(root / "a", seed=1)
    b = _drafter(root / "b", seed=2)
    made = _make_eval_module().write_eval_example(
        a, str(root / "data"), samples=SAMPLES, seq=SEQ, prompt=PROMPT
    )
    return {"root": root, "a": a, "b": b, **made}


def _eval(*args):
    r = run_cli("eval", *args, "--json")
    assert r.exit_code == 0, r
    return r.json


# -- formats -------------------------------------------------------------------------------------
def test_both_layouts_read_as_the_same_samples(ex):
    from weightcheck.eval.data import open_data

    sf = open_data(ex["specforge"])
    sp = open_data(ex["speculators"])
    assert (sf.format, sp.format) == ("specforge", "speculators")
    assert len(sf.files) == len(sp.files) == SAMPLES
    for x, y in zip(sf.samples(), sp.samples()):
        assert torch.equal(x.input_ids, y.input_ids)
        assert torch.equal(x.aux, y.aux) and x.aux.shape == (SEQ, 3 * 128)
        assert torch.equal(x.last, y.last)
        assert x.last_normed and not y.last_normed
        assert int(x.loss_mask.sum()) == SEQ - PROMPT and int(y.loss_mask.sum()) == SEQ


def test_gzip_files_read_like_plain_ones(ex, tmp_path):
    from weightcheck.eval.data import open_data

    src = open_data(ex["specforge"]).files[0]
    out = tmp_path / "rows_0-2000"
    out.mkdir()
    with open(src, "rb") as f, gzip.open(out / "data_0.ckpt.gz", "wb") as g:
        g.write(f.read())
    (a,) = open_data(str(tmp_path)).samples()
    (b,) = open_data(src).samples()
    assert torch.equal(a.aux, b.aux) and torch.equal(a.input_ids, b.input_ids)


def test_files_are_read_one_at_a_time(ex, monkeypatch):
    """Streaming: the next file is opened only after the previous sample was used."""
    from weightcheck.eval import data

    opened = []
    real = data._torch_load
    monkeypatch.setattr(data, "_torch_load", lambda p, w: (opened.append(p), real(p, w))[1])
    it = data.open_data(ex["specforge"]).samples()
    next(it)
    assert len(opened) == 1
    next(it)
    assert len(opened) == 2


def test_limit_reads_only_n_samples(ex):
    r = _eval(ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"], "--limit", 2)
    assert r["data"]["files"] == 2 and r["drafters"][0]["samples"] == 2


# -- the forward ---------------------------------------------------------------------------------
def _model(path, target, dtype="float32"):
    from weightcheck.eval.forward import LlamaEagle3
    from weightcheck.eval.target import TargetSide
    from weightcheck.model.drafter import load_drafter

    return LlamaEagle3(load_drafter(path), dtype=dtype, embed=TargetSide(target).embed)


def test_unrolling_is_causal(ex):
    """Step k at column t sees the target states of columns <= t and tokens up to t+k+1 only:
    the drafts of a prefix are the full sequence's drafts at those columns (float32)."""
    from weightcheck.eval.data import open_data

    m = _model(ex["a"], ex["target"])
    s = next(open_data(ex["specforge"]).samples())
    full = m.unroll(s.aux, s.input_ids, 3)
    n = 10
    part = m.unroll(s.aux[:n], s.input_ids[: n + 3], 3)
    assert torch.equal(full[:, :n], part)
    # and a later token changes nothing before it: token n+3 is step 2's input at column n
    ids = s.input_ids.clone()
    ids[n + 3] = (ids[n + 3] + 1) % 2048
    changed = m.unroll(s.aux, ids, 3)
    assert torch.equal(changed[:, :n], full[:, :n])
    assert not torch.equal(changed, full)  # it does change later drafts


def test_every_dialect_gives_the_same_drafts(ex, tmp_path):
    """The same weights under speculators' names (layers.0.*) draft exactly the same tokens."""
    from weightcheck.eval.data import open_data

    sp = _drafter(tmp_path / "sp", seed=1, dialect="speculators")
    s = next(open_data(ex["specforge"]).samples())
    a = _model(ex["a"], ex["target"]).unroll(s.aux, s.input_ids, 2)
    b = _model(sp, ex["target"]).unroll(s.aux, s.input_ids, 2)
    assert torch.equal(a, b)


def test_a_fused_drafter_drafts_as_its_parts_stored_apart(ex, tmp_path):
    """q/k/v in one qkv_proj and gate/up in one gate_up_proj (as the engines load them, split at
    the config's offsets): the same drafts and the same report as the drafter they were fused
    from."""
    from helpers import hurried

    from weightcheck.eval.data import open_data

    fz = hurried.fused(tmp_path / "fused", src=ex["a"])
    m = _model(str(fz), ex["target"])
    assert "midlayer.self_attn.qkv_proj.weight" in m.d.source.tensors
    assert "midlayer.self_attn.q_proj.weight" not in m.d.source.tensors
    s = next(open_data(ex["specforge"]).samples())
    a = _model(ex["a"], ex["target"]).unroll(s.aux, s.input_ids, 2)
    assert torch.equal(m.unroll(s.aux, s.input_ids, 2), a)
    one = _eval(ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"])
    two = _eval(str(fz), "--hidden-states", ex["specforge"], "--target", ex["target"])
    assert two["drafters"][0]["steps"] == one["drafters"][0]["steps"]
    assert one["drafters"][0]["steps"][0]["hits"] > 0  # not a 0 == 0 proof


def test_drafts_are_target_ids_through_d2t(ex):
    from weightcheck.eval.data import open_data

    m = _model(ex["a"], ex["target"])
    s = next(open_data(ex["specforge"]).samples())
    drafts = set(m.unroll(s.aux, s.input_ids, 2).flatten().tolist())
    assert drafts <= set(m.vocab_map.targets)
    assert max(drafts) >= 400  # target ids, not draft ids (the draft vocab is 400 of 2048)


# -- the metric ----------------------------------------------------------------------------------
def test_counts_by_hand():
    from weightcheck.eval.metric import Counts, summarize, tau_of

    ids = torch.tensor([5, 1, 2, 3, 4, 6])  # the data; ref = the next token (greedy data)
    ref = torch.tensor([1, 2, 3, 4, 6, -1])
    mask = torch.tensor([1, 1, 1, 1, 1, 1])
    # step 0 drafts ref[t+1]; step 1 drafts ref[t+2]
    preds = torch.tensor(
        [
            [2, 3, 0, 6, 9, 9],  # hits at t = 0, 1, 3 (t = 4 is masked: last position)
            [3, 0, 6, 0, 9, 9],  # hits at t = 0 (3 == ref[2]) and t = 2 (6 == ref[4])
        ]
    )
    c = Counts(2)
    c.add_sample(preds, ref, ids, mask)
    r = summarize(c)
    s0, s1 = r["steps"]
    assert (s0["hits"], s0["given"]) == (3, 5)  # columns 0..4 valid at step 0
    assert (s1["trained_hits"], s1["trained_valid"]) == (2, 4)  # columns 0..3 at step 1
    # given step 0 hit (t = 0, 1, 3): step 1 valid at 0, 1, 3; hits at 0 only
    assert (s1["hits"], s1["given"]) == (1, 3)
    assert r["tau"] == pytest.approx(1 + 3 / 5 + 3 / 5 * 1 / 3)
    assert tau_of([0.5, 0.5, 0.5]) == pytest.approx(1.875)
    assert tau_of([0.0, None]) == 1.0
    assert r["interval"]["tau"] is None  # one sample: no interval (test_eval_scale.py)
    assert r["steps"][0]["acc_interval"] is None  # 5 positions: too few for one


def test_prefix_that_is_not_the_targets_choice_is_not_followed():
    """Where the data's next token is not the target's top-1, the chain stops there."""
    from weightcheck.eval.metric import Counts, summarize

    ids = torch.tensor([5, 1, 2, 3, 4, 6])
    ref = torch.tensor([1, 7, 3, 4, 6, -1])  # after position 1 the target says 7, data has 2
    preds = torch.tensor([[7, 3, 4, 6, 0, 0], [3, 4, 6, 0, 0, 0]])
    c = Counts(2)
    c.add_sample(preds, ref, ids, torch.ones(6, dtype=torch.long))
    r = summarize(c)
    assert r["steps"][0]["hits"] == 4
    # column 0's step 0 drafted 7 (hit) but the data went on with 2: not followed
    assert r["steps"][1]["given"] == 3
    assert r["data_agreement"] == pytest.approx(4 / 5)


def test_walked_acceptance_by_hand():
    """The engines' count: a chain where the last one ended, not at every position."""
    from weightcheck.eval.metric import Counts, summarize

    ids = torch.tensor([5, 1, 2, 3, 4, 6])  # the data of test_counts_by_hand
    ref = torch.tensor([1, 2, 3, 4, 6, -1])
    preds = torch.tensor([[2, 3, 0, 6, 9, 9], [3, 0, 6, 0, 9, 9]])
    c = Counts(2)
    c.add_sample(preds, ref, ids, torch.ones(6, dtype=torch.long))
    r = summarize(c)
    # accepted prefixes per column: t=0: 2 (2 == ref[1], 3 == ref[2]); t=1: 1; t=2: 0; t=3: 1
    # (6 == ref[4]; step 1 drafts past the data); t=4: 0. The walk: a chain at column 0 gets 2
    # accepted, the next starts 3 columns on, at 3: 1 accepted; the next start, 5, is the
    # (cleared) last position: done. Columns 1, 2 and 4 never start a chain.
    assert r["walked"] == {
        "tau": 1 + 3 / 2,
        "cycles": 2,
        "accepted": 3,
        "accepted_per_step": [2, 1],
        "tau_interval": None,
    }
    assert r["tau"] == pytest.approx(1.8)  # every column drawn alike: another number


def test_walk_skips_uncounted_columns_and_stops_past_the_last():
    from weightcheck.eval.metric import walk

    run = [3, 2, 0, 0, 1, 0, 3, 0, 0, 0]
    counted = [False, True, True, False, False, False, True, True, False, False]
    # from column 1 (2 accepted) to 4, uncounted: on at 6, the next counted; 3 accepted -> 10
    assert walk(run, counted, 3) == (2, 5, [2, 2, 1])
    assert walk(run, [False] * 10, 3) == (0, 0, [0, 0, 0])
    assert walk([0] * 4, [True] * 4, 2) == (4, 0, [0, 0])  # a rejection moves on by one


def test_a_walk_stops_where_the_data_leaves_the_targets_choice():
    """As the conditional accuracy: a hit whose token the data did not follow ends the chain."""
    from weightcheck.eval.metric import Counts, summarize

    ids = torch.tensor([5, 1, 2, 3, 4, 6])
    ref = torch.tensor([1, 7, 3, 4, 6, -1])  # the data of test_prefix_that_is_not_...
    preds = torch.tensor([[7, 3, 4, 6, 0, 0], [3, 4, 6, 0, 0, 0]])
    c = Counts(2)
    c.add_sample(preds, ref, ids, torch.ones(6, dtype=torch.long))
    w = summarize(c)["walked"]
    # column 0: 7 hits, the data goes on with 2 (not 7): 1 accepted, next at 2: 4 == ref[3],
    # 6 == ref[4]: 2 accepted, next at 5 (cleared): done
    assert (w["cycles"], w["accepted"], w["accepted_per_step"]) == (2, 3, [2, 1])


def test_measured_acceptance_is_the_one_built_in(ex):
    """make_eval_data makes the next token the drafter's own step-0 draft at a known set of
    positions: eval finds exactly those hits (float32, where drafts do not depend on batching)."""
    r = _eval(
        ex["a"],
        "--hidden-states",
        ex["specforge"],
        "--target",
        ex["target"],
        "--dtype",
        "float32",
        "--steps",
        1,
    )
    s0 = r["drafters"][0]["steps"][0]
    acc, drafted = ex["built_step0"]
    # the metric also counts column S-2, whose next token the generator did not draft
    assert s0["given"] == drafted + SAMPLES
    assert abs(s0["hits"] - acc) <= 1
    assert s0["hits"] > 0.4 * s0["given"]


def test_dtype_takes_either_spelling(ex):
    """--dtype takes convert's short names and torch's (fp32 is float32): one report."""
    args = (ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"], "--steps", 1)
    short, long = _eval(*args, "--dtype", "fp32"), _eval(*args, "--dtype", "float32")
    assert short["drafters"][0]["steps"] == long["drafters"][0]["steps"]
    assert short["drafters"][0]["dtype"] == long["drafters"][0]["dtype"] == "float32"


def test_few_samples_give_no_bootstrap_interval_and_runs_repeat(ex):
    """4 sequences: too few for the acceptance lengths' bootstrap (test_eval_scale.py has the
    intervals); a step's rate still has its Wilson interval; two runs give the same report."""
    args = (ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"])
    r1, r2 = _eval(*args), _eval(*args)
    d = r1["drafters"][0]
    assert d["interval"]["tau"] is None and d["walked"]["tau_interval"] is None
    assert d["interval"]["min_sequences"] == 20 and d["samples"] == SAMPLES
    lo, hi = d["steps"][0]["acc_interval"]
    assert lo < d["steps"][0]["acc"] < hi
    assert d["walked"]["cycles"] > 0
    assert r1 == r2


def test_speculators_layout_applies_the_targets_final_norm(ex, tmp_path):
    """speculators keeps the pre-norm state: with a final norm of other weights the answer
    must still come from norm(h) — a norm weight that flips signs changes the top-1."""
    r = _eval(ex["a"], "--hidden-states", ex["speculators"], "--target", ex["target"])
    base = r["drafters"][0]["steps"][0]["acc"]
    assert base > 0.4
    from safetensors.torch import load_file, save_file

    t2 = tmp_path / "target"
    shutil.copytree(ex["target"], t2)
    w = load_file(str(t2 / "model.safetensors"))
    w["model.norm.weight"] = -w["model.norm.weight"]  # every logit negated: another top-1
    save_file(w, str(t2 / "model.safetensors"), metadata={"format": "pt"})
    r2 = _eval(ex["a"], "--hidden-states", ex["speculators"], "--target", t2)
    assert r2["drafters"][0]["steps"][0]["acc"] < 0.1
    # SpecForge's state is already normed: the norm weight is not applied to it
    r3 = _eval(ex["a"], "--hidden-states", ex["specforge"], "--target", t2)
    assert r3["drafters"][0]["steps"][0]["acc"] > 0.4


def test_without_target_the_next_data_token_is_the_reference(ex, tmp_path):
    d = tmp_path / "with-embed"
    cfg = synth.scaled_config(json.loads((CONFIGS / "specforge-kimi-k2-eagle3.json").read_text()))
    synth.write_drafter(str(d), cfg, seed=1, include_embed=True)
    r = _eval(d, "--hidden-states", ex["specforge"])
    assert r["target"] is None and r["reference"].startswith("next data token")
    assert r["drafters"][0]["embed_from"] == "drafter"


# -- several drafters, speed ---------------------------------------------------------------------
def test_drafters_are_ranked_on_the_same_data(ex):
    r = _eval(ex["b"], ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"])
    by = {os.path.basename(d["drafter"]): d for d in r["drafters"]}
    assert by["a"]["rank"] == 1 and by["b"]["rank"] == 2
    assert by["a"]["tau"] > by["b"]["tau"]
    text = run_cli(
        "eval", ex["b"], ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"]
    )
    assert text.exit_code == 0
    assert text.stdout.index("#1 ") < text.stdout.index("#2 ")
    assert "#1 " + ex["a"] in text.stdout


def test_break_even_is_the_founding_storys_arithmetic(ex):
    from weightcheck.eval.metric import break_even, predicted_tps

    assert break_even(82, 30) == pytest.approx(2.46)
    assert break_even(82, 30, 5) == pytest.approx(82 * 0.035)
    assert predicted_tps(2.0, 30) == pytest.approx(66.67, abs=0.01)  # below 82: slower
    assert predicted_tps(3.2, 30) == pytest.approx(106.67, abs=0.01)
    r = _eval(
        ex["a"],
        "--hidden-states",
        ex["specforge"],
        "--target",
        ex["target"],
        "--baseline-tps",
        82,
        "--cycle-ms",
        30,
    )
    assert r["speed"]["break_even_tau"] == pytest.approx(2.46)
    d = r["drafters"][0]
    # at the walked acceptance length, the engines' own count (docs/eval.md §4), not the expected
    assert d["walked"]["tau"] != pytest.approx(d["tau"])
    assert d["predicted_tps"] == pytest.approx(d["walked"]["tau"] * 1000 / 30)
    assert d["speedup"] == pytest.approx(d["predicted_tps"] / 82)
    bad = run_cli("eval", ex["a"], "--hidden-states", ex["specforge"], "--baseline-tps", 82)
    assert bad.exit_code == 2 and "--cycle-ms" in bad.stderr


def test_the_walked_length_ranks_and_the_expected_one_stands_in_without_a_cycle():
    from weightcheck.eval.run import headline

    walked = {"tau": 1.9, "tau_interval": [1.8, 2.0]}
    r = {"tau": 2.4, "interval": {"tau": [2.2, 2.6]}, "walked": walked}
    assert headline(r) == (1.9, [1.8, 2.0])
    none = {"tau": 2.4, "interval": {"tau": [2.2, 2.6]}, "walked": {"tau": None}}
    assert headline(none) == (2.4, [2.2, 2.6])


# -- bad input -----------------------------------------------------------------------------------
def _one_line_exit_2(r, *words):
    assert r.exit_code == 2, r
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def _rewrite(ex, tmp_path, change):
    from weightcheck.eval.data import open_data

    src = open_data(ex["specforge"]).files[0]
    obj = torch.load(src, weights_only=True)
    change(obj)
    out = tmp_path / "bad" / "rows_0-2000"
    out.mkdir(parents=True)
    torch.save(obj, out / "data_0.ckpt")
    return str(tmp_path / "bad")


def test_data_of_another_hidden_size(ex, tmp_path):
    def change(o):
        o["aux_hidden_state"] = o["aux_hidden_state"][..., : 3 * 64].contiguous()
        o["hidden_state"] = o["hidden_state"][..., :64].contiguous()

    data = _rewrite(ex, tmp_path, change)
    r = run_cli("eval", ex["a"], "--hidden-states", data, "--target", ex["target"])
    _one_line_exit_2(r, "data_0.ckpt", "hidden size 64", "expects target hidden size 128")


def test_data_of_another_aux_layer_count(ex, tmp_path):
    data = _rewrite(
        ex,
        tmp_path,
        lambda o: o.update(aux_hidden_state=o["aux_hidden_state"][..., :256].contiguous()),
    )
    r = run_cli("eval", ex["a"], "--hidden-states", data, "--target", ex["target"])
    _one_line_exit_2(r, "data_0.ckpt", "2 aux hidden states", "expects 3")


def test_data_missing_a_key(ex, tmp_path):
    data = _rewrite(ex, tmp_path, lambda o: o.pop("loss_mask"))
    r = run_cli("eval", ex["a"], "--hidden-states", data, "--target", ex["target"])
    _one_line_exit_2(r, "data_0.ckpt", "missing key(s) loss_mask")


def test_speculators_file_missing_a_key(ex, tmp_path):
    from safetensors.torch import load_file, save_file

    w = load_file(os.path.join(ex["speculators"], "hs_0.safetensors"))
    del w["token_ids"]
    save_file(w, str(tmp_path / "hs_0.safetensors"))
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path, "--target", ex["target"])
    _one_line_exit_2(r, "hs_0.safetensors", "missing key(s) token_ids")


def test_target_of_another_vocabulary(ex, tmp_path):
    from safetensors.torch import load_file, save_file

    t2 = tmp_path / "target"
    shutil.copytree(ex["target"], t2)
    w = load_file(str(t2 / "model.safetensors"))
    w["lm_head.weight"] = w["lm_head.weight"][:1024].contiguous()
    save_file(w, str(t2 / "model.safetensors"), metadata={"format": "pt"})
    r = run_cli("eval", ex["a"], "--hidden-states", ex["specforge"], "--target", t2)
    _one_line_exit_2(r, str(t2), "target vocabulary 1024", "is 2048")


def test_drafter_of_another_hidden_size_than_the_data(ex, tmp_path):
    small = _drafter(tmp_path / "small", hidden=64, heads=2, head_dim=32)
    r = run_cli("eval", small, "--hidden-states", ex["specforge"], "--target", ex["target"])
    line = _one_line_exit_2(r, "target")
    assert "128" in line and "64" in line


def test_not_hidden_state_data(ex, tmp_path):
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path, "--target", ex["target"])
    _one_line_exit_2(r, str(tmp_path), "no hidden-state files")
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path / "nope", "--target", ex["target"])
    _one_line_exit_2(r, "nope", "not found")


def test_a_pickle_that_is_more_than_tensors_is_refused(ex, tmp_path):
    out = tmp_path / "rows_0-2000"
    out.mkdir()
    torch.save({"input_ids": torch.zeros(3), "evil": os.system}, out / "data_0.ckpt")
    r = run_cli("eval", ex["a"], "--hidden-states", tmp_path, "--target", ex["target"])
    _one_line_exit_2(r, "data_0.ckpt", "cannot read")


def _cut(src, dst, keep):
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data[:keep])
    return len(data)


def test_a_file_cut_short_is_said_to_be(ex, tmp_path):
    """A producer writes each file in place (SpecForge's torch.save and gzip to the final name),
    so a run stopped mid-write leaves a file cut short that SpecForge, run again, skips: before,
    torch.load's 'OSError: [Errno 22] Invalid argument' (a zip without its end record) or its
    advice about mmap and _use_new_zipfile_serialization (an empty file) was all it said."""
    from weightcheck.eval.data import open_data

    src = open_data(ex["specforge"]).files[0]
    cases = []
    d = tmp_path / "ckpt" / "rows_0-2000"
    d.mkdir(parents=True)
    size = _cut(src, d / "data_0.ckpt", 3000)
    cases.append((d.parent, "data_0.ckpt", "3000 bytes, no zip end record"))
    e = tmp_path / "empty" / "rows_0-2000"
    e.mkdir(parents=True)
    (e / "data_0.ckpt").write_bytes(b"")
    cases.append((e.parent, "data_0.ckpt", "0 bytes"))
    with open(src, "rb") as f, gzip.open(tmp_path / "whole.ckpt.gz", "wb") as g:
        g.write(f.read())
    g = tmp_path / "gz" / "rows_0-2000"
    g.mkdir(parents=True)
    _cut(tmp_path / "whole.ckpt.gz", g / "data_0.ckpt.gz", 2000)
    cases.append((g.parent, "data_0.ckpt.gz", "the gzip stream ends early"))
    h = tmp_path / "hs"
    h.mkdir()
    hs = os.path.join(ex["speculators"], "hs_0.safetensors")
    whole = _cut(hs, h / "hs_0.safetensors", 4000)
    cases.append((h, "hs_0.safetensors", "4000 of the "))
    for data, name, words in cases:
        r = run_cli("eval", ex["a"], "--hidden-states", data, "--target", ex["target"])
        line = _one_line_exit_2(r, name, f"cut short ({words}", "run the producer again")
        assert "Errno" not in line and "mmap" not in line, line
    assert size > 3000 and whole > 4000
    # a whole file is not cut short: the check has no false alarm on what a producer finished
    from weightcheck.eval.data import cut_short

    assert cut_short(src) is None and cut_short(hs) is None
    assert cut_short(str(tmp_path / "whole.ckpt.gz")) is None


def test_one_file_given_as_data_is_named_once(ex, tmp_path):
    """DATA that is one file: its messages name it as given (not ``data_0.ckpt/data_0.ckpt``),
    and the data line counts 1 sample, not '1 samples'."""
    from weightcheck.eval.data import open_data

    src = open_data(ex["specforge"]).files[0]
    bad = tmp_path / "data_7.ckpt"
    _cut(src, bad, 100)
    r = run_cli("eval", ex["a"], "--hidden-states", bad, "--target", ex["target"])
    line = _one_line_exit_2(r, str(bad))
    assert "data_7.ckpt/data_7.ckpt" not in line, line
    r = run_cli("eval", ex["a"], "--hidden-states", src, "--target", ex["target"])
    assert r.exit_code == 0, r
    assert f"{src} (specforge, 1 sample)" in " ".join(r.stdout.split()), r.stdout


def test_drafter_without_embedding_needs_a_target(ex):
    r = run_cli("eval", ex["a"], "--hidden-states", ex["specforge"])
    _one_line_exit_2(r, "has no embed_tokens", "--target")


# -- the API and the formats -----------------------------------------------------------------------
def test_the_api_returns_the_report_the_cli_prints(ex):
    import weightcheck

    r = weightcheck.evaluate(ex["a"], ex["specforge"], target=ex["target"], limit=2)
    assert isinstance(r, weightcheck.EvalResult) and r.exit_status == 0
    assert r.drafters[0].samples == 2 and r.ranked[0].rank == 1
    cli = _eval(ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"], "--limit", 2)
    assert r.to_dict() == cli


def test_markdown_draws_each_drafter_as_a_table(ex):
    r = run_cli(
        "eval", ex["a"], "--hidden-states", ex["specforge"], "--target", ex["target"],
        "--limit", 2, "--format", "markdown",
    )  # fmt: skip
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("## weightcheck eval")
    assert "| step | acc \\| accepted prefix |" in r.stdout


def test_the_speed_line_says_which_length_it_used(ex):
    """Predicted tok/s is at the walked length; with no cycle walked the expected one stands in,
    and the line says so."""
    from weightcheck.output.eval import eval_document
    from weightcheck.reports.eval import EvalReport

    r = _eval(
        ex["a"],
        "--hidden-states",
        ex["specforge"],
        "--target",
        ex["target"],
        "--baseline-tps",
        82,
        "--cycle-ms",
        30,
    )

    def speed_line(report):
        lines = [b.text for b in eval_document(EvalReport.from_dict(report)) if hasattr(b, "text")]
        return [t for t in lines if t.startswith("predicted ")]

    assert speed_line(r)[0].endswith("at the walked length")
    r["drafters"][0]["walked"]["tau"] = None
    assert speed_line(r)[0].endswith("at the expected length")
