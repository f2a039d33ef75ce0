"""The held-out evaluation during training: ``trainer.eval_episodes`` episodes on held-out
problems (:meth:`ragen2.rollout.split.ProblemSplit.eval_specs`) at the evaluation sampling seed;
a few go to ``samples/eval_step_XXXXXX.jsonl``, every episode's outcome to
``evaluations/step_XXXXXX.jsonl`` (:func:`ragen2.rollout.archive.save_outcomes`). ``ragen2 eval``
runs the same protocol without training (:mod:`ragen2.evaluate`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ragen2 import seeding
from ragen2.config import Config
from ragen2.controller.episodes import check_env_errors, rollout_metrics, success_rate
from ragen2.controller.problems import Problems
from ragen2.rollout.archive import save_outcomes, spread
from ragen2.run_state import Evaluation


class Evaluator:
    def __init__(self, cfg: Config, problems: Problems, actors: Any, run_dir: Path) -> None:
        self.cfg, self.problems, self.actors, self.run_dir = cfg, problems, actors, run_dir

    def evaluate(self, step: int, version: int) -> Evaluation:
        """Held-out success and ``eval/*`` of the policy (version ``version``) at ``step``."""
        t0 = time.perf_counter()
        specs = self.problems.eval_specs(self.cfg.trainer.eval_episodes)
        n = len(self.actors.workers)
        trajs, _ = self.actors.gather("rollout", specs,
                                      [seeding.eval_sampling_seed(i) for i in range(n)],
                                      [version] * n, [True] * n)
        check_env_errors(trajs, self.cfg.rollout.max_env_error_frac, f"evaluation at step {step}")
        out = rollout_metrics(trajs, "eval", per_env=len(self.problems.eval_envs) > 1)
        out["timing/eval_s"] = time.perf_counter() - t0
        samples = self.run_dir / "samples"
        samples.mkdir(exist_ok=True)
        with open(samples / f"eval_step_{step:06d}.jsonl", "w") as f:
            for t in spread(trajs, self.cfg.trainer.log_samples):
                f.write(json.dumps(t.as_text_record()) + "\n")
        save_outcomes(self.run_dir / "evaluations" / f"step_{step:06d}.jsonl", trajs)
        return Evaluation(success_rate(trajs), out)
