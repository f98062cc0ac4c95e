"""``weightcheck check SRC``: the gate before training or serving.

load -> normalize -> (engine view, target, training config, values: each only when asked) ->
rules (weightcheck/rules.py, documented in docs/rules.md) -> report (schema
``weightcheck.check/1``) -> render. Exit 0 when no finding is an error, 1 otherwise, 2 when the
check could not be done.
"""
from __future__ import annotations

import json

from weightcheck import config as config_mod
from weightcheck import engine as engine_mod
from weightcheck import inventory
from weightcheck.drafter import Drafter
from weightcheck.errors import WeightcheckError
from weightcheck.inspect import source_report
from weightcheck.rules import ERROR, INFO, RULES, WARNING, Context, Finding, rule

SCHEMA = "weightcheck.check/1"

ALL_CLEAR = ("weights and config check out: if acceptance is still low, look at the chat template "
             "and the training data (prompt format mismatch), not the weights")


# =============================================================================================
# WC7xx the engine's view (--engine): registered here, next to the replay they read
REPLAYED_ARCHITECTURES = ("llama_eagle3",)  # what mappings/engines/*.toml [[parameter]] describe


@rule("WC700", "engine-view-unavailable", "info",
      "--engine was asked for a drafter architecture whose loader is not replayed (MLA drafters).")
def engine_unavailable(ctx):
    if ctx.engine and ctx.engine_view is None:
        arch = ctx.d.architecture.name if ctx.d.architecture else "an unknown architecture"
        yield ctx.f("WC700", f"{ctx.engine}'s loader for {arch} is not replayed (mappings/engines/ "
                             "describes LlamaForCausalLMEagle3): the engine view was not checked",
                    "architectures")

@rule("WC701", "engine-architecture", "error",
      "architectures[0] does not select the engine's EAGLE-3 loader.", needs="engine")
def engine_arch(ctx):
    v = ctx.engine_view
    if not v.architectures_ok:
        accepted = ", ".join(engine_mod.load(v.engine)["engine"].get("architectures", []))
        yield ctx.f("WC701", f"{v.engine} {v.version} loads EAGLE-3 drafters declared as {accepted}; "
                             f"this config says {v.architecture!r}", "architectures")


@rule("WC702", "engine-drops-tensor", "error",
      "The engine drops a tensor without a word: its parameter keeps its random init.", needs="engine")
def engine_drops(ctx):
    for l in ctx.engine_view.landings:
        if l.fate in ("dropped", "warned") and not l.why.startswith("dropped on purpose"):
            yield ctx.f("WC702", f"{l.name}: {ctx.engine_view.engine} drops it ({l.why}; looked up as "
                                 f"{l.engine_name})", l.name)
        elif l.fate == "dropped":
            yield ctx.f("WC702", f"{l.name}: shipped but unused by {ctx.engine_view.engine} ({l.why})",
                        l.name, severity=WARNING)


@rule("WC703", "engine-rejects-tensor", "error",
      "The engine refuses to load a tensor name (vLLM raises on names it has no parameter for).",
      needs="engine")
def engine_rejects(ctx):
    for l in ctx.engine_view.landings:
        if l.fate == "error":
            yield ctx.f("WC703", f"{l.name}: {ctx.engine_view.engine} fails to load ({l.why}; looked "
                                 f"up as {l.engine_name})", l.name)


@rule("WC704", "engine-random-parameter", "error",
      "An engine parameter receives nothing and nothing replaces it: it runs with random values.",
      needs="engine")
def engine_random(ctx):
    for p in ctx.engine_view.params:
        if p.state == "random":
            yield ctx.f("WC704", f"{p.param} ({p.canonical}) receives nothing in "
                                 f"{ctx.engine_view.engine}: {p.note}", p.canonical)


@rule("WC705", "engine-config-error", "error",
      "A config field the engine requires is absent (the server fails at start-up).", needs="engine")
def engine_config_error(ctx):
    for fld, msg in ctx.engine_view.config_errors:
        yield ctx.f("WC705", f"{ctx.engine_view.engine}: {msg}", fld)


@rule("WC706", "engine-cannot-express", "error",
      "The config uses a layout or option the engine does not read (speculators config in SGLang, "
      "norm_before_residual in SGLang).", needs="engine")
