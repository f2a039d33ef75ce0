"""Where learner ranks and rollout engines run on a Ray cluster's GPUs, decided before anything starts.

:func:`plan_placement` is pure (config + node list -> :class:`PlacementPlan`) and refuses a layout
that cannot fit with a :class:`PlacementError` naming the config keys; :func:`create_placement_group`
reserves the plan's bundles in Ray and hands back a :class:`Placement` whose ``learner_options`` /
``worker_options`` are the ``.options(...)`` kwargs of each actor.

With W = ``cluster.learner_world_size``, E = ``rollout.num_workers``, T = ``engine.tensor_parallel_size``:

* ``cluster.device=cpu``: no placement group; every actor asks for 0 CPUs and 0 GPUs (as before).
* ``cluster.layout=colocated`` (needs E x T == W): W bundles ``{GPU: 1, CPU: 1}``, one per learner
  rank. Rank r takes half of bundle r; engine i takes the other half of bundles [i*T, (i+1)*T), so
  a rank and an engine shard share one physical GPU (``engine.sleep_mode`` frees the engine's
  memory while the learner updates). T == 1: the rollout worker holds its half GPU itself.
  T > 1: a Ray actor cannot hold half of several GPUs, so the worker asks for no GPU and its engine
  starts its T shards as Ray actors in its bundles (vLLM ``distributed_executor_backend="ray"``,
  configured by the environment of :meth:`Placement.engine_env`).
* ``cluster.layout=split``: one placement group, bundles [0, W) are ``{GPU: 1, CPU: 1}`` for the
  learner ranks, bundles [W, W+E) are ``{GPU: T, CPU: 1}``, one per engine. A bundle never spans
  nodes, so an engine's T GPUs are on one node and its worker owns them whole (vLLM's TP ranks are
  then local processes).

Multi-node: a learner rank is one GPU and never straddles nodes (FSDP across nodes is normal). A
TP engine runs a collective in every layer, so its T GPUs must share a node: in ``split`` that is
its single bundle; in ``colocated`` with T > 1 each engine's T bundles form their own
``STRICT_PACK`` placement group (one group per engine), unless ``cluster.placement_strategy`` is
already ``STRICT_PACK`` (then one group on one node). ``cluster.placement_strategy`` applies to the
other groups. The feasibility check is exact for these shapes (bundles of 1 and T GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ragen2.config import Config

#: the environment of every actor on GPUs (learner ranks, rollout workers, and through Ray's
#: runtime-env inheritance vLLM's TP shard actors; also the job's, ``ragen2.train``).
#: NCCL_CUMEM_ENABLE=0: vLLM sets it in its own processes (``vllm/env_override.py``), and NCCL
#: communicators whose members disagree on cuMem allocation can hang or crash when the learner
#: broadcasts weights to the engines (SkyRL PR #143; verl sets it for the same reason, as do
#: OpenRLHF, open-instruct and AReaL). Peers' other variables (CUDA_DEVICE_MAX_CONNECTIONS for
#: Megatron's overlap, logging levels) do not concern the weight group.
ACTOR_ENV = {"NCCL_CUMEM_ENABLE": "0"}
COLOCATED_LEARNER_GPU = 0.5  # share of a colocated GPU the learner rank asks Ray for
COLOCATED_ENGINE_GPU = 0.5  # share the engine (or each engine shard) asks for; the two sum to 1


class PlacementError(ValueError):
    """The configured layout does not fit the Ray cluster (or Ray could not reserve it)."""


@dataclass(frozen=True)
class NodeResources:
    """One alive Ray node: its id, address, logical CPU / GPU counts and (when known) the memory
    of each of its GPUs in bytes (0 = unknown: Ray does not report it; the preflight measures it)."""

    node_id: str
    cpus: float
    gpus: int
    address: str = ""
    gpu_memory: int = 0

    def label(self) -> str:
        return self.address or self.node_id[:8]


@dataclass(frozen=True)
class GroupSpec:
    """One Ray placement group to reserve: its bundles (resource dicts) and strategy."""

    bundles: tuple[dict[str, float], ...]
    strategy: str
    role: str  # "learner+rollout" (split), "colocated", "engine-<i>" (colocated T > 1)


@dataclass(frozen=True)
class ActorSlot:
    """Where one actor runs and what it asks Ray for.

    ``group`` indexes ``PlacementPlan.groups`` (None on CPU: no placement group). For rollout
    workers ``engine_bundles`` are the bundles (in ``group``) holding the engine's GPUs, and
    ``engine_gpus_per_rank > 0`` means the engine must start its TP shards as Ray actors there,
    each asking for that share of a GPU.
    """

    group: Optional[int]
    bundle: Optional[int]
    num_gpus: float
    num_cpus: float
    engine_bundles: tuple[int, ...] = ()
    engine_gpus_per_rank: float = 0.0


@dataclass(frozen=True)
class PlacementPlan:
    """The whole placement: groups to reserve and one slot per learner rank and rollout worker."""

    device: str
    layout: str
    groups: tuple[GroupSpec, ...]
    learners: tuple[ActorSlot, ...]
    workers: tuple[ActorSlot, ...]
    gpus: int = 0  # GPUs reserved in total

    def describe(self) -> str:
        """One line for the log: layout, GPUs and the groups' shapes."""
        if self.device == "cpu":
            return (f"placement: cpu ({len(self.learners)} learner ranks, {len(self.workers)} "
                    "rollout workers, no placement group)")
        groups = "; ".join(f"{g.role} {g.strategy} {_bundle_summary(g.bundles)}" for g in self.groups)
        return (f"placement: {self.layout} on {self.gpus} GPUs, {len(self.learners)} learner ranks, "
                f"{len(self.workers)} rollout workers: {groups}")


