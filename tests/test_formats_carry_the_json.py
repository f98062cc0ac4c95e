"""Issue #21, "one fact, one answer": every output format carries what ``--json`` carries
(compare's vocabulary verdict, check's conclusion, engine verdicts and fixes); ``convert --force``
replaces only files carrying weightcheck's mark; the model card counts each origin once and names
no local path; a tensor taken from a target is stored in the drafter's dtype; an own lm_head is
written with ``tie_word_embeddings: false``; inspect shows the config fields of the drafter's
architecture (the MLA ranks and head dims for an MLA drafter)."""

from __future__ import annotations

import json
import os
import re

import pytest
import synth
from conftest import PRODUCERS, run_cli
from helpers.builders import edit, mla_drafter, read_config
from helpers.convert import TARGET, convert, refused, tensor_bytes
from helpers.text import unwrapped
from test_vocab import A_MAP, B_MAP, FROM_TARGET, MOVED, SAME, drafter

from weightcheck.storage.writer import OutTensor, write_file

FORMATS = ("text", "markdown", "concise", "github")
SPECFORGE = PRODUCERS / "specforge-sglang"  # BF16, hidden 64, vocab 512, its own lm_head


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two drafters whose maps overlap partly (test_vocab.py): 96 of A's rows misread under B's."""
    base = tmp_path_factory.mktemp("pair")
    return drafter(base / "a", A_MAP, seed=1), drafter(base / "b", B_MAP, seed=2)


def _out(*args) -> str:
    r = run_cli(*args)
    assert r.exit_code in (0, 1), r
    return r.stdout


# =============================================================================================
# 1. every format carries every verdict --json carries
def test_compare_every_format_carries_the_vocab_verdict_and_its_advice(pair):
    a, b = pair
    v = run_cli("compare", a, b, "--json").json["vocab"]
    assert "reads 96 of A's lm_head rows as other tokens" in v["meaning"]
    for fmt in FORMATS:
        out = unwrapped(_out("compare", a, b, "--format", fmt))
        assert v["meaning"] in out, fmt
        assert "vocab: 128 draft tokens each: 112 shared, 32 at the same index" in out, fmt
    concise = _out("compare", a, b, "--format", "concise").splitlines()
    assert concise[0] == (
        f"{a} vs {b}: warning: vocab: 128 draft tokens each: 112 shared, 32 at the same index; "
        + v["meaning"]
    )
    assert concise[-1] == f"{a} vs {b}: verdict: compatible"
    github = _out("compare", a, b, "--format", "github").splitlines()
    assert github[0].startswith("::warning title=weightcheck compare%3A compatible::vocab: ")
    assert github[0].endswith(v["meaning"])


def test_compare_same_map_is_a_notice_not_a_warning(pair):
    a, _ = pair
    v = run_cli("compare", a, a, "--json").json["vocab"]
    github = _out("compare", a, a, "--format", "github").splitlines()
    assert github[0].startswith("::notice ") and github[0].endswith(v["meaning"])
    assert f"{a} vs {a}: info: vocab: " in _out("compare", a, a, "--format", "concise")


def test_check_every_format_carries_the_conclusion_and_each_engines_verdict():
    j = run_cli("check", SPECFORGE, "--json").json
    assert j["engines"]  # plain check: each engine's verdict
    for fmt in FORMATS:
        out = unwrapped(_out("check", SPECFORGE, "--format", fmt))
        assert j["conclusion"] in out, fmt
        for e, v in j["engines"].items():
            assert f"{e} {v['version']}" in out and v["says"] in out, (fmt, e)
    github = _out("check", SPECFORGE, "--format", "github").splitlines()
    says = [line for line in github if line.startswith("::notice ")]
    assert len(says) == len(j["engines"])
    assert all("title=weightcheck check%3A " in line for line in says)


def test_check_every_format_carries_a_fix_its_message_does_not_say(tmp_path):
    # an MLA drafter whose config's kv_lora_rank contradicts its weights: WC408's fix (set the
    # value the weights hold) is not in its message
    src = mla_drafter(tmp_path / "mla")
    bad = edit(src, tmp_path / "bad", cfg=lambda c: c.update(kv_lora_rank=48))
    j = run_cli("check", bad, "--json").json
    (f,) = [f for f in j["findings"] if f["code"] == "WC408"]
    assert f["fix"] == 'set "kv_lora_rank": 64 in config.json' and f["fix"] not in f["message"]
    for fmt in FORMATS:
        out = _out("check", bad, "--format", fmt)
        assert f["fix"].replace('"', "") in out.replace('"', ""), fmt


# =============================================================================================
# 2. --force replaces only what carries weightcheck's mark
@pytest.fixture
def written(tmp_path):
    """A sharded weightcheck output: shards, index, config.json, README.md."""
    out = tmp_path / "out"
    convert(SPECFORGE, out, "--to", "sglang", "--max-shard-size", "50KB")
    assert (out / "model.safetensors.index.json").exists()
    return out


def test_every_file_convert_writes_carries_the_mark(written):
    index = json.loads((written / "model.safetensors.index.json").read_text())
    assert index["metadata"]["weightcheck_converted_to"] == "sglang"
    assert read_config(written)["weightcheck_converted_to"] == "sglang"
    card = (written / "README.md").read_text()
    assert card.splitlines()[0].startswith("<!-- written by weightcheck convert")
    # and so a weightcheck output is replaced
    convert(SPECFORGE, written, "--to", "vllm", "--force", "--target", TARGET)
    assert read_config(written)["weightcheck_converted_to"] == "vllm"


@pytest.mark.parametrize(
    "name, text",
    [
        ("README.md", "# My drafter\n\nNotes I wrote by hand.\n"),
        ("model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": {}})),
        ("config.json", json.dumps({"architectures": ["LlamaForCausalLMEagle3"]})),
    ],
)
def test_force_refuses_a_file_of_the_users_with_a_name_convert_writes(written, name, text):
    (written / name).write_text(text)
    before = {p.name: p.read_bytes() for p in written.iterdir()}
    msg = refused(SPECFORGE, written, "--to", "sglang", "--force", "--max-shard-size", "50KB")
    assert f"holds {name}, which weightcheck did not write" in msg and "--force" in msg
    assert {p.name: p.read_bytes() for p in written.iterdir()} == before  # nothing touched


# =============================================================================================
# 3. the model card: one count per origin, no local path
def _card_lines(out) -> list[str]:
    card = (out / "README.md").read_text()
    assert str(out.parent) not in card and str(PRODUCERS) not in card and os.getcwd() not in card
    assert not re.search(r"(^|[\s`(])/(tmp|work|home|root)/", card), card
    return card.splitlines()


def test_card_counts_rows_from_the_target_once_and_names_no_path(pair, tmp_path):
    a, b = pair
    out = tmp_path / "out"
    r = convert(a, out, "--to", "sglang", "--vocab-from", b, "--lm-head-from", TARGET)
    assert r["reindex"]["from_target"] == FROM_TARGET
    lines = _card_lines(out)
    assert not any("taken from a target: 0" in x for x in lines)
    (tgt,) = [x for x in lines if x.startswith("- from the target")]
    assert tgt == f"- from the target `target-llama`: {FROM_TARGET} lm_head row(s) SRC's head lacks"
    (mine,) = [x for x in lines if x.startswith("- from SRC")]
    assert mine.startswith(f"- from SRC `{a.name}`: ")
    assert f"{SAME + MOVED} lm_head row(s) ({SAME} kept, {MOVED} moved" in mine
    (vmap,) = [x for x in lines if x.startswith("- from the --vocab-from map")]
    assert f"`{b.name}`" in vmap and "d2t" in vmap
    # the note the report prints names the target as the card does
    assert any(f"{FROM_TARGET} taken from target-llama (lm_head.weight)" in n for n in r["notes"])


def test_card_names_a_target_taken_embedding_by_its_folder(tmp_path):
    out = tmp_path / "out"
    convert(SPECFORGE, out, "--to", "sglang", "--embeddings", f"from={TARGET}")
    lines = _card_lines(out)
    assert "- from the target `target-llama`: embed_tokens.weight" in lines
    assert "- embed_tokens.weight taken from target-llama (model.embed_tokens.weight)" in lines


# =============================================================================================
# 4. what is taken from a target is stored in the drafter's dtype
def _f16_target(folder):
    """target-llama's config (hidden 64, vocab 512) with F16 embedding and lm_head."""
    folder.mkdir()
    cfg = dict(read_config(TARGET), dtype="float16")
    (folder / "config.json").write_text(json.dumps(cfg))
    n = 512 * 64 * 2
    write_file(
        str(folder / "model.safetensors"),
        [
            OutTensor(
                "model.embed_tokens.weight", "F16", (512, 64), synth.random_data("F16", n, 5)
            ),
            OutTensor("lm_head.weight", "F16", (512, 64), synth.random_data("F16", n, 6)),
        ],
        {"format": "pt"},
    )
    return folder


