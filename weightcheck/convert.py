"""``weightcheck convert SRC OUT --to sglang|vllm|speculators``: engine-ready checkpoints.

load -> normalize -> :func:`plan` (every output tensor: name, shard, dtype, where its bytes come
from; the output config) -> :func:`write` (temporary folder beside OUT, verified, renamed into
place) -> render.

* Tensors that are only renamed are copied as byte ranges from the source files with
  ``os.copy_file_range`` (kernel-side, no deserialization, no torch): memory stays flat.
* Casts (``--dtype``) stream tensor by tensor, in chunks, with torch.
* ``--embeddings from=TARGET`` / ``--lm-head-from TARGET`` read only the one tensor they need from
  the target (Range reads for a Hub target).
* Every byte written is re-read and checked before OUT appears (weightcheck/verify.py): each
  copied range against the source while the next is copied, each produced tensor against the
  crc32 of the bytes produced, each file's header byte for byte and through the safetensors
  library. ``--fsync`` also flushes everything to disk first. Interrupted (Ctrl-C, SIGTERM) ->
  the temporary folder is removed; killed -> it is removed by the next run. SRC is never
  written to.

The destination layouts are data: the ``[output]`` section of mappings/engines/<to>.toml.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import zlib
from dataclasses import dataclass, field

from weightcheck import __version__
from weightcheck import config as config_mod
from weightcheck import dialects, engine as engine_mod
from weightcheck import verify as verify_mod
from weightcheck.drafter import Drafter
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.safetensors_header import itemsize, tensor_nbytes

DESTINATIONS = ("sglang", "vllm", "speculators")
CHUNK = 16 << 20  # bytes per read or cast step of a produced tensor
COPY_CHUNK = 8 << 20  # bytes per copy_file_range call; each is checked while the next is copied
WRITEBACK_CHUNK = 64 << 20  # with --fsync: start writing to disk every this many bytes
ALIGN = 64 << 10  # copies keep the source's file offsets modulo this (see _layout)
ALIGN_MIN_BYTES = 64 << 20  # ... when at least this much is copied (a header pad is up to ALIGN)
TMP_MARK = ".weightcheck-tmp-"

_DTYPE_ARG = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}
_CONFIG_NAME = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}

# target model types whose aux-id convention we know (both engines' [[aux_layers.convention]])
_LLAMA_DEFAULT = "llama"


def parse_size(text: str) -> int:
    """'5GB' -> 5e9, '500MB', '2GiB' -> 2*2**30, '1000' -> 1000 bytes (transformers' units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", text, re.IGNORECASE)
    if not m:
        raise UsageError(None, f"--max-shard-size {text!r}: expected e.g. 5GB, 500MB or 2GiB")
    num, unit = float(m.group(1)), (m.group(2) or "").upper()
    scale = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "K": 10**3, "M": 10**6,
             "G": 10**9, "T": 10**12}.get(unit)
    if scale is None:
        raise UsageError(None, f"--max-shard-size {text!r}: unknown unit {unit!r}")
    return int(num * scale)


@dataclass
class Item:
    """One output tensor and where its bytes come from."""

    out_name: str
    canonical: str
    dtype: str
    shape: tuple
    kind: str  # copy | cast | embed-from-target | head-from-target | pickle
    src_name: str | None = None  # name in the source (drafter or target)
    src_dtype: str | None = None
    shard: int = 0

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.shape)


@dataclass
class Plan:
    src: Drafter
    to: str
    out: str
    items: list = field(default_factory=list)
    shards: int = 1
    config: dict = field(default_factory=dict)
    config_changes: list = field(default_factory=list)  # human-readable lines
    notes: list = field(default_factory=list)
    target: object | None = None  # --target: the model the drafter serves (aux-id family)
    embed_target: object | None = None  # --embeddings from=TARGET
    head_target: object | None = None  # --lm-head-from TARGET
    metadata: dict = field(default_factory=dict)

    def shard_name(self, i: int) -> str:
        return "model.safetensors" if self.shards == 1 else \
            f"model-{i + 1:05d}-of-{self.shards:05d}.safetensors"


# =============================================================================================
# config
LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "vocab_size", "rms_norm_eps", "max_position_embeddings", "hidden_act",
                "attention_bias", "mlp_bias", "rope_theta", "rope_scaling", "rope_parameters",
                "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
                "initializer_range", "attention_dropout", "num_hidden_layers",
                "layer_types", "sliding_window", "use_sliding_window")  # attention the layer was trained with