def engine_cannot(ctx):
    v = ctx.engine_view
    data = engine_mod.load(v.engine)
    if v.speculators_format and "speculators_adapter" not in data:
        yield ctx.f("WC706", f"a speculators-format config (transformer_layer_config): {v.engine} "
                             "reads only flat fields and eagle_config; convert it with "
                             f"`weightcheck convert --to {v.engine}`", "transformer_layer_config")
    # what the engine cannot express is what convert refuses to write for it (the same data)
    for r in data.get("output", {}).get("refuse", []):
        if engine_mod.evaluate_when(r["when"], ctx.n.values, ctx.d.config):
            yield ctx.f("WC706", f"{r['when']}: {r['why']}", r["when"])


@rule("WC707", "engine-default-differs", "warning",
      "The engine applies a default where the config is silent, and the trainer's default differs.",
      needs="engine")
def engine_default(ctx):
    v = ctx.engine_view
    adapter = engine_mod.load(v.engine).get("speculators_adapter") or {}
    if not v.speculators_format:
        return
    for k, default in adapter.get("defaults", {}).items():
        if k not in ctx.d.config:
            meant = adapter.get("trainers_mean", {}).get(k)
            yield ctx.f("WC707", f"{k} is absent: {v.engine} assumes {json.dumps(default)} for "
                                 "speculators configs" + (f" (trainers mean {meant})" if meant else "")
                                 + "; write it explicitly", k)


@rule("WC708", "aux-ids-convention", "warning",
      "The aux layer ids capture other target layers in this engine than in the trainer that wrote them.",
      needs="engine")
def aux_convention(ctx):
    v = ctx.engine_view
    t = ctx.target
    # the convention the drafter was trained in: its dialect's (mappings/dialects/*.toml
    # aux_convention), refined by where its config keeps the ids
    trained = engine_mod.convention_of(ctx.d) if engine_mod.trained_convention(ctx.d.dialect) else None
    if t is None or trained is None or trained == v.engine or ctx.n.get("aux_layer_ids") is None:
        return  # without ids of its own the drafter gets defaults everywhere (WC407)
    L = t.num_layers
    mt = t.model_type
    here = engine_mod.captured_layers(v, mt, L)
    other = engine_mod.view(ctx.d, trained)
    there = engine_mod.captured_layers(other, mt, L)
    if here is not None and there is not None and here != there:
        ids_here = v.aux.get("ids") or f"none it reads, so its default {[2, L // 2, L - 3]}"
        yield ctx.f("WC708", f"{v.engine} captures the outputs of target layers {here} (ids: "
                             f"{ids_here}), but the drafter was trained on layers {there} (ids "
                             f"{other.aux.get('ids')} in {trained}'s convention, which "
                             f"{ctx.d.dialect} drafters carry)", "aux_layer_ids")


@rule("WC709", "engine-target-unsupported", "error",
      "The engine cannot capture EAGLE-3 hidden states from this target's model type.", needs="engine")
def target_support(ctx):
    t = ctx.target
    if t is None:
        return
    tg = engine_mod.load(ctx.engine_view.engine).get("targets", {})
    types = tg.get("supported_model_types") or []
    archs = tg.get("supported_architectures") or []
    ok = (t.model_type in types) or (t.text_model_type in types) or any(a in archs for a in t.architectures)
    if types and not ok:
        yield ctx.f("WC709", f"{ctx.engine_view.engine} {ctx.engine_view.version} has no EAGLE-3 "
                             f"capture for target model_type {t.model_type!r} "
                             f"({', '.join(t.architectures) or 'no architectures'})", "target")


@rule("WC710", "engine-aux-ids-location", "warning",
      "The aux layer ids sit where this engine does not read them: it captures its default layers.",
      needs="engine")
def aux_location(ctx):
    v = ctx.engine_view
    raw = ctx.d.config
    nested = config_mod.lookup(raw, "eagle_config.eagle_aux_hidden_state_layer_ids")
    top = raw.get("eagle_aux_hidden_state_layer_ids")
    if v.engine == "sglang" and isinstance(top, list) and not isinstance(nested, list):
        yield ctx.f("WC710", f"aux layer ids {top} are top-level only: SGLang reads only "
                             "eagle_config.eagle_aux_hidden_state_layer_ids and captures its defaults",
                    "aux_layer_ids")
    if v.engine == "vllm" and isinstance(nested, list) and not isinstance(top, list):
        yield ctx.f("WC710", f"aux layer ids {nested} are only in eagle_config: vLLM's V2 model runner "
                             "(the default on GPU in 0.33) reads the top-level list and captures its "
                             "defaults", "aux_layer_ids")


