"""The one name table (mappings/names.toml, weightcheck/model/names.py): every spelling an engine's
loader renames is known to the canonicalization every command reads, and the non-parameter
buffers older exports carry are known as what they are (issue #31 Why 1 and Why 6)."""

from __future__ import annotations

import json
import re

import pytest
import synth
from conftest import PRODUCERS

from weightcheck.engines import data
from weightcheck.engines.view import view
from weightcheck.model import dialects, inventory, names
from weightcheck.model.drafter import load_drafter
from weightcheck.storage.writer import OutTensor, write_file

SPECFORGE = PRODUCERS / "specforge-sglang"
SPECULATORS = PRODUCERS / "speculators-convert"


def _every_rewrite():
    """(engine file, version, rewrite) for every [[names.rewrite]] of every loader, in every
    release it applies to."""
    for f in data.files():
        d = data.load(f)
        if not isinstance(d, data.Engine):
            continue
        for v in d.engine.versions_read:
            for r in d.names.rewrite:
                if data.applies(r, v):
                    yield f, v, r


def _spelled(canonical: str, alias) -> str | None:
    """``canonical`` in the alias's written spelling, None when the alias does not cover it."""
    if alias.match == "exact":
        return alias.written if canonical == alias.canonical else None
    if canonical.startswith(alias.canonical):
        return alias.written + canonical[len(alias.canonical) :]
    return None


def test_every_engine_rename_is_known_to_the_name_table():
    """Walk every rename an engine's loader makes (every file, every release): for every
    canonical tensor the renamed spelling covers, the loader's own match turns the one spelling
    into the other, and the dialects' canonicalization (what inspect, check, compare and convert
    read) reads both spellings as that canonical tensor."""
    known = sorted(inventory.all_canonical_names())
    walked = 0
    for f, v, r in _every_rewrite():
        a = names.alias(r.alias)
        assert a is not None, (f, r.alias)
        pattern, replace = r.regex()
        for c in known:
            w = _spelled(c, a)
            if w is None:
                continue
            found, made = (c, w) if r.towards == "written" else (w, c)
            assert re.sub(pattern, replace, found, count=1) == made, (f, v, found)
            for spelling in (w, c):
                got = dialects.canonicalize([spelling]).canonical[spelling]
                assert got == c, (
                    f"{f} {v} renames {found} -> {made}; the name table reads {spelling} as {got}"
                )
            walked += 1
    # SGLang's legacy names, both engines' midlayer/layers.0, the MLA loaders'
    assert walked >= 30, walked


def test_the_legacy_spellings_sglang_renames_are_named():
    """SGLang 0.5.23's LlamaForCausalLMEagle3.load_weights legacy_name_map (llama_eagle3.py:338-348):
    aux_norm_low/mid/high -> fc_norm.0/1/2. Each is an alias of the table, read in any layout:
    in a midlayer.* (SpecForge) and in a layers.0.* (speculators) drafter alike, never unknown
    and never 'another dialect'."""
    rewrites = {r.alias for f, v, r in _every_rewrite() if f == "sglang"}
    assert {"aux_norm_low.", "aux_norm_mid.", "aux_norm_high."} <= rewrites
    for base in ("midlayer.", "layers.0."):
        names_ = [f"{base}self_attn.q_proj.weight", "fc.weight", "aux_norm_low.weight"]
        n = dialects.canonicalize(names_ + ["aux_norm_mid.weight", "aux_norm_high.weight"])
        assert n.canonical["aux_norm_low.weight"] == "fc_norm.0.weight"
        assert n.canonical["aux_norm_high.weight"] == "fc_norm.2.weight"
        assert not n.unknown and not n.foreign, (n.unknown, n.foreign)
        assert n.legacy["aux_norm_mid.weight"] == "aux_norm_mid."


def test_an_engine_rewrite_of_a_spelling_the_table_does_not_know_fails_at_load(tmp_path):
    """The engine files cannot rename a spelling the name table does not know: the data refuse to
    load, naming the file and the key."""
    from weightcheck.errors import WeightcheckError
    from weightcheck.mappings import load_toml_file

    raw = load_toml_file(data.mappings.path("engines/sglang.toml"))
    raw["names"]["rewrite"].append({"alias": "aux_norm_top.", "towards": "canonical"})
    with pytest.raises(
        WeightcheckError, match=r"names\.rewrite\[4\]\.alias: 'aux_norm_top\.' is no alias"
    ):
        data.parse(raw, "sglang.toml")
    raw["names"]["rewrite"][-1] = {
        "alias": "aux_norm_low.",
        "towards": "canonical",
        "pattern": "aux_norm_low",
        "replace": "fc_norm.1",
    }
    with pytest.raises(WeightcheckError, match="not the alias's other spelling"):
        data.parse(raw, "sglang.toml")


# one name per [[buffer]] of the table at least (the test fails when a buffer has none)
BUFFER_NAMES = [
    "midlayer.self_attn.rotary_emb.inv_freq",
    "midlayer.self_attn.rotary_pos_emb.inv_freq",
    "midlayer.self_attn.rotary_emb.cos_cached",
    "midlayer.self_attn.rotary_emb.sin_cached",
]


def test_every_buffer_is_dropped_by_every_loader(tmp_path):
    """Each [[buffer]] of the name table, shipped with a drafter of each architecture, is dropped
    (never refused) by every loader of both engines — vLLM by name (its unknown_exceptions, the
    AutoWeightsLoader's REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER), SGLang as no parameter — and no drop
    is counted against the drafter: nothing served changes."""
    from helpers.builders import MLA_CFG

    covered = {names.buffer_of(n).pattern for n in BUFFER_NAMES}
    assert covered == {b.pattern for b in names.table().buffer}
    llama = json.loads((SPECFORGE / "config.json").read_text())
    for kind, cfg in (("llama", llama), ("mla", MLA_CFG)):
        for i, buffer_name in enumerate(BUFFER_NAMES):
            folder = tmp_path / f"{kind}-{i}"
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(cfg))
            tensors = synth.drafter_tensors(cfg) + [OutTensor(buffer_name, "F32", (8,), b"\0" * 32)]
            write_file(str(folder / "model.safetensors"), tensors, {"format": "pt"})
            d = load_drafter(str(folder))
            assert list(d.naming.buffers) == [buffer_name] and not d.naming.unknown
            for engine in data.ENGINES:
                v = view(d, engine)
                (landing,) = [x for x in v.landings if x.name == buffer_name]
                assert landing.fate in ("dropped", "warned"), (kind, engine, landing)
                assert v.summary()["dropped"] == [], (kind, engine, v.summary())