def test_embeddings_from_target_cast_to_the_drafters_dtype_as_lm_head_from(tmp_path):
    tgt = _f16_target(tmp_path / "f16")
    out = tmp_path / "emb"
    r = convert(SPECFORGE, out, "--to", "sglang", "--embeddings", f"from={tgt}")
    (emb,) = [t for t in r["tensors"] if t["output"] == "embed_tokens.weight"]
    assert (emb["source_dtype"], emb["dtype"]) == ("F16", "BF16")
    assert {d for d, _, _ in tensor_bytes(out).values()} == {"bfloat16", "int64", "bool"}
    gate = [f["code"] for e in r["check"]["engines"] for f in e["findings"]]
    assert "WC208" not in gate  # no mix of dtypes
    # --lm-head-from decides it the same way (the one function: plan.taken_dtype)
    src = tmp_path / "headless"
    synth.write_drafter(str(src), read_config(SPECFORGE), skip=("lm_head.weight",), seed=3)
    r = convert(src, tmp_path / "head", "--to", "sglang", "--lm-head-from", tgt)
    (head,) = [t for t in r["tensors"] if t["output"] == "lm_head.weight"]
    assert (head["source_dtype"], head["dtype"]) == ("F16", "BF16")
    # --dtype still decides when given
    r = convert(SPECFORGE, tmp_path / "fp16", "--to", "sglang", "--embeddings", f"from={tgt}",
                "--dtype", "fp16")  # fmt: skip
    assert {t["dtype"] for t in r["tensors"] if t["output"].endswith("weight")} == {"F16"}


