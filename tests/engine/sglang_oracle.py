"""SGLang oracle: load EAGLE-3 drafters with SGLang 0.5.23's own loader code, on CPU, and say
what every checkpoint tensor became.

Runs INSIDE the side venv built by tests/engine/setup_sglang_venv.sh (imports only sglang, torch,
safetensors and the standard library; never weightcheck)::

    python sglang_oracle.py --target TARGET_DIR [--jsonl OUT] DRAFTER_DIR [DRAFTER_DIR ...]

SGLang is imported and the target model loaded once; then each drafter goes, in isolation (every
exception caught and reported per drafter), through the path an SGLang server with
``--speculative-algorithm EAGLE3 --speculative-draft-model-path DRAFTER --device cpu`` takes:

* config: ``ServerArgs`` resolved and published (sglang 0.5.23 python/sglang/srt/runtime_context.py
  ``publish``; the speculative hooks read the draft config there), the target runner's aux-state
  resolution (model_executor/model_runner_components/spec_aux_hidden_state.py
  ``resolve_spec_aux_hidden_state_config``), the draft ``ModelConfig`` (configs/model_config.py
  ``ModelConfig.from_server_args(..., is_draft_model=True)``: draft-arch rewrites, dtype rule),
  and the target's ``set_eagle3_layers_to_capture`` (attention_backend_setup.py
  ``configure_aux_hidden_state_capture``) on the real tiny target model;
* build: draft placement (speculative/draft_parallel.py, model-class resolution), then inside the
  draft scopes EagleDraftWorker uses (speculative/eagle_worker_v2.py ``EagleDraftWorker.__init__``)
  ``build_load_config`` + ``load_model_with_memory_saver`` (model_runner.py ``load_model``):
  loader selection, ``_initialize_model`` (the model class's constructor);
* load: the loader's weight iterator and the model's ``load_weights``
  (e.g. models/llama_eagle3.py ``LlamaForCausalLMEagle3.load_weights``);
* bind: ``EagleDraftWorker.init_token_map`` + ``init_lm_head`` (set_embed / set_embed_and_head
  from the target model, hot_token_id), SGLang's own methods run on a bare worker object.

Instrumentation (observes, never changes what SGLang does): just before ``load_weights`` every
floating-point parameter is filled with NaN, every parameter's ``weight_loader`` is wrapped (a
parameter without one gets ``default_weight_loader``, exactly what ``getattr(param,
"weight_loader", default_weight_loader)`` would return) to record which checkpoint key wrote
which parameter (and shard; a write is recorded only when the loader returns), and the weight
iterator is wrapped to know the current key. When ``load_weights`` raises, the key it stopped on
(the one whose ``weight_loader`` raised, else the one being processed) is an ``error`` and the keys
the iterator never yielded are ``not_reached``. What is still NaN after ``load_weights`` was
written by nothing. A checkpoint tensor that itself holds NaN would look unwritten there.

MLA drafters (``Eagle3DeepseekV2ForCausalLM``, models/kimi_k25_eagle3.py) take the same path. Two
things differ: its ``load_weights`` writes ``cat([q_a_proj, kv_a_proj_with_mqa])`` into one fused
parameter, which the recorder attributes to both keys (``_Recorder.pieces``), and its bind step
calls ``torch.cuda.synchronize()``, which raises on a CPU torch: that one call is made a no-op
during bind and every absorbed call is listed in the record's ``cpu_patches`` (``--strict-cuda``:
not neutralised, the bind fails with SGLang's own error). A key on which SGLang logged a WARNING
and that wrote nothing is ``warned``.

Output: one JSON object per drafter (stdout, and ``--jsonl`` if given), schema in
docs/engine-test.md "SGLang oracle". Extra engine details sit under the key ``"sglang"``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
import time
import traceback
import warnings

from oracle_common import checkpoint_keys, first_line, instrument, new_record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "0")
os.environ.setdefault("TQDM_DISABLE", "1")
warnings.filterwarnings("ignore")

ENGINE_VERSION = "0.5.23"


class Engine:
    """SGLang imported once, the process group and the target model built once."""

    def __init__(self, target: str, verbose: bool = False, cuda_sync_patch: bool = True):
        t0 = time.perf_counter()
        logging.basicConfig(level=logging.INFO if verbose else logging.ERROR)
        self.cuda_sync_patch = cuda_sync_patch
        # SGLang's loggers at WARNING at least, so that what a loader warns about is seen (and
        # captured per key below); they still go to stderr only
        sg_log = logging.getLogger("sglang")
        if not verbose:
            sg_log.setLevel(logging.WARNING)
        # SGLang's own WARNING lines while a drafter loads, attributed to the key being processed
        # (e.g. kimi_k25_eagle3.py ``logger.warning("Eagle3 MLA: skipping unexpected weight %s",
        # name)``)
        sg_log.addHandler(instrument.KeyedWarnings(lambda: getattr(self, "recorder", None)))
        import torch
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.configs.update_config import adjust_config_with_unaligned_cpu_tp
        from sglang.srt.distributed import bootstrap
        from sglang.srt.layers.moe.utils import (
            draft_model_build_scope,
            speculative_moe_a2a_backend_context,
            speculative_moe_backend_context,
        )
        from sglang.srt.model_executor.model_runner_components import load_model_utils as lmu
        from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
            configure_aux_hidden_state_capture,
        )
        from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
            resolve_spec_aux_hidden_state_config,
        )
        from sglang.srt.model_loader import loader as loader_mod
        from sglang.srt.model_loader.weight_utils import default_weight_loader
        from sglang.srt.runtime_context import (
            SpawnRanks,
            get_exec,
            get_model,
            get_spec,
            publish,
            spawn_world_rank,
        )
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.draft_parallel import (
            model_draft_parallel_spec,
            resolve_draft_parallel_layout,
        )
        from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        from sglang.srt.speculative.spec_utils import draft_pp_context, draft_tp_context
        from sglang.srt.utils.torch_memory_saver_adapter import TorchMemorySaverAdapter

        self.torch = torch
        self.m = dict(
            publish=publish,
            SpawnRanks=SpawnRanks,
            spawn_world_rank=spawn_world_rank,
            ServerArgs=ServerArgs,
            ModelConfig=ModelConfig,
            loader_mod=loader_mod,
            default_weight_loader=default_weight_loader,
            lmu=lmu,
            resolve_spec_aux_hidden_state_config=resolve_spec_aux_hidden_state_config,
            configure_aux_hidden_state_capture=configure_aux_hidden_state_capture,
            SpeculativeAlgorithm=SpeculativeAlgorithm,
            EagleDraftWorker=EagleDraftWorker,
            draft_pp_context=draft_pp_context,
            draft_tp_context=draft_tp_context,
            model_draft_parallel_spec=model_draft_parallel_spec,
            resolve_draft_parallel_layout=resolve_draft_parallel_layout,
            draft_model_build_scope=draft_model_build_scope,
            speculative_moe_a2a_backend_context=speculative_moe_a2a_backend_context,
            speculative_moe_backend_context=speculative_moe_backend_context,
            TorchMemorySaverAdapter=TorchMemorySaverAdapter,
            get_exec=get_exec,
            get_model=get_model,
            get_spec=get_spec,
            adjust_config_with_unaligned_cpu_tp=adjust_config_with_unaligned_cpu_tp,
        )
        self.import_seconds = time.perf_counter() - t0
        self.target = os.path.abspath(target)
        self.algo = SpeculativeAlgorithm.from_string("EAGLE3")
        self.recorder: _Recorder | None = None
        self._install_hook()

        t1 = time.perf_counter()
        # Publish once with the target only to bring up the process group (gloo, world of 1):
        # sglang 0.5.23 distributed/bootstrap.py init_parallel_runtime, as a scheduler does.
        sa = self._server_args(None)
        self._publish(sa)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        bootstrap.init_parallel_runtime(server_args=sa, device="cpu", dist_port=port)
        # The target: its own ModelConfig (managers/tp_worker.py _init_model_config) and load.
        target_config = ModelConfig.from_server_args(sa)
        loaded, self.target_config, self.target_load_config = self._load(
            sa, target_config, None, is_draft=False
        )
        self.target_model = loaded.model
        self.target_ptrs = {p.data_ptr(): n for n, p in self.target_model.named_parameters()}
        self.target_seconds = time.perf_counter() - t1

    # -- helpers around SGLang's own entry points ----------------------------------------------
    def _server_args(self, drafter):
        kw = dict(model_path=self.target, device="cpu", tp_size=1, skip_tokenizer_init=True)
        if drafter is not None:
            kw.update(speculative_algorithm="EAGLE3", speculative_draft_model_path=drafter)
        return self.m["ServerArgs"](**kw)

    def _publish(self, sa):
        m = self.m
        m["publish"](
            sa,
            role="scheduler",
            ranks=m["SpawnRanks"](
                world_rank=m["spawn_world_rank"](sa, tp_rank=0, pp_rank=0), dp_rank=None, gpu_id=0
            ),
        )

    def _memory_saver(self):
        return self.m["TorchMemorySaverAdapter"].create(
            enable=self.m["get_exec"]().features.enable_memory_saver
        )

    def _load_config(self, sa, load_format):
        gm = self.m["get_model"]()
        return self.m["lmu"].build_load_config(
            server_args=sa,
            tp_rank=0,
            load_format=load_format,
            remote_instance_weight_transporter_engine=None,
            remote_instance_weight_transporter_session_id="",
            draft_model_idx=None,
            weight_cache_mode=gm.weight_cache_mode,
            weight_cache_socket=gm.weight_cache_socket,
        )

    def _load(self, sa, model_config, load_format, is_draft):
        """What sglang 0.5.23 model_executor/model_runner.py ``ModelRunner.load_model`` does on
        a CPU device before and around the loader: load config, IPC weight cache (off), the CPU
        TP config adjustment, the runner's load-format scope, load_model_with_memory_saver."""
        m = self.m
        load_config = self._load_config(sa, load_format)
        m["lmu"].maybe_enable_ipc_weight_cache(load_config=load_config)
        model_config = m["adjust_config_with_unaligned_cpu_tp"](model_config, load_config, 1)
        scope = (
            m["get_model"]().override(load_format=load_format)
            if load_format is not None
            else contextlib.nullcontext()
        )
        with scope:
            loaded = m["lmu"].load_model_with_memory_saver(
                model_config=model_config,
                load_config=load_config,
                device="cpu",
                gpu_id=0,
                memory_saver_adapter=self._memory_saver(),
                is_draft_worker=is_draft,
            )
        return loaded, model_config, load_config

    def _install_hook(self):
        """Wrap DefaultModelLoader.load_weights_only: the instrumentation runs right around the
        model's own load_weights, whatever class the loader built."""
        DML = self.m["loader_mod"].DefaultModelLoader
        original = DML.__dict__["load_weights_only"].__func__
        engine = self

        def load_weights_only(model, weights, target_device):
            rec = engine.recorder
            if rec is None or rec.model is not None:  # the target, or not ours
                return original(model, weights, target_device)
            rec.begin(model)
            try:
                original(model, rec.iterate(weights), target_device)
            except BaseException as e:
                rec.fail(e)
                raise
            finally:  # also when load_weights raises: what was written until then
                rec.end()

        DML.load_weights_only = staticmethod(load_weights_only)

    @contextlib.contextmanager
    def _cuda_sync_neutralised(self, out: dict):
        """The bind step of the MLA drafter ends with ``torch.cuda.empty_cache();
        torch.cuda.synchronize()`` (sglang 0.5.23 models/kimi_k25_eagle3.py set_embed /
        set_embed_and_head), which raises ``AssertionError: Torch not compiled with CUDA enabled``
        on a CPU torch. With ``cuda_sync_patch`` (the default) ``torch.cuda.synchronize`` is a
        no-op during bind only, and every call it absorbed is reported in the record's
        ``cpu_patches`` list (absent when none was made: the Llama drafter's bind uses
        ``current_platform.synchronize()``). Without it SGLang's own error is the result."""
        torch = self.torch
        if not self.cuda_sync_patch or torch.cuda.is_available():
            yield
            return
        calls = []
        original = torch.cuda.synchronize

        def synchronize(device=None):
            frame = traceback.extract_stack(limit=2)[0]
            calls.append(f"{os.path.basename(frame.filename)}:{frame.lineno} {frame.name}")

        torch.cuda.synchronize = synchronize
        try:
            yield
        finally:
            torch.cuda.synchronize = original
            if calls:
                out["cpu_patches"] = [
                    f"torch.cuda.synchronize() made a no-op during bind, called from {c}"
                    for c in calls
                ]

    # -- one drafter ---------------------------------------------------------------------------
    def run(self, drafter: str) -> dict:
        m = self.m
        t0 = time.perf_counter()
        out = new_record("sglang", ENGINE_VERSION, drafter)
        out["sglang"] = {}
        extra = out["sglang"]
        rec = self.recorder = _Recorder(self)
        stage = "config"
        try:
            path = os.path.abspath(drafter)
            sa = self._server_args(path)
            self._publish(sa)
            spec = m["get_spec"]()
            # target runner: the draft config read in draft mode + the aux ids to capture
            aux = m["resolve_spec_aux_hidden_state_config"](
                server_args=sa,
                model_config=self.target_config,
                spec_algorithm=self.algo,
                is_draft_worker=False,
            )
            draft_config = aux.draft_model_config  # the draft read in draft mode
            if draft_config is None:
                raise RuntimeError("oracle: SGLang resolved no draft model config")
            hf = draft_config.hf_config
            out["architecture"] = (getattr(hf, "architectures", None) or [None])[0]
            out["config"] = _config_summary(hf, draft_config, aux)
            self.target_model.model.layers_to_capture = []
            m["configure_aux_hidden_state_capture"](
                model=self.target_model,
                eagle_use_aux_hidden_state=aux.eagle_use_aux_hidden_state,
                eagle_aux_hidden_state_layer_ids=aux.eagle_aux_hidden_state_layer_ids,
                dflash_use_aux_hidden_state=aux.dflash_use_aux_hidden_state,
                dflash_target_layer_ids=aux.dflash_target_layer_ids,
                is_dspark=aux.is_dspark,
            )
            tm = self.target_model.model
            ltc = list(getattr(tm, "layers_to_capture", []) or [])
            extra["layers_to_capture"] = ltc
            extra["use_aux_hidden_state"] = bool(aux.eagle_use_aux_hidden_state)
            if not ltc:  # the target captures nothing: no aux ids in use
                out["config"]["aux_layer_ids"] = None
                out["config"]["aux_layer_ids_from"] = None
            elif aux.eagle_aux_hidden_state_layer_ids is None:
                # no ids in the draft config: set_eagle3_layers_to_capture(None) sets
                # layers_to_capture = [2, L//2, L-3] itself; in SGLang's id convention
                # (layers_to_capture = id + 1) that is:
                out["config"]["aux_layer_ids"] = [i - 1 for i in ltc]
                out["config"]["aux_layer_ids_from"] = "default"
            # sglang 0.5.23 models/llama.py LlamaModel.forward: layer i gets capture_output
            # `if i in self.layers_to_capture`, i.e. the residual stream ENTERING layer i = the
            # output of layer i-1 (-1: the embedding output); once per layer, in layer order.
            start = getattr(tm, "start_layer", 0)
            end = getattr(tm, "end_layer", self.target_config.hf_text_config.num_hidden_layers)
            captured = [i - 1 for i in range(start, end) if i in ltc]
            out["config"]["captured_layers"] = captured or None

            stage = "build"
            layout = m["resolve_draft_parallel_layout"](
                m["model_draft_parallel_spec"](draft_config, spec_algorithm=self.algo)
            )
            with (
                m["draft_tp_context"](layout),
                m["draft_pp_context"](),
                m["speculative_moe_backend_context"](),
                m["speculative_moe_a2a_backend_context"](),
                m["draft_model_build_scope"](),
            ):
                try:
                    # the draft TpModelWorker's own ModelConfig (managers/tp_worker.py
                    # _init_model_config), then ModelRunner.load_model
                    runner_config = m["ModelConfig"].from_server_args(
                        sa,
                        model_path=spec.speculative_draft_model_path,
                        model_revision=spec.speculative_draft_model_revision,
                        is_draft_model=True,
                        context_length=self.target_config.context_len,
                    )
                    loaded, _, _ = self._load(
                        sa, runner_config, spec.speculative_draft_load_format, is_draft=True
                    )
                except BaseException:
                    if rec.model is not None:
                        stage = "load"
                    raise
            model = loaded.model
            out["architecture"] = type(model).__name__
            if rec.model is None:
                raise RuntimeError("oracle: the loader never called load_weights_only")

            post = {}  # MLA: kv_b_proj split by post_load_weights (run inside load_weights)
            for mname, mod in model.named_modules():
                for attr in ("w_kc", "w_vc"):
                    t = getattr(mod, attr, None)
                    if isinstance(t, self.torch.Tensor):
                        post[f"{mname}.{attr}"] = list(t.shape)
            if post:
                extra["post_load_weights"] = post

            stage = "bind"
            worker = object.__new__(m["EagleDraftWorker"])
            worker.speculative_algorithm = self.algo
            worker.target_worker = _NS(
                model_runner=_NS(
                    model=self.target_model,
                    model_config=self.target_config,
                    load_config=self.target_load_config,
                )
            )
            worker.draft_runner = _NS(model=model)
            with self._cuda_sync_neutralised(out):
                worker.init_token_map()
                worker.init_lm_head()
            hot = getattr(worker, "hot_token_id", None)
            extra["hot_token_id_len"] = None if hot is None else int(hot.shape[0])
            extra["load_lm_head_from_target"] = bool(
                getattr(model, "load_lm_head_from_target", False)
            )
            stage = None
            out["started"] = True
        except BaseException as e:  # one bad drafter must not stop the batch
            if isinstance(e, KeyboardInterrupt):
                raise
            out["stage"] = stage
            out["error"] = first_line(e)
            extra["traceback_tail"] = traceback.format_exc().strip().splitlines()[-3:]
        finally:
            self.recorder = None
        try:
            rec.report(out, bound=out["started"])
        except Exception as e:  # the report must not hide the engine's verdict
            extra["report_error"] = first_line(e)
        extra["seconds"] = round(time.perf_counter() - t0, 3)
        return out


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _config_summary(hf, draft_config, aux) -> dict:
    torch_dtype = str(draft_config.dtype).replace("torch.", "")
    ids = aux.eagle_aux_hidden_state_layer_ids
    dvs = getattr(hf, "draft_vocab_size", None) if "draft_vocab_size" in hf.__dict__ else None
    return {
        "hidden_size": getattr(hf, "hidden_size", None),
        "num_hidden_layers": getattr(hf, "num_hidden_layers", None),
        "vocab_size": getattr(hf, "vocab_size", None),
        "draft_vocab_size": dvs,
        "dtype": torch_dtype,
        "aux_layer_ids": list(ids) if ids is not None else None,
        "aux_layer_ids_from": "config" if ids is not None else None,
        "captured_layers": None,
        "tie_word_embeddings": bool(getattr(hf, "tie_word_embeddings", False)),
    }


