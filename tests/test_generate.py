"""The generator of the generative differential (tests/engine/generate.py, gen_kinds.py): seeded,
combinations of every kind of deviation over every producer base, a truth that names real
tensors, and a build that is a function of the spec. No engine needed (the engine group is
tests/test_generative_differential.py)."""

from __future__ import annotations

import json
import sys

from conftest import ROOT

ENGINE_DIR = ROOT / "tests" / "engine"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

import gen_kinds  # noqa: E402
import generate  # noqa: E402

SEED, N = 31, 2000


def test_the_seed_decides_the_specs():
    assert generate.specs(SEED, 40) == generate.specs(SEED, 40)
    assert generate.specs(SEED, 40) != generate.specs(SEED + 1, 40)
    assert generate.specs(SEED, 10, start_at=30) == generate.specs(SEED, 40)[30:]


def test_combinations_of_every_kind_over_every_base():
    ss = generate.specs(SEED, N)
    per_kind: dict = {}
    for s in ss:
        kinds = [d["kind"] for d in s["devs"]]
        assert len(kinds) == len(set(kinds)), s  # one deviation per kind
        for k in kinds:
            per_kind[k] = per_kind.get(k, 0) + 1
    drawn = {k for k, kd in gen_kinds.KINDS.items() if kd.weight > 0}
    low = {k: per_kind.get(k, 0) for k in drawn if per_kind.get(k, 0) < 20}
    assert not low, low
    assert {s["base"] for s in ss} == set(generate.LLAMA_BASES)
    several = sum(1 for s in ss if len(s["devs"]) >= 2)
    assert several >= 0.6 * N, several


def test_the_build_is_a_function_of_the_spec(tmp_path):
    import minimize

    for s in generate.specs(SEED, 25):
        a = generate.write(generate.build(s), str(tmp_path / "a"))
        b = generate.write(generate.build(json.loads(json.dumps(s))), str(tmp_path / "b"))
        assert minimize._digests(a) == minimize._digests(b), s["id"]


def _dup_tensor(spec) -> bool:
    return any(d["kind"] == "shards" and d["index"] == "dup_tensor" for d in spec["devs"])


def test_the_truth_names_the_drafter():
    for s in generate.specs(SEED, 300):
        b = generate.build(s)
        names = {t.name for _, ts in b.files for t in ts}
        assert set(b.truth["roles"]) == names, s["id"]
        assert set(b.truth["trained"]) <= names, s["id"]
        # no name twice, but the one tensor an index deviation writes into two shards
        twice = 1 if _dup_tensor(s) and len(b.files) > 1 else 0
        assert len(names) + twice == sum(len(ts) for _, ts in b.files), s["id"]
        assert all(type(k) is int for k in b.truth["trained_layers"]), s["id"]
        assert b.truth["home"] in ("sglang", "vllm")


def test_values_survive_a_dtype_change():
    t = gen_kinds.new("x", "BF16", (4, 8), "x", True, "t")
    for dt in ("F32", "F16", "BF16"):
        back = gen_kinds.retyped(gen_kinds.retyped(t, dt), "BF16")
        assert back.data == t.data, dt
    tt = gen_kinds.transposed(gen_kinds.transposed(t))
    assert tt.shape == t.shape and tt.data == t.data


def test_every_dtype_the_generator_writes_has_a_size():
    """The shard index's total_parameters divides each tensor's bytes by its dtype's size: a map
    dtype of map_dtype missing there stopped the whole seeded run while writing its drafters."""
    import gen_values

    written = {d for ds in gen_kinds.MAP_DTYPES.values() for d in ds}
    assert written <= set(gen_values._SIZE), written - set(gen_values._SIZE)
    for role, dtypes in gen_kinds.MAP_DTYPES.items():
        for dtype in dtypes:
            devs = [
                {"kind": "map_dtype", "map": role, "dtype": dtype},
                {"kind": "shards", "n": 2, "index": "right"},
            ]
            spec = {"id": f"m-{role}-{dtype}", "base": "sf", "devs": generate.order(devs)}
            b = generate.build(spec)
            tensors = {t.name: t.dtype for _, ts in b.files for t in ts}
            assert len(b.files) == 2 and b.index is not None, spec
            assert tensors[role] == dtype, (role, dtype)
