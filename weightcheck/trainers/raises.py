"""Where a trainer refuses to start from SRC: each raise on its path, in its order — the training
config it cannot build from, the files it cannot read, the shapes it cannot load, then each
trainer's own load (SpecForge's warm start requires every parameter; speculators' loader and
its config validation) — gated by the trainer's data (mappings/trainers/<name>.toml [load]),
each with the trainer's own words, its citation and the fix. :func:`first_raise` is what
:func:`weightcheck.trainers.replay` asks."""

from __future__ import annotations

from weightcheck import expr
from weightcheck.model import config as config_mod


def holds(src: str | None, symbols: dict) -> bool:
    try:
        return bool(src) and bool(expr.evaluate(src, symbols))
    except (expr.Undefined, ArithmeticError):
        return False


HIDDEN_FIX = (
    "it is a drafter for SpecForge or the engines (weightcheck convert SRC OUT --to vllm), not "
    "for a speculators fine-tune"
)


def _few(names, n=3) -> str:
    names = list(names)
    head = ", ".join(names[:n])
    return head + (f" and {len(names) - n} more" if len(names) > n else "")


def _prefixes(names) -> str:
    """layers.0.* / input_norm.weight: the few families a list of names falls in."""
    fam = []
    for n in names:
        parts = n.split(".")
        if parts[0] in ("draft_model", "module", "model", "eagle_module") and len(parts) > 1:
            f = parts[0] + ".*"
        elif parts[0] == "layers" and len(parts) > 2:
            f = ".".join(parts[:2]) + ".*"
        elif parts[0] == "midlayer":
            f = "midlayer.*"
        else:
            f = n
        if f not in fam:
            fam.append(f)
    return ", ".join(fam[:4]) + (", ..." if len(fam) > 4 else "")


def first_raise(tr, d, cfg, sym, r, allowed, target, training_vocab):
    """(reason, kind, cite, fix) of the first raise on the trainer's path, or Nones: the
    training config, the shapes, then each trainer's own load."""
    f = tr.facts
    for said in (
        _config_raises(tr, d, cfg, f),
        _files_raise(tr, d, r, f),
        _mismatch_raises(tr, r, sym, f),
    ):
        if said is not None:
            return said
    if tr.load.missing == "raises":  # SpecForge: its warm start requires every parameter
        return _specforge_raises(tr, d, r, sym, allowed, training_vocab, f)
    return _speculators_raises(tr, d, r, cfg, sym, target, training_vocab, f)


def _config_raises(tr, d, cfg, f):
    """The training config the trainer cannot build from (and, for speculators, SRC's own)."""
    archs = cfg.get("architectures")
    if not tr.load.requires_speculators_config:
        if not (isinstance(archs, list) and len(archs) == 1 and archs[0] in tr.architectures):
            return (
                f"its EAGLE-3 strategy builds {tr.architectures[0]} only; the training config "
                f"names {archs!r}",
                "architecture",
                f["cite_architectures"],
                None,
            )
    else:
        if "speculators_model_type" not in cfg:
            return (
                "the training config is no speculators config (no speculators_model_type): "
                "speculators builds its drafter from one only",
                "config",
                f["cite_config"],
                "weightcheck convert SRC OUT --to speculators --verifier TARGET first",
            )
        if d.source.config is None or "speculators_model_type" not in d.source.config:
            said = "has no config.json" if d.source.config is None else "is no speculators config"
            return (
                f"SRC's config {said}: --from-pretrained reads SRC's own speculators config "
                "(only DFlash checkpoints are converted on the fly)",
                "config",
                f["cite_config"],
                "weightcheck convert SRC OUT --to speculators --verifier TARGET first",
            )
        return _speculators_config_invalid(d.source.config, f, tr.load)
    return None


