"""Root causes named (issue #31, Why 5 / What 6), tried as a hurried user would
(tests/helpers/hurried.py): one finding names the mistake, and what follows from it is listed under
it; every command says the same of a model that is not a drafter; the engine lines and the
findings say the same of a missing head.

On main (ac40049) an fc stored transposed was two WC402 rows guessing "1 aux layers?";
`hidden_size: 0` was thirteen WC206 rows that never named hidden_size; a GPT-2 checkpoint was
"dialect specforge" in inspect and check and got vocabulary re-index advice from compare; a missing
head printed "vllm starts; the head is the target's" beside WC302 "the engine cannot borrow the
target's full-vocabulary head".
"""

from __future__ import annotations

import json

import pytest
from conftest import PRODUCERS, run_cli
from helpers import hurried
from helpers.builders import by_code, check, consequences_of, said

TARGET = PRODUCERS / "target-llama"
ENGINES = (None, "sglang", "vllm")


def _engine(e):
    return ("--engine", e) if e else ()


def _lines(rep, engine) -> dict[str, str]:
    """engine -> what its line says (plain check), or where the one engine asked stops."""
    if engine is None:
        return {e: line["says"] for e, line in rep["engines"].items()}
    f = rep["engine"]["fails"]
    return {engine: f"fails at {f['stage']} on {f['subject']}: {f['why']}" if f else "starts"}


def _every(findings):
    for f in findings:
        yield f
        yield from _every(f["consequences"])


# --- an fc stored transposed --------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_a_transposed_fc_is_one_finding_naming_the_transposition(tmp_path, engine):
    src = hurried.transposed_fc(tmp_path / "t")
    code, rep = check(src, *_engine(engine))
    assert code == 1
    (root,) = rep["findings"]  # one finding: everything else is its consequence
    assert root["code"] == "WC213" and root["subject"] == "fc.weight"
    assert "stored transposed" in root["message"] and "[192, 64]" in root["message"]
    # the shape it contradicts is listed under it; no width finding guesses "1 aux layers?"
    assert consequences_of(root, "WC206") and not consequences_of(root, "WC402")
    if engine:  # the engine's own refusal: its weight loader asserts on the shape
        assert consequences_of(root, "WC703")
    assert not any("aux layers?" in said(f) for f in _every(rep["findings"]))
    # inspect says it in the same words (model/inventory.py transposed: the one test)
    ins = run_cli("inspect", src, "--json").json
    assert ins["tensors"] and "transposed" in run_cli("inspect", src).stdout
    # both engines stop at load on it, and the engine lines say so
    for e, line in _lines(rep, engine).items():
        assert line.startswith("fails at load on fc.weight: shape [192, 64]"), (e, line)


def test_a_square_tensor_is_never_called_transposed(tmp_path):
    """o_proj is [H, H]: its transposition cannot be seen, and nothing claims it."""
    _, rep = check(PRODUCERS / "specforge-sglang")
    assert "WC213" not in {f["code"] for f in _every(rep["findings"])}


# --- a size of 0 or below ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value,stage", [("hidden_size", 0, "load"), ("hidden_size", -64, "build")]
)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_size_of_zero_or_below_is_one_finding_naming_the_field(
    tmp_path, field, value, stage, engine
):
    src = hurried.sized(tmp_path / "s", **{field: value})
    code, rep = check(src, *_engine(engine))
    assert code == 1
    (root,) = rep["findings"]
    assert root["code"] == "WC214" and root["subject"] == field
    assert root["message"].startswith(f"{field} is {value}: a size must be positive")
    # the thirteen tensors it sizes are its consequences, never findings of their own
    shapes = consequences_of(root, "WC206")
    assert len(shapes) == 13 and all(
        field in said(root) and f["subject"] in said(root) for f in shapes
    )
    assert rep["summary"]["errors"] == 1
    for e, line in _lines(rep, engine).items():  # a negative size stops at build (torch.empty)
        assert line.startswith(f"fails at {stage}"), (e, line)


