#!/usr/bin/env bash
# Builds the side venv in which tests/engine/specforge_eval_oracle.py runs SpecForge 0.2.0's own
# EAGLE-3 training forward and accuracy code on CPU (tests/test_eval_specforge.py, -m engine).
#
#   bash tests/engine/setup_specforge_eval_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/specforge-eval
# (WEIGHTCHECK_SPECFORGE_EVAL_PYTHON=VENV_DIR/bin/python points the test at any other).
#
# As the trainer oracles' venv (setup_specforge_venv.sh: torch==2.13.0 is the CPU wheel on our
# machines; specforge with --no-deps, its import path's own pins), plus triton: the module holding
# OnlineEagle3Model (specforge/algorithms/eagle3/model.py) imports specforge/core/loss.py, which
# imports triton at module level. triton imports on a machine without a GPU; its kernel (the KL
# loss) is never run by the oracle, which computes the accuracy only.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"

SPECFORGE_VERSION="${SPECFORGE_VERSION:-0.2.0}"
DEPS=("transformers==5.8.1" "tokenizers==0.22.2" "safetensors==0.8.0" "numpy==2.4.6"
      "pydantic==2.14.4" "pyyaml==6.0.4" "datasets==5.1.0" "triton==3.9.0")

# scripts/prepare_hidden_states.py is not in the wheel (tests/test_eval_producers_own.py runs it):
# fetched into VENV/specforge-scripts, checked by its sha256, from the repository commit nearest the
# 0.2.0 wheel (version.txt 0.2.0; the wheel's specforge/ differs from it in 5 files, on the script's
# path only in distributed.py, which the wheel makes import yunchang only for sequence parallelism)
SPECFORGE_COMMIT="${SPECFORGE_COMMIT:-a6b6b0230009d15ec2a97a57384e6f53f0f96946}"
PREPARE_SHA256="37bed64cf70d6042f696079c624b6eecc974711fe6d90c7f98b0e07c03d37cb9"

side_venv specforge-eval "$@"
pinned --no-deps "specforge==$SPECFORGE_VERSION"
pinned "${DEPS[@]}"
env -u PYTHONPATH TORCH_COMPILE_DISABLE=1 "$VENV/bin/python" -c \
  "import specforge.algorithms.eagle3.model, specforge.modeling.draft.llama3_eagle; print('specforge eval oracle imports')"
mkdir -p "$VENV/specforge-scripts"
# SPECFORGE_GIT=<a SpecForge clone's git directory> reads it from there instead (a machine that
# cannot reach GitHub: a mirror or a bare clone that has the commit)
if [ -n "${SPECFORGE_GIT:-}" ]; then
  git --git-dir "$SPECFORGE_GIT" show "$SPECFORGE_COMMIT:scripts/prepare_hidden_states.py" \
    > "$VENV/specforge-scripts/prepare_hidden_states.py.part"
else
  curl -fsSL -o "$VENV/specforge-scripts/prepare_hidden_states.py.part" \
    "https://raw.githubusercontent.com/sgl-project/SpecForge/$SPECFORGE_COMMIT/scripts/prepare_hidden_states.py"
fi
echo "$PREPARE_SHA256  $VENV/specforge-scripts/prepare_hidden_states.py.part" | sha256sum -c -
mv "$VENV/specforge-scripts/prepare_hidden_states.py.part" "$VENV/specforge-scripts/prepare_hidden_states.py"
side_venv_done
