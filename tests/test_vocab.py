"""Issue #13: vocabulary maps. compare reports how two drafters' draft vocabularies agree (the
``vocab`` object), ``check --training-vocab MAP`` fails (WC311) when the training run's map is not
SRC's, and ``convert --vocab-from REF`` re-indexes SRC's lm_head to REF's map, byte for byte, rows
SRC's head lacks taken from the target's head (``--lm-head-from``).

The drafters have a known overlap (V = 512, Vd = 128): A's draft id j stands for target 2j; B's
first 32 ids agree with A's, ids 32..111 stand for 2(j+16) — A's tokens at other draft ids — and
ids 112..127 for 412..427, tokens A's head lacks. So: 112 shared, 32 at the same index, 80 rows
moved, 16 from the target, 96 of A's rows misread under B's map.
"""

from __future__ import annotations

import json
import pathlib
import struct
import subprocess
import sys

import pytest
import synth
from conftest import PRODUCERS, ROOT, run_cli
from helpers.builders import read_config, said
from helpers.convert import TARGET, tensor_bytes, torch_tensors
from helpers.text import unwrapped

import weightcheck
from weightcheck.storage.writer import write_file

V, VD, H = 512, 128, 64
A_MAP = [2 * j for j in range(VD)]
B_MAP = (
    [2 * j for j in range(32)]
    + [2 * (j + 16) for j in range(32, 112)]
    + [300 + j for j in range(112, 128)]
)
SHARED, SAME, MOVED, FROM_TARGET = 112, 32, 80, 16


def maps_bytes(targets: list[int], vocab: int = V) -> tuple[bytes, bytes]:
    d2t = struct.pack(f"<{len(targets)}q", *[t - j for j, t in enumerate(targets)])
    t2d = bytearray(vocab)
    for t in targets:
        t2d[t] = 1
    return d2t, bytes(t2d)


def drafter(folder: pathlib.Path, targets: list[int] | None, seed: int = 0) -> pathlib.Path:
    """The specforge-sglang fixture's config with weights of ``seed`` and the map ``targets``
    (None: no d2t/t2d and a full-vocabulary head, the identity map)."""
    cfg = read_config(PRODUCERS / "specforge-sglang")
    if targets is None:
        cfg["draft_vocab_size"] = V
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors = synth.drafter_tensors(cfg, seed=seed)
    if targets is None:
        tensors = [t for t in tensors if t.name not in ("d2t", "t2d")]
    else:
        d2t, t2d = maps_bytes(targets)
        for t in tensors:
            if t.name == "d2t":
                t.data = d2t
            elif t.name == "t2d":
                t.data = t2d
    write_file(str(folder / "model.safetensors"), tensors, {"format": "pt"})
    return folder


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from hubserver import HubServer, patch_hf_hub

    with HubServer() as server:
        patch_hf_hub(monkeypatch, server.url, tmp_path / "hf_home")
        yield server


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("vocab")
    return drafter(base / "a", A_MAP, seed=1), drafter(base / "b", B_MAP, seed=2)


def save_pt(path: pathlib.Path, targets: list[int]) -> pathlib.Path:
    import torch

    d2t = torch.tensor([t - j for j, t in enumerate(targets)], dtype=torch.int64)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[torch.tensor(targets)] = True
    torch.save({"d2t": d2t, "t2d": t2d}, path)
    return path


def save_npy(folder: pathlib.Path, targets: list[int]) -> pathlib.Path:
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "d2t.npy", np.array([t - j for j, t in enumerate(targets)], dtype=np.int64))
    t2d = np.zeros(V, dtype=bool)
    t2d[[t for t in targets if t < V]] = True
    np.save(folder / "t2d.npy", t2d)
    return folder


# =============================================================================================
# 1. compare: the vocab object
def test_compare_reports_the_known_overlap(pair):
    a, b = pair
    r = run_cli("compare", a, b, "--json")
    v = r.json["vocab"]
    assert (v["a_draft"], v["b_draft"], v["shared"], v["same_index"]) == (VD, VD, SHARED, SAME)
    assert all(isinstance(v[k], int) for k in ("a_draft", "b_draft", "shared", "same_index"))
    text = unwrapped(run_cli("compare", a, b).stdout)
    assert f"vocab: {VD} draft tokens each: {SHARED} shared, {SAME} at the same index" in text
    assert "96 of A's lm_head rows as other tokens" in text and "--vocab-from B" in text
    assert f"{FROM_TARGET} of B's tokens are not in A's head" in text