EAGLE_FIELDS = ("draft_vocab_size", "target_hidden_size", "norm_before_fc", "fc_norm", "norm_output",
                "norm_before_residual", "num_aux_hidden_states")
SPECULATORS_ONLY = ("speculators_model_type", "speculators_config", "speculators_version",
                    "transformer_layer_config", "eagle_aux_hidden_state_layer_ids", "auto_map")


def flat_view(raw: dict) -> dict:
    """Any drafter config as one flat dict (a speculators transformer_layer_config lifted up)."""
    out = {}
    layer = raw.get("transformer_layer_config")
    if isinstance(layer, dict):
        out.update({k: v for k, v in layer.items() if k != "architectures"})
    out.update({k: v for k, v in raw.items() if k not in SPECULATORS_ONLY})
    return out


def target_family(drafter: Drafter, target) -> tuple[str, str]:
    """(model_type, how we know) of the target, for aux-id conventions."""
    if target is not None and target.model_type:
        return target.model_type, f"target {target.source.spec}"
    known = set()
    for e in ("sglang", "vllm"):
        for c in engine_mod.load(e).get("aux_layers", {}).get("convention", []):
            known.update(c.get("target_model_types", []))
    mt = drafter.config.get("model_type")
    if mt in known and mt != "llama":
        return mt, f"the drafter config's model_type {mt!r}"
    sc = drafter.config.get("speculators_config")
    archs = (sc.get("verifier") or {}).get("architectures") if isinstance(sc, dict) else None
    by_arch = {}
    for fam, arch in engine_mod.load("speculators")["output"].get("family_architectures", {}).items():
        by_arch.setdefault(arch, fam)
    for a in archs or []:
        if a in by_arch:
            return by_arch[a], f"the speculators verifier architecture {a}"
    return _LLAMA_DEFAULT, "assumed (no --target; pass one to be sure)"


convention_of = engine_mod.convention_of  # shared with check (WC708)


def convert_ids(ids, src_engine: str, dst_engine: str, model_type: str, num_layers) -> list:
    """The ids that make ``dst_engine`` capture the same target layers ``src_engine`` captures."""
    if ids is None or src_engine == dst_engine:
        return ids
    L = num_layers or (max(ids) + 2)
    layers = _captured(ids, src_engine, model_type, L)
    if layers is None:
        raise WeightcheckError(None, f"no aux-id convention known for target model_type "
                                     f"{model_type!r} in {src_engine}")
    for delta in (1, -1, 0):
        cand = [x + delta for x in layers]
        if _captured(cand, dst_engine, model_type, L) == layers:
            return cand
    raise WeightcheckError(None, f"cannot express aux layers {layers} in {dst_engine}'s convention")


def _captured(ids, eng: str, model_type: str, L: int):
    from weightcheck import expr
    data = engine_mod.load(eng)
    version = engine_mod.newest(data)
    for c in data.get("aux_layers", {}).get("convention", []):
        if model_type not in c.get("target_model_types", []):
            continue
        if "versions" in c and version not in c["versions"]:
            continue
        rule = c["captures_output_of"]
        return [int(expr.evaluate(rule, {"k": k, "ids": list(ids), "L": L})) for k in ids]
    if model_type != _LLAMA_DEFAULT:
        return _captured(ids, eng, _LLAMA_DEFAULT, L)
    return None


