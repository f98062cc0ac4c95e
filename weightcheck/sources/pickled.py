"""Pickled checkpoints (``.bin``, ``.pt``, a SpecForge ``training_state.pt``). A torch zip file
(what ``torch.save`` writes) is first read statically for its tensors' names, dtypes, shapes and
byte ranges (sources/torchzip.py: its opcodes walked, nothing unpickled, no torch); anything else,
or a zip that reader does not follow, only with ``torch.load(..., weights_only=True)`` and only
when torch is installed; never unpickled otherwise.
"""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.sources.base import (
    STATE_KEYS,
    Source,
    TensorRecord,
    WeightFile,
    note_duplicate,
)
from weightcheck.storage.header import TORCH_NAMES

PICKLE_EXT = (".bin", ".pt", ".pth")
_TORCH_DTYPES = {f"torch.{name}": st for st, name in TORCH_NAMES.items()}


def load_pickled(path: str) -> tuple[dict, str | None, tuple[str, ...] | None]:
    """``torch.load(path, weights_only=True)`` -> (flat name -> tensor dict, the key used, the
    dict's top-level entries when the tensors sit under that key)."""
    try:
        import torch
    except ImportError:
        raise WeightcheckError(
            path,
            "a pickled checkpoint; reading it needs torch "
            "(pip install 'weightcheck[torch]'). It is read only with "
            "torch.load(weights_only=True), never unpickled otherwise",
        ) from None
    import warnings

    try:
        # torch warns on stderr (e.g. about the pickle protocol); the one-line error says enough
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as e:
                if "mmap" not in str(e):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, zipfile errors
        text = str(e).strip()
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        msg = f"{type(e).__name__}: {lines[0][:200]}" if lines else type(e).__name__
        if "weights_only" in text or "nsupported global" in text or "GLOBAL" in text:
            # the informative line names what the pickle wanted to call (e.g. posix.system)
            why = next((ln for ln in lines if "GLOBAL" in ln or "nsupported" in ln), lines[0])
            msg = (
                "refused: the pickle needs more than tensors to load, so it was not loaded "
                f"(torch.load weights_only=True: {why[:200]})"
            )
        raise WeightcheckError(path, f"cannot load pickled checkpoint: {msg}") from None
    key = None
    top = tuple(map(str, obj)) if isinstance(obj, dict) else ()
    if isinstance(obj, dict):
        for k in STATE_KEYS:  # where trainers keep the drafter's tensors, in order
            if isinstance(obj.get(k), dict):
                obj, key = obj[k], k
                break
    if not isinstance(obj, dict):
        raise WeightcheckError(
            path, f"pickled checkpoint holds a {type(obj).__name__}, not a state dict"
        )
    flat = {}

    def walk(prefix, d):
        for k, v in d.items():
            name = f"{prefix}{k}"
            if isinstance(v, torch.Tensor):
                flat[name] = v
            elif isinstance(v, dict):
                walk(name + ".", v)

    walk("", obj)
    if not flat:
        raise WeightcheckError(path, "pickled checkpoint holds no tensors")
    return flat, key, (top if key is not None else None)


def add_pickled_file(src: Source, wf: WeightFile) -> None:
    # the torch zip reader (and pickletools, zipfile) only when a pickled file is there: ~4 ms
    # of every command's start-up otherwise
    from weightcheck.sources import torchzip

    got = torchzip.read(wf.local_path)
    if got is not None and got[0]:
        metas, wf.pickle_key, wf.pickle_meta, wf.pickle_top = got
        src.files[wf.name] = wf
        for name, m in metas.items():
            if name in src.tensors:
                note_duplicate(src, name, wf.name)
            src.tensors[name] = TensorRecord(
                name, m.dtype, m.shape, m.nbytes, wf.name, m.begin, m.end
            )
        return
    tensors, wf.pickle_key, wf.pickle_top = load_pickled(wf.local_path)
    src.files[wf.name] = wf
    for name, t in tensors.items():
        if name in src.tensors:
            note_duplicate(src, name, wf.name)
        dtype = _TORCH_DTYPES.get(str(t.dtype), str(t.dtype).replace("torch.", "").upper())
        src.tensors[name] = TensorRecord(
            name, dtype, tuple(t.shape), t.numel() * t.element_size(), wf.name
        )


def nested_files(source) -> dict:
    """The pickled weight files the engines read (``*.bin``) whose tensors sit under a key of
    their dict (``state_dict``, ``model``, ...: read there above): file name -> the WeightFile.
    The engines never look under it (engines/view.py ``as_the_engine_reads``; WC106)."""
    return {
        n: wf
        for n, wf in getattr(source, "files", {}).items()
        if wf.format == "pickle" and wf.pickle_key is not None and n.endswith(ENGINE_PICKLES)
    }


# the pickled files the engines read as weights by default (LoadFormat auto: *.safetensors and
# *.bin; a .pt only with --load-format pt: sglang 0.5.23 model_loader/loader.py:499-515, vllm
# 0.32.0 default_loader.py:186-201). A SpecForge training_state.pt is the trainers' (WC9xx).
ENGINE_PICKLES = (".bin",)
