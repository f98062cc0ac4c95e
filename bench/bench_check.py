"""Benchmark: `weightcheck check DIR` (alone, --engine sglang, --engine vllm) on a full-size
Kimi-K2 drafter vs the obvious notebook check.

Makes (or reuses) the 2.4 GB drafter of bench/make_full_drafter.py, then in the same run measures,
each as a fresh subprocess (one untimed warm-up, then --repeat timed runs; median wall time, peak
RSS from /usr/bin/time -f %M, see bench/_measure.py):

  ours        python -m weightcheck check DIR --json                  (exit 0 or 1 both accepted:
  ours        python -m weightcheck check DIR --engine sglang --json   1 means "found an error",
  ours        python -m weightcheck check DIR --engine vllm --json     which is still a full check)
  notebook    safetensors.torch.load_file(path), compare every shape with the one the config
              implies, check d2t/t2d (in range, draft_vocab_size ids)  (what people write by hand)
  python      python -c pass                                          (interpreter floor)

and whether each imported torch (a separate `python -X importtime` run). Then check on a
scaled-down drafter (a few MB) beside the full one: peak RSS should not grow with file size.

check reads the header, config.json and the two small vocab maps (d2t 256 KB, t2d 160 KB), never
the weights. All runs are warm-cache (the file was just written or read and fits in RAM).

    python bench/bench_check.py [--repeat 5] [--config k2|k25]
"""

from __future__ import annotations

import datetime
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import _measure as m  # noqa: E402
import make_full_drafter  # noqa: E402
from tabulate import tabulate  # noqa: E402

# The obvious hand check: every tensor a one-layer Llama EAGLE-3 drafter has, its shape from the
# config, plus the vocab maps. Names in the SpecForge dialect (midlayer.*), as the drafter has them.
NOTEBOOK = """
import json, os, sys
import torch
from safetensors.torch import load_file
d = sys.argv[1]
c = json.load(open(os.path.join(d, "config.json")))
sd = load_file(os.path.join(d, "model.safetensors"))
H, I, V, Vd = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["draft_vocab_size"]
nh, kv = c["num_attention_heads"], c["num_key_value_heads"]
hd = c.get("head_dim") or H // nh
Ht = c.get("target_hidden_size") or H
want = {
    "fc.weight": (H, 3 * Ht), "norm.weight": (H,), "lm_head.weight": (Vd, H),
    "d2t": (Vd,), "t2d": (V,),
    "midlayer.hidden_norm.weight": (H,), "midlayer.input_layernorm.weight": (H,),
    "midlayer.post_attention_layernorm.weight": (H,),
    "midlayer.self_attn.q_proj.weight": (nh * hd, 2 * H),
    "midlayer.self_attn.k_proj.weight": (kv * hd, 2 * H),
    "midlayer.self_attn.v_proj.weight": (kv * hd, 2 * H),
    "midlayer.self_attn.o_proj.weight": (H, nh * hd),
    "midlayer.mlp.gate_proj.weight": (I, H), "midlayer.mlp.up_proj.weight": (I, H),
    "midlayer.mlp.down_proj.weight": (H, I),
}
bad = [f"missing {k}" for k in want if k not in sd]
bad += [f"unexpected {k}" for k in sd if k not in want and k != "embed_tokens.weight"]
bad += [f"{k}: {tuple(v.shape)} != {want[k]}" for k, v in sd.items()
        if k in want and tuple(v.shape) != want[k]]
if "d2t" in sd and "t2d" in sd:
    tgt = sd["d2t"] + torch.arange(Vd)
    if not (0 <= int(tgt.min()) and int(tgt.max()) < V):
        bad.append("d2t maps outside the vocab")
    if int(sd["t2d"].sum()) != Vd:
        bad.append("t2d does not mark draft_vocab_size ids")
    elif not bool(sd["t2d"][tgt].all()):
        bad.append("d2t and t2d disagree")
print(json.dumps({"ok": not bad, "problems": bad, "tensors": len(sd)}))
"""


def verdict(stdout: bytes) -> str:
    r = json.loads(stdout)
    if "summary" in r:  # ours
        s = r["summary"]
        return (
            f"{'ok' if r['ok'] else 'errors'} ({s['errors']} E, {s['warnings']} W, {s['info']} I)"
        )
    return "ok" if r["ok"] else f"problems: {'; '.join(r['problems'])[:60]}"


