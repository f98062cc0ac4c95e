#!/usr/bin/env bash
# Builds the side venv in which tests/engine/specforge_oracle.py runs SpecForge 0.2.0's own
# training-initialization code on CPU (tests/test_trainer_differential.py). Never the project's own
# Python: SpecForge pins its own torch and transformers.
#
#   bash tests/engine/setup_specforge_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/specforge, the place the
# tests look first (WEIGHTCHECK_SPECFORGE_PYTHON=VENV_DIR/bin/python points them at any other).
# Python: $PYTHON, else python3 (3.11 is what was tested). Re-running it on an existing venv
# reinstalls the pins in place (pip skips what is already there).
#
# How (docs/engine-test.md "Trainer oracles"):
# * torch: a plain `pip install torch` pulls a multi-GB CUDA build. torch==2.13.0 resolves to the
#   CPU wheel (2.13.0+cpu) where the machine's pip finds one (its find-links); every later pip call
#   is pinned to it with a constraints file. SpecForge 0.2.0 asks for torch==2.11.0; nothing on the
#   initialization path needs it.
# * specforge itself with --no-deps: its requirements name sglang==0.5.14 (the CUDA serving stack
#   it captures hidden states with), wandb, yunchang, tensorboard. The initialization path
#   (specforge.config, specforge.application, specforge.training.{assembly,model_loading},
#   specforge.algorithms, specforge.modeling) imports only transformers (SpecForge's own pin,
#   5.8.1), pydantic, pyyaml and datasets (the map-from-data step, data/preprocessing.py): found
#   by importing until nothing was missing. No stubs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"

SPECFORGE_VERSION="${SPECFORGE_VERSION:-0.2.0}"
DEPS=("transformers==5.8.1" "tokenizers==0.22.2" "safetensors==0.8.0" "numpy==2.4.6"
      "pydantic==2.14.4" "pyyaml==6.0.4" "datasets==5.1.0")

side_venv specforge "$@"
pinned --no-deps "specforge==$SPECFORGE_VERSION"
pinned "${DEPS[@]}"

env -u PYTHONPATH "$VENV/bin/python" - <<'PY'
import sys, time, warnings
warnings.filterwarnings("ignore")
t = time.perf_counter()
import torch, transformers, safetensors, specforge
import specforge.config, specforge.application, specforge.training.assembly
import specforge.training.model_loading, specforge.algorithms.model_providers, specforge.modeling.auto
import specforge.data.preprocessing
from importlib.metadata import version
print("python", sys.version.split()[0])
print("specforge", version("specforge"))
print("torch", torch.__version__)
print("transformers", transformers.__version__)
print("safetensors", safetensors.__version__)
print(f"import of the initialization path: {time.perf_counter() - t:.1f} s")
PY
side_venv_done
