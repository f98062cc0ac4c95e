"""Dialects as data: from whatever names a trainer wrote to weightcheck's canonical names.

A dialect (mappings/dialects/*.toml) is either
  * a **wrapper** — prefixes a trainer puts around the drafter (``draft_model.``, ``module.``,
    ``model.``): :class:`Rename` rules that only strip, or
  * a **layout** — how the drafter's own tensors are named (``midlayer.*`` vs ``layers.0.*``, ...):
    :class:`Rename` rules from its names to canonical ones, plus a detection signature.

``canonicalize(names, config)`` strips wrappers, scores every layout by how many names it explains
(maps onto a canonical name of mappings/architectures/) plus its config signature, picks the best,
and maps each name. A name the chosen layout does not explain but another does is reported with
that other dialect (a mixed checkpoint); a name no dialect explains is ``unknown`` — never dropped.

The spellings themselves live in one table, mappings/names.toml (model/names.py): a layout's
``[[rename]]`` may name an alias there, the aliases of scope "any" (legacy module names such as
``aux_norm_low.``) are read in every layout, and a non-parameter buffer (``rotary_emb.inv_freq``)
is known as what it is — no canonical tensor, not unknown either.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Literal

from weightcheck import mappings, schema
from weightcheck.model import config as config_mod
from weightcheck.model import inventory
from weightcheck.model import names as names_mod
from weightcheck.record import record


@record(frozen=True)
class Rename:
    """One rename, in the spirit of vLLM's WeightsMapper: exact name, prefix or regex -> ``to``.

    ``to=None`` means the name is dropped on purpose (never used for canonicalization: there a
    name is either explained or reported unknown).
    """

    exact: str | None = None
    prefix: str | None = None
    regex: str | None = None
    to: str | None = ""
    cite: str = ""

    def apply(self, name: str) -> str | None | bool:
        """The new name, None if dropped, or False if this rule does not match."""
        if self.exact is not None:
            return self.to if name == self.exact else False
        if self.prefix is not None:
            return (
                (None if self.to is None else self.to + name[len(self.prefix) :])
                if name.startswith(self.prefix)
                else False
            )
        if self.regex is not None:
            m = re.search(self.regex, name)
            if not m:
                return False
            return None if self.to is None else re.sub(self.regex, self.to, name, count=1)
        return False

    def inverse(self) -> "Rename":
        if self.exact is not None:
            return Rename(exact=self.to, to=self.exact, cite=self.cite)
        if self.prefix is not None:
            return Rename(prefix=self.to, to=self.prefix, cite=self.cite)
        raise ValueError("a regex rename has no inverse")


def apply_renames(rules, name: str) -> str | None:
    """The first matching rule decides; no match leaves the name as it is."""
    for r in rules:
        out = r.apply(name)
        if out is not False:
            return out
    return name


@record(frozen=True)
class Dialect:
    name: str
    kind: Literal["layout", "wrapper"]
    description: str
    aliases: tuple[str, ...] = ()
    tensor_patterns: tuple[str, ...] = ()
    config_keys: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    strip: tuple[Rename, ...] = ()
    renames: tuple[Rename, ...] = ()
    source: str = ""  # the mapping file
    aux_convention: str | None = None  # engine whose aux-id convention this trainer's ids follow

    def to_canonical(self, name: str) -> str | None:
        return apply_renames(self.renames, name)

    def from_canonical(self, canonical: str) -> str:
        out = apply_renames([r.inverse() for r in self.renames], canonical)
        return canonical if out is None else out


def _check(data: schema.DialectFile) -> None:
    for i, r in enumerate(data.rename):
        given = [k for k in ("exact", "prefix", "regex", "alias") if getattr(r, k) is not None]
        if len(given) != 1:
            raise mappings.Bad(f"rename[{i}]", "needs exactly one of exact, prefix, regex, alias")
        if r.alias is not None:
            if names_mod.alias(r.alias) is None:
                raise mappings.Bad(f"rename[{i}].alias", "no such alias in mappings/names.toml")
            if r.to is not None:
                raise mappings.Bad(f"rename[{i}].to", "an alias's canonical name is the table's")
        elif r.to is None:
            raise mappings.Bad(f"rename[{i}]", "needs `to`")


def _rename(r: schema.RenameRule) -> Rename:
    """A [[rename]] rule; an alias of mappings/names.toml as its written -> canonical spelling."""
    if r.alias is None:
        return Rename(exact=r.exact, prefix=r.prefix, regex=r.regex, to=r.to, cite=r.cite)
    a = names_mod.alias(r.alias)
    cite = r.cite or f"mappings/names.toml: {a.origin}"
    if a.match == "exact":
        return Rename(exact=a.written, to=a.canonical, cite=cite)
    return Rename(prefix=a.written, to=a.canonical, cite=cite)


def dialect_from_file(data: schema.DialectFile, where: str) -> Dialect:
    d, det = data.dialect, data.detect
    return Dialect(
        name=d.name,
        kind=d.kind,
        description=d.description,
        aliases=d.aliases,
        tensor_patterns=det.tensor_patterns,
        config_keys=det.config_keys,
        architectures=det.architectures,
        strip=tuple(Rename(prefix=r.prefix, to="", cite=r.cite) for r in data.strip),
        renames=tuple(_rename(r) for r in data.rename),
        source=where,
        aux_convention=d.aux_convention,
    )


def user_dialects(path: str | None) -> tuple[Dialect, ...]:
    """``--mapping FILE``: the user's own dialect file, read and validated (none: ``()``)."""
    if not path:
        return ()
    return (dialect_from_data(mappings.load_toml_file(path), str(path)),)