def build_config(plan: Plan, base: dict, out_dtype: str | None) -> dict:
    """The output config.json in the destination layout of mappings/engines/<to>.toml [output]."""
    out_spec = engine_mod.load(plan.to)["output"]
    src = plan.src
    norm = config_mod.normalize(base)
    flat = flat_view(base)
    # drop every place aux ids could be; they are written back where the destination reads them
    ec = dict(flat.get("eagle_config") or {})
    ec.pop("eagle_aux_hidden_state_layer_ids", None)
    flat.pop("eagle_aux_hidden_state_layer_ids", None)
    ids = norm.get("aux_layer_ids")
    src_conv = convention_of(src) if base is src.config else engine_mod.config_convention(base)
    dst_conv = out_spec["aux_convention"]
    model_type, how = target_family(src, plan.target)
    L = plan.target.num_layers if plan.target is not None else None
    new_ids = convert_ids(ids, src_conv, dst_conv, model_type, L)
    if ids is not None and new_ids != ids:
        plan.config_changes.append(
            f"aux layer ids {ids} ({src_conv} convention) -> {new_ids} ({dst_conv} convention): the "
            f"same target layers for a {model_type} target ({how}); docs/engines.md")
    elif ids is not None and src_conv != dst_conv:  # kept, but say why (it depends on the family)
        plan.config_changes.append(
            f"aux layer ids {ids} ({src_conv} convention) kept: {dst_conv}'s convention captures the "
            f"same target layers with them for a {model_type} target ({how}); docs/engines.md")
    elif ids is None:
        plan.notes.append("the source names no aux layer ids: the engine will capture its defaults")
    # dtype
    dtype_name = _CONFIG_NAME.get(out_dtype) if out_dtype else None
    dtype_name = dtype_name or norm.get("dtype") or "bfloat16"
    for k in ("dtype", "torch_dtype"):
        flat.pop(k, None)
    vd = norm.get("draft_vocab_size")
    if out_spec["config_layout"] == "flat":
        cfg = {k: v for k, v in flat.items()}
        cfg["architectures"] = list(out_spec["architectures"])
        cfg["draft_vocab_size"] = vd  # SGLang reads it as an attribute: absent fails
        if norm.get("target_hidden_size") is not None and "target_hidden_size" in flat:
            cfg["target_hidden_size"] = norm.get("target_hidden_size")
        cfg.setdefault("model_type", "llama")
        if flat.get("model_type") in (None, "eagle3"):
            cfg["model_type"] = "llama"
        if new_ids is not None:
            for path in out_spec["aux_ids_paths"]:
                if path.startswith("eagle_config."):
                    ec[path.split(".", 1)[1]] = list(new_ids)
                else:
                    cfg[path] = list(new_ids)
        ec.setdefault("use_aux_hidden_state", True)
        cfg["eagle_config"] = ec
        if plan.to != "vllm":
            cfg.pop("norm_before_residual", None)  # refused above when true
        elif norm.get("norm_before_residual") is not None:
            cfg["norm_before_residual"] = norm.get("norm_before_residual")
        cfg["dtype"] = dtype_name
        cfg["torch_dtype"] = dtype_name  # speculators and transformers 4 read this spelling
    else:  # speculators
        layer = {k: flat[k] for k in LAYER_FIELDS if k in flat}
        layer["model_type"] = "llama"
        layer["architectures"] = ["LlamaForCausalLM"]
        layer["num_hidden_layers"] = 1
        layer["torch_dtype"] = dtype_name
        verifier = {}
        old = base.get("speculators_config") if isinstance(base.get("speculators_config"), dict) else {}
        if isinstance(old.get("verifier"), dict):
            verifier = dict(old["verifier"])
        if plan.target is not None:
            verifier = {"name_or_path": plan.target.source.spec,
                        "architectures": plan.target.architectures}
        verifier.setdefault("name_or_path", None)
        if not verifier.get("architectures"):  # record the family, so the way back knows it
            fam = engine_mod.load("speculators")["output"].get("family_architectures", {})
            verifier["architectures"] = [fam[model_type]] if model_type in fam else []
        cfg = {
            "architectures": list(out_spec["architectures"]),
            "speculators_model_type": "eagle3",
            "speculators_version": base.get("speculators_version", "0.9.0"),
            "transformer_layer_config": layer,
            "draft_vocab_size": vd,
            "norm_before_residual": bool(norm.get("norm_before_residual") or False),
            "norm_before_fc": bool(norm.get("norm_before_fc") or False),
            "fc_norm": bool(norm.get("fc_norm") or False),
            "norm_output": bool(norm.get("norm_output") or False),
            "target_hidden_size": norm.get("target_hidden_size"),
            "eagle_aux_hidden_state_layer_ids": list(new_ids) if new_ids is not None else None,
            "speculators_config": old or {
                "algorithm": "eagle3",
                "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                      "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                "default_proposal_method": "greedy",
                "verifier": verifier},
            "dtype": dtype_name,
            "torch_dtype": dtype_name,
        }
        if old:
            cfg["speculators_config"] = dict(old, verifier=verifier)
        if norm.get("norm_before_residual") is None:
            plan.config_changes.append("norm_before_residual written as false explicitly (vLLM "
                                       "assumes true for speculators configs that omit it)")
    # what changed, for --dry-run and the model card
    before = config_mod.normalize(src.config)
    after = config_mod.normalize(cfg)
    for spec in config_mod.field_specs():
        a, b = before.get(spec.name), after.get(spec.name)
        if a != b and spec.name != "aux_layer_ids":
            plan.config_changes.append(f"{spec.name}: {a!r} -> {b!r}")
    return cfg


