"""The docs site (mkdocs.yml, docs/) and the README's promises: short, its test command the one CI
runs, every link resolving, a page with a generated reference for every command, the JSON
reference generated from the report schemas when they exist."""

import importlib.util
import json
import re

import click
import yaml
from conftest import ROOT

from weightcheck import cli


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "ci" / "mkdocs_hooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_is_short():
    # 200 lines of prose and examples, and 10 for the examples' output drawn at 80 columns (the
    # docs runner's width: readable on GitHub without scrolling sideways) instead of unwrapped
    assert len((ROOT / "README.md").read_text().splitlines()) <= 210


def test_ci_runs_the_readmes_test_command_verbatim():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    test_cmd = next(b for b in blocks if "pytest" in b)
    assert test_cmd in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "mkdocs build --strict" in (ROOT / ".ci" / "run").read_text()


def test_every_local_link_in_readme_and_docs_resolves():
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
    assert bad == []


def _nav_pages(nav):
    for item in nav:
        for v in item.values():
            yield from _nav_pages(v) if isinstance(v, list) else [v]


def test_every_command_has_a_page_with_its_generated_reference_in_the_nav():
    cfg = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = set(_nav_pages(cfg["nav"]))
    attrs = {c.name: a for a, c in vars(cli).items() if isinstance(c, click.Command)}
    for name in cli.main.commands:
        page = f"commands/{name}.md"
        assert page in pages, name
        text = (ROOT / "docs" / page).read_text()
        # mkdocs-click finds the command by its attribute in weightcheck.cli
        assert "::: mkdocs-click" in text and f":command: {attrs[name]}\n" in text, name
    assert all((ROOT / "docs" / p).is_file() for p in pages)


def test_the_json_reference_is_rendered_from_schema_files(tmp_path):
    hooks = _hooks()
    assert hooks.render(tmp_path) is None  # no schemas: docs/json.md as written
    schema = {
        "title": "weightcheck.check/1",
        "description": "what check --json prints",
        "type": "object",
        "required": ["ok"],
        "properties": {
            "ok": {"type": "boolean", "description": "no finding is an error"},
            "findings": {"type": "array", "items": {"$ref": "#/$defs/Finding"}},
        },
        "$defs": {
            "Finding": {
                "type": "object",
                "properties": {"severity": {"enum": ["error", "warning", "info"]}},
            }
        },
    }
    (tmp_path / "check.json").write_text(json.dumps(schema))
    page = hooks.render(tmp_path)
    assert "## weightcheck.check/1" in page
    assert "| `ok` | boolean | yes | no finding is an error |" in page
    assert '| `findings[].severity` | `"error"` \\| `"warning"` \\| `"info"` |' in page
