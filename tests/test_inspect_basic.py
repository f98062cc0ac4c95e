from conftest import run_cli


def test_inspect_example_json(make_drafter):
    d = make_drafter()
    r = run_cli("inspect", d, "--json")
    assert r.exit_code == 0, r
    j = r.json
    assert j["dialect"]["name"] == "specforge"
    assert j["architecture"]["name"] == "llama_eagle3"
    names = {t["name"]: t for t in j["tensors"]}
    assert names["fc.weight"]["shape"] == [128, 384]
    assert names["fc.weight"]["canonical"] == "fc.weight"
    assert all(t["status"] == "ok" for t in j["tensors"])
    assert j["config"]["normalized"]["draft_vocab_size"] == 400
    assert [m["canonical"] for m in j["missing"]] == ["embed_tokens.weight"]