# =============================================================================================
# 5. tie_word_embeddings: false whenever an own lm_head is written
@pytest.mark.parametrize("to", ["sglang", "vllm", "speculators"])
def test_an_own_lm_head_is_written_untied_when_the_source_does_not_say(tmp_path, to):
    src = edit(SPECFORGE, tmp_path / "src", cfg=lambda c: c.pop("tie_word_embeddings"))
    out = tmp_path / "out"
    r = convert(src, out, "--to", to, "--target", TARGET)
    cfg = read_config(out)
    layer = cfg["transformer_layer_config"] if to == "speculators" else cfg
    assert layer["tie_word_embeddings"] is False
    (said,) = [c for c in r["config_changes"] if c.startswith("tie_word_embeddings: ")]
    assert said.startswith("tie_word_embeddings: null -> false (an own lm_head.weight is written")
    assert all(not e["findings"] or all(f["severity"] != "error" for f in e["findings"])
               for e in r["check"]["engines"])  # fmt: skip
    engine = "sglang" if to == "sglang" else "vllm"
    rep = run_cli("check", out, "--engine", engine, "--target", TARGET, "--json")
    assert rep.exit_code == 0 and rep.json["ok"], rep


# =============================================================================================
# 6. inspect shows the config fields of the drafter's architecture
MLA_DIMS = {
    "q_lora_rank": 96,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
}


def _rows(out: str, fmt: str) -> dict:
    """config table rows: field -> value, as text or Markdown draws them."""
    rows = {}
    for line in out.splitlines():
        cells = (
            [c.strip() for c in line.strip("|").split("|")]
            if fmt == "markdown"
            else line.split(None, 2)
        )
        if len(cells) >= 2:
            rows.setdefault(cells[0], cells[1])
    return rows


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_inspect_shows_an_mla_drafters_dimensions(tmp_path, fmt):
    src = mla_drafter(tmp_path / "mla")
    j = run_cli("inspect", src, "--json").json
    assert [k for k in MLA_DIMS if k in j["config"]["key_fields"]] == list(MLA_DIMS)
    rows = _rows(_out("inspect", src, "--format", fmt), fmt)
    for k, v in MLA_DIMS.items():
        assert rows.get(k) == str(v) == str(j["config"]["normalized"][k]), k
    assert "head_dim" not in rows and "num_key_value_heads" not in rows  # Llama-only fields
    for fixture in ("mla-modelopt", "mla-torchspec"):
        rows = _rows(_out("inspect", PRODUCERS / fixture, "--format", fmt), fmt)
        assert set(MLA_DIMS) <= set(rows) and "head_dim" not in rows, fixture


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_inspect_still_shows_a_llama_drafters_heads(fmt):
    rows = _rows(_out("inspect", SPECFORGE, "--format", fmt), fmt)
    assert rows["num_key_value_heads"] == "1" and rows["head_dim"] == "32"
    assert not set(MLA_DIMS) & set(rows)