def dialect_from_data(data: dict, where: str) -> Dialect:
    """A dialect file's parsed TOML (a user's ``--mapping`` file), validated: an unknown key or
    value is one line naming ``where``, the key and what is allowed."""
    return dialect_from_file(mappings.build(schema.DialectFile, data, where, _check), where)


@mappings.memo
def bundled() -> tuple[Dialect, ...]:
    return tuple(
        dialect_from_data(mappings.load(f"dialects/{f}"), mappings.where(f"dialects/{f}"))
        for f in mappings.list_dir("dialects")
    )


def by_name(name: str, extra: tuple[Dialect, ...] = ()) -> Dialect:
    for d in extra + bundled():
        if name == d.name or name in d.aliases:
            return d
    raise KeyError(name)


@record
class Naming:
    """The outcome of canonicalization for one checkpoint."""

    dialect: str | None  # the chosen layout dialect
    wrappers: list[str] = field(default_factory=list)  # e.g. ["training:draft_model."]
    evidence: list[str] = field(default_factory=list)
    canonical: dict[str, str | None] = field(default_factory=dict)  # source name -> canonical
    via: dict[str, str] = field(default_factory=dict)  # source name -> dialect that explained it
    unknown: list[str] = field(default_factory=list)
    foreign: dict[str, str] = field(default_factory=dict)  # name -> other dialect that explains it
    duplicates: dict[str, list[str]] = field(default_factory=dict)  # canonical -> source names
    # name -> what the non-parameter buffer holds (mappings/names.toml [[buffer]]): no canonical
    # tensor, not unknown; every engine drops it
    buffers: dict[str, str] = field(default_factory=dict)
    # name -> the legacy spelling (mappings/names.toml [[alias]], scope "any") it was read through
    legacy: dict[str, str] = field(default_factory=dict)


def _strip_wrappers(name: str, dialects) -> tuple[str, list[tuple[str, str]]]:
    used = []
    changed = True
    while changed:
        changed = False
        for d in dialects:
            for r in d.strip:
                if name.startswith(r.prefix) and len(name) > len(r.prefix):
                    name = name[len(r.prefix) :]
                    used.append((d.name, r.prefix))
                    changed = True
    return name, used