def test_intermediate_size_zero_names_intermediate_size(tmp_path):
    code, rep = check(hurried.sized(tmp_path / "i", intermediate_size=0))
    assert code == 1
    (root,) = [f for f in rep["findings"] if f["severity"] == "error"]
    assert (root["code"], root["subject"]) == ("WC214", "intermediate_size")
    assert {f["subject"] for f in consequences_of(root, "WC206")} == {
        "midlayer.mlp.down_proj.weight",
        "midlayer.mlp.gate_proj.weight",
        "midlayer.mlp.up_proj.weight",
    }


# --- a model that is not a drafter (GPT-2) -----------------------------------------------------
@pytest.mark.parametrize("layers", [2, 1])
def test_every_command_says_a_gpt2_checkpoint_is_not_a_drafter(tmp_path, layers):
    """Decided once (model/drafter.py looks_like_target), said by inspect, check, compare and
    convert alike."""
    src = hurried.gpt2(tmp_path / "gpt2", layers=layers)
    ins = run_cli("inspect", src, "--json").json
    assert ins["looks_like_target"] and ins["dialect"]["name"] is None
    assert "this is a target model, not an EAGLE-3 drafter" in run_cli("inspect", src).stdout
    code, rep = check(src)
    assert code == 1 and [f["code"] for f in rep["findings"]] == ["WC203"]
    cmp = run_cli("compare", src, PRODUCERS / "specforge-sglang", "--json")
    assert cmp.json["reasons"][0].startswith("A is a target model, not an EAGLE-3 drafter")
    assert "--vocab-from" not in json.dumps(cmp.json)
    out = tmp_path / "out"
    conv = run_cli("convert", src, out, "--to", "sglang", "--json")
    assert conv.exit_code == 1 and not out.exists()  # as check: refused with WC203
    assert {f["code"] for e in conv.json["check"]["engines"] for f in e["findings"]} == {"WC203"}


def test_a_drafter_with_a_target_class_is_still_a_drafter(tmp_path):
    """A drafter whose config names a target class (WC401) is a drafter: its tensors say so."""
    src = PRODUCERS / "specforge-sglang"
    from helpers.builders import edit

    x = edit(src, tmp_path / "x", cfg=lambda c: c.update(architectures=["LlamaForCausalLM"]))
    ins = run_cli("inspect", x, "--json").json
    assert not ins["looks_like_target"]
    assert "WC401" in {f["code"] for f in check(x)[1]["findings"]}


# --- a missing head: the engine lines and WC302 say the same ------------------------------------
def test_a_missing_head_for_a_reduced_vocabulary_is_said_alike(tmp_path):
    src = hurried.headless(tmp_path / "h", full_vocab=False)
    code, rep = check(src)
    assert code == 1
    (f,) = by_code(rep, "WC302")
    assert f["severity"] == "error" and "cannot borrow" not in said(f)
    # what each engine serves instead, as its own line says it
    assert "sglang keeps a random head" in said(f)
    assert "vllm borrows the target's and keeps its first 128 rows" in said(f)
    vllm = rep["engines"]["vllm"]["says"]
    assert "the head is the target's, cut to its first 128 rows" in vllm
    # under --engine vllm alone it is an error: draft ids scored by other tokens' rows
    code, v = check(src, "--engine", "vllm")
    (f,) = by_code(v, "WC302")
    assert code == 1 and f["severity"] == "error" and "vllm" in said(f)


def test_a_missing_head_for_the_full_vocabulary_names_the_engine_it_hurts(tmp_path):
    src = hurried.headless(tmp_path / "h", full_vocab=True)
    code, rep = check(src)
    (f,) = by_code(rep, "WC302")
    assert f["severity"] == "warning" and "sglang keeps a random head" in f["message"]
    assert "vllm takes the target's" in f["message"]
    assert rep["engines"]["vllm"]["says"].startswith("starts; the head is the target's;")
    assert "cut to" not in rep["engines"]["vllm"]["says"]
    _, v = check(src, "--engine", "vllm")
    assert not by_code(v, "WC302")


