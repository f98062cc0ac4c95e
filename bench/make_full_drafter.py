"""Write a full-size (unscaled) Kimi-K2 EAGLE-3 drafter for benchmarks: ~2.4 GB bf16.

The config is the real SpecForge one (examples/configs/specforge-kimi-k2-eagle3.json, or the
K2.5 one with --config k25); the weights are weightcheck.synth's deterministic pseudo-random bf16,
written at disk speed without torch. If OUT already holds the same file (identical header, which
records the seed, and the full size) nothing is rewritten, so repeated bench runs are cheap.

    python bench/make_full_drafter.py [OUT] [--config k2|k25] [--dialect specforge|speculators]
                                      [--embed] [--seed N]

OUT defaults to bench/out/<config>-<dialect>[-embed][-seedN] (bench/out/ is gitignored).
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # synth: the test-data generator

import click  # noqa: E402
import synth  # noqa: E402

from weightcheck.storage.writer import header_bytes  # noqa: E402

CONFIGS = {"k2": "specforge-kimi-k2-eagle3.json", "k25": "specforge-kimi-k25-eagle3.json"}


def load_config(name: str) -> dict:
    with open(os.path.join(os.path.dirname(HERE), "examples", "configs", CONFIGS[name])) as f:
        return json.load(f)


def default_out(config: str, dialect: str, embed: bool, seed: int) -> str:
    name = f"{config}-{dialect}" + ("-embed" if embed else "") + (f"-seed{seed}" if seed else "")
    return os.path.join(HERE, "out", name)


def is_complete(path: str, header: bytes, size: int) -> bool:
    """True when ``path`` starts with exactly ``header`` and is exactly ``size`` bytes long."""
    try:
        if os.path.getsize(path) != size:
            return False
        with open(path, "rb") as f:
            return f.read(len(header)) == header
    except OSError:
        return False


def make_small(config: str = "k2") -> str:
    """A few-MB drafter with the same config layout (hidden 256, vocab 16384), for the
    "memory flat in file size" rows of the benches."""
    cfg = synth.scaled_config(
        load_config(config),
        hidden=256,
        intermediate=640,
        heads=4,
        head_dim=64,
        vocab=16384,
        draft_vocab=2000,
    )
    out = os.path.join(HERE, "out", f"{config}-small")
    synth.write_drafter(out, cfg, seed=1)
    return out


def full_and_small(config: str = "k2") -> tuple[str, int, str, int]:
    """The full-size drafter's model.safetensors and its size, the scaled-down drafter's folder
    and its file's size: the pair the inspect and check benches compare peak memory on, and
    bench_convert splits time into fixed cost and rate with."""
    st = os.path.join(make(config=config), "model.safetensors")
    small = make_small(config)
    return st, os.path.getsize(st), small, os.path.getsize(os.path.join(small, "model.safetensors"))


def make(
    out: str | None = None,
    config: str = "k2",
    dialect: str = "specforge",
    embed: bool = False,
    seed: int = 0,
    quiet: bool = False,
) -> str:
    """Write (or reuse) the drafter; return its folder."""
    out = os.path.abspath(out or default_out(config, dialect, embed, seed))
    cfg = load_config(config)
    tensors = synth.drafter_tensors(cfg, dialect, seed, include_embed=embed)
    metadata = {"format": "pt", "bench": f"make_full_drafter seed={seed}"}
    header = header_bytes(tensors, metadata)
    size = len(header) + sum(t.nbytes for t in tensors)
    path = os.path.join(out, "model.safetensors")
    say = (lambda *a: None) if quiet else print
    if is_complete(path, header, size):
        say(f"{path}: reused ({size / 1e9:.2f} GB, {len(tensors)} tensors)")
        return out
    # write beside OUT and move into place, so an interrupted write never looks complete
    tmp = out + ".partial"
    t0 = time.perf_counter()
    synth.write_drafter(tmp, cfg, dialect, seed, include_embed=embed, metadata=metadata)
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)
    dt = time.perf_counter() - t0
    say(
        f"{path}: wrote {size / 1e9:.2f} GB ({len(tensors)} tensors) in {dt:.1f} s "
        f"({size / 1e6 / dt:,.0f} MB/s)"
    )
    return out


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("out", required=False)
@click.option("--config", type=click.Choice(sorted(CONFIGS)), default="k2", show_default=True)
@click.option(
    "--dialect",
    type=click.Choice(["specforge", "speculators"]),
    default="specforge",
    show_default=True,
    help="Tensor names (the config stays the SpecForge one).",
)
@click.option("--embed", is_flag=True, help="Also write embed_tokens [163840, 7168] (+2.35 GB).")
@click.option("--seed", type=int, default=0, show_default=True)
def main(out, config, dialect, embed, seed):
    make(out, config, dialect, embed, seed)


if __name__ == "__main__":
    main()