def test_compare_a_drafter_with_itself_shares_every_token(pair):
    a, _ = pair
    v = run_cli("compare", a, a, "--json").json["vocab"]
    assert v["shared"] == v["same_index"] == v["a_draft"] == v["b_draft"] == VD
    assert "the same map" in v["meaning"]


def test_compare_without_d2t_is_the_identity_map(pair, tmp_path):
    a, _ = pair
    full = drafter(tmp_path / "full", None, seed=3)
    v = run_cli("compare", full, a, "--json").json["vocab"]
    # identity: draft id j is target j; A's j stands for 2j, so only j = 0 agrees
    assert (v["a_draft"], v["b_draft"], v["shared"], v["same_index"]) == (V, VD, VD, 1)
    assert v["a_identity"] and not v["b_identity"]
    assert "A without d2t: the identity map" in run_cli("compare", full, a).stdout


# =============================================================================================
# 2. check --training-vocab
def test_training_vocab_from_a_drafter(pair):
    a, b = pair
    r = run_cli("check", a, "--training-vocab", b, "--json")
    assert r.exit_code == 1
    (f,) = [f for f in r.json["findings"] if f["code"] == "WC311"]
    assert f["severity"] == "error" and "96 head rows" in f["message"]
    assert "--vocab-from" in said(f) and "--lm-head-from TARGET" in said(f)
    tv = r.json["training_vocab"]
    assert (tv["shared"], tv["same_index"], tv["misread_rows"], tv["missing_tokens"]) == (
        SHARED,
        SAME,
        96,
        FROM_TARGET,
    )
    same = run_cli("check", a, "--training-vocab", a, "--json")
    assert same.exit_code == 0 and not [f for f in same.json["findings"] if f["code"] == "WC311"]


def test_training_vocab_from_a_specforge_pt(pair, tmp_path):
    a, _ = pair
    assert run_cli("check", a, "--training-vocab", save_pt(tmp_path / "b.pt", B_MAP)).exit_code == 1
    assert run_cli("check", a, "--training-vocab", save_pt(tmp_path / "a.pt", A_MAP)).exit_code == 0


def test_training_vocab_from_speculators_npy(pair, tmp_path):
    a, _ = pair
    b_dir = save_npy(tmp_path / "b", B_MAP)
    assert run_cli("check", a, "--training-vocab", b_dir).exit_code == 1
    assert run_cli("check", a, "--training-vocab", b_dir / "d2t.npy").exit_code == 1
    a_dir = save_npy(tmp_path / "a", A_MAP)
    assert run_cli("check", a, "--training-vocab", a_dir).exit_code == 0


def test_training_vocab_bad_map_is_exit_2(pair, tmp_path):
    a, _ = pair
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    r = run_cli("check", a, "--training-vocab", bad)
    assert r.exit_code == 2 and "bad.npy" in r.stderr
    far = save_npy(tmp_path / "far", [V + 5] + B_MAP[1:])
    r = run_cli("check", a, "--training-vocab", far)
    assert r.exit_code == 2 and "outside" in r.stderr


def test_training_vocab_with_a_drafter_map_does_not_import_torch(pair):
    a, b = pair
    code = (
        "import sys, weightcheck; r = weightcheck.check(sys.argv[1], training_vocab=sys.argv[2]);"
        "assert not r.ok; assert 'torch' not in sys.modules, 'torch imported'"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, str(a), str(b)], capture_output=True, text=True, cwd=ROOT
    )
    assert p.returncode == 0, p.stderr


# =============================================================================================
# 3. convert --vocab-from
def expected_rows(a_head: list[bytes], t_head: list[bytes]) -> list[bytes]:
    where = {t: i for i, t in enumerate(A_MAP)}
    return [a_head[where[t]] if t in where else t_head[t] for t in B_MAP]


def rows_of(raw: bytes, n: int) -> list[bytes]:
    k = len(raw) // n
    return [raw[i * k : (i + 1) * k] for i in range(n)]


