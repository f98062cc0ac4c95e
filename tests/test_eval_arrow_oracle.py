"""weightcheck/eval/arrow.py against ``datasets`` itself (marker ``engine``; the ``speculators``
side venv, which has datasets 5.1 and pyarrow 26): datasets folders written by
``Dataset.save_to_disk`` — as speculators' prepare-data writes its loss mask (torch long tensors
through ``map``, ``set_format("torch")``, shuffled) and in the other types the reader takes, in
several shards and record batches, with null rows — read by the reader and by
``datasets.load_from_disk(...)["loss_mask"]``: the same rows. And the stdlib writer the default
tests use (tests/helpers/arrowwrite.py): its folders load with ``datasets`` as the reader reads
them.

    python -m pytest -m engine tests/test_eval_arrow_oracle.py
"""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from helpers.arrowwrite import write_dataset
from helpers.engine import side_env, side_python

from weightcheck.errors import WeightcheckError
from weightcheck.eval.arrow import ListColumn

pytestmark = pytest.mark.engine

WRITE = r"""
import json, sys, torch, datasets
out, spec = sys.argv[1], json.load(open(sys.argv[2]))
rows, kind = spec["rows"], spec["kind"]
if kind == "prepare-data":  # speculators' _append_row: torch.long tensors through map
    ds = datasets.Dataset.from_dict({"i": list(range(len(rows)))})
    def f(ex):
        return {"input_ids": [torch.arange(len(rows[i])) for i in ex["i"]],
                "loss_mask": [torch.tensor(rows[i], dtype=torch.long) for i in ex["i"]],
                "seq_len": [len(rows[i]) for i in ex["i"]]}
    ds = ds.map(f, batched=True, batch_size=7, remove_columns=["i"], keep_in_memory=True)
    ds.set_format(type="torch")
    ds = ds.shuffle(seed=0)
else:
    value = {"bool": "bool", "int8": "int8", "uint8": "uint8", "int32": "int32"}[spec["value"]]
    seq = (datasets.LargeList if kind == "large_list" else datasets.List)(datasets.Value(value))
    feats = datasets.Features({"text": datasets.Value("string"), "loss_mask": seq})
    ds = datasets.Dataset.from_dict(
        {"text": ["t%d" % i for i in range(len(rows))], "loss_mask": rows}, features=feats)
ds.save_to_disk(out, num_shards=spec["shards"])
got = datasets.load_from_disk(out).with_format(None)["loss_mask"]
print(json.dumps([None if r is None else [int(v) for v in r] for r in got]))
"""

READ = r"""
import json, sys, datasets
got = datasets.load_from_disk(sys.argv[1]).with_format(None)["loss_mask"]
print(json.dumps([None if r is None else [int(v) for v in r] for r in got]))
"""


def _side(code: str, *args) -> list:
    p = subprocess.run([side_python("speculators"), "-c", code, *map(str, args)],
                       capture_output=True, text=True, env=side_env(), timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _spec(tmp_path, **spec) -> str:
    p = tmp_path / "spec.json"
    p.write_text(json.dumps(spec))
    return str(p)


def _ours(folder) -> list:
    c = ListColumn(str(folder))
    out = []
    for i in range(c.rows):
        try:
            out.append(c.values(i))
        except WeightcheckError as e:
            assert e.message == f"row {i}'s loss_mask is null", e
            out.append(None)
    return out


def _rows(rng, n, nulls=False):
    return [
        None
        if nulls and rng.random() < 0.15
        else [rng.randint(0, 1) for _ in range(rng.randint(0, 40))]
        for _ in range(n)
    ]


@pytest.mark.parametrize("shards", [1, 3])
def test_what_prepare_data_writes(tmp_path, shards):
    rows = _rows(random.Random(shards), 2500)  # datasets' writer: batches of 1000 rows
    theirs = _side(WRITE, tmp_path / "d", _spec(tmp_path, rows=rows, kind="prepare-data",
                                                shards=shards))  # fmt: skip
    assert sorted(map(tuple, theirs)) == sorted(map(tuple, rows))  # shuffled, flattened
    c = ListColumn(str(tmp_path / "d"))
    assert c.type == "list<int64>" and len(c.batches) >= 3
    assert _ours(tmp_path / "d") == theirs


@pytest.mark.parametrize(
    "kind,value", [("list", "bool"), ("large_list", "int8"), ("list", "uint8"), ("list", "int32")]
)
def test_the_other_types_with_null_rows(tmp_path, kind, value):
    rows = _rows(random.Random(7), 300, nulls=True)
    theirs = _side(WRITE, tmp_path / "d", _spec(tmp_path, rows=rows, kind=kind, value=value,
                                                shards=2))  # fmt: skip
    assert theirs == rows and any(r is None for r in rows)
    assert _ours(tmp_path / "d") == theirs


def test_the_stdlib_writer_is_what_datasets_reads(tmp_path):
    rng = random.Random(3)
    rows = _rows(rng, 50, nulls=True)
    for kind in (("list", "int64"), ("large_list", "bool")):
        d = tmp_path / kind[0]
        shards = [
            [("text", "utf8", [str(i) for i in range(a, b)]), ("loss_mask", kind, rows[a:b])]
            for a, b in ((0, 20), (20, 50))
        ]
        write_dataset(d, shards, batch_rows=7)
        assert _side(READ, d) == rows == _ours(d)
