"""Drafters written by the trainers' own save functions, for the trainer differential
(tests/engine/trainer_differential.py). Runs INSIDE a trainer's side venv (specforge or
speculators: whichever is importable)::

    python trainer_written.py OUT_DIR

SpecForge 0.2.0: the draft model ``AutoDraftModel.from_config`` builds from the run's draft
config (tests/fixtures/producers/inputs/specforge-draft-config.json), its weights set from a
fixed seed and d2t/t2d from ``process_token_dict_to_mappings`` (data/preprocessing.py), written
by the model's own ``save_pretrained`` (transformers' PreTrainedModel, what SpecForge's exporters
call) -> ``OUT_DIR/specforge-save_pretrained``.

speculators 0.9.0: the speculators-train fixture loaded with ``Eagle3DraftModel.from_pretrained``
(the target as verifier) and written by its ``save_pretrained`` (model.py ``SpeculatorModel``;
what ``speculators train`` checkpoints through) -> ``OUT_DIR/speculators-save_pretrained``; and
the same model saved after ``speculators_config.verifier.name_or_path`` is set to null (what
``weightcheck convert --to speculators`` wrote without --target before issue #23) ->
``OUT_DIR/speculators-save_pretrained-noverifier``.
Prints one line per folder written.
"""

from __future__ import annotations

import os
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCERS = os.path.join(HERE, "..", "fixtures", "producers")
SEED = 20250611


def write_specforge(out: str) -> None:
    from collections import Counter

    import torch
    from specforge.data.preprocessing import process_token_dict_to_mappings
    from specforge.modeling.auto import AutoDraftModel
    from specforge.training.model_loading import load_draft_config_source

    cfg = load_draft_config_source(os.path.join(PRODUCERS, "inputs", "specforge-draft-config.json"))
    model = AutoDraftModel.from_config(cfg, attention_backend="sdpa", torch_dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.02 + (p.dim() == 1))
        counts = Counter({t: (t * 7919) % 1009 + 1 for t in range(cfg.vocab_size)})
        with open(os.devnull, "w") as devnull:
            stdout, sys.stdout = sys.stdout, devnull
            try:
                d2t, t2d = process_token_dict_to_mappings(
                    counts, cfg.draft_vocab_size, cfg.vocab_size
                )
            finally:
                sys.stdout = stdout
        model.d2t.copy_(d2t)
        model.t2d.copy_(t2d)
    dest = os.path.join(out, "specforge-save_pretrained")
    model.save_pretrained(dest)
    print(dest)


def write_speculators(out: str) -> None:
    from speculators.models.eagle3 import Eagle3DraftModel

    cwd = os.getcwd()
    os.chdir(PRODUCERS)  # the fixture's verifier path is relative: target-llama
    try:
        model = Eagle3DraftModel.from_pretrained(os.path.join(PRODUCERS, "speculators-train"))
    finally:
        os.chdir(cwd)
    dest = os.path.join(out, "speculators-save_pretrained")
    model.config.speculators_config.verifier.name_or_path = os.path.abspath(
        os.path.join(PRODUCERS, "target-llama")
    )
    model.save_pretrained(dest)
    print(dest)
    model.config.speculators_config.verifier.name_or_path = None
    dest = os.path.join(out, "speculators-save_pretrained-noverifier")
    model.save_pretrained(dest)
    print(dest)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    try:
        import specforge  # noqa: F401
    except ImportError:
        write_speculators(out)
    else:
        write_specforge(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
