#!/usr/bin/env bash
# Builds the side venv in which tests/engine/sglang_oracle.py runs SGLang's own drafter-loading
# code on CPU (tests/test_engine_oracles.py). Never the project's own Python: SGLang pins its own
# torch and transformers.
#
#   bash tests/engine/setup_sglang_venv.sh [VENV_DIR]
#
# VENV_DIR defaults to ${WEIGHTCHECK_VENVS:-~/.cache/weightcheck/venvs}/sglang, the place the tests
# look first (WEIGHTCHECK_SGLANG_PYTHON=VENV_DIR/bin/python points them at any other).
# Python: $PYTHON, else python3 (3.11 is what was tested). Re-running it on an existing venv
# reinstalls the pins in place (pip skips what is already there).
#
# How (docs/engine-test.md "SGLang oracle"):
# * torch: a plain `pip install torch` pulls a multi-GB CUDA build. torch==2.13.0 resolves to the
#   CPU wheel (2.13.0+cpu) where the machine's pip finds one (its find-links); every later pip
#   call is pinned to it with a constraints file. SGLang 0.5.23 asks for torch==2.14.1; nothing on
#   the weight-loading path needs it.
# * sglang itself with --no-deps: its requirements are the CUDA serving stack (flashinfer,
#   sglang-kernel, cutlass-dsl, deep-gemm, ...). Below is only what `import` of the loading path
#   asks for (found by importing until nothing was missing), at SGLang's own pins where it has one,
#   else at the version that worked here.
# * two import stubs (tests/engine/sglang_stubs/, copied into the venv and put on sys.path by a
#   .pth file): torchvision (the registry's wheels are CUDA builds and fail to import with the CPU
#   torch; SGLang imports it at module level in multimodal helpers) and vllm._custom_ops (imported
#   by the rotary-embedding constructor on this platform, called only in a forward pass).
#   SGLANG_USE_CPU_ENGINE stays unset: no CPU build of sgl_kernel is published.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv_common.sh"

SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

DEPS=(
  "transformers==5.19.0" "tokenizers==0.23.2" "sentencepiece==0.2.1"
  "compressed-tensors==0.18.0" "apache-tvm-ffi==0.1.11" "openai==2.8.0"
  "triton==3.9.0" "safetensors==0.8.0" "numpy==2.4.6"
  "orjson==3.13.0" "psutil==7.2.2" "pybase64==1.5.1" "requests==2.34.2" "pillow==13.0.0"
  "starlette==1.10.0" "fastapi==0.165.0" "uvicorn==0.55.0" "msgspec==0.23.0" "pyzmq==27.3.0"
  "ipython==9.18.1" "aiohttp==3.14.5" "dill==0.4.1" "gguf==0.19.0" "einops==0.8.2"
  "partial-json-parser==0.2.1.1.post7" "setproctitle==1.3.8"
)

side_venv sglang "$@"
pinned --no-deps "sglang==$SGLANG_VERSION"
pinned "${DEPS[@]}"

SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
STUBS="$VENV/weightcheck-sglang-stubs"
rm -rf "$STUBS"
mkdir -p "$STUBS"
cp -R "$HERE/sglang_stubs/." "$STUBS/"
find "$STUBS" -name __pycache__ -type d -prune -exec rm -rf {} +
printf '%s\n' "$STUBS" > "$SITE/weightcheck_sglang_stubs.pth"

# fail now, not in the tests, if the loading path does not import
env -u PYTHONPATH "$VENV/bin/python" - <<'PY'
import os, sys, time, warnings
warnings.filterwarnings("ignore")
t = time.perf_counter()
import sglang, torch, transformers, safetensors, triton, torchvision, vllm
import sglang.srt.models.llama_eagle3, sglang.srt.speculative.eagle_worker_v2
import sglang.srt.model_loader.loader, sglang.srt.distributed.bootstrap
assert getattr(torchvision, "WEIGHTCHECK_STUB", False) and getattr(vllm, "WEIGHTCHECK_STUB", False)
print("python", sys.version.split()[0])
print("sglang", sglang.__version__)
print("torch", torch.__version__)
print("transformers", transformers.__version__)
print("safetensors", safetensors.__version__)
print("triton", triton.__version__)
print("stubs: torchvision, vllm._custom_ops from", os.path.dirname(os.path.dirname(vllm.__file__)))
print(f"import of the loading path: {time.perf_counter() - t:.1f} s")
PY
side_venv_done
