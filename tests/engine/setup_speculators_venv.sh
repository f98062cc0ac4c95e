#!/usr/bin/env bash
# Builds the side venv in which tests/engine/speculators_oracle.py runs speculators 0.9.0's own
# loader (the one `speculators train --from-pretrained` uses) on CPU
# (tests/test_trainer_differential.py), and in which bench/bench_speculators_convert.py runs
# `speculators convert`. Never the project's own Python.
#
#   bash tests/engine/setup_speculators_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/speculators, the place the
# tests look first (WEIGHTCHECK_SPECULATORS_PYTHON=VENV_DIR/bin/python points them at any other).
# Python: $PYTHON, else python3 (3.11 is what was tested). Re-running it on an existing venv
# reinstalls the pins in place.
#
# How (docs/engine-test.md "Trainer oracles"):
# * torch: torch==2.13.0 resolves to the CPU wheel where the machine's pip finds one; every later
#   pip call is pinned to it with a constraints file (speculators allows torch>=2.9,<=2.14.1).
# * speculators and hs-connectors with --no-deps: speculators requires torchvision and torchaudio
#   (the registry's wheels are CUDA builds; nothing on the loading or convert path imports them).
#   Below is what `import speculators.train.cli` and `speculators.convert` ask for, at
#   speculators' own ranges; transformers 5.8.1 is SpecForge's pin, inside speculators'
#   >=5.0,<=5.19 (one transformers for both trainers). No stubs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"

SPECULATORS_VERSION="${SPECULATORS_VERSION:-0.9.0}"
DEPS=("transformers==5.8.1" "tokenizers==0.22.2" "safetensors==0.8.0" "numpy==2.4.6"
      "datasets==5.1.0" "openai==3.60.0" "loguru==0.7.3" "pydantic==2.14.4"
      "pydantic-settings==2.16.3" "aiohttp==3.14.5" "click==8.5.1" "httpx==0.29.0"
      "protobuf==7.36.2" "psutil==7.2.2" "rich==15.0.0" "tqdm==4.70.1" "typer==0.29.2"
      "pyyaml==6.0.4")

side_venv speculators "$@"
pinned --no-deps "speculators==$SPECULATORS_VERSION" "hs-connectors==$SPECULATORS_VERSION"
pinned "${DEPS[@]}"

env -u PYTHONPATH "$VENV/bin/python" - <<'PY'
import sys, time, warnings
warnings.filterwarnings("ignore")
t = time.perf_counter()
import torch, transformers, safetensors, speculators
import speculators.train.cli, speculators.convert.entrypoints, speculators.models.eagle3
from importlib.metadata import version
print("python", sys.version.split()[0])
print("speculators", version("speculators"))
print("torch", torch.__version__)
print("transformers", transformers.__version__)
print("safetensors", safetensors.__version__)
print(f"import of the loading path: {time.perf_counter() - t:.1f} s")
PY
test -x "$VENV/bin/speculators"
side_venv_done
