#!/usr/bin/env bash
# The GPU checks in one script (target: < 8 minutes on one GPU). Run from the repository root on a
# machine with a CUDA GPU and a Python that has torch (CUDA build), transformers, ray, hydra-core,
# gymnasium and pytest — e.g. the Docker image, or `make setup` with a CUDA torch:
#
#     bash launch/gpu_check.sh [OUT_DIR]
#
# 1. environment report (GPU, torch, CUDA, bf16, flash-attn, vllm);
# 2. the GPU-marked tests (pytest -m gpu): FSDP2 bf16 on NCCL, activation checkpointing, CPU
#    offload, flash-attention-2 when installed, the cuda_ipc weight sync;
# 3. a 3-step RL run with the HF engine on the Qwen2-0.5B-shaped random model in bf16 (FSDP2, NCCL,
#    colocated, cuda_ipc sync + probe), with GPU memory sampled by nvidia-smi;
# 4. a summary (tokens/s, step time, peak GPU memory, probe gap) in OUT_DIR/summary.json.
#
# Nothing is downloaded: the model is built offline by the tiny-model builder.
set -uo pipefail
OUT="${1:-${OUT:-gpu_check_out}}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export RAGEN2_CACHE="${RAGEN2_CACHE:-$OUT/cache}" RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 \
       TOKENIZERS_PARALLELISM=false PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

echo "== 1. environment"
"$PY" - <<'EOF' | tee "$OUT/env.txt"
import importlib, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", "bf16", torch.cuda.is_bf16_supported())
for m in ("transformers", "ray", "hydra", "gymnasium", "peft", "flash_attn", "vllm"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        print(m, "MISSING", type(e).__name__)
EOF
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "no CUDA device visible: nothing to check"; exit 2; }

echo "== 2. GPU tests"
timeout 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.txt" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== 3. 3-step bf16 FSDP2 run (HF engine, Qwen2-0.5B-shaped random model)"
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$OUT/gpu_mem.csv" 2>/dev/null &
SMI=$!
t0=$(date +%s)
timeout 300 "$PY" -m ragen2.train model=qwen2_0.5b_random cluster=gpu_1 engine=hf \
  trainer.total_steps=3 trainer.eval_every=0 trainer.eval_episodes=16 trainer.save_every=0 \
  trainer.warm_start.enabled=false trainer.loggers='[jsonl,console]' \
  rollout.env_groups=4 rollout.group_size=4 rollout.max_turns=2 engine.max_new_tokens=64 \
  sync.strategy=cuda_ipc sync.probe_tolerance=3e-2 \
  hydra.run.dir="$OUT/run" 2>&1 | tee "$OUT/train.txt" | tail -15
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
kill "$SMI" 2>/dev/null
echo "run wall seconds: $(( $(date +%s) - t0 ))"

echo "== 4. summary"
"$PY" - "$OUT" <<'EOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "run" / "metrics.jsonl").read_text().splitlines()] \
    if (out / "run" / "metrics.jsonl").exists() else []
steps = [r for r in rows if r.get("step", 0) > 0]
mem = [float(x) for x in (out / "gpu_mem.csv").read_text().split()] if (out / "gpu_mem.csv").exists() else []
def tps(r):
    n = 16 * r.get("rollout/num_turns_mean", 0) * r.get("rollout/response_tokens_mean", 0)
    return n / r["timing/generate_s"] if r.get("timing/generate_s") else None
s = {"steps": len(steps),
     "step_s_median": statistics.median(r["timing/step_s"] for r in steps) if steps else None,
     "update_s_median": statistics.median(r["timing/update_s"] for r in steps) if steps else None,
     "generate_tokens_per_s_median": statistics.median(t for t in map(tps, steps) if t) if steps else None,
     "probe_logprob_gap_max": max((r.get("sync/probe_logprob_gap", 0) for r in rows), default=None),
     "peak_gpu_mem_mib": max(mem) if mem else None}
(out / "summary.json").write_text(json.dumps(s, indent=1))
print(json.dumps(s, indent=1))
EOF
exit $status
