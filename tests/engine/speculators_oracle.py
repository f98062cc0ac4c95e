"""speculators oracle: load an EAGLE-3 drafter for fine-tuning with speculators 0.9.0's own loader
(the path ``speculators train --from-pretrained DRAFTER`` takes), on CPU, and say where every
parameter of the trainer's model came from.

Runs INSIDE the side venv built by tests/engine/setup_speculators_venv.sh (imports only
speculators, torch, safetensors and the standard library; never weightcheck)::

    python speculators_oracle.py [--training-config RUN_YAML] [--target T] [--vocab-map M] \
        [--data-vocab-size N] [--jsonl OUT] DRAFTER [DRAFTER ...]
    python speculators_oracle.py --jobs JOBS.jsonl [--jsonl OUT]

T is the verifier (``--verifier-name-or-path``; default: the tiny Llama target of
tests/fixtures/producers). Each drafter runs with the working directory set to T's parent
folder, so a relative ``speculators_config.verifier.name_or_path`` (speculators records the
verifier path as passed, e.g. ``target-llama``) names the target as it did where the drafter was
written. RUN_YAML: a speculators run config (``--config``, stage-shaped ``train:``); a JSON
training config is not read (``--from-pretrained`` takes precedence over every other
model-definition option: train/config/resolution.py ``_validate_draft_init``). M: a
``{"d2t", "t2d"}`` torch file, given to speculators as ``--d2t-path``/``--t2d-path`` (.npy).
N: ``--draft-vocab-size N`` with a ``token_freq.pt`` in the data folder (token t counted t+1
times), so speculators builds the map from the data. Without M or N no map is given and the
drafter's own d2t/t2d stay (train/cli.py:398-440: "Using full verifier vocab").

What runs, per drafter (paths inside the 0.9.0 wheel, site-packages/speculators/):

1. config: ``TrainConfig.from_sources`` (train/config/schema.py: the flags ``--from-pretrained``,
   ``--verifier-name-or-path``, ``--data-path``, the vocab flags) flattened to the namespace
   ``main`` uses (train/cli.py:595-600), and the rotary patch ``main`` installs
   (cli.py:620-626);
2. vocabulary: ``parse_vocab_mappings`` (cli.py:398-444);
3. build + load: the eagle3 class from ``SpeculatorModel.registry`` and ``build_draft_model``
   (cli.py:482-540): ``config_class.from_pretrained`` then ``model_class.from_pretrained(...,
   t2d, d2t, verifier)`` (model.py:239-398): transformers' loader, ``load_vocab_mappings``,
   ``load_verifier_weights`` (model.py:81-201; eagle3/core.py:174-190: the verifier config is
   loaded and its hidden size must equal the draft's).

Instrumentation (observes, never changes what speculators does): transformers'
``PreTrainedModel._finalize_model_loading`` is wrapped to read its loading report (the keys
loaded from the checkpoint, and the missing or mismatched ones it initializes), and, while
``load_vocab_mappings`` / ``load_verifier_weights`` run, ``torch.nn.Module.load_state_dict`` is
wrapped to record which of the model's tensors each wrote. speculators itself fills the
embedding and both heads with NaN before loading (model.py:73-79). The classification
(trainer_oracle_common.classify) compares the final values with SRC's tensors, the target's
(``lm_head`` rows at the model's t2d included) and the vocabulary map.

Output: as specforge_oracle.py (``trainer`` "speculators"), plus ``uninitialized`` (tensors the
checkpoint lacks that transformers neither loaded nor reported missing: never written) and
``by_chance`` ({name: ["init", "target"]}: embed_tokens / lm_head absent from the checkpoint keep
never-written memory, which ``load_verifier_weights`` replaces with the target's only if it
happens to hold a NaN). docs/trainers-oracle.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time

from trainer_oracle_common import (
    DATA,
    INIT,
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

TRAINER = "speculators"
VERSION = "0.9.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TARGET = os.path.join(HERE, "..", "fixtures", "producers", "target-llama")


class _Tracker:
    """The writers of the model being loaded (one drafter at a time)."""

    def __init__(self):
        self.writers = Writers()
        self.model = None
        self.origin = None  # set while load_vocab_mappings / load_verifier_weights run
        self.step = None
        self.ckpt_names = set()  # the tensor names of the drafter's checkpoint
        self.uninitialized = set()
        self.loaded = set()

    def prefixes(self) -> dict:
        return {id(m): n for n, m in self.model.named_modules()} if self.model is not None else {}


TRACK = _Tracker()


def _install_wrappers(model_class) -> None:
    import torch
    import transformers.modeling_utils as mu

    orig_finalize = mu.PreTrainedModel._finalize_model_loading

    def finalize(model, load_config, loading_info):
        info = orig_finalize(model, load_config, loading_info)
        if TRACK.model is None and isinstance(model, model_class):
            TRACK.model = model
            missing = set(info.missing_and_mismatched())
            names = list(model.state_dict().keys())
            # a checkpoint name carrying the base model prefix (model.) loads without it
            # (transformers core_model_loading.py rename_source_key): it is the same tensor
            prefix = f"{model.base_model_prefix}." if model.base_model_prefix else None
            loaded = [
                n
                for n in names
                if n not in missing
                and (n in TRACK.ckpt_names or (prefix and prefix + n in TRACK.ckpt_names))
            ]
            # neither loaded nor reported missing: a module speculators marks
            # ``_is_hf_initialized`` (model.py:73-79) whose key the checkpoint lacks keeps the
            # memory transformers allocated for it off the meta device (never written)
            TRACK.uninitialized = {n for n in names if n not in missing and n not in loaded}
            TRACK.loaded = set(loaded)
            TRACK.writers.wrote(loaded, SRC, "from_pretrained")
            TRACK.writers.wrote([n for n in names if n not in loaded], INIT, "from_pretrained")
        return info

    mu.PreTrainedModel._finalize_model_loading = staticmethod(finalize)

    orig_lsd = torch.nn.Module.load_state_dict

    def load_state_dict(self, state_dict, *a, **kw):
        result = orig_lsd(self, state_dict, *a, **kw)
        if TRACK.origin is not None and TRACK.model is not None:
            prefix = TRACK.prefixes().get(id(self))
            if prefix is not None:
                own = set(self.state_dict().keys())
                names = [f"{prefix}.{k}" if prefix else k for k in state_dict if k in own]
                TRACK.writers.wrote(names, TRACK.origin, TRACK.step)
        return result

    torch.nn.Module.load_state_dict = load_state_dict

    def during(method, origin):
        orig = getattr(model_class, method)

        def wrapped(self, *a, **kw):
            if TRACK.model is None:
                TRACK.model = self
            before = (TRACK.origin, TRACK.step)
            TRACK.origin, TRACK.step = origin, method
            try:
                return orig(self, *a, **kw)
            finally:
                TRACK.origin, TRACK.step = before

        setattr(model_class, method, wrapped)

    during("load_vocab_mappings", DATA)
    during("load_verifier_weights", TARGET)


def one(job: dict) -> dict:
    import numpy as np
    import torch
    from speculators.model import SpeculatorModel
    from speculators.models.eagle3.rotary_partial import install_partial_neox_rotary
    from speculators.train import cli
    from speculators.train.config import TrainConfig

    t0 = time.perf_counter()
    rec = {"drafter": job["drafter"], "trainer": TRAINER, "version": VERSION, "raises": None}
    TRACK.__init__()
    drafter = os.path.abspath(job["drafter"])
    target = os.path.abspath(job.get("target") or DEFAULT_TARGET)
    TRACK.ckpt_names = {k.split(":", 1)[1] for k in src_tensors(drafter)}
    stage = "config"
    with tempfile.TemporaryDirectory(prefix="wc-speculators-") as work:
        data = os.path.join(work, "data")
        os.makedirs(data)
        flags = {
            "from_pretrained": drafter,
            "verifier_name_or_path": target,
            "data_path": data,
            "save_path": os.path.join(work, "out"),
            "speculator_type": "eagle3",
        }
        if job.get("vocab_map"):
            vm = torch.load(job["vocab_map"], map_location="cpu")
            for k in ("d2t", "t2d"):
                np.save(os.path.join(work, f"{k}.npy"), vm[k].numpy())
                flags[f"{k}_path"] = os.path.join(work, f"{k}.npy")
        if job.get("data_vocab_size"):
            from transformers import AutoConfig

            v = AutoConfig.from_pretrained(target).vocab_size
            torch.save({t: t + 1 for t in range(v)}, os.path.join(data, "token_freq.pt"))
            flags["draft_vocab_size"] = int(job["data_vocab_size"])
        tc = job.get("training_config")
        config_path = tc if tc and tc.endswith((".yaml", ".yml")) else None
        cwd = os.getcwd()
        try:
            os.chdir(os.path.dirname(target))
            cfg = TrainConfig.from_sources(cli=flags, config_path=config_path, argv=[])
            args = argparse.Namespace(**cfg.flatten())
            if not args.draft_mrope_full_head_hack:
                install_partial_neox_rotary()
            stage = "vocab"
            with contextlib.redirect_stdout(sys.stderr):
                d2t, t2d, draft_vocab_size = cli.parse_vocab_mappings(args)
            stage = "build"
            model_class = SpeculatorModel.registry[args.speculator_type]
            if not getattr(model_class, "_wc_wrapped", False):
                _install_wrappers(model_class)
                model_class._wc_wrapped = True
            model = cli.build_draft_model(args, model_class, t2d, d2t, draft_vocab_size)
        except Exception as e:  # noqa: BLE001 - speculators' own refusal is the fact
            rec.update(raises=first_line(e), stage=stage, params={}, fraction=0.0, doubts={})
            rec["elapsed_s"] = round(time.perf_counter() - t0, 3)
            return rec
        finally:
            os.chdir(cwd)
        origins = Origins()
        for t in src_tensors(drafter).values():
            origins.add(SRC, t)
        tt = target_tensors(target)
        for t in tt.values():
            origins.add(TARGET, t)
        head = tt.get("lm_head.weight", tt.get("model.embed_tokens.weight"))
        if head is not None and getattr(model, "t2d", None) is not None:
            mask = model.t2d.to(torch.bool)
            if mask.shape[0] == head.shape[0]:
                origins.add(TARGET, head[mask])
        for k, t in (("d2t", d2t), ("t2d", t2d)):
            if t is not None:
                origins.add(DATA, t)
        params, fraction, doubts = classify(model, origins, TRACK.writers)
    # speculators marks embed_tokens and lm_head ``_is_hf_initialized`` (model.py:73-79), so
    # transformers never initializes them when the checkpoint lacks them (reported missing or
    # not): they keep the memory allocated off the meta device, and load_verifier_weights copies
    # the target's over them only when that memory holds a NaN (model.py:169, 182): by chance
    chance = sorted({"embed_tokens.weight", "lm_head.weight"} - TRACK.loaded)
    rec.update(stage=None, params=params, fraction=round(fraction, 6), doubts=doubts)
    rec["uninitialized"] = sorted(TRACK.uninitialized)
    rec["by_chance"] = {n: [INIT, TARGET] for n in chance}
    rec["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drafters", nargs="*")
    ap.add_argument("--training-config")
    ap.add_argument("--target")
    ap.add_argument("--vocab-map")
    ap.add_argument("--data-vocab-size", type=int)
    ap.add_argument("--jobs")
    ap.add_argument("--jsonl")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not args.jobs and not args.drafters:
        ap.error("give DRAFTER... or --jobs")
    import logging

    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR)
    jobs = jobs_from_args(args)
    if not args.jobs and args.data_vocab_size:
        for j in jobs:
            j["data_vocab_size"] = args.data_vocab_size
    run_jobs(jobs, one, args.jsonl, args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
