# What every side venv of the engine and trainer tests does, sourced by tests/engine/setup_*_venv.sh
# (docs/engine-test.md). Never run on its own.
#
#   side_venv NAME [VENV_DIR]  makes the venv (VENV_DIR, else ${WEIGHTCHECK_VENVS:-~/.cache/
#                              weightcheck/venvs}/NAME; $PYTHON, else python3) and installs
#                              torch==$TORCH_VERSION (2.13.0), which resolves to the CPU wheel where
#                              the machine's pip finds one (a plain `pip install torch` pulls a
#                              multi-GB CUDA build); sets VENV, PIP and CONSTRAINTS
#   pinned ARGS...             pip install ARGS with torch pinned, so no package can replace it
#   side_venv_done             pip freeze into VENV/weightcheck-freeze.txt; where it is, how long

side_venv() {
  local venvs="${WEIGHTCHECK_VENVS:-$HOME/.cache/weightcheck/venvs}"
  VENV="${2:-$venvs/$1}"
  TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
  SIDE_VENV_START=$(date +%s)
  mkdir -p "$(dirname "$VENV")"
  "${PYTHON:-python3}" -m venv "$VENV"
  PIP=("$VENV/bin/python" -m pip)
  CONSTRAINTS="$VENV/weightcheck-constraints.txt"
  printf 'torch==%s\n' "$TORCH_VERSION" > "$CONSTRAINTS"
  pinned "torch==$TORCH_VERSION"
  case "$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')" in
    *+cpu) ;;
    *) echo "warning: torch is not a +cpu build; this machine's pip found no CPU wheel" >&2 ;;
  esac
}

pinned() {
  "${PIP[@]}" install -c "$CONSTRAINTS" "$@"
}

side_venv_done() {
  "${PIP[@]}" freeze > "$VENV/weightcheck-freeze.txt"
  echo "venv: $VENV (built in $(( $(date +%s) - SIDE_VENV_START )) s, $(du -sh "$VENV" | cut -f1))"
  echo "python: $VENV/bin/python"
}
