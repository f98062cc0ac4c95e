"""The trainers' training initialization replayed: SpecForge 0.2.0 and speculators 0.9.0 as data
(mappings/trainers/<name>.toml, every fact cited; prose in docs/trainers.md).

:func:`replay` answers, parameter by parameter of the trainer's own model, where its value comes
from at the first training step — ``src`` (loaded from SRC), ``target`` (taken from the target),
``init`` (left at its init), ``data`` (built from the run's vocabulary map) — or that the trainer
raises before it gets there, and the fraction of the trained parameters SRC initializes.
:func:`replay_training` is the same from paths (the API the trainer oracles call).

Header-level: nothing here imports torch (a pickled SRC is read as sources/pickled.py reads it).
The files go through the one typed loader (weightcheck/schema.py TrainerFile).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import field

from weightcheck import expr, mappings, schema
from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod
from weightcheck.model import vocab
from weightcheck.model.drafter import from_source, load_drafter
from weightcheck.model.target import load_target
from weightcheck.record import record
from weightcheck.sources.base import read_json_file

__all__ = [
    "Trainer",
    "Param",
    "Replay",
    "TRAINERS",
    "load",
    "detect",
    "replay",
    "replay_training",
    "speculators_cannot_hold",
]

TRAINERS = ("specforge", "speculators")
ORIGINS = ("src", "target", "init", "data")
_PRETTY = {"specforge": "SpecForge", "speculators": "speculators"}
HIDDEN_FIX = (
    "it is a drafter for SpecForge or the engines (weightcheck convert SRC OUT --to vllm), not "
    "for a speculators fine-tune"
)


Param = schema.TrainerParam  # a parameter or buffer of the trainer's model (mappings/trainers/)


@record(frozen=True)
class Trainer:
    """A trainer's file (mappings/trainers/<name>.toml) as the typed loader builds it."""

    info: schema.TrainerInfo
    load: schema.TrainerLoad
    params: tuple[Param, ...]

    name = property(lambda self: self.info.name)
    version = property(lambda self: self.info.version)
    versions_read = property(lambda self: self.info.versions_read)
    architectures = property(lambda self: self.info.architectures)
    layers_built = property(lambda self: self.info.layers_built)

    @property
    def pretty(self) -> str:
        return f"{_PRETTY.get(self.name, self.name)} {self.version}"

    @functools.cached_property
    def facts(self) -> dict[str, str]:
        """Every cite_* of [trainer] and [load], by key."""
        return {
            f.name: getattr(part, f.name)
            for part in (self.info, self.load)
            for f in dataclasses.fields(part)
            if f.name.startswith("cite")
        }


@functools.lru_cache(maxsize=None)
def load(name: str) -> Trainer:
    """mappings/trainers/<name>.toml through the one typed loader (weightcheck/schema.py
    TrainerFile): an unknown key or a value of the wrong kind fails with the file and the key."""
    if name not in TRAINERS:
        raise WeightcheckError(None, f"--trainer {name}: known trainers are {', '.join(TRAINERS)}")
    relpath = f"trainers/{name}.toml"
    data = mappings.build(schema.TrainerFile, mappings.load(relpath), mappings.where(relpath))
    return Trainer(info=data.trainer, load=data.load, params=data.param)


def detect(cfg: dict) -> str | None:
    """The trainer a training config belongs to: speculators configs carry
    ``speculators_model_type``/``speculators_config``; SpecForge's are plain Hugging Face configs
    naming the class its EAGLE-3 strategy builds. None when neither says so."""
    if not isinstance(cfg, dict):
        return None
    if "speculators_model_type" in cfg or "speculators_config" in cfg:
        return "speculators"
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and archs[0] in load("specforge").architectures:
        return "specforge"
    return None


