"""SpecForge oracle: warm-start an EAGLE-3 draft model from a drafter folder with SpecForge 0.2.0's
own training-initialization code, on CPU, and say where every parameter of the trainer's model
came from.

Runs INSIDE the side venv built by tests/engine/setup_specforge_venv.sh (imports only specforge,
torch, safetensors and the standard library; never weightcheck)::

    python specforge_oracle.py --training-config CFG [--target T] [--vocab-map M] \
        [--jsonl OUT] DRAFTER [DRAFTER ...]
    python specforge_oracle.py --jobs JOBS.jsonl [--jsonl OUT]

CFG is the run's draft config (``model.draft_model_config``: the JSON weightcheck's
``--training-config`` takes), or a whole SpecForge run YAML/JSON (its ``model`` section is kept;
``draft_checkpoint_path`` is set to DRAFTER). T is the target folder (default: the tiny Llama
target of tests/fixtures/producers). M is a ``{"d2t", "t2d"}`` torch file
(``model.vocab_mapping_path``). ``--jobs``: one JSON object a line, keys ``drafter``,
``training_config``, ``target``, ``vocab_map``, ``id``.

What runs, per drafter, in SpecForge's order (paths inside the 0.2.0 wheel, site-packages/):

1. config: ``specforge.config.schema.Config`` validated from the run's settings (``model``:
   target_model_path, draft_model_config, draft_checkpoint_path, vocab_mapping_path;
   ``data.hidden_states_path``: an offline run; ``training.strategy`` eagle3), then
   ``specforge.application.resolve_run`` (the algorithm registry, as ``specforge train`` does:
   cli.py:241-246);
2. build + warm start + vocabulary map + target embedding: ``specforge.training.assembly
   ._load_draft`` (assembly.py:111-127): ``resolve_draft_config`` (training/model_loading.py:
   257-280) and the eagle3 provider's ``build_eagle3_draft`` (algorithms/model_providers.py:
   86-106): ``AutoDraftModel.from_config``, ``warm_start_draft_model`` (model_loading.py:
   430-491: a run folder's ``training_state.pt`` or, else, ``from_pretrained`` + the model's
   ``load_state_dict(strict=False)``, raising on unexpected keys and on missing non-embedding
   keys), ``load_vocab_mapping`` when the run has a map (modeling/draft/base.py:193-206),
   ``load_embedding`` from the target (base.py:135-191), ``freeze_embedding``, ``.to(dtype)``;
3. data: when the run gives no map and the draft vocabulary is pruned, SpecForge builds d2t/t2d
   from the training data's token counts and installs them (assembly.py:416-466
   ``_install_dataset_vocab_mapping``, called by ``_ensure_offline_vocab_mapping``,
   assembly.py:468-507, after ``build_model_bundle``). The oracle runs that function with a
   fixed synthetic count (token t counted t+1 times) and a temporary cache folder; the vocab
   sizes are computed as ``build_model_bundle`` does (assembly.py:196-205).

Instrumentation (observes, never changes what SpecForge does): right after
``AutoDraftModel.from_config`` returns, every floating parameter is filled with NaN (what is
still NaN at the end was written by nothing), and the model's ``load_state_dict``,
``load_vocab_mapping`` and ``load_embedding`` are wrapped to record which tensors each wrote.
The classification (trainer_oracle_common.classify) compares the final values with SRC's
tensors, the target's and the vocabulary maps.

Output: one JSON object per drafter (stdout, and ``--jsonl``): ``trainer``, ``version``,
``raises`` (null, or the first line of the exception SpecForge raised), ``stage`` (where it
raised), ``params`` ({name: "src"|"target"|"init"|"data"} over the model's state dict; {} when it
raised), ``fraction`` (parameter elements from SRC / parameter elements from SRC or at init:
the share of what SRC could fill that it fills), ``doubts`` (tensors
whose value did not confirm the recorded writer; expected empty). docs/trainers-oracle.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter

from trainer_oracle_common import (
    DATA,
    SRC,
    TARGET,
    Origins,
    Writers,
    classify,
    first_line,
    jobs_from_args,
    run_jobs,
    src_tensors,
    target_tensors,
)

TRAINER = "specforge"
VERSION = "0.2.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TARGET = os.path.join(HERE, "..", "fixtures", "producers", "target-llama")


def run_config(job: dict, workdir: str) -> dict:
    """The run's settings as SpecForge's Config takes them."""
    import json

    tc = job["training_config"]
    model = {}
    if tc.endswith((".yaml", ".yml")) or _is_run_config(tc):
        if tc.endswith((".yaml", ".yml")):
            import yaml

            with open(tc) as f:
                raw = yaml.safe_load(f)
        else:
            with open(tc) as f:
                raw = json.load(f)
        model = dict(raw.get("model") or {})
        base = os.path.dirname(os.path.abspath(tc))
        for k in ("draft_model_config", "target_model_path", "vocab_mapping_path"):
            if (
                model.get(k)
                and not os.path.isabs(model[k])
                and os.path.exists(os.path.join(base, model[k]))
            ):
                model[k] = os.path.join(base, model[k])
    else:
        model["draft_model_config"] = os.path.abspath(tc)
    model["target_model_path"] = os.path.abspath(
        job.get("target") or model.get("target_model_path") or DEFAULT_TARGET
    )
    model["draft_checkpoint_path"] = os.path.abspath(job["drafter"])
    if job.get("vocab_map"):
        model["vocab_mapping_path"] = os.path.abspath(job["vocab_map"])
    features = os.path.join(workdir, "features")
    os.makedirs(features, exist_ok=True)
    return {
        "model": model,
        "data": {"hidden_states_path": features, "cache_dir": os.path.join(workdir, "cache")},
        "training": {"strategy": "eagle3", "attention_backend": "sdpa"},
    }


def _is_run_config(path: str) -> bool:
    import json

    try:
        with open(path) as f:
            raw = json.load(f)
    except Exception:  # noqa: BLE001 - not JSON: SpecForge's own loader will say so
        return False
    return isinstance(raw, dict) and isinstance(raw.get("model"), dict) and "data" in raw


def one(job: dict) -> dict:
    import torch
    from specforge.application import resolve_run
    from specforge.config.schema import Config, migrate_legacy_config
    from specforge.modeling.auto import AutoDraftModel
    from specforge.training import assembly

    t0 = time.perf_counter()
    rec = {"drafter": job["drafter"], "trainer": TRAINER, "version": VERSION, "raises": None}
    writers = Writers()
    built = {}
    orig_from_config = AutoDraftModel.from_config.__func__

    def from_config(cls, config, torch_dtype=None, **kw):
        model = orig_from_config(cls, config, torch_dtype=torch_dtype, **kw)
        if "model" not in built:  # the training model (a later from_config is not ours)
            built["model"] = model
            _instrument(model, writers)
        return model

    stage = "config"
    with tempfile.TemporaryDirectory(prefix="wc-specforge-") as work:
        try:
            cfg = Config.model_validate(migrate_legacy_config(run_config(job, work)))
            resolved = resolve_run(cfg)
            stage = "build"
            AutoDraftModel.from_config = classmethod(from_config)
            try:
                draft_config, model = assembly._load_draft(cfg, resolved.algorithm)
            finally:
                AutoDraftModel.from_config = classmethod(orig_from_config)
            stage = "data"
            _data_vocab(cfg, resolved.algorithm, draft_config, model, writers, built)
        except Exception as e:  # noqa: BLE001 - SpecForge's own refusal is the fact
            rec.update(raises=first_line(e), stage=stage, params={}, fraction=0.0, doubts={})
            rec["elapsed_s"] = round(time.perf_counter() - t0, 3)
            return rec
        origins = Origins()
        for t in src_tensors(job["drafter"]).values():
            origins.add(SRC, t)
        for k, t in target_tensors(cfg.model.target_model_path).items():
            origins.add(TARGET, t)
        if cfg.model.vocab_mapping_path:
            vm = torch.load(cfg.model.vocab_mapping_path, map_location="cpu")
            for k in ("d2t", "t2d"):
                origins.add(DATA, vm[k])
        for t in built.get("data_map", ()):
            origins.add(DATA, t)
        params, fraction, doubts = classify(model, origins, writers)
    rec.update(stage=None, params=params, fraction=round(fraction, 6), doubts=doubts)
    rec["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return rec


def _instrument(model, writers: Writers) -> None:
    """NaN in every floating parameter; wrappers that record what each step wrote."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.fill_(float("nan"))
    orig_lsd = model.load_state_dict
    orig_vocab = model.load_vocab_mapping
    orig_embed = model.load_embedding

    def load_state_dict(state, strict=True, *a, **kw):  # the warm start
        result = orig_lsd(state, strict, *a, **kw)
        own = set(model.state_dict().keys())
        writers.wrote([k for k in state if k in own], SRC, "warm_start")
        return result

    def load_vocab_mapping(path):
        orig_vocab(path)
        writers.wrote(["d2t", "t2d"], DATA, "load_vocab_mapping")

    def load_embedding(*a, **kw):
        orig_embed(*a, **kw)
        writers.wrote(["embed_tokens.weight"], TARGET, "load_embedding")

    model.load_state_dict = load_state_dict
    model.load_vocab_mapping = load_vocab_mapping
    model.load_embedding = load_embedding