# =============================================================================================
# planning
def plan(src: Drafter, to: str, out: str, dtype: str | None = None, embeddings: str = "keep",
         lm_head_from=None, config_from: Drafter | None = None, max_shard_size: int = 5 * 10**9,
         target=None, embed_target=None) -> Plan:
    if to not in DESTINATIONS:
        raise UsageError(None, f"--to {to!r}: choose {', '.join(DESTINATIONS)}")
    p = Plan(src=src, to=to, out=out, target=target, embed_target=embed_target,
             head_target=lm_head_from)
    out_spec = engine_mod.load(to)["output"]
    if src.naming.unknown:
        raise WeightcheckError(src.source.spec, f"{len(src.naming.unknown)} tensor name(s) no dialect "
                                                f"explains (first: {src.naming.unknown[0]}): add a "
                                                "dialect file with --mapping")
    if src.naming.duplicates:
        c, names = next(iter(src.naming.duplicates.items()))
        raise WeightcheckError(src.source.spec, f"{c} is given twice ({', '.join(names)})")
    if src.looks_like_target:
        raise WeightcheckError(src.source.spec, f"looks like a target model, not a drafter: "
                                                f"{src.looks_like_target}")
    if src.architecture is not None and src.architecture.name != "llama_eagle3":
        raise WeightcheckError(src.source.spec, f"a {src.architecture.name} drafter: the layouts in "
                                                "mappings/engines/ describe LlamaForCausalLMEagle3 "
                                                "drafters only, so it is not converted")
    base = src.config
    if config_from is not None:
        from weightcheck import compare as compare_mod
        c = compare_mod.compare(src, config_from, values=False, progress=False)
        if compare_mod.verdict(c) == "incompatible":
            raise WeightcheckError(config_from.source.spec,
                                   "--config-from refused: compare says incompatible: "
                                   + "; ".join(c.reasons))
        base = config_from.config
        p.notes.append(f"config from {config_from.source.spec} (compare: {compare_mod.verdict(c)})")
    if not base:
        raise WeightcheckError(src.source.spec, "no config.json: nothing to build the output config "
                                                "from (pass --config-from REF)")
    norm = config_mod.normalize(base)
    for r in out_spec.get("refuse", []):
        if engine_mod.evaluate_when(r["when"], {k: v for k, v in norm.values.items()}, base):
            raise WeightcheckError(src.source.spec, f"cannot convert to {to}: {r['why']}")
    out_dtype = _DTYPE_ARG[dtype] if dtype else None
    names_dialect = dialects.by_name(out_spec["names_dialect"])
    canon = src.by_canonical()

    for c, t in sorted(canon.items()):
        if c == "embed_tokens.weight" and embeddings != "keep":
            continue
        if c == "t2d" and "t2d" not in out_spec.get("keep", []):
            continue
        d = t.dtype
        kind = "copy"
        if src.source.files[t.file].format == "pickle":
            kind = "pickle"
        if out_dtype and d in ("BF16", "F16", "F32", "F64") and d != out_dtype:
            kind, d = "cast", out_dtype
        p.items.append(Item(names_dialect.from_canonical(c), c, d, tuple(t.shape), kind, t.name, t.dtype))

    H = norm.get("hidden_size")
    if embeddings.startswith("from="):
        et = embed_target
        if et is None or et.embed is None:
            raise WeightcheckError(embeddings[5:], "target has no embedding tensor to take")
        if H and et.embed.shape[1] != H:
            raise WeightcheckError(embeddings[5:], f"the target's embedding {list(et.embed.shape)} "
                                                   f"is not {H} wide")
        d = out_dtype or et.embed.dtype
        p.items.append(Item(names_dialect.from_canonical("embed_tokens.weight"), "embed_tokens.weight",
                            d, tuple(et.embed.shape), "embed-from-target", et.embed.name, et.embed.dtype))
        p.notes.append(f"embed_tokens.weight taken from {et.source.spec} ({et.embed.name})")
    elif embeddings == "drop" and "embed_tokens.weight" in canon:
        p.notes.append("embed_tokens.weight dropped (the engines use the target's embedding)")
    if lm_head_from is not None:
        if "lm_head.weight" in canon:
            raise WeightcheckError(src.source.spec, "--lm-head-from: the drafter already has an lm_head")
        head = lm_head_from.lm_head or (lm_head_from.embed if lm_head_from.config.get("tie_word_embeddings") else None)
        if head is None:
            raise WeightcheckError(lm_head_from.source.spec, "target has no lm_head to gather rows from")
        vd = norm.get("draft_vocab_size")
        d = out_dtype or head.dtype
        p.items.append(Item(names_dialect.from_canonical("lm_head.weight"), "lm_head.weight", d,
                            (vd, head.shape[1]), "head-from-target", head.name, head.dtype))
        p.notes.append(f"lm_head.weight gathered from {lm_head_from.source.spec} ({head.name}) at the "
                       f"d2t target ids: [{vd}, {head.shape[1]}]")
    # shards: greedy in canonical order, like transformers' shard_checkpoint
    size, shard = 0, 0
    for it in p.items:
        if size and size + it.nbytes > max_shard_size:
            shard, size = shard + 1, 0
        it.shard = shard
        size += it.nbytes
    p.shards = shard + 1
    p.config = build_config(p, base, out_dtype)
    s = src.source
    p.metadata = {"format": "pt", "weightcheck_version": __version__,
                  "weightcheck_source": s.location if s.kind != "hub" else s.spec.split("@")[0],
                  "weightcheck_source_revision": s.commit or "",
                  "weightcheck_converted_to": to}
    return p


