"""Rendering reports: tabulate tables for the terminal, JSON, and Markdown.

Commands build JSON-able dicts; this module only formats them.
"""

from __future__ import annotations

import json


def tabulate(*args, **kwargs) -> str:
    """``tabulate.tabulate``, imported when a table is drawn: the import takes ~35 ms (it pulls in
    wcwidth and importlib.metadata), and convert's report after a write draws none."""
    from tabulate import tabulate as draw

    return draw(*args, **kwargs)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return str(n)


def human_count(n: int) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)


def shape_str(shape) -> str:
    return "?" if shape is None else "[" + ", ".join(str(s) for s in shape) + "]"


def _finite(o):
    """Strict JSON has no NaN/Infinity: write them as strings."""
    if isinstance(o, float) and (o != o or o in (float("inf"), float("-inf"))):
        return str(o)
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def to_json(report: dict) -> str:
    return json.dumps(_finite(report), indent=2, sort_keys=False, default=str, allow_nan=False)


def value_str(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _source_line(src: dict) -> str:
    rev = ""
    if src["kind"] == "hub":
        rev = f" @ {src['revision']} (commit {src['commit']})"
    return f"{src['location']}{rev} [{src['kind']}, {src['layout']}]"


def inspect_text(r: dict, fmt: str = "simple") -> str:
    from weightcheck.commands.inspect import KEY_FIELDS

    md = fmt == "github"
    out = []
    if md:
        out.append(f"## weightcheck inspect `{r['source']['spec']}`\n")
    lines = [
        ("source", _source_line(r["source"])),
        (
            "dialect",
            f"{r['dialect']['name']}"
            + (
                f" + wrapper {', '.join(r['dialect']['wrappers'])}"
                if r["dialect"]["wrappers"]
                else ""
            )
            + (f" ({'; '.join(r['dialect']['evidence'])})" if r["dialect"]["evidence"] else ""),
        ),
        ("architecture", f"{r['architecture']['name'] or '-'} ({r['architecture']['evidence']})"),
    ]
    if r.get("looks_like_target"):
        lines.append(
            ("warning", f"this looks like a target model, not a drafter: {r['looks_like_target']}")
        )
    out.append(
        tabulate(lines, headers=["", ""] if md else (), tablefmt="github" if md else "plain")
    )
    out.append("")
    norm, prov = r["config"]["normalized"], r["config"]["provenance"]
    rows = [(k, value_str(norm.get(k)), prov.get(k, "")) for k in KEY_FIELDS]
    out.append(tabulate(rows, headers=["config", "value", "from"], tablefmt=fmt))
    out.append("")
    # "=" where the name already is canonical, so renamed tensors stand out
    trows = [
        (
            t["name"],
            "=" if t["canonical"] == t["name"] else (t["canonical"] or "?"),
            shape_str(t["shape"]),
            t["dtype"],
            human_count(t["parameters"]),
            human_bytes(t["bytes"]),
            t["status"],
        )
        for t in r["tensors"]
    ]
    out.append(
        tabulate(
            trows,
            headers=["tensor", "canonical", "shape", "dtype", "params", "bytes", "status"],
            tablefmt=fmt,
        )
    )
    tot = r["totals"]
    out.append("")
    out.append(
        f"{tot['tensors']} tensors, {human_count(tot['parameters'])} parameters "
        f"({tot['parameters']}), {human_bytes(tot['bytes'])}"
    )
    for m in r["missing"]:
        out.append(
            f"missing ({m['presence']}): {m['canonical']} {shape_str(m['shape'])}"
            + (f" — {m['note']}" if m["note"] else "")
        )
    for n in r["unknown"]:
        out.append(f"unknown: {n} (no dialect in mappings/dialects explains this name)")
    for n in r["config"]["problems"]:
        out.append(f"config: {n}")
    for n in r["notes"]:
        out.append(f"note: {n}")
    return "\n".join(out)


def compare_text(r: dict, fmt: str = "simple") -> str:
    md = fmt == "github"
    out = []
    a, b = r["a"], r["b"]
    if md:
        out.append("## weightcheck compare\n")
    rows = [
        ("A", _source_line(a["source"]), a["dialect"], a["architecture"]),
        ("B", _source_line(b["source"]), b["dialect"], b["architecture"]),
    ]
    out.append(tabulate(rows, headers=["", "source", "dialect", "architecture"], tablefmt=fmt))
    out.append("")
    verdict = r["verdict"].upper()
    out.append(f"**verdict: {verdict}**" if md else f"verdict: {verdict}")
    for reason in r["reasons"]:
        out.append(f"- {reason}" if md else f"  reason: {reason}")
    if r["strict"] and r["strict_failures"]:
        out.append("strict mode fails on:")
    for s in r["strict_failures"]:
        out.append(f"- {s}" if md else f"  {'strict' if r['strict'] else 'note'}: {s}")
    out.append("")
    if r["only_in_a"] or r["only_in_b"]:
        rows = [(t["canonical"], t["name"], "", t["presence"] or "-") for t in r["only_in_a"]] + [
            (t["canonical"], "", t["name"], t["presence"] or "-") for t in r["only_in_b"]
        ]
        out.append(tabulate(rows, headers=["only in one", "A", "B", "presence"], tablefmt=fmt))
        out.append("")
    if r["shape_mismatches"]:
        rows = [
            (m["canonical"], shape_str(m["a"]), shape_str(m["b"])) for m in r["shape_mismatches"]
        ]
        out.append(tabulate(rows, headers=["shape mismatch", "A", "B"], tablefmt=fmt))
        out.append("")
    if r["dtype_mismatches"]:
        rows = [(m["canonical"], m["a"], m["b"]) for m in r["dtype_mismatches"]]
        out.append(tabulate(rows, headers=["dtype mismatch", "A", "B"], tablefmt=fmt))
        out.append("")
    if r["config_differences"]:
        rows = [
            (d["field"], d["category"], value_str(d["a"]), value_str(d["b"]))
            for d in sorted(
                r["config_differences"],
                key=lambda d: (
                    ["architecture", "serving", "informational"].index(d["category"])
                    if d["category"] in ("architecture", "serving", "informational")
                    else 3,
                    d["field"],
                ),
            )
        ]
        out.append(tabulate(rows, headers=["config field", "category", "A", "B"], tablefmt=fmt))
        out.append("")
    if "values" in r:
        rows = []
        for name, v in r["values"].items():
            if "error" in v:
                rows.append((name, "-", "-", "-", v["error"]))
                continue
            rows.append(
                (
                    name,
                    f"{v['max_abs_diff']:.3g}",
                    f"{v['rel_l2']:.3g}",
                    f"{v['cosine']:.6f}",
                    "yes" if v["bytes_equal"] else "no",
                )
            )
        out.append(
            tabulate(
                rows,
                headers=["tensor", "max |a-b|", "rel L2", "cosine", "bytes equal"],
                tablefmt=fmt,
            )
        )
        out.append("")
    by = r["bytes"]
    out.append(
        f"{len(r['tensors'])} paired tensors: {by['equal']} byte-identical, {by['different']} "
        f"different, {by['not_compared']} not compared"
    )
    for n in r["notes"]:
        out.append(f"note: {n}")
    return "\n".join(out)


def check_text(r: dict, fmt: str = "simple", explain: bool = False) -> str:
    md = fmt == "github"
    out = []
    if md:
        out.append(f"## weightcheck check `{r['source']['spec']}`\n")
    head = [
        ("source", _source_line(r["source"])),
        ("dialect", r["dialect"]),
        ("architecture", r["architecture"] or "-"),
    ]
    if r["engine"]:
        head.append(
            (
                "engine",
                f"{r['engine']['name']} {r['engine']['version']} (replayed from "
                f"mappings/engines/{r['engine']['name']}.toml)",
            )
        )
    if r["target"]:
        t = r["target"]
        head.append(
            (
                "target",
                f"{t['spec']} ({t['model_type']}, hidden {t['hidden_size']}, vocab "
                f"{t['vocab_size']}, {t['num_hidden_layers']} layers)",
            )
        )
    out.append(tabulate(head, headers=["", ""] if md else (), tablefmt="github" if md else "plain"))
    out.append("")
    if r["findings"]:
        rows = [(f["code"], f["severity"], f["subject"] or "", f["message"]) for f in r["findings"]]
        out.append(
            tabulate(
                rows,
                headers=["code", "severity", "subject", "message"],
                tablefmt=fmt,
                maxcolwidths=[None, None, 40, 90],
            )
        )
        out.append("")
    if explain and r["engine"]:
        e = r["engine"]
        rows = [
            (x["name"], x["engine_name"] or "", x["param"] or "", x["fate"], x["why"])
            for x in e["tensors"]
        ]
        out.append(
            tabulate(
                rows,
                headers=["checkpoint tensor", "looked up as", "engine parameter", "fate", "why"],
                tablefmt=fmt,
                maxcolwidths=[None, None, None, None, 60],
            )
        )
        out.append("")
        rows = [
            (p["param"], p["canonical"], p["state"], ", ".join(p["sources"]), p["note"])
            for p in e["parameters"]
        ]
        out.append(
            tabulate(
                rows,
                headers=["engine parameter", "canonical", "state", "from", "note"],
                tablefmt=fmt,
                maxcolwidths=[None, None, None, 40, 60],
            )
        )
        out.append("")
        rows = [(k, value_str(v["value"]), v["from"]) for k, v in e["config"].items()]
        out.append(
            tabulate(rows, headers=["config the engine reads", "value", "from"], tablefmt=fmt)
        )
        aux = e["aux_layers"]
        out.append("")
        out.append(
            f"aux layer ids: {aux['ids']} (from {aux['from'] or 'nowhere: engine default ' + str(aux['default'])})"
            + (
                f"; capture the outputs of target layers {aux['captures_output_of_layers']}"
                if aux.get("captures_output_of_layers") is not None
                else ""
            )
        )
        out.append("")
    s = r["summary"]
    out.append(
        f"{s['errors']} error(s), {s['warnings']} warning(s), {s['info']} info — {r['conclusion']}"
    )
    return "\n".join(out)


def convert_text(r: dict, dry_run: bool) -> str:
    """The plan (``--dry-run``: every tensor's source, output name, file, dtype, shape), or what
    was written (a summary: the tensor-by-tensor table is the dry run's, and ``--json``'s)."""
    out = [
        f"{'plan' if dry_run else 'converted'}: {r['source']} ({r['source_dialect']}) -> "
        f"{r['out']} [{r['to']}]"
    ]
    if dry_run:
        rows = [
            (
                t["source"] or "-",
                t["output"],
                t["shard"],
                t["dtype"],
                shape_str(t["shape"]),
                t["how"],
            )
            for t in r["tensors"]
        ]
        out.append(
            tabulate(
                rows,
                headers=["source tensor", "output name", "file", "dtype", "shape", "how"],
                tablefmt="simple",
            )
        )
    for c in r["config_changes"]:
        out.append(f"config: {c}")
    for n in r["notes"]:
        out.append(f"note: {n}")
    if dry_run:
        out.append("dry run: nothing written")
        return "\n".join(out)
    w = r["written"]
    how: dict[str, int] = {}
    for t in r["tensors"]:
        how[t["how"]] = how.get(t["how"], 0) + 1
    kinds = ", ".join(f"{n} {_HOW.get(k, k)}" for k, n in sorted(how.items()))
    out.append(
        f"wrote {w['tensors']} tensors ({human_bytes(w['bytes'])}; {kinds}) in "
        f"{', '.join(w['files'])}, config.json, README.md — every byte re-read and verified"
        + (", flushed to disk (--fsync)" if w.get("fsync") else "")
    )
    if w.get("note"):
        out.append(f"note: {w['note']}")
    return "\n".join(out)


_HOW = {
    "copy": "renamed",
    "cast": "cast",
    "pickle": "read from a pickle",
    "embed-from-target": "taken from the target",
    "head-from-target": "gathered from the target",
}
