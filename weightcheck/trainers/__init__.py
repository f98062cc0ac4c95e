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
from weightcheck.trainers.raises import first_raise, holds, lax_values

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
    # SRC's fused tensors ([[fused]]) its model has no name for -> their parts under SRC's own
    # naming: loaded by name, never split ([load] cite_fused)
    fused: dict[str, list[str]] = field(default_factory=dict)
    fix_command: str = ""  # the command that writes SRC under its names ([load] convert)
    cite_fused: str = ""
    fix: str | None = None  # what makes the trainer load it
    cite: str | None = None  # where the raise is
    kind: str | None = None  # what raised: architecture, config, mismatch, unexpected, ...
    pretty: str = ""
    says_embedding: str = ""  # "SpecForge takes the target's embedding ..." ([load] says_*)
    says_without_map: str = ""
    # the config the trainer built its model from: "training" (the training config; SRC's own is
    # never read: SpecForge) or "src" (SRC's config.json; the training config is never read:
    # speculators --from-pretrained), with the line that says so
    built_from: str = "training"
    cite_built_from: str = ""

    def unsplit(self) -> dict[str, list[str]]:
        """SRC's fused tensors it never splits whose parts are its model's own names (the parts
        it would have loaded had SRC stored them apart), each with those parts."""
        out = {n: [p for p in ps if p in self.params] for n, ps in self.fused.items()}
        return {n: ps for n, ps in out.items() if ps}

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
            "built_from": self.built_from,
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
            "unsplit": {n: list(ps) for n, ps in self.fused.items()},
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


def _with_class_defaults(tr: Trainer, cfg: dict) -> dict:
    """The config with the fields its layer config class fills in when absent (speculators:
    transformers' LlamaConfig defaults for transformer_layer_config)."""
    tl = cfg.get("transformer_layer_config")
    if not tr.load.layer_defaults or not isinstance(tl, dict):
        return cfg
    missing = {k: v for k, v in tr.load.layer_defaults.items() if k not in tl}
    return {**cfg, "transformer_layer_config": {**tl, **missing}} if missing else cfg


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


def is_training_state(source) -> bool:
    """SRC is a SpecForge checkpoint (training_state.pt): a folder holding one and no Hugging Face
    weights, or the file itself (specforge 0.2.0 model_loading.py:322-344)."""
    return source.layout == "SpecForge training_state.pt" or (
        source.kind == "file" and os.path.basename(source.location) == "training_state.pt"
    )


def replay(d, training_cfg: dict, trainer: str, target=None, training_vocab=None) -> Replay:  # noqa: C901 - one function per trainer's order of events reads best
    """Replay ``trainer``'s training initialization of drafter ``d`` (model/drafter.py Drafter)
    for the architecture ``training_cfg`` builds; ``target`` (model/target.py Target, config
    only is enough) and ``training_vocab`` (model/vocab.py VocabMap) where given."""
    tr = load(trainer)
    own = _built_from(tr, d, training_cfg)
    built = _with_class_defaults(tr, own)
    # the values its config class builds the model with (pydantic's lax coercion: "128" is 128)
    sym = _symbols(lax_values(tr.load.top_types, built) if tr.load.top_types else built)
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
        built_from="training" if own is training_cfg else "src",
        cite_built_from=ld.cite_builds_from,
        fix_command=ld.convert,
        cite_fused=ld.cite_fused,
    )
    handed = d.as_handed()[0] if not (state and ld.state_file) else d.tensors
    src = _as_loaded(ld.base_model_prefix, {t.name: t for t in handed}, model)
    r.unexpected = [n for n in src if n not in model]
    r.missing = [n for n in model if n not in src]
    r.mismatched = [
        (n, tuple(src[n].shape), s)
        for n, (s, _) in model.items()
        if n in src and s is not None and tuple(src[n].shape) != s
    ]
    r.fused = _unsplit(d, src, model)
    bad = {n for n, _, _ in r.mismatched}
    allowed = set(ld.allowed_missing)
    for n, (_, p) in model.items():
        loaded = n in src and n not in bad
        if p.origin == "data" and (
            holds(p.data_when, sym) or (p.data_if_map and training_vocab is not None)
        ):
            r.params[n] = "data"
        elif p.origin == "target":
            r.params[n] = "target"
        elif p.origin == "src_else_target":
            r.params[n] = "src" if loaded else "target"
        else:
            r.params[n] = "src" if loaded else "init"
    r.raises, r.kind, r.cite, r.fix = first_raise(
        tr, d, training_cfg, sym, r, allowed, target, training_vocab
    )
    return r


def _unsplit(d, src: dict, model: dict) -> dict[str, list[str]]:
    """SRC's fused tensors (mappings/architectures [[fused]]: qkv_proj, gate_up_proj) that are no
    name of the trainer's model, each with its parts named as SRC names it (``layers.0.`` stays
    ``layers.0.``): the trainers load by name and split none ([load] cite_fused)."""
    arch = d.architecture
    out: dict[str, list[str]] = {}
    for name, t in src.items():
        got = arch.fused_of(t.canonical) if arch and t.canonical and name not in model else None
        if got is not None:
            out[name] = [_sibling(name, t.canonical, part) for part in got[1]]
    return out


def _sibling(name: str, canonical: str, part: str) -> str:
    """``part`` (a canonical name) under ``name``'s naming, ``name`` being ``canonical``'s:
    layers.0.self_attn.qkv_proj.weight, q_proj -> layers.0.self_attn.q_proj.weight."""
    a, b = canonical.split("."), part.split(".")
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    tail = ".".join(a[i:])
    return name[: len(name) - len(tail)] + ".".join(b[i:]) if name.endswith(tail) else part


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
