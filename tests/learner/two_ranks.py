"""One spawn of two FSDP2 ranks (gloo) for every two-rank learner test.

Each spawned process pays the torch + transformers import (~10 s on 2 cores) and a gloo group
per scenario, so the two-rank checks of several files run in one pair of processes: every job
below is a function ``job(rank, path, ports, out_dir)`` that saves ``out_dir/rank{rank}.pt``; the
session fixture ``two_rank_results`` (tests/learner/conftest.py) runs them all, one after the
other in the same two processes, and each test file asserts on its job's results.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import socket
from pathlib import Path

#: job name -> the test module whose ``_worker(rank, path, ports, out_dir)`` runs on both ranks,
#: with ``N_PORTS`` gloo groups (one per LearnerRank it sets up)
JOBS = {"world2": "tests.learner.test_rank_world2", "nonfinite": "tests.learner.test_nonfinite",
        "meta_init": "tests.learner.test_meta_init",
        "sharded": "tests.learner.test_sharded_checkpoint"}


def free_ports(n: int) -> list[int]:
    out = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            out.append(s.getsockname()[1])
    return out


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
    mod = importlib.import_module(JOBS[name])
    return mod._worker, mod.N_PORTS


def _every_job(rank: int, path: str, ports: dict[str, list[int]], out_dir: str) -> None:
    for name in JOBS:
        fn, _ = _job(name)
        (Path(out_dir) / name).mkdir(exist_ok=True)
        fn(rank, path, ports[name], str(Path(out_dir) / name))


def run_every_job(path: str, out_dir: Path, timeout: float = 600) -> dict[str, tuple[dict, dict]]:
    """Every job in one spawn: ``{job: (rank 0's results, rank 1's)}``."""
    import torch

    ports = {name: free_ports(_job(name)[1]) for name in JOBS}
    run_two_ranks(_every_job, path, ports, str(out_dir), timeout=timeout)
    out: dict = {name: tuple(torch.load(out_dir / name / f"rank{r}.pt", weights_only=False)
                             for r in (0, 1)) for name in JOBS}
    out["sharded_dir"] = str(out_dir / "sharded")  # the checkpoint the job wrote stays there
    return out
