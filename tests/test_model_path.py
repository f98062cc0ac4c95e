"""What the engine decides before it reads a weight (issue #31 Why 7): SGLang 0.5.23 picks its
config parser from the model path (utils/hf_transformers/mistral_utils.py is_mistral_model: a
path naming both "eagle" and "mistral" is read as Mistral's native format, params.json, and the
server stops without one). The path is an input of the replay (mappings/engines/sglang.toml
[[model_path]]): the folder as given, a Hub id, or ``check --served-as``. The engine's own
get_config answers the same (tests/engine/engine_facts.py, marker ``engine``)."""

from __future__ import annotations

import shutil

import pytest
from conftest import PRODUCERS, run_cli

from weightcheck.engines import data
from weightcheck.engines.view import view
from weightcheck.model.drafter import load_drafter

GOOD = PRODUCERS / "specforge-sglang"


@pytest.fixture
def mistral_eagle(tmp_path):
    out = tmp_path / "Mistral-Small-EAGLE3-draft"
    shutil.copytree(GOOD, out)
    return out


def _path_findings(r):
    return [f for f in r.json["findings"] if f["subject"] == "model path"]


def test_a_folder_naming_eagle_and_mistral_stops_sglang(mistral_eagle):
    r = run_cli("check", mistral_eagle, "--engine", "sglang", "--json")
    assert r.exit_code == 1
    (f,) = _path_findings(r)
    assert f["code"] == "WC705" and f["severity"] == "error"
    assert "params.json" in f["message"] and "mistral_utils.py" in f["detail"]
    assert r.json["engine"]["starts"] is False, r.json["engine"]
    # the same drafter under another name: nothing about the path
    plain = run_cli("check", GOOD, "--engine", "sglang", "--json")
    assert plain.exit_code == 0 and not _path_findings(plain)


def test_vllm_does_not_read_the_path(mistral_eagle):
    r = run_cli("check", mistral_eagle, "--engine", "vllm", "--json")
    assert not _path_findings(r) and r.json["engine"]["starts"] is True


def test_served_as_is_the_path_the_engine_sees(mistral_eagle):
    """The path the engine is given decides, not the one checked: --served-as names it (a Hub
    id routes like a folder)."""
    ok = run_cli(
        "check", mistral_eagle, "--engine", "sglang", "--served-as", "/srv/kimi-drafter", "--json"
    )
    assert ok.exit_code == 0 and not _path_findings(ok)
    hub = run_cli(
        "check", GOOD, "--engine", "sglang", "--served-as", "someone/mistral-7b-eagle3", "--json"
    )
    assert hub.exit_code == 1 and _path_findings(hub)


def test_a_native_format_params_json_beside_config_json_is_a_warning(mistral_eagle):
    """With params.json there SGLang does not stop: it reads that file instead of config.json,
    so what the replay of config.json says holds only if both agree (a warning, naming it)."""
    (mistral_eagle / "params.json").write_text("{}")
    r = run_cli("check", mistral_eagle, "--engine", "sglang", "--json")
    (f,) = _path_findings(r)
    assert f["severity"] == "warning" and "reads params.json here, not config.json" in f["message"]


def test_the_model_names_the_parser_knows_route_too(tmp_path):
    out = tmp_path / "Leanstral-draft"
    shutil.copytree(GOOD, out)
    v = view(load_drafter(str(out)), "sglang")
    assert (
        v.failure is not None and v.failure.stage == "config" and v.failure.subject == "model path"
    )


def test_only_the_releases_read_apply(mistral_eagle):
    """Read in 0.5.23 (`since`): an older release replayed says nothing about the path."""
    d = load_drafter(str(mistral_eagle))
    assert view(d, "sglang").failure is not None
    older = [v for v in data.load("sglang").engine.versions_read if v != "0.5.23"]
    assert view(d, "sglang", older[0]).failure is None
