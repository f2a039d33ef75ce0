"""The single controller: warm start, then per step rollout -> filter -> update -> weight sync.

It owns no model: rollout workers (engine + envs) and FSDP2 learner ranks are Ray actors, and
everything a step needs is derived from (seed, step) so a resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from dataclasses import asdict, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ragen2 import seeding
from ragen2.config import Config
from ragen2.early_stop import EarlyStop
from ragen2.filtering.pipeline import FilterPipeline
from ragen2.filtering.scores import GroupBatch, reward_std
from ragen2.filtering.select import ZERO_EPS
from ragen2.learner import checkpoint
from ragen2.learner.settings import LearnerSettings
from ragen2.metrics import MetricsLogger
from ragen2.models.tiny import default_cache_root
from ragen2.preempt import StopSignal
from ragen2.rollout.archive import save_outcomes, save_rollouts
from ragen2.rollout.envs import EnvEntry, allocate, assign, eval_entries, train_entries
from ragen2.rollout.pool import PendingGather, WorkerPool, WorkerRestartError
from ragen2.rollout.runner import EpisodeSpec
from ragen2.rollout.schedule import (RolloutQueue, Rollouts, StaleRolloutsError, launch_steps,
                                     overlap_seconds, staleness_metrics)
from ragen2.rollout.split import HELDOUT, TRAIN, ProblemSplit
from ragen2.rollout.trajectory import Trajectory, collate
from ragen2.run_state import (CollapseCheck, Evaluation, Health, PanelVerdict, RunState,
                              StepResult, UpdateOutcome)

if TYPE_CHECKING:
    from ragen2.collapse.panel import PanelMeasurement

log = logging.getLogger("ragen2")

#: a batch generated ahead, in flight: its (still empty) record, its calls, its launch time
Launched = tuple[Rollouts, PendingGather, float]


class TrainingStopped(RuntimeError):
    """Too many consecutive steps had no group left after filtering."""


class EnvFailureError(RuntimeError):
    """More episodes of a step failed inside the env than ``rollout.max_env_error_frac`` allows."""


def group_rewards(trajs: Sequence[Trajectory]) -> dict[int, list[float]]:
    """Episode rewards per group id (the input of group filters)."""
    groups: dict[int, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t.reward)
    return groups


def rollout_metrics(trajs: Sequence[Trajectory], prefix: str,
                    per_env: bool = False) -> dict[str, float]:
    """Success, reward, format and length statistics; with ``per_env`` also under ``prefix/<env>``.

    An episode whose env raised counts as a failure (``env_errors`` counts them).
    """
    out = _episode_stats(trajs, prefix)
    if per_env:
        by_env: dict[str, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            by_env[t.env_name].append(t)
        for name, part in sorted(by_env.items()):
            out.update(_episode_stats(part, f"{prefix}/{name}"))
    return out


def success_rate(trajs: Sequence[Trajectory]) -> float:
    """The share of episodes that succeeded (``<prefix>/success``)."""
    return float(np.mean([t.success for t in trajs]))


def _episode_stats(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    r = np.array([t.reward for t in trajs])
    stds = reward_std(group_rewards(trajs)).numpy()  # σ_g, the filter's and the SNR grades' own
    turns = np.array([t.num_turns for t in trajs])
    return {
        f"{prefix}/success": success_rate(trajs),
        f"{prefix}/reward_mean": float(r.mean()),
        f"{prefix}/reward_std": float(r.std()),
        f"{prefix}/env_return_mean": float(np.mean([t.env_return for t in trajs])),
        f"{prefix}/group_reward_std_mean": float(stds.mean()),
        f"{prefix}/zero_std_group_frac": float((stds <= ZERO_EPS).mean()),
        f"{prefix}/num_turns_mean": float(turns.mean()),
        f"{prefix}/format_error_rate": float(sum(t.num_format_errors for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/invalid_action_rate": float(sum(t.num_invalid_actions for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/truncated_frac": float(np.mean([t.truncated for t in trajs])),
        f"{prefix}/response_tokens_mean": float(sum(t.num_generated for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/sequence_tokens_mean": float(np.mean([len(t.input_ids) for t in trajs])),
        f"{prefix}/env_errors": float(sum(t.env_error is not None for t in trajs)),
    }


def check_env_errors(trajs: Sequence[Trajectory], max_frac: float, where: str) -> None:
    """Raise :class:`EnvFailureError` when the share of episodes whose env raised is too high;
    below it, log each failed episode's reason (the run log keeps what the samples may not)."""
    failed = [t for t in trajs if t.env_error is not None]
    if failed and len(failed) > max_frac * len(trajs):
        first = failed[0]
        raise EnvFailureError(
            f"{where}: {len(failed)} of {len(trajs)} episodes failed inside the env (more than "
            f"rollout.max_env_error_frac={max_frac}); first: env {first.env_name!r} seed "
            f"{first.env_seed}: {first.env_error}")
    for t in failed[:5]:
        log.warning("%s: an episode failed inside the env (left out of the update): env %r seed "
                    "%d: %s", where, t.env_name, t.env_seed, t.env_error)
    if len(failed) > 5:
        log.warning("%s: %d more episodes failed inside the env", where, len(failed) - 5)


def _spread(trajs: Sequence[Trajectory], n: int) -> list[Trajectory]:
    """``n`` trajectories spread evenly over the list (so every env of a mixture shows up)."""
    if n <= 0 or not trajs:
        return []
    idx = np.unique(np.linspace(0, len(trajs) - 1, min(n, len(trajs))).round().astype(int))
    return [trajs[i] for i in idx]


def learner_settings(cfg: Config) -> LearnerSettings:
    """What the learner needs from the engine and rollout sections, resolved once (the learner
    reads only its own sections, :mod:`ragen2.learner.settings`)."""
    from ragen2.cluster.memory import scorer_reserve_bytes

    e, a = cfg.engine, cfg.algorithm
    return LearnerSettings(temperature=e.temperature if e.temperature > 0 else 1.0,
                           norm_tokens=a.loss_agg_norm_tokens or e.max_new_tokens * cfg.rollout.max_turns,
                           max_staleness=cfg.trainer.max_staleness,
                           score_reserve_bytes=scorer_reserve_bytes(cfg))


