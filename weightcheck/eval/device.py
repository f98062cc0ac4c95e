"""Where eval runs (``--device auto|cpu|cuda[:N]``) and how much it may hold there at once
(docs/eval.md §7).

``auto`` is the first CUDA device when torch sees one, else the CPU. On a GPU, before anything
is loaded, the drafters' (and the target's) weights in the compute dtype plus a minimal working
set are compared with the device's free memory: a drafter that does not fit is one line naming
what it needs and what is free. The batch then takes a share of what is left.
"""

from __future__ import annotations

import re

from weightcheck.errors import UsageError, WeightcheckError

_SPEC = re.compile(r"^(auto|cpu|cuda(?::(\d+))?)$")
GIB = float(1 << 30)

CPU_BATCH_POSITIONS = 2048  # a CPU batch: large enough for the matrix kernels, small in RAM
CPU_ATTENTION_BYTES = 256 << 20
GPU_MAX_POSITIONS = 8192  # more buys the GPU little and costs pinned host memory
MIN_WORKSPACE = 1 << 30  # a GPU batch needs at least this beside the weights


def resolve(spec: str | None):
    """The torch device ``--device`` names (``auto`` when None); exit 2 when it names a GPU
    torch cannot use. Ctrl-C is held over torch's import and CUDA's discovery (interrupt.py)."""
    from weightcheck.eval.interrupt import held

    spec = (spec or "auto").strip().lower()
    m = _SPEC.match(spec)
    if m is None:
        raise UsageError(None, f"--device {spec}: expected auto, cpu, cuda or cuda:N")
    with held():
        import torch

        available = spec != "cpu" and torch.cuda.is_available()
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "auto":
        return torch.device("cuda", 0) if available else torch.device("cpu")
    if not available:
        raise UsageError(
            None,
            f"--device {spec}: torch sees no CUDA device here (torch {torch.__version__}"
            + (", a CPU-only build" if torch.version.cuda is None else "")
            + "); use --device cpu or auto",
        )
    index = int(m.group(2) or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise UsageError(
            None, f"--device {spec}: torch sees {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def describe(device) -> str:
    """The device as the report's header says it: ``cpu``, ``cuda:0 (NVIDIA H200)``."""
    if device.type != "cuda":
        return str(device)
    import torch

    return f"{device} ({torch.cuda.get_device_name(device)})"


def free_bytes(device) -> int:
    import torch

    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def check_fits(device, needed: dict[str, int], label: str) -> None:
    """Exit 2 when the weights ``needed`` (what -> bytes) and a minimal working set do not fit
    the GPU's free memory, saying how much it needs and how much is free."""
    if device.type != "cuda":
        return
    free = free_bytes(device)
    total = sum(needed.values()) + MIN_WORKSPACE
    if total > free:
        parts = ", ".join(f"{k} {size(v)}" for k, v in needed.items())
        raise WeightcheckError(
            label,
            f"does not fit {device}: needs {size(total)} ({parts}, {size(MIN_WORKSPACE)} to "
            f"work in), {size(free)} free; use --device cpu or a GPU with more memory free",
        )


def size(n: int) -> str:
    """Bytes as GiB (MiB under one GiB)."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / (1 << 20):.0f} MiB"


def per_position_bytes(models, width: int) -> int:
    """Working memory of one position of a batch, for the widest of ``models``."""
    worst = 0
    for m in models:
        el = m.dtype.itemsize
        inter = max(int(la.gate.shape[0]) for la in m.layers)
        nh_hd = max(m.H, max(_q_width(la.attn) for la in m.layers))
        per = (
            width * el * 2  # the aux input, as read and in the compute dtype
            + m.H * el * 8  # the residual stream, its norms, the 2H layer input
            + nh_hd * el * (3 + 2 * 4)  # q, k, v; the kept keys and values (up to 4 steps)
            + inter * el * 3  # gate, up, their product
            + m.lm_head.shape[0] * (el + 8)  # the logits, the argmax's work
        )
        worst = max(worst, per)
    return worst


def _q_width(attn) -> int:
    """The width of an attention's queries (Llama ``q_proj``, MLA ``q_b_proj``)."""
    w = getattr(attn, "q", None)
    if w is None:
        w = attn.q_b
    return int(w.shape[0])


def batch_positions(device, models, width: int, target_bytes_per_position: int = 0) -> int:
    """How many positions one batch holds: a fixed size on a CPU; on a GPU a quarter of the free
    memory at most, up to :data:`GPU_MAX_POSITIONS`."""
    if device.type != "cuda":
        return CPU_BATCH_POSITIONS
    per = per_position_bytes(models, width) + target_bytes_per_position
    n = int(free_bytes(device) * 0.25) // max(1, per)
    return max(256, min(GPU_MAX_POSITIONS, n))


def attention_bytes(device) -> int:
    """The attention scores' budget: 256 MiB on a CPU, an eighth of the free memory on a GPU
    (up to 8 GiB)."""
    if device.type != "cuda":
        return CPU_ATTENTION_BYTES
    return int(max(256 << 20, min(8 << 30, free_bytes(device) // 8)))