@record
class Replay:
    trainer: str
    version: str
    raises: str | None  # a short reason: the trainer raises before training starts
    params: dict[str, str]  # own name -> src | target | init | data
    numel: dict[str, int] = field(default_factory=dict)
    buffers: frozenset = frozenset()
    source_kind: str = "pretrained"  # pretrained | training_state
    unexpected: list[str] = field(default_factory=list)  # SRC names the model lacks
    missing: list[str] = field(default_factory=list)  # model names SRC lacks
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # name, SRC, model
    fix: str | None = None  # what makes the trainer load it
    cite: str | None = None  # where the raise is
    kind: str | None = None  # what raised: architecture, config, mismatch, unexpected, ...
    pretty: str = ""
    says_embedding: str = ""  # "SpecForge takes the target's embedding ..." ([load] says_*)
    says_without_map: str = ""

    def count(self, origin: str) -> int:
        return sum(
            n
            for name, n in self.numel.items()
            if name not in self.buffers and self.params.get(name) == origin
        )

    @property
    def fraction(self) -> float:
        """Of the trained parameters SRC could fill (those not taken from the target nor built
        from data), the share by element count SRC fills; 0 when the trainer raises."""
        if self.raises:
            return 0.0
        n, m = self.count("src"), self.count("src") + self.count("init")
        return n / m if m else 0.0

    def report(self) -> dict:
        return {
            "name": self.trainer,
            "version": self.version,
            "source_kind": self.source_kind,
            "raises": self.raises,
            "fix": self.fix,
            "cite": self.cite,
            "parameters": dict(sorted(self.params.items())),
            "buffers": sorted(self.buffers),
            "parameters_from_src": self.count("src"),
            "parameters_at_init": self.count("init"),
            "parameters_from_target": self.count("target"),
            "fraction": round(self.fraction, 6),
            "unexpected": list(self.unexpected),
            "missing": list(self.missing),
            "mismatched": [
                {"name": n, "src": list(a), "trainer": list(b)} for n, a, b in self.mismatched
            ],
        }


def _as_loaded(prefix: str | None, src: dict, model: dict) -> dict:
    """SRC's names as transformers' from_pretrained reads them: a name that carries the model
    class's ``base_model_prefix`` (``model.``) loads under the name without it when the model has
    that name (transformers==5.8.1 core_model_loading.py:1146-1154 rename_source_key)."""
    if not prefix:
        return src
    p = prefix + "."
    return {
        n[len(p) :] if n.startswith(p) and n[len(p) :] in model else n: t for n, t in src.items()
    }


def _built_from(tr: Trainer, d, training_cfg: dict) -> dict:
    """The config the trainer builds its model from: the training config, or SRC's own where the
    trainer reads that ([load] builds_from_src: the key SRC's config must hold; speculators'
    --from-pretrained builds from SRC's speculators config.json)."""
    key = tr.load.builds_from_src
    own = d.source.config
    if key and isinstance(own, dict) and key in own:
        return own
    return training_cfg


def _symbols(cfg: dict) -> dict:
    norm = config_mod.normalize(cfg)
    s = norm.symbols()
    aux = cfg.get("eagle_aux_hidden_state_layer_ids")
    s["n_aux_s"] = len(aux) if isinstance(aux, list) and aux else 3  # core.py:71-75
    tl = cfg.get("transformer_layer_config")
    s["layer_model_type"] = tl.get("model_type", "llama") if isinstance(tl, dict) else None
    for flag in ("fc_norm", "norm_before_fc", "attention_bias"):
        s.setdefault(flag, None)
        if s[flag] is None:
            v = cfg.get(flag, (tl or {}).get(flag) if isinstance(tl, dict) else None)
            s[flag] = bool(v) if isinstance(v, bool) else False
    return s


