"""Driver-side handle on the FSDP2 learner ranks (Ray actors forming one process group).

One typed method per thing the controller asks of the learner; each runs on every rank (the ranks'
work is collective) and returns rank 0's result.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ray

from ragen2.cluster import Placement
from ragen2.config import Config
from ragen2.learner.probes import assemble_scores
from ragen2.learner.rank import LearnerRank
from ragen2.learner.settings import LearnerSettings
from ragen2.run_state import UpdateOutcome, UpdateResult


def update_outcome(metrics: dict[str, float]) -> UpdateOutcome:
    """What one RL update did, from the metrics the ranks return (the learner's own names, read
    here once so that no caller decides on a metric name)."""
    return UpdateOutcome(optimizer_steps=int(metrics["actor/optimizer_steps"]),
                         nonfinite_skipped=int(metrics["actor/nonfinite_skipped"]))


def sft_outcome(metrics: dict[str, float]) -> UpdateOutcome:
    """What one warm-start step did (one optimiser step, or none when skipped)."""
    skipped = int(metrics["warm_start/nonfinite_skipped"])
    return UpdateOutcome(optimizer_steps=1 - skipped, nonfinite_skipped=skipped)


class LearnerGroup:
    def __init__(self, cfg: Config, model_path: str, threads: int,
                 placement: Placement | None = None,
                 settings: LearnerSettings | None = None, cores: Sequence[int] = ()) -> None:
        """``settings``: what the ranks need from other config sections (the controller's
        :func:`ragen2.controller.actors.learner_settings`; default: temperature 1, no Dr.GRPO constant);
        ``cores``: the cores every rank is pinned to (``cluster.layout=split`` on the CPU)."""
        settings = settings if settings is not None else LearnerSettings()
        world = cfg.cluster.learner_world_size
        if placement is None:  # nothing reserved (tests): as before, one whole GPU per rank on cuda
            gpus = 1 if cfg.cluster.device == "cuda" else 0
            options = [{"num_cpus": 0, "num_gpus": gpus}] * world
        else:
            options = [placement.learner_options(r) for r in range(world)]
        actor = ray.remote(LearnerRank)
        self.ranks = [actor.options(**options[r]).remote(cfg, model_path, r, world, threads,
                                                          settings, tuple(cores))
                      for r in range(world)]
        addr, port = ray.get(self.ranks[0].address.remote())
        ray.get([a.setup.remote(addr, port) for a in self.ranks])

    def _all(self, method: str, *args: Any) -> list[Any]:
        """Run ``method`` on every rank (they are collective) and return all results."""
        return ray.get([getattr(a, method).remote(*args) for a in self.ranks])

    def update(self, batch_ref: Any, step: int) -> UpdateResult:
        """One RL update on a :class:`ragen2.batch.TrainingBatch` (an object ref): its metrics
        and its outcome (optimiser steps applied, mini-batches skipped for a nan/inf)."""
        metrics = self._all("update", batch_ref, step)[0]
        return UpdateResult(metrics, update_outcome(metrics))

    def sft_steps(self, batch_ref: Any, steps: Sequence[Any], lr: float) -> list[UpdateResult]:
        """Warm-start behaviour-cloning steps on each of ``steps`` (row ids of the batch) in turn,
        in one call to every rank: each step's metrics and outcome. The steps stop after the
        first one skipped for a nan/inf, so the caller counts skips in a row before any more."""
        metrics = self._all("sft_steps", batch_ref, steps, lr)[0]
        return [UpdateResult(m, sft_outcome(m)) for m in metrics]

    def grad_snr(self, batch_ref: Any, buckets: Any) -> dict[str, float]:
        """Gradient norms of the loss terms per bucket of rows (no optimiser step)."""
        return self._all("grad_snr", batch_ref, buckets)[0]

    def release_cuda_cache(self) -> None:
        self._all("release_cuda_cache")

    def save(self, directory: str) -> None:
        """Every rank writes its shards of a checkpoint into ``directory``."""
        self._all("save", directory)

    def load(self, directory: str) -> int:
        """Restore a checkpoint; the policy version it holds."""
        return self._all("load", directory)[0]

    def save_policy(self, path: str) -> None:
        """The full policy weights to ``path`` (rank 0 writes)."""
        self._all("save_policy", path)

    def load_policy(self, path: str) -> None:
        self._all("load_policy", path)

    def finish_warm_start(self) -> None:
        """Drop the warm-start optimiser; the KL reference becomes the warm-started policy."""
        self._all("finish_warm_start")

    def score(self, contexts: list[list[int]], continuations: list[list[int]],
              columns: Any) -> tuple[Any, Any]:
        """(S, K) summed logprobs and token counts of continuation s under context columns[s, k]."""
        import numpy as np

        columns = np.asarray(columns)
        return assemble_scores(columns.shape, self._all("score", contexts, continuations, columns))

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """``fn(rank, *args, **kwargs)`` on every rank at once (``LearnerRank.run``); all results.

        ``fn`` must be picklable (a module-level function); it may use collectives such as
        ``rank.named_weights()``, since every rank runs it.
        """
        return ray.get([a.run.remote(fn, *args, **kwargs) for a in self.ranks])

    def export_names(self) -> list[str]:
        """The HF names of every weight the learner exports to the engines, in export order."""
        return self._all("export_names")[0]

    def logprobs(self, ids: list[int]) -> list[float]:
        """Raw per-token logprobs of ``ids[1:]`` under the current policy (rank 0's result)."""
        return self._all("logprobs", list(ids))[0]

    def shutdown(self) -> None:
        try:
            self._all("shutdown")
        finally:
            for a in self.ranks:
                ray.kill(a)
