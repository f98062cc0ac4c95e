"""Issue #23: the trainers decide too. SpecForge 0.2.0 and speculators 0.9.0's training
initialization replayed from mappings/trainers/*.toml (weightcheck/trainers/): each numbered "Why"
item 1, 2, 3 and 6 has a test here that fails on the main before it (f0d4e19).

The replay's agreement with the trainers' own code is the trainer oracles' (engine group)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import PRODUCERS, run_cli
from helpers.builders import by_code, check, edit, read_config, said, tensor_map, write_sharded

from weightcheck import trainers
from weightcheck.storage.writer import OutTensor

SF_CFG = PRODUCERS / "specforge-sglang" / "config.json"
RUN = PRODUCERS / "specforge-run"


# --- the data and the API the oracles call -------------------------------------------------------
def test_every_fact_of_the_trainer_data_is_cited():
    for name in trainers.TRAINERS:
        tr = trainers.load(name)
        assert tr.version in tr.versions_read
        assert all(p.cite for p in tr.params), name
        for key in ("cite_missing", "cite_shape", "cite_names"):
            assert f"{name}==" in tr.facts[key] or "==" in tr.facts[key], (name, key)


def test_detect_the_trainer_from_the_training_config():
    assert trainers.detect(read_config(PRODUCERS / "speculators-train")) == "speculators"
    assert trainers.detect(json.loads(SF_CFG.read_text())) == "specforge"
    assert trainers.detect({"architectures": ["Eagle3DeepseekV2ForCausalLM"]}) is None


def test_replay_training_api_on_an_export():
    r = trainers.replay_training(PRODUCERS / "specforge-sglang", SF_CFG)
    assert (r.trainer, r.version, r.raises) == ("specforge", "0.2.0", None)
    assert r.params["midlayer.self_attn.q_proj.weight"] == "src"
    assert r.params["embed_tokens.weight"] == "target"
    assert r.params["d2t"] == r.params["t2d"] == "data"
    assert set(r.params.values()) <= set(trainers.ORIGINS)
    assert r.fraction == 1.0


def test_speculators_takes_what_the_checkpoint_lacks_from_the_verifier():
    src = PRODUCERS / "speculators-train"
    r = trainers.replay_training(src, src / "config.json")
    assert r.trainer == "speculators" and r.raises is None
    assert r.params["verifier_lm_head.weight"] == "target"
    assert r.params["layers.0.self_attn.q_proj.weight"] == "src"
    assert "midlayer.self_attn.q_proj.weight" not in r.params


# --- Why 1: a speculators-layout drafter under SpecForge raises ------------------------------------
@pytest.mark.parametrize("fixture", ["speculators-convert", "speculators-train"])
def test_why1_speculators_layout_under_specforge_is_an_error(fixture):
    """layers.0.* (with input_norm: speculators-train; without: speculators-convert) passed the
    gate on main (exit 0 for the convert output); SpecForge loads by HF names and raises."""
    code, rep = check(PRODUCERS / fixture, "--training-config", SF_CFG)
    assert code == 1
    (f,) = by_code(rep, "WC908")
    assert f["severity"] == "error"
    assert "SpecForge 0.2.0 raises" in said(f) and "never renames" in said(f)
    assert "midlayer.*" in said(f)
    if fixture == "speculators-convert":  # renamed, it loads fully
        assert "convert SRC OUT --to sglang --target TARGET` first" in said(f)
    else:  # input_norm (norm_before_fc) has no place in SpecForge's model under any name
        assert "no place for input_norm.weight" in said(f)
    t = rep["training"]["trainer"]
    assert t["name"] == "specforge" and t["raises"] and t["fraction"] == 0.0


def test_why1_convert_to_sglang_first_loads_fully(tmp_path):
    out = tmp_path / "sg"
    r = run_cli("convert", PRODUCERS / "speculators-convert", out, "--to", "sglang")
    assert r.exit_code == 0, r.stdout + r.stderr
    code, rep = check(out, "--training-config", SF_CFG)
    assert not by_code(rep, "WC908")
    assert rep["training"]["trainer"]["raises"] is None


def test_a_draft_model_prefixed_training_state_raises(tmp_path):
    """SpecForge 0.2.0 saves draft_state_dict unprefixed; a draft_model.* state is unexpected."""
    torch = pytest.importorskip("torch")
    ck = tmp_path / "run-step1"
    ck.mkdir()
    state = torch.load(RUN / "tiny-step2" / "training_state.pt", weights_only=True)
    state["draft_state_dict"] = {
        f"draft_model.{k}": v for k, v in state["draft_state_dict"].items()
    }
    torch.save(state, ck / "training_state.pt")
    code, rep = check(ck, "--training-config", SF_CFG)
    (f,) = by_code(rep, "WC908")
    assert "not its own" in said(f) and "draft_model.*" in said(f)


def test_a_training_state_of_another_strategy_raises(tmp_path):
    torch = pytest.importorskip("torch")
    ck = tmp_path / "run-step1"
    ck.mkdir()
    state = torch.load(RUN / "tiny-step2" / "training_state.pt", weights_only=True)
    state["strategy"] = "dflash"
    torch.save(state, ck / "training_state.pt")
    code, rep = check(ck, "--training-config", SF_CFG)
    (f,) = by_code(rep, "WC908")
    assert "'dflash'" in said(f) and "'eagle3'" in said(f)


def test_a_run_checkpoint_is_read_without_torch():
    """Header-level: training_state.pt's tensors are read from its zip without torch, their
    bytes as ranges of the file (sources/torchzip.py)."""
    import subprocess
    import sys

    code = (
        "import sys; from weightcheck import api; "
        f"r = api.check({str(RUN)!r}, training_config={str(SF_CFG)!r}); "
        "assert r.ok, r.findings; assert 'torch' not in sys.modules; print('ok')"
    )
    env = dict(os.environ, PYTHONPATH=str(PRODUCERS.parents[2]), WEIGHTCHECK_CACHE_DIR="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "ok", out.stderr


def test_torchzip_reads_what_torch_reads():
    torch = pytest.importorskip("torch")
    from weightcheck.sources import open_source
    from weightcheck.sources.pickled import load_pickled
    from weightcheck.sources.tensors import read_range, torch_tensor_bytes

    p = RUN / "tiny-step2" / "training_state.pt"
    flat, key, top = load_pickled(str(p))
    s = open_source(str(p))
    assert set(s.tensors) == set(flat) and s.files["training_state.pt"].pickle_key == key
    assert key is not None and s.files["training_state.pt"].pickle_top == top  # both readers
    for n, t in flat.items():
        rec = s.tensors[n]
        assert rec.shape == tuple(t.shape) and rec.begin is not None
        assert read_range(s, n, 0, rec.nbytes) == torch_tensor_bytes(t)
    assert (
        torch.load(p, weights_only=True)["strategy"]
        == s.files["training_state.pt"].pickle_meta["strategy"]
    )


def test_torchzip_follows_only_what_torch_save_writes_for_tensors(tmp_path):
    """sources/torchzip.py indexes a torch zip without torch; a global among the values that
    torch.save does not write for tensors (a bare function, never called) makes it answer None,
    as torch.load(weights_only=True) refuses the file."""
    torch = pytest.importorskip("torch")
    from weightcheck.sources import torchzip

    torch.save({"x": torch.arange(6.0).view(2, 3)[1:], "n": 3}, tmp_path / "ok.pt")
    flat, key, scalars, top = torchzip.read(str(tmp_path / "ok.pt"))
    assert key is None and scalars == {"n": 3} and top is None  # the tensors at the top level
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 3}, tmp_path / "nested.pt")
    flat2, key2, _, top2 = torchzip.read(str(tmp_path / "nested.pt"))
    assert key2 == "state_dict" and top2 == ("state_dict", "epoch") and list(flat2) == ["w"]
    m = flat["x"]
    assert (m.dtype, m.shape, m.nbytes, m.end - m.begin) == ("F32", (1, 3), 12, 12)
    with open(tmp_path / "ok.pt", "rb") as f:
        f.seek(m.begin)
        assert f.read(12) == torch.tensor([3.0, 4.0, 5.0]).numpy().tobytes()
    torch.save({"x": torch.zeros(2), "f": os.system}, tmp_path / "code.pt")
    assert torchzip.read(str(tmp_path / "code.pt")) is None
    with pytest.raises(Exception, match="(?i)weights_only|global"):
        torch.load(tmp_path / "code.pt", weights_only=True)


# --- Why 2: a run checkpoint folder checks with the training config --------------------------------
def test_why2_run_checkpoint_takes_its_config_from_the_training_config():
    code, rep = check(RUN / "tiny-step2", "--training-config", SF_CFG)
    assert code == 0, rep["findings"]
    assert not by_code(rep, "WC201") and not by_code(rep, "WC904")
    t = rep["training"]["trainer"]
    assert t["source_kind"] == "training_state" and t["raises"] is None
    assert t["parameters"]["fc.weight"] == "src"
    assert t["parameters"]["embed_tokens.weight"] == "target"  # not saved: frozen, the target's
    assert rep["source"]["config_file"].endswith("config.json")


def test_a_run_checkpoint_without_training_config_still_has_no_config():
    code, rep = check(RUN / "tiny-step2")
    (f,) = by_code(rep, "WC201")
    assert code == 1 and "--training-config" in said(f)


# --- Why 3: a run output folder resolves as SpecForge does -----------------------------------------
def test_why3_run_folder_resolves_its_latest_pointer():
    code, rep = check(RUN, "--training-config", SF_CFG)
    assert code == 0, rep["findings"]
    assert rep["source"]["location"].endswith("tiny-step2")
    assert "tiny-latest -> tiny-step2" in rep["source"]["picked"]
    text = run_cli("check", RUN, "--training-config", SF_CFG).stdout
    assert "checkpoint tiny-step2" in text


def test_run_folder_without_pointer_takes_the_highest_step(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    for step in (2, 10):
        shutil.copytree(RUN / "tiny-step2", root / f"tiny-step{step}")
    code, rep = check(root, "--training-config", SF_CFG)
    assert rep["source"]["location"].endswith("tiny-step10")
    assert "highest step" in rep["source"]["picked"]


def test_run_folder_of_two_runs_is_refused_as_specforge_refuses_it(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    shutil.copytree(RUN / "tiny-step2", root / "a-step2")
    shutil.copytree(RUN / "tiny-step2", root / "b-step3")
    r = run_cli("check", root, "--training-config", SF_CFG)
    assert r.exit_code == 2 and "refuses to choose" in r.stderr


def test_run_pointer_out_of_the_folder_is_refused(tmp_path):
    root = tmp_path / "out"
    root.mkdir()
    shutil.copytree(RUN / "tiny-step2", tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", root / "x-latest")
    r = run_cli("check", root)
    assert r.exit_code == 2 and "leading out of the folder" in r.stderr


# --- Why 6: speculators cannot hold an fc wider than the draft hidden ------------------------------
def _wide(tmp_path, make_drafter, tiny_cfg):
    cfg = json.loads(json.dumps(tiny_cfg))
    h = cfg["hidden_size"]
    cfg["target_hidden_size"] = 2 * h
    return make_drafter("wide", cfg), h


def test_why6_convert_to_speculators_refuses_a_wider_fc(tmp_path, make_drafter, tiny_cfg):
    src, _ = _wide(tmp_path, make_drafter, tiny_cfg)
    r = run_cli("convert", src, tmp_path / "o", "--to", "speculators", "--verifier", "org/t")
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "speculators 0.9.0 builds fc from the draft hidden size" in r.stderr
    assert not (tmp_path / "o").exists()


def test_why6_check_trainer_speculators_says_it_cannot_hold_it(tmp_path):
    src = PRODUCERS / "speculators-train"
    cfg = read_config(src)
    h = cfg["transformer_layer_config"]["hidden_size"]
    fc = tensor_map(src)["fc.weight"]
    n = fc.shape[1] // h

    def widen(c):
        c["target_hidden_size"] = 2 * h

    def tensors(m):
        m["fc.weight"] = OutTensor("fc.weight", fc.dtype, (h, n * 2 * h), fc.data * 2)

    wide = edit(src, tmp_path / "wide", cfg=widen, tensors=tensors)
    code, rep = check(wide, "--training-config", wide / "config.json", "--trainer", "speculators")
    assert code == 1
    (f,) = by_code(rep, "WC908")
    assert "builds fc from the draft hidden size" in said(f)
    assert "core.py:70-78" in said(f)


def test_speculators_requires_a_verifier(tmp_path):
    src = PRODUCERS / "speculators-train"

    def null(c):
        c["speculators_config"]["verifier"]["name_or_path"] = None

    out = edit(src, tmp_path / "nov", cfg=null)
    code, rep = check(out, "--training-config", out / "config.json")
    (f,) = by_code(rep, "WC908")
    assert "AutoConfig.from_pretrained(None)" in said(f)


def test_speculators_verifier_hidden_from_a_config_only_target(tmp_path):
    """--target reads only the config where only the config is needed: a folder with
    config.json and no weights."""
    src = PRODUCERS / "speculators-train"
    tgt = tmp_path / "target"
    tgt.mkdir()
    cfg = read_config(PRODUCERS / "target-llama")
    cfg["hidden_size"] = 2 * cfg["hidden_size"]
    (tgt / "config.json").write_text(json.dumps(cfg))
    code, rep = check(src, "--training-config", src / "config.json", "--target", tgt)
    (f,) = by_code(rep, "WC908")
    assert "verifier's hidden size" in said(f)
    assert rep["target"]["embed"] is None


def test_trainer_needs_training_config():
    r = run_cli("check", PRODUCERS / "specforge-sglang", "--trainer", "specforge")
    assert r.exit_code == 2 and "--training-config" in r.stderr


# --- item 4: --target accepts a config-only target wherever only its config is read --------------
def _config_only_target(tmp_path):
    t = tmp_path / "target-config"
    t.mkdir()
    shutil.copy(PRODUCERS / "target-llama" / "config.json", t / "config.json")
    return t


def test_check_with_a_config_only_target_answers_as_with_the_weights(tmp_path):
    """On main a target folder without weights was exit 2 (not a checkpoint)."""
    t = _config_only_target(tmp_path)
    src = PRODUCERS / "specforge-sglang"
    code, rep = check(src, "--target", t, "--engine", "vllm")
    full_code, full = check(src, "--target", PRODUCERS / "target-llama", "--engine", "vllm")
    assert rep["target"]["config_only"] is True and rep["target"]["embed"] is None
    assert code == full_code
    assert sorted(f["code"] for f in rep["findings"]) == sorted(f["code"] for f in full["findings"])
    assert "config only" in run_cli("check", src, "--target", t).stdout


def test_convert_with_a_config_only_target(tmp_path):
    t = _config_only_target(tmp_path)
    r = run_cli(
        "convert", PRODUCERS / "specforge-sglang", tmp_path / "o", "--to", "vllm", "--target", t
    )
    assert r.exit_code == 0, r.stdout + r.stderr
    # the embedding taken from a target needs its weights: a config-only one is refused
    r = run_cli(
        "convert",
        PRODUCERS / "specforge-sglang",
        tmp_path / "e",
        "--to",
        "sglang",
        "--embeddings",
        f"from={t}",
    )
    assert r.exit_code == 2 and "not a checkpoint" in r.stderr


def test_a_config_only_hub_target(tmp_path, monkeypatch):
    from hubserver import HubServer, patch_hf_hub

    with HubServer() as hub:
        patch_hf_hub(monkeypatch, hub.url, tmp_path / "hf_home")
        t = _config_only_target(tmp_path)
        hub.add_repo("org/target", {"config.json": t / "config.json"})
        code, rep = check(PRODUCERS / "specforge-sglang", "--target", "org/target")
        assert rep["target"]["config_only"] is True
        assert rep["target"]["num_hidden_layers"] == read_config(t)["num_hidden_layers"]


# --- what agreed before (issue #23): keep it so -------------------------------------------------
def test_a_missing_lm_head_raises_in_specforge(tmp_path):
    out = edit(PRODUCERS / "specforge-sglang", tmp_path / "nohead", drop={"lm_head.weight"})
    code, rep = check(out, "--training-config", SF_CFG)
    assert code == 1
    (f,) = by_code(rep, "WC908")
    assert "lm_head.weight" in said(f) and "convert" not in said(f) and f["fix"] is None
    assert "lm_head.weight" in rep["training"]["trainer"]["missing"]


def test_a_wrong_fc_width_is_one_error_not_two(tmp_path):
    """WC901 says the shape; the trainer's raise on it is not said again (WC908 quiet)."""
    fc = tensor_map(PRODUCERS / "specforge-sglang")["fc.weight"]

    def narrow(m):
        m["fc.weight"] = OutTensor("fc.weight", fc.dtype, (fc.shape[0], fc.shape[1] // 3 * 2), b"")
        m["fc.weight"].data = bytes(m["fc.weight"].nbytes)

    out = edit(PRODUCERS / "specforge-sglang", tmp_path / "narrow", tensors=narrow)
    code, rep = check(out, "--training-config", SF_CFG)
    assert code == 1 and rep["training"]["trainer"]["raises"]
    assert not by_code(rep, "WC908")


def test_a_given_map_is_loaded_over_the_buffers_whatever_the_sizes(tmp_path):
    src = PRODUCERS / "specforge-sglang"
    r = trainers.replay_training(src, SF_CFG, training_vocab=src)
    assert r.params["d2t"] == "data" and r.raises is None


# --- what the trainer oracles taught after the merge (docs/trainers-oracle.md) -------------------
def test_speculators_without_a_map_keeps_srcs_own_vocabulary_buffers(tmp_path):
    """No --d2t-path/--t2d-path and no --draft-vocab-size: parse_vocab_mappings gives None and
    from_pretrained keeps SRC's d2t/t2d (the oracle: 'src', 'init' where SRC has none); with the
    run's map they are the map's."""
    src = PRODUCERS / "speculators-train"
    r = trainers.replay_training(src, src / "config.json")
    assert r.params["d2t"] == r.params["t2d"] == "src"
    no_d2t = edit(src, tmp_path / "no-d2t", drop=("d2t",))
    r = trainers.replay_training(no_d2t, no_d2t / "config.json")
    assert (r.params["d2t"], r.params["t2d"]) == ("init", "src")
    r = trainers.replay_training(src, src / "config.json", training_vocab=src)
    assert r.params["d2t"] == r.params["t2d"] == "data"


def test_shards_without_their_index_are_not_read_by_from_pretrained(tmp_path):
    """transformers' from_pretrained looks for model.safetensors or an index: shards alone
    raise OSError in SpecForge (the oracle's sf.shards)."""
    out = tmp_path / "shards"
    tensors = list(tensor_map(PRODUCERS / "specforge-sglang").values())
    write_sharded(out, read_config(PRODUCERS / "specforge-sglang"), tensors, 5)
    (out / "model.safetensors.index.json").unlink()
    r = trainers.replay_training(out, SF_CFG)
    assert r.raises and "model.safetensors" in r.raises and r.fraction == 0.0
    code, rep = check(out, "--training-config", SF_CFG)
    (f,) = by_code(rep, "WC908")
    assert code == 1 and "OSError" in said(f) and "--to sglang --target TARGET` first" in said(f)
    with_index = write_sharded(tmp_path / "indexed", read_config(out), tensors, 5)
    assert trainers.replay_training(with_index, SF_CFG).raises is None


def test_speculators_default_target_layers_must_fit_the_verifier(tmp_path):
    """Null aux ids: speculators takes [2, L // 2, L - 3] of the verifier's L layers, and for
    target-llama's 4 layers that is [2, 2, 1], not distinct: ValueError (the oracle's sc.*)."""
    src = PRODUCERS / "speculators-train"
    target = PRODUCERS / "target-llama"

    def null_ids(c):
        c["eagle_aux_hidden_state_layer_ids"] = None

    null = edit(src, tmp_path / "null", cfg=null_ids)
    r = trainers.replay_training(null, null / "config.json", target=target)
    assert r.raises and "[2, 2, 1]" in r.raises and "resolve_target_layer_ids" in r.raises
    assert trainers.replay_training(src, src / "config.json", target=target).raises is None
    assert trainers.replay_training(null, null / "config.json").raises is None  # L unknown


def test_speculators_builds_from_srcs_own_config_and_validates_it(tmp_path):
    """--from-pretrained SRC builds from SRC's speculators config.json, whatever config the run
    is given, and its config classes validate it (the oracle's st.cfg.*, st.jtype.*, st.nl.2)."""
    src = PRODUCERS / "speculators-train"
    run_cfg = src / "config.json"  # the run's config: unchanged, valid

    def layer(**kv):
        def change(c):
            c["transformer_layer_config"].update(kv)

        return change

    wider = edit(src, tmp_path / "wider", cfg=layer(intermediate_size=256))
    r = trainers.replay_training(wider, run_cfg)
    assert r.raises and "mlp" in r.raises  # its MLP is built 256 wide: SRC's tensors are not
    typed = edit(src, tmp_path / "typed", cfg=layer(hidden_size="64"))
    assert "hidden_size of the wrong JSON type" in trainers.replay_training(typed, run_cfg).raises
    two = edit(src, tmp_path / "two", cfg=layer(num_hidden_layers=2))  # one layer_types entry
    assert "layer_types" in trainers.replay_training(two, run_cfg).raises

    def eagle_int(c):
        c["eagle_config"] = 5  # no config class of speculators reads it

    assert (
        trainers.replay_training(edit(src, tmp_path / "e", cfg=eagle_int), run_cfg).raises is None
    )


def test_speculators_raises_when_nothing_sets_t2d(tmp_path):
    """A reduced vocabulary whose t2d SRC lacks and no map sets: load_verifier_weights takes the
    verifier's head rows at t2d and raises (the oracle's sc.miss.t2d)."""
    src = PRODUCERS / "speculators-train"
    no_t2d = edit(src, tmp_path / "no-t2d", drop=("t2d",))
    r = trainers.replay_training(no_t2d, no_t2d / "config.json")
    assert r.raises and "t2d was never set" in r.raises
    assert (
        trainers.replay_training(no_t2d, no_t2d / "config.json", training_vocab=src).raises is None
    )


def test_speculators_reads_model_prefixed_names_as_transformers_does(tmp_path):
    """transformers strips the base model prefix (model.) from a name when the model has the
    name without it: a checkpoint saved from a wrapper loads fully (the oracle's st.wrap.model);
    another prefix (draft_model.) does not, and then nothing sets t2d."""
    src = PRODUCERS / "speculators-train"
    names = list(tensor_map(src))
    wrapped = edit(src, tmp_path / "model", rename={n: "model." + n for n in names})
    r = trainers.replay_training(wrapped, wrapped / "config.json")
    assert r.raises is None and r.params["fc.weight"] == r.params["t2d"] == "src"
    other = edit(src, tmp_path / "draft", rename={n: "draft_model." + n for n in names})
    r = trainers.replay_training(other, other / "config.json")
    assert r.raises and "t2d was never set" in r.raises