def _expand(tr: Trainer, symbols: dict) -> dict[str, tuple[tuple | None, Param]]:
    """The trainer model's parameters and buffers: own name -> (shape or None, its Param)."""
    if isinstance(tr.layers_built, int):
        layers = tr.layers_built
    else:
        n = symbols.get(tr.layers_built)
        layers = n if type(n) is int and 1 <= n <= 64 else 1
    out: dict[str, tuple[tuple | None, Param]] = {}
    for p in tr.params:
        for layer in range(layers) if "{layer}" in p.name else [0]:
            sym = {**symbols, "layer": layer}
            try:
                if p.when and not expr.evaluate(p.when, sym):
                    continue
            except (expr.Undefined, ArithmeticError):
                continue
            count = 1
            if p.for_each:
                try:
                    count = int(expr.evaluate(p.for_each, sym))
                except (expr.Undefined, ArithmeticError, TypeError, ValueError):
                    count = 0
            for i in range(min(count, 64)):
                name = p.name.format(layer=layer, i=i)
                try:
                    dims = [expr.evaluate(s, sym) for s in p.shape]
                    shape = (
                        tuple(int(x) for x in dims)
                        if all(isinstance(x, (int, float)) for x in dims)
                        else None
                    )
                except (expr.Undefined, ArithmeticError):
                    shape = None
                out[name] = (shape, p)
    return out


def _holds(src: str | None, symbols: dict) -> bool:
    try:
        return bool(src) and bool(expr.evaluate(src, symbols))
    except (expr.Undefined, ArithmeticError):
        return False


