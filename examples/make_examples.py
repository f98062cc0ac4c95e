"""Write the bundled example: two tiny drafters shaped like AQ-MedAI's Kimi-K2 drafter and a
Kimi-K2.5 drafter.

Their configs are real SpecForge configs (examples/configs/) with the sizes scaled down: hidden 7168 -> 128,
intermediate 18432 -> 320, 64 heads of 128 -> 4 heads of 32, vocab 163840 -> 2048, draft vocab
32000 -> 400. Everything else (aux layer ids [2, 30, 58], rope, model_type, dtype spelling) is kept.
The weights are deterministic pseudo-random bf16 (tests/synth.py, the test-data generator); nothing is downloaded.

    python examples/make_examples.py [OUT_DIR]     # default: examples/out
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))  # synth: the test-data generator

import synth  # noqa: E402


def main(out=None):
    out = out or os.path.join(HERE, "out")
    for name, cfg_file, seed in (
        ("kimi-k2-drafter", "specforge-kimi-k2-eagle3.json", 1),
        ("kimi-k25-drafter", "specforge-kimi-k25-eagle3.json", 2),
    ):
        with open(os.path.join(HERE, "configs", cfg_file)) as f:
            cfg = synth.scaled_config(json.load(f))
        synth.write_drafter(os.path.join(out, name), cfg, seed=seed)
        print(os.path.join(out, name))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