def test_a_placeholder_map_makes_vllm_s_cut_head_right(tmp_path):
    """d2t all zeros: draft id i is target token i, the very row vLLM's cut head keeps — vLLM
    serves it right, SGLang keeps a random head: a warning naming SGLang."""
    from helpers.builders import edit

    from weightcheck.storage.writer import OutTensor

    def zeros(m):
        t = m["d2t"]
        m["d2t"] = OutTensor("d2t", "I64", t.shape, b"\0" * len(t.data))

    def first_ids(m):
        t = m["t2d"]
        m["t2d"] = OutTensor("t2d", "BOOL", t.shape, b"\1" * 128 + b"\0" * 384)

    src = edit(
        hurried.headless(tmp_path / "h", full_vocab=False),
        tmp_path / "p",
        tensors=lambda m: (zeros(m), first_ids(m)),
    )
    _, rep = check(src)
    (f,) = by_code(rep, "WC302")
    assert f["severity"] == "warning" and "(sglang)" in f["message"]


# --- a config copied from elsewhere: what the engines build from it ----------------------------
def test_a_gelu_config_stops_both_engines_at_build(tmp_path):
    """hidden_act "gelu" (a config copied from a GELU model): both engines' LlamaMLP raises
    ValueError('Unsupported activation: gelu. Only silu is supported for now.') while the draft is
    built (the oracles, tests/test_engine_hurried.py). On main every command said it starts and
    check exited 0 under --engine sglang."""
    src = hurried.BUILDERS["gelu"](tmp_path / "gelu")
    code, rep = check(src, "--target", str(TARGET))
    assert code == 1
    for e in ("sglang", "vllm"):
        assert rep["engines"][e]["says"].startswith("fails at build on `hidden_act != 'silu'`")
        code, one = check(src, "--engine", e)
        (f,) = one["findings"]
        assert code == 1 and f["code"] == "WC705" and "Only silu is supported" in f["detail"]
        assert one["engine"]["fails"]["stage"] == "build"
    out = tmp_path / "out"
    conv = run_cli("convert", src, out, "--to", "sglang", "--json")  # the gate refuses it
    assert conv.exit_code == 1 and not out.exists()


def test_a_draft_context_shorter_than_the_target_s_stops_sglang(tmp_path):
    """max_position_embeddings 128 beside a 256-position target: SGLang gives the draft's
    ModelConfig the target's context length and refuses a longer one than the draft derives
    (model_config.py _derive_context_length) unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1;
    vLLM starts. Needs the target: without --target nothing is said."""
    src = hurried.BUILDERS["short-context"](tmp_path / "short")
    code, rep = check(src, "--engine", "sglang", "--target", str(TARGET))
    (f,) = rep["findings"]
    assert code == 1 and (f["code"], f["subject"]) == ("WC705", "max_position_embeddings")
    assert "context length (128) is shorter than the target's (256)" in f["detail"]
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in f["detail"]
    assert rep["engine"]["fails"]["stage"] == "build"
    code, v = check(src, "--engine", "vllm", "--target", str(TARGET))
    assert v["engine"]["fails"] is None and "WC705" not in {x["code"] for x in v["findings"]}
    code, alone = check(src, "--engine", "sglang")  # the target's length is unknown
    assert code == 0 and alone["engine"]["fails"] is None
    # the same draft with the target's own length starts: the comparison, not the number
    same = hurried.config_edit(tmp_path / "same", max_position_embeddings=256)
    assert check(same, "--engine", "sglang", "--target", str(TARGET))[0] == 0


@pytest.mark.parametrize(
    "rope,starts",
    # llama3 and yarn (transformers fills original_max_position_embeddings in) count x1; linear
    # scaling multiplies the draft's length: 128 x 2 covers the target's 256
    [("llama3", False), ("yarn", False), ("linear", True)],
)
def test_rope_scaling_counts_in_the_draft_context_length_as_sglang_counts_it(
    tmp_path, rope, starts
):
    """get_context_length (sglang utils/hf_transformers/common.py) multiplies by rope_scaling's
    factor unless the scaling is llama3 or names original_max_position_embeddings."""
    src = hurried.rope_scaled(tmp_path / "r", rope)
    _, rep = check(src, "--engine", "sglang", "--target", str(TARGET))
    assert (rep["engine"]["fails"] is None) is starts, rep["engine"]["fails"]


