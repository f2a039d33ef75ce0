"""One FSDP2 learner rank (a Ray actor): a facade over the learner's modules.

Each module owns one idea; the rank holds their shared state, a typed
:class:`~ragen2.learner.rank_state.RankState` (models, optimisers, device, policy version) that
:meth:`LearnerRank.setup` builds, and forwards its public methods to them with it:

* :mod:`ragen2.learner.build`: load, wrap (LoRA), shard and place the policy, reference and critic;
* :mod:`ragen2.learner.forward`: this rank's rows and micro-batches, the (prefix-shared) forward;
* :mod:`ragen2.learner.ppo`: the PPO/GRPO update over :mod:`ragen2.algos.objective`'s maths;
* :mod:`ragen2.learner.sft`: the warm start's behaviour-cloning step;
* :mod:`ragen2.learner.probes`: gradient-SNR, MI cross-scoring, the weight-sync probe's logprobs;
* :mod:`ragen2.learner.state`: weights export, save/load of the policy, checkpoints.

The rank reads its own config sections (``algorithm``, ``learner``, ``model``, ``cluster``,
``monitor``) and :class:`~ragen2.learner.settings.LearnerSettings`; batches arrive as
:class:`~ragen2.batch.TrainingBatch`.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping, Sequence, Union

import numpy as np
import torch
import torch.distributed as dist

from ragen2.batch import TrainingBatch
from ragen2.config import Config
from ragen2.learner import build, ppo, probes, sft, state
from ragen2.learner.forward import accepts_logits_to_keep, first_trained_position
from ragen2.learner.ppo import StaleBatchError
from ragen2.learner.rank_state import RankState
from ragen2.learner.settings import LearnerSettings
from ragen2.learner.weights import export_plan

__all__ = ["LearnerRank", "StaleBatchError", "accepts_logits_to_keep", "first_trained_position"]

Batch = Union[TrainingBatch, Mapping[str, Any]]  # a mapping of the field names: scripts and tests


class LearnerRank:
    #: Sharded learners (``world_size > 1``, mixed precision or CPU offload) build every model on
    #: the meta device and fill it from rank 0, the only rank that reads the checkpoint
    #: (:func:`ragen2.learner.build.place`). False: every rank loads the full checkpoint and moves
    #: it to its device before sharding (the former path; kept for tests/learner/test_meta_init.py
    #: and benchmarks/fsdp_init_memory.py, which compare the two). The GPU memory estimate plans
    #: for True (:data:`ragen2.cluster.memory.SHARDED_META_INIT`).
    meta_init: bool = True
    #: the rank's models, optimisers and policy version, built by :meth:`setup`
    state: RankState

    def __init__(self, cfg: Config, model_path: str, rank: int, world_size: int,
                 threads: int, settings: LearnerSettings, cores: Sequence[int] = ()) -> None:
        """``cores``: pin this rank's process to them (``cluster.layout=split`` on the CPU,
        :mod:`ragen2.cluster.cores`); empty: wherever the OS puts it."""
        from ragen2.cluster.cores import claim_cpu
        from ragen2.plugins import import_plugins

        claim_cpu(threads, cores)
        import_plugins(cfg.plugins)  # a plugin's loss, estimator, gate ... is known in this rank
        self.cfg, self.model_path, self.rank, self.world_size = cfg, model_path, rank, world_size
        self.settings = settings
        #: what a weight-sync strategy running here keeps between its calls, by strategy
        #: (``cuda_ipc``: :class:`~ragen2.sync.cuda_ipc.SharePush`; ``nccl`` on rank 0:
        #: :class:`~ragen2.sync.nccl.WeightGroup`)
        self.sync_state: dict[str, Any] = {}

    def address(self, host: str | None = None) -> tuple[str, int]:
        """Where a group whose rank 0 is this rank meets (asked of rank 0 before anyone joins):
        this node's IP (``host``: that address instead) and the port of a rendezvous store
        bound here on a port the OS assigned (:func:`ragen2.cluster.rendezvous.open_store`:
        no other process can take it before the group forms). Once per group: :meth:`setup`,
        or a weight-sync group's :func:`~ragen2.sync.nccl.join_group`, takes the store."""
        from ragen2.cluster.rendezvous import open_store

        if host is None:
            import ray

            host = ray.util.get_node_ip_address()
        return host, open_store(self, host)

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the process group at ``master_addr:master_port``, load and shard the policy (and
        reference / critic): :attr:`state`, at policy version 0.

        Rank 0 serves the group's store: the one :meth:`address` bound at ``master_port``, or
        (a single rank) ``master_port=0``: one bound now on a port the OS assigns. Sharded
        learners initialise every model on the meta device; only rank 0 reads the checkpoint
        into host memory and the others receive their shards from it.
        """
        from ragen2.cluster.rendezvous import join_store

        store = join_store(self, master_addr, master_port, self.world_size, self.rank)
        os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(store.port))
        cuda = self.cfg.cluster.device == "cuda"
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        dist.init_process_group(self.cfg.cluster.backend, store=store, rank=self.rank,
                                world_size=self.world_size)
        self.state = build.build_models(self.cfg, self.model_path, self.rank, self.world_size,
                                        self.settings, device, meta_init_sharded=self.meta_init)

    @property
    def temperature(self) -> float:
        """The sampling temperature logprobs are taken at (``settings.temperature``)."""
        return self.settings.temperature

    @property
    def model(self) -> torch.nn.Module:
        """The policy (what a weight-sync strategy or probe running here reads)."""
        return self.state.model

    @property
    def device(self) -> torch.device:
        return self.state.device

    # ---------------------------------------------------------------- training
    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One RL step on a rollout batch generated by the policy version the rank holds
        (:func:`ragen2.learner.ppo.update`); its ``actor/`` and ``critic/`` metrics."""
        return ppo.update(self.state, TrainingBatch.of(batch), step)

    def sft_steps(self, batch: Batch, steps: Sequence[np.ndarray],
                  lr: float) -> list[dict[str, float]]:
        """Behaviour-cloning steps on each of ``steps`` (row ids) in turn, stopping after a
        skipped one (:func:`ragen2.learner.sft.sft_steps`); each step's metrics."""
        return sft.sft_steps(self.state, TrainingBatch.of(batch), steps, lr)

    def sft_step(self, batch: Batch, rows: np.ndarray, lr: float) -> dict[str, float]:
        """One behaviour-cloning step on ``rows`` (:func:`ragen2.learner.sft.sft_step`)."""
        return sft.sft_step(self.state, TrainingBatch.of(batch), rows, lr)

    def release_cuda_cache(self) -> None:
        """Return the blocks PyTorch's caching allocator keeps after an update (its activations,
        logits and gathered weights) to the GPU, so that a sleeping vLLM engine on the same GPU
        can wake up into them (``engine.sleep_mode``; the memory estimate assumes it)."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ----------------------------------------------------------------- probes
    def grad_snr(self, batch: Batch, buckets: np.ndarray) -> dict[str, float]:
        """Gradient norms of the loss terms per bucket of rows (:func:`ragen2.learner.probes.grad_snr`)."""
        return probes.grad_snr(self.state, TrainingBatch.of(batch), buckets)

    def score(self, contexts: list[list[int]], continuations: list[list[int]],
              columns: np.ndarray, chunk: int = 64) -> list[tuple[int, int, float, int]]:
        """This rank's share of the MI monitor's cross-scores (:func:`ragen2.learner.probes.score`)."""
        return probes.score(self.state, contexts, continuations, columns, chunk)

    def logprobs(self, ids: list[int]) -> list[float] | None:
        """Raw per-token logprobs of ``ids[1:]`` (rank 0; :func:`ragen2.learner.probes.logprobs`)."""
        return probes.logprobs(self.state, ids)

    # ------------------------------------------------------------ policy state
    def save_policy(self, path: str) -> None:
        state.save_policy(self.state, path)

    def load_policy(self, path: str) -> None:
        state.load_policy(self.state, path)

    def finish_warm_start(self) -> None:
        state.finish_warm_start(self.state)

    def named_weights(self, device: str | torch.device = "cpu", dtype: str | None = None,
                      names: list[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) of every policy weight (:func:`ragen2.learner.state.named_weights`)."""
        return state.named_weights(self.state, device, dtype, names)

    def export_names(self) -> list[str] | None:
        """The HF names of every weight :meth:`named_weights` exports, in its order (rank 0; the
        others None): what the post-sync checksums choose from (:mod:`ragen2.sync.checksum`)."""
        return [e.name for e in export_plan(self.state.model)] if self.rank == 0 else None

    def policy_weights(self) -> dict[str, np.ndarray] | None:
        return state.policy_weights(self.state)

    def save(self, directory: str) -> None:
        """Write this rank's shards of a checkpoint into ``directory`` (already created,
        temporary; collective): ``torch.distributed.checkpoint``, :mod:`ragen2.learner.sharded`."""
        from ragen2.learner.sharded import save_sharded

        save_sharded(self.state, directory)

    def load(self, directory: str) -> int:
        """Restore a checkpoint; the policy version (:func:`ragen2.learner.state.load`)."""
        return state.load(self.state, directory)

    # ------------------------------------------------------------------ plumbing
    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(self, *args, **kwargs)``: lets a weight-sync strategy run its rank-side code here."""
        return fn(self, *args, **kwargs)

    def get_version(self) -> int:
        return self.state.version

    def barrier(self) -> None:
        """Wait for every learner rank (the learner's own process group; nothing alone)."""
        if self.world_size > 1:
            if self.device.type == "cuda":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
