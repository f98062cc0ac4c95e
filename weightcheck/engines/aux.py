"""Aux layer ids: which convention a drafter's ids are written in, which target layers they
capture in an engine, and the ids that capture the same layers in another engine.

The conventions are data: ``[[aux_layers.convention]]`` in mappings/engines/<engine>.toml (each
with the target model types it covers, the formula, and the releases it holds for).
"""

from __future__ import annotations

from weightcheck import expr
from weightcheck.engines.data import load, newest, version_key
from weightcheck.engines.data_aux import Convention
from weightcheck.errors import WeightcheckError
from weightcheck.model import dialects

LLAMA = "llama"  # the target family whose convention applies when no other is known


def is_speculators_format(raw: dict) -> bool:
    return isinstance(raw.get("speculators_config"), dict) or "speculators_model_type" in raw


def convention_of(d, num_layers: int | None = None) -> str:
    """The engine whose aux-id convention a drafter's ids are written in (docs/engines.md);
    ``num_layers``: the target's layer count, when known (see :func:`config_convention`)."""
    return config_convention(d.config or {}, d.dialect, num_layers)


def trained_convention(dialect: str | None) -> str | None:
    """The aux-id convention a dialect's trainer writes (`aux_convention` in its mappings file)."""
    try:
        return dialects.by_name(dialect).aux_convention if dialect else None
    except KeyError:
        return None


def _ids_ok(ids) -> bool:
    return isinstance(ids, list) and bool(ids) and all(type(x) is int for x in ids)


def written_places(cfg: dict) -> list[tuple[str, list]]:
    """``[(place, ids)]`` for each place the config writes aux ids in (``eagle_config``: the
    nested ``eagle_config.eagle_aux_hidden_state_layer_ids``; ``top``: the top-level key), the
    drafter's own place first: a speculators-format config's is the top level (speculators writes
    its ids there and nowhere else), every other config's eagle_config (SpecForge and ModelOpt
    write them there; docs/differential.md R32)."""
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    out = [
        (place, ids)
        for place, ids in (
            ("eagle_config", ec.get("eagle_aux_hidden_state_layer_ids")),
            ("top", cfg.get("eagle_aux_hidden_state_layer_ids")),
        )
        if _ids_ok(ids)
    ]
    if is_speculators_format(cfg):
        out.sort(key=lambda p: p[0] != "top")
    return out


def written_ids(cfg: dict) -> list | None:
    """The aux ids the drafter's config writes in its own place (:func:`written_places`)."""
    places = written_places(cfg)
    return places[0][1] if places else None


def place_convention(place: str, ids: list, num_layers: int | None = None) -> str:
    """The convention ids written in ``place`` are in: each place in the convention of the engine
    that reads it — eagle_config is where SGLang reads them (id k = the output of layer k), the
    top level where vLLM and speculators do (k = the output of layer k-1). With the target's
    layer count known, ids that end at it are layer *boundaries* wherever they are written: id L
    can only mean the output of the last layer (see :func:`config_convention`)."""
    if place == "top" or (num_layers and ids and max(ids) == num_layers):
        return "vllm"
    return "sglang"


def config_convention(cfg: dict, dialect: str | None = None, num_layers: int | None = None) -> str:
    """The convention of the ids a config writes in its own place (:func:`written_places`):
    eagle_config ids are SGLang's (SpecForge and ModelOpt nest them there, trained on SGLang's
    captures), top-level ids vLLM's (speculators, trained on vLLM's; and our own ``convert --to
    vllm`` output of a ModelOpt drafter, which keeps ModelOpt's eagle_config keys). A config that
    writes both is read in its own place: a speculators config at the top level, any other in
    eagle_config. So a config that spells each place in its reader's convention (eagle_config
    ``[-1, 0, 1]``, top level ``[0, 1, 2]``: the same layers) is read the same way whichever
    place is taken. Without ids: vLLM's for a speculators-format config, SGLang's otherwise.

    With the target's layer count known, ids that end at it are layer *boundaries*, whatever the
    layout or the dialect: id L can only mean the output of the last layer, which is what the
    boundary convention (vLLM's: id k = the output of layer k-1, id L captured after the loop)
    says and the engines' data record (SGLang's gpt_oss: ``k-1 if max(ids) == L``).

    The config decides, never the tensor names: a SpecForge config over `layers.0.*` names (or a
    ModelOpt export, whose names are speculators') keeps its ids where SGLang reads them, in
    SGLang's convention. (``dialect`` is kept for callers; the names' dialect no longer
    decides.)"""
    places = written_places(cfg)
    if places:
        return place_convention(*places[0], num_layers)
    return "vllm" if is_speculators_format(cfg) else "sglang"


def _conventions(engine: str, version: str, model_type: str) -> Convention | None:
    for c in load(engine).aux_layers.convention:
        if model_type not in c.target_model_types:
            continue
        if c.since is not None and version_key(version) < version_key(c.since):
            continue
        if c.versions is not None and version not in c.versions:
            continue
        return c
    return None


