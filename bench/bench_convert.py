"""Benchmark: rename-only `weightcheck convert SRC OUT --to speculators` of a full-size Kimi-K2
drafter (SpecForge dialect, 2.38 GB) vs cp, the obvious script and `speculators convert`.

Makes (or reuses) the drafter of bench/make_full_drafter.py, then in the same run measures, each
as a fresh subprocess (peak RSS from /usr/bin/time -f %M, see bench/_measure.py). Every output is
deleted (and the page cache's dirty pages flushed with sync) before each run, untimed, so no run
pays for an earlier one. The fast commands run in interleaved rounds (one untimed warm-up round,
then --repeat timed rounds; in each round every command once), so whatever the machine does in
the background falls on all of them alike; the table gives the median and the min:

  ours        python -m weightcheck convert SRC OUT --to speculators --force      (rename only)
  ours+fsync  the same with --fsync (flushed to disk before OUT appears)
  cp          cp -r SRC OUT                                    (the throughput target's reference)
  cp + sync   cp -r SRC OUT && sync OUT/model.safetensors       (cp, durable like --fsync)
  script      safetensors.torch.load_file, rename midlayer. -> layers.0., save_file
  speculators speculators convert SRC --algorithm eagle3 --verifier VERIFIER --output-path OUT
              (speculators 0.9.0, the console script beside --producers-python, a venv as in
              tests/fixtures/producers/make_fixtures.py; offline: HF_HUB_OFFLINE=1. VERIFIER is a
              folder holding only a config.json: speculators reads the verifier's config and
              nothing else when the drafter has t2d and validation is off, its default)
              --repeat-slow runs after one warm-up, not interleaved (25 s each); skipped, with a
              message, without --producers-python / WEIGHTCHECK_PRODUCERS_PYTHON
  extra rows  the same with --dtype fp16 (ours) and .half() before save_file (script)
  small       ours and cp on the scaled-down drafter (make_full_drafter.make_small), in the same
              rounds: with the full size they split each command's time into what it costs
              whatever the size and its rate in bytes per second (t = fixed + bytes / rate)

weightcheck runs from this source tree, byte-compiled first (`compileall`): pip compiles an
installed package, and with PYTHONDONTWRITEBYTECODE set (as here) a source tree would otherwise
be compiled again by every run (~25 ms).

Then, unless --no-cold: ours and cp again with a cold page cache, in interleaved rounds. With root and a writable
/proc/sys/vm/drop_caches that is `sync; echo 3 > drop_caches` before each run; otherwise
posix_fadvise(POSIX_FADV_DONTNEED) on the source file (after sync), which evicts that file
only, checked with fincore. Cold runs have no warm-up.

Checks, untimed: every output has the same tensor names, dtypes and shapes as ours, and its
tensor bytes are identical to ours (crc32 per tensor); the fp16 rows against each other.

    python bench/bench_convert.py [--repeat 7] [--repeat-slow 1] [--no-cold] [--no-speculators]
                                  [--producers-python VENV/bin/python]
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import _measure as m  # noqa: E402
import click  # noqa: E402
import make_full_drafter  # noqa: E402
from tabulate import tabulate  # noqa: E402

SCRIPT = """
import os, shutil, sys
from safetensors.torch import load_file, save_file
src, out = sys.argv[1], sys.argv[2]
cast = len(sys.argv) > 3 and sys.argv[3] == "fp16"
sd = load_file(os.path.join(src, "model.safetensors"))
new = {}
for k, v in sd.items():
    if k.startswith("midlayer."):
        k = "layers.0." + k[len("midlayer."):]
    new[k] = v.half() if cast and v.is_floating_point() else v