def _bundle_summary(bundles: Sequence[dict[str, float]]) -> str:
    """``8 x {GPU: 1, CPU: 1} + 2 x {GPU: 2, CPU: 1}`` (runs of equal bundles)."""
    runs: list[list[Any]] = []
    for b in bundles:
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return " + ".join(f"{n} x {{{', '.join(f'{k}: {v:g}' for k, v in b.items())}}}" for b, n in runs)


# ----------------------------------------------------------------------------------- planning
def plan_placement(cfg: Config, nodes: Sequence[NodeResources]) -> PlacementPlan:
    """The placement of ``cfg`` on ``nodes``; raises :class:`PlacementError` when it cannot fit."""
    c, w, e = cfg.cluster, cfg.cluster.learner_world_size, cfg.rollout.num_workers
    t = cfg.engine.tensor_parallel_size
    if c.device == "cpu":
        none = ActorSlot(None, None, 0.0, 0.0)  # as before: Ray actors that reserve nothing
        return PlacementPlan("cpu", c.layout, (), (none,) * w, (none,) * e)
    if c.layout == "colocated" and e * t != w:
        raise PlacementError(
            f"cluster.layout=colocated shares each learner GPU with one engine shard, so it needs "
            f"rollout.num_workers x engine.tensor_parallel_size == cluster.learner_world_size; got "
            f"{e} x {t} = {e * t} != {w}. "
            + (f"Set rollout.num_workers={w // t}" if w % t == 0 else
               f"Set engine.tensor_parallel_size to a divisor of {w} and rollout.num_workers to "
               f"{w} / it")
            + ", or use cluster.layout=split.")
    need = w if c.layout == "colocated" else w + e * t
    _check_fits(cfg, nodes, need)
    if c.layout == "colocated":
        return _colocated(w, e, t, c.placement_strategy)
    return _split(w, e, t, c.placement_strategy)


