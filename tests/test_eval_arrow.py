"""speculators' loss mask: the ``loss_mask`` column of its preprocessed Arrow dataset, read by
weightcheck/eval/arrow.py without pyarrow (docs/eval.md §1.2), on files a stdlib writer makes
(tests/helpers/arrowwrite.py; the engine-marked tests/test_eval_arrow_oracle.py holds the reader
to ``datasets`` itself); and ``eval`` counting speculators' positions with it."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct

import pytest
import stress
from conftest import run_cli
from helpers.arrowwrite import arrow_stream, write_dataset

from weightcheck.errors import WeightcheckError
from weightcheck.eval.arrow import ListColumn


def _cols(masks, mask_type=("list", "int64"), lead=True):
    """A dataset's columns as speculators' prepare-data writes them (input_ids, loss_mask,
    seq_len), with other types before the mask (a string, a plain int) when ``lead``."""
    ids = [None if m is None else list(range(len(m))) for m in masks]
    cols = [("input_ids", ("list", "int32"), ids)]
    if lead:
        cols += [("text", "utf8", [None if m is None else "x" * len(m) for m in masks])]
        cols += [("n", "int64", [0 if m is None else len(m) for m in masks])]
    cols += [("loss_mask", mask_type, masks)]
    cols += [("seq_len", "int64", [0 if m is None else len(m) for m in masks])]
    return cols


def _read_all(folder):
    c = ListColumn(str(folder))
    return [c.values(i) for i in range(c.rows)]


def _error(fn) -> str:
    with pytest.raises(WeightcheckError) as e:
        fn()
    line = e.value.line()
    assert "\n" not in line and "Traceback" not in line
    return line


# -- the reader --------------------------------------------------------------------------------
def test_list_int64_in_several_batches_and_two_shards(tmp_path):
    a = [[0, 0, 1, 1], [1], [], [0, 1, 0, 1, 1]]
    b = [[1, 1], [0, 0, 0]]
    write_dataset(tmp_path, [_cols(a), _cols(b)], batch_rows=3)
    c = ListColumn(str(tmp_path))
    assert c.rows == 6 and len(c.batches) == 3  # 3 + 1 rows, then 2
    assert _read_all(tmp_path) == a + b
    assert c.where(4) == f"{tmp_path.name}/data-00001-of-00002.arrow"
    assert c.type == "list<int64>"


@pytest.mark.parametrize(
    "mask_type,name",
    [
        (("large_list", "int8"), "large list<int8>"),
        (("list", "bool"), "list<bool>"),
        (("list", "uint8"), "list<uint8>"),
        (("list", "int32"), "list<int32>"),
        (("large_list", "int64"), "large list<int64>"),
    ],
)
def test_the_other_integer_and_bool_lists(tmp_path, mask_type, name):
    rows = [[1, 0, 1, 1, 0, 0, 1, 0, 1], [0, 1], [1] * 17]  # bools across byte boundaries
    write_dataset(tmp_path, [_cols(rows, mask_type)], batch_rows=2)
    assert _read_all(tmp_path) == rows
    assert ListColumn(str(tmp_path)).type == name


def test_random_rows_batches_and_shards_read_back():
    rng = random.Random(0)
    import tempfile

    for trial in range(stress.count(200, 20)):
        with tempfile.TemporaryDirectory() as d:
            rows = [[rng.randint(0, 1) for _ in range(rng.randint(0, 12))] for _ in range(30)]
            cut = sorted(rng.sample(range(1, 30), rng.randint(0, 3)))
            parts = [rows[a:b] for a, b in zip([0, *cut], [*cut, 30])]
            kind = rng.choice([("list", "int64"), ("large_list", "int8"), ("list", "bool")])
            write_dataset(d, [_cols(p, kind, lead=trial % 2 == 0) for p in parts],
                          batch_rows=rng.randint(1, 8))  # fmt: skip
            assert _read_all(d) == rows, (trial, kind)


def test_a_null_row_is_said_when_read(tmp_path):
    write_dataset(tmp_path, [_cols([[1, 1], None, [0, 1]])])
    c = ListColumn(str(tmp_path))
    assert c.values(0) == [1, 1] and c.values(2) == [0, 1]
    line = _error(lambda: c.values(1))
    assert line == f"{tmp_path.name}/data-00000-of-00001.arrow: row 1's loss_mask is null"


@pytest.mark.parametrize(
    "mask_type,said",
    [
        (("list", "float32"), "loss_mask is list<floating point>"),
        ("int64", "loss_mask is int64"),
        ("utf8", "loss_mask is utf8"),
        (("list", "utf8"), "loss_mask is list<utf8>"),
    ],
)
def test_an_unsupported_type_is_one_line(tmp_path, mask_type, said):
    rows = [[1.0, 0.0]] if mask_type == ("list", "float32") else [[1, 0]]
    if mask_type in ("int64", "utf8"):
        rows = [1] if mask_type == "int64" else ["a"]
    if mask_type == ("list", "utf8"):
        rows = [["a"]]
    cols = [("loss_mask", mask_type, rows)]
    write_dataset(tmp_path, [cols])
    line = _error(lambda: ListColumn(str(tmp_path)))
    assert line.startswith(f"{tmp_path.name}/data-00000-of-00001.arrow: {said}: "), line
    assert "reads a list or large_list of integers or bools" in line


def test_what_else_is_refused(tmp_path):
    # no loss_mask column
    write_dataset(tmp_path / "a", [[("input_ids", ("list", "int64"), [[1]])]])
    assert "no loss_mask column (its columns: input_ids)" in _error(
        lambda: ListColumn(str(tmp_path / "a"))
    )
    # an indices mapping (datasets 1.x saved select/shuffle so)
    write_dataset(tmp_path / "b", [_cols([[1]])],
                  state_extra={"_indices_data_files": [{"filename": "indices.arrow"}]})  # fmt: skip
    line = _error(lambda: ListColumn(str(tmp_path / "b")))
    assert line.startswith("b/state.json: an indices mapping") and "not read" in line
    # a DatasetDict, a missing state.json, a shard listed but absent
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    assert "a DatasetDict" in _error(lambda: ListColumn(str(tmp_path / "c")))
    (tmp_path / "d").mkdir()
    assert _error(lambda: ListColumn(str(tmp_path / "d"))).startswith("d/state.json: missing")
    write_dataset(tmp_path / "e", [_cols([[1]])])
    os.remove(tmp_path / "e" / "data-00000-of-00001.arrow")
    assert "listed in state.json but missing" in _error(lambda: ListColumn(str(tmp_path / "e")))


def test_broken_files_are_one_line(tmp_path):
    (f,) = write_dataset(tmp_path, [_cols([[1, 0, 1], [1, 1]])])
    whole = open(f, "rb").read()
    name = f"{tmp_path.name}/data-00000-of-00001.arrow"
    for cut in (6, 40, len(whole) - 30):
        open(f, "wb").write(whole[:cut])
        line = _error(lambda: ListColumn(str(tmp_path)))
        assert line.startswith(name + ": "), line
    # metadata whose offsets point outside it
    open(f, "wb").write(struct.pack("<Ii", 0xFFFFFFFF, 16) + b"\xff" * 16)
    assert "not an Arrow stream datasets wrote" in _error(lambda: ListColumn(str(tmp_path)))
    # a compressed record batch (BodyCompression present)
    open(f, "wb").write(arrow_stream(_cols([[1]]), compressed=True))
    assert "compressed record batches" in _error(lambda: ListColumn(str(tmp_path)))


def test_the_stream_without_its_end_marker_and_the_file_format(tmp_path):
    (f,) = write_dataset(tmp_path, [_cols([[1, 0], [0, 1, 1]])], batch_rows=1)
    body = arrow_stream(_cols([[1, 0], [0, 1, 1]]), batch_rows=1, end=False)
    open(f, "wb").write(body)
    assert _read_all(tmp_path) == [[1, 0], [0, 1, 1]]
    open(f, "wb").write(b"ARROW1\0\0" + body + struct.pack("<Ii", 0xFFFFFFFF, 0) + b"footer")
    assert _read_all(tmp_path) == [[1, 0], [0, 1, 1]]


# -- eval on speculators' layout ---------------------------------------------------------------
torch = pytest.importorskip("torch")
STEPS, SAMPLES, SEQ, PROMPT = 3, 6, 24, 4


@pytest.fixture(scope="module")
def sp(tmp_path_factory):
    """The example's samples in speculators' layout under PRE/hidden_states, an Arrow dataset in
    PRE with a random loss mask per row, and a SpecForge copy of the same samples whose mask is
    speculators' alignment of it written out by hand."""
    from test_eval import _drafter, _make_eval_module

    root = tmp_path_factory.mktemp("eval-arrow")
    a = _drafter(root / "a", seed=1)
    made = _make_eval_module().write_eval_example(
        a, str(root / "data"), samples=SAMPLES, seq=SEQ, prompt=PROMPT
    )
    pre = root / "pre"
    shutil.copytree(made["speculators"], pre / "hidden_states")
    rng = random.Random(5)
    masks = [[rng.randint(0, 1) for _ in range(SEQ)] for _ in range(SAMPLES)]
    masks[0][0] = masks[0][-1] = 1  # both ends: where the alignments differ
    write_dataset(pre, [_cols(masks[:4]), _cols(masks[4:])], batch_rows=3)
    sf = root / "as-specforge" / "rows_0-2000"
    sf.mkdir(parents=True)
    for i in range(SAMPLES):
        d = torch.load(os.path.join(made["specforge"], "rows_0-2000", f"data_{i}.ckpt"))
        m = torch.tensor(masks[i][1:] + [0])  # column t counts by loss_mask[t+1] (shift_batch)
        torch.save(dict(d, loss_mask=m), sf / f"data_{i}.ckpt")
    return {"a": a, "pre": pre, "masks": masks, "target": made["target"], "sf": sf.parent}


