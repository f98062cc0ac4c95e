"""The JSON Schemas of the reports: generated from weightcheck/reports/, shipped in the package
(weightcheck/schemas/), and every ``--json`` output of the suite validates against its own
(conftest.run_cli -> schema_check.check_output)."""

from __future__ import annotations

import copy
import json

import pytest
import schema_check
from conftest import PRODUCERS, run_cli

from weightcheck import reports, schemagen


def test_the_shipped_schemas_are_the_generated_ones():
    shipped = {p.name: p.read_text() for p in schemagen.SCHEMAS.glob("*.json")}
    assert shipped == schemagen.generated(), "run: python -m weightcheck.schemagen"
    assert len(shipped) == len(reports.REPORTS)


def test_each_schema_names_its_report_and_requires_every_stable_key():
    s = json.loads((schemagen.SCHEMAS / "check.json").read_text())
    assert s["$id"] == "weightcheck.check/1" and s["additionalProperties"] is False
    assert {"schema", "ok", "source", "findings", "summary", "conclusion"} <= set(s["required"])
    assert "engines" in s["properties"] and "engines" not in s["required"]  # plain check only
    finding = s["$defs"]["Finding"]
    assert finding["properties"]["severity"] == {"enum": ["error", "warning", "info"]}


def test_a_report_that_breaks_its_schema_is_caught():
    good = run_cli("check", PRODUCERS / "speculators-train", "--engine", "sglang", "--json").json
    schema_check.validate(good)
    for broken in (
        {k: v for k, v in good.items() if k != "summary"},  # a key missing
        {**good, "extra": 1},  # a key no schema knows
        {**good, "ok": "yes"},  # a wrong type
    ):
        with pytest.raises(AssertionError):
            schema_check.validate(broken)
    bad = copy.deepcopy(good)
    bad["findings"][0]["severity"] = "fatal"  # a value outside its enum, nested
    with pytest.raises(AssertionError, match="fatal"):
        schema_check.validate(bad)


@pytest.mark.parametrize(
    "args",
    [
        ("rule", "WC305"),
        ("rule", "--all"),
        ("check", "/no/such/path"),
        ("inspect",),
    ],
)
def test_rule_and_error_outputs_validate(args):
    r = run_cli(*args, "--json")
    schema_check.validate(r.json)  # run_cli validated it too; said here for these kinds
    assert r.json["schema"].startswith("weightcheck.")


def test_compare_reasons_are_structured_differences(make_drafter, tiny_cfg):
    """The judge says each difference as data (kind, subject, A's and B's values) and its
    sentence; the JSON keeps the sentences, the text view counts what a table lists by kind
    (it no longer parses the sentences back)."""
    import weightcheck

    a = make_drafter("a", tiny_cfg, seed=1)
    b = make_drafter("b", dict(tiny_cfg, hidden_size=96), seed=1, skip=("lm_head.weight",))
    c = weightcheck.compare(a, b)
    kinds = {d.kind for d in c.reasons}
    assert {"only", "config"} <= kinds and c.verdict == "incompatible"
    hidden = next(d for d in c.reasons if d.kind == "config" and d.subject == "hidden_size")
    assert (hidden.a, hidden.b) == (128, 96)
    lm = next(d for d in c.reasons if d.kind == "only")
    assert lm.subject == "lm_head.weight" and lm.a == "lm_head.weight" and lm.b is None
    assert c.to_dict()["reasons"] == [d.text for d in c.reasons]  # JSON: the sentences
    text = run_cli("compare", a, b).stdout
    assert "config field(s) differ (table below)" in text and hidden.text not in text


# =============================================================================================
# issue #32 item 5: reports typed all the way
# the eval report's interval is the eval helper's to type (issue #32 item 4 reworks intervals)
OPEN_FOR_NOW: set = set()


def _opaque(schema: dict, where: str, found: list) -> None:
    """Where ``schema`` allows a value of unknown shape: an object without properties whose
    values are anything (or a bare object), or anything at all (``{}``)."""
    if schema == {}:
        found.append(where)
        return
    if schema.get("type") == "object" and "properties" not in schema:
        extra = schema.get("additionalProperties")
        if extra is None or extra == {}:
            found.append(where)
    for k, v in schema.items():
        if k in ("properties", "$defs"):
            for name, sub in v.items():
                _opaque(sub, f"{where}.{name}".lstrip("."), found)
        elif k == "anyOf":
            for sub in v:
                _opaque(sub, where, found)
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            _opaque(v, where, found)


