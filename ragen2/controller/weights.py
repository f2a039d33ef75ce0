"""The policy the engines hold: its version, the push of the learner's weights into every engine,
the checks that they arrived intact (checksums, the logprob probe), and the re-sync of a restarted
rollout worker. Its checkpoint state is the probe's floor."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from ragen2.config import Config
from ragen2.rollout.pool import WorkerRestartError


class Weights:
    """``version``: the learner's policy version, which the engines hold after each push."""

    def __init__(self, cfg: Config, actors: Any, vocab_size: int) -> None:
        from ragen2.sync import ProbePolicy, make_sync, probe_ids

        self.cfg, self.actors = cfg, actors
        self.sync = make_sync(cfg, actors.learners, actors.workers)
        self.probe = probe_ids(vocab_size, cfg.sync.probe_tokens) if cfg.sync.probe else None
        self.probe_policy = ProbePolicy(cfg.sync.tolerance(cfg.model.dtype),
                                        cfg.sync.probe_floor_multiple)
        self.checksum_names = self._checksum_names() if cfg.sync.checksum else []
        self.version = 0
        self.synced = False  # whether any weights were pushed (else workers hold model_path's)
        #: between an update and its push: the learner holds a version the engines do not
        self.behind = False

    def _checksum_names(self) -> list[str]:
        """The exported tensors whose checksums every sync compares (ragen2.sync.checksum)."""
        from ragen2.sync.checksum import checksum_names

        return checksum_names(self.actors.learners.export_names())

    @contextmanager
    def updating(self) -> Iterator[None]:
        """Around an update and what still runs on the old weights (the batches generated ahead):
        a worker restarted meanwhile cannot be re-synced. The version then counts the update."""
        self.behind = True
        yield
        self.version += 1
        self.behind = False

    def verify(self, workers: list[Any]) -> dict[str, float]:
        """The exact staleness check after a push (``sync.checksum``); {} when off."""
        if not self.checksum_names:
            return {}
        from ragen2.sync.checksum import verify_checksums

        return verify_checksums(self.actors.learners, workers, self.checksum_names, self.version)

    def push(self) -> dict[str, float]:
        """Sync the learner's weights into every engine, then check that they arrived intact:
        exact checksums of a few tensors, then the logprob probe (its first gap is the floor).

        With ``engine.sleep_mode`` (colocated GPUs) the engines slept through the update with
        their weights and KV cache discarded (level 2: no host copy of weights the push
        overwrites anyway); here each wakes its weights' memory only, receives the push, and only
        then its KV cache, so a GPU never holds the engine's old weights, its new ones and its KV
        cache beside the learner's gathered buckets (``ragen2.engines.vllm.VLLMEngine.sleep``).
        A worker that dies meanwhile is restarted (and re-synced) and the whole push repeated.
        """
        from ray.exceptions import RayActorError

        from ragen2.sync import run_probe

        self.synced = True
        pool, learners = self.actors.pool, self.actors.learners
        attempt = 0
        while True:
            try:
                t0 = time.perf_counter()
                sleeping = self.cfg.engine.sleep_mode
                if sleeping:  # the update's cached blocks go back first
                    learners.release_cuda_cache()
                    pool.call_all("wake_up", ["weights"])
                m = self.sync.push(self.version)
                if sleeping:
                    pool.call_all("wake_up", ["kv_cache"])
                m["timing/sync_s"] = time.perf_counter() - t0
                m.update(self.verify(self.actors.workers))
                if self.probe is not None:
                    t1 = time.perf_counter()
                    m.update(run_probe(learners, self.actors.workers, self.probe,
                                       self.probe_policy, self.version))
                    m["timing/probe_s"] = time.perf_counter() - t1
                return m
            except RayActorError:
                attempt += 1
                if attempt > pool.max_restarts or not pool.revive():
                    raise  # out of restarts, or the actor that died is no rollout worker

    def resync(self, index: int, worker: Any) -> None:
        """Bring a restarted worker to the current policy: weights, version, then the probe.

        Rollouts only run while the learner holds ``version`` (updates are followed by a push
        at once), so exporting the learner again reproduces what the dead worker held.
        """
        from ragen2.sync import run_probe

        if self.behind:  # the behaviour version is gone from the learner: it cannot be rebuilt
            raise WorkerRestartError(
                f"rollout worker {index} died while generating ahead (trainer.max_staleness="
                f"{self.cfg.trainer.max_staleness}) with policy version {self.version}, which the "
                "learner no longer holds after its update, so its share cannot be regenerated "
                "identically: resume from the latest checkpoint (trainer.resume=true), whose "
                "queued batches continue the run exactly")
        self.sync.replace_worker(index, worker)
        if not self.synced:  # nothing pushed yet: the new worker already holds model_path's
            return
        self.sync.push(self.version, only=[index])
        self.verify([worker])
        if self.probe is not None:
            run_probe(self.actors.learners, [worker], self.probe, self.probe_policy, self.version)

    def state_dict(self) -> dict[str, Any]:
        return {"probe_floor": self.probe_policy.floor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # older checkpoints: the first push after the resume measures the floor again
        self.probe_policy.floor = state.get("probe_floor")
