"""What both trainer oracles (specforge_oracle.py, speculators_oracle.py) need alike. Imported by
them from this folder, inside the trainers' side venvs: torch, safetensors and the standard
library only (never weightcheck, never the trainers themselves).

How a parameter is classified (docs/trainers-oracle.md): the trainer's own code runs; a wrapper
records, for every parameter/buffer of the trainer's model, the *last step that wrote it* (the
warm start's ``load_state_dict``, the vocabulary map, the target embedding, ...); and the final
values are compared with SRC's tensors, the target's tensors and the run's vocabulary map. A
floating parameter that still holds NaN was written by nothing ("init"). A value equal to exactly
one origin is that origin; a value equal to several (e.g. an ``embed_tokens`` SRC copied from the
target) is the last writer's.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sys
import traceback
import warnings

SRC, TARGET, INIT, DATA = "src", "target", "init", "data"

# both oracles run offline and quiet: set before either imports transformers or its trainer
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
warnings.filterwarnings("ignore")


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def digest(t) -> tuple:
    """(dtype, shape, sha1 of the bytes) of a tensor, contiguous on CPU."""
    import torch

    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        raw = t.view(torch.int16).numpy().tobytes()
    elif t.dtype == torch.bool:
        raw = t.to(torch.uint8).numpy().tobytes()
    else:
        raw = t.numpy().tobytes()
    return (str(t.dtype), tuple(t.shape), hashlib.sha1(raw).hexdigest())


class Origins:
    """Value digests of every tensor an origin holds, indexed for a lookup by value. A tensor is
    registered as it is and cast to each dtype the trainer's model holds (the trainer casts when
    it copies)."""

    def __init__(self):
        self.by_digest: dict[tuple, set] = {}
        self.tensors: list[tuple[str, object]] = []

    def add(self, origin: str, tensor) -> None:
        self.tensors.append((origin, tensor))

    def index(self, dtypes) -> None:
        self.by_digest = {}
        for origin, t in self.tensors:
            for dt in {t.dtype, *dtypes}:
                if t.is_floating_point() != dt.is_floating_point:
                    continue
                try:
                    d = digest(t.to(dt))
                except Exception:  # noqa: BLE001 - a cast torch refuses: no match by that dtype
                    continue
                self.by_digest.setdefault(d, set()).add(origin)

    def of(self, value) -> set:
        return set(self.by_digest.get(digest(value), ()))


def src_tensors(drafter: str) -> dict:
    """Every tensor the drafter folder holds, by name: ``*.safetensors``, ``pytorch_model*.bin``,
    ``training_state.pt`` (``draft_state_dict``), also one folder down (a run's checkpoint
    folders). Unreadable files are skipped (the trainer reports them)."""
    import torch
    from safetensors.torch import load_file

    out = {}
    files = []
    for pat in ("*.safetensors", "pytorch_model*.bin", "training_state.pt"):
        files += glob.glob(os.path.join(drafter, pat)) + glob.glob(os.path.join(drafter, "*", pat))
    for f in sorted(set(files)):
        try:
            if f.endswith(".safetensors"):
                sd = load_file(f)
            else:
                sd = torch.load(f, map_location="cpu", weights_only=True)
                if isinstance(sd, dict) and isinstance(sd.get("draft_state_dict"), dict):
                    sd = sd["draft_state_dict"]
        except Exception:  # noqa: BLE001
            continue
        if isinstance(sd, dict):
            for k, v in sd.items():
                if isinstance(v, torch.Tensor):
                    out[f"{os.path.relpath(f, drafter)}:{k}"] = v
    return out


def target_tensors(target: str) -> dict:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(glob.glob(os.path.join(target, "*.safetensors"))):
        try:
            out.update(load_file(f))
        except Exception:  # noqa: BLE001
            continue
    return out


class Writers:
    """The last step that wrote each of the model's tensors, recorded by the oracles' wrappers."""

    def __init__(self):
        self.last: dict[str, str] = {}
        self.steps: dict[str, list] = {}

    def wrote(self, names, origin: str, step: str) -> None:
        for n in names:
            self.last[n] = origin
            self.steps.setdefault(n, []).append(step)


def classify(model, origins: Origins, writers: Writers) -> tuple[dict, float, dict]:
    """``{name: origin}`` for every tensor of the model's state dict, the fraction SRC
    initializes (parameter elements from SRC / those from SRC or at init), and the names whose
    value disagreed with their recorded writer."""
    import torch

    state = model.state_dict(keep_vars=True)
    origins.index({t.dtype for t in state.values() if isinstance(t, torch.Tensor)})
    params = {}
    doubts = {}
    for name, t in state.items():
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach()
        writer = writers.last.get(name)
        if t.is_floating_point() and t.numel() and bool(torch.isnan(t).any()):
            params[name] = INIT
            if writer not in (None, INIT):
                doubts[name] = f"recorded {writer} but still NaN"
            continue
        by_value = origins.of(t)
        if writer is not None and (writer in by_value or writer == INIT):
            params[name] = writer
        elif len(by_value) == 1:
            params[name] = next(iter(by_value))
            if writer is not None:
                doubts[name] = f"recorded {writer}, value is {params[name]}'s"
        elif writer is not None:
            params[name] = writer
            doubts[name] = f"recorded {writer}, value matches {sorted(by_value) or 'nothing'}"
        else:
            params[name] = INIT
    # of the parameters SRC could fill (neither the target's nor the run's map), the share by
    # element count SRC fills (buffers are not parameters): the replay's ``fraction``
    src = init = 0
    for name, p in model.named_parameters():
        if params.get(name) == SRC:
            src += p.numel()
        elif params.get(name) == INIT:
            init += p.numel()
    return params, (src / (src + init) if src + init else 0.0), doubts


def emit(rec: dict, jsonl) -> None:
    line = json.dumps(rec, sort_keys=True)
    print(line, flush=True)
    if jsonl is not None:
        jsonl.write(line + "\n")
        jsonl.flush()


def jobs_from_args(args) -> list[dict]:
    """One job per drafter: the shared options, or one JSON object a line from ``--jobs``
    (keys drafter, training_config, target, vocab_map, and the oracle's own)."""
    if args.jobs:
        with open(args.jobs) as f:
            return [json.loads(line) for line in f if line.strip()]
    return [
        {
            "drafter": d,
            "training_config": args.training_config,
            "target": args.target,
            "vocab_map": args.vocab_map,
        }
        for d in args.drafters
    ]


def run_jobs(jobs, one, jsonl_path, verbose=False) -> None:
    jsonl = open(jsonl_path, "w") if jsonl_path else None
    try:
        for job in jobs:
            try:
                rec = one(job)
            except Exception as e:  # noqa: BLE001 - the oracle's own failure, said per drafter
                rec = {"drafter": job.get("drafter"), "oracle_error": first_line(e)}
                if verbose:
                    traceback.print_exc(file=sys.stderr)
            rec.setdefault("id", job.get("id"))
            emit(rec, jsonl)
    finally:
        if jsonl is not None:
            jsonl.close()