@pytest.mark.parametrize("ref_kind", ["folder", "pt", "npy"])
def test_vocab_from_reindexes_byte_for_byte(pair, tmp_path, ref_kind):
    a, b = pair
    ref = {
        "folder": lambda: b,
        "pt": lambda: save_pt(tmp_path / "map.pt", B_MAP),
        "npy": lambda: save_npy(tmp_path / "npy", B_MAP),
    }[ref_kind]()
    out = tmp_path / "out"
    r = run_cli(
        "convert", a, out, "--to", "sglang", "--vocab-from", ref, "--lm-head-from", TARGET, "--json"
    )
    assert r.exit_code == 0, r
    assert r.json["reindex"] == {
        "map": str(ref) if ref_kind != "npy" else str(ref / "d2t.npy"),
        "draft_tokens": VD,
        "kept": SAME,
        "moved": MOVED,
        "from_target": FROM_TARGET,
    }
    src, got = tensor_bytes(a), tensor_bytes(out)
    tgt = tensor_bytes(TARGET, canonical=False)
    a_head = rows_of(src["lm_head.weight"][2], VD)
    t_head = rows_of(tgt["lm_head.weight"][2], V)
    assert rows_of(got["lm_head.weight"][2], VD) == expected_rows(a_head, t_head)
    d2t, t2d = maps_bytes(B_MAP)
    assert got["d2t"][2] == d2t and got["t2d"][2] == t2d
    for name, val in src.items():
        if name not in ("lm_head.weight", "d2t", "t2d"):
            assert got[name] == val, name
    # the output is a drafter with B's map: compare and check agree
    v = run_cli("compare", out, b, "--json").json["vocab"]
    assert v["shared"] == v["same_index"] == VD
    assert run_cli("check", out, "--training-vocab", b).exit_code == 0


def test_vocab_from_text_report_counts_rows(pair, tmp_path):
    a, b = pair
    r = run_cli(
        "convert", a, tmp_path / "o", "--to", "vllm", "--vocab-from", b, "--lm-head-from", TARGET
    )
    assert r.exit_code == 0, r
    assert f"{SAME} rows kept, {MOVED} moved, {FROM_TARGET} taken from" in r.stdout


def test_vocab_from_missing_tokens_without_a_target_is_exit_2(pair, tmp_path):
    a, b = pair
    out = tmp_path / "out"
    r = run_cli("convert", a, out, "--to", "sglang", "--vocab-from", b)
    assert r.exit_code == 2
    assert f"{FROM_TARGET} of the {VD} tokens" in r.stderr and "--lm-head-from" in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_vocab_from_a_subset_map_needs_no_target(pair, tmp_path):
    """A map whose tokens are all in SRC's head (a permutation here) needs no --lm-head-from."""
    a, _ = pair
    perm = list(reversed(A_MAP))
    out = tmp_path / "out"
    r = run_cli("convert", a, out, "--to", "sglang", "--vocab-from", save_npy(tmp_path / "m", perm))
    assert r.exit_code == 0, r
    a_head = rows_of(tensor_bytes(a)["lm_head.weight"][2], VD)
    assert rows_of(tensor_bytes(out)["lm_head.weight"][2], VD) == a_head[::-1]


def test_vocab_from_changes_draft_vocab_size(pair, tmp_path):
    """REF's map may be smaller than SRC's: OUT's head has REF's rows and config says so."""
    a, _ = pair
    small = A_MAP[64:] + []
    out = tmp_path / "out"
    r = run_cli(
        "convert", a, out, "--to", "sglang", "--vocab-from", save_npy(tmp_path / "m", small)
    )
    assert r.exit_code == 0, r
    assert json.loads((out / "config.json").read_text())["draft_vocab_size"] == 64
    assert run_cli("check", out).exit_code == 0