def test_a_t2d_of_target_ids_is_info_only(tmp_path):
    """t2d saved as the draft tokens' target ids (int64 [128]) instead of the [512] bool mask:
    both engines skip t2d at load whatever it holds (the oracles: fate 'dropped', every parameter
    loaded). On main it was also a WC206 error, "config implies [512]; correct the config": exit 1
    under --engine, and advice to change a vocab_size that is right."""
    src = hurried.BUILDERS["t2d-ids"](tmp_path / "t")
    for engine in ENGINES:
        code, rep = check(src, *_engine(engine), "--target", str(TARGET))
        t2d = [f for f in _every(rep["findings"]) if f["subject"] == "t2d"]
        assert {(f["code"], f["severity"]) for f in t2d} == {("WC308", "info")}, t2d
        assert not any("correct the config" in f["message"] for f in t2d)
    assert check(src, "--engine", "sglang", "--target", str(TARGET))[0] == 0


# --- q/k/v and gate/up stored fused (mappings/architectures/llama_eagle3.toml [[fused]]) --------
@pytest.mark.parametrize("kind", ["fused", "fused-qkv", "fused-gate-up"])
def test_fused_projections_are_their_parts_to_every_command(tmp_path, kind):
    """Both engines load qkv_proj / gate_up_proj whole (the oracles: docs/differential.md R22):
    check says what it says of the fixture stored apart, inspect reads the parts, compare pairs them with the parts stored apart
    (compatible, a layout note), convert writes the parts (the fixture's bytes exactly)."""
    src = hurried.BUILDERS[kind](tmp_path / kind)
    for engine in ENGINES:
        code, rep = check(src, *_engine(engine), "--target", str(TARGET))
        code0, rep0 = check(hurried.SPECFORGE, *_engine(engine), "--target", str(TARGET))
        msgs = [f["message"] for f in rep["findings"]]
        assert (code, msgs) == (code0, [f["message"] for f in rep0["findings"]]), msgs
    r = run_cli("inspect", str(src), "--json")
    tensors = json.loads(r.stdout)["tensors"]
    assert {t["status"] for t in tensors if "fused" in t["status"]} and all(
        t["status"] == "ok" or t["status"].startswith("fused ") for t in tensors
    )
    assert not [m for m in json.loads(r.stdout)["missing"] if m["presence"] == "required"]
    r = run_cli("compare", str(src), str(hurried.SPECFORGE), "--json")
    c = json.loads(r.stdout)
    assert c["verdict"] == "compatible" and r.exit_code == 0
    assert any(n.startswith("layout: ") for n in c["strict_failures"]), c["strict_failures"]
    assert c["bytes"]["different"] == c["bytes"]["not_compared"] == 0, c["bytes"]
    out = tmp_path / "out"
    r = run_cli("convert", str(src), str(out), "--to", "sglang")
    assert r.exit_code == 0, r.output
    c = json.loads(run_cli("compare", str(out), str(hurried.SPECFORGE), "--json").stdout)
    assert c["verdict"] == "identical", c


def test_a_fused_tensor_of_another_shape_is_one_shape_error(tmp_path):
    """Its parts are not reported missing; WC206 names the rows the config implies, and the
    replay follows the engines (longer: loaded, its tail unread; shorter: the load stops)."""
    for kind, starts in (("fused-qkv-long", True), ("fused-qkv-short", False)):
        src = hurried.BUILDERS[kind](tmp_path / kind)
        for engine in ("sglang", "vllm"):
            _, rep = check(src, "--engine", engine, "--target", str(TARGET))
            top = {f["code"] for f in rep["findings"]}
            assert "WC206" in top and not top & {"WC101", "WC204", "WC205"}, top
            (f,) = by_code(rep, "WC206")
            assert "config implies [128, 128]" in f["message"]
            assert "rows q 64 + k 32 + v 32" in f["detail"]
            assert rep["engine"]["starts"] is starts
        r = run_cli("convert", str(src), str(tmp_path / f"{kind}-out"), "--to", "sglang")
        assert r.exit_code == 1 and not (tmp_path / f"{kind}-out").exists()