# =============================================================================================
# writing
class _Interrupted(Exception):
    pass


def _tmp_dir(out: str, kind: str = "") -> str:
    """``.OUT.weightcheck-tmp-<pid>`` beside OUT: this run's unfinished output (kind ``""``) or,
    with kind ``"old-"``, the previous OUT set aside by ``--force`` (clean_stale knows both)."""
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}{TMP_MARK}{kind}{os.getpid()}")


def _remove(path: str) -> None:
    """Delete a file, link or folder tree, as far as it can be: what is left is a leftover the
    next run's clean_stale removes."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _pid_alive(pid_text: str) -> bool:
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, it is another user's
        return True
    return True


def clean_stale(out: str) -> list[str]:
    """Tidy what a killed run left beside OUT (its process is gone):

    * ``.OUT.weightcheck-tmp-<pid>``: an unfinished output — removed;
    * ``.OUT.weightcheck-tmp-old-<pid>``: the previous OUT, set aside by ``--force`` just before
      the new one was renamed in — put back as OUT if OUT is missing (the kill fell between the
      two renames), else removed.
    """
    parent, name = os.path.split(os.path.abspath(out))
    removed = []
    prefix = f".{name}{TMP_MARK}"
    try:
        entries = sorted(os.listdir(parent))
    except OSError:
        return removed
    for e in entries:
        if not e.startswith(prefix):
            continue
        rest = e[len(prefix):]
        old = rest.startswith("old-")
        if _pid_alive((rest[4:] if old else rest).split(".")[0]):
            continue
        path = os.path.join(parent, e)
        if old and not os.path.lexists(out):
            os.rename(path, out)
            removed.append(f"{e} (restored as {name})")
            continue
        _remove(path)
        removed.append(e)
    return removed


def check_paths(src: Drafter, out: str, force: bool) -> None:
    out_abs = os.path.realpath(os.path.abspath(out))
    s = src.source
    if s.kind != "hub":
        root = s.location if s.kind == "folder" else os.path.dirname(s.location)
        root = os.path.realpath(root)
        if s.kind == "folder" and (out_abs == root or os.path.commonpath([out_abs, root]) == root):
            raise UsageError(out, f"OUT is {'SRC' if out_abs == root else 'inside SRC'} ({root}): "
                                  "refused, the source is never written to")
        # OUT must not be SRC's folder or any folder above it: --force would replace the source
        if os.path.commonpath([out_abs, root]) == out_abs:
            raise UsageError(out, f"OUT contains SRC ({s.location}): refused, replacing it would "
                                  "delete the source")
        for f in s.files.values():
            if f.local_path and os.path.realpath(f.local_path) == out_abs:
                raise UsageError(out, "OUT is a file of SRC: refused")
    if os.path.lexists(out) and not force:
        raise UsageError(out, "exists: pass --force to replace it")
    parent = os.path.dirname(out_abs) or "."
    if not os.path.isdir(parent):
        raise UsageError(out, f"parent folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(out, f"cannot write in {parent} (permission denied)")


def _copy_range(src_path: str, src_off: int, n: int, out_fd: int, out_off: int) -> None:
    fd = os.open(src_path, os.O_RDONLY)
    try:
        done = 0
        use_cfr = hasattr(os, "copy_file_range")
        while done < n:
            if use_cfr:
                try:
                    k = os.copy_file_range(fd, out_fd, n - done, src_off + done, out_off + done)
                except OSError:
                    use_cfr = False
                    continue
                if k == 0:
                    raise WeightcheckError(src_path, "source ended inside a tensor")
            else:
                buf = os.pread(fd, min(CHUNK, n - done), src_off + done)
                if not buf:
                    raise WeightcheckError(src_path, "source ended inside a tensor")
                k = os.pwrite(out_fd, buf, out_off + done)
            done += k
    finally:
        os.close(fd)


def _produce(plan: Plan, it: Item, write) -> None:
    """Stream the bytes of a non-copy item to ``write``."""
    from weightcheck.tensor_io import iter_chunks, read_range, read_small, write_cast

    if it.kind in ("cast", "pickle"):
        isz = itemsize(it.src_dtype)
        for chunk in iter_chunks(plan.src.source, it.src_name, CHUNK // isz * isz, isz):
            write_cast(write, chunk, it.src_dtype, it.dtype)
        return
    if it.kind == "embed-from-target":
        tgt = plan.embed_target
        rec = tgt.embed
        step = CHUNK // itemsize(rec.dtype) * itemsize(rec.dtype)
        for a in range(0, rec.nbytes, step):
            chunk = read_range(tgt.source, rec.name, a, min(rec.nbytes, a + step))
            write_cast(write, chunk, it.src_dtype, it.dtype)
        return
    if it.kind == "head-from-target":
        tgt = plan.head_target
        rec = tgt.lm_head or tgt.embed
        row = rec.nbytes // rec.shape[0]
        raw = read_small(plan.src.source, plan.src.by_canonical()["d2t"].name) \
            if "d2t" in plan.src.by_canonical() else None
        import struct
        vd = it.shape[0]
        d2t = list(struct.unpack(f"<{vd}q", raw)) if raw else [0] * vd
        ids = [i + d2t[i] for i in range(vd)]
        if any(not 0 <= x < rec.shape[0] for x in ids):
            raise WeightcheckError(tgt.source.spec, "d2t maps outside the target's lm_head rows")
        # stream the target head once, in chunks, and pick the rows (Range reads for a Hub target)
        wanted = {}
        for pos, tid in enumerate(ids):
            wanted.setdefault(tid, []).append(pos)
        rows_out: dict[int, bytes] = {}
        per = max(1, CHUNK // row)
        for start in range(0, rec.shape[0], per):
            stop = min(rec.shape[0], start + per)
            if not any(start <= t < stop for t in wanted):
                continue
            data = read_range(tgt.source, rec.name, start * row, stop * row)
            for t in range(start, stop):
                for pos in wanted.get(t, ()):
                    rows_out[pos] = data[(t - start) * row:(t - start + 1) * row]
        for pos in range(vd):
            write_cast(write, rows_out[pos], it.src_dtype, it.dtype)
        return
    raise AssertionError(it.kind)


def write(plan: Plan, force: bool = False, progress=None, fsync: bool = False) -> dict:
    """Write, verify, publish. Returns a summary dict.

    ``fsync``: flush every file and folder to disk before OUT appears (survives a power loss).
    Off by default, like cp, ``save_pretrained`` and ``save_file``: OUT is complete and verified
    when it appears either way; only a crash of the machine before the kernel's own writeback
    (~30 s) could lose it then."""
    out = os.path.abspath(plan.out)
    clean_stale(out)
    tmp = _tmp_dir(out)
    old_handlers = {}
    state = {"publishing": False, "deferred": None, "starting": False, "held": None}

    def on_signal(signum, frame):
        if state["publishing"]:  # the renames that put OUT in place are not interrupted
            state["deferred"] = signum
            return
        if state["starting"]:  # inside Thread.start(): raised once the thread can be stopped
            state["held"] = signum
            return
        raise _Interrupted(signum)

    try:
        for sig in (signal.SIGINT, signal.SIGTERM):  # inside the try: the finally restores them
            old_handlers[sig] = signal.getsignal(sig)  # before: a signal may come right after
            try:
                signal.signal(sig, on_signal)
            except ValueError:  # not the main thread
                del old_handlers[sig]
        os.makedirs(tmp)  # only once the handlers are in place: a signal now removes it
        state["starting"] = True  # until the with below owns the thread, a signal is held
        checker = verify_mod.RangeChecker()
        with checker:
            state["starting"] = False
            if state["held"] is not None:
                raise _Interrupted(state["held"])
            headers = _write_shards(plan, tmp, progress, checker, fsync)
            checker.finish()  # every byte range re-read and checked
        for shard in range(plan.shards):
            name = plan.shard_name(shard)
            verify_mod.reopen(os.path.join(tmp, name), headers[name],
                              {it.out_name: (it.dtype, tuple(it.shape))
                               for it in plan.items if it.shard == shard})
        index = _write_index(plan, tmp)
        files = list(headers) + index
        meta = _write_config_and_card(plan, tmp)
        if fsync:  # the shards were flushed as they were closed
            for f in index + meta:
                _fsync_path(os.path.join(tmp, f))
            _fsync_path(tmp)
        state["publishing"] = True
        _publish(tmp, out, force)
        if fsync:
            _fsync_path(os.path.dirname(out))
        summary = {"out": out, "files": files, "tensors": len(plan.items),
                   "bytes": sum(it.nbytes for it in plan.items), "fsync": fsync}
        if state["deferred"] is not None:
            summary["note"] = (f"signal {state['deferred']} arrived while OUT was being put in "
                               "place; OUT is complete and verified")
        return summary
    except _Interrupted as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WeightcheckError(plan.out, f"interrupted by signal {e.args[0]}: nothing written") from None
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WeightcheckError(plan.out, f"cannot write: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)


def _write_shards(plan: Plan, tmp: str, progress, checker, fsync: bool) -> dict:
    """Write every shard; hand each written range to ``checker`` as soon as it is on the page
    cache, so verification runs beside the copy. Where a tensor lies in the output is read back
    from the header bytes written (our strict parser), not taken from the running offset.
    Returns shard file name -> the header bytes written, in shard order."""
    from weightcheck.safetensors_header import parse_header, read_header_length
    from weightcheck.safetensors_writer import OutTensor, header_bytes

    headers = {}
    for shard in range(plan.shards):
        items, residue = _layout(plan, [it for it in plan.items if it.shard == shard])
        name = plan.shard_name(shard)
        path = os.path.join(tmp, name)
        head = header_bytes([OutTensor(it.out_name, it.dtype, it.shape, b"") for it in items],
                            plan.metadata, None if residue is None else (residue, ALIGN))
        headers[name] = head
        layout = parse_header(head[8:8 + read_header_length(head, path)], path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, head, 0)
            off = len(head)
            flushed = [0]

            def written(end, _fd=fd, _flushed=flushed):  # bytes [0, end) are in the page cache
                if fsync and end - _flushed[0] >= WRITEBACK_CHUNK:
                    _start_writeback(_fd, _flushed[0], end - _flushed[0])
                    _flushed[0] = end
            for it in items:
                if it.kind == "copy":
                    rec = plan.src.source.tensors[it.src_name]
                    spath = plan.src.source.local_path(rec.file)
                    for rel in range(0, it.nbytes, COPY_CHUNK):
                        n = min(COPY_CHUNK, it.nbytes - rel)
                        _copy_range(spath, rec.begin + rel, n, fd, off + rel)
                        checker.same(path, layout, it.out_name, rel, n, spath, rec.begin + rel)
                        if checker.error is not None:
                            raise checker.error
                        written(off + rel + n)
                        if progress:
                            progress(n)
                else:
                    crc = [0]
                    pos = [off]

                    def w(chunk, _fd=fd, _crc=crc, _pos=pos):
                        _pos[0] = _write_all(_fd, chunk, _pos[0])
                        _crc[0] = zlib.crc32(chunk, _crc[0])
                    _produce(plan, it, w)
                    if pos[0] - off != it.nbytes:
                        raise WeightcheckError(it.src_name, f"produced {pos[0] - off} bytes for "
                                                            f"{it.out_name}, expected {it.nbytes}")
                    checker.digest(path, layout, it.out_name, crc[0])
                    written(off + it.nbytes)
                    if progress:
                        progress(it.nbytes)
                off += it.nbytes
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return headers


def _write_index(plan: Plan, tmp: str) -> list:
    """model.safetensors.index.json for a sharded output; returns the names written."""
    if plan.shards == 1:
        return []
    index = {"metadata": {"total_size": sum(it.nbytes for it in plan.items)},
             "weight_map": {it.out_name: plan.shard_name(it.shard)
                            for it in sorted(plan.items, key=lambda it: it.out_name)}}
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return ["model.safetensors.index.json"]


def _layout(plan: Plan, items: list) -> tuple[list, int | None]:
    """The order of a shard's tensors in the file, and where its data buffer should start.

    Renamed tensors keep their order in the source file, so consecutive ones keep their distance,
    and the header is padded (spaces, allowed by the format) so that the bytes most of them
    take land at the same offset modulo ALIGN as in the source. That is the copy ``cp`` gets: the
    kernel copies whole pages and large folios (measured here: a 2.38 GB copy_file_range takes
    0.70 s with equal offsets modulo 64 KiB, 0.82 s modulo 4 KiB, 0.90 s at an offset of 1576
    bytes), and a filesystem with reflinks (XFS, btrfs) can share the blocks instead of copying
    them. Returns (items, data start residue modulo ALIGN, or None for no padding)."""
    def src_pos(it):
        rec = plan.src.source.tensors[it.src_name]
        return (rec.file, rec.begin)
    copies = sorted((it for it in items if it.kind == "copy"), key=src_pos)
    ordered = copies + [it for it in items if it.kind != "copy"]
    weight: dict[int, int] = {}
    pos = 0
    for it in copies:
        r = (plan.src.source.tensors[it.src_name].begin - pos) % ALIGN
        if r % 8 == 0:  # the data buffer itself stays 8-byte aligned, as the library writes it
            weight[r] = weight.get(r, 0) + it.nbytes
        pos += it.nbytes
    if not weight or sum(weight.values()) < ALIGN_MIN_BYTES:
        return ordered, None  # too little to copy for alignment to matter: no padding
    return ordered, max(weight, key=lambda r: (weight[r], -r))


def _write_all(fd: int, data, pos: int) -> int:
    view = memoryview(data)
    while view:
        k = os.pwrite(fd, view, pos)
        pos += k
        view = view[k:]
    return pos


@functools.lru_cache(maxsize=None)
def _sync_file_range():
    """libc's sync_file_range (Linux), or None. Python has no binding; ctypes is the standard
    library. Used only with --fsync, to start writing a range to disk while the next is copied,
    so the final fsync waits for the tail instead of the whole file."""
    try:
        import ctypes
        f = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, ImportError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    f.restype = ctypes.c_int
    return f


SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range, do not wait


def _start_writeback(fd: int, off: int, n: int) -> None:
    f = _sync_file_range()
    if f is not None:
        f(fd, off, n, SYNC_FILE_RANGE_WRITE)  # a hint: the fsync that follows is what counts


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_config_and_card(plan: Plan, tmp: str) -> list:
    """config.json and the README model card; returns the names written."""
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(plan.config, f, indent=2)
        f.write("\n")
    s = plan.src.source
    rev = f" at revision `{s.commit}`" if s.commit else ""
    lines = [
        f"# EAGLE-3 drafter for {plan.to}",
        "",
        f"Converted by weightcheck {__version__} from `{s.spec}`{rev} "
        f"({plan.src.dialect} dialect, {s.layout}) to the {plan.to} layout "
        f"(mappings/engines/{plan.to}.toml).",
        "",
        f"- tensors: {len(plan.items)} in {plan.shards} file(s), "
        f"{sum(it.nbytes for it in plan.items)} bytes; every tensor re-read and verified against its source",
        f"- renamed only: {sum(1 for it in plan.items if it.kind == 'copy')}; cast: "
        f"{sum(1 for it in plan.items if it.kind == 'cast')}; taken from a target: "
        f"{sum(1 for it in plan.items if it.kind.endswith('from-target'))}",
    ]
    for c in plan.config_changes:
        lines.append(f"- config: {c}")
    for n in plan.notes:
        lines.append(f"- {n}")
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return ["config.json", "README.md"]


def _publish(tmp: str, out: str, force: bool) -> None:
    if os.path.lexists(out):
        if not force:
            raise UsageError(out, "exists: pass --force to replace it")
        aside = _tmp_dir(out, "old-")
        os.rename(out, aside)
        try:
            os.rename(tmp, out)
        except OSError:
            os.rename(aside, out)
            raise
        # the old OUT is no longer needed: rename it to a plain temporary name first (atomic), so
        # a kill while it is being deleted leaves something the next run deletes, not "restores"
        doomed = _tmp_dir(out)  # free again: tmp has just become OUT
        os.rename(aside, doomed)
        _remove(doomed)
    else:
        try:
            os.rename(tmp, out)
        except OSError as e:
            if os.path.lexists(out):  # another convert won the race
                raise UsageError(out, "exists (another process wrote it first)") from None
            raise e


def plan_report(p: Plan) -> dict:
    return {
        "schema": "weightcheck.convert/1",
        "source": p.src.source.spec, "source_dialect": p.src.dialect, "to": p.to, "out": p.out,
        "shards": [p.shard_name(i) for i in range(p.shards)],
        "tensors": [{"source": it.src_name, "canonical": it.canonical, "output": it.out_name,
                     "shard": p.shard_name(it.shard), "dtype": it.dtype,
                     "source_dtype": it.src_dtype, "shape": list(it.shape), "how": it.kind,
                     "bytes": it.nbytes} for it in p.items],
        "config_changes": p.config_changes,
        "notes": p.notes,
        "config": p.config,
    }
