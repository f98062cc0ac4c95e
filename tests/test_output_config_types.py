"""Issue #14, item 7: messages in the user's words. Every config field weightcheck reads is tested
for its type; a value of another type is reported with the field, the JSON type found and the one
expected — never a Python type or exception text — and is shown as such, not as absent."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli

from weightcheck.model import config as config_mod

# every JSON type, as json.loads gives it
SAMPLES = {
    "null": None,
    "a boolean": True,
    "an integer": 3,
    "a number": 2.5,
    "a string": "256",
    "an array": ["x"],
    "an object": {"a": 1},
}
ACCEPTS = {  # config.toml type -> the JSON types it takes
    "int": {"an integer"},
    "float": {"an integer", "a number"},
    "bool": {"a boolean"},
    "str": {"a string"},
    "list": {"an array"},
    "object": {"an object"},
}
PYTHON = re.compile(
    r"NoneType|unsupported operand|object of type|not subscriptable|Traceback|internal error"
    r"|'(int|str|dict|list|float|bool)'|\b(int|str|dict|list|float|bool) \d|\bis (str|int|dict|list|float|bool)\b"
)
SPECS = config_mod.field_specs()


def _put(cfg: dict, path: str, v) -> dict:
    node = cfg
    parts = path.split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = v
    return cfg


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_every_field_given_every_json_type(spec):
    for found, value in SAMPLES.items():
        for path in spec.paths:
            n = config_mod.normalize(_put({}, path, value))
            mine = [m for f, m in n.problems if f == spec.name]
            if value is None and spec.null == "value":  # null is the value (q_lora_rank)
                assert n.provenance[spec.name] == path and n.values[spec.name] is None
                assert not mine, mine
            elif value is None:  # null is transformers' "not set": absent, no problem
                assert n.provenance[spec.name] in ("absent", "default"), (path, found)
                assert not mine, mine
            elif found in ACCEPTS[spec.type] and config_mod.ITEMS_READ.get(spec.name) == "all":
                # every item is read (aux layer ids): an item of another type makes it no value
                items_ok = all(
                    config_mod._TYPES[config_mod.ITEM_TYPES[spec.name]](x) for x in value
                )
                if items_ok:
                    assert n.provenance[spec.name] == path and not mine, (path, found, mine)
                else:
                    assert n.provenance[spec.name] == "invalid"
                    (msg,) = mine
                    assert msg.startswith(f"{path}[0] is "), msg
            elif found in ACCEPTS[spec.type]:
                assert n.provenance[spec.name] == path and not mine, (path, found, mine)
            else:
                assert n.values[spec.name] is None and n.provenance[spec.name] == "invalid"
                (msg,) = mine
                assert msg.startswith(f"{path} is {found} ("), msg
                assert msg.endswith(f"expected {config_mod.EXPECTED[spec.type]}"), msg
                assert not PYTHON.search(msg), msg


@pytest.mark.parametrize("container", ["transformer_layer_config", "eagle_config", "text_config"])
@pytest.mark.parametrize("found", ["a boolean", "an integer", "a string", "an array"])
def test_an_object_that_is_not_an_object(container, found):
    n = config_mod.normalize({container: SAMPLES[found]})
    (msg,) = [m for f, m in n.problems if f == container]
    assert msg.startswith(f"{container} is {found} (") and "expected an object" in msg
    assert "cannot be read" in msg and not PYTHON.search(msg)


def test_list_items_are_typed():
    n = config_mod.normalize({"architectures": ["LlamaForCausalLMEagle3", 7]})
    assert ("architectures", "architectures[1] is an integer (7), expected a string") in n.problems


def test_a_default_that_cannot_be_computed_says_why_in_words():
    n = config_mod.normalize({"hidden_size": 128, "num_attention_heads": 0})
    (msg,) = [m for f, m in n.problems if f == "head_dim"]
    assert "division by zero" in msg and "hidden_size // num_attention_heads" in msg
    assert not PYTHON.search(msg) and "integer division or modulo" not in msg


def test_json_type_names():
    assert [config_mod.json_type(v) for v in SAMPLES.values()] == list(SAMPLES)


# ---------------------------------------------------------------------------------------------
# what the user sees
def test_a_string_is_shown_as_wrongly_typed_not_absent(make_drafter, tiny_cfg):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(json.dumps(dict(tiny_cfg, hidden_size="256")))
    j = run_cli("inspect", d, "--json").json
    assert j["config"]["provenance"]["hidden_size"] == "invalid"
    assert (
        'hidden_size: hidden_size is a string ("256"), expected an integer'
        in j["config"]["problems"]
    )
    text = run_cli("inspect", d).stdout
    row = next(line for line in text.splitlines() if line.startswith("hidden_size "))
    assert 'hidden_size is a string ("256"), expected an integer' in row and "absent" not in row
    check = run_cli("check", d, "--json")
    (wc212,) = [f for f in check.json["findings"] if f["code"] == "WC212"]
    assert wc212["subject"] == "hidden_size" and wc212["severity"] == "error"
    assert wc212["message"] == 'hidden_size is a string ("256"), expected an integer'
    assert check.exit_code == 1


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_inspect_and_check_speak_json_for_every_field_and_type(make_drafter, tiny_cfg, spec):
    """Every field of mappings/config.toml, each wrong JSON type, through the commands: no
    Python in what they print."""
    d = make_drafter(cfg=tiny_cfg)
    for found, value in SAMPLES.items():
        if value is None or found in ACCEPTS[spec.type]:
            continue
        cfg = _put(json.loads(json.dumps(tiny_cfg)), spec.paths[0], value)
        (d / "config.json").write_text(json.dumps(cfg))
        commands = [["inspect", d], ["inspect", d, "--json"], ["check", d, "--json"]]
        if spec.name == "architectures":
            commands.pop()  # test_check_reads_a_wrongly_typed_architectures_without_crashing
        for args in commands:
            r = run_cli(*args)
            assert r.exit_code in (0, 1), (spec.name, found, args, r)
            if args[0] == "check":  # a wrong type is an error (WC212), never a warning
                assert r.exit_code == 1, (spec.name, found)
                assert any(
                    f["code"] == "WC212" and f["severity"] == "error" for f in r.json["findings"]
                ), (spec.name, found)
            assert not PYTHON.search(r.stdout + r.stderr), (spec.name, found, args[-1])


@pytest.mark.parametrize("value", [True, 3, {"a": 1}, [1]])
def test_check_reads_a_wrongly_typed_architectures_without_crashing(make_drafter, tiny_cfg, value):
    d = make_drafter(cfg=tiny_cfg)
    (d / "config.json").write_text(json.dumps(dict(tiny_cfg, architectures=value)))
    r = run_cli("check", d, "--json")
    assert r.exit_code == 1 and not PYTHON.search(r.stdout + r.stderr), r
    # one finding for the one fact (issue #21): WC212 names the field and its type; WC401 does
    # not judge a class name that is not there
    (f,) = r.json["findings"]
    assert f["code"] == "WC212" and f["subject"] == "architectures", r.json["findings"]