class Controller:
    def __init__(self, cfg: Config, run_dir: Path, model_path: str) -> None:
        import ray

        from ragen2.learner.group import LearnerGroup
        from ragen2.rollout.worker import RolloutWorker
        from ragen2.sync import ProbePolicy, make_sync, probe_ids

        self.cfg, self.run_dir, self.model_path = cfg, Path(run_dir), model_path
        cores = int(ray.available_resources().get("CPU", os.cpu_count() or 1)) or 1
        c = cfg.cluster
        learner_threads = c.torch_threads or max(1, cores // c.learner_world_size)
        worker_threads = c.torch_threads or max(1, cores // cfg.rollout.num_workers)
        split = None  # the CPU split layout: the learner and the engines on disjoint cores
        if c.layout == "split" and c.device == "cpu":
            from ragen2.cluster.cores import split_cores, usable_cores

            split = split_cores(usable_cores())
            learner_threads, worker_threads = (
                (c.torch_threads, c.torch_threads) if c.torch_threads else
                split.threads(c.learner_world_size, cfg.rollout.num_workers))
            log.info("cluster.layout=split: learner ranks on cores %s, engines on cores %s",
                     list(split.learner), list(split.engines))
        # Plan against the live cluster and reserve the GPUs (PlacementError if it cannot fit);
        # on cluster.device=cpu nothing is reserved and every actor asks for 0 CPUs / 0 GPUs.
        from ragen2.cluster import place

        self.placement = place(cfg)
        log.info(self.placement.plan.describe())
        worker_cls = ray.remote(RolloutWorker)
        self._synced = False  # whether any weights were pushed (else workers hold model_path's)
        # colocated GPUs: the engines size their KV cache before the learner ranks load a model
        # (ragen2.cluster.startup); otherwise both start at once
        from ragen2.cluster.startup import start_actors

        def start_pool() -> WorkerPool:
            return WorkerPool(lambda i: worker_cls.options(**self.placement.worker_options(i))
                              .remote(cfg, model_path, i, worker_threads,
                                      split.engines if split else ()),
                              cfg.rollout.num_workers, on_restart=self._resync,
                              max_restarts=cfg.rollout.max_worker_restarts)

        self.pool, self.learners = start_actors(
            self.placement.plan, start_pool,
            lambda: LearnerGroup(cfg, model_path, learner_threads, self.placement,
                                 learner_settings(cfg), split.learner if split else ()),
            lambda pool: pool.call_all("policy_version"))  # returns after every __init__
        self.sync = make_sync(cfg, self.learners, self.workers)
        self.train_envs, self.eval_envs = train_entries(cfg.env), eval_entries(cfg.env)
        self.filter = FilterPipeline(cfg.filter, cfg.seed, [e.share for e in self.train_envs])
        self.monitor = None
        if cfg.monitor.name == "mi" and cfg.monitor.every > 0:
            from ragen2.collapse.monitor import MIMonitor

            m = cfg.monitor
            self.monitor = MIMonitor(m.every, m.max_negatives, m.permutations, m.ema, cfg.seed,
                                     m.turn_negatives, m.turn_uniform, action_mi=m.action_mi,
                                     min_samples=m.min_samples)
        self.panel = self._make_panel() if cfg.monitor.name == "mi" and cfg.monitor.panel_size else None
        self.turn_panel = self._make_turn_panel()
        from ragen2.collapse.alert import CollapseAlert
        from ragen2.collapse.instrument import resolve_instrument

        #: what the alert and the diagnosis read: first_turn | later_turns (collapse/instrument.py)
        self.instrument = resolve_instrument(cfg.monitor.alert_instrument,
                                             self.turn_panel is not None)
        if cfg.monitor.name == "mi":
            log.info("collapse alert and diagnosis read the %s MI (monitor.alert_instrument=%s)",
                     self.instrument.replace("_", " "), cfg.monitor.alert_instrument)

        self.alert = CollapseAlert(cfg.monitor.alert_patience, cfg.monitor.alert_min_gain)
        self.panel_verdict: PanelVerdict | None = None  # the last panel measurement's
        self.rollbacks = 0
        from ragen2.models.loading import load_tokenizer

        self.tokenizer = load_tokenizer(model_path, trust_remote_code=cfg.model.trust_remote_code)
        self.probe = probe_ids(len(self.tokenizer), cfg.sync.probe_tokens) if cfg.sync.probe else None
        self.probe_policy = ProbePolicy(cfg.sync.tolerance(cfg.model.dtype),
                                        cfg.sync.probe_floor_multiple)
        self.checksum_names = self._checksum_names() if cfg.sync.checksum else []
        eos = self.tokenizer.eos_token_id
        self.eos_text = self.tokenizer.decode([eos]) if eos is not None else None
        self.group_keys: dict[int, int] | None = None
        self.health = Health()
        self.pad_id = 0
        self.version = 0
        #: bounded staleness: the batches generated ahead of their step (empty at k = 0)
        self.queue = RolloutQueue(cfg.trainer.max_staleness)
        #: between an update and its push: the learner holds a version the engines do not
        self._behind = False

    # --------------------------------------------------------------- rollouts
    @property
    def workers(self) -> list[Any]:
        """The rollout worker actors (a restarted worker replaces its predecessor in place)."""
        return self.pool.actors

    def _gather(self, method: str, specs: list[EpisodeSpec],
                *args_per_worker: list[Any]) -> tuple[list[Trajectory], dict[str, float]]:
        """Split ``specs`` over the workers; trajectories in spec order, max wall-time stats and
        ``worker_restarts`` (a worker that died reran its chunk with the same seed and version)."""
        return self.pool.gather(method, specs, *args_per_worker)

    def _resync(self, index: int, worker: Any) -> None:
        """Bring a restarted worker to the current policy: weights, version, then the probe.

        Rollouts only run while the learner holds ``self.version`` (updates are followed by a push
        at once), so exporting the learner again reproduces what the dead worker held.
        """
        from ragen2.sync import run_probe

        if getattr(self, "sync", None) is None:  # still starting: make_sync meets the new actor
            return
        if self._behind:  # the behaviour version is gone from the learner: it cannot be rebuilt
            raise WorkerRestartError(
                f"rollout worker {index} died while generating ahead (trainer.max_staleness="
                f"{self.cfg.trainer.max_staleness}) with policy version {self.version}, which the "
                "learner no longer holds after its update, so its share cannot be regenerated "
                "identically: resume from the latest checkpoint (trainer.resume=true), whose "
                "queued batches continue the run exactly")
        self.sync.replace_worker(index, worker)
        if not self._synced:  # nothing pushed yet: the new worker already holds model_path's
            return
        self.sync.push(self.version, only=[index])
        self.verify_sync([worker])
        if self.probe is not None:
            run_probe(self.learners, [worker], self.probe, self.probe_policy, self.version)

    @cached_property
    def split(self) -> ProblemSplit:
        """Which problems are trained on and which held out (:mod:`ragen2.rollout.split`)."""
        from ragen2.rollout.envs import all_entries

        return ProblemSplit(all_entries(self.cfg.env), self.cfg.env.heldout_fraction)

    def episode_specs(self, entries: list[EnvEntry], groups: int, group_size: int,
                      seed_of: Any, temperature_of: Any = None) -> list[EpisodeSpec]:
        """``groups`` groups split between ``entries`` by share; group g uses seed ``seed_of(g)``
        resolved into the training part of its env's problem split."""
        names = assign(groups, entries)
        temp = temperature_of or (lambda g: 1.0)
        seeds = [self.split.resolve(names[g], seed_of(g), TRAIN) for g in range(groups)]
        return [EpisodeSpec(seeds[g], g, names[g], temp(g))
                for g in range(groups) for _ in range(group_size)]

    def _plan(self, step: int) -> tuple[list[EpisodeSpec], list[int], dict[int, int] | None]:
        """The step's episode specs, the workers' sampling seeds and (tiered SNR filtering,
        which draws the groups' prompts from its pool) each group's pool key, else None."""
        r = self.cfg.rollout
        drawn = self.filter.prompts(step, allocate(r.env_groups, [e.share for e in self.train_envs]))
        if drawn is None:
            group_keys = None
            specs = self.episode_specs(self.train_envs, r.env_groups, r.group_size,
                                       lambda g: seeding.group_seed(self.cfg.seed, step, g))
        else:
            keys, temps = drawn
            group_keys = dict(enumerate(keys))
            specs = self.episode_specs(self.train_envs, r.env_groups, r.group_size,
                                       lambda g: seeding.pool_seed(self.cfg.seed, keys[g]),
                                       lambda g: temps[g])
        n = len(self.workers)
        return specs, [seeding.sampling_seed(self.cfg.seed, step, i) for i in range(n)], group_keys

    def collect(self, step: int) -> tuple[list[Trajectory], dict[str, float]]:
        """The step's episodes, generated now by the current policy (sets ``group_keys``)."""
        specs, seeds, self.group_keys = self._plan(step)
        return self._gather("rollout", specs, seeds, [self.version] * len(self.workers))

    # ------------------------------------------------------- bounded staleness
    def ready_batch(self, step: int) -> tuple[Rollouts, dict[str, float]]:
        """Step ``step``'s batch under ``trainer.max_staleness`` >= 1: the queued one, else
        (step 1, after a rollback, a resume without it) generated now by the current policy.

        A queued batch older than the bound is refused (never trained on): logged, counted in
        ``async/stale_refused``, and the step's batch generated now instead.
        """
        refused = 0
        try:
            ready = self.queue.pop(step, self.version)
        except StaleRolloutsError as e:
            refused = len(e.rollouts.trajs)
            log.warning("%s: refused, never trained on; step %d's batch is generated by the "
                        "current policy (version %d) instead", e, step, self.version)
            ready = None
        if ready is None:
            t0 = time.perf_counter()
            trajs, stats = self.collect(step)
            ready = Rollouts(step, self.version, trajs, stats, self.group_keys,
                             time.perf_counter() - t0)
        return ready, {"async/stale_refused": float(refused)}

    def launch_ahead(self, step: int) -> list[Launched]:
        """Start generating the batches the engines' policy (version ``self.version``) owes
        (:func:`ragen2.rollout.schedule.launch_steps`) without waiting; each as an empty
        :class:`Rollouts` (its step, version and group keys), its calls and its launch time."""
        tr = self.cfg.trainer
        out = []
        for t in launch_steps(step, tr.max_staleness, tr.total_steps, self.queue):
            specs, seeds, keys = self._plan(t)
            pending = self.pool.start("rollout", specs, seeds, [self.version] * len(self.workers))
            out.append((Rollouts(t, self.version, [], {}, keys), pending, time.perf_counter()))
        return out

    def finish_ahead(self, launched: list[Launched],
                     update: tuple[float, float] | None) -> dict[str, float]:
        """Wait for :meth:`launch_ahead`'s batches and queue them, each trajectory's version
        checked; ``timing/overlap_s`` (the seconds they were generated while the update
        ``update`` = (start, end) ran; None: no update), ``timing/rollout_wait_s`` (the wait here)
        and ``async/queued``."""
        t0 = time.perf_counter()
        generation_s = 0.0  # the workers run the launched batches one after another
        for r, pending, launch in launched:
            r.trajs, r.stats = self.pool.finish(pending)
            r.wall_s = time.perf_counter() - launch
            wrong = sorted({t.policy_version for t in r.trajs} - {r.version})
            if wrong:
                raise RuntimeError(f"step {r.step}'s batch was launched at policy version "
                                   f"{r.version} but holds trajectories of version(s) {wrong}")
            generation_s += r.stats.get("wall_s", r.wall_s)
            self.queue.put(r)
        wait = time.perf_counter() - t0
        overlap = 0.0
        if launched and update is not None:
            first = min(launch for _, _, launch in launched)
            overlap = overlap_seconds(update[0], update[1], first, generation_s)
        return {"timing/overlap_s": overlap, "timing/rollout_wait_s": wait,
                "async/queued": float(len(self.queue))}

    def evaluate(self, step: int) -> Evaluation:
        """Held-out success and ``eval/*`` over ``trainer.eval_episodes`` episodes on held-out
        problems (:meth:`ragen2.rollout.split.ProblemSplit.eval_specs`); a few are written to
        ``samples/eval_step_XXXXXX.jsonl`` and every episode's outcome to
        ``evaluations/step_XXXXXX.jsonl`` (:func:`ragen2.rollout.archive.save_outcomes`)."""
        t0 = time.perf_counter()
        specs = self.split.eval_specs(self.eval_envs, self.cfg.trainer.eval_episodes)
        n = len(self.workers)
        trajs, _ = self._gather("rollout", specs, [seeding.eval_sampling_seed(i) for i in range(n)],
                                [self.version] * n, [True] * n)
        check_env_errors(trajs, self.cfg.rollout.max_env_error_frac, f"evaluation at step {step}")
        out = rollout_metrics(trajs, "eval", per_env=len(self.eval_envs) > 1)
        out["timing/eval_s"] = time.perf_counter() - t0
        samples = self.run_dir / "samples"
        samples.mkdir(exist_ok=True)
        with open(samples / f"eval_step_{step:06d}.jsonl", "w") as f:
            for t in _spread(trajs, self.cfg.trainer.log_samples):
                f.write(json.dumps(t.as_text_record()) + "\n")
        save_outcomes(self.run_dir / "evaluations" / f"step_{step:06d}.jsonl", trajs)
        return Evaluation(success_rate(trajs), out)

    def _checksum_names(self) -> list[str]:
        """The exported tensors whose checksums every sync compares (ragen2.sync.checksum)."""
        from ragen2.sync.checksum import checksum_names, export_names

        return checksum_names(self.learners.run(export_names)[0])

    def verify_sync(self, workers: list[Any]) -> dict[str, float]:
        """The exact staleness check after a push (``sync.checksum``); {} when off."""
        if not self.checksum_names:
            return {}
        from ragen2.sync.checksum import verify_checksums

        return verify_checksums(self.learners, workers, self.checksum_names, self.version)

    def push_weights(self) -> dict[str, float]:
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

        self._synced = True
        attempt = 0
        while True:
            try:
                t0 = time.perf_counter()
                sleeping = self.cfg.engine.sleep_mode
                if sleeping:  # the update's cached blocks go back first
                    self.learners.release_cuda_cache()
                    self.pool.call_all("wake_up", ["weights"])
                m = self.sync.push(self.version)
                if sleeping:
                    self.pool.call_all("wake_up", ["kv_cache"])
                m["timing/sync_s"] = time.perf_counter() - t0
                m.update(self.verify_sync(self.workers))
                if self.probe is not None:
                    t1 = time.perf_counter()
                    m.update(run_probe(self.learners, self.workers, self.probe, self.probe_policy,
                                       self.version))
                    m["timing/probe_s"] = time.perf_counter() - t1
                return m
            except RayActorError:
                attempt += 1
                if attempt > self.pool.max_restarts or not self.pool.revive():
                    raise  # out of restarts, or the actor that died is no rollout worker

    # ------------------------------------------------------------- probe panel
    def _make_panel(self) -> Any:
        """The fixed probe panel over the training envs (split by share), or None (logged) when
        the envs have fewer than 2 distinct first observations."""
        from ragen2.collapse.panel import ProbePanel, choose_panel
        from ragen2.rollout.envs import make_env
        from ragen2.rollout.runner import _as_text

        m, entries = self.cfg.monitor, {e.name: e for e in self.train_envs}
        envs: dict[str, Any] = {}

        def observe(name: str, seed: int) -> str:
            if name not in envs:
                envs[name] = make_env(entries[name].id, entries[name].kwargs)
            return _as_text(envs[name].reset(seed=seed)[0])

        counts = allocate(m.panel_size, [e.share for e in self.train_envs])
        prompts = choose_panel([(e.name, c) for e, c in zip(self.train_envs, counts)], observe,
                               seed_of=self._panel_seed)
        for env in envs.values():
            env.close()
        if len(prompts) < 2:
            log.warning("probe panel off: the training envs gave %d distinct first observations",
                        len(prompts))
            return None
        return ProbePanel(prompts, m.panel_samples, m.panel_bootstrap, m.panel_permutations,
                          self.cfg.seed, m.action_mi, min_samples=m.min_samples)

    def _panel_seed(self, name: str, index: int) -> int:
        """Panel seed ``index`` of env ``name``, resolved into its held-out problems."""
        return self.split.resolve(name, seeding.panel_seed(index), HELDOUT)

    def _make_turn_panel(self) -> Any:
        """The later-turn panel (fixed mid-episode states, :mod:`ragen2.collapse.panel_turns`),
        or None when it is off or the training envs give fewer than 2 such prompts."""
        from ragen2.collapse.panel_turns import TurnPanel, choose_turn_panel, script_opening
        from ragen2.rollout.envs import make_env

        m, entries = self.cfg.monitor, {e.name: e for e in self.train_envs}
        k = m.panel_prefix_turns
        if not (m.name == "mi" and m.panel_size and k and self.cfg.rollout.max_turns > k):
            return None
        envs: dict[str, Any] = {}

        def env_of(name: str) -> Any:
            if name not in envs:
                envs[name] = make_env(entries[name].id, entries[name].kwargs)
            return envs[name]

        def play(name: str, seed: int) -> Any:
            return script_opening(env_of(name), seed, k, m.panel_prefix_random)

        counts = allocate(m.panel_size, [e.share for e in self.train_envs])
        prompts = choose_turn_panel([(e.name, c) for e, c in zip(self.train_envs, counts)], play,
                                    seed_of=self._panel_seed)
        siblings: list[Any] = []
        if m.panel_contrast and len(prompts) >= 2:  # the contrast sets (collapse/contrast.py)
            from ragen2.collapse.panel_turns import contrast_siblings

            prompts, siblings = contrast_siblings(prompts, env_of, k, m.panel_prefix_random,
                                                  m.panel_contrast)
            log.info("later-turn probe panel: %d contrast sets, %d sibling states",
                     len({q.base for q in siblings}), len(siblings))
        for env in envs.values():
            env.close()
        if len(prompts) < 2:
            log.info("later-turn probe panel off: the training envs gave %d mid-episode states "
                     "after %d scripted turns", len(prompts), k)
            return None
        return TurnPanel(prompts, m.panel_samples, m.panel_bootstrap, m.panel_permutations,
                         self.cfg.seed, min_samples=m.min_samples, siblings=siblings)

    def panel_due(self, step: int) -> bool:
        every = self.cfg.monitor.every
        return ((self.panel is not None or self.turn_panel is not None)
                and (step == 0 or (every > 0 and step % every == 0)))

    def measure_panel(self, step: int) -> tuple[PanelMeasurement | None, dict[str, float]]:
        """(the alert instrument's measurement, None when its panel is off; the metrics).

        ``collapse/panel/*``: fresh first turns of the current policy on the panel, scored by
        the learner; the samples go to ``panel/step_XXXXXX.jsonl``. ``collapse/panel/turns/*``:
        the same at the later-turn panel's fixed mid-episode states (``panel/turns/``)."""
        from ragen2.collapse.instrument import alert_measurement
        from ragen2.collapse.panel import write_records

        n = len(self.workers)
        m: dict[str, float] = {}
        first = later = None
        if self.panel is not None:
            t0 = time.perf_counter()
            trajs, _ = self._gather("rollout", self.panel.specs(),
                                    [seeding.panel_sampling_seed(self.cfg.seed, step, i) for i in range(n)],
                                    [self.version] * n, [False] * n, [1] * n)
            first = self.panel.measure(trajs, self.learners.score, step)
            m.update(first.metrics)
            write_records(self.run_dir, step, self.panel.records(trajs, step, self.eos_text))
            m["timing/panel_s"] = time.perf_counter() - t0
        if self.turn_panel is not None:
            t0 = time.perf_counter()
            tp = self.turn_panel
            trajs, _ = self._gather(
                "rollout", tp.specs(),
                [seeding.panel_turn_sampling_seed(self.cfg.seed, step, i) for i in range(n)],
                [self.version] * n, [False] * n, [tp.turn + 1] * n, [tp.prefixes()] * n)
            later = tp.measure(trajs, self.learners.score, step)
            m.update(later.metrics)
            write_records(self.run_dir, step, tp.records(trajs, step, self.eos_text),
                          folder="panel/turns")
            self.health.panel_turns = later.metrics
            m["timing/panel_turns_s"] = time.perf_counter() - t0
        measured = alert_measurement(self.instrument, first, later)
        if measured is not None and measured.healthy is not None:
            self.panel_verdict = PanelVerdict(step, measured.healthy)
        return measured, m

    def record_eval(self, step: int, success: float) -> None:
        """A held-out evaluation, for the collapse alert's stall test."""
        self.alert.observe_eval(step, success)

    def check_collapse(self, step: int, measured: PanelMeasurement | None) -> CollapseCheck:
        """Feed this step's measurement of the alert's instrument (None: none at this step) to
        the alert; on an alert act as ``monitor.on_collapse`` says (``stop``: a stop reason;
        ``rollback``: the learner goes back to the newest healthy checkpoint)."""
        if measured is None:  # no panel measurement of the instrument at this step
            return CollapseCheck()
        evidence = self.alert.observe_panel(step, measured.mi_lo, measured.mi_floor)
        if evidence is None:
            return CollapseCheck(measured=True)
        mon = self.cfg.monitor
        log.warning("collapse alert at step %d: %s", step, evidence)
        if mon.on_collapse == "stop":
            return CollapseCheck(True, evidence, stop_reason=f"collapse alert: {evidence}")
        rolled_back = False
        if mon.on_collapse == "rollback":
            if step >= self.cfg.trainer.total_steps:
                log.warning("no rollback at the last step (nothing is left to train)")
            elif self.rollbacks >= mon.max_rollbacks:
                log.warning("no rollback: monitor.max_rollbacks=%d reached", mon.max_rollbacks)
            elif (target := self.healthy_checkpoint()) is None:
                log.warning("no rollback: no kept checkpoint has a healthy panel MI "
                            "(raise trainer.keep_checkpoints or save more often)")
            else:
                log.warning("%s", self.rollback(target, step))
                rolled_back = True
        return CollapseCheck(True, evidence, rolled_back=rolled_back, rollbacks=self.rollbacks)

    def healthy_checkpoint(self) -> Path | None:
        """The newest checkpoint whose own weights the panel measured healthy (its MI interval
        cleared the floor at the step the checkpoint was written)."""
        for ckpt in reversed(checkpoint.complete(self.run_dir)):
            try:
                state = RunState.from_dict(checkpoint.read_state(ckpt))
                verdict = PanelVerdict.from_dict((state.controller or {}).get("panel"))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if verdict is not None and verdict.healthy and verdict.step == state.step:
                return ckpt
        return None

    def rollback(self, target: Path, step: int) -> str:
        """Restore ``target``'s learner (weights, optimiser, reference, RNG, version), push it to
        the engines and filter harder (``FilterPipeline.strengthen``). Steps keep counting on."""
        self.version = self.learners.load(str(target))
        dropped = self.queue.clear()  # generated by the weights the run leaves
        if dropped:
            log.warning("rollback: %d queued batch(es) (steps %s) dropped, never trained on; "
                        "the next steps generate theirs with the restored policy", len(dropped),
                        [r.step for r in dropped])
        self.push_weights()
        change = self.filter.strengthen(self.cfg.monitor.rollback_filter_factor)
        self.rollbacks += 1
        # the weights the run continues from are the ones the panel measured healthy
        self.panel_verdict = PanelVerdict(step, True)
        return (f"rolled back to {target.name} (policy version {self.version}) and continue "
                f"with a stronger filter: {change}")

    # ------------------------------------------------------------- warm start
    def warm_start_key(self) -> str:
        """Everything the warm-started weights depend on (the run seed is not part of it)."""
        c = self.cfg
        envs = ([c.env.id, c.env.kwargs] if not c.env.mix else
                [[e.name, e.id, e.kwargs, e.share, e.format_penalty] for e in self.train_envs])
        # the split decides which problems the demonstrations may show
        payload = {"v": 1, "model": self.model_path, "env": envs,
                   "heldout_fraction": c.env.heldout_fraction,
                   "warm_start": {k: v for k, v in asdict(c.trainer.warm_start).items() if k != "cache"},
                   "rollout": [c.rollout.max_turns, c.rollout.format_penalty, c.rollout.max_context_tokens],
                   "engine": [c.engine.max_new_tokens, list(c.engine.stop)],
                   "learner": [c.cluster.learner_world_size, c.algorithm.micro_batch_size,
                               c.algorithm.grad_clip, c.algorithm.weight_decay, c.model.dtype]}
        if c.learner.lora.rank:  # adapters are trained instead of the weights
            payload["lora"] = asdict(c.learner.lora)
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def warm_start(self) -> dict[str, float]:
        """Behaviour-clone the env's noised expert, or load the identical warm start from cache."""
        from ragen2.rollout.envs import probe_env

        ws = self.cfg.trainer.warm_start
        t0 = time.perf_counter()
        experts = [e for e in self.train_envs if probe_env(e)]  # envs with a demonstration()
        if not experts:
            # a plain Gymnasium env (no expert to clone): RL starts from the model as it is
            log.warning("warm start skipped: no training env (%s) has a demonstration() hook to "
                        "clone. A pretrained model needs none; the tiny model starts untrained and "
                        "mostly writes unparsable replies at first (add a demonstration() hook, "
                        "docs/tutorials/add-an-environment.md; trainer.warm_start.enabled=false silences "
                        "this)", ", ".join(e.id for e in self.train_envs))
            self.learners.finish_warm_start()
            return {"warm_start/skipped": 1.0, "timing/warm_start_s": time.perf_counter() - t0}
        cache = Path(self.cfg.model.cache_dir or default_cache_root()) / "warm_start" / self.warm_start_key()
        if ws.cache and (cache / "metrics.json").exists():
            self.learners.load_policy(str(cache / "policy.pt"))
            m = json.loads((cache / "metrics.json").read_text())
            m["warm_start/cached"] = 1.0
            log.info("warm start loaded from cache %s", cache)
        else:
            m = self._behaviour_clone(experts)
            if ws.cache:
                cache.mkdir(parents=True, exist_ok=True)
                self.learners.save_policy(str(cache / "policy.pt"))
                checkpoint.write_json_atomic(cache / "metrics.json", m)  # written last: complete
            m["warm_start/cached"] = 0.0
        self.learners.finish_warm_start()
        return {**m, "timing/warm_start_s": time.perf_counter() - t0}

    def _behaviour_clone(self, experts: list[EnvEntry]) -> dict[str, float]:
        """Demonstrations of the ``experts`` (train envs with a demonstration() hook), then SFT."""
        import ray
        from tqdm.auto import tqdm

        ws = self.cfg.trainer.warm_start
        specs = self.episode_specs(experts, ws.episodes, 1, lambda i: seeding.demo_seed(ws.seed, i))
        n = len(self.workers)
        trajs, _ = self._gather("demonstrate", specs, [ws.random_action_prob] * n,
                                [ws.seed * 7919 + i for i in range(n)])
        check_env_errors(trajs, 0.0, "warm-start demonstrations")
        demo = rollout_metrics(trajs, "warm_start/demo")
        batch_ref = ray.put(collate(trajs, self.pad_id))
        rng = np.random.default_rng(ws.seed)
        steps_per_epoch = -(-len(trajs) // ws.batch_size)
        m: dict[str, float] = {}
        skipped = in_row = 0  # warm-start steps skipped for a nan/inf loss or gradient
        with tqdm(total=ws.epochs * steps_per_epoch, desc="warm start", unit="step",
                  dynamic_ncols=True) as bar:
            for _ in range(ws.epochs):
                perm = rng.permutation(len(trajs))
                for i in range(steps_per_epoch):
                    rows = np.sort(perm[i * ws.batch_size:(i + 1) * ws.batch_size])
                    m = self.learners.sft_step(batch_ref, rows, ws.lr)
                    outcome = sft_outcome(m)
                    skipped += float(outcome.nonfinite_skipped)
                    in_row = count_nonfinite(
                        in_row, outcome.nonfinite_skipped > 0,
                        self.cfg.trainer.max_nonfinite_steps, f"warm-start step {bar.n + 1}",
                        "warm_start/nonfinite_skipped",
                        "lower trainer.warm_start.lr, set a smaller algorithm.grad_clip, or train in "
                        "model.dtype=float32")
                    bar.set_postfix(loss=f"{m['warm_start/loss']:.3f}",
                                    acc=f"{m['warm_start/token_acc']:.3f}", refresh=False)
                    bar.update()
        return {**m, "warm_start/nonfinite_skipped": skipped,
                "warm_start/demo_success": demo["warm_start/demo/success"]}

    # ------------------------------------------------------------------ a step
    def train_step(self, step: int) -> StepResult:
        """One RL step: collect, monitor, filter, update, push the weights. Its ``update`` is None
        when the filter kept no group (nothing was trained)."""
        import ray

        t0 = time.perf_counter()
        lag = self.cfg.trainer.max_staleness
        launched: list[Launched] = []
        if lag:  # bounded staleness: the batch generated ahead, and the next ones started now
            ready, async_metrics = self.ready_batch(step)
            trajs, stats, self.group_keys = ready.trajs, ready.stats, ready.group_keys
            launched = self.launch_ahead(step)
        else:
            trajs, stats = self.collect(step)
        t_roll = time.perf_counter() - t0
        check_env_errors(trajs, self.cfg.rollout.max_env_error_frac, f"step {step}")
        metrics = rollout_metrics(trajs, "rollout", per_env=len(self.train_envs) > 1)
        metrics["rollout/worker_restarts"] = stats["worker_restarts"]
        self.health.train_success = (self.health.train_success + [success_rate(trajs)])[-5:]
        trajs = [t for t in trajs if t.env_error is None]  # counted above, never trained on
        if self.cfg.monitor.name == "mi":  # every step: the envs' ground hooks cost nothing
            from ragen2.collapse.grounding import batch_grounding

            mon = self.cfg.monitor
            metrics.update(batch_grounding(trajs, step, min_samples=mon.min_samples,
                                           resamples=mon.panel_bootstrap, seed=self.cfg.seed))
        if self.monitor is not None and self.monitor.due(step):  # on the unfiltered batch
            t1 = time.perf_counter()
            collapse = self.monitor.measure(trajs, self.learners.score, step)
            metrics.update(collapse.metrics)
            metrics["timing/monitor_s"] = time.perf_counter() - t1
            if collapse.metrics:
                self.health.collapse = collapse.metrics
            if self.health.entropy_ref is None:  # the policy's entropy when RL starts
                self.health.entropy_ref = collapse.token_entropy
        selection = self.filter.select(trajs, step, self.group_keys)
        keep = selection.kept
        metrics.update(selection.metrics)
        c = self.cfg
        if c.trainer.save_rollouts_every and step % c.trainer.save_rollouts_every == 0:
            save_rollouts(self.run_dir, step, trajs, keep, c.trainer.save_rollouts_max_mb, self.eos_text)
        kept = [t for t in trajs if t.group_id in keep]
        if lag:
            metrics.update(async_metrics)
            metrics.update(staleness_metrics(trajs, self.version))
        if not kept:
            if lag:  # nothing trained: the engines still hold the learner's version
                metrics.update(self.finish_ahead(launched, None))
            return StepResult(metrics, None, selection.reward_spread)
        if c.monitor.grad_snr_every and step % c.monitor.grad_snr_every == 0:
            metrics.update(self.grad_snr(trajs))
        n_groups = len({t.group_id for t in trajs})
        weights = self.filter.sample_weights(kept, self.group_keys)
        batch = replace(collate(kept, self.pad_id), sample_weights=weights,
                        regulariser_weights=self.filter.regulariser_weights(weights),
                        loss_scale=self.filter.loss_scale(len(keep) / max(n_groups, 1)))
        t1 = time.perf_counter()
        if c.engine.sleep_mode:  # colocated GPUs: the engines give their memory to the update
            self.pool.call_all("sleep")
        self._behind = bool(lag)  # from here until the push (a worker restart cannot re-sync)
        learned = self.learners.update(ray.put(batch), step)
        update = update_outcome(learned)
        metrics.update(learned)
        t_upd = time.perf_counter() - t1
        if lag:  # the next batches finish on the old weights, then the push (between episodes)
            ahead = self.finish_ahead(launched, (t1, t1 + t_upd))
            metrics.update(ahead)
            t_roll += ahead["timing/rollout_wait_s"]
        self.version += 1
        self._behind = False
        metrics.update(self.push_weights())
        metrics.update({"timing/rollout_s": t_roll, "timing/env_s": stats.get("env_s", 0.0),
                        "timing/generate_s": stats.get("generate_s", 0.0),
                        "timing/update_s": t_upd, "timing/step_s": time.perf_counter() - t0})
        return StepResult(metrics, update, selection.reward_spread)

    def grad_snr(self, trajs: list[Trajectory]) -> dict[str, float]:
        """Gradient norms of the task / entropy / KL terms per reward-spread bucket (bucket 0:
        the groups without spread; then by rank, :func:`ragen2.collapse.grad_snr.spread_buckets`)."""
        import ray

        from ragen2.collapse.grad_snr import spread_buckets

        batch = GroupBatch.from_group_rewards(group_rewards(trajs))
        stds = reward_std(batch).numpy()  # σ_g as the filter computes it
        buckets = spread_buckets(stds, self.cfg.monitor.grad_snr_buckets)
        bucket_of = dict(zip(batch.groups, buckets.tolist()))
        rows = np.array([bucket_of[t.group_id] for t in trajs])
        out = self.learners.grad_snr(ray.put(collate(trajs, self.pad_id)), rows)
        for b in sorted(set(rows.tolist())):
            out[f"grad_snr/b{b}/reward_std"] = float(stds[buckets == b].mean())
        return out

    def diagnose(self, eval_success: float) -> dict[str, Any]:
        """Classify the run at an evaluation; printed when the label changes."""
        from ragen2.collapse.diagnosis import DIAGNOSIS_CODES, diagnose
        from ragen2.collapse.instrument import diagnosis_inputs

        h = self.health
        source = h.collapse if self.instrument == "first_turn" else h.panel_turns
        d = diagnose(**diagnosis_inputs(self.instrument, source),
                     token_entropy=h.collapse.get("collapse/token_entropy"),
                     entropy_ref=h.entropy_ref,
                     train_success=float(np.mean(h.train_success)) if h.train_success else None,
                     eval_success=eval_success)
        if d.label != h.label:
            log.info("diagnosis: %s: %s", d.label, d.evidence)
            h.label = d.label
        return {"collapse/diagnosis": float(DIAGNOSIS_CODES[d.label])}

    # ------------------------------------------------------------ checkpoints
    def save(self, step: int, state: RunState) -> Path:
        """Write the checkpoint of ``step`` atomically (see :mod:`ragen2.learner.checkpoint`).

        On any failure the temporary directory is removed (as far as the disk allows); a write
        error (disk full, read-only, ...) here or on a learner rank becomes
        :class:`checkpoint.CheckpointWriteError`. The previous checkpoint and ``latest.json`` stay.
        """
        tmp = None
        try:
            tmp = checkpoint.begin(self.run_dir, step)
            self.learners.save(str(tmp))
            self.queue.save(tmp)  # bounded staleness: the batches generated ahead (none at k = 0)
            final = checkpoint.commit(
                tmp, step, replace(state, step=step, policy_version=self.version).to_dict())
        except BaseException as e:
            if tmp is not None:
                checkpoint.discard(tmp)
            if not isinstance(e, OSError):  # (a rank's OSError comes back from Ray as one too)
                raise
            prev = checkpoint.latest(self.run_dir)
            raise checkpoint.CheckpointWriteError(
                f"writing the step {step} checkpoint into {checkpoint.checkpoint_root(self.run_dir)} "
                f"failed: {getattr(e, 'cause', e)}; " +
                (f"the previous checkpoint {prev.name} is intact: free space (or fix permissions) "
                 "and rerun with trainer.resume=true" if prev else "there is no earlier checkpoint")
            ) from e
        protect = []
        if self.cfg.monitor.on_collapse == "rollback" and (h := self.healthy_checkpoint()):
            protect.append(h)  # the rollback target outlives keep_checkpoints
        checkpoint.prune(self.run_dir, self.cfg.trainer.keep_checkpoints, protect)
        return final

    def state_dict(self) -> dict[str, Any]:
        """Filter history, monitor EMA, run-health inputs and the collapse alert's state: JSON,
        saved with each checkpoint (``panel`` marks a rollback target). With bounded staleness
        also ``rollout_queue``: the steps and versions of the batches generated ahead, whose
        trajectories :meth:`save` writes beside it (:meth:`load_queue` reads them back)."""
        state = {"filter": self.filter.state_dict(),
                 "monitor": self.monitor.state_dict() if self.monitor is not None else None,
                 "health": self.health.to_dict(),
                 "panel": self.panel_verdict.to_dict() if self.panel_verdict else None,
                 "alert": self.alert.state_dict(), "rollbacks": self.rollbacks,
                 "probe_floor": self.probe_policy.floor}
        if self.cfg.trainer.max_staleness:
            state["rollout_queue"] = self.queue.state_dict()
        return state

    def load_queue(self, ckpt: Path, state: dict[str, Any] | None) -> None:
        """The batches generated ahead that checkpoint ``ckpt`` holds (``state``: its controller
        state). A checkpoint without them (k = 0 then, or before RL) leaves the queue empty: the
        steps generate theirs with the current policy."""
        if self.cfg.trainer.max_staleness:
            self.queue.load(ckpt, (state or {}).get("rollout_queue"))
            if len(self.queue):
                log.info("resumed %d batch(es) generated ahead: steps %s", len(self.queue),
                         self.queue.steps())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.filter.load_state_dict(state["filter"])
        if self.monitor is not None and state.get("monitor") is not None:
            self.monitor.load_state_dict(state["monitor"])
        self.health = Health.from_dict(state["health"])
        self.panel_verdict = PanelVerdict.from_dict(state.get("panel"))
        if state.get("alert") is not None:
            self.alert.load_state_dict(state["alert"])
        self.rollbacks = int(state.get("rollbacks", 0))
        # older checkpoints: the first push after the resume measures the floor again
        self.probe_policy.floor = state.get("probe_floor")

    def shutdown(self) -> None:
        self.learners.shutdown()
        self.pool.shutdown()
        self.placement.remove()


def update_outcome(metrics: Mapping[str, float]) -> UpdateOutcome:
    """What ``LearnerGroup.update`` did, from the metrics it returns: the one place the loop
    reads the learner's metric names (goes once the learner returns a typed outcome)."""
    return UpdateOutcome(optimizer_steps=int(metrics["actor/optimizer_steps"]),
                         nonfinite_skipped=int(metrics["actor/nonfinite_skipped"]))


def sft_outcome(metrics: Mapping[str, float]) -> UpdateOutcome:
    """What one ``LearnerGroup.sft_step`` did (one optimiser step, or none when skipped)."""
    skipped = int(metrics["warm_start/nonfinite_skipped"])
    return UpdateOutcome(optimizer_steps=1 - skipped, nonfinite_skipped=skipped)


NONFINITE_ADVICE = ("lower algorithm.lr, set a smaller algorithm.grad_clip, check the env's rewards "
                    "for nan/inf (rollout/reward_mean), or train in model.dtype=float32")


def count_nonfinite(in_row: int, skipped: bool, limit: int, where: str, key: str,
                    advice: str = NONFINITE_ADVICE) -> int:
    """Consecutive updates skipped whole for a non-finite loss or gradient norm, this one included.

    ``skipped``: this update applied no optimiser step (``key`` counts the skipped ones). Raises
    :class:`TrainingStopped` when the count reaches ``limit`` (``trainer.max_nonfinite_steps``).
    """
    in_row = in_row + 1 if skipped else 0
    if in_row >= limit:
        raise TrainingStopped(
            f"{where}: {in_row} consecutive updates skipped for a non-finite (nan/inf) loss or "
            f"gradient norm ({key}; trainer.max_nonfinite_steps={limit}), weights and optimizer "
            f"left as they were and not checkpointed: {advice}")
    return in_row


def preempted_message(signal_name: str, step: int, run_dir: Path) -> str:
    ckpt = checkpoint.latest(run_dir)
    return (f"{signal_name}: stopped after step {step}; latest checkpoint "
            f"{ckpt.name if ckpt else 'none'}. Resume: the same command with "
            f"hydra.run.dir={run_dir} trainer.resume=true")


def run(cfg: Config, run_dir: Path, model_path: str) -> dict[str, Any]:
    """Train according to ``cfg`` in ``run_dir``; returns the summary also written to summary.json.

    Before RL (:func:`_before_rl`), or from the newest checkpoint (:func:`_resume`), the policy is
    pushed to the engines; then every step trains (:meth:`Controller.train_step`), counts the
    steps that trained nothing (:func:`_count_skips`), folds in the early stops, measures the
    panel, evaluates where due (:func:`_evaluate`), feeds the collapse alert, logs its row and
    writes the checkpoint that is due (:func:`_checkpoint`). Every decision reads the typed
    state and outcomes of :mod:`ragen2.run_state`.
    """
    t_start = time.perf_counter()
    tr = cfg.trainer
    from ragen2.budget import warn_budget

    warn_budget(cfg)  # settings too slow to act within trainer.total_steps (logged, not refused)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint.latest(run_dir) if tr.resume else None
    if tr.resume and ckpt is None:
        log.warning("trainer.resume=true but %s has no checkpoint: starting from scratch", run_dir)
    state = RunState.from_dict(checkpoint.read_state(ckpt)) if ckpt else RunState()
    start = state.step

    ctl = Controller(cfg, run_dir, model_path)
    logger = MetricsLogger(tr.loggers, run_dir, resume_step=start if ckpt else -1,
                           total_steps=tr.total_steps, start_step=start,
                           project=tr.wandb_project, config=asdict(cfg))
    # SIGUSR1 / SIGTERM (a SLURM time limit, preemption): finish the step, checkpoint, stop
    stop_signal = StopSignal().__enter__()
    try:
        if ckpt:
            _resume(ctl, ckpt, state)
        else:
            state = _before_rl(ctl, logger)

        save_pending = False
        stopper = EarlyStop(**asdict(tr.early_stop))
        stopper.load_state_dict(state.early_stop or {})
        stop_reason, last_step = None, start
        for step in range(start + 1, tr.total_steps + 1):
            if stop_signal.received:  # arrived before the first step: nothing new to save
                raise stop_signal.preempted(preempted_message(stop_signal.name, step - 1, run_dir))
            last_step = step
            result = ctl.train_step(step)
            m = result.metrics
            _count_skips(cfg, state, step, result, logger)
            if result.reward_spread is not None:
                stop_reason = stopper.step(result.reward_spread)
            measured = None  # the alert instrument's panel measurement at this step
            if ctl.panel_due(step):
                measured, panel_metrics = ctl.measure_panel(step)
                m.update(panel_metrics)
            stop_reason = _evaluate(ctl, state, stopper, step, m, stop_reason)
            collapse = ctl.check_collapse(step, measured)  # may roll the learner back
            m.update(collapse.metrics())
            stop_reason = stop_reason or collapse.stop_reason
            save_pending |= collapse.rolled_back  # resume must see the rollback
            if stop_reason:
                m["trainer/early_stop"] = 1.0
            state.early_stop = stopper.state_dict()
            logger.log(step, m)
            save_pending |= (step == tr.total_steps or stop_reason is not None
                             or stop_signal.received is not None
                             or bool(tr.save_every and step % tr.save_every == 0))
            save_pending = _checkpoint(ctl, state, step, result, save_pending)
            if stop_reason:
                log.info("early stop at step %d: %s", step, stop_reason)
                break
            if stop_signal.received and step < tr.total_steps:
                raise stop_signal.preempted(preempted_message(stop_signal.name, step, run_dir))
        if save_pending:
            log.warning("no checkpoint after step %d: its update skipped optimizer steps for a "
                        "non-finite loss or gradient (latest checkpoint: %s)", last_step,
                        checkpoint.latest(run_dir))
        summary = {"eval_before": state.eval_before, "eval_after": state.eval_last,
                   "steps": last_step if stop_reason else tr.total_steps, "seed": cfg.seed,
                   "wall_s": time.perf_counter() - t_start, "early_stop": stop_reason}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        if summary["eval_after"] is not None:
            log.info("held-out success before RL: %.3f  after RL: %.3f  (%d episodes, seed %d)",
                     summary["eval_before"], summary["eval_after"], tr.eval_episodes, cfg.seed)
        return summary
    finally:
        stop_signal.__exit__()
        logger.close()
        ctl.shutdown()


def _resume(ctl: Controller, ckpt: Path, state: RunState) -> None:
    """Load the checkpoint's learner and controller state, then push the policy to the engines."""
    ctl.version = ctl.learners.load(str(ckpt))
    if ctl.version != state.policy_version:
        raise RuntimeError(f"{ckpt}: learner version {ctl.version} != trainer state "
                           f"{state.policy_version}")
    if state.controller is not None:
        ctl.load_state_dict(state.controller)
    ctl.load_queue(ckpt, state.controller)
    ctl.push_weights()
    log.info("resumed from %s (step %d)", ckpt, state.step)


def _before_rl(ctl: Controller, logger: MetricsLogger) -> RunState:
    """Step 0: the warm start, the first push, held-out success before RL and the panel (whose
    measurement makes the warm start a rollback target); returns the fresh run state."""
    cfg = ctl.cfg
    tr = cfg.trainer
    row: dict[str, float] = {}
    if tr.warm_start.enabled:
        row.update(ctl.warm_start())
    row.update(ctl.push_weights())
    before = ctl.evaluate(0)
    row.update(before.metrics)
    ctl.record_eval(0, before.success)
    state = RunState(eval_before=before.success)
    log.info("held-out success before RL: %.3f (%d episodes)", before.success, tr.eval_episodes)
    if ctl.panel_due(0):
        measured, panel_metrics = ctl.measure_panel(0)
        row.update(panel_metrics)
        row.update(ctl.check_collapse(0, measured).metrics())
        if cfg.monitor.on_collapse == "rollback":  # the warm start: a rollback target
            state.controller = ctl.state_dict()
            ctl.save(0, state)
    logger.log(0, row)
    return state


def _count_skips(cfg: Config, state: RunState, step: int, result: StepResult,
                 logger: MetricsLogger) -> None:
    """Count the step's update that applied no optimiser step (nan/inf) and the step whose filter
    kept no group; :class:`TrainingStopped` (the step logged first) when either happened too many
    times in a row. Adds ``filter/skipped_steps`` to the step's metrics."""
    tr, m = cfg.trainer, result.metrics
    if result.update is not None:  # the learner skips a mini-batch whose loss or gradient is nan/inf
        try:
            state.nonfinite_in_row = count_nonfinite(
                state.nonfinite_in_row, result.update.optimizer_steps == 0,
                tr.max_nonfinite_steps, f"step {step}", "actor/nonfinite_skipped")
        except TrainingStopped:
            logger.log(step, m)
            raise
    state.skipped_in_row = 0 if result.trained else state.skipped_in_row + 1
    state.skipped_total += 0 if result.trained else 1
    m["filter/skipped_steps"] = state.skipped_total
    if state.skipped_in_row >= tr.max_skipped_steps:
        logger.log(step, m)
        raise TrainingStopped(
            f"{state.skipped_in_row} consecutive steps kept no group after filtering "
            f"(filter.strategy={cfg.filter.strategy}, filter.value={cfg.filter.value}, "
            f"trainer.max_skipped_steps={tr.max_skipped_steps}): loosen the filter "
            "(a higher filter.value, filter.include_zero=true) or raise rollout.group_size")


def _evaluate(ctl: Controller, state: RunState, stopper: EarlyStop, step: int,
              m: dict[str, float], stop_reason: str | None) -> str | None:
    """The held-out evaluation where it is scheduled or the run stops early (a run that stops
    early is measured where it ended), with the diagnosis; adds both to ``m``. Returns the stop
    reason, the success floor's (``trainer.early_stop.eval_floor``) included."""
    tr = ctl.cfg.trainer
    scheduled = step == tr.total_steps or bool(tr.eval_every and step % tr.eval_every == 0)
    if not (scheduled or stop_reason):
        return stop_reason
    ev = ctl.evaluate(step)
    m.update(ev.metrics)
    log.info("step %d: held-out success %.3f (%d episodes)", step, ev.success, tr.eval_episodes)
    m.update(ctl.diagnose(ev.success))
    if tr.eval_every and step % tr.eval_every == 0:  # the periodic ones only: an
        ctl.record_eval(step, ev.success)  # end-of-segment one would break resume
    state.eval_last = ev.success
    if scheduled:
        stop_reason = stop_reason or stopper.evaluation(ev.success)
    return stop_reason


def _checkpoint(ctl: Controller, state: RunState, step: int, result: StepResult,
                pending: bool) -> bool:
    """Write the pending checkpoint after ``step``, unless its update met a nan/inf (it then
    waits for a clean step); whether one is still pending."""
    if not pending:
        return False
    if result.update is not None and result.update.nonfinite_skipped > 0:
        log.warning("step %d: checkpoint postponed, %d optimizer step(s) skipped for a "
                    "non-finite loss or gradient (latest checkpoint: %s)", step,
                    result.update.nonfinite_skipped, checkpoint.latest(ctl.run_dir))
        return True
    state.controller = ctl.state_dict()
    ctl.save(step, state)
    return False
