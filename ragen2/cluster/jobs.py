"""One job, its own Ray and its own GPUs: what a sweep job on a shared node must not share.

* :func:`ray_address`: ``cluster.address`` when given; otherwise ``"local"``, which makes
  ``ray.init`` start a fresh Ray for this job. ``ray.init(address=None)`` would instead join a
  cluster named by ``RAY_ADDRESS`` or the newest one ``ray start`` recorded on this machine
  (``/tmp/ray/ray_current_cluster``): a sweep job on a shared SLURM node would attach to another
  job's Ray and queue behind (or run on) its GPUs. To join a running cluster say so:
  ``cluster.address=auto`` (or ``HOST:PORT``).
* :func:`gpu_slice` / :func:`claim_gpus`: jobs that Hydra's joblib launcher runs side by side on
  one node each get ``need`` GPUs of their own (``CUDA_VISIBLE_DEVICES``), the slice of their job
  number (``hydra.job.num`` modulo ``hydra.launcher.n_jobs``) when it is free, else the first free
  slice. A slice is claimed by an exclusive ``flock`` on one file per slice in the sweep
  directory, held until the job ends, so a job that starts while a slower, earlier job still runs
  never gets that job's GPUs (joblib starts the next job wherever a worker frees up).
"""

from __future__ import annotations

import fcntl
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, Optional, Sequence

from ragen2.config import Config

log = logging.getLogger("ragen2")


class GpuSliceError(RuntimeError):
    """The parallel sweep jobs cannot each get their own GPUs on this node."""


def ray_address(cfg: Config) -> str:
    """The ``address`` for ``ray.init``: ``cluster.address``, else ``"local"`` (a fresh Ray)."""
    if cfg.cluster.address is not None:
        return cfg.cluster.address
    if os.environ.get("RAY_ADDRESS"):
        log.info("cluster.address is null: starting this job's own Ray (RAY_ADDRESS=%s is not "
                 "joined; pass cluster.address=auto to join it)", os.environ["RAY_ADDRESS"])
    return "local"


def gpus_per_job(cfg: Config) -> int:
    """GPUs one job reserves: W colocated, W + E x T split, 0 on the CPU."""
    c = cfg.cluster
    if c.device != "cuda":
        return 0
    if c.layout == "split":
        return c.learner_world_size + cfg.rollout.num_workers * cfg.engine.tensor_parallel_size
    return c.learner_world_size


def gpu_slice(visible: Sequence[str], need: int, slot: int) -> list[str]:
    """GPUs ``[slot * need, (slot + 1) * need)`` of ``visible``."""
    if need <= 0 or (slot + 1) * need > len(visible):
        raise GpuSliceError(f"slot {slot} of {need} GPUs each is outside the {len(visible)} "
                            f"visible GPUs ({','.join(visible) or 'none'})")
    return list(visible[slot * need:(slot + 1) * need])


def slots(visible: Sequence[str], need: int, parallel: int) -> int:
    """How many jobs of ``need`` GPUs run at once; refuses more parallel jobs than that."""
    have = len(visible) // need if need else 0
    if parallel > have:
        raise GpuSliceError(
            f"hydra.launcher.n_jobs={parallel} jobs at once need {parallel} x {need} GPUs "
            f"(cluster.learner_world_size, layout and engines of each job), and this node shows "
            f"{len(visible)} ({','.join(visible) or 'none'}). Lower hydra.launcher.n_jobs to "
            f"{max(have, 1)}, or give each job fewer GPUs")
    return parallel


def visible_gpus() -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as a list, else indices of every GPU torch counts."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


@contextmanager
def claim_gpus(lock_dir: str | Path, visible: Sequence[str], need: int, job_num: int,
               parallel: int) -> Iterator[list[str]]:
    """Hold one free slice of ``need`` GPUs for the block (preferring ``job_num % parallel``)."""
    n = slots(visible, need, parallel)
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    preferred = job_num % n
    held: Optional[IO[bytes]] = None
    for slot in [preferred] + [s for s in range(n) if s != preferred]:
        f = open(lock_dir / f"gpu_slot_{slot}.lock", "ab")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            continue
        held = f
        break
    if held is None:
        raise GpuSliceError(f"all {n} GPU slices in {lock_dir} are held by running jobs: more "
                            f"jobs run at once than hydra.launcher.n_jobs={parallel}")
    try:
        yield gpu_slice(visible, need, slot)
    finally:
        held.close()  # releases the flock


@contextmanager
def sweep_job_gpus(cfg: Config) -> Iterator[Optional[list[str]]]:
    """Inside a Hydra joblib multirun on CUDA with a local Ray: set ``CUDA_VISIBLE_DEVICES`` to
    this job's slice for the block. Elsewhere (single runs, other launchers, ``cluster.address``
    set, CPU): nothing, yields None."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        yield None
        return
    target = str(getattr(hc.launcher, "_target_", "") or "")
    need = gpus_per_job(cfg)
    if (hc.mode != RunMode.MULTIRUN or not target.endswith("JoblibLauncher") or need == 0
            or cfg.cluster.address is not None):
        yield None
        return
    parallel = int(hc.launcher.get("n_jobs", 1) or 1)
    if parallel < 1:
        raise GpuSliceError(f"hydra.launcher.n_jobs={parallel} (as many jobs as cores) on GPUs: "
                            "set it to the number of jobs to run at once (visible GPUs / GPUs "
                            "per job)")
    visible = visible_gpus()
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    _shutdown_ray()  # a joblib worker runs job after job: the last job's Ray saw its GPUs
    with claim_gpus(Path(hc.sweep.dir) / ".gpu_slots", visible, need, int(hc.job.num),
                    parallel) as mine:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
        log.info("sweep job %s: CUDA_VISIBLE_DEVICES=%s (one of up to %d jobs at once)",
                 hc.job.num, os.environ["CUDA_VISIBLE_DEVICES"], parallel)
        try:
            yield mine
        finally:
            _shutdown_ray()
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before


def _shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