def test_no_schema_has_an_object_of_unknown_shape():
    """Every key of every report is typed: the one open type is a config file's own value
    (``$defs.ConfigValue``, any JSON value), and nothing else is an object of unknown keys."""
    left = []
    for path in sorted(schemagen.SCHEMAS.glob("*.json")):
        schema = json.loads(path.read_text())
        defs = schema.get("$defs", {})
        found: list[str] = []
        _opaque({k: v for k, v in schema.items() if k != "$defs"}, "", found)
        for name, sub in defs.items():
            if name != "ConfigValue":
                _opaque(sub, name, found)
        left += [(path.name, w) for w in found if (path.name, w) not in OPEN_FOR_NOW]
    assert left == []
    cv = json.loads((schemagen.SCHEMAS / "check.json").read_text())["$defs"]["ConfigValue"]
    assert {t.get("type") for t in cv["anyOf"]} == {
        "string",
        "number",
        "boolean",
        "null",
        "array",
        "object",
    }


def test_no_report_field_is_a_dict_of_anything():
    """No report class has a field typed ``dict[str, Any]``, ``dict``, ``Any`` or ``object``."""
    import dataclasses
    import typing

    from weightcheck.reports.base import ConfigValue

    seen, bad = set(), []

    def walk(tp, where):
        if tp is ConfigValue or tp in (str, int, float, bool, type(None)):
            return
        if tp in (typing.Any, object, dict, list):
            bad.append(where)
            return
        if isinstance(tp, type) and hasattr(tp, "json_schema"):
            return  # says its own schema (compare's Difference: its sentence)
        if dataclasses.is_dataclass(tp):
            if tp in seen:
                return
            seen.add(tp)
            hints = typing.get_type_hints(tp)
            for f in dataclasses.fields(tp):
                walk(hints[f.name], f"{tp.__name__}.{f.name}")
            return
        for a in typing.get_args(tp):
            if a is not Ellipsis and typing.get_origin(tp) is not typing.Literal:
                walk(a, where)

    for r in reports.REPORTS:
        walk(r, r.__name__)
    assert [w for w in bad if w != "EvalDrafter.interval"] == []


def test_the_renderers_read_attributes_not_keys():
    """output/ draws the typed reports by attribute: no string subscript, no ``.get("key")``
    (eval's document is the eval report's, typed there)."""
    import ast
    import pathlib

    import weightcheck.output

    left = []
    for p in sorted(pathlib.Path(weightcheck.output.__file__).parent.glob("*.py")):
        if p.name == "eval.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                left += [f"{p.name}:{node.lineno}"] if isinstance(node.slice.value, str) else []
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                left.append(f"{p.name}:{node.lineno}")
    assert left == []


def test_typed_parts_still_read_by_key():
    import weightcheck

    r = weightcheck.check(PRODUCERS / "speculators-train", engine="vllm")
    assert r.engine.tensors[0].name == r.engine["tensors"][0]["name"]
    assert r.engine.aux_layers.ids == r.to_dict()["engine"]["aux_layers"]["ids"]
    plain = weightcheck.check(PRODUCERS / "speculators-train")
    assert plain.engines["vllm"].serves == (plain.engines["vllm"]["findings"]["errors"] == 0)


def test_typed_turns_plain_data_into_its_record_and_refuses_a_key_it_lacks():
    """reports.base.typed: what a lower layer hands over as a dict becomes its record, whose JSON
    is the dict again; a key the record has no field for is a TypeError naming it (a new key in
    the replay's data must be typed, never dropped from the JSON without a word)."""
    from weightcheck.reports.base import to_json_value, typed
    from weightcheck.reports.check import AuxLayers, EngineLine

    aux = {
        "ids": [2, 30, 58],
        "from": "eagle_config.eagle_aux_hidden_state_layer_ids",
        "default": "the engine's",
        "conventions": [{"target_model_types": ["llama"], "captures_output_of": "ids"}],
        "captures_output_of_layers": None,
        "runners": [],
    }
    got = typed(AuxLayers, aux)
    assert got.from_ == aux["from"] and got.conventions[0].target_model_types == ["llama"]
    assert to_json_value(got) == aux
    with pytest.raises(TypeError, match="AuxLayers: no field for \\['runner'\\]"):
        typed(AuxLayers, {**aux, "runner": "v2"})
    with pytest.raises(TypeError):
        typed(EngineLine, {"version": "1"})  # a required field missing
