"""Every fix a finding suggests is one the tool accepts (the served-view issue, item 7), and
every printed fix command, run as printed, succeeds or fails for another reason than the one it
fixes (issue #31, Why 4 / What 5).

A finding that names a command carries it in ``fix`` (``weightcheck convert SRC OUT ...``, SRC,
OUT and TARGET standing for the user's paths) and shows it in its message or detail. For each rule
that suggests one, the case that triggers it is built from a producer fixture, the command is run
as the user would run it, and it must succeed and leave an output on which the finding is gone.
Then every command printed over the whole corpus — the producer fixtures, the differential corpus
(tests/engine/corpus.py), synth.py's drafters and the hurried user's drafters
(tests/helpers/hurried.py) — is run as printed (tests/helpers/fixcommands.py): a command that
refuses with the very finding it was printed for loops, and is a failure. The default run takes a
fixed sample of the differential corpus (every ``STEP``-th variant); ``-m stress`` all of it.
"""

from __future__ import annotations

import pathlib
import shlex
import struct
import sys

import pytest
import stress
import synth
from conftest import CONFIGS, PRODUCERS, load_config, run_cli
from helpers import fixcommands, hurried
from helpers.builders import (
    fixture_variant,
    model_prefixed,
    read_config,
    read_tensors,
    said,
    write_checkpoint,
)
from helpers.convert import fixture_target, llama_target

from weightcheck.storage.writer import OutTensor

SPECFORGE = PRODUCERS / "specforge-sglang"


def _reversed_map(tmp_path):
    """The fixture with its draft vocabulary in reverse order (lm_head rows and d2t together):
    the same tokens, every one at another draft id."""
    ts = read_tensors(SPECFORGE)
    by = {t.name: t for t in ts}
    d2t, head = by["d2t"], by["lm_head.weight"]
    n = d2t.shape[0]
    ids = struct.unpack(f"<{n}q", d2t.data)
    target = [i + ids[i] for i in range(n)][::-1]
    new_d2t = struct.pack(f"<{n}q", *[t - i for i, t in enumerate(target)])
    row = len(head.data) // n
    rows = [head.data[i * row : (i + 1) * row] for i in range(n)][::-1]
    out = [t for t in ts if t.name not in ("d2t", "lm_head.weight")]
    out += [
        OutTensor("d2t", "I64", d2t.shape, new_d2t),
        OutTensor(head.name, head.dtype, head.shape, b"".join(rows)),
    ]
    return write_checkpoint(tmp_path / "reversed-map", read_config(SPECFORGE), out)


# name: (build(tmp_path) -> SRC, check options (TARGET stands for the target), the code)
CASES = {
    "WC104 model. prefix": (
        lambda p: fixture_variant(p, "prefixed", tensors_edit=model_prefixed),
        [],
        "WC104",
    ),
    "WC301 draft_vocab_size null beside an own head": (
        lambda p: fixture_variant(p, "null-vd", lambda c: c.update(draft_vocab_size=None)),
        [],
        "WC301",
    ),
    "WC401 LlamaForCausalLM": (
        lambda p: fixture_variant(
            p, "llama-arch", lambda c: c.update(architectures=["LlamaForCausalLM"])
        ),
        [],
        "WC401",
    ),
    "WC406 32 layers": (
        lambda p: fixture_variant(p, "l32", lambda c: c.update(num_hidden_layers=32)),
        [],
        "WC406",
    ),
    "WC706 speculators config in SGLang": (
        lambda p: PRODUCERS / "speculators-convert",
        ["--engine", "sglang"],
        "WC706",
    ),
    "WC711 embedding shipped for nothing": (
        lambda p: PRODUCERS / "specforge-hf",
        ["--engine", "sglang", "--target", "TARGET"],
        "WC711",
    ),
    "WC311 another training vocabulary": (
        lambda p: SPECFORGE,
        ["--training-vocab", "MAP"],
        "WC311",
    ),
}


def _all(findings):
    for f in findings:
        yield f
        yield from _all(f.get("consequences", []))


def _args(words, tmp_path, src, out, map_path):
    subst = {
        "SRC": str(src),
        "OUT": str(out),
        "TARGET": str(fixture_target()),
        "MAP": str(map_path),
    }
    return [subst.get(w, w) for w in words]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_suggested_command_succeeds_and_the_finding_is_gone(tmp_path, case):
    build, options, code = CASES[case]
    src = build(tmp_path)
    map_path = _reversed_map(tmp_path) if code == "WC311" else None
    opts = _args(options, tmp_path, src, None, map_path)
    r = run_cli("check", src, *opts, "--json")
    assert r.exit_code in (0, 1), r
    hits = [f for f in _all(r.json["findings"]) if f["code"] == code]
    assert hits, [f["code"] for f in r.json["findings"]]
    fixes = {f["fix"] for f in hits}
    assert None not in fixes, hits  # each finding of the code names its command
    for i, fix in enumerate(sorted(fixes)):
        words = shlex.split(fix)
        assert words[:2] == ["weightcheck", "convert"] and "SRC" in words and "OUT" in words
        assert fix in " ".join(said(f) for f in hits)  # the detail shows the same command
        out = tmp_path / f"out{i}"
        done = run_cli(*_args(words[1:], tmp_path, src, out, map_path))
        assert done.exit_code == 0, (fix, done.stdout, done.stderr)
        again = run_cli("check", out, *opts, "--json")
        assert code not in {f["code"] for f in _all(again.json["findings"])}, again.json["findings"]


