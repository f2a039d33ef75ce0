"""Driver-side handle on the FSDP2 learner ranks (Ray actors forming one process group)."""

from __future__ import annotations

from typing import Any, Callable

import ray

from ragen2.cluster import Placement
from ragen2.config import Config
from ragen2.learner.rank import LearnerRank


class LearnerGroup:
    def __init__(self, cfg: Config, model_path: str, threads: int,
                 placement: Placement | None = None) -> None:
        world = cfg.cluster.learner_world_size
        if placement is None:  # nothing reserved (tests): as before, one whole GPU per rank on cuda
            gpus = 1 if cfg.cluster.device == "cuda" else 0
            options = [{"num_cpus": 0, "num_gpus": gpus}] * world
        else:
            options = [placement.learner_options(r) for r in range(world)]
        actor = ray.remote(LearnerRank)
        self.ranks = [actor.options(**options[r]).remote(cfg, model_path, r, world, threads)
                      for r in range(world)]
        addr, port = ray.get(self.ranks[0].address.remote())
        ray.get([a.setup.remote(addr, port) for a in self.ranks])

    def call(self, method: str, *args: Any) -> list[Any]:
        """Run ``method`` on every rank (they are collective) and return all results."""
        return ray.get([getattr(a, method).remote(*args) for a in self.ranks])

    def update(self, batch_ref: Any, step: int) -> dict[str, float]:
        return self.call("update", batch_ref, step)[0]

    def sft_step(self, batch_ref: Any, rows: Any, lr: float) -> dict[str, float]:
        return self.call("sft_step", batch_ref, rows, lr)[0]

    def score(self, contexts: list[list[int]], continuations: list[list[int]],
              columns: Any) -> tuple[Any, Any]:
        """(S, K) summed logprobs and token counts of continuation s under context columns[s, k]."""
        import numpy as np

        columns = np.asarray(columns)
        logp = np.full(columns.shape, np.nan)
        tokens = np.zeros(columns.shape, dtype=np.int64)
        for part in self.call("score", contexts, continuations, columns):
            for s, k, v, n in part:
                logp[s, k], tokens[s, k] = v, n
        if np.isnan(logp).any():
            raise RuntimeError("learner ranks left some (sample, prompt) pairs unscored")
        return logp, tokens

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        """``fn(rank, *args, **kwargs)`` on every rank at once (``LearnerRank.run``); all results.

        ``fn`` must be picklable (a module-level function); it may use collectives such as
        ``rank.named_weights()``, since every rank runs it.
        """
        return ray.get([a.run.remote(fn, *args, **kwargs) for a in self.ranks])

    def logprobs(self, ids: list[int]) -> list[float]:
        """Raw per-token logprobs of ``ids[1:]`` under the current policy (rank 0's result)."""
        return self.call("logprobs", list(ids))[0]

    def shutdown(self) -> None:
        try:
            self.call("shutdown")
        finally:
            for a in self.ranks:
                ray.kill(a)
