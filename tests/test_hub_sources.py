"""Hub sources through the real huggingface_hub client against tests/hubserver.py on 127.0.0.1."""

import json
import os

import pytest
import synth
from conftest import K2, K25, load_config, run_cli, run_subprocess
from hubserver import HubServer, hf_env, patch_hf_hub


@pytest.fixture
def hub(tmp_path, monkeypatch):
    with HubServer() as server:
        patch_hf_hub(monkeypatch, server.url, tmp_path / "hf_home")
        yield server


def repo_files(folder):
    return {p.name: p for p in folder.iterdir() if p.is_file()}


def big_cfg():
    # a drafter whose weights are several MB (hidden 256, intermediate 1024, vocab 8192)
    return synth.scaled_config(
        load_config(K2),
        hidden=256,
        intermediate=1024,
        heads=8,
        head_dim=32,
        vocab=8192,
        draft_vocab=2000,
    )


def test_inspect_hub_reads_only_headers_and_config(hub, make_drafter):
    d = make_drafter("big", big_cfg(), include_embed=True)
    size = os.path.getsize(d / "model.safetensors")
    assert size > 5_000_000
    sha = hub.add_repo("org/drafter", repo_files(d))
    r = run_cli("inspect", "org/drafter", "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["source"]["kind"] == "hub" and j["source"]["commit"] == sha
    assert j["source"]["revision"] == "main"
    assert j["dialect"]["name"] == "specforge"
    assert {t["name"] for t in j["tensors"]} >= {
        "fc.weight",
        "lm_head.weight",
        "embed_tokens.weight",
    }
    assert j["source"]["files"][0]["sha256"]  # LFS content hash from model_info
    assert hub.bytes_served < 100_000, hub.bytes_served
    weights = hub.bytes_by_file[("org/drafter", "model.safetensors")]
    assert weights < 10_000  # one 4 KiB Range read (+ the rest of a longer header)
    # config.json landed in the normal HF cache, at the resolved commit
    snap = os.path.join(
        os.environ["HF_HOME"], "hub", "models--org--drafter", "snapshots", sha, "config.json"
    )
    assert os.path.isfile(snap)


def test_inspect_hub_sharded(hub, tiny_cfg, tmp_path):
    from weightcheck.storage.writer import write_file

    tensors = synth.drafter_tensors(tiny_cfg, seed=1)
    half = len(tensors) // 2
    d = tmp_path / "sharded"
    d.mkdir()
    write_file(str(d / "model-00001-of-00002.safetensors"), tensors[:half], {"format": "pt"})
    write_file(str(d / "model-00002-of-00002.safetensors"), tensors[half:], {"format": "pt"})
    wm = {t.name: "model-00001-of-00002.safetensors" for t in tensors[:half]}
    wm.update({t.name: "model-00002-of-00002.safetensors" for t in tensors[half:]})
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": wm})
    )
    (d / "config.json").write_text(json.dumps(tiny_cfg))
    hub.add_repo("org/sharded", repo_files(d))
    r = run_cli("inspect", "org/sharded", "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["source"]["layout"] == "sharded safetensors"
    assert len(j["tensors"]) == len(tensors) and not j["notes"]
    assert {f["name"] for f in j["source"]["files"]} == set(wm.values())


def test_revisions_branch_tag_and_sha(hub, make_drafter):
    a = make_drafter("a", synth.scaled_config(load_config(K2)))
    b = make_drafter("b", synth.scaled_config(load_config(K2), draft_vocab=300))
    sha1 = hub.add_repo("org/d", repo_files(a), tags=("v1",))
    sha2 = hub.add_repo("org/d", repo_files(b))
    assert sha1 != sha2
    for spec, sha, dv in (
        ("org/d", sha2, 300),
        ("org/d@v1", sha1, 400),
        (f"org/d@{sha1}", sha1, 400),
    ):
        j = run_cli("inspect", spec, "--json").json
        assert j["source"]["commit"] == sha, spec
        assert j["config"]["normalized"]["draft_vocab_size"] == dv
    j = run_cli("inspect", "org/d", "--revision", "v1", "--json").json
    assert j["source"]["commit"] == sha1


@pytest.mark.parametrize(
    "spec, message",
    [
        ("org/missing", "repository not found"),
        ("org/d@nope", "revision not found"),
    ],
)
def test_missing_repo_and_revision(hub, make_drafter, spec, message):
    hub.add_repo("org/d", repo_files(make_drafter()))
    r = run_cli("inspect", spec)
    assert r.exit_code == 2
    assert message in r.stderr and spec in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_gated_repo_needs_token(hub, make_drafter):
    hub.add_repo("org/gated", repo_files(make_drafter()), gated=True)
    hub.tokens = {"hf_good"}
    r = run_cli("inspect", "org/gated")
    assert r.exit_code == 2 and "gated repository" in r.stderr
    r = run_cli("inspect", "org/gated", "--token", "hf_good", "--json")
    assert r.exit_code == 0, r
    assert r.json["dialect"]["name"] == "specforge"


def test_offline_mode_with_and_without_cache(hub, make_drafter, monkeypatch):
    sha = hub.add_repo("org/d", repo_files(make_drafter()))
    online = run_cli("inspect", "org/d", "--json").json
    hub.reset_counters()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = run_cli("inspect", "org/d", "--json")
    assert r.exit_code == 0, r
    assert r.json["source"]["commit"] == sha
    assert r.json["tensors"] == online["tensors"]
    assert hub.requests == [], "offline mode must not touch the network"
    r = run_cli("inspect", "org/never-seen")
    assert r.exit_code == 2 and "HF_HUB_OFFLINE" in r.stderr


def test_compare_hub_vs_hub_identical_by_lfs_hash(hub, make_drafter):
    d = make_drafter("big", big_cfg())
    hub.add_repo("org/a", repo_files(d))
    hub.add_repo("org/b", repo_files(d))
    r = run_cli("compare", "org/a", "org/b", "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["verdict"] == "identical"
    assert all(t["decided_by"] == "lfs-sha256" for t in j["tensors"])
    assert hub.bytes_served < 100_000


def test_compare_hub_vs_local_reads_headers_only(hub, make_drafter):
    a = make_drafter(
        "k2",
        synth.scaled_config(
            load_config(K2),
            hidden=256,
            intermediate=1024,
            heads=8,
            head_dim=32,
            vocab=8192,
            draft_vocab=2000,
        ),
    )
    b = make_drafter(
        "k25",
        synth.scaled_config(
            load_config(K25),
            hidden=256,
            intermediate=1024,
            heads=8,
            head_dim=32,
            vocab=8192,
            draft_vocab=2000,
        ),
        seed=9,
    )
    hub.add_repo("aqmedai/k2-eagle3", repo_files(a))
    r = run_cli("compare", "aqmedai/k2-eagle3", b, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["verdict"] == "compatible"
    assert j["bytes"]["not_compared"] == len(j["tensors"])
    assert any("--values" in n for n in j["notes"])
    assert hub.bytes_served < 100_000


def test_compare_values_downloads_only_needed_files(hub, make_drafter, tiny_cfg):
    pytest.importorskip("torch")
    a = make_drafter("a", tiny_cfg, seed=1)
    files = repo_files(a)
    files["README.md"] = b"x" * 50_000  # not needed, must not be fetched
    hub.add_repo("org/a", files)
    j = run_cli("compare", "org/a", a, "--values", "--json").json
    assert j["verdict"] == "identical"
    assert j["values"]["fc.weight"]["max_abs_diff"] == 0.0
    assert ("org/a", "README.md") not in hub.bytes_by_file
    assert hub.bytes_by_file[("org/a", "model.safetensors")] >= os.path.getsize(
        a / "model.safetensors"
    )


def test_hub_in_a_real_process(tmp_path, make_drafter):
    """The CLI as a user runs it: configured by the environment only, in a fresh interpreter."""
    with HubServer() as server:
        server.add_repo("org/d", repo_files(make_drafter()))
        env = hf_env(server, tmp_path / "home")
        r = run_subprocess("inspect", "org/d", "--json", env=env)
        assert r.exit_code == 0, r
        assert json.loads(r.stdout)["source"]["kind"] == "hub"
        r = run_subprocess("inspect", "org/nothing", env=env)
        assert r.exit_code == 2 and r.stderr.startswith("weightcheck: error: org/nothing")
        assert "Traceback" not in r.stderr


def test_check_hub_drafter_and_target_reads_headers_config_and_vocab_maps(hub, tmp_path):
    """check on Hub sources: headers, config, and the d2t/t2d bytes by Range reads — no weights."""
    from weightcheck.storage.writer import OutTensor, write_file

    d = tmp_path / "d"
    synth.write_drafter(str(d), big_cfg(), seed=3)
    hub.add_repo("org/drafter", repo_files(d))
    t = tmp_path / "t"
    t.mkdir()
    (t / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 256,
                "vocab_size": 8192,
                "num_hidden_layers": 61,
                "torch_dtype": "bfloat16",
            }
        )
    )
    write_file(
        str(t / "model.safetensors"),
        [
            OutTensor("model.embed_tokens.weight", "BF16", (8192, 256), bytes(8192 * 256 * 2)),
            OutTensor("lm_head.weight", "BF16", (8192, 256), bytes(8192 * 256 * 2)),
        ],
        {"format": "pt"},
    )
    hub.add_repo("org/target", repo_files(t))
    r = run_cli("check", "org/drafter", "--target", "org/target", "--engine", "sglang", "--json")
    assert r.exit_code == 0, r
    assert r.json["ok"] and r.json["target"]["embed"]["shape"] == [8192, 256]
    weights = hub.bytes_by_file[("org/drafter", "model.safetensors")]
    maps = 2000 * 8 + 8192  # d2t (int64 per draft token) + t2d (one byte per token)
    assert weights < maps + 10_000, weights  # header + the two vocab maps, nothing else
    assert hub.bytes_by_file[("org/target", "model.safetensors")] < 10_000


# --- requests: none repeated, the independent ones at once -----------------------------------------


def _request_keys(hub) -> list:
    return [(r.method, r.path, r.query, r.range) for r in hub.requests]


def _first(hub, substring: str, method: str | None = None) -> int:
    """The position of the first request whose path holds ``substring`` (arrival order)."""
    for i, r in enumerate(hub.requests):
        if substring in r.path and (method is None or r.method == method):
            return i
    raise AssertionError(f"no request for {substring}: {_request_keys(hub)}")


def test_compare_of_two_hub_repos_asks_each_thing_once(hub, make_drafter, tiny_cfg):
    """compare HUB HUB: per repo the model info, config.json's metadata and body, the header (one
    Range read: a small header fits the first 4 KiB) and the d2t range; no request twice."""
    hub.add_repo("org/a", repo_files(make_drafter("a", tiny_cfg, seed=1)))
    hub.add_repo("org/b", repo_files(make_drafter("b", tiny_cfg, seed=2)))
    hub.reset_counters()
    r = run_cli("compare", "org/a", "org/b", "--json")
    assert r.exit_code in (0, 1), r
    assert r.json["vocab"] is not None  # both maps were read
    keys = _request_keys(hub)
    assert len(keys) == len(set(keys)), keys
    for repo in ("org/a", "org/b"):
        assert len(hub.requests_for(f"/api/models/{repo}")) == 1
        assert len(hub.requests_for(f"/{repo}/resolve/", "HEAD")) == 1  # config.json's metadata
        assert len(hub.requests_for(f"/{repo}/resolve/", "GET")) == 3  # config, header, d2t
    assert len(keys) == 10


def test_the_two_sources_of_compare_are_read_at_once(hub, make_drafter, tiny_cfg):
    """While org/a's model info is held back, org/b is read whole: its header request arrives
    before any of org/a's files is asked for (one after the other, org/b would come last)."""
    hub.add_repo("org/a", repo_files(make_drafter("a", tiny_cfg, seed=1)))
    hub.add_repo("org/b", repo_files(make_drafter("b", tiny_cfg, seed=2)))
    hub.stall("/api/models/org/a", 2)
    r = run_cli("compare", "org/a", "org/b", "--json")
    assert r.exit_code in (0, 1), r
    assert _first(hub, "/org/b/resolve/") < _first(hub, "/org/a/resolve/")


def test_config_and_header_of_one_source_are_read_at_once(hub, make_drafter, tiny_cfg):
    """While config.json's metadata request is held back, the header is read: its Range request
    arrives before config.json's body is asked for (one after the other: config first)."""
    hub.add_repo("org/a", repo_files(make_drafter("a", tiny_cfg)))
    hub.stall("config.json", 2, method="HEAD")
    r = run_cli("inspect", "org/a", "--json")
    assert r.exit_code == 0, r
    assert _first(hub, "model.safetensors", "GET") < _first(hub, "config.json", "GET")
    keys = _request_keys(hub)
    assert len(keys) == len(set(keys)) == 4, keys