def captured(
    ids: list[int] | None,
    engine: str,
    version: str,
    model_type: str | None,
    num_layers: int | None,
    default: bool = False,
    reach: bool = True,
) -> list[int] | None:
    """The 0-based target layers whose outputs ``ids`` capture in ``engine==version`` for a
    target of ``model_type`` with ``num_layers`` layers; ``default``: the ids are the engine's own
    default, not passed explicitly. None when no convention covers it.

    ``reach=False``: the layers the ids *mean* in that engine's convention, in the order written
    — what a trainer that wrote them in that convention captured (SpecForge reads the target's
    hidden_states by index, every layer's output included), not what the engine's forward loop
    can reach and keeps (sorted, once)."""
    if not ids or not model_type:
        return None
    c = _conventions(engine, version, model_type)
    if c is None:
        return None
    L = num_layers or 0
    if default and c.default_ids_output_of:
        # the engine's own default is not the same as passing those ids explicitly (SGLang
        # captures at the input of [2, L//2, L-3]: outputs of [1, L//2-1, L-4])
        try:
            out = [int(x) for x in expr.evaluate(c.default_ids_output_of, {"L": L})]
        except (expr.ExprError, TypeError, ValueError):
            return None
        return sorted(set(out)) if c.sorted_unique else out
    written = list(ids)  # what the setter reads (SGLang's DeepSeek: the first id as written)
    if reach and (c.sorted_unique or c.capturable):
        # the engine keeps sorted(set(ids)) and captures only the ids its forward loop reaches
        keep = [k for k in ids if _reached(c, k, written, L)]
        ids = sorted(set(keep)) if c.sorted_unique else keep
    out = []
    for k in ids:
        try:
            out.append(int(expr.evaluate(c.captures_output_of, {"k": k, "ids": written, "L": L})))
        except (expr.ExprError, TypeError, ValueError):
            return None
    return out


def _reached(c: Convention, k, ids, L: int) -> bool:
    """Whether id ``k`` reaches a capture point of the family's forward (``capturable``)."""
    try:
        return c.capturable is None or bool(
            expr.evaluate(c.capturable, {"k": k, "ids": list(ids), "L": L})
        )
    except (expr.ExprError, TypeError, IndexError):
        return False


def capture_failure(ids, engine: str, version: str, model_type, num_layers) -> str | None:
    """Why the target's forward raises with these ids in ``engine==version`` (the family's
    ``fails_when``: vLLM's DeepSeek path with id 0), or None."""
    if not ids or not model_type or not num_layers:
        return None
    c = _conventions(engine, version, model_type)
    if c is None or c.fails_when is None:
        return None
    for k in ids:
        try:
            if expr.evaluate(c.fails_when, {"k": k, "L": num_layers}):
                return c.fails_why
        except (expr.ExprError, TypeError):
            continue
    return None


def target_forward(ids, engine: str, version: str, model_type, num_layers) -> dict | None:
    """What the target's own forward does with ``ids`` (already read by a runner; the target's
    default when None): ``slots``, the layer whose output fills each aux slot in order, and
    ``raises``, why the forward itself raises (None: it returns; a slot count fc is not built
    for then fails the drafter's fc, past the target). None when no convention covers it. The
    capture oracle (tests/engine/capture_oracle.py) runs the engines' own code for the same."""
    c = _conventions(engine, version, model_type) if model_type else None
    if c is None or not num_layers:
        return None
    default = ids is None
    if default:
        ids = default_ids(num_layers)
    slots = captured(ids, engine, version, model_type, num_layers, default) or []
    raises = capture_failure(ids, engine, version, model_type, num_layers)
    if raises is None and c.missing_raises and len(slots) != len(ids):
        raises = c.missing
    return {"slots": slots, "raises": raises}


def never_captured(ids, engine: str, version: str, model_type, num_layers) -> list:
    """The ids the family's forward never reaches (``capturable``), and what the engine does then
    is the convention's ``missing``."""
    if not ids or not model_type or not num_layers:
        return []
    c = _conventions(engine, version, model_type)
    if c is None or c.capturable is None:
        return []
    return [k for k in ids if not _reached(c, k, ids, num_layers)]


def convention_for(engine: str, version: str, model_type) -> Convention | None:
    """The capture convention of a target family in ``engine==version`` (None: none known)."""
    return _conventions(engine, version, model_type) if model_type else None


def default_ids(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]  # both engines' default ids


def captured_layers(
    view_, target_model_type: str | None, num_layers: int | None, reach: bool = True
) -> list | None:
    """The target layers an engine view's ids (or the engine's default) capture (``reach``:
    see :func:`captured`)."""
    if view_.aux.get("captures") is False:  # use_aux_hidden_state false: nothing captured
        return None
    ids = view_.aux.get("ids")
    default = ids is None
    if ids is None and num_layers:
        ids = default_ids(num_layers)
    return captured(ids, view_.engine, view_.version, target_model_type, num_layers, default, reach)


