"""mkdocs hooks (mkdocs.yml `hooks:`): the JSON reference page generated from the typed reports.

When the package ships JSON Schema files (``weightcheck/schemas/*.json``, one per report), the
page docs/json.md is replaced, in the built site, by a reference rendered from them: for each
schema its title and description, then every property (nested objects and arrays of objects
flattened to dotted paths) with its type, whether it is required and its description. Until those
files exist, the page is docs/json.md as written. ``python ci/mkdocs_hooks.py`` prints the
rendered page.
"""

from __future__ import annotations

import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "weightcheck" / "schemas"


def _type(s: dict) -> str:
    if "$ref" in s:
        return "object"
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    for key in ("anyOf", "oneOf"):
        if key in s:
            return " or ".join(_type(x) for x in s[key])
    t = s.get("type", "any")
    if isinstance(t, list):
        return " or ".join(t)
    if t == "array" and isinstance(s.get("items"), dict):
        return f"array of {_type(s['items'])}"
    return t


def _cell(text) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _rows(s: dict, defs: dict, prefix: str = "", seen: tuple = ()) -> list[str]:
    """One row per property, nested objects flattened to dotted paths. A type that holds itself
    (a finding's ``explained`` findings) is listed once: its second appearance names the path
    where its keys are."""
    rows = []
    s = _resolve(s, defs)
    required = set(s.get("required", []))
    for name, sub in (s.get("properties") or {}).items():
        ref = _ref(sub)
        sub = _resolve(sub, defs)
        path = f"{prefix}{name}"
        req = "yes" if name in required else ""
        is_array = sub.get("type") == "array"
        inner_ref = _ref(sub.get("items")) if is_array else ref
        inner = _resolve(sub.get("items"), defs) if is_array else sub
        if inner_ref is not None and inner_ref in dict(seen):
            note = f"(each as `{dict(seen)[inner_ref]}`)"
            rows.append(
                f"| `{path}` | {_type(sub)} | {req} | {_cell(sub.get('description'))} {note} |"
            )
            continue
        rows.append(f"| `{path}` | {_type(sub)} | {req} | {_cell(sub.get('description'))} |")
        if isinstance(inner, dict) and inner.get("properties"):
            mark = seen + (((inner_ref, path),) if inner_ref is not None else ())
            rows += _rows(inner, defs, f"{path}[]." if is_array else f"{path}.", mark)
    return rows


def _ref(s) -> str | None:
    """The definition ``s`` points to, also through ``anyOf: [X, null]``."""
    if not isinstance(s, dict):
        return None
    if "$ref" in s:
        return s["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        refs = [_ref(x) for x in s.get(key, []) if x.get("type") != "null"]
        if len(refs) == 1:
            return refs[0]
    return None


def _resolve(s, defs: dict):
    if isinstance(s, dict) and "$ref" in s:
        return defs.get(s["$ref"].rsplit("/", 1)[-1], s)
    if isinstance(s, dict):
        for key in ("anyOf", "oneOf"):
            alts = [x for x in s.get(key, []) if x.get("type") != "null"]
            if len(alts) == 1 and "$ref" in alts[0]:
                target = defs.get(alts[0]["$ref"].rsplit("/", 1)[-1])
                if target is not None:
                    return {
                        **target,
                        "description": s.get("description") or target.get("description"),
                    }
    return s


def render(folder: pathlib.Path = SCHEMAS) -> str | None:
    """The JSON reference page from the schema files in ``folder``; None when there are none."""
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        return None
    out = [
        "# JSON reference",
        "",
        "Generated from the JSON Schema files the package ships (`weightcheck/schemas/`), the",
        "typed reports' own description: every `--format json` output names its schema in",
        '`"schema"`.',
        "",
    ]
    for f in files:
        s = json.loads(f.read_text())
        defs = {**s.get("definitions", {}), **s.get("$defs", {})}
        out += [f"## {s.get('title') or f.stem}", "", f"`{f.name}`", ""]
        if s.get("description"):
            out += [_cell(s["description"]), ""]
        out += ["| key | type | required | meaning |", "|---|---|---|---|", *_rows(s, defs), ""]
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "json.md":
        return render() or markdown
    return markdown


if __name__ == "__main__":
    print(render() or "no schema files under weightcheck/schemas/: docs/json.md is used as written")
