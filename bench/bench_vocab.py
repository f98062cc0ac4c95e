"""Benchmark: `weightcheck convert SRC OUT --to sglang --vocab-from MAP --lm-head-from TARGET` of a
full-size Kimi-K2 drafter (SpecForge dialect, 2.38 GB; lm_head [32000, 7168] bf16) re-indexed to
another 32000-token map, the rows its head lacks taken from a Kimi-K2-sized target head
([163840, 7168] bf16, 2.35 GB). Issue #13's memory target: peak RSS under 300 MB — rows are
gathered by ranges, never the whole target head.

Makes (or reuses) the drafter of bench/make_full_drafter.py (its map: synth.vocab_maps seed 0),
writes beside it (once) a target folder whose model.safetensors holds only lm_head.weight, written
sparse (a header, then the file extended to its full size: every row reads as zeros, at page-cache
speed), and the map to re-index to: a speculators d2t.npy/t2d.npy pair of synth.vocab_maps seed 1
(about 6,250 of its 32,000 tokens are in the drafter's head, so ~25,750 rows come from the target,
spread over all of its 163,840 rows: the worst case for the gather). Then, each as a fresh
subprocess (one untimed warm-up, --repeat timed runs; peak RSS from /usr/bin/time -f %M, see
bench/_measure.py):

  reindex   python -m weightcheck convert SRC OUT --to sglang --vocab-from MAP
            --lm-head-from TARGET --force
  rename    python -m weightcheck convert SRC OUT --to sglang --force    (no re-index, for scale)

and checks, untimed, that OUT's d2t is the map's and a sample of its lm_head rows are the source's
or the target's, as the plan says. Warm page cache.

    python bench/bench_vocab.py [--repeat 3]
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # synth

import _measure as m  # noqa: E402
import make_full_drafter  # noqa: E402
import synth  # noqa: E402
from tabulate import tabulate  # noqa: E402

from weightcheck.storage.writer import OutTensor, header_bytes  # noqa: E402

V, VD, H = 163840, 32000, 7168


def make_target(folder: str) -> str:
    """A Kimi-K2-shaped target: config.json and a sparse model.safetensors with lm_head only."""
    os.makedirs(folder, exist_ok=True)
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "num_hidden_layers": 61,
        "hidden_size": H,
        "vocab_size": V,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    head = header_bytes([OutTensor("lm_head.weight", "BF16", (V, H), b"")], {"format": "pt"})
    path = os.path.join(folder, "model.safetensors")
    size = len(head) + V * H * 2
    if not make_full_drafter.is_complete(path, head, size):
        with open(path, "wb") as f:
            f.write(head)
            f.truncate(size)  # sparse: no disk blocks, reads as zeros
    return folder


def make_map(folder: str) -> str:
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    d2t, t2d = synth.vocab_maps(V, VD, seed=1)
    np.save(os.path.join(folder, "d2t.npy"), np.frombuffer(d2t, dtype="<i8"))
    np.save(os.path.join(folder, "t2d.npy"), np.frombuffer(t2d, dtype=np.bool_))
    return folder


def _rows(path: str, name: str):
    """(fd, data offset, row bytes) of a 2-D tensor, from the file's own header JSON."""
    fd = os.open(path, os.O_RDONLY)
    (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
    meta = json.loads(os.pread(fd, n, 8))[name]
    return fd, 8 + n + meta["data_offsets"][0], meta["shape"][1] * 2


def verify(src: str, out: str, mapdir: str) -> str:
    """OUT's d2t is the map's; every 97th row is the source's row for the same token, or zeros
    (the sparse target's) for a token the source lacks."""
    import numpy as np
    from safetensors import safe_open

    ref = np.load(os.path.join(mapdir, "d2t.npy"))
    with safe_open(os.path.join(out, "model.safetensors"), "np") as f:
        assert (f.get_tensor("d2t") == ref).all(), "d2t is not the map's"
    with safe_open(os.path.join(src, "model.safetensors"), "np") as g:
        sd2t = g.get_tensor("d2t")
    where = {int(t): i for i, t in enumerate(sd2t + np.arange(VD))}
    ofd, ooff, rb = _rows(os.path.join(out, "model.safetensors"), "lm_head.weight")
    sfd, soff, _ = _rows(os.path.join(src, "model.safetensors"), "lm_head.weight")
    kept = moved = tgt = 0
    for j in range(0, VD, 97):
        t = int(ref[j]) + j
        row = os.pread(ofd, rb, ooff + j * rb)
        if t in where:
            i = where[t]
            assert row == os.pread(sfd, rb, soff + i * rb), j
            kept, moved = kept + (i == j), moved + (i != j)
        else:
            assert row == bytes(rb), j
            tgt += 1
    os.close(ofd)
    os.close(sfd)
    return f"ok ({kept + moved + tgt} sampled rows: {kept} kept, {moved} moved, {tgt} from target)"


@m.bench_command(repeat=3)
def main(repeat, config):
    py = sys.executable
    m.compile_tree()
    src = make_full_drafter.make(config=config)
    target = make_target(os.path.join(HERE, "out", "k2-target-head-sparse"))
    mapdir = make_map(os.path.join(HERE, "out", "k2-map-seed1"))
    out = os.path.join(HERE, "out", "k2-reindexed")
    rows = [
        (
            "convert --vocab-from MAP --lm-head-from TARGET",
            [
                "-m",
                "weightcheck",
                "convert",
                src,
                out,
                "--to",
                "sglang",
                "--vocab-from",
                mapdir,
                "--lm-head-from",
                target,
                "--force",
                "--json",
            ],
        ),
        (
            "convert (rename only, for scale)",
            ["-m", "weightcheck", "convert", src, out, "--to", "sglang", "--force", "--json"],
        ),
    ]
    results = {}
    for label, args in rows:
        r = m.repeat([py, *args], repeat)
        results[label] = r
        print(f"  {label}: median {r['median']:.2f} s, peak RSS {m.mb(r['rss'])}", file=sys.stderr)
    first = results[rows[0][0]]
    rep = json.loads(first["last"]["stdout"])
    # the last run of the table is the rename: redo the re-index once (untimed) to verify it
    m.run([py, *rows[0][1]])
    check = verify(src, out, mapdir)
    shutil.rmtree(out, ignore_errors=True)
    mach = m.machine()
    ri = rep["reindex"]
    print("\n## convert --vocab-from: re-indexing a full-size Kimi-K2 head\n")
    print(
        f"SRC: {src} (2.38 GB, lm_head [32000, 7168] bf16). MAP: {mapdir} (synth.vocab_maps seed "
        f"1). TARGET: lm_head [163840, 7168] bf16, 2.35 GB (sparse). Plan: {ri['kept']:,} rows "
        f"kept, {ri['moved']:,} moved, {ri['from_target']:,} from the target. {repeat} timed runs "
        f"after one warm-up, warm page cache. Peak RSS: {m.RSS_METHOD}.\n"
    )
    table = [
        [label, f"{r['median']:.2f}", f"{r['min']:.2f}", m.mb(r["rss"])]
        for label, r in results.items()
    ]
    print(tabulate(table, headers=["command", "median s", "min s", "peak RSS"], tablefmt="github"))
    print(f"\nOutput check: {check}")
    print(f"\nMachine: {mach}; {datetime.date.today().isoformat()}")


if __name__ == "__main__":
    main()