class _Recorder(instrument.LoaderLog):
    """What each checkpoint key wrote during the model's load_weights (the writes recorded by
    weightcheck/engines/instrument.py, the module ``check --live`` uses)."""

    def __init__(self, engine: Engine):
        super().__init__(untagged_is_current=True)  # SGLang's tensors are untagged: the current key
        self.engine = engine
        self.model = None
        self.keys: dict[str, dict] = {}  # key -> {"fate", "params"}
        self.order: list[str] = []
        self.tensors: dict[str, object] = {}  # key -> the tensor SGLang's iterator yielded
        self.writes: dict[str, list] = {}  # param name -> [(key, shard_id)] in call order
        self.iter_done = False  # the weight iterator was exhausted
        self.failing: str | None = None  # the key load_weights stopped on
        self.load_failed = False
        self.nan_state: dict[str, str] = {}
        self.names: dict[int, str] = {}

    def begin(self, model):
        torch = self.engine.torch
        self.model = model
        self.names = {id(p): n for n, p in model.named_parameters()}
        with torch.no_grad():
            for _name, p in model.named_parameters():
                if p.is_floating_point():
                    p.data.fill_(float("nan"))
        self.wrap(model, self.engine.m["default_weight_loader"])

    def before(self, param, shard):
        return param.data.clone() if shard is not None else None

    def wrote(self, w) -> None:
        torch = self.engine.torch
        pname = w.param
        pieces = self.pieces(w.loaded) if w.shard is None else None
        if pieces:  # a tensor SGLang built from several keys (MLA: cat(q_a, kv_a))
            for i, (key, rows) in enumerate(pieces):
                self.writes.setdefault(pname, []).append((key, f"cat{i}", rows))
                ent = self.keys[key]
                ent["fate"] = "loaded"
                if pname not in ent["params"]:
                    ent["params"].append(pname)
            return
        rows = None
        if w.before is not None and w.before.numel():  # which rows (dim 0) this write changed
            before, after = w.before, w.tensor.data
            same = (before == after) | (torch.isnan(before) & torch.isnan(after))
            changed = (~same).reshape(same.shape[0], -1).any(dim=1).nonzero()
            if len(changed):
                rows = (int(changed.min()), int(changed.max()) + 1)
        key = w.key
        self.writes.setdefault(pname, []).append((key, w.shard, rows))
        if key is not None:
            ent = self.keys[key]
            ent["fate"] = "loaded"
            if pname not in ent["params"]:
                ent["params"].append(pname)

    def pieces(self, loaded):
        """When the tensor handed to a weight_loader is not the current key's (another shape),
        the checkpoint tensors it is the row-wise concatenation of, each exactly once:
        ``[(key, (first row, end row)), ...]``; None if it is not such a concatenation.
        (sglang 0.5.23 kimi_k25_eagle3.py load_weights hands ``torch.cat([q_a, kv_a])`` to the
        fused parameter while processing whichever half came second.)"""
        torch = self.engine.torch
        cur = self.tensors.get(self.current) if self.current is not None else None
        if cur is None or loaded is cur or tuple(cur.shape) == tuple(loaded.shape):
            return None
        if loaded.dim() < 1:
            return None
        recent = list(dict.fromkeys(reversed(self.order)))  # newest first
        out, off, used = [], 0, set()
        n = loaded.shape[0]
        while off < n:
            for k in recent:
                t = self.tensors.get(k)
                if k in used or t is None or t.dim() != loaded.dim():
                    continue
                if tuple(t.shape[1:]) != tuple(loaded.shape[1:]) or off + t.shape[0] > n:
                    continue
                if torch.equal(loaded[off : off + t.shape[0]], t.to(loaded.dtype)):
                    out.append((k, (off, off + t.shape[0])))
                    used.add(k)
                    off += t.shape[0]
                    break
            else:
                return None
        return out if len(out) > 1 else None

    def iterate(self, weights):
        model = self.model
        for name, tensor in weights:
            hot_before = getattr(model, "hot_token_id", None)
            self.current = name
            self.keys.setdefault(name, {"fate": "dropped", "params": []})
            if name in self.order:
                self.keys[name]["repeated"] = True
            self.order.append(name)
            self.tensors[name] = tensor
            yield name, tensor
            hot_after = getattr(model, "hot_token_id", None)
            if hot_after is not None and hot_after is not hot_before:
                self.keys[name]["fate"] = "loaded"
                self.keys[name]["params"].append("hot_token_id")
            self.current = None
        self.iter_done = True

    def fail(self, e: BaseException):
        """load_weights raised: the key it stopped on is an error (the one whose weight_loader
        raised this exception, else the one being processed; None: between keys)."""
        self.load_failed = True
        self.failing = self.stopped_on(e)
        if self.failing in self.keys:
            self.keys[self.failing]["fate"] = "error"

    def end(self):
        torch = self.engine.torch
        for name, p in self.model.named_parameters():
            if not p.is_floating_point() or not p.numel():
                # an integer parameter, or an empty one (intermediate_size 0): no NaN to read,
                # loaded when its weight loader was called for it
                self.nan_state[name] = "loaded" if name in self.writes else "init"
                continue
            nan = torch.isnan(p.data)
            n = int(nan.sum())
            self.nan_state[name] = "init" if n == p.numel() else "partial" if n else "loaded"

    # -- the per-drafter JSON ------------------------------------------------------------------
    def report(self, out: dict, bound: bool):
        keys = {k: {"fate": v["fate"], "params": list(v["params"])} for k, v in self.keys.items()}
        for k, msgs in self.warnings.items():  # wrote nothing, and SGLang logged a warning on it
            if k in keys and keys[k]["fate"] == "dropped":
                keys[k]["fate"] = "warned"
                keys[k]["warning"] = msgs[0]
        # then the checkpoint's names the iterator never yielded (file order): not reached when
        # loading never started or stopped early, else dropped (SGLang did not read them)
        stopped = self.model is None or (self.load_failed and not self.iter_done)
        unread = "not_reached" if stopped else "dropped"
        for k in checkpoint_keys(out["drafter"]):
            keys.setdefault(k, {"fate": unread, "params": []})
        out["keys"] = keys
        extra = out["sglang"]
        extra["key_order"] = list(self.order)  # as SGLang's weight iterator yielded them
        extra["writers"] = {p: [k for k, _, _ in w] for p, w in self.writes.items()}
        extra["shards"] = {k: s for w in self.writes.values() for k, s, _ in w if s is not None}
        for which in ("d2t", "t2d"):  # present: in the checkpoint, read or not
            present = [k for k in keys if k.split(".")[-1] == which]
            out[which]["present"] = bool(present)
            consumed = None
            for k in present:
                if keys[k]["params"]:
                    consumed = keys[k]["params"][0]
            out[which]["consumed_as"] = consumed
        if self.model is None:
            return
        params = {}
        target_ptrs = self.engine.target_ptrs
        for name, p in self.model.named_parameters():
            state = self.nan_state.get(name, "init")
            if bound and p.data_ptr() in target_ptrs:
                state = "from_target"
            params[name] = {
                "shape": list(p.shape),
                "state": state,
                "equals_checkpoint": self._equals(name, p, state),
            }
        out["params"] = params

    def _equals(self, name, p, state):
        """The parameter vs the checkpoint tensor(s) that wrote it, cast to its dtype, each write
        applied in the order it came: a whole-parameter write sets all of it, a shard's (q/k/v,
        gate/up) the rows it changed — so a fused tensor beside its parts is compared row by row
        with the copy written last. None: nothing wrote it."""
        torch = self.engine.torch
        writes = self.writes.get(name)
        if not writes:
            return None
        got = p.data
        exp = got.clone()
        with torch.no_grad():
            for key, shard, rows in writes:
                expected = self.tensors[key].to(dtype=got.dtype)
                if shard is None:  # a whole-parameter write
                    if state in ("partial", "init"):
                        return False
                    if tuple(expected.shape) == tuple(got.shape):
                        exp.copy_(expected)
                    elif (  # vocab padding: the loader zero-fills rows past the checkpoint's
                        expected.dim() == got.dim() >= 1
                        and tuple(expected.shape[1:]) == tuple(got.shape[1:])
                        and expected.shape[0] < got.shape[0]
                    ):
                        n = expected.shape[0]
                        exp[:n] = expected
                        exp[n:] = 0
                    else:
                        return False
                    continue
                if rows is None:  # wrote what was already there
                    continue
                a, b = rows
                if b - a != expected.shape[0] or tuple(got[a:b].shape) != tuple(expected.shape):
                    return False
                exp[a:b] = expected
            # rows no write reached are NaN in both (begin() fills every parameter with NaN):
            # equal here, as the partial state already says they are at init
            same = (exp == got) | (torch.isnan(exp) & torch.isnan(got))
            return bool(same.all())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="the target model directory")
    ap.add_argument("--jsonl", help="also write one JSON object per line to this file")
    ap.add_argument("--verbose", action="store_true", help="SGLang's INFO logs on stderr")
    ap.add_argument(
        "--details",
        action="store_true",
        help='add a "sglang" object: layers_to_capture, the iterator\'s key order, '
        "which keys wrote each parameter, shard ids, timings, traceback tail",
    )
    ap.add_argument(
        "--strict-cuda",
        action="store_true",
        help="do not neutralise torch.cuda.synchronize() in the bind step (the MLA drafter's "
        "set_embed* calls it; on a CPU torch that fails the bind with SGLang's own error)",
    )
    ap.add_argument("drafters", nargs="+")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    # SGLang prints warnings at import and publish; keep stdout for the JSON lines
    with contextlib.redirect_stdout(sys.stderr):
        engine = Engine(args.target, verbose=args.verbose, cuda_sync_patch=not args.strict_cuda)
    print(
        json.dumps(
            {
                "oracle": "sglang",
                "engine_version": ENGINE_VERSION,
                "event": "ready",
                "import_seconds": round(engine.import_seconds, 3),
                "target_seconds": round(engine.target_seconds, 3),
            }
        ),
        file=sys.stderr,
    )
    sink = open(args.jsonl, "w") if args.jsonl else None
    try:
        for d in args.drafters:
            with contextlib.redirect_stdout(sys.stderr):
                res = engine.run(d)
            if not args.details:
                res.pop("sglang", None)
            line = json.dumps(res, sort_keys=False)
            print(line, flush=True)
            if sink:
                sink.write(line + "\n")
                sink.flush()
    finally:
        if sink:
            sink.close()
    print(
        json.dumps(
            {
                "event": "done",
                "drafters": len(args.drafters),
                "seconds": round(time.perf_counter() - t0, 3),
            }
        ),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