@rule("WC711", "shipped-for-nothing", "info",
      "A tensor the engine replaces with the target's: bytes shipped for nothing.", needs="engine")
def shipped(ctx):
    for p in ctx.engine_view.params:
        if p.state == "from_target" and p.sources:
            t = ctx.d.by_canonical().get(p.canonical)
            size = f" ({t.nbytes / 1e9:.2f} GB)" if t is not None else ""
            yield ctx.f("WC711", f"{p.canonical}{size} is replaced by the target's in "
                                 f"{ctx.engine_view.engine}; `convert --embeddings drop` removes it",
                        p.canonical)


# =============================================================================================
def training_gate(ctx: Context, training_cfg: dict) -> None:
    """Fill ctx.cache for the WC9xx rules: can SRC initialize exactly that architecture?"""
    norm = config_mod.normalize(training_cfg)
    names = training_cfg.get("architectures") or []
    arch = None
    for a in inventory.architectures():
        if names and names[0] in a.config_architectures:
            arch = a
    if arch is None:
        arch = ctx.d.architecture or inventory.by_name("llama_eagle3")
    inv = inventory.expected(arch, norm.symbols())
    mine = ctx.d.by_canonical()
    mism, reinit, ignored = [], [], []
    for name, e in inv.tensors.items():
        t = mine.get(name)
        if t is None:
            if e.presence == "required" or name == "embed_tokens.weight":
                reinit.append(name)
        elif e.shape is not None and tuple(t.shape) != tuple(e.shape):
            mism.append((name, t.shape, e.shape))
    for name in mine:
        if name not in inv.tensors:
            ignored.append(name)
    fields = []
    for spec in config_mod.field_specs():
        if spec.category != "serving":
            continue
        a, b = ctx.n.get(spec.name), norm.get(spec.name)
        if a != b:
            fields.append((spec.name, a, b))
    ctx.cache.update(training_mismatch=mism, training_reinit=reinit, training_ignored=ignored,
                     training_fields=fields)


def value_stats(d: Drafter, only: set | None = None) -> dict:
    """Per canonical tensor: min, max, non-finite count, numel — streamed with torch."""
    import torch

    from weightcheck.compare import VALUES_CHUNK_ELEMS
    from weightcheck.safetensors_header import TORCH_NAMES, itemsize
    from weightcheck.tensor_io import from_bytes, iter_chunks

    out = {}
    for t in d.tensors:
        if t.canonical is None or t.dtype not in TORCH_NAMES or (only and t.canonical not in only):
            continue
        isz = itemsize(t.dtype)
        lo, hi, bad, n = None, None, 0, 0
        for chunk in iter_chunks(d.source, t.name, VALUES_CHUNK_ELEMS * isz, isz):
            x = from_bytes(chunk, t.dtype)  # every step below makes a new tensor: no writes
            if x.dtype == torch.bool:
                x = x.to(torch.uint8)
            x = x.to(torch.float64) if x.dtype in (torch.int64, torch.int32) else x.to(torch.float32)
            n += x.numel()
            fin = torch.isfinite(x)
            bad += int((~fin).sum())
            x = x[fin]
            if x.numel():
                cmin, cmax = float(x.min()), float(x.max())
                lo = cmin if lo is None else min(lo, cmin)
                hi = cmax if hi is None else max(hi, cmax)
        out[t.canonical] = {"min": lo, "max": hi, "non_finite": bad, "numel": n}
    return out