def convert_ids(ids, src_engine: str, dst_engine: str, model_type: str, num_layers) -> list:
    """The ids that make ``dst_engine`` capture the same target layers ``src_engine`` captures."""
    if ids is None or src_engine == dst_engine:
        return ids
    L = num_layers or (max(ids) + 2)

    def cap(cand, eng, reach=True):
        version = newest(load(eng))
        fam = model_type if _conventions(eng, version, model_type) else LLAMA
        if reach and capture_failure(cand, eng, version, fam, L):
            return None  # the target's forward raises on them (vLLM's DeepSeek path, id 0)
        return captured(cand, eng, version, fam, L, reach=reach)

    layers = cap(ids, src_engine, reach=False)  # what the ids mean, as the trainer captured them
    if layers is None:
        raise WeightcheckError(
            None, f"no aux-id convention known for target model_type {model_type!r} in {src_engine}"
        )
    for delta in (1, -1, 0):
        cand = [x + delta for x in layers]
        if cap(cand, dst_engine) == layers:
            return cand
    raise WeightcheckError(None, f"cannot express aux layers {layers} in {dst_engine}'s convention")


def target_family(drafter, targets=()) -> tuple[str | None, str]:
    """(model_type, the evidence) of the target a drafter serves, for aux-id conventions: a target
    given on the command line (``--target``, else one named by another option), else the drafter
    config's own model_type when it names a target family other than Llama (SpecForge copies the
    target's, e.g. kimi_k2), else what an earlier ``weightcheck convert`` recorded in the weights'
    metadata, else a speculators verifier architecture. (None, why) when nothing
    says: the caller decides whether the answer depends on it."""
    for t in targets:
        if t is not None and isinstance(t.model_type, str) and t.model_type:
            return t.model_type, f"target {t.source.label}"
    for f in drafter.source.files.values():  # an earlier `weightcheck convert` recorded it
        mt = f.header.metadata.get("weightcheck_target_model_type") if f.header else None
        if mt:
            return mt, f"{f.name} metadata (recorded by weightcheck convert)"
    known = family_model_types()
    cfg = drafter.config or {}
    mt = cfg.get("model_type")
    if isinstance(mt, str) and mt in known and mt != LLAMA:
        return mt, f"the drafter config's model_type {mt!r}"
    sc = cfg.get("speculators_config")
    archs = (sc.get("verifier") or {}).get("architectures") if isinstance(sc, dict) else None
    by_arch = {}
    for fam, arch in load("speculators").output.family_architectures.items():
        by_arch.setdefault(arch, fam)
    for a in archs or []:
        if a in by_arch:
            return by_arch[a], f"the speculators verifier architecture {a}"
    return None, "nothing names the target"


def family_model_types() -> set[str]:
    """Every target model type some engine's aux-id convention covers."""
    known: set[str] = set()
    for e in ("sglang", "vllm"):
        for c in load(e).aux_layers.convention:
            known.update(c.target_model_types)
    return known


def family_representatives() -> dict[str, str]:
    """One model type per distinct aux-id convention (the first each convention lists), for
    asking whether an answer depends on the target family."""
    out: dict[str, str] = {}
    for e in ("sglang", "vllm"):
        for c in load(e).aux_layers.convention:
            types = c.target_model_types
            if types and not any(m in out.values() for m in types):
                out[types[0]] = types[0]
    return out


def conversions_by_family(ids, src_engine: str, dst_engine: str, num_layers) -> dict[str, list]:
    """For each target family with its own convention: the ids ``dst_engine`` needs (families
    whose convention cannot express them are left out)."""
    out = {}
    for fam in family_representatives():
        try:
            out[fam] = convert_ids(ids, src_engine, dst_engine, fam, num_layers)
        except WeightcheckError:
            continue
    return out


def same_layers(ids_a, conv_a: str, ids_b, conv_b: str, family: str | None) -> list | None:
    """The target layers both id lists capture, each read in its own convention, when they are the
    same — for ``family``, or for every family when it is None; else None."""
    if not isinstance(ids_a, list) or not isinstance(ids_b, list) or len(ids_a) != len(ids_b):
        return None
    if not all(type(x) is int for x in ids_a + ids_b):
        return None
    L = max(ids_a + ids_b) + 2
    layers = None
    for f in [family] if family else list(family_representatives()):
        got = []
        for ids, conv in ((ids_a, conv_a), (ids_b, conv_b)):
            version = newest(load(conv))
            g = captured(ids, conv, version, f, L, reach=False)  # what the ids mean
            if g is None and f != LLAMA:
                g = captured(ids, conv, version, LLAMA, L, reach=False)
            got.append(g)
        if got[0] is None or got[0] != got[1]:
            return None
        layers = got[0]
    return layers


def same_aux_layers(field: str, a, b, ids_a, ids_b) -> str | None:
    """A compatibility Equivalence (model/compatibility.py): two drafters' aux ids mean the same when
    each, read in its own convention, captures the same target layers — for the target family the
    drafters name, or for every family when neither names one."""
    if field != "aux_layer_ids":
        return None
    conv_a, conv_b = convention_of(a), convention_of(b)
    fam = target_family(a)[0] or target_family(b)[0]
    layers = same_layers(ids_a, conv_a, ids_b, conv_b, fam)
    if layers is None:
        return None
    return (
        f"same layers, other spelling: both capture the outputs of target layers {layers} "
        f"(A in {conv_a}'s convention, B in {conv_b}'s)"
    )
