"""What both engine oracles (sglang_oracle.py, vllm_oracle.py) need alike. Imported by them from
this folder, inside the side venvs: the standard library and safetensors only.

The instrumentation of the engine's loader (which checkpoint tensor wrote which parameter) is
weightcheck's own, weightcheck/engines/instrument.py, the module ``check --live`` uses: loaded here
by its path, since weightcheck is not installed in the side venvs (it imports the standard
library only)."""

from __future__ import annotations

import glob
import importlib.util
import os
import sys


def _load_instrument():
    name = "weightcheck_instrument"  # not under weightcheck.: the package is not imported here
    if name in sys.modules:
        return sys.modules[name]
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "weightcheck", "engines", "instrument.py")
    spec = importlib.util.spec_from_file_location(name, os.path.normpath(path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


instrument = _load_instrument()
first_line = instrument.first_line


def new_record(oracle: str, version: str, drafter: str) -> dict:
    """An oracle's record of one drafter before anything ran (the keys both oracles write)."""
    return {
        "oracle": oracle,
        "engine_version": version,
        "drafter": drafter,
        "started": False,
        "stage": None,
        "error": None,
        "architecture": None,
        "config": None,
        "keys": {},
        "params": {},
        "d2t": {"present": False, "consumed_as": None},
        "t2d": {"present": False, "consumed_as": None},
    }


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