def _data_vocab(cfg, algorithm, draft_config, model, writers: Writers, built: dict) -> None:
    """SpecForge's own map-from-data step, on a fixed synthetic token count."""
    from types import SimpleNamespace

    from specforge.algorithms.contracts import FeatureMode
    from specforge.modeling.target.target_utils import load_target_config, target_vocab_size
    from specforge.training import assembly

    if FeatureMode.OFFLINE not in algorithm.providers.vocab_mapping_modes:
        return
    target_config = load_target_config(
        cfg.model.target_model_path,
        cache_dir=cfg.model.cache_dir,
        trust_remote_code=cfg.model.trust_remote_code,
    )
    bundle = SimpleNamespace(
        draft_model=model,
        target_vocab_size=target_vocab_size(target_config),
        draft_vocab_size=int(getattr(draft_config, "draft_vocab_size", draft_config.vocab_size)),
    )
    counts = Counter({t: t + 1 for t in range(bundle.target_vocab_size)})
    model.vocab_mapping_loaded = False
    with open(os.devnull, "w") as devnull:  # process_token_dict_to_mappings prints
        stdout, sys.stdout = sys.stdout, devnull
        try:
            assembly._install_dataset_vocab_mapping(
                cfg, bundle, counts=counts, dataset_identity="weightcheck-oracle"
            )
        finally:
            sys.stdout = stdout
    if model.vocab_mapping_loaded:
        writers.wrote(["d2t", "t2d"], DATA, "data")
        built["data_map"] = (model.d2t.detach().clone(), model.t2d.detach().clone())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drafters", nargs="*")
    ap.add_argument("--training-config")
    ap.add_argument("--target")
    ap.add_argument("--vocab-map")
    ap.add_argument("--jobs")
    ap.add_argument("--jsonl")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not args.jobs and not (args.drafters and args.training_config):
        ap.error("give DRAFTER... with --training-config, or --jobs")
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    run_jobs(jobs_from_args(args), one, args.jsonl, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
