"""Does overlapping generation with the update make a step faster? (issue 31, item 5)

Runs the default job (``ragen2-train``) for a few steps at ``trainer.max_staleness`` = 0 (the
on-policy loop) and = 1 (the next batch generated while the learner updates), on two CPU layouts,
the four runs interleaved in one sitting (order k0, k1 then k1, k0 on the next repetition):

* ``colocated``: the default. The learner's two FSDP2 ranks and the vLLM engine share every core,
  so an overlapped generation takes cores from the update (little to gain).
* ``split``: ``cluster.layout=split`` (:mod:`ragen2.cluster.cores`): one learner rank pinned to
  the first half of the cores, the engine to the rest. At k = 0 each side idles while the other
  works; at k = 1 both work at once. The benchmark reads every actor thread's CPU mask from
  ``/proc`` while the run goes (``affinity``) to show the pinning held.

Per run: the median of each ``timing/*`` metric over the steady steps (2 .. N-1: step 1 generates
its own batch at k = 1 and the last step has nothing to generate ahead). Ratios: k = 1's median
step time over k = 0's, per layout; goal on ``split``: <= 0.75.

Then a **projection** (not a measurement) to GPU layouts from the k = 0 per-phase medians of the
colocated default, with the formula written into the JSON:
G = generation (``timing/rollout_s``), L = the learner's work between collecting and pushing
(``timing/step_s`` - G - S: monitor, filtering, update), S = the push and its checks
(``timing/sync_s`` + ``timing/probe_s``). Engines on GPUs of their own: k = 0 takes G + L + S,
k = 1 (ragen2's schedule: the next batch launched when the step starts, the push after both the
update and that generation) takes max(G, L) + S. Colocated with sleep mode: the engines sleep
through the update, so nothing overlaps (k >= 1 is refused): ratio 1. The phase times of a GPU
job differ from these; ``split_gpus_ratio_at_generation_share`` gives the same formula at
generation shares G / (G + L) of 0.5-0.9 (S = 0).

All runs share one cache (the warm start is built by the first run and loaded by the others; it is
not part of any step). ``--steps`` 10 and one repetition take ~25 minutes on 2 cores alone.

    python benchmarks/async_overlap.py                     # -> results/async_overlap.json
    python benchmarks/async_overlap.py --steps 4 --quick   # smoke: -> async_overlap.quick.json
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, parse_args, write_result  # noqa: E402

#: the overrides of each layout (the split one: one learner rank, on its half of the cores)
LAYOUTS = {"colocated": [], "split": ["cluster.layout=split", "cluster.learner_world_size=1"]}
#: every run: no probe panel, no checkpoints, no archive (none of them is part of a step)
COMMON = ["trainer.loggers=[jsonl]", "trainer.save_every=0", "trainer.save_rollouts_every=0",
          "monitor.panel_size=0", "trainer.eval_every=0"]
PHASES = ("step_s", "rollout_s", "rollout_wait_s", "generate_s", "env_s", "update_s",
          "monitor_s", "sync_s", "probe_s", "overlap_s")
TAG = "RAGEN2_BENCH_TAG"
ROLES = {"ray::LearnerRank": "learner", "ray::RolloutWorker": "engine"}


def actor_masks(tag: str) -> dict[str, set[str]]:
    """The CPU masks (``Cpus_allowed_list``) of every thread of this run's learner ranks and
    rollout workers, by role."""
    out: dict[str, set[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            role = next((r for prefix, r in ROLES.items() if cmd.startswith(prefix)), None)
            if role is None or f"{TAG}={tag}".encode() not in Path(f"/proc/{pid}/environ").read_bytes():
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
                mask = next(x.split(":", 1)[1].strip() for x in status.splitlines()
                            if x.startswith("Cpus_allowed_list"))
                out.setdefault(role, set()).add(mask)
        except (OSError, StopIteration):
            continue
    return out


def run_one(overrides: list[str], run_dir: Path, cache: Path) -> dict[str, Any]:
    """One ``ragen2-train`` process; its steady-step medians, wall time and the actors' masks."""
    tag = uuid.uuid4().hex
    env = {**os.environ, "RAGEN2_CACHE": str(cache / "ragen2"), "XDG_CACHE_HOME": str(cache / "xdg"),
           "VLLM_CACHE_ROOT": str(cache / "vllm"), "RAY_AUTH_MODE": "disabled", TAG: tag,
           "PYTHONUNBUFFERED": "1"}
    cmd = [str(Path(sys.executable).with_name("ragen2-train")), *overrides,
           f"hydra.run.dir={run_dir}"]
    masks: dict[str, set[str]] = {}
    done = threading.Event()

    def watch() -> None:  # the masks after the actors started (their threads come and go)
        while not done.wait(2.0):
            for role, m in actor_masks(tag).items():
                masks.setdefault(role, set()).update(m)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(f"{run_dir}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    wall = time.perf_counter() - t0
    done.set()
    watcher.join()
    if rc:
        raise RuntimeError(f"{' '.join(cmd)} exited {rc}:\n{Path(f'{run_dir}.log').read_text()[-3000:]}")
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = sorted(r["step"] for r in rows if r["step"] > 0)
    steady = [r for r in rows if 1 < r["step"] < steps[-1]]
    med = {p: statistics.median(r.get(f"timing/{p}", 0.0) for r in steady) for p in PHASES}
    per_step = {p: [r.get(f"timing/{p}") for r in rows if r["step"] > 0] for p in PHASES}
    extra = {k: [r.get(k) for r in rows if r["step"] > 0]
             for k in ("async/staleness_max", "async/is_weight_mean", "async/is_weight_max",
                       "async/is_truncated_frac", "rollout/success")}
    return {"overrides": overrides, "wall_s": wall, "steady_steps": [r["step"] for r in steady],
            "median": med, "per_step": per_step, "per_step_other": extra,
            "affinity": {role: sorted(m) for role, m in masks.items()},
            "load_avg_1m_after": os.getloadavg()[0]}


def projection(phases: dict[str, float]) -> dict[str, Any]:
    """The GPU layouts' step times from measured per-phase medians (module docstring)."""
    g, s = phases["rollout_s"], phases["sync_s"] + phases["probe_s"]
    learner = phases["step_s"] - g - s
    split0, split1 = g + learner + s, max(g, learner) + s
    return {
        "label": "projection from measured CPU phase times, not a measurement",
        "inputs": {"G_generation_s": g, "L_learner_s": learner, "S_push_s": s},
        "formula": {"k0": "G + L + S", "split_gpus_k1": "max(G, L) + S",
                    "colocated_sleep_mode_k1": "refused (engines sleep through the update): = k0"},
        "split_gpus": {"k0_s": split0, "k1_s": split1, "ratio": split1 / split0},
        "colocated_sleep_mode": {"ratio": 1.0},
        # the same formula at the generation shares the issue quotes for multi-turn agent RL
        "split_gpus_ratio_at_generation_share": {
            f"{share:.1f}": (max(share, 1 - share)) for share in (0.5, 0.6, 0.7, 0.8, 0.9)},
    }


def main() -> None:
    args = parse_args(__doc__, lambda ap: (
        ap.add_argument("--steps", type=int, default=10, help="RL steps per run (>= 4)"),
        ap.add_argument("--reps", type=int, default=1, help="repetitions of the four runs"),
        ap.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS)),
        ap.add_argument("--work-dir", type=Path, default=None,
                        help="run directories (default: a temporary one, removed)")))
    if args.steps < 4:
        sys.exit("async_overlap: --steps must be >= 4 (steady steps are 2 .. N-1)")
    base = [*COMMON, f"trainer.total_steps={args.steps}"]
    if args.quick:
        base += ["trainer.eval_episodes=8", "rollout.env_groups=4"]
    cache = Path(tempfile.mkdtemp(prefix="ragen2-async-overlap-"))
    work = args.work_dir or cache / "runs"
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for rep in range(args.reps):
            for layout in args.layouts:
                for k in ((0, 1) if rep % 2 == 0 else (1, 0)):
                    name = f"{layout}_k{k}"
                    over = [*base, *LAYOUTS[layout], f"trainer.max_staleness={k}"]
                    print(f"rep {rep} {name} ...", flush=True)
                    rec = run_one(over, work / f"{name}_r{rep}", cache)
                    print(f"  step {rec['median']['step_s']:.2f} s (median of steps "
                          f"{rec['steady_steps']}), wall {rec['wall_s']:.0f} s, "
                          f"affinity {rec['affinity']}", flush=True)
                    runs.setdefault(name, []).append(rec)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    def med(name: str, phase: str = "step_s") -> float:
        return statistics.median(r["median"][phase] for r in runs[name])

    ratios, better, goal = {}, {}, {}
    for layout in args.layouts:
        key = f"{layout}_k1_over_k0"
        ratios[key] = med(f"{layout}_k1") / med(f"{layout}_k0")
        better[key] = "lower"
    if "split" in args.layouts:
        goal["split_k1_over_k0"] = "<= 0.75"
    results: dict[str, Any] = {"runs": runs, "step_s_median": {n: med(n) for n in runs}}
    if "colocated" in args.layouts:
        phases = {p: med("colocated_k0", p) for p in PHASES}
        results["projection"] = projection(phases)
        ratios["projected_split_gpus_k1_over_k0"] = results["projection"]["split_gpus"]["ratio"]
        better["projected_split_gpus_k1_over_k0"] = "lower"
    commit = subprocess.run(["git", "describe", "--always", "--dirty=+dirty"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    write_result("async_overlap", args, {"steps": args.steps, "reps": args.reps, "base": base,
                                         "layouts": LAYOUTS, "commit": commit},
                 results, ratios, better, goal)


if __name__ == "__main__":
    main()