def test_reindexed_logits_equal_the_source_for_shared_tokens(pair, tmp_path):
    """Item 4: both drafters' heads on the same hidden states score every shared token alike."""
    import torch

    a, b = pair
    out = tmp_path / "out"
    weightcheck.convert(a, out, to="sglang", vocab_from=b, lm_head_from=TARGET)
    ta, to = torch_tensors(a), torch_tensors(out)
    h = torch.randn(16, H, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    la = torch.nn.functional.linear(h.float(), ta["lm_head.weight"].float())
    lo = torch.nn.functional.linear(h.float(), to["lm_head.weight"].float())
    ids_a = torch.arange(VD) + ta["d2t"]
    ids_o = torch.arange(VD) + to["d2t"]
    pos_a = {int(t): j for j, t in enumerate(ids_a)}
    shared = [(pos_a[int(t)], j) for j, t in enumerate(ids_o) if int(t) in pos_a]
    assert len(shared) == SHARED
    ia, io = zip(*shared)
    torch.testing.assert_close(la[:, list(ia)], lo[:, list(io)], rtol=0, atol=0)
    # the tokens taken from the target score as the target's head does
    th = torch_tensors(TARGET, canonical=False)["lm_head.weight"].float()
    rest = [j for j, t in enumerate(ids_o) if int(t) not in pos_a]
    lt = torch.nn.functional.linear(h.float(), th)
    torch.testing.assert_close(lo[:, rest], lt[:, ids_o[rest]], rtol=0, atol=0)


def test_api_and_dry_run(pair, tmp_path):
    a, b = pair
    r = weightcheck.convert(
        a, tmp_path / "o", to="speculators", vocab_from=b, lm_head_from=TARGET, dry_run=True
    )
    hows = {t["canonical"]: t["how"] for t in r.report["tensors"]}
    assert hows["lm_head.weight"] == "reindex" and hows["d2t"] == "vocab-map"
    assert not (tmp_path / "o").exists()
    c = weightcheck.check(a, training_vocab=b)
    assert not c.ok and "WC311" in c.codes


def test_hub_drafter_maps_are_read_by_range(pair, tmp_path, hub):
    """A Hub drafter as the map: its d2t is a Range read, the weights are not downloaded."""
    from helpers.convert import repo_files

    a, b = pair
    hub.add_repo("org/b", repo_files(b))
    v = run_cli("compare", a, "org/b", "--json").json["vocab"]
    assert (v["shared"], v["same_index"]) == (SHARED, SAME)
    assert run_cli("check", a, "--training-vocab", "org/b").exit_code == 1
    size = (b / "model.safetensors").stat().st_size
    assert hub.bytes_by_file[("org/b", "model.safetensors")] < size / 4
    r = run_cli(
        "convert", a, tmp_path / "o", "--to", "sglang", "--vocab-from", "org/b",
        "--lm-head-from", TARGET, "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r
    assert r.json["reindex"]["moved"] == MOVED


def test_a_row_moved_to_the_wrong_place_fails_verification(pair, tmp_path, monkeypatch):
    """Verification compares every row taken from a local file with its row there: a writer that
    puts two moved rows in each other's place fails before OUT appears."""
    from weightcheck.commands.convert import produce

    a, b = pair
    gather = produce.gather_rows

    def swapped(rows, sources, dtype, write):
        rows = list(rows)
        rows[40], rows[41] = rows[41], rows[40]
        return gather(rows, sources, dtype, write)

    monkeypatch.setattr(produce, "gather_rows", swapped)
    out = tmp_path / "out"
    r = run_cli("convert", a, out, "--to", "sglang", "--vocab-from", b, "--lm-head-from", TARGET)
    assert r.exit_code == 2 and "verification failed" in r.stderr, r
    assert not out.exists()


def test_a_hostile_pt_map_is_refused_in_one_line(pair, tmp_path):
    """A .pt map is read only with torch.load(weights_only=True) (sources/pickled.py): a pickle
    that would run code is refused, exit 2, one line on stderr."""
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo PWNED",))

    p = tmp_path / "evil.pt"
    p.write_bytes(pickle.dumps(Evil()))
    a, _ = pair
    r = run_cli("check", a, "--training-vocab", p)
    assert r.exit_code == 2 and "refused" in r.stderr and "PWNED" not in r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_pickled_drafter_is_a_drafter_map(pair, tmp_path):
    """A .pt holding a drafter's weights (not only d2t/t2d) is read as a drafter."""
    import torch

    a, b = pair
    sd = torch_tensors(b, canonical=False)
    torch.save(sd, tmp_path / "pytorch_model.pt")
    (tmp_path / "config.json").write_text((b / "config.json").read_text())
    r = run_cli("check", a, "--training-vocab", tmp_path / "pytorch_model.pt", "--json")
    assert r.exit_code == 1, r
    assert r.json["training_vocab"]["shared"] == SHARED
