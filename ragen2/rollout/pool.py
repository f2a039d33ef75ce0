"""The rollout worker actors, and what happens when one dies.

:class:`WorkerPool` creates the workers (``make(i)`` builds worker ``i`` with its placement) and
runs one call per worker. When a worker's process dies mid-call (killed, OOM, a segfault in an
engine or env: Ray's ``RayActorError``), the pool starts a new actor *with the same index*, lets the
controller bring it to the current policy (``on_restart``: weights and version, then the probe),
and reruns that worker's call with the same arguments. Everything a call's results depend on is
in its arguments (episode specs, the per-(step, worker) sampling seed, the policy version), so the
rerun returns exactly what the dead worker would have: no episode is lost or counted twice and
the step's metrics do not change. A call gets at most ``max_restarts`` restarts (over all its
workers); past that, or when a worker dies while being constructed, :class:`WorkerRestartError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

log = logging.getLogger("ragen2")

#: restarts one pool call may make (over all workers) before it gives up
MAX_RESTARTS_PER_CALL = 3


class WorkerRestartError(RuntimeError):
    """A rollout worker kept dying (or could not be started), so the call cannot complete."""


def split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """Split into ``parts`` contiguous chunks of near-equal size (some may be empty)."""
    bounds = np.linspace(0, len(items), parts + 1).round().astype(int)
    return [list(items[bounds[i]:bounds[i + 1]]) for i in range(parts)]


@dataclass
class PendingGather:
    """A :meth:`WorkerPool.start`'s calls in flight: the method, each worker's arguments (None:
    no call), {object ref: worker index}, and the pool's restart count when they started."""

    method: str
    args: list[tuple | None]
    refs: dict[Any, int]
    restarts: int