# --- every printed command, over the corpus -------------------------------------------------------
sys.path.insert(0, str(pathlib.Path(__file__).parent / "engine"))
import corpus  # noqa: E402

CHUNKS = 8  # the corpus in parts, so that xdist spreads it
# the differential corpus's variants: every STEP-th in the default run (the fixtures, synth's and
# the hurried user's drafters always), all of them under -m stress
STEP = stress.count(1, 6)


def _synth(root: pathlib.Path, name: str, dialect: str | None) -> str:
    """One of synth.py's drafters: an example config (Kimi-K2, K2.5) scaled down, in a layout a
    trainer writes, or (``name`` "mla") the tiny MLA drafter."""
    d = root / f"synth-{name}-{dialect}"
    if name == "mla":
        synth.write_drafter(str(d), synth.KIMI_K25_MLA, seed=2)
    else:
        cfg = synth.scaled_config(load_config(name + ".json"))
        synth.write_drafter(str(d), cfg, dialect=dialect, seed=1)
    return str(d)


def _builders() -> list[tuple[str, object, str]]:
    """(id, build(root) -> folder, target) for every drafter of the corpus, unbuilt."""
    tgt = str(PRODUCERS / "target-llama")
    wide = str(llama_target(128, 2048))  # synth's geometry
    out = [
        (f"fixture-{p.name}", lambda root, p=p: str(p), tgt)
        for p in sorted(PRODUCERS.iterdir())
        if p.is_dir() and ((p / "config.json").exists() or list(p.glob("*.safetensors")))
    ]
    out += [
        (f"hurried-{k}", lambda root, k=k: str(hurried.BUILDERS[k](root / "hurried" / k)), tgt)
        for k in hurried.BUILDERS
    ]
    for name in sorted(p.stem for p in CONFIGS.glob("*.json")):
        for dialect in ("specforge", "modelopt"):
            out.append(
                (f"synth-{name}-{dialect}", lambda r, n=name, d=dialect: _synth(r, n, d), wide)
            )
    out.append(("synth-mla", lambda r: _synth(r, "mla", None), wide))
    for k, x in enumerate(corpus.variants()):
        if k % STEP == 0:  # every STEP-th variant by default, all of them under -m stress
            out.append((x.id, lambda root, x=x: corpus.write(x, str(root / "corpus" / x.id)), tgt))
    return out


def corpus_drafters(root: pathlib.Path, part: int | None = None) -> list[fixcommands.Drafter]:
    """The drafters every printed command is run on, written under ``root`` (only those of
    ``part`` of CHUNKS when given). Generated drafters can be added to the list."""
    bs = _builders()
    if part is not None:
        bs = [b for k, b in enumerate(bs) if k % CHUNKS == part]
    return [fixcommands.Drafter(i, build(root), target) for i, build, target in bs]


@pytest.mark.stress
@pytest.mark.parametrize("part", range(CHUNKS))
def test_every_printed_fix_command_succeeds_or_fails_for_another_reason(tmp_path, part):
    bad, n = fixcommands.violations(corpus_drafters(tmp_path, part), str(tmp_path / "out"))
    assert n > 0  # every part prints commands to run
    assert bad == [], f"{len(bad)} of {n} printed commands break the promise:\n" + "\n".join(bad)


def test_the_looping_wc301_advice_is_gone(tmp_path):
    """Why 4: a full-vocabulary head beside a 128-entry d2t. On main WC301 said "set
    draft_vocab_size to 512 (`weightcheck convert ... --target TARGET` sets it from the weights)"
    and that command refused with the same WC301; now no command is printed for it, and what is
    printed says the head and d2t disagree."""
    src = hurried.full_head(tmp_path / "full-head")
    d = fixcommands.Drafter("full-head", str(src), str(PRODUCERS / "target-llama"))
    r = run_cli("check", src, "--json")
    (f,) = [f for f in r.json["findings"] if f["code"] == "WC301"]
    assert f["fix"] is None and fixcommands.printed(f) == []
    assert "d2t 128 entries" in f["message"] and "512" not in f["message"].split(":")[-1]
    bad, _ = fixcommands.violations([d], str(tmp_path / "out"))
    assert bad == []


def test_a_looping_command_is_caught(tmp_path):
    """The harness can fail: main's WC301 command on the full-vocabulary head refuses with WC301."""
    src = hurried.full_head(tmp_path / "full-head")
    d = fixcommands.Drafter("full-head", str(src), str(PRODUCERS / "target-llama"))
    command = "weightcheck convert SRC OUT --to sglang --target TARGET"
    v = fixcommands.run_one(d, command, "WC301", (), str(tmp_path / "o"))
    assert v is not None and "loops" in v
