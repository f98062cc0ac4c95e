"""Every fix a finding suggests is one the tool accepts (the served-view issue, item 7).

A finding that names a command carries it in ``fix`` (``weightcheck convert SRC OUT ...``, SRC,
OUT and TARGET standing for the user's paths). For each rule that suggests one, the case that
triggers it is built from a producer fixture, the command is run as the user would run it, and
it must succeed and leave an output on which the finding is gone.
"""

from __future__ import annotations

import shlex
import struct

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import (
    fixture_variant,
    model_prefixed,
    read_config,
    read_tensors,
    write_checkpoint,
)
from helpers.convert import fixture_target

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
        assert f"`{fix}`" in " ".join(f["message"] for f in hits) or fix in " ".join(
            f["message"] for f in hits
        )  # the message shows the same command
        out = tmp_path / f"out{i}"
        done = run_cli(*_args(words[1:], tmp_path, src, out, map_path))
        assert done.exit_code == 0, (fix, done.stdout, done.stderr)
        again = run_cli("check", out, *opts, "--json")
        assert code not in {f["code"] for f in _all(again.json["findings"])}, again.json["findings"]