def _speculators_config_invalid(cfg: dict, f, load):
    """speculators' config classes validate SRC's config as they build it: transformer_layer_config
    is transformers' strict dataclass (a field of the wrong JSON type or null where the class takes
    no None raises; layer_types one per layer, the class's default layer count when none is
    given), the top level is pydantic's, lax ("128" is 128); norm_before_fc and fc_norm not both."""
    tl = cfg.get("transformer_layer_config")
    tl = tl if isinstance(tl, dict) else {}
    skip = set(load.not_validated)
    bad = [f"transformer_layer_config.{k}" for k, v in tl.items() if _strict_problem(k, v)]
    bad += [
        k
        for k, kind in load.top_types.items()
        if k in cfg and cfg[k] is not None and not _lax_ok(kind, cfg[k])
    ]
    bad = [b for b in bad if b.rsplit(".", 1)[-1] not in skip]
    if bad:
        return (
            f"its config classes validate every field: {', '.join(bad)} of the wrong JSON type",
            "config",
            f["cite_validation"],
            None,
        )
    null = [k for k, kind in load.top_types.items() if k in cfg and not _lax_ok(kind, cfg[k])]
    null += [
        f"transformer_layer_config.{k}" for k in load.layer_not_null if k in tl and tl[k] is None
    ]
    if null:
        return (
            f"its config classes validate every field: {', '.join(null)} is null where the class "
            "takes no None",
            "config",
            f["cite_layer_class"],
            None,
        )
    types = tl.get("layer_types")
    n = tl.get("num_hidden_layers", load.layer_defaults.get("num_hidden_layers"))
    if isinstance(types, list) and type(n) is int and len(types) != n:
        return (
            f"num_hidden_layers ({n}) must equal the number of layer_types ({len(types)}): "
            "transformers' validate_layer_type raises",
            "config",
            f["cite_layer_types"],
            f"write {n} layer_types in transformer_layer_config",
        )
    if _lax_true(cfg.get("norm_before_fc")) and _lax_true(cfg.get("fc_norm")):
        return (
            "norm_before_fc and fc_norm are both true: its config class refuses them together",
            "config",
            f["cite_validation"],
            None,
        )
    return None


_LAX_TRUE = {"1", "on", "t", "true", "y", "yes"}
_LAX_FALSE = {"0", "off", "f", "false", "n", "no"}


def _lax_true(v) -> bool:
    return v is True or v == 1 or (isinstance(v, str) and v.strip().lower() in _LAX_TRUE)


def _lax_int(v) -> bool:
    if isinstance(v, (bool, int)):
        return True
    if isinstance(v, float):
        return v.is_integer()
    return isinstance(v, str) and v.strip().lstrip("+-").isdigit()


def _lax_ok(kind: str, v) -> bool:
    """pydantic's lax validation of ``v`` for a field of ``kind`` (run in the speculators venv:
    "128", 128.0 and True are ints; "true", "yes", 1 are bools; a str list takes strings only;
    null only for ``_or_null``)."""
    if v is None:
        return kind.endswith("_or_null")
    base = kind.removesuffix("_or_null")
    if base == "int":
        return _lax_int(v)
    if base == "bool":
        return (
            isinstance(v, bool)
            or v in (0, 1)
            or (isinstance(v, str) and v.strip().lower() in _LAX_TRUE | _LAX_FALSE)
        )
    if base == "str_list":  # pydantic coerces nothing to a str: [7] and [true] fail
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    return isinstance(v, list) and all(_lax_int(x) for x in v)


def lax_values(top_types: dict, cfg: dict) -> dict:
    """``cfg`` with the top-level fields pydantic validates (``top_types``) as it coerces them in
    lax mode: "128" and 128.0 are 128, "true"/"yes"/1 are True (the values the trainer's model is
    built with); a value it would refuse stays as written (first_raise says so)."""
    out = dict(cfg)
    for k, kind in top_types.items():
        v = cfg.get(k)
        if v is None or not _lax_ok(kind, v):
            continue
        base = kind.removesuffix("_or_null")
        if base == "int" and not isinstance(v, bool) and type(v) is not int:
            out[k] = int(float(v)) if isinstance(v, float) else int(v.strip())
        elif base == "int" and isinstance(v, bool):
            out[k] = int(v)
        elif base == "bool" and not isinstance(v, bool):
            out[k] = _lax_true(v)
        elif base == "int_list":
            out[k] = [int(float(x)) if isinstance(x, float) else int(x) for x in v]
    return out


def _strict_problem(key: str, v) -> bool:
    """transformers' strict dataclass check of a transformer_layer_config field, by the JSON type
    mappings/config.toml gives it (a null is layer_not_null's check)."""
    path = f"transformer_layer_config.{key}"
    return v is not None and config_mod.path_type_problem(path, v) is not None


def _files_raise(tr, d, r, f):
    """A pretrained SRC whose folder has none of the weight files transformers' from_pretrained
    looks for (shards without their index, a weights file of another name): OSError."""
    names = tr.load.weight_files
    if r.source_kind != "pretrained" or not names or d.source.kind not in ("folder", "hub"):
        return None
    held = set(d.source.files)
    if d.source.index_file:
        held.add(d.source.index_file.replace("\\", "/").rsplit("/", 1)[-1])
    if held & set(names):
        return None
    return (
        f"its loader (transformers' from_pretrained) reads a folder's {', '.join(names)} only; "
        f"SRC has {', '.join(sorted(held)) or 'none of them'}: OSError, no file named "
        f"{names[0]}",
        "files",
        f["cite_weight_files"],
        f"weightcheck convert SRC OUT --to {'speculators' if tr.name == 'speculators' else 'sglang'}"
        " first: it writes model.safetensors, or shards with their index",
    )


