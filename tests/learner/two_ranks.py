"""One spawn of two FSDP2 ranks (gloo) for every two-rank learner test.

Each spawned process pays the torch + transformers import (~10 s on 2 cores) and a gloo group
per scenario, so the two-rank checks of several files run in one pair of processes: every job
below is a function ``job(rank, path, rdv, out_dir)`` that saves ``out_dir/rank{rank}.pt``; the
session fixture ``two_rank_results`` (tests/learner/conftest.py) runs them all, one after the
other in the same two processes, and each test file asserts on its job's results. The ranks meet
through ``rdv`` (:class:`ragen2.cluster.rendezvous.SpawnRendezvous`): ``rdv.setup(learner)`` once
per LearnerRank, in the same order on both ranks; rank 0's store binds a port the OS assigns and
the port reaches rank 1 through a queue, so no port is chosen free and bound later.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
from pathlib import Path

from ragen2.cluster.rendezvous import SpawnRendezvous

#: job name -> the test module whose ``_worker(rank, path, rdv, out_dir)`` runs on both ranks
JOBS = {"world2": "tests.learner.test_rank_world2", "nonfinite": "tests.learner.test_nonfinite",
        "meta_init": "tests.learner.test_meta_init",
        "sharded": "tests.learner.test_sharded_checkpoint",
        "warm_start": "tests.learner.test_warm_start_chunks"}


@contextlib.contextmanager
def counting_calls(module, name: str, calls: list):
    """``module.name`` appends to ``calls`` at every call inside the block."""
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    setattr(module, name, counted)
    try:
        yield
    finally:
        setattr(module, name, real)


def run_two_ranks(target, *args, timeout: float = 300) -> None:
    """``target(rank, *args)`` in two spawned processes; both must exit 0 within ``timeout``."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, *args)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout)
    for p in procs:
        if p.is_alive():  # a collective mismatch hangs: fail instead of waiting forever
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]


def _job(name: str):
    return importlib.import_module(JOBS[name])._worker


def _every_job(rank: int, path: str, rdv: SpawnRendezvous, out_dir: str) -> None:
    for name in JOBS:
        (Path(out_dir) / name).mkdir(exist_ok=True)
        _job(name)(rank, path, rdv, str(Path(out_dir) / name))


def run_every_job(path: str, out_dir: Path, timeout: float = 600) -> dict[str, tuple[dict, dict]]:
    """Every job in one spawn: ``{job: (rank 0's results, rank 1's)}``."""
    import torch

    rdv = SpawnRendezvous(2, mp.get_context("spawn"))
    run_two_ranks(_every_job, path, rdv, str(out_dir), timeout=timeout)
    out: dict = {name: tuple(torch.load(out_dir / name / f"rank{r}.pt", weights_only=False)
                             for r in (0, 1)) for name in JOBS}
    out["sharded_dir"] = str(out_dir / "sharded")  # the checkpoint the job wrote stays there
    return out
