"""mappings/engines/*.toml as typed data (weightcheck/engines/data.py): every file loads, a typo'd
key or a mistyped value in any of them fails at load with one line naming the file and the key
path, and every field of the schema is read by weightcheck."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import typing

import pytest
import stress

from weightcheck import expr
from weightcheck.engines import data
from weightcheck.errors import WeightcheckError

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENGINES_DIR = ROOT / "mappings" / "engines"
PKG = ROOT / "weightcheck"
FILES = sorted(p.name for p in ENGINES_DIR.glob("*.toml"))
# tables whose keys are names, not schema keys (a dict[str, ...] field): any key is valid there
NAME_TABLES = {"output.family_architectures"}


def test_the_files_are_the_layouts_and_loaders():
    assert FILES == sorted(f"{n}.toml" for n in data.files())


def test_every_architecture_has_a_loader_in_every_engine():
    """What WC700 ("engine view unavailable") said at run time until the MLA loaders were
    replayed: a drafter architecture without a loader would get no engine view at all."""
    from weightcheck.model import inventory

    for arch in inventory.architectures():
        for engine in data.ENGINES:
            assert data.replays(arch, engine), f"{arch.name}: no loader in {engine}"
            loader = data.loader_of(arch, engine)
            name = data.loader_for(engine, loader.engine.architectures[0])
            assert data.load(name) is loader  # the architectures it declares select it


@pytest.mark.parametrize("name", data.files())
def test_every_file_loads(name):
    d = data.load(name)
    assert isinstance(d, data.Format if name == "speculators" else data.Engine)
    assert data.load(name) is d  # cached
    assert data.load_file(ENGINES_DIR / f"{name}.toml") == d


def test_engine_data_refuses_a_format():
    with pytest.raises(WeightcheckError, match="unknown engine 'speculators'"):
        data.engine_data("speculators")
    with pytest.raises(WeightcheckError, match="unknown engine 'trtllm'"):
        data.load("trtllm")


# --- the key lines of a file, with the path the loader names them by ----------------------------


def key_lines(text: str):
    """(line index, key path, end line index) of every live `key = value` line and every table
    header (path of the header's last part), as the loader spells the path: names.rewrite[2].pattern."""
    lines = text.split("\n")
    counts: dict[str, int] = {}
    table = ""
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        h = re.match(r"^(\[\[?)([\w.]+)\]\]?\s*(#.*)?$", line)
        if h:
            name = h.group(2)
            if h.group(1) == "[[":
                counts[name] = counts.get(name, -1) + 1
                table = f"{name}[{counts[name]}]"
            else:
                table = name
            # a typo'd header: the loader names the parent's path plus the typo'd part
            parent, _, last = name.rpartition(".")
            out.append((i, (f"{parent}." if parent else "") + last, i, "header"))
            i += 1
            continue
        m = re.match(r"^(\w+)\s*=\s*(.*)$", line)
        if not m:
            i += 1
            continue
        end = i
        value = m.group(2).split("#")[0] if not m.group(2).startswith('"') else m.group(2)
        if value.count("[") > value.count("]"):  # an array over several lines
            depth = value.count("[") - value.count("]")
            while depth > 0:
                end += 1
                depth += lines[end].count("[") - lines[end].count("]")
        base = re.sub(r"\[\d+\]$", "", table)
        if base not in NAME_TABLES:
            out.append((i, (f"{table}." if table else "") + m.group(1), end, "key"))
        i = end + 1
    return out


def write_variant(tmp_path, name: str, text: str) -> pathlib.Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def load_error(path) -> str:
    with pytest.raises(WeightcheckError) as e:
        data.load_file(path)
    line = str(e.value)
    assert "\n" not in line
    return line


def each_key(cases: list) -> list:
    """``cases`` (key_lines), each schema key once — its first place; a [[table]]'s entries are
    checked by the same code whatever their index — and every line under ``-m stress``."""
    if stress.FULL:
        return cases
    seen: set[str] = set()
    out = []
    for case in cases:
        key = re.sub(r"\[\d+\]", "[]", case[1])
        if key not in seen:
            seen.add(key)
            out.append(case)
    return out


@pytest.mark.stress
@pytest.mark.parametrize("name", FILES)
def test_every_typo_in_a_key_fails_naming_file_and_key(tmp_path, name):
    text = (ENGINES_DIR / name).read_text()
    lines = text.split("\n")
    cases = key_lines(text)
    assert len(cases) > (5 if name == "speculators.toml" else 100)
    for i, path, _end, kind in each_key(cases):
        variant = list(lines)
        if kind == "header":
            variant[i] = re.sub(r"([\w.]+)(\]\]?)", r"\1x\2", lines[i], count=1)
        else:
            variant[i] = re.sub(r"^(\w+)", r"\1x", lines[i])
        p = write_variant(tmp_path, name, "\n".join(variant))
        got = load_error(p)
        assert got.startswith(f"{p}: {path}x: unknown key; allowed: "), (name, lines[i], got)


@pytest.mark.stress
@pytest.mark.parametrize("name", FILES)
def test_every_mistyped_value_fails_naming_file_and_key(tmp_path, name):
    """No key of the schema takes an integer: 42 anywhere is refused, with what was expected."""
    text = (ENGINES_DIR / name).read_text()
    lines = text.split("\n")
    for i, path, end, kind in each_key(key_lines(text)):
        if kind == "header":
            continue
        key = lines[i].split("=")[0].strip()
        variant = lines[:i] + [f"{key} = 42"] + lines[end + 1 :]
        p = write_variant(tmp_path, name, "\n".join(variant))
        got = load_error(p)
        assert re.fullmatch(
            rf"{re.escape(str(p))}: {re.escape(path)}: expected .+, found an integer 42", got
        ), got


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            'versions_read = ["0.5.23"',
            'versions_read = "0.5.23" #',
            "engine.versions_read: expected a list of versions, found a string '0.5.23'",
        ),
        (
            'unknown = "drop"',
            'unknown = "drops"',
            "names.unknown: expected one of 'drop', 'error', 'warn', found a string 'drops'",
        ),
        (
            'pattern = "midlayer"',
            'pattern = "midlayer("',
            "names.rewrite[0].pattern: not a regular expression: missing ), unterminated subpattern "
            "at position 8",
        ),
        (
            'when = "norm_before_fc"    #',
            'when = "norm_befor_fc"    #',
            "names.conditional[0].when: `norm_befor_fc` is not a [[config]] field of this file nor "
            "a config key mappings/config.toml knows",
        ),
        (
            'when = "not tie_word_embeddings"',
            'when = "not tie_word_embeddings.x"',
            "parameter[16].when: unsupported syntax in 'not tie_word_embeddings.x': ",
        ),
        (
            'paths = ["eagle_config.norm_before_fc", "norm_before_fc"]',
            'paths = ["eagle_config.norm_before_fc", "norm_before_fc (legacy)"]',
            "config[3].paths[1]: expected a dotted config path, found a string 'norm_before_fc "
            "(legacy)'",
        ),
        ('since = "0.5.17"', 'since = "0.5.x"', "expected a version (e.g. 0.5.12), found a string"),
        (
            'when = "norm_before_residual"',
            'when = "norm_before_residuals"',
            "output.refuse[0].when: `norm_before_residuals` is not a field of the normalized config",
        ),
        (
            'captures_output_of = "k"\ndefault_ids_output_of',
            'captures_output_of = "n"\ndefault_ids_output_of',
            "aux_layers.convention[0].captures_output_of: `n` is not one of k, ids, L",
        ),
        (
            'inventory = "llama_eagle3"',
            'inventory = "llama_eagle"',
            "engine.inventory: no such architecture in mappings/architectures/",
        ),
        (
            'names_dialect = "specforge"',
            'names_dialect = "specforged"',
            "output.names_dialect: no such dialect in mappings/dialects/",
        ),
        (
            'order = ["rewrite", "special", "skip", "stacked", "prefix"]',
            'order = ["rewrite", "special", "stacked", "prefix"]',
            "names.order: does not name 'skip': the [[names.skip]] rules would never apply",
        ),
        (
            'inventory = "llama_eagle3"\n',
            "\n",
            "engine.inventory: missing (a required key)",
        ),
        (
            "[[names.stacked]]\nfrom =",
            "[[names.stacked]]\nfrom_ =",
            "names.stacked[0].from_: unknown key",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_file_and_key(tmp_path, old, new, message):
    text = (ENGINES_DIR / "sglang.toml").read_text()
    assert old in text, old
    p = write_variant(tmp_path, "sglang.toml", text.replace(old, new, 1))
    got = load_error(p)
    assert got.startswith(f"{p}: ") and message in got, got


def test_invalid_toml_is_one_line(tmp_path):
    p = write_variant(tmp_path, "vllm.toml", "[engine\n")
    assert load_error(p).startswith(f"{p}: not valid TOML: ")


# --- every field is read --------------------------------------------------------------------


def schema_fields() -> list[tuple[str, str]]:
    """(class, field) of every dataclass reachable from Engine and Format."""
    seen, out, todo = set(), [], [data.Engine, data.Format]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out.append((cls.__name__, f.name))
            stack = [hints[f.name]]
            while stack:
                h = stack.pop()
                if dataclasses.is_dataclass(h):
                    todo.append(h)
                stack.extend(typing.get_args(h))
    return sorted(out)


def attributes_read() -> set[str]:
    """Every attribute name read in weightcheck/ (``x.name``), except in data.py's private
    functions (the loader and its checks read fields to validate them, not to use them)."""
    names = set()
    for path in PKG.rglob("*.py"):
        if "_mappings" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        skip = set()
        if path.name == "data.py" and path.parent.name == "engines":
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name.startswith("_"):
                    skip.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and id(node) not in skip:
                names.add(node.attr)
    return names


def test_every_field_is_read():
    read = attributes_read()
    unread = [f"{c}.{f}" for c, f in schema_fields() if f not in read]
    assert not unread, f"fields nothing reads (read them or make them comments): {unread}"


def test_expressions_are_expr_language():
    """Every condition and default in the files is read by weightcheck/expr.py (no second
    language): it parses, and names only what the replay resolves (checked at load)."""
    count = 0
    for name in data.ENGINES:
        d = data.load(name)
        exprs = [p.when for p in d.parameter] + [c.default for c in d.config]
        for lst in (d.names.special, d.names.drop, d.names.conditional):
            exprs += [r.when for r in lst]
        exprs += [r.when for r in d.output.refuse]
        for src in filter(None, exprs):
            assert src.strip() not in ("always", "never", ""), src
            expr.names(src)
            count += 1
    assert count > 20


@pytest.mark.parametrize(
    "engine, looked_up",
    [
        # vLLM's WeightsMapper: key.replace(substr, new_key, 1) (vllm 0.32.0 utils.py:118-123;
        # its venv maps midlayer.x.midlayer.weight to layers.0.x.midlayer.weight)
        ("vllm", "model.layers.0.mlp.midlayer.weight"),
        # SGLang's legacy rewrite: name.replace(legacy, new), every occurrence
        ("sglang", "model.layers.0.mlp.layers.0.weight"),
    ],
)
def test_a_rewrite_replaces_the_occurrences_its_engine_does(tmp_path, tiny_cfg, engine, looked_up):
    """[[names.rewrite]] ``occurrences``: "first" (vLLM), "all" (SGLang)."""
    import synth
    from conftest import run_cli

    from weightcheck.storage.writer import OutTensor, write_file

    out = tmp_path / "d"
    synth.write_drafter(str(out), tiny_cfg)
    tensors = synth.drafter_tensors(tiny_cfg)
    extra = OutTensor("midlayer.mlp.midlayer.weight", "BF16", (2,), b"\0" * 4)
    write_file(str(out / "model.safetensors"), tensors + [extra], {"format": "pt"})
    r = run_cli("check", out, "--engine", engine, "--json")
    said = [f["message"] + " " + (f["detail"] or "") for f in r.json["findings"]]
    said = [m for m, f in zip(said, r.json["findings"]) if f["subject"] == extra.name]
    assert any(f"looked up as {looked_up}" in m for m in said), said