def is_training_state(source) -> bool:
    """SRC is a SpecForge checkpoint (training_state.pt): a folder holding one and no Hugging Face
    weights, or the file itself (specforge 0.2.0 model_loading.py:322-344)."""
    return source.layout == "SpecForge training_state.pt" or (
        source.kind == "file" and os.path.basename(source.location) == "training_state.pt"
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


def replay(d, training_cfg: dict, trainer: str, target=None, training_vocab=None) -> Replay:  # noqa: C901 - one function per trainer's order of events reads best
    """Replay ``trainer``'s training initialization of drafter ``d`` (model/drafter.py Drafter)
    for the architecture ``training_cfg`` builds; ``target`` (model/target.py Target, config
    only is enough) and ``training_vocab`` (model/vocab.py VocabMap) where given."""
    tr = load(trainer)
    built = _built_from(tr, d, training_cfg)
    sym = _symbols(built)
    if built is not training_cfg and "draft_vocab_size" not in built:
        # read at the top level only: the config class's default otherwise
        sym["Vd"] = tr.load.default_draft_vocab_size or sym.get("Vd")
    model = _expand(tr, sym)
    ld = tr.load
    state = is_training_state(d.source)
    r = Replay(
        trainer=tr.name,
        version=tr.version,
        raises=None,
        params={},
        numel={n: _numel(s) for n, (s, _) in model.items()},
        buffers=frozenset(n for n, (_, p) in model.items() if p.buffer),
        source_kind="training_state" if state and ld.state_file else "pretrained",
        pretty=tr.pretty,
        says_embedding=f"{_PRETTY[tr.name]} {ld.says_embedding}",
        says_without_map=f"{_PRETTY[tr.name]} {ld.says_without_map}",
    )
    src = _as_loaded(ld.base_model_prefix, {t.name: t for t in d.tensors}, model)
    r.unexpected = [n for n in src if n not in model]
    r.missing = [n for n in model if n not in src]
    r.mismatched = [
        (n, tuple(src[n].shape), s)
        for n, (s, _) in model.items()
        if n in src and s is not None and tuple(src[n].shape) != s
    ]
    bad = {n for n, _, _ in r.mismatched}
    allowed = set(ld.allowed_missing)
    for n, (_, p) in model.items():
        loaded = n in src and n not in bad
        if p.origin == "data" and (
            _holds(p.data_when, sym) or (p.data_if_map and training_vocab is not None)
        ):
            r.params[n] = "data"
        elif p.origin == "target":
            r.params[n] = "target"
        elif p.origin == "src_else_target":
            r.params[n] = "src" if loaded else "target"
        else:
            r.params[n] = "src" if loaded else "init"
    r.raises, r.kind, r.cite, r.fix = _raises(
        tr, d, training_cfg, sym, r, allowed, target, training_vocab
    )
    return r


def _raises(tr, d, cfg, sym, r, allowed, target, training_vocab):
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
        return _speculators_config_invalid(d.source.config, f, tr.load.not_validated)
    return None


def _speculators_config_invalid(cfg: dict, f, not_validated=()):
    """speculators' config classes validate SRC's config as they build it: every field's type
    (transformers' strict config dataclass, pydantic), layer_types one per layer, norm_before_fc
    and fc_norm not both."""
    bad = sorted(config_mod.normalize(cfg).mistyped - set(not_validated))
    if bad:
        return (
            f"its config classes validate every field: {', '.join(bad)} of the wrong JSON type",
            "config",
            f["cite_validation"],
            None,
        )
    tl = cfg.get("transformer_layer_config")
    tl = tl if isinstance(tl, dict) else {}
    types, n = tl.get("layer_types"), tl.get("num_hidden_layers")
    if isinstance(types, list) and type(n) is int and len(types) != n:
        return (
            f"num_hidden_layers ({n}) must equal the number of layer_types ({len(types)}): "
            "transformers' validate_layer_type raises",
            "config",
            f["cite_layer_types"],
            f"write {n} layer_types in transformer_layer_config",
        )
    if cfg.get("norm_before_fc") is True and cfg.get("fc_norm") is True:
        return (
            "norm_before_fc and fc_norm are both true: its config class refuses them together",
            "config",
            f["cite_validation"],
            None,
        )
    return None


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
    if _renamable(d, r.missing):
        extras = [t.name for t in d.tensors if t.canonical not in r.params]
        fix = (
            "weightcheck convert SRC OUT --to sglang first: it writes the midlayer.* names "
            "SpecForge loads fully"
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
    if training_vocab is not None and _holds("Vd != V", sym):
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
    if training_vocab is not None and _holds("Vd != V", sym):
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
    """The missing names are SRC's tensors under another layout's names (canonical names)."""
    canon = {t.canonical for t in d.tensors if t.canonical}
    return bool(missing) and any(n in canon for n in missing if n.startswith("midlayer."))


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


def speculators_cannot_hold(norm) -> str | None:
    """From a normalized config alone: target_hidden_size differs from hidden_size (convert
    --to speculators refuses it; mappings/engines/speculators.toml [[output.refuse]])."""
    t, h = norm.get("target_hidden_size"), norm.get("hidden_size")
    if type(t) is int and type(h) is int and t != h:
        return f"target_hidden_size {t} != hidden_size {h}"
    return None


def _numel(shape) -> int:
    n = 1
    for x in shape or (0,):
        n *= x
    return n


def replay_training(src, training_config, trainer=None, target=None, training_vocab=None) -> Replay:
    """The API the trainer oracles call: paths in, :class:`Replay` out. ``trainer`` None: detected
    from the training config (exit 2-style WeightcheckError when it cannot be)."""
    path = str(training_config)
    if os.path.isdir(path):  # a folder holding the config, as --training-config takes it
        path = os.path.join(path, "config.json")
    cfg = read_json_file(path, "training config", 10_000_000)
    if not isinstance(cfg, dict):
        raise WeightcheckError(path, "training config is not a JSON object")
    name = trainer or detect(cfg)
    if name is None:
        raise WeightcheckError(
            path, "cannot tell the trainer from the training config: pass trainer="
        )
    d = with_training_config(load_drafter(str(src)), cfg, path)
    t = load_target(str(target), config_only=True) if target is not None else None
    tv = None
    if training_vocab is not None:
        tv = vocab.load_map(str(training_vocab))
    return replay(d, cfg, name, target=t, training_vocab=tv)


def with_training_config(d, cfg: dict, path: str):
    """A SpecForge run checkpoint has no config.json: SpecForge takes the architecture from the
    run's draft config, so --training-config stands in for it (a note says so)."""
    if d.source.config is not None or not is_training_state(d.source):
        return d

    s = d.source
    s.config = cfg
    s.config_file = path
    s.notes.append(
        f"config: the training config ({os.path.basename(path)}) stands in for the missing "
        "config.json (a SpecForge checkpoint has none; SpecForge builds from the run's config)"
    )
    return from_source(s)
