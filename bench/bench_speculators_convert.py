"""Benchmark (peer): `speculators convert --algorithm eagle3` beside `weightcheck convert --to
speculators`, on the same SpecForge export, and what each writes (issue #23 item 7).

The drafter: the config SpecForge 0.2.0's own `specforge export --to sglang` wrote
(tests/fixtures/producers/specforge-sglang/config.json: transformers 5 spells `dtype`) scaled to
Llama-3-8B sizes (hidden 4096, 32 heads of 128, 8 KV heads,
intermediate 14336, vocab 128256, draft vocab 32000): 0.85 GB of weightcheck.synth's
deterministic bf16 in SpecForge's names (midlayer.*, d2t, t2d, no embed_tokens), written once to
bench/out/llama8b-specforge-export and reused. The verifier: a folder holding the target's
config.json (LlamaForCausalLM, hidden 4096, vocab 128256, 32 layers; and one 8 KB tensor, below):
speculators reads nothing else of it when the drafter has t2d (convert/eagle/eagle3_converter.py, speculators 0.9.0).

Each command is a fresh subprocess (peak RSS from /usr/bin/time -f %M, bench/_measure.py), its
output deleted before each run, untimed; one untimed warm-up, then --repeat timed runs (median
and min wall):

  weightcheck   python -m weightcheck convert SRC OUT --to speculators --target VERIFIER
                --verifier VERIFIER (this source tree; --target: the family decides the aux-id
                convention; the folder also holds one 8 KB tensor, for a weightcheck that reads
                --target only as a checkpoint)
  speculators   speculators convert SRC --algorithm eagle3 --verifier VERIFIER --output-path OUT
                (speculators 0.9.0 in its side venv: tests/engine/setup_speculators_venv.sh,
                WEIGHTCHECK_SPECULATORS_PYTHON or ~/.cache/weightcheck/venvs/speculators)

Then, untimed: every config.json field that differs between the two outputs (the whole tree,
flattened to dotted paths), and every tensor whose name, dtype or shape differs.

    python bench/bench_speculators_convert.py [--repeat 3]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import _measure as m  # noqa: E402

SIZES = dict(
    hidden=4096, intermediate=14336, heads=32, head_dim=128, vocab=128256, draft_vocab=32000
)
VERIFIER_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}


def speculators_bin() -> str:
    py = os.environ.get("WEIGHTCHECK_SPECULATORS_PYTHON") or os.path.join(
        os.environ.get("WEIGHTCHECK_VENVS") or os.path.expanduser("~/.cache/weightcheck/venvs"),
        "speculators",
        "bin",
        "python",
    )
    exe = os.path.join(os.path.dirname(py), "speculators")
    if not os.access(exe, os.X_OK):
        sys.exit(f"{exe} is absent: run `bash tests/engine/setup_speculators_venv.sh`")
    return exe


def make_drafter() -> str:
    import synth
    from make_full_drafter import is_complete

    from weightcheck.storage.writer import header_bytes

    with open(os.path.join(ROOT, "tests/fixtures/producers/specforge-sglang/config.json")) as f:
        cfg = synth.scaled_config(json.load(f), **SIZES)
    out = os.path.join(m.OUT, "llama8b-specforge-export")
    tensors = synth.drafter_tensors(cfg, "specforge", 0)
    meta = {"format": "pt", "bench": "bench_speculators_convert seed=0"}
    header = header_bytes(tensors, meta)
    path = os.path.join(out, "model.safetensors")
    if not is_complete(path, header, len(header) + sum(t.nbytes for t in tensors)):
        tmp = out + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        synth.write_drafter(tmp, cfg, "specforge", 0, metadata=meta)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


def flatten(x, prefix="") -> dict:
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out or {prefix[:-1]: {}}
    return {prefix[:-1]: x}


def config_differences(a_dir: str, b_dir: str) -> list[tuple[str, object, object]]:
    with open(os.path.join(a_dir, "config.json")) as f:
        a = flatten(json.load(f))
    with open(os.path.join(b_dir, "config.json")) as f:
        b = flatten(json.load(f))
    absent = "(absent)"
    return [
        (k, a.get(k, absent), b.get(k, absent))
        for k in sorted(set(a) | set(b))
        if a.get(k, absent) != b.get(k, absent)
    ]


def tensor_differences(a_dir: str, b_dir: str) -> list[str]:
    from bench_convert import header

    _, a = header(os.path.join(a_dir, "model.safetensors"))
    _, b = header(os.path.join(b_dir, "model.safetensors"))
    out = []
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x is None or y is None:
            out.append(f"{k}: only in {'speculators' if x is None else 'weightcheck'}")
        elif (x["dtype"], x["shape"]) != (y["dtype"], y["shape"]):
            out.append(
                f"{k}: weightcheck {x['dtype']} {x['shape']}, speculators {y['dtype']} {y['shape']}"
            )
    return out


def has_verifier_option() -> bool:
    r = subprocess.run(
        [sys.executable, "-m", "weightcheck", "convert", "--help"],
        capture_output=True,
        text=True,
        env=m.ENV,
    )
    return "--verifier" in r.stdout


@m.bench_command(repeat=3, repeat_help="Timed runs of each command (after one warm-up).")
def main(repeat, config):  # noqa: ARG001 - --config is the shared bench option (unused here)
    src = make_drafter()
    size = os.path.getsize(os.path.join(src, "model.safetensors"))
    verifier = os.path.join(m.OUT, "llama8b-verifier-config-only")
    os.makedirs(verifier, exist_ok=True)
    with open(os.path.join(verifier, "config.json"), "w") as f:
        json.dump(VERIFIER_CONFIG, f, indent=2)
    # one 8 KB tensor beside the config: a weightcheck that reads --target only as a checkpoint
    # (before config-only targets, issue #23 item 4) takes the folder; speculators reads only
    # the config
    from weightcheck.storage.writer import OutTensor, write_file

    write_file(
        os.path.join(verifier, "model.safetensors"),
        [OutTensor("model.norm.weight", "BF16", (4096,), b"\x80\x3f" * 4096)],
        {"format": "pt"},
    )
    m.compile_tree()
    outs = {k: os.path.join(m.OUT, f"llama8b-{k}") for k in ("weightcheck", "speculators")}
    # --target: the target family decides the aux-id convention; --verifier: the path written
    # into speculators_config.verifier (what `speculators convert --verifier` records)
    opt = ["--verifier", verifier] if has_verifier_option() else []
    cmds = {
        "weightcheck": [sys.executable, "-m", "weightcheck", "convert", src, outs["weightcheck"]]
        + ["--to", "speculators", "--target", verifier, *opt, "--force"],
        "speculators": ["env", "-u", "PYTHONPATH", "HF_HUB_OFFLINE=1", speculators_bin()]
        + ["convert", src, "--algorithm", "eagle3", "--verifier", verifier]
        + ["--output-path", outs["speculators"]],
    }
    res = {}
    for key, cmd in cmds.items():
        runs = []
        for i in range(repeat + 1):
            shutil.rmtree(outs[key], ignore_errors=True)
            subprocess.run(["sync"], check=False)
            r = m.run(cmd)
            if r["rc"] != 0:
                sys.exit(f"{' '.join(cmd)}: exit {r['rc']}\n{r['stderr'].decode()[-3000:]}")
            if i:
                runs.append(r)
        walls = sorted(r["wall"] for r in runs)
        res[key] = {
            "median": walls[len(walls) // 2],
            "min": walls[0],
            "rss": max(r["rss"] for r in runs),
        }
    w, s = res["weightcheck"], res["speculators"]
    print(
        f"Source: {src} ({size / 1e9:.2f} GB, SpecForge names), verifier: its config.json (+ one 8 KB tensor)."
    )
    print(f"{repeat} timed run(s) each after one warm-up; warm page cache.\n")
    print("| command | wall median (min) | peak RSS |")
    print("|---|---|---|")
    print(
        f"| `speculators convert --algorithm eagle3` | {s['median']:.2f} s ({s['min']:.2f}) | {m.mb(s['rss'])} |"
    )
    print(
        f"| `weightcheck convert --to speculators` | {w['median']:.2f} s ({w['min']:.2f}) | {m.mb(w['rss'])} |"
    )
    print(
        f"| ratio speculators / weightcheck | {s['median'] / w['median']:.1f}x | "
        f"{s['rss'] / w['rss']:.1f}x |"
    )
    print("\nconfig.json fields that differ (weightcheck | speculators):")
    for k, a, b in config_differences(outs["weightcheck"], outs["speculators"]):
        print(f"  {k}: {json.dumps(a)} | {json.dumps(b)}")
    print("\ntensors whose name, dtype or shape differ:")
    for line in tensor_differences(outs["weightcheck"], outs["speculators"]) or ["  (none)"]:
        print(f"  {line}")
    mach = m.machine()
    print(
        f"\nmachine: {mach['nproc']} cores, {mach['ram']}, Python {mach['python']}, "
        f"torch {mach['torch']}; RSS by {m.RSS_METHOD}"
    )


if __name__ == "__main__":
    main()