os.makedirs(out, exist_ok=True)
save_file(new, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
shutil.copy(os.path.join(src, "config.json"), out)  # the config is edited by hand (not timed here)
"""

# speculators reads from the verifier only these config fields (speculators 0.9.0,
# convert/eagle/eagle3_converter.py): architectures (recorded in speculators_config.verifier),
# max_position_embeddings (max'ed with the drafter's) and, only when the drafter has no t2d,
# vocab_size. Values of Kimi-K2 (a DeepSeek-V3 architecture; 163840 vocab, 7168 hidden).
KIMI_VERIFIER_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "vocab_size": 163840,
    "num_hidden_layers": 61,
    "max_position_embeddings": 131072,
}


# --------------------------------------------------------------------------------------------
def rm(path: str) -> None:
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def can_drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def resident(path: str) -> int | None:
    """Bytes of ``path`` in the page cache (fincore), None if fincore is missing."""
    try:
        out = subprocess.run(
            ["fincore", "-b", "-n", "-o", "RES", path], capture_output=True, text=True, check=True
        ).stdout.split()
        return int(out[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def evict(paths: list[str], drop: bool) -> None:
    os.sync()
    if drop:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def rounds(cmds: dict, n: int, outs, after=None, warmup: bool = True, before=None) -> dict:
    """Run every command of ``cmds`` (key -> argv) once per round, in an order rotated by one each
    round: one untimed warm-up round (unless ``warmup`` is False), then ``n`` timed rounds. Before each run its outputs are deleted,
    the page cache synced and ``before()`` called (cache eviction), untimed; after it they are
    deleted again (after ``after(key)`` has looked at them, in the last round), so one output at
    a time takes disk and page cache."""
    runs: dict = {k: [] for k in cmds}
    first = 0 if warmup else 1
    keys = list(cmds)
    for i in range(first, n + 1):
        # rotated each round, so every command runs in every position: on this VM a run's time
        # depends on what ran just before it (free page reporting, docs/benchmarks.md)
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            cmd = cmds[key]
            for o in outs[key]:
                rm(o)
            os.sync()
            if before is not None:
                before()
            r = m.run(cmd)
            if r["rc"] != 0:
                sys.exit(
                    f"{' '.join(cmd)}: exit {r['rc']}\n{r['stderr'].decode(errors='replace')[-3000:]}"
                )
            if i:
                runs[key].append(r)
            if i == n and after is not None:
                after(key)
            for o in outs[key]:
                rm(o)
    return {
        k: {
            "median": statistics.median(r["wall"] for r in t),
            "min": min(r["wall"] for r in t),
            "max": max(r["wall"] for r in t),
            "rss": max(r["rss"] for r in t),
            "last": t[-1],
            "n": len(t),
            "all": [r["wall"] for r in t],
        }
        for k, t in runs.items()
    }


def header(path: str) -> tuple[int, dict]:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return 8 + n, h


def tensor_digests(path: str) -> dict:
    """name -> (dtype, shape, crc32 of the tensor's bytes)."""
    start, h = header(path)
    out = {}
    with open(path, "rb") as f:
        for k, v in h.items():
            a, b = v["data_offsets"]
            f.seek(start + a)
            crc, left = 0, b - a
            while left:
                buf = f.read(min(left, 64 << 20))
                crc = zlib.crc32(buf, crc)
                left -= len(buf)
            out[k] = (v["dtype"], tuple(v["shape"]), crc)
    return out


def model_file(folder: str) -> str:
    p = os.path.join(folder, "model.safetensors")
    if os.path.exists(p):
        return p
    raise SystemExit(f"{folder}: no single model.safetensors ({os.listdir(folder)})")


def same(a: dict, b: dict) -> str:
    if a == b:
        return "identical tensors (names, dtypes, shapes, bytes)"
    if {k: v[:2] for k, v in a.items()} == {k: v[:2] for k, v in b.items()}:
        diff = [k for k in a if a[k][2] != b[k][2]]
        return f"same names/dtypes/shapes; bytes differ in {len(diff)}: {', '.join(diff[:4])}"
    return (
        f"different tensor sets: only ours {sorted(set(a) - set(b))[:4]}, "
        f"only theirs {sorted(set(b) - set(a))[:4]}, "
        f"dtype/shape differ {[k for k in set(a) & set(b) if a[k][:2] != b[k][:2]][:4]}"
    )


CONFIG_FIELDS = (
    "eagle_aux_hidden_state_layer_ids",
    "norm_before_residual",
    "draft_vocab_size",
    "transformer_layer_config.bos_token_id",
    "transformer_layer_config.eos_token_id",
    "transformer_layer_config.max_position_embeddings",
    "transformer_layer_config.vocab_size",
    "transformer_layer_config.rope_parameters",
    "speculators_config.verifier",
)
SOURCE_FIELDS = {
    "eagle_aux_hidden_state_layer_ids": "eagle_config.eagle_aux_hidden_state_layer_ids",
    "transformer_layer_config.bos_token_id": "bos_token_id",
    "transformer_layer_config.eos_token_id": "eos_token_id",
}


def _get(cfg: dict, path: str):
    for part in path.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return "(absent)"
        cfg = cfg[part]
    return cfg


def config_differences(ours: str, theirs: str, source: str) -> list[str]:
    with open(os.path.join(ours, "config.json")) as f:
        a = json.load(f)
    with open(os.path.join(theirs, "config.json")) as f:
        b = json.load(f)
    with open(os.path.join(source, "config.json")) as f:
        src = json.load(f)
    out = []
    for path in CONFIG_FIELDS:
        x, y = _get(a, path), _get(b, path)
        if x != y:
            s = f" [{_get(src, SOURCE_FIELDS[path])}]" if path in SOURCE_FIELDS else ""
            out.append(f"{path}: weightcheck {json.dumps(x)}, speculators {json.dumps(y)}{s}")
    return out


def producers_version(py: str, pkg: str) -> str:
    r = subprocess.run(
        [py, "-c", f"from importlib.metadata import version; print(version({pkg!r}))"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() or "?"


# --------------------------------------------------------------------------------------------
@m.bench_command(
    repeat=7, repeat_help="Timed rounds of the fast commands (ours, cp, the script), interleaved."
)
@click.option(
    "--repeat-slow",
    type=int,
    default=1,
    show_default=True,
    help="Timed runs of speculators convert (after one warm-up).",
)
@click.option(
    "--cold/--no-cold",
    default=True,
    show_default=True,
    help="Also time ours and cp with a cold page cache.",
)
@click.option("--speculators/--no-speculators", "with_spec", default=True, show_default=True)
@click.option(
    "--producers-python",
    envvar="WEIGHTCHECK_PRODUCERS_PYTHON",
    default=None,
    metavar="PATH",
    help="Python of a venv with speculators 0.9.0 (tests/fixtures/producers/make_fixtures.py); "
    "its `speculators` script runs the speculators row. Also WEIGHTCHECK_PRODUCERS_PYTHON. "
    "Without it that row is skipped.",
)
def main(repeat, repeat_slow, cold, with_spec, producers_python, config):
    py = sys.executable
    st, size, small, small_size = make_full_drafter.full_and_small(config)
    src = os.path.dirname(st)
    gb = size / 1e9
    work = os.path.join(m.OUT, "convert-bench")
    os.makedirs(work, exist_ok=True)
    for e in os.listdir(work):  # leftovers of an interrupted run
        rm(os.path.join(work, e))
    out = {
        k: os.path.join(work, k)
        for k in (
            "ours",
            "oursfsync",
            "cp",
            "cpsync",
            "script",
            "speculators",
            "ours-fp16",
            "script-fp16",
            "imports",
            "ours-small",
            "cp-small",
        )
    }

    # every output folder and weightcheck's temporary/aside folders beside it
    def leftovers(name):
        return [out[name]] + [
            os.path.join(work, e)
            for e in os.listdir(work)
            if e.startswith(f".{name}.weightcheck-tmp-") or e.startswith(f"{name}.weightcheck-tmp-")
        ]

    class Outs(dict):  # key -> its output paths, listed when asked (temporary folders come and go)
        def __missing__(self, key):
            return leftovers(key)

    verifier = os.path.join(m.OUT, f"{config}-verifier-config-only")
    os.makedirs(verifier, exist_ok=True)
    with open(os.path.join(verifier, "config.json"), "w") as f:
        json.dump(KIMI_VERIFIER_CONFIG, f, indent=2)
    m.compile_tree()

    wc = [py, "-m", "weightcheck", "convert", src]
    rows = [  # key, label, cmd, imports torch (None: measure it)
        (
            "ours",
            "weightcheck convert --to speculators",
            [*wc, out["ours"], "--to", "speculators", "--force"],
            None,
        ),
        ("cp", "cp -r SRC OUT", ["cp", "-r", src, out["cp"]], "no"),
        (
            "oursfsync",
            "weightcheck convert --to speculators --fsync",
            [*wc, out["oursfsync"], "--to", "speculators", "--force", "--fsync"],
            None,
        ),
        (
            "cpsync",
            "cp -r SRC OUT && sync OUT/model.safetensors",
            [
                "sh",
                "-c",
                'cp -r "$1" "$2" && sync "$2/model.safetensors"',
                "sh",
                src,
                out["cpsync"],
            ],
            "no",
        ),
        (
            "script",
            "script: load_file + rename + save_file",
            [py, "-c", SCRIPT, src, out["script"]],
            "yes",
        ),
    ]
    # the same two commands on the scaled-down drafter, in the same rounds: what each costs
    # whatever the size (start-up, planning, the re-open), so the table can give bytes per
    # second apart from it (t = fixed + bytes / rate, from the two sizes)
    sizes = [
        (
            "ours-small",
            "weightcheck convert --to speculators (small drafter)",
            [
                py,
                "-m",
                "weightcheck",
                "convert",
                small,
                out["ours-small"],
                "--to",
                "speculators",
                "--force",
            ],
            None,
        ),
        ("cp-small", "cp -r SRC OUT (small drafter)", ["cp", "-r", small, out["cp-small"]], "no"),
    ]
    slow = []
    if with_spec and not producers_python:
        print(
            "  speculators convert: skipped (no --producers-python or WEIGHTCHECK_PRODUCERS_PYTHON: "
            "the Python of a venv with speculators 0.9.0)",
            file=sys.stderr,
        )
        with_spec = False
    if with_spec:
        speculators = os.path.join(os.path.dirname(producers_python), "speculators")
        if not os.access(speculators, os.X_OK):
            sys.exit(
                f"{speculators} not found beside --producers-python: give the Python of a venv "
                "with speculators 0.9.0, or pass --no-speculators"
            )
        slow.append(
            (
                "speculators",
                "speculators convert --algorithm eagle3",
                [
                    "env",
                    "HF_HUB_OFFLINE=1",
                    "TRANSFORMERS_OFFLINE=1",
                    speculators,
                    "convert",
                    src,
                    "--algorithm",
                    "eagle3",
                    "--verifier",
                    verifier,
                    "--output-path",
                    out["speculators"],
                ],
                "yes",
            )
        )
    extra = [
        (
            "ours-fp16",
            "weightcheck convert --to speculators --dtype fp16",
            [*wc, out["ours-fp16"], "--to", "speculators", "--dtype", "fp16", "--force"],
            None,
        ),
        (
            "script-fp16",
            "script: load_file + .half() + rename + save_file",
            [py, "-c", SCRIPT, src, out["script-fp16"], "fp16"],
            "yes",
        ),
    ]

    results, digests, agree = {}, {}, {}
    cfg_diff = []
    src_digests = tensor_digests(st)
    kept_ours = out["ours"] + "-kept"

    def check_output(key):  # in the last round: record the output's tensors (compared below)
        nonlocal cfg_diff
        digests[key] = tensor_digests(model_file(out[key]))
        if key == "speculators":
            cfg_diff = config_differences(kept_ours, out[key], src)
        if key == "ours" and slow:  # kept for the comparison with speculators convert's config
            rm(kept_ours)
            shutil.copytree(out[key], kept_ours)

    for group in (rows + sizes, extra):
        print(
            f"  rounds: {', '.join(k for k, *_ in group)} x{repeat} (+1 warm-up), order "
            f"rotated each round",
            file=sys.stderr,
        )
        results.update(rounds({k: cmd for k, _, cmd, _ in group}, repeat, Outs(), check_output))
    if slow:  # one command per round: rounds() alone, with its own count
        results.update(rounds({k: cmd for k, _, cmd, _ in slow}, repeat_slow, Outs(), check_output))
    small_digests = tensor_digests(os.path.join(small, "model.safetensors"))
    for key in digests:
        if key == "cp-small":
            agree[key] = "against the source: " + same(small_digests, digests[key])
        elif key == "ours-small":  # renamed: the same (dtype, shape, bytes) under the new names
            agree[key] = "against the source, names aside: " + (
                "identical tensors (dtypes, shapes, bytes)"
                if sorted(small_digests.values()) == sorted(digests[key].values())
                else "DIFFERENT"
            )
        elif key.startswith("cp"):  # a byte copy: against the source, names unchanged
            agree[key] = "against the source: " + same(src_digests, digests[key])
        elif key not in ("ours", "ours-fp16"):
            agree[key] = same(
                digests["ours-fp16" if key.endswith("fp16") else "ours"], digests[key]
            )
    rm(kept_ours)
    for key, label, cmd, torch_ in rows + sizes + slow + extra:
        r = results[key]
        r["torch"] = torch_ if torch_ is not None else r.get("torch")
        print(
            f"  {label}: median {r['median']:.2f} s (min {r['min']:.2f}, max {r['max']:.2f}), "
            f"peak RSS {m.mb(r['rss'])}; {agree.get(key, '')}",
            file=sys.stderr,
        )

    # imports torch? one more run of each of ours under python -X importtime (then delete)
    for key, _, cmd, torch_ in rows + extra:
        if torch_ is not None:
            continue
        rm(out["imports"])
        args = [a if a != out[key] else out["imports"] for a in cmd[1:]]
        results[key]["torch"] = "yes" if "torch" in m.imported_modules(args) else "no"
        rm(out["imports"])

    # cold page cache: ours and cp
    cold_res, cold_how = {}, None
    if cold:
        drop = can_drop_caches()
        cold_how = (
            "sync; echo 3 > /proc/sys/vm/drop_caches before each run (everything cold: "
            "the source, Python, the modules)"
            if drop
            else "sync; posix_fadvise(POSIX_FADV_DONTNEED) on the source file before each run "
            "(/proc/sys/vm/drop_caches is not writable here): only the source file is "
            "cold, Python and its modules stay cached"
        )
        left = []

        def before():
            evict([st], drop)
            left.append(resident(st))

        cold_res = rounds(
            {k: cmd for k, _, cmd, _ in rows[:2]}, repeat, Outs(), warmup=False, before=before
        )
        for key, label, *_ in rows[:2]:
            print(
                f"  cold {label}: median {cold_res[key]['median']:.2f} s, "
                f"runs {', '.join(f'{x:.2f}' for x in cold_res[key]['all'])}",
                file=sys.stderr,
            )
        known = [x for x in left if x is not None]
        cold_how += (
            f"; source bytes still cached after eviction (fincore): max {max(known):,} of {size:,}"
            if known
            else ""
        )

    # ------------------------------------------------------------------------- report
    cp_t = results["cp"]["median"]
    ours_t = results["ours"]["median"]

    def row(key, label, r, base):
        return [
            label,
            f"{r['median']:.2f}",
            f"{r['min']:.2f}",
            r["n"],
            f"{gb / r['median']:.2f}",
            f"{cp_t / r['median']:.2f}x" if key != "ours-fp16" else "",
            f"{r['median'] / base:.1f}x",
            m.mb(r["rss"]),
            r["torch"],
        ]

    heads = [
        "command",
        "median s",
        "min s",
        "runs",
        "GB/s",
        "cp time / this",
        "time / ours",
        "peak RSS",
        "imports torch",
    ]
    table = [row(k, lab, results[k], ours_t) for k, lab, *_ in rows + slow]
    fp16 = results["ours-fp16"]["median"]
    table_x = [r[:5] + r[6:] for r in (row(k, lab, results[k], fp16) for k, lab, *_ in extra)]
    mach = m.machine()
    print(f"\n## convert (rename only): full-size Kimi-K2 drafter ({config})\n")
    print(
        f"Source: {st} — {gb:.2f} GB, specforge dialect -> speculators layout. Warm page cache "
        f"(the source was just written or read; it stays cached); outputs deleted and `sync` "
        f"before every run (untimed). {repeat} interleaved timed rounds after one warm-up round "
        f"({repeat_slow} run(s) of speculators convert after one warm-up). GB/s = source size / "
        f"median. Peak RSS: {m.RSS_METHOD}.\n"
    )
    print(tabulate(table, headers=heads, tablefmt="github"))
    c_all = results["cp"]["all"]
    o_all = results["ours"]["all"]
    per_round = [c / o for c, o in zip(c_all, o_all)]
    print(
        f"\nEnd to end, weightcheck throughput / cp throughput: {cp_t / ours_t:.2f} by median, "
        f"{results['cp']['min'] / results['ours']['min']:.2f} by min, "
        f"{statistics.median(per_round):.2f} as the median of the rounds' ratios (target >= 0.8); "
        f"per round: {', '.join(f'{x:.2f}' for x in per_round)}. "
        f"With --fsync / cp + sync: {results['cpsync']['median'] / results['oursfsync']['median']:.2f}."
    )
    fit = {}
    for k in ("ours", "cp"):  # t = fixed + bytes / rate, through the two sizes' medians
        t_small, t_full = results[f"{k}-small"]["median"], results[k]["median"]
        fit[k] = (t_small, (size - small_size) / 1e9 / (t_full - t_small))
    print(
        f"\nWhat the time is made of (both sizes in the same rounds; the small drafter is "
        f"{small_size / 1e6:.1f} MB): weightcheck {fit['ours'][0]:.3f} s whatever the size "
        f"(Python start-up, imports, planning, the safetensors library re-open, exit) + "
        f"{fit['ours'][1]:.2f} GB/s while copying and verifying; cp {fit['cp'][0]:.3f} s + "
        f"{fit['cp'][1]:.2f} GB/s. Per byte, weightcheck / cp: "
        f"{fit['ours'][1] / fit['cp'][1]:.2f} (target >= 0.8); end to end on this "
        f"{gb:.2f} GB file: {cp_t / ours_t:.2f}."
    )
    print("\nEvery run, in seconds (round order):\n")
    for k, lab, *_ in rows + sizes:
        print(f"- {lab}: {', '.join(f'{x:.2f}' for x in results[k]['all'])}")
    print("\nCast (extra rows, time / ours relative to weightcheck --dtype fp16):\n")
    print(tabulate(table_x, headers=heads[:5] + heads[6:], tablefmt="github"))
    print("\nOutputs against ours (crc32 of every tensor's bytes):\n")
    for k, v in agree.items():
        print(f"- {k}: {v}")
    if cfg_diff:
        print(
            "\nconfig.json fields where speculators convert and weightcheck convert differ "
            "(source value in brackets):\n"
        )
        for line in cfg_diff:
            print(f"- {line}")
    if cold_res:
        print(f"\nCold page cache ({cold_how}):\n")
        ct = [
            [
                lab,
                f"{cold_res[k]['median']:.2f}",
                f"{cold_res[k]['min']:.2f}",
                cold_res[k]["n"],
                f"{gb / cold_res[k]['median']:.2f}",
                f"{cold_res['cp']['median'] / cold_res[k]['median']:.2f}x",
                m.mb(cold_res[k]["rss"]),
            ]
            for k, lab, *_ in rows[:2]
        ]
        print(
            tabulate(
                ct,
                headers=[
                    "command",
                    "median s",
                    "min s",
                    "runs",
                    "GB/s",
                    "cp time / this",
                    "peak RSS",
                ],
                tablefmt="github",
            )
        )
        print("\nEvery cold run, in seconds (round order):\n")
        for k, lab, *_ in rows[:2]:
            print(f"- {lab}: {', '.join(f'{x:.2f}' for x in cold_res[k]['all'])}")
    spec_v = producers_version(producers_python, "speculators") if with_spec else "-"
    tf_v = producers_version(producers_python, "transformers") if with_spec else "-"
    print(
        f"\nMachine: {mach['nproc']} cores ({mach['cpu']}), {mach['ram']} RAM, {mach['os']}; "
        f"Python {mach['python']}, torch {mach['torch']}, safetensors {mach['safetensors']}; "
        f"speculators {spec_v}, transformers {tf_v} (producers venv); "
        f"{subprocess.run(['cp', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}; "
        f"filesystem of bench/out: {fs_type(work)}. Date: {datetime.date.today().isoformat()}."
    )
    try:
        os.rmdir(work)
    except OSError:
        pass


def fs_type(path: str) -> str:
    r = subprocess.run(["df", "--output=fstype", path], capture_output=True, text=True)
    return r.stdout.split()[-1] if r.returncode == 0 else "?"


if __name__ == "__main__":
    main()