def _colocated(w: int, e: int, t: int, strategy: str) -> PlacementPlan:
    one = {"GPU": 1.0, "CPU": 1.0}
    shard = COLOCATED_ENGINE_GPU if t > 1 else 0.0
    engine_gpus = COLOCATED_ENGINE_GPU if t == 1 else 0.0  # T > 1: the shards hold the GPU shares
    if t == 1 or strategy == "STRICT_PACK":  # one group; an engine's bundles are one node anyway
        groups = (GroupSpec(tuple(dict(one) for _ in range(w)), strategy, "colocated"),)
        learners = tuple(ActorSlot(0, r, COLOCATED_LEARNER_GPU, 0.5) for r in range(w))
        workers = tuple(ActorSlot(0, i * t, engine_gpus, 0.5, tuple(range(i * t, (i + 1) * t)), shard)
                        for i in range(e))
    else:  # one STRICT_PACK group per engine keeps its T GPUs on one node
        groups = tuple(GroupSpec(tuple(dict(one) for _ in range(t)), "STRICT_PACK", f"engine-{i}")
                       for i in range(e))
        learners = tuple(ActorSlot(r // t, r % t, COLOCATED_LEARNER_GPU, 0.5) for r in range(w))
        workers = tuple(ActorSlot(i, 0, engine_gpus, 0.5, tuple(range(t)), shard) for i in range(e))
    return PlacementPlan("cuda", "colocated", groups, learners, workers, gpus=w)


def _split(w: int, e: int, t: int, strategy: str) -> PlacementPlan:
    bundles = tuple([{"GPU": 1.0, "CPU": 1.0} for _ in range(w)]
                    + [{"GPU": float(t), "CPU": 1.0} for _ in range(e)])
    learners = tuple(ActorSlot(0, r, 1.0, 1.0) for r in range(w))
    workers = tuple(ActorSlot(0, w + i, float(t), 1.0, (w + i,)) for i in range(e))
    return PlacementPlan("cuda", "split", (GroupSpec(bundles, strategy, "learner+rollout"),),
                         learners, workers, gpus=w + e * t)


def _usable_gpus(n: NodeResources) -> int:
    """GPUs of a node that can be bundled: each bundle also asks for one CPU."""
    return max(0, min(int(n.gpus), int(n.cpus)))


def _cluster_summary(nodes: Sequence[NodeResources]) -> str:
    total = sum(int(n.gpus) for n in nodes)
    shown = ", ".join(f"{n.label()}: {int(n.gpus)} GPU/{n.cpus:g} CPU" for n in nodes[:8])
    more = f", ... ({len(nodes) - 8} more)" if len(nodes) > 8 else ""
    return f"{total} GPUs on {len(nodes)} node{'s' * (len(nodes) != 1)} ({shown}{more})"


def _check_fits(cfg: Config, nodes: Sequence[NodeResources], need: int) -> None:
    """Refuse a layout the nodes cannot hold: total GPUs, one node per TP engine, STRICT_PACK."""
    c, w, e = cfg.cluster, cfg.cluster.learner_world_size, cfg.rollout.num_workers
    t = cfg.engine.tensor_parallel_size
    have = _cluster_summary(nodes)
    per_node = [_usable_gpus(n) for n in nodes]
    if c.layout == "colocated":
        needs = f"cluster.learner_world_size={w} GPUs (engines share them)"
    else:
        needs = (f"cluster.learner_world_size={w} + rollout.num_workers={e} x "
                 f"engine.tensor_parallel_size={t} = {need} GPUs")
    if sum(per_node) == 0:
        raise PlacementError(f"cluster.device=cuda but the Ray cluster has no GPU: {have}. Start "
                             "the Ray nodes on GPU machines (launch/ray_head.sh detects them) or "
                             "set cluster.device=cpu.")
    if sum(per_node) < need:
        raise PlacementError(
            f"cluster.layout={c.layout} needs {needs}; the Ray cluster has {have}"
            f"{_cpu_note(nodes)}. Lower cluster.learner_world_size / rollout.num_workers"
            f"{', use cluster.layout=colocated' if c.layout == 'split' else ''} or add GPU nodes.")
    if t > max(per_node):
        raise PlacementError(
            f"engine.tensor_parallel_size={t} needs {t} GPUs on one node (a TP engine does not span "
            f"nodes); the largest node has {max(per_node)}: {have}. Lower "
            "engine.tensor_parallel_size.")
    if c.placement_strategy == "STRICT_PACK":
        if need > max(per_node):
            raise PlacementError(
                f"cluster.placement_strategy=STRICT_PACK puts all {need} GPUs ({needs}) on one "
                f"node; the largest node has {max(per_node)}: {have}. Use "
                "cluster.placement_strategy=PACK to span nodes.")
        return
    if t > 1 and sum(g // t for g in per_node) < e:
        raise PlacementError(
            f"rollout.num_workers={e} engines with engine.tensor_parallel_size={t} need {e} groups "
            f"of {t} GPUs each on one node; the nodes hold only {sum(g // t for g in per_node)} "
            f"such groups: {have}. Pick a tensor_parallel_size dividing the GPUs per node.")


def _cpu_note(nodes: Sequence[NodeResources]) -> str:
    short = [n.label() for n in nodes if n.cpus < n.gpus]
    return (f" (each GPU bundle also needs a CPU; short of CPUs: {', '.join(short)})"
            if short else "")


# ----------------------------------------------------------------------------------- Ray side
def cluster_nodes() -> list[NodeResources]:
    """The alive nodes of the connected Ray cluster (``ray.nodes()``)."""
    import ray

    out = []
    for n in ray.nodes():
        if not n.get("Alive", False):
            continue
        res = n.get("Resources", {})
        out.append(NodeResources(node_id=str(n.get("NodeID", "")), cpus=float(res.get("CPU", 0.0)),
                                 gpus=int(res.get("GPU", 0.0)), address=n.get("NodeManagerAddress", "")))
    return out


@dataclass
class Placement:
    """A plan with its placement groups reserved in Ray (none on CPU)."""

    plan: PlacementPlan
    groups: list[Any] = field(default_factory=list)  # ray.util.placement_group.PlacementGroup

    def learner_options(self, rank: int) -> dict[str, Any]:
        """``ray.remote(LearnerRank).options(**...)`` kwargs of learner rank ``rank``."""
        opts = self._options(self.plan.learners[rank])
        if self.plan.device == "cuda":
            opts["runtime_env"] = {"env_vars": dict(ACTOR_ENV)}  # merged with the job's by Ray
        return opts

    def worker_options(self, index: int) -> dict[str, Any]:
        """``ray.remote(RolloutWorker).options(**...)`` kwargs of rollout worker ``index``."""
        slot = self.plan.workers[index]
        opts = self._options(slot, capture_children=slot.engine_gpus_per_rank > 0)
        env = {**ACTOR_ENV, **self.engine_env(index)} if self.plan.device == "cuda" else {}
        if env:
            opts["runtime_env"] = {"env_vars": env}  # merged with the job's env_vars by Ray
        return opts

    def engine_env(self, index: int) -> dict[str, str]:
        """Environment for an engine whose TP shards are Ray actors (colocated, T > 1), else {}.

        vLLM reads these with ``distributed_executor_backend="ray"``: each shard asks for
        ``VLLM_RAY_PER_WORKER_GPUS`` of a GPU in the bundles ``VLLM_RAY_BUNDLE_INDICES`` of the
        placement group the worker runs in (captured as the current group).
        """
        slot = self.plan.workers[index]
        if slot.engine_gpus_per_rank <= 0:
            return {}
        return {"VLLM_RAY_PER_WORKER_GPUS": str(slot.engine_gpus_per_rank),
                "VLLM_RAY_BUNDLE_INDICES": ",".join(map(str, slot.engine_bundles))}

    def _options(self, slot: ActorSlot, capture_children: bool = False) -> dict[str, Any]:
        opts: dict[str, Any] = {"num_cpus": slot.num_cpus, "num_gpus": slot.num_gpus}
        if slot.group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self.groups[slot.group], placement_group_bundle_index=slot.bundle,
                placement_group_capture_child_tasks=capture_children)
        return opts

    def remove(self) -> None:
        """Release the reserved bundles (the groups also go when the driver exits)."""
        from ray.util import remove_placement_group

        for pg in self.groups:
            remove_placement_group(pg)
        self.groups = []


def create_placement_group(plan: PlacementPlan, timeout_s: float = 120.0) -> Placement:
    """Reserve the plan's placement groups; :class:`PlacementError` if Ray cannot within ``timeout_s``."""
    if not plan.groups:
        return Placement(plan)
    import ray
    from ray.util import placement_group, remove_placement_group

    pgs = [placement_group([dict(b) for b in g.bundles], strategy=g.strategy) for g in plan.groups]
    _, pending = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
    if pending:
        for pg in pgs:
            remove_placement_group(pg)
        raise PlacementError(
            f"Ray could not reserve {len(pending)} of {len(pgs)} placement groups within "
            f"{timeout_s:g} s ({plan.describe()}). Other jobs may hold the GPUs (see `ray status`), "
            "or a node left the cluster.")
    return Placement(plan, pgs)


def place(cfg: Config, timeout_s: float = 120.0) -> Placement:
    """Plan ``cfg`` on the connected Ray cluster and reserve it (nothing is reserved on CPU)."""
    plan = plan_placement(cfg, cluster_nodes() if cfg.cluster.device == "cuda" else [])
    return create_placement_group(plan, timeout_s)
