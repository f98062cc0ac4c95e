"""Generated drafters for the generative differential (docs/differential.md, "The generative
differential"): seeded COMBINATIONS of what real EAGLE-3 checkpoints vary in, each with the ground
truth of what it was trained as.

A drafter is a *spec*: a producer fixture (tests/fixtures/producers/, the bases of
tests/engine/corpus.py) and a list of deviations, each a kind of tests/engine/gen_kinds.py with
every parameter written out (JSON). :func:`build` turns a spec into a config, tensors, an optional
shard index and a folder name, plus its *truth*: the target layers the drafter was trained on, the
head it was trained with, which checkpoint tensors hold trained values (and which are buffers, the
target's copied embedding, t2d, or stale copies). Nothing is random at build time: the seed decides
the spec (:func:`sample`), the spec decides the bytes. Dropping deviations from a spec (the
minimizer, tests/engine/minimize.py) gives another valid drafter.

    python tests/engine/generate.py --seed S --count N --out DIR   # writes DIR/<id>/<folder>/
    python tests/engine/generate.py --seed S --count N --list      # id and deviations, one a line

Standard library + tests/synth.py + weightcheck.storage.writer, like corpus.py: the drafters are
not shaped by the code under test.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for _p in (HERE, TESTS, os.path.dirname(TESTS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import corpus  # noqa: E402
import gen_kinds  # noqa: E402
from gen_kinds import GT, V  # noqa: E402

L = 4  # the target's layers (tests/fixtures/producers/target-llama)
LLAMA_BASES = ("sf", "sh", "st", "sc", "mo", "ma", "mf")
# base -> how often it is drawn (the SpecForge and speculators exports are the common ones)
BASE_WEIGHTS = {"sf": 5, "sh": 2, "st": 4, "sc": 2, "mo": 3, "ma": 1, "mf": 1}
# the engine whose capture convention the producer trained in (tests/fixtures/producers/README.md
# "Captured layers": SpecForge and ModelOpt write id k for the output of layer k, as SGLang
# captures it; speculators writes k + 1, as vLLM captures it)
HOME = {"sf": "sglang", "sh": "sglang", "mo": "sglang", "ma": "sglang", "mf": "sglang"}
HOME.update(st="vllm", sc="vllm")
# every fixture was trained on the outputs of target layers 0, 1, 2 (README), modelopt-default-aux
# on 0, 1 (two aux states)
TRAINED_LAYERS = {b: [0, 1, 2] for b in LLAMA_BASES}
TRAINED_LAYERS["ma"] = [0, 1]
# how many deviations a drafter gets
K_WEIGHTS = {0: 3, 1: 14, 2: 26, 3: 27, 4: 19, 5: 8, 6: 3}


@dataclass
class G:
    """A drafter being built: config, tensors (with their role), files, folder, truth."""

    base: str
    cfg: dict
    tensors: list  # [GT]
    truth: dict
    shards: dict | None = None  # {"n": 2, "index": "..."} (gen_kinds.shards)
    folder: str = "drafter"
    notes: list = field(default_factory=list)

    def find(self, role: str) -> GT | None:
        return next((t for t in self.tensors if t.role == role), None)

    def layer_key(self) -> str:
        """Where this drafter keeps the decoder-layer fields (speculators: transformer_layer_config)."""
        return "transformer_layer_config." if "transformer_layer_config" in self.cfg else ""


def _role(name: str) -> str:
    return "midlayer." + name[len("layers.0.") :] if name.startswith("layers.0.") else name


def start(base: str) -> G:
    cfg, ts = corpus.base_of(base)
    tensors = []
    for t in ts:
        role = _role(t.name)
        trained = role not in ("embed_tokens.weight", "t2d")
        tensors.append(GT(t.name, t.dtype, t.shape, t.data, role, trained))
    head = next(t for t in tensors if t.role == "lm_head.weight")
    vd = head.shape[0]
    for t in tensors:
        if t.role == "d2t":
            t.trained = vd < V  # a map the head's rows need
    truth = {
        "home": HOME[base],
        "trained_layers": list(TRAINED_LAYERS[base]),
        "vd": vd,
        "head": "checkpoint",
        "layers": 1,
        # whether the config names aux ids anywhere (speculators' convert loses them: null)
        "ids_written": any(
            isinstance(gen_kinds.cget(cfg, p), list)
            for p in (
                "eagle_config.eagle_aux_hidden_state_layer_ids",
                "eagle_aux_hidden_state_layer_ids",
            )
        ),
    }
    return G(base, cfg, tensors, truth)


# --- specs -----------------------------------------------------------------------------------------


def sample(seed: int, n: int) -> dict:
    """The n-th drafter of a seed: a base and 0-6 deviations of distinct kinds."""
    rng = random.Random(seed * 1_000_003 + n)
    base = rng.choices(list(BASE_WEIGHTS), weights=list(BASE_WEIGHTS.values()))[0]
    k = rng.choices(list(K_WEIGHTS), weights=list(K_WEIGHTS.values()))[0]
    kinds = {n: k for n, k in gen_kinds.KINDS.items() if k.weight > 0}
    devs = []
    while len(devs) < k and kinds:
        names = sorted(kinds)
        kind = rng.choices(names, weights=[kinds[x].weight for x in names])[0]
        params = kinds.pop(kind).sample(rng, base)
        if params is not None:
            devs.append({"kind": kind, **params})
    return {"id": f"g{seed}-{n:05d}", "base": base, "devs": order(devs)}


def order(devs: list) -> list:
    """Deviations in the order they are applied: content, then names, dtypes, files, path."""
    return sorted(devs, key=lambda d: (gen_kinds.KINDS[d["kind"]].phase, d["kind"]))


def specs(seed: int, count: int, start_at: int = 0) -> list[dict]:
    return [sample(seed, n) for n in range(start_at, start_at + count)]


def describe(spec: dict) -> str:
    parts = []
    for d in spec["devs"]:
        args = ",".join(f"{k}={json.dumps(v)}" for k, v in d.items() if k != "kind")
        parts.append(f"{d['kind']}({args})")
    return f"{spec['base']}: " + ("; ".join(parts) or "as written")


# --- building ---------------------------------------------------------------------------------------


@dataclass
class Built:
    spec: dict
    config: dict | None
    files: list  # [(file name, [GT])]
    index: dict | None  # model.safetensors.index.json, or None
    folder: str
    truth: dict


def build(spec: dict) -> Built:
    g = start(spec["base"])
    for d in spec["devs"]:
        kind = gen_kinds.KINDS[d["kind"]]
        kind.apply(g, {k: v for k, v in d.items() if k != "kind"})
    files, index = gen_kinds.layout_files(g)
    truth = dict(g.truth)
    truth["roles"] = {t.name: t.role for t in g.tensors}
    truth["trained"] = sorted(t.name for t in g.tensors if t.trained)
    truth["notes"] = g.notes
    return Built(spec, g.cfg, files, index, g.folder, truth)


def write(b: Built, root: str) -> str:
    """Write the drafter under root/<id>/<folder>/; returns that folder."""
    from weightcheck.storage.writer import OutTensor, write_file

    out = os.path.join(root, b.spec["id"], b.folder)
    os.makedirs(out, exist_ok=True)
    if b.config is not None:
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(b.config, f, indent=2)
            f.write("\n")
    for fname, ts in b.files:
        write_file(
            os.path.join(out, fname),
            [OutTensor(t.name, t.dtype, t.shape, t.data) for t in ts],
            {"format": "pt"},
        )
    if b.index is not None:
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(b.index, f, indent=2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--start", type=int, default=0, help="first drafter number")
    ap.add_argument("--out", help="write every drafter under this folder")
    ap.add_argument("--list", action="store_true", help="print id and deviations")
    a = ap.parse_args(argv)
    ss = specs(a.seed, a.count, a.start)
    per_kind: dict = {}
    for s in ss:
        for d in s["devs"]:
            per_kind[d["kind"]] = per_kind.get(d["kind"], 0) + 1
        if a.list or not a.out:
            print(f"{s['id']}\t{describe(s)}")
        if a.out:
            write(build(s), a.out)
    print(f"# {len(ss)} drafters; deviations per kind: {per_kind}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