def _mismatch_raises(tr, r, sym, f):
    """A parameter of another shape in SRC than the trainer builds: its loader raises."""
    if not r.mismatched or tr.load.shape_mismatch != "raises":
        return None
    equal = tr.load.requires_equal_hidden
    hold = speculators_cannot_hold_reason(r.mismatched, sym) if equal else None
    if hold:
        return hold, "hidden", f["cite_hidden"], HIDDEN_FIX
    n, a, b = r.mismatched[0]
    more = f" (and {len(r.mismatched) - 1} more)" if len(r.mismatched) > 1 else ""
    return (
        f"{n}: {list(a)} in SRC, it builds {list(b)}{more}: its loader raises on a size mismatch",
        "mismatch",
        f["cite_shape"],
        None,
    )


def _specforge_raises(tr, d, r, sym, allowed, training_vocab, f):
    """SpecForge's own load: the checkpoint's strategy, names it does not know, parameters left
    missing (it never renames), a vocabulary map of another size."""
    if r.source_kind == "training_state":
        strategy = _state_meta(d).get("strategy")
        want = tr.load.strategy
        if strategy is not None and strategy != want:
            return (
                f"the checkpoint was written by strategy {strategy!r}; this run trains {want!r}",
                "strategy",
                f["cite_state"],
                None,
            )
    fix = None
    split = r.unsplit()  # SRC's fused tensors whose parts are its names: never split
    if _renamable(d, r.missing):
        extras = [
            t.name
            for t in d.tensors
            if t.canonical not in r.params and not _parts_held(d, t.canonical, r.params)
        ]
        fix = (
            f"{tr.load.convert} first: it writes the midlayer.* names SpecForge loads fully"
            + (" (a fused tensor's parts split)" if r.fused else "")
            if not extras
            else f"its model has no place for {_few(extras)} under any name: SpecForge "
            "cannot fine-tune this drafter as it is"
        )
    strict = tr.load.training_state_unexpected == "raises"
    if r.source_kind == "training_state" and r.unexpected and strict:
        return (
            f"{len(r.unexpected)} of SRC's names are not its own ({_prefixes(r.unexpected)}): "
            "a SpecForge checkpoint is loaded by name, never renamed, and any unexpected "
            "name raises",
            "unexpected",
            f["cite_unexpected"],
            fix,
        )
    required = [n for n in r.missing if n not in allowed]
    parts = {p for ps in split.values() for p in ps}
    if required and set(required) <= parts and set(r.unexpected) <= set(split) | {"d2t", "t2d"}:
        return (
            f"its warm start loads by name and never splits a fused tensor: SRC's "
            f"{', '.join(split)} {'is not its name' if len(split) == 1 else 'are not its names'}"
            f", so its {', '.join(n.split('.')[-2] for n in required)} stay missing and it raises",
            "fused",
            f["cite_fused"],
            f"{tr.load.convert} first: it writes each fused tensor's parts split, under the "
            "names SpecForge loads",
        )
    if required:
        why = (
            f"its warm start loads by Hugging Face names and never renames: "
            f"{len(r.unexpected)} of SRC's names are not its own ({_prefixes(r.unexpected)}) "
            "and "
            if r.unexpected
            else "its warm start requires every parameter and buffer but the embedding: "
        )
        return (
            f"{why}{len(required)} of its own stay missing ({_prefixes(required)}), so it raises",
            "missing",
            f["cite_missing"],
            fix,
        )
    if training_vocab is not None and holds("Vd != V", sym):
        if training_vocab.size != sym.get("Vd"):
            return (
                f"the run's map has {training_vocab.size} draft ids, the model "
                f"{sym.get('Vd')}: load_vocab_mapping's copy raises",
                "vocab",
                "specforge==0.2.0 specforge/modeling/draft/base.py:193-206 load_vocab_mapping",
                None,
            )
    return None, None, None, None