def _score(layouts, names, stripped: dict, config: dict, known) -> tuple[dict, dict]:
    """Each layout's (names it explains, evidence count) and its evidence, by name."""
    arch_names = config.get("architectures") or []
    arch0 = arch_names[0] if isinstance(arch_names, list) and arch_names else None
    scores = {}
    evidence = {}
    for d in layouts:
        ev = []
        pattern_hits = {
            p: sum(1 for n in names if re.search(p, n) or re.search(p, stripped[n]))
            for p in d.tensor_patterns
        }
        # a name counts once for a layout that maps it to a known canonical name, by renaming it
        # or because it carries one of the layout's own patterns (a name every layout leaves
        # as it is, such as fc.weight, is evidence for none)
        claimed = 0
        for n in names:
            c = d.to_canonical(stripped[n])
            if c in known and (
                c != stripped[n]
                or any(re.search(p, n) or re.search(p, stripped[n]) for p in d.tensor_patterns)
            ):
                claimed += 1
        for p, c in pattern_hits.items():
            if c:
                ev.append(f"{c} tensor name(s) match {p}")
        for k in d.config_keys:  # "a.b" looks inside object a
            if config_mod.lookup(config, k) is not config_mod._MISSING:
                ev.append(f"config has `{k}`")
        if arch0 in d.architectures:
            ev.append(f"config architectures[0] is {arch0}")
        scores[d.name] = (claimed, len(ev))
        evidence[d.name] = ev
    return scores, evidence


def canonicalize(names, config: dict | None = None, extra: tuple[Dialect, ...] = ()) -> Naming:
    config = config or {}
    dialects = extra + bundled()
    known = inventory.all_canonical_names()
    layouts = [d for d in dialects if d.kind == "layout"]
    # strip wrappers (training prefixes, HF-style model., ModelOpt eagle_module.) from every name;
    # a layout may own a strip rule too (ModelOpt), which is then also evidence for it
    stripped: dict[str, str] = {}
    wrapper_counts: dict[tuple[str, str], int] = {}
    for n in names:
        s, used = _strip_wrappers(n, dialects)
        stripped[n] = s
        for u in used:
            wrapper_counts[u] = wrapper_counts.get(u, 0) + 1

    scores, evidence = _score(layouts, names, stripped, config, known)
    best = max(layouts, key=lambda d: scores[d.name]) if layouts else None
    if best is not None and scores[best.name] == (0, 0):
        # nothing points anywhere: names are either canonical already or unknown
        best = by_name("specforge", extra) if any(d.name == "specforge" for d in dialects) else best

    out = Naming(dialect=best.name if best else None)
    out.evidence = list(evidence.get(best.name, [])) if best else []
    for (dname, prefix), c in sorted(wrapper_counts.items()):
        if dname != (best.name if best else None):
            out.wrappers.append(f"{dname}:{prefix}")
        out.evidence.append(f"{c} tensor name(s) carry the prefix `{prefix}` ({dname})")

    for n in names:
        s = stripped[n]
        c = best.to_canonical(s) if best else s
        if c in known:
            out.canonical[n] = c
            out.via[n] = best.name
            continue
        legacy = names_mod.any_layout(s)
        c = (best.to_canonical(legacy[0]) if best else legacy[0]) if legacy else None
        if c in known:  # a legacy spelling every layout reads (aux_norm_low. = fc_norm.0.)
            out.canonical[n] = c
            out.via[n] = best.name if best else "names"
            out.legacy[n] = legacy[1].written
            continue
        buffer = names_mod.buffer_of(s)
        if buffer is not None:  # a non-parameter buffer: known as what it is
            out.canonical[n] = None
            out.buffers[n] = buffer.what
            continue
        # the other layout that best fits the whole checkpoint first (ties: file order)
        for d in sorted(layouts, key=lambda d: scores[d.name], reverse=True):
            if d is best:
                continue
            c2 = d.to_canonical(s)
            if c2 in known and c2 != s:
                out.canonical[n] = c2
                out.via[n] = d.name
                out.foreign[n] = d.name
                break
        else:
            out.canonical[n] = None
            out.unknown.append(n)
    seen: dict[str, list[str]] = {}
    for n, c in out.canonical.items():
        if c is not None:
            seen.setdefault(c, []).append(n)
    out.duplicates = {c: ns for c, ns in seen.items() if len(ns) > 1}
    return out
