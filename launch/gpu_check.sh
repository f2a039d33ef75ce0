#!/usr/bin/env bash
# The GPU checks, one prepared script (target: under 10 minutes on one H100/H200):
#
#     bash launch/gpu_check.sh [OUT_DIR] [WHEEL_DIR] [gpu_check.py OPTIONS...]
#
# 1. launch/gpu_check.py, which needs only torch (CUDA build), transformers, tokenizers, numpy,
#    omegaconf and gymnasium -- no Ray, Hydra or vLLM: the FSDP2 learner in bf16 on NCCL, the HF
#    engine in bf16 in a second process on the same GPU, the post-sync probe's bf16 gap (the value
#    behind sync.probe_tolerance for bf16), bf16-vs-fp32 learner logprobs, GRPO updates with a KL
#    reference (time, tokens/s, peak memory), the cuda_ipc push between the two processes (probe
#    gap before/after), engine tokens/s -> OUT_DIR/summary.json. On the Qwen2-0.5B-shaped random
#    model built offline (nothing is downloaded). No install of ragen2 needed: PYTHONPATH is the
#    checkout, and ragen2 finds envs/ and configs/ there under their installed names
#    (ragen2/_checkout.py). OPTIONS go to gpu_check.py (e.g. --rows 64 --micro-batch 16).
# 2. only where ray, hydra and pytest import (the Docker image, or `make setup` with a CUDA torch):
#    the GPU-marked tests (pytest -m gpu) and a 3-step RL run through the real CLI
#    (model=qwen2_0.5b_random cluster=gpu_1 engine=hf, cuda_ipc sync, probe) with GPU memory
#    sampled by nvidia-smi -> OUT_DIR/run_summary.json.
#
# WHEEL_DIR: wheels installed first (pip --no-index --target) for a bare machine that lacks the
# pure-Python packages of step 1 (omegaconf, antlr4-python3-runtime, gymnasium,
# farama-notifications, cloudpickle): `bash launch/gpu_check_wheels.sh WHEEL_DIR` builds them here
# (~0.7 MB, carried with the checkout). Scratch files (the model, the installed wheels, the run's
# checkpoints) go to SCRATCH (default ${TMPDIR:-/tmp}/ragen2_gpu_check), never into OUT_DIR:
# only summaries and logs come back from a lent machine.
# DEVICE=cpu: the CPU rehearsal of step 1 (gpu_check.py --device cpu --quick), no CUDA needed, no
# step 2. CI runs it from a copy of the checkout with an interpreter on whose path ragen2 is not
# installed, and Ray, Hydra and vLLM cannot be imported (tests/test_gpu_check.py, tier 1).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT="${1:-${OUT:-gpu_check_out}}"
WHEELS="${2:-}"
shift $(( $# < 2 ? $# : 2 ))
DEVICE="${DEVICE:-cuda}"
PY="${PYTHON:-python3}"
SCRATCH="${SCRATCH:-${TMPDIR:-/tmp}/ragen2_gpu_check}"
mkdir -p "$OUT" "$SCRATCH"
export RAGEN2_CACHE="${RAGEN2_CACHE:-$SCRATCH/cache}" RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 \
       TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 \
       PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$WHEELS" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SCRATCH/site" "$WHEELS"/*.whl || { echo "installing $WHEELS failed"; exit 2; }
  export PYTHONPATH="$PYTHONPATH:$SCRATCH/site"
fi
[ "$DEVICE" = cpu ] || "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "no CUDA device visible: nothing to check"; exit 2; }
status=0

echo "== 1. learner, HF engine, probe and cuda_ipc push (launch/gpu_check.py)"
[ "$DEVICE" = cpu ] && set -- --device cpu --quick "$@"
timeout 420 "$PY" launch/gpu_check.py --out "$OUT" --scratch "$SCRATCH" "$@" 2>&1 | tee "$OUT/gpu_check.txt" | grep -v "it/s]"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
[ "$DEVICE" = cpu ] && exit $status  # the rehearsal: step 2 needs a GPU

if ! "$PY" -c "import ray, hydra, pytest" 2>/dev/null; then
  echo "== 2. skipped: ray, hydra or pytest is not installed (the full-stack checks need the image)"
  exit $status
fi
echo "== 2a. GPU tests"
timeout 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== 2b. 3-step bf16 RL run through the CLI (HF engine, Qwen2-0.5B-shaped random model)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/gpu_mem.csv" 2>/dev/null &
SMI=$!
t0=$(date +%s)
timeout 300 "$PY" -m ragen2.train model=qwen2_0.5b_random cluster=gpu_1 engine=hf \
  trainer.total_steps=3 trainer.eval_every=0 trainer.eval_episodes=16 trainer.save_every=0 \
  trainer.warm_start.enabled=false trainer.loggers='[jsonl,console]' \
  rollout.env_groups=4 rollout.group_size=4 rollout.max_turns=2 engine.max_new_tokens=64 \
  sync.strategy=cuda_ipc hydra.run.dir="$SCRATCH/run" 2>&1 | tee "$OUT/train.txt" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
kill "$SMI" 2>/dev/null
echo "run wall seconds: $(( $(date +%s) - t0 ))"
"$PY" - "$OUT" "$SCRATCH" <<'PYEOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
path = pathlib.Path(sys.argv[2]) / "run" / "metrics.jsonl"
rows = [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
steps = [r for r in rows if r.get("step", 0) > 0 and "timing/step_s" in r]
mem = [float(x) for x in (out / "gpu_mem.csv").read_text().split()] if (out / "gpu_mem.csv").exists() else []
s = {"steps": len(steps),
     "step_s_median": statistics.median(r["timing/step_s"] for r in steps) if steps else None,
     "update_s_median": statistics.median(r["timing/update_s"] for r in steps) if steps else None,
     "probe_logprob_gap_max": max((r.get("sync/probe_logprob_gap", 0) for r in rows), default=None),
     "peak_gpu_mem_mib": max(mem) if mem else None}
(out / "run_summary.json").write_text(json.dumps(s, indent=1))
print(json.dumps(s, indent=1))
PYEOF
exit $status
