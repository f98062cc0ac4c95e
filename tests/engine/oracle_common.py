"""What both engine oracles (sglang_oracle.py, vllm_oracle.py) need alike. Imported by them from
this folder, inside the side venvs: the standard library and safetensors only."""

from __future__ import annotations

import glob
import os


def caused_by(e: BaseException, inner: BaseException) -> bool:
    """``inner`` is ``e`` or in its cause/context chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        if e is inner:
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def first_line(e: BaseException) -> str:
    """``"<ExceptionType>: <first line of its message>"`` (just the type if there is no message)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def checkpoint_keys(drafter: str) -> list[str]:
    """Every tensor name in the drafter's safetensors files (the engine may not read all of them)."""
    from safetensors import safe_open

    names = []
    for f in sorted(glob.glob(os.path.join(drafter, "*.safetensors"))):
        try:
            with safe_open(f, "pt") as s:
                names += list(s.keys())
        except Exception:  # noqa: BLE001 - a broken file: the engine's iterator reports it
            pass
    return names