def _eval(*args):
    r = run_cli("eval", *map(str, args), "--steps", STEPS, "--dtype", "float32", "--json")
    assert r.exit_code == 0, r
    return r.json


def test_eval_counts_speculators_positions_by_the_arrow_mask(sp):
    # speculators (shift_batch, align_for_step): step k at column j in 0..S-2-k, target y[j+k+1],
    # counted where loss_mask[j+k+1]: per sample sum(loss_mask[k+1:])
    want = [sum(sum(m[k + 1 :]) for m in sp["masks"]) for k in range(STEPS)]
    for data in (sp["pre"], sp["pre"] / "hidden_states"):
        r = _eval(sp["a"], "--hidden-states", data, "--target", sp["target"])
        assert r["data"]["loss_mask"] == "arrow"
        assert r["data"]["loss_mask_from"] == str(sp["pre"])
        assert [s["trained_valid"] for s in r["drafters"][0]["steps"]] == want
    # the same samples in SpecForge's layout with that alignment written into their mask: the
    # same counts, hits, conditional accuracies and walk
    ref = _eval(sp["a"], "--hidden-states", sp["sf"], "--target", sp["target"])
    assert r["drafters"][0]["steps"] == ref["drafters"][0]["steps"]
    assert r["drafters"][0]["walked"] == ref["drafters"][0]["walked"]
    assert r["drafters"][0]["steps"][0]["trained_hits"] >= 20  # not a 0 == 0 proof
    # one file, as DATA: its row
    hs5 = sp["pre"] / "hidden_states" / "hs_5.safetensors"
    one = _eval(sp["a"], "--hidden-states", hs5, "--target", sp["target"])
    assert one["data"]["loss_mask"] == "arrow"
    assert one["drafters"][0]["steps"][0]["trained_valid"] == sum(sp["masks"][5][1:])