@m.bench_command(repeat=5)
def main(repeat, config):
    py = sys.executable
    m.compile_tree()  # as pip would: see _measure.compile_tree
    st, size, small, small_size = make_full_drafter.full_and_small(config)
    full = os.path.dirname(st)

    rows = [  # label, argv after python, accepted exit codes, is it ours
        ("weightcheck check --json", ["-m", "weightcheck", "check", full, "--json"], (0, 1), True),
        (
            "weightcheck check --engine sglang --json",
            ["-m", "weightcheck", "check", full, "--engine", "sglang", "--json"],
            (0, 1),
            True,
        ),
        (
            "weightcheck check --engine vllm --json",
            ["-m", "weightcheck", "check", full, "--engine", "vllm", "--json"],
            (0, 1),
            True,
        ),
        ("notebook: load_file + shapes vs config + d2t/t2d", ["-c", NOTEBOOK, full], (0,), False),
        ("python -c pass (floor)", ["-c", "pass"], (0,), False),
    ]
    results = {}
    for label, args, ok, _ in rows:
        r = m.repeat([py, *args], repeat, ok=ok)
        r["torch"] = "torch" in m.imported_modules(args)
        r["verdict"] = verdict(r["last"]["stdout"]) if "pass" not in label else ""
        results[label] = r
        print(
            f"  {label}: median {r['median']:.3f} s, peak RSS {m.mb(r['rss'])}, {r['verdict']}",
            file=sys.stderr,
        )

    base = results[rows[0][0]]["median"]
    nb = results[rows[3][0]]["median"]
    table = [
        [
            label,
            f"{r['median']:.3f}",
            f"{r['min']:.3f}",
            f"{r['median'] / base:.1f}x",
            f"{nb / r['median']:.1f}x" if is_ours else "",
            m.mb(r["rss"]),
            "yes" if r["torch"] else "no",
            r["verdict"],
        ]
        for (label, _, _, is_ours), r in ((row, results[row[0]]) for row in rows)
    ]

    flat = {
        label: m.repeat(
            [py, "-m", "weightcheck", "check", small, *extra, "--json"], repeat, ok=(0, 1)
        )
        for label, extra in (("check", []), ("check --engine vllm", ["--engine", "vllm"]))
    }
    mach = m.machine()
    report = json.loads(results[rows[0][0]]["last"]["stdout"])
    print(f"\n## check: full-size Kimi-K2 drafter ({config})\n")
    print(
        f"File: {st} — {size / 1e9:.2f} GB, dialect {report['dialect']}, architecture "
        f"{report['architecture']}. {repeat} timed runs each after one warm-up; warm page cache "
        f"(the file was just written/read; nothing drops the cache). Peak RSS: {m.RSS_METHOD}.\n"
    )
    print(
        tabulate(
            table,
            headers=[
                "command",
                "median s",
                "min s",
                "time / check",
                "notebook / this",
                "peak RSS",
                "imports torch",
                "verdict",
            ],
            tablefmt="github",
        )
    )
    print("\nMemory flat in file size (peak RSS):\n")
    fl = []
    for label, r in flat.items():
        big = results[rows[0][0]] if label == "check" else results[rows[2][0]]
        fl.append(
            [
                f"weightcheck {label}",
                f"{small_size / 1e6:.1f} MB",
                m.mb(r["rss"]),
                f"{r['median']:.3f}",
                f"{size / 1e9:.2f} GB",
                m.mb(big["rss"]),
                f"{big['median']:.3f}",
            ]
        )
    print(
        tabulate(
            fl,
            headers=[
                "command",
                "small file",
                "peak RSS",
                "median s",
                "full file",
                "peak RSS",
                "median s",
            ],
            tablefmt="github",
        )
    )
    print(
        f"\nMachine: {mach['nproc']} cores ({mach['cpu']}), {mach['ram']} RAM, {mach['os']}; "
        f"Python {mach['python']}, torch {mach['torch']}, safetensors {mach['safetensors']}. "
        f"Date: {datetime.date.today().isoformat()}."
    )


if __name__ == "__main__":
    main()
