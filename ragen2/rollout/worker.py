"""The RolloutWorker Ray actor: a generation engine plus pools of environments."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from ragen2.config import Config
from ragen2.engines.base import SamplingParams
from ragen2.rollout.runner import (DemonstrationPolicy, EngineTurnPolicy, EpisodeSpec,
                                   run_episodes)
from ragen2.rollout.trajectory import Trajectory
from ragen2.sync.base import WeightSyncError
from ragen2.sync.probe import Continuation

#: what a rollout call returns: the trajectories (in spec order) and wall-time stats
RolloutResult = tuple[list[Trajectory], dict[str, float]]


class StalePolicyError(RuntimeError):
    """The worker's weights are not the policy version the controller asked for."""


def sampling_params(cfg: Config, seed: int, evaluation: bool = False) -> SamplingParams:
    """The engine's sampling settings; held-out evaluation uses ``engine.eval_temperature`` if set."""
    e = cfg.engine
    temperature = e.eval_temperature if evaluation and e.eval_temperature is not None else e.temperature
    return SamplingParams(temperature=temperature, top_p=e.top_p,
                          max_new_tokens=e.max_new_tokens, stop=tuple(e.stop), seed=seed)


def greedy_continuation(engine: Any, ids: Sequence[int], new_tokens: int,
                        top_k: int) -> Continuation:
    """The engine's greedy continuation of ``ids`` with its top-k logprobs at every position: the
    engine's half of the post-sync probe (:mod:`ragen2.sync.probe`)."""
    params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens, stop=(), top_logprobs=top_k)
    g = engine.generate([list(ids)], params)[0]
    if g.top_logprobs is None:
        raise WeightSyncError(f"{type(engine).__name__} returned no top logprobs")
    return g.token_ids, g.top_logprobs


class RolloutWorker:
    def __init__(self, cfg: Config, model_path: str, worker_id: int, threads: int = 0,
                 cores: Sequence[int] = ()) -> None:
        """``cores``: pin this worker's process (its in-process engine included) to them
        (``cluster.layout=split`` on the CPU, :mod:`ragen2.cluster.cores`)."""
        from ragen2.cluster.cores import claim_cpu
        from ragen2.plugins import import_plugins

        claim_cpu(threads, cores)
        import_plugins(cfg.plugins)  # what they register (an env, an engine) is known here too
        from ragen2.engines import ENGINES
        from ragen2.rollout.chat import ChatRenderer
        from ragen2.rollout.envs import all_entries, format_penalties, make_env

        self.cfg, self.worker_id = cfg, worker_id
        #: what a weight-sync strategy running here keeps between its calls, by strategy
        #: (``nccl``: :class:`~ragen2.sync.nccl.WeightGroup`)
        self.sync_state: dict[str, Any] = {}
        self.engine = ENGINES.get(cfg.engine.name)(
            model_path, dtype=cfg.model.dtype, device=cfg.cluster.device,
            trust_remote_code=cfg.model.trust_remote_code, options=cfg.engine,
            seed=cfg.seed * 1000 + worker_id)
        self.renderer = ChatRenderer(self.engine.tokenizer)
        entries = {e.name: e for e in all_entries(cfg.env)}
        self.penalties = format_penalties(list(entries.values()), cfg.rollout.format_penalty)
        self.make_env = lambda name: make_env(entries[name].id, entries[name].kwargs)
        self.envs: dict[str, list] = {}
        threads = cfg.rollout.env_threads
        self.executor = ThreadPoolExecutor(threads, "env-step") if threads > 1 else None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)``: the worker-side half of a weight-sync strategy or probe."""
        return fn(self, *args)

    def sleep(self) -> None:
        """Colocated GPUs: free the engine's KV cache and weights while the learner updates."""
        getattr(self.engine, "sleep", lambda: None)()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Wake the engine's memory: ``tags`` ["weights"] before a push, ["kv_cache"] after it
        (None: everything)."""
        wake = getattr(self.engine, "wake_up", None)
        if wake is not None:
            wake(tags)

    def policy_version(self) -> int:
        return self.engine.policy_version

    def probe_continuation(self, ids: Sequence[int], new_tokens: int, top_k: int) -> Continuation:
        """The post-sync probe's worker side (:func:`greedy_continuation` of this engine)."""
        return greedy_continuation(self.engine, ids, new_tokens, top_k)

    def _run(self, specs: Sequence[EpisodeSpec], policy, max_turns: int | None = None) -> RolloutResult:
        r, stats = self.cfg.rollout, {}
        t0 = time.perf_counter()
        trajs = run_episodes(specs, self.make_env, self.renderer, policy,
                             max_turns=min(r.max_turns, max_turns or r.max_turns),
                             format_penalty=self.penalties,
                             max_context_tokens=r.max_context_tokens,
                             max_new_tokens=self.cfg.engine.max_new_tokens, envs=self.envs,
                             executor=self.executor, stats=stats,
                             actions_per_turn=r.actions_per_turn, action_sep=r.action_sep,
                             response_format=r.response_format)
        stats["wall_s"] = time.perf_counter() - t0
        return trajs, stats

    def rollout(self, specs: Sequence[EpisodeSpec], seed: int, expected_version: int,
                evaluation: bool = False, max_turns: int | None = None,
                prefixes: dict[int, list[str]] | None = None) -> RolloutResult:
        """Sample episodes with the current policy, refusing to run a stale one; ``max_turns``
        cuts them short (the probe panel needs first turns only); ``prefixes`` {group id:
        response texts} replays those first turns verbatim before the policy takes over (the
        panel's fixed mid-episode states, :class:`ragen2.rollout.scripted.ScriptedPrefixPolicy`)."""
        if self.engine.policy_version != expected_version:
            raise StalePolicyError(f"worker {self.worker_id} holds policy version "
                                   f"{self.engine.policy_version}, step expects {expected_version}")
        params = sampling_params(self.cfg, seed, evaluation)
        policy = EngineTurnPolicy(self.engine, params)
        if prefixes:
            from ragen2.rollout.scripted import ScriptedPrefixPolicy

            policy = ScriptedPrefixPolicy(policy, self.engine.tokenizer, prefixes,
                                          self.renderer.response_prefix)
        return self._run(specs, policy, max_turns)

    def demonstrate(self, specs: Sequence[EpisodeSpec], random_action_prob: float,
                    seed: int) -> RolloutResult:
        """Episodes played by the env's (noised) expert, tokenised like model turns."""
        policy = DemonstrationPolicy(self.engine.tokenizer, random_action_prob, seed)
        return self._run(specs, policy)