def test_the_header_says_where_the_mask_is_from(sp, tmp_path):
    t = run_cli("eval", sp["a"], "--hidden-states", sp["pre"], "--target", sp["target"])
    assert t.exit_code == 0, t
    assert f"the loss_mask column of {sp['pre']} (list<int64>, row i for hs_<i>)" in " ".join(
        t.stdout.split()
    )
    # without the dataset: every position, and the note says where it looked
    bare = tmp_path / "bare"
    shutil.copytree(sp["pre"] / "hidden_states", bare / "hidden_states")
    r = _eval(sp["a"], "--hidden-states", bare, "--target", sp["target"])
    assert r["data"]["loss_mask"] == "none" and "loss_mask_from" not in r["data"]
    assert r["data"]["note"] == (
        "speculators keeps the loss mask in its preprocessed Arrow dataset, not in "
        f"hs_<i>.safetensors, and {bare} holds none (no state.json): every position counts "
        "(--loss-mask names the dataset)"
    )
    assert r["drafters"][0]["steps"][0]["trained_valid"] == SAMPLES * (SEQ - 1)


def test_files_moved_away_from_their_dataset_take_it_from_loss_mask(sp, tmp_path):
    """hs_<i>.safetensors copied elsewhere (another disk, a bucket) count every position; with
    --loss-mask naming the dataset they count as they do beside it."""
    beside = _eval(sp["a"], "--hidden-states", sp["pre"], "--target", sp["target"])
    moved = tmp_path / "moved"
    shutil.copytree(sp["pre"] / "hidden_states", moved)
    r = _eval(sp["a"], "--hidden-states", moved, "--target", sp["target"], "--loss-mask", sp["pre"])
    assert r["data"]["loss_mask"] == "arrow" and r["data"]["loss_mask_from"] == str(sp["pre"])
    assert r["drafters"][0]["steps"] == beside["drafters"][0]["steps"]
    assert r["drafters"][0]["walked"] == beside["drafters"][0]["walked"]
    bare = _eval(sp["a"], "--hidden-states", moved, "--target", sp["target"])
    assert bare["data"]["loss_mask"] == "none"
    assert bare["drafters"][0]["steps"] != r["drafters"][0]["steps"]
    # the named dataset wins over one beside the files
    other = tmp_path / "other"
    ones = [[1] * SEQ for _ in range(SAMPLES)]
    write_dataset(other, [_cols(ones)])
    r = _eval(sp["a"], "--hidden-states", sp["pre"], "--target", sp["target"], "--loss-mask", other)
    assert r["data"]["loss_mask_from"] == str(other)
    assert r["drafters"][0]["steps"][0]["trained_valid"] == SAMPLES * (SEQ - 1)


