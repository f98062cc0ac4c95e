"""The bundled example (examples/make_examples.py): the founding case scaled down — the Kimi-K2
drafter, a Kimi-K2.5 drafter in each published form (Llama, MLA) and a Kimi-K2.5-shaped target."""

import hashlib
import importlib.util

from conftest import ROOT, run_cli


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_the_example_holds_the_founding_case(examples_out):
    names = sorted(p.name for p in examples_out.iterdir())
    assert names == [
        "eval",  # hidden states for `weightcheck eval` (written when torch is installed)
        "eval-mla",  # the same, built for the MLA drafter
        "kimi-k2-drafter",
        "kimi-k25-drafter",
        "kimi-k25-mla-drafter",
        "kimi-k25-target",
    ]
    arch = {
        n: run_cli("inspect", examples_out / n, "--json").json["architecture"]["name"]
        for n in ("kimi-k2-drafter", "kimi-k25-drafter", "kimi-k25-mla-drafter")
    }
    assert arch == {
        "kimi-k2-drafter": "llama_eagle3",
        "kimi-k25-drafter": "llama_eagle3",
        "kimi-k25-mla-drafter": "deepseek_mla_eagle3",
    }


def test_the_target_is_read_from_text_config_and_its_language_model_tensors(examples_out):
    r = run_cli(
        "check",
        examples_out / "kimi-k2-drafter",
        "--target",
        examples_out / "kimi-k25-target",
        "--json",
    )
    t = r.json["target"]
    assert (t["model_type"], t["text_model_type"]) == ("kimi_k25", "kimi_k2")
    assert (t["hidden_size"], t["vocab_size"], t["num_hidden_layers"]) == (128, 2048, 61)
    assert t["embed"]["name"] == "language_model.model.embed_tokens.weight"
    assert t["lm_head"]["name"] == "language_model.lm_head.weight"
    assert r.exit_code == 0, r.json["findings"]


def test_the_mla_drafter_converts_with_its_aux_ids_translated(examples_out, tmp_path):
    out = tmp_path / "mla-vllm"
    r = run_cli(
        "convert", examples_out / "kimi-k25-mla-drafter", out, "--to", "vllm",
        "--target", examples_out / "kimi-k25-target", "--json",
    )  # fmt: skip
    assert r.exit_code == 0, r
    import json

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]


def test_every_run_writes_the_same_bytes(tmp_path, examples_out):
    """A second run (this test's) writes what the session's run (the examples_out fixture) wrote."""
    spec = importlib.util.spec_from_file_location("mk", ROOT / "examples" / "make_examples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(str(tmp_path / "again"))
    assert _digest(tmp_path / "again") == _digest(examples_out)