class WorkerPool:
    """``size`` rollout worker actors built by ``make(index)``; dead ones are replaced in place.

    ``on_restart(index, actor)`` runs after a replacement is created and before it reruns
    anything: it must leave the new actor holding what the dead one held (the controller re-syncs
    the current weights and policy version). ``restarts`` counts replacements over the pool's life.
    """

    def __init__(self, make: Callable[[int], Any], size: int,
                 on_restart: Callable[[int, Any], None] | None = None,
                 max_restarts: int = MAX_RESTARTS_PER_CALL) -> None:
        self.make, self.on_restart, self.max_restarts = make, on_restart, max_restarts
        self.actors = [make(i) for i in range(size)]
        self.restarts = 0

    def __len__(self) -> int:
        return len(self.actors)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.actors)

    def __getitem__(self, index: int) -> Any:
        return self.actors[index]

    # ------------------------------------------------------------------ calls
    def call(self, method: str, args: Sequence[tuple | None]) -> list[Any]:
        """``actors[i].<method>(*args[i])`` for every ``i`` with ``args[i]`` not None; results by
        index (None where skipped). A worker that dies is restarted and its call rerun."""
        return self._wait(method, args, self._submit(method, args))

    def _submit(self, method: str, args: Sequence[tuple | None]) -> dict[Any, int]:
        """Submit ``actors[i].<method>(*args[i])``; {object ref: worker index}."""
        if len(args) != len(self.actors):
            raise ValueError(f"{len(args)} argument tuples for {len(self.actors)} workers")
        return {getattr(self.actors[i], method).remote(*a): i
                for i, a in enumerate(args) if a is not None}

    def _wait(self, method: str, args: Sequence[tuple | None],
              pending: dict[Any, int]) -> list[Any]:
        """The results of :meth:`_submit`'s calls by index; a worker that dies is restarted and
        its call rerun."""
        import ray
        from ray.exceptions import RayActorError

        pending = dict(pending)
        results: list[Any] = [None] * len(self.actors)
        budget = [self.max_restarts]
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                results[i] = ray.get(ref)
            except RayActorError as e:
                if not _is(e, self.actors[i]):
                    raise
                self._replace(i, e, method, budget)
                pending[getattr(self.actors[i], method).remote(*args[i])] = i
        return results

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """The same call on every worker."""
        return self.call(method, [args] * len(self.actors))

    def gather(self, method: str, specs: Sequence[Any],
               *args_per_worker: Sequence[Any]) -> tuple[list[Any], dict[str, float]]:
        """Split ``specs`` into contiguous chunks, worker ``i`` runs ``method(chunk_i,
        *(a[i] for a in args_per_worker))`` returning ``(items, stats)``; the items in spec order,
        each stat's max over workers, and ``worker_restarts``: replacements this call made."""
        return self.finish(self.start(method, specs, *args_per_worker))

    def start(self, method: str, specs: Sequence[Any],
              *args_per_worker: Sequence[Any]) -> PendingGather:
        """:meth:`gather`'s calls submitted without waiting (the workers run them while the
        caller does other work); :meth:`finish` collects them. Calls to one worker run in the
        order they were submitted."""
        chunks = split(specs, len(self.actors))
        args = [(chunk, *(a[i] for a in args_per_worker)) if chunk else None
                for i, chunk in enumerate(chunks)]
        return PendingGather(method, args, self._submit(method, args), self.restarts)

    def finish(self, pending: PendingGather) -> tuple[list[Any], dict[str, float]]:
        """What :meth:`gather` returns, for calls :meth:`start` submitted."""
        before = pending.restarts
        parts = self._wait(pending.method, pending.args, pending.refs)
        items: list[Any] = []
        stats: dict[str, float] = {}
        for part in parts:
            if part is None:
                continue
            part_items, part_stats = part
            items.extend(part_items)
            for k, v in part_stats.items():
                stats[k] = max(stats.get(k, 0.0), v)
        stats["worker_restarts"] = float(self.restarts - before)
        return items, stats

    def revive(self) -> list[int]:
        """Replace every worker whose process is gone (each one re-synced by ``on_restart``);
        returns their indices. For calls made outside the pool (weight sync, probe)."""
        import ray
        from ray.exceptions import RayActorError

        budget = [self.max_restarts]
        dead = []
        for i, actor in enumerate(list(self.actors)):
            try:
                ray.get(actor.policy_version.remote())
            except RayActorError as e:
                if not _is(e, actor):
                    raise
                self._replace(i, e, "a liveness check", budget)
                dead.append(i)
        return dead

    # --------------------------------------------------------------- restarts
    def _replace(self, i: int, cause: BaseException, during: str, budget: list[int]) -> None:
        """Start a new worker ``i`` and bring it up to date, spending ``budget[0]`` restarts."""
        from ray.exceptions import RayActorError

        while True:
            if getattr(cause, "actor_init_failed", False):
                raise WorkerRestartError(f"rollout worker {i} failed while starting: {cause}") from cause
            if budget[0] <= 0:
                raise WorkerRestartError(
                    f"rollout worker {i} died during {during} and the call has used all its "
                    f"{self.max_restarts} restarts; last cause: {cause}") from cause
            budget[0] -= 1
            self.restarts += 1
            log.warning("rollout worker %d died during %s; starting a new one and rerunning its "
                        "share (%s)", i, during, str(cause).splitlines()[0] if str(cause) else
                        type(cause).__name__)
            self._kill(self.actors[i])
            self.actors[i] = self.make(i)
            try:
                if self.on_restart is not None:
                    self.on_restart(i, self.actors[i])
                return
            except RayActorError as e:
                if not _is(e, self.actors[i]):  # e.g. a learner rank: not ours to restart
                    raise
                cause, during = e, "its restart"  # the new worker died too (__init__ or sync)

    def shutdown(self) -> None:
        for actor in self.actors:
            self._kill(actor)

    @staticmethod
    def _kill(actor: Any) -> None:
        import ray

        ray.kill(actor, no_restart=True)  # a no-op for an actor that is already dead


def _is(error: Any, actor: Any) -> bool:
    """Whether a ``RayActorError`` is about ``actor`` (unknown ids count as yes)."""
    died = getattr(error, "actor_id", None)
    return died is None or died == actor._actor_id.hex()