def lm_head_is_target_slice(ctx: Context, samples: int = 64) -> bool:
    """Sampled rows of the drafter's lm_head equal the target's lm_head rows at the d2t ids
    (compared as values when the dtypes differ: ModelOpt writes an fp32 copy of a bf16 head)."""
    from weightcheck.safetensors_header import TORCH_NAMES
    from weightcheck.tensor_io import read_range

    t = ctx.target
    head = ctx.tensor("lm_head.weight")
    if t is None or t.lm_head is None or head is None:
        return False
    if len(head.shape) != 2 or len(t.lm_head.shape) != 2 or head.shape[1] != t.lm_head.shape[1]:
        return False
    same_dtype = head.dtype == t.lm_head.dtype
    if not same_dtype and (head.dtype not in TORCH_NAMES or t.lm_head.dtype not in TORCH_NAMES):
        return False
    d2t, _ = ctx.vocab_maps()
    rows = head.shape[0]
    row_bytes = head.nbytes // rows if rows else 0
    their_rows = t.lm_head.shape[0]
    their_row_bytes = t.lm_head.nbytes // their_rows if their_rows else 0
    if not rows or not row_bytes or not their_row_bytes:
        return False
    step = max(1, rows // samples)
    for i in range(0, rows, step):
        tid = i + (d2t[i] if d2t and i < len(d2t) else 0)
        if not 0 <= tid < their_rows:
            return False
        mine = read_range(ctx.d.source, head.name, i * row_bytes, (i + 1) * row_bytes)
        theirs = read_range(t.source, t.lm_head.name, tid * their_row_bytes,
                            (tid + 1) * their_row_bytes)
        if same_dtype:
            if mine != theirs:
                return False
        elif not _values_equal(mine, head.dtype, theirs, t.lm_head.dtype):
            return False
    return True


def _values_equal(a: bytes, da: str, b: bytes, db: str) -> bool:
    import torch

    from weightcheck.tensor_io import from_bytes
    x, y = from_bytes(a, da).to(torch.float64), from_bytes(b, db).to(torch.float64)
    return x.shape == y.shape and bool(torch.equal(x, y))


def run(d: Drafter, engine: str | None = None, engine_version: str | None = None,
        target=None, training_config: str | None = None, values: bool = False) -> tuple[Context, list]:
    ctx = Context(drafter=d, target=target, engine=engine)
    if engine and (d.architecture is None or d.architecture.name in REPLAYED_ARCHITECTURES):
        ctx.engine_view = engine_mod.view(d, engine, engine_version)
    if training_config:
        from weightcheck.sources import read_json_file
        cfg = read_json_file(training_config, "training config", 10_000_000)
        if not isinstance(cfg, dict):
            raise WeightcheckError(training_config, "training config is not a JSON object")
        ctx.training = cfg
        training_gate(ctx, cfg)
    if values:
        ctx.values = value_stats(d)
        if target is not None:
            ctx.cache["lm_head_equals_target"] = lm_head_is_target_slice(ctx)
    findings: list[Finding] = []
    for r in RULES.values():
        if r.needs == "engine" and ctx.engine_view is None:
            continue
        if r.needs == "target" and ctx.target is None:
            continue
        if r.needs == "values" and ctx.values is None:
            continue
        if r.needs == "training" and ctx.training is None:
            continue
        findings.extend(r.fn(ctx))
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    findings.sort(key=lambda f: (order[f.severity], f.code))
    return ctx, findings


def report(ctx: Context, findings: list, explain: bool = False) -> dict:
    errors = sum(1 for f in findings if f.severity == ERROR)
    warnings = sum(1 for f in findings if f.severity == WARNING)
    r = {
        "schema": SCHEMA,
        "ok": errors == 0,
        "source": source_report(ctx.d),
        "dialect": ctx.d.dialect,
        "architecture": ctx.d.architecture.name if ctx.d.architecture else None,
        "engine": None,
        "target": ctx.target.summary() if ctx.target is not None else None,
        "findings": [f.as_dict() for f in findings],
        "summary": {"errors": errors, "warnings": warnings,
                    "info": sum(1 for f in findings if f.severity == INFO)},
        "conclusion": ALL_CLEAR if errors == 0 else
        f"{errors} error(s): fix them before training or serving",
    }
    v = ctx.engine_view
    if v is not None:
        r["engine"] = {
            "name": v.engine, "version": v.version, "speculators_format": v.speculators_format,
            "config": v.config,
            "tensors": [{"name": l.name, "canonical": l.canonical, "engine_name": l.engine_name,
                         "param": l.param, "fate": l.fate, "why": l.why, "cite": l.cite}
                        for l in v.landings],
            "parameters": [{"param": p.param, "canonical": p.canonical, "required": p.required,
                            "state": p.state, "sources": p.sources, "note": p.note, "cite": p.cite}
                           for p in v.params],
            "aux_layers": v.aux,
        }
        if ctx.target is not None:
            r["engine"]["aux_layers"]["captures_output_of_layers"] = engine_mod.captured_layers(
                v, ctx.target.model_type, ctx.target.num_layers)
    if ctx.values is not None:
        r["values"] = ctx.values
    return r


def dumps(r: dict) -> str:
    from weightcheck.render import to_json
    return to_json(r)