def test_loss_mask_that_is_no_dataset_or_for_specforge_is_one_line(sp, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(sp["pre"] / "hidden_states", moved)
    (tmp_path / "empty").mkdir()
    for given, said in (
        (tmp_path / "missing", "--loss-mask: not a folder"),
        (tmp_path / "empty", "--loss-mask: not a datasets save (no state.json"),
    ):
        r = run_cli("eval", sp["a"], "--hidden-states", moved, "--loss-mask", given)
        assert r.exit_code == 2 and r.stdout == ""
        assert r.stderr.startswith(f"weightcheck: error: {given}: {said}")
        assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli("eval", sp["a"], "--hidden-states", sp["sf"], "--loss-mask", sp["pre"])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.strip() == (
        f"weightcheck: error: {sp['pre']}: --loss-mask is for speculators' hs_<i>.safetensors: "
        f"{sp['sf']} is SpecForge's, whose files carry their own loss_mask"
    )


def _broken(sp, tmp_path, masks, **kw):
    pre = tmp_path / "pre"
    shutil.copytree(sp["pre"] / "hidden_states", pre / "hidden_states")
    write_dataset(pre, [_cols(masks, **kw)])
    return run_cli("eval", sp["a"], "--hidden-states", pre, "--target", sp["target"])


def test_a_mask_of_another_length_a_null_row_or_type_exit_2(sp, tmp_path):
    masks = [list(m) for m in sp["masks"]]
    masks[2] = masks[2] + [1]
    r = _broken(sp, tmp_path / "len", masks)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"weightcheck: error: pre/hidden_states/hs_2.safetensors: token_ids has {SEQ} positions, but "
        f"row 2's loss_mask in pre/data-00000-of-00001.arrow has {SEQ + 1}: the hidden states "
        "are not that row's"
    )
    masks = [list(m) for m in sp["masks"]]
    masks[3] = None
    r = _broken(sp, tmp_path / "null", masks)
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "weightcheck: error: pre/data-00000-of-00001.arrow: row 3's loss_mask is null"
    )
    r = _broken(sp, tmp_path / "float", [[float(x) for x in m] for m in sp["masks"]],
                mask_type=("list", "float64"))  # fmt: skip
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "loss_mask is list<floating point>" in r.stderr
    r = _broken(sp, tmp_path / "short", sp["masks"][:4])  # hs_4, hs_5 have no row
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "hs_4.safetensors: no row 4 in the dataset" in r.stderr and "(4 rows)" in r.stderr


def test_json_says_the_mask_of_specforge_files(sp):
    r = _eval(sp["a"], "--hidden-states", sp["sf"], "--target", sp["target"])
    assert r["data"]["loss_mask"] == "file" and "loss_mask_from" not in r["data"]
    json.dumps(r)
