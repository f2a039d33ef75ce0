"""The warm start before RL: behaviour-clone the training envs' noised experts (their
``demonstration()`` hooks), or load the identical warm start from the cache, keyed by everything
the warm-started weights depend on."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ragen2 import seeding
from ragen2.config import Config
from ragen2.controller.episodes import check_env_errors, rollout_metrics
from ragen2.controller.guards import count_nonfinite
from ragen2.controller.problems import Problems
from ragen2.learner import checkpoint
from ragen2.models.tiny import default_cache_root
from ragen2.rollout.envs import EnvEntry
from ragen2.rollout.trajectory import collate

log = logging.getLogger("ragen2")

#: warm-start steps the learner ranks run per call (one Ray round trip, one host read of their
#: metrics); any number gives the same weights and metrics
STEPS_PER_CALL = 16


def warm_start_key(cfg: Config, model_path: str, train_envs: list[EnvEntry]) -> str:
    """Everything the warm-started weights depend on (the run seed is not part of it)."""
    c = cfg
    envs = ([c.env.id, c.env.kwargs] if not c.env.mix else
            [[e.name, e.id, e.kwargs, e.share, e.format_penalty] for e in train_envs])
    # the split decides which problems the demonstrations may show
    payload = {"v": 1, "model": model_path, "env": envs,
               "heldout_fraction": c.env.heldout_fraction,
               "warm_start": {k: v for k, v in asdict(c.trainer.warm_start).items() if k != "cache"},
               "rollout": [c.rollout.max_turns, c.rollout.format_penalty, c.rollout.max_context_tokens],
               # the demonstrations: split over the workers, each noising its share from its own
               # generator (RolloutWorker.demonstrate), so another worker count clones other data
               "workers": c.rollout.num_workers,
               "engine": [c.engine.max_new_tokens, list(c.engine.stop)],
               "learner": [c.cluster.learner_world_size, c.algorithm.micro_batch_size,
                           c.algorithm.grad_clip, c.algorithm.weight_decay, c.model.dtype],
               # settings that change the warm start's float rounding (issue 44)
               "kernels": [c.learner.attn_implementation, c.learner.micro_batch_tokens,
                           c.learner.reduce_once]}
    if c.learner.lora.rank:  # adapters are trained instead of the weights
        payload["lora"] = asdict(c.learner.lora)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


class WarmStart:
    def __init__(self, cfg: Config, model_path: str, problems: Problems, actors: Any) -> None:
        self.cfg, self.model_path, self.problems, self.actors = cfg, model_path, problems, actors

    def cache(self) -> Path:
        """Where this run's warm start is cached (``policy.pt``, ``metrics.json``)."""
        root = Path(self.cfg.model.cache_dir or default_cache_root()) / "warm_start"
        return root / warm_start_key(self.cfg, self.model_path, self.problems.train_envs)

    def run(self) -> dict[str, float]:
        """Behaviour-clone the env's noised expert, or load the identical warm start from cache."""
        from ragen2.rollout.envs import probe_env

        ws, learners, train_envs = self.cfg.trainer.warm_start, self.actors.learners, self.problems.train_envs
        t0 = time.perf_counter()
        experts = [e for e in train_envs if probe_env(e)]  # envs with a demonstration()
        if not experts:
            # a plain Gymnasium env (no expert to clone): RL starts from the model as it is
            log.warning("warm start skipped: no training env (%s) has a demonstration() hook to "
                        "clone. A pretrained model needs none; the tiny model starts untrained and "
                        "mostly writes unparsable replies at first (add a demonstration() hook, "
                        "docs/tutorials/add-an-environment.md; trainer.warm_start.enabled=false silences "
                        "this)", ", ".join(e.id for e in train_envs))
            learners.finish_warm_start()
            return {"warm_start/skipped": 1.0, "timing/warm_start_s": time.perf_counter() - t0}
        cache = self.cache()
        if ws.cache and (cache / "metrics.json").exists():
            learners.load_policy(str(cache / "policy.pt"))
            m = json.loads((cache / "metrics.json").read_text())
            m["warm_start/cached"] = 1.0
            log.info("warm start loaded from cache %s", cache)
        else:
            m = self.behaviour_clone(experts)
            if ws.cache:
                cache.mkdir(parents=True, exist_ok=True)
                learners.save_policy(str(cache / "policy.pt"))
                checkpoint.write_json_atomic(cache / "metrics.json", m)  # written last: complete
            m["warm_start/cached"] = 0.0
        learners.finish_warm_start()
        return {**m, "timing/warm_start_s": time.perf_counter() - t0}

    def behaviour_clone(self, experts: list[EnvEntry]) -> dict[str, float]:
        """Demonstrations of the ``experts`` (train envs with a demonstration() hook), then SFT."""
        import ray

        ws = self.cfg.trainer.warm_start
        specs = self.problems.episode_specs(experts, ws.episodes, 1,
                                            lambda i: seeding.demo_seed(ws.seed, i))
        n = len(self.actors.workers)
        trajs, _ = self.actors.gather("demonstrate", specs, [ws.random_action_prob] * n,
                                      [ws.seed * 7919 + i for i in range(n)])
        check_env_errors(trajs, 0.0, "warm-start demonstrations")
        demo = rollout_metrics(trajs, "warm_start/demo")
        m = self.clone(ray.put(collate(trajs)), len(trajs))
        return {**m, "warm_start/demo_success": demo["warm_start/demo/success"]}

    def clone(self, batch_ref: Any, n: int) -> dict[str, float]:
        """Behaviour cloning on the ``n`` rows of the demonstrations' batch (an object ref):
        ``epochs`` passes in batches of ``batch_size`` rows; the last step's metrics and the steps
        skipped for a nan/inf. The learner ranks run :data:`STEPS_PER_CALL` steps a call."""
        from tqdm.auto import tqdm

        ws, limit = self.cfg.trainer.warm_start, self.cfg.trainer.max_nonfinite_steps
        steps = sft_plan(n, ws.epochs, ws.batch_size, ws.seed)
        m: dict[str, float] = {}
        done = skipped = in_row = 0  # steps run; skipped for a nan/inf loss or gradient
        with tqdm(total=len(steps), desc="warm start", unit="step", dynamic_ncols=True) as bar:
            while done < len(steps):
                chunk = steps[done:done + STEPS_PER_CALL]
                # (a chunk stops after a skipped step: each is counted before any more runs)
                for result in self.actors.learners.sft_steps(batch_ref, chunk, ws.lr):
                    done += 1
                    m = result.metrics
                    skipped += float(result.outcome.nonfinite_skipped)
                    in_row = count_nonfinite(
                        in_row, result.outcome.nonfinite_skipped > 0, limit,
                        f"warm-start step {done}", "warm_start/nonfinite_skipped",
                        "lower trainer.warm_start.lr, set a smaller algorithm.grad_clip, or train in "
                        "model.dtype=float32")
                    bar.update()
                bar.set_postfix(loss=f"{m['warm_start/loss']:.3f}",
                                acc=f"{m['warm_start/token_acc']:.3f}")
        return {**m, "warm_start/nonfinite_skipped": skipped}


def sft_plan(n: int, epochs: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """The warm start's steps over ``n`` demonstration rows: per epoch a permutation (a generator
    seeded with ``seed``), cut into batches of ``batch_size`` rows, each sorted."""
    rng = np.random.default_rng(seed)
    steps = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        steps += [np.sort(perm[i:i + batch_size]) for i in range(0, n, batch_size)]
    return steps
