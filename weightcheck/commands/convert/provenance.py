"""``convert``: how OUT names where it comes from — SRC, the target, the ``--vocab-from`` map —
without a path of the writer's machine: weightcheck's mark (what ``--force`` looks for), the
shards' metadata, a source's label, the model card's origins, the speculators
``verifier.name_or_path``. plan.py fills these into the plan; produce.py and publish.py write
and read them."""

from __future__ import annotations

import os
import re

from weightcheck import __version__
from weightcheck.commands.convert.items import Item, Plan

# weightcheck's mark in every file convert writes, what --force looks for (publish.replaceable):
# a key of each shard's __metadata__, of config.json and of the index's metadata, the value the
# destination layout; and a line of the model card
MARK = "weightcheck_converted_to"
CARD_MARK = (
    "<!-- written by weightcheck convert: --force may replace this file; "
    "delete this line to keep it -->"
)


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def source_label(s) -> str:
    """How an output names its source: a Hub id as the user gave it (the revision is its own
    key), a local source by its folder's name only (no path of the writer's machine)."""
    if s.kind == "hub":
        return s.spec.split("@")[0]
    folder = s.location if s.kind == "folder" else os.path.dirname(s.location)
    name = os.path.basename(os.path.normpath(os.path.abspath(folder)))
    return name if s.kind == "folder" else f"{name}/{os.path.basename(s.location)}"


def public_name(spec: str) -> str:
    """:func:`source_label` of a source known only by the spec it was given as (a ``--vocab-from``
    map file or drafter): a local path by its file or folder name, anything else (a Hub id) as
    given."""
    if os.path.exists(spec):
        return os.path.basename(os.path.normpath(os.path.abspath(spec)))
    return spec


def metadata(p: Plan) -> dict:
    """The shards' safetensors metadata: the source, the version, the mark --force looks for."""
    s = p.src.source
    out = {
        "format": "pt",
        "weightcheck_version": __version__,
        "weightcheck_source": source_label(s),
        "weightcheck_source_revision": s.commit or "",
        MARK: p.to,  # the mark --force looks for (publish.not_replaceable)
    }
    if p.target_family:  # what the aux ids were converted for: a later convert reads it back
        out["weightcheck_target_model_type"] = p.target_family
    return out


def origins(p: Plan) -> list[tuple[str, list[str]]]:
    """Where OUT's tensors come from: each origin once — SRC, each target, the --vocab-from map —
    with what came from it, counted here only (the model card says it; the notes' row counts are
    the same p.reindex numbers). [(origin, [what, ...]), ...], origins that gave nothing left out."""
    kinds: dict[str, list[Item]] = {}
    for it in p.items:
        kinds.setdefault(it.kind, []).append(it)
    mine = []
    if kinds.get("copy"):
        renamed = sum(1 for it in kinds["copy"] if it.out_name != it.src_name)
        mine.append(f"{len(kinds['copy'])} tensor(s) copied byte for byte ({renamed} renamed)")
    if kinds.get("cast"):
        mine.append(f"{len(kinds['cast'])} tensor(s) cast to {kinds['cast'][0].dtype}")
    if kinds.get("pickle"):
        mine.append(f"{len(kinds['pickle'])} tensor(s) read from a pickle")
    r = p.reindex
    if r is not None and r["kept"] + r["moved"]:
        mine.append(
            f"{r['kept'] + r['moved']:,} lm_head row(s) ({r['kept']:,} kept, {r['moved']:,} moved "
            "to the map's order)"
        )
    out = [(f"SRC `{source_label(p.src.source)}`", mine)] if mine else []
    taken: dict[str, list[str]] = {}
    for it in kinds.get("embed-from-target", []):
        taken.setdefault(source_label(p.embed_target.source), []).append(it.out_name)
    for it in kinds.get("head-from-target", []):
        taken.setdefault(source_label(p.head_target.source), []).append(
            f"{it.out_name} ({it.shape[0]:,} rows gathered at the d2t ids)"
        )
    if r is not None and r["from_target"]:
        taken.setdefault(source_label(p.head_target.source), []).append(
            f"{r['from_target']:,} lm_head row(s) SRC's head lacks"
        )
    out += [(f"the target `{name}`", what) for name, what in taken.items()]
    if r is not None:
        maps = [it.out_name for it in kinds.get("vocab-map", [])]
        out.append(
            (
                f"the --vocab-from map `{public_name(r['map'])}`",
                [
                    f"the order of lm_head's {r['draft_tokens']:,} rows"
                    + (f"; {', '.join(maps)}" if maps else "")
                ],
            )
        )
    return out


# what fails on a verifier left empty: speculators' from_pretrained builds the verifier's config
# from it (cite: speculators==0.9.0 speculators/config.py:40-162 VerifierConfig, where
# AutoConfig.from_pretrained(None) raises)
NULL_VERIFIER_FAILS = (
    "speculators 0.9.0's from_pretrained fails on it (AutoConfig.from_pretrained(None))"
)


def verifier_name(p: Plan) -> None:
    """The speculators ``verifier.name_or_path``: ``--verifier`` as given; else a Hub id or
    nothing: a local ``--target`` (relative or absolute) names a folder of this machine only, so
    the target config's own ``_name_or_path`` is used when it is a Hub id, else the field is left
    empty, with a note saying what fails on it."""
    if p.to != "speculators":
        return
    verifier = (p.config.get("speculators_config") or {}).get("verifier")
    if not isinstance(verifier, dict):
        return
    t = p.target.source if p.target is not None else None
    if p.verifier is not None:
        verifier["name_or_path"] = p.verifier
        p.notes.append(f"verifier.name_or_path: {p.verifier} (--verifier)")
        return
    if t is not None and t.kind == "hub":
        verifier["name_or_path"] = t.spec.split("@")[0]
        return
    own = p.target.config.get("_name_or_path") if p.target is not None else None
    if isinstance(own, str) and HUB_ID.fullmatch(own) and not os.path.exists(own):
        verifier["name_or_path"] = own
        p.notes.append(f"verifier.name_or_path: {own} (the target's config names it)")
        return
    if t is None and isinstance(verifier.get("name_or_path"), str):
        return  # SRC's own speculators config names its verifier: kept
    verifier["name_or_path"] = None
    why = (
        f"--target {source_label(t)} is a local folder, not a Hub id"
        if t is not None
        else "no --target or --verifier names the target"
    )
    p.notes.append(
        f"verifier.name_or_path left empty: {why}; {NULL_VERIFIER_FAILS}, while the serving "
        "engines take the target from their own command line: pass --verifier ID_OR_PATH"
    )