def _speculators_raises(tr, d, r, cfg, sym, target, training_vocab, f):
    """speculators' own load: a vocabulary map that does not fit, no verifier, a verifier of
    another hidden size than the draft's."""
    if training_vocab is not None and holds("Vd != V", sym):
        if training_vocab.size != sym.get("Vd") or (
            training_vocab.vocab is not None and training_vocab.vocab != sym.get("V")
        ):
            return (
                f"the run's map ({training_vocab.size} draft ids over {training_vocab.vocab} "
                f"tokens) does not fit draft_vocab_size {sym.get('Vd')} / vocab_size "
                f"{sym.get('V')}: load_vocab_mappings raises",
                "vocab",
                "speculators==0.9.0 speculators/model.py:104-119 DraftVocabMixin.load_vocab_mappings",
                None,
            )
    verifier = _verifier(d.source.config) if d.source.config else _verifier(cfg)
    if not verifier and tr.load.requires_verifier:
        return (
            "speculators_config.verifier.name_or_path is null: load_verifier_weights calls "
            "AutoConfig.from_pretrained(None)",
            "verifier",
            f["cite_verifier"],
            "weightcheck convert SRC OUT --to speculators --verifier TARGET first",
        )
    if r.params.get("t2d") == "init":  # a reduced vocabulary whose t2d nothing set
        return (
            "t2d was never set (SRC has none under speculators' own names, and no map was given): "
            "load_verifier_weights takes the verifier's head rows at t2d and raises",
            "vocab",
            f["cite_t2d"],
            "pass the run's map (--d2t-path/--t2d-path), or convert SRC with "
            "`weightcheck convert SRC OUT --to speculators` first",
        )
    th = getattr(target, "hidden_size", None) if target is not None else None
    equal = tr.load.requires_equal_hidden
    if equal and type(th) is int and type(sym.get("H")) is int and th != sym["H"]:
        return (
            f"the verifier's hidden size is {th}, the draft's {sym['H']}: speculators requires "
            "them equal (its fc reads the draft hidden size)",
            "hidden",
            f["cite_hidden"],
            HIDDEN_FIX,
        )
    return _target_layers_raise(tr, d.source.config or cfg, target, f) or (None, None, None, None)


def _target_layers_raise(tr, cfg: dict, target, f):
    """speculators resolves the target layers after loading: SRC's ids, or by default
    [2, L // 2, L - 3] of the verifier's L layers; ids not distinct and within [0, L] raise."""
    L = getattr(target, "num_layers", None) if target is not None else None
    default = tr.load.default_target_layer_ids
    if type(L) is not int or not default:
        return None  # the verifier's layer count is known only from --target
    ids = cfg.get("eagle_aux_hidden_state_layer_ids")
    explicit = ids is not None
    if not explicit:
        ids = [expr.evaluate(x, {"L": L}) for x in default]
    if not isinstance(ids, list) or not all(type(i) is int for i in ids):
        return None  # ids of the wrong type: WC212 says so
    if ids and min(ids) >= 0 and max(ids) <= L and len(set(ids)) == len(ids):
        return None
    said = "its target layer ids" if explicit else "its default target layer ids"
    return (
        f"{said} {ids} are not distinct ids within [0, {L}] for a verifier of {L} layers: "
        "resolve_target_layer_ids raises ValueError",
        "aux",
        f["cite_target_layers"],
        "set eagle_aux_hidden_state_layer_ids in SRC's config (or pass --target-layer-ids)",
    )


def _state_meta(d) -> dict:
    """training_state.pt's top-level scalars (strategy, run_id, ...), as sources read them."""
    for wf in d.source.files.values():
        if wf.pickle_meta:
            return wf.pickle_meta
    return {}


def _verifier(cfg: dict | None):
    sc = (cfg or {}).get("speculators_config")
    v = sc.get("verifier") if isinstance(sc, dict) else None
    return v.get("name_or_path") if isinstance(v, dict) else None


def _renamable(d, missing) -> bool:
    """The missing names are SRC's tensors under another layout's names (canonical names; a fused
    tensor's parts included)."""
    canon = d.covered()
    return bool(missing) and any(n in canon for n in missing if n.startswith("midlayer."))


def _parts_held(d, canonical: str | None, params) -> bool:
    """``canonical`` is a fused name whose parts are all the trainer's own names."""
    got = d.architecture.fused_of(canonical) if d.architecture and canonical else None
    return got is not None and all(p in params for p in got[1])


def speculators_cannot_hold_reason(mismatched, sym) -> str | None:
    """speculators builds fc from the draft hidden size (num_aux x H); a drafter whose fc reads a
    target of another width cannot load there."""
    for n, a, b in mismatched:
        if n == "fc.weight" and len(a) == 2 and len(b) == 2 and a[0] == b[0] and a[1] != b[1]:
            return (
                f"fc.weight: {list(a)} in SRC; speculators builds fc from the draft hidden size "
                f"({list(b)}: {sym.get('n_aux_s')} x {sym.get('H')}) and requires verifier hidden "
                "== draft hidden: it cannot hold a drafter whose fc reads a target of another "
                "width"
            )
    return None
