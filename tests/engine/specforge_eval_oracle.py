"""SpecForge 0.2.0's own per-step accuracy (``acc_k``) of a drafter on offline hidden states, on CPU.

Runs in the side venv of tests/engine/setup_specforge_eval_venv.sh (never weightcheck's Python):

    python specforge_eval_oracle.py DRAFTER_DIR TARGET_DIR DATA_DIR STEPS DTYPE

and prints one JSON object: ``{"corrects": [...], "denoms": [...], "acc": [...]}`` summed over the
data's files. Everything on the path is SpecForge's own code:

- the drafter: ``AutoDraftModelConfig.from_file``, ``AutoDraftModel.from_config`` (its registry
  picks ``LlamaForCausalLMEagle3``) and ``warm_start_draft_model`` (SpecForge's own warm start
  from a pretrained drafter, specforge/training/model_loading.py), ``load_embedding(TARGET_DIR)``;
- the target head: ``TargetHead`` (its config read by ``AutoConfig``), its ``fc`` filled from the
  target's ``lm_head.weight`` (``TargetHead.load_weights`` insists on an index.json, which a
  one-file target has not: the same copy, done here);
- the data: ``list_feature_files``, ``load_feature_file``, ``normalize_offline_sample``;
- the step: ``Eagle3TrainStrategy.forward_loss`` over ``OnlineEagle3Model`` (sdpa backend), whose
  ``_acc_and_loss`` counts the hits (``acc_corrects``/``acc_denoms``).

One substitution: ``_compute_loss_and_acceptance_rate`` (the KL loss, a triton GPU kernel,
specforge/core/loss.py) returns zeros. It runs after the accuracy is counted and feeds nothing
back into it. torch.compile is disabled (TORCH_COMPILE_DISABLE=1; no compiler on the machine).
"""

import json
import os
import sys

os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

import specforge.algorithms.eagle3.model as eagle3_model  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from specforge.algorithms.eagle3.data import normalize_offline_sample  # noqa: E402
from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig  # noqa: E402
from specforge.modeling.target.target_head import TargetHead  # noqa: E402
from specforge.runtime.contracts import TrainBatch  # noqa: E402
from specforge.runtime.data_plane.feature_store import load_feature_file  # noqa: E402
from specforge.runtime.data_plane.offline_reader import list_feature_files  # noqa: E402
from specforge.training.model_loading import warm_start_draft_model  # noqa: E402
from specforge.training.strategies.base import Eagle3TrainStrategy  # noqa: E402


def _no_loss(*, logits, **_):
    z = torch.zeros((), dtype=torch.float32)
    return z, z


def main(drafter, target, data, steps, dtype):
    dt = getattr(torch, dtype)
    eagle3_model._compute_loss_and_acceptance_rate = _no_loss
    config = AutoDraftModelConfig.from_file(os.path.join(drafter, "config.json"))
    # SpecForge's warm start: the model built from its config, the checkpoint's state copied in
    # (AutoDraftModel.from_pretrained alone, under transformers 5.8.1, leaves the non-persistent
    # rotary buffers inv_freq/cos_cached uninitialized: garbage positions)
    draft = AutoDraftModel.from_config(config, torch_dtype=torch.float32)
    warm_start_draft_model(
        draft, drafter, draft_config=config, strategy="eagle3", allow_missing_embedding=True
    )
    draft.load_embedding(target)
    draft = draft.to(dt).eval()
    head = TargetHead(target)
    with safe_open(os.path.join(target, "model.safetensors"), framework="pt") as f:
        with torch.no_grad():
            head.fc.weight.copy_(f.get_tensor("lm_head.weight"))
    head = head.to(dt).eval()
    model = eagle3_model.OnlineEagle3Model(draft, length=steps, attention_backend="sdpa")
    strategy = Eagle3TrainStrategy(model, target_head=head)
    corrects = [0.0] * steps
    denoms = [0.0] * steps
    for path in list_feature_files(data):
        raw = load_feature_file(path)
        t = normalize_offline_sample(raw, max_len=1 << 20)
        t["hidden_state"] = t["hidden_state"].to(dt)
        t["target"] = t["target"].to(dt)
        batch = TrainBatch(
            sample_ids=[path],
            strategy="eagle3",
            tensors=t,
            metadata={"target_repr": "hidden_state"},
        )
        with torch.no_grad():
            out = strategy.forward_loss(batch)
        for k in range(steps):
            corrects[k] += float(out.metrics["acc_corrects"][k])
            denoms[k] += float(out.metrics["acc_denoms"][k])
    print(
        json.dumps(
            {
                "corrects": corrects,
                "denoms": denoms,
                "acc": [c / d if d else None for c, d in zip(corrects, denoms)],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
