"""What ragen2 and TRL's ``GRPOTrainer`` share in ``trl_grpo_smollm2.py``'s comparison: both sides'
settings read from one composed ragen2 config, TRL's ``GRPOConfig`` arguments for the same update,
and ragen2's own episode runner replayed on given replies, which renders the prompts (token for
token) and scores TRL's completions (the env's reward and format penalty).

Nothing here imports TRL or loads a model: ``tests/test_trl_grpo_settings.py`` checks it on the
tokenizer alone.
"""

# No ``from __future__ import annotations``: the tests load this file outside sys.modules, where a
# dataclass cannot resolve string annotations.
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

PRESET = "+experiment=smollm2_math"
#: ragen2's side: the preset, without what TRL has no counterpart of (trl_grpo_smollm2's docstring)
OVERRIDES = (PRESET, "monitor=none", "engine.stop=[]", "trainer.loggers=[jsonl]",
             "trainer.save_rollouts_every=0", "trainer.save_every=0")
DEFAULT_STEPS, QUICK_STEPS, DEFAULT_SEED = 30, 3, 1
DTYPES = ("auto", "float32", "bfloat16")


@dataclass(frozen=True)
class Settings:
    """What both sides use, read from ragen2's composed config (:func:`settings`)."""

    overrides: tuple[str, ...]  # ragen2's command line (Hydra overrides)
    steps: int  # RL steps on each side (one batch of problems x group_size replies each)
    seed: int
    dtype: str  # compute dtype of both sides: float32 | bfloat16
    problems: int  # rollout.env_groups
    group_size: int  # rollout.group_size (TRL num_generations)
    max_new_tokens: int
    temperature: float
    top_p: float
    eval_temperature: float
    eval_episodes: int
    lr: float
    clip_low: float
    clip_high: float
    dual_clip_c: float | None  # TRL delta
    entropy_coef: float
    ppo_mini_batches: int  # optimiser steps per batch
    micro_batch: int  # TRL rows per forward (algorithm.micro_batch_size; memory only)
    grad_clip: float
    weight_decay: float
    norm_adv_by_std: bool
    format_penalty: float
    response_format: str

    @property
    def batch(self) -> int:
        return self.problems * self.group_size

    @property
    def rows_per_update(self) -> int:
        return self.batch // self.ppo_mini_batches


def resolve_dtype(dtype: str) -> str:
    """``auto``: ragen2's own choice for the CPU (:func:`ragen2.cluster.auto.auto_dtype`)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype != "auto":
        return dtype
    from ragen2.cluster.auto import auto_dtype

    return auto_dtype("cpu")[0]


def ragen2_overrides(steps: int, seed: int, dtype: str) -> list[str]:
    """ragen2's overrides: held-out evaluation before RL and after the last step only."""
    return [*OVERRIDES, f"seed={seed}", f"trainer.total_steps={steps}",
            f"trainer.eval_every={steps}", f"model.dtype={resolve_dtype(dtype)}"]


def settings(steps: int = DEFAULT_STEPS, seed: int = DEFAULT_SEED, dtype: str = "auto",
             cfg: Any = None) -> Settings:
    """Both sides' settings from the composed config (``cfg``, else composed here); raises
    ValueError for a config TRL's GRPO cannot reproduce."""
    overrides = ragen2_overrides(steps, seed, dtype)
    if cfg is None:
        from ragen2.train import load_config

        cfg = load_config(overrides)
    a, r, e = cfg.algorithm, cfg.rollout, cfg.engine
    needed = {  # key: (value, what TRL's GRPO side can reproduce)
        "rollout.max_turns": (r.max_turns, 1),
        "rollout.actions_per_turn": (r.actions_per_turn, 1),
        "algorithm.adv_estimator": (a.adv_estimator, "grpo"),
        "algorithm.policy_loss": (a.policy_loss, "ppo_clip"),
        "algorithm.loss_agg_mode": (a.loss_agg_mode, "token-mean"),
        "algorithm.kl_coef": (a.kl_coef, 0.0),
        "algorithm.ppo_epochs": (a.ppo_epochs, 1),
        "algorithm.lr_warmup_steps": (a.lr_warmup_steps, 0),
        "algorithm.regulariser_gate": (a.regulariser_gate, "none"),
        "filter.strategy": (cfg.filter.strategy, "none"),
        "trainer.max_staleness": (cfg.trainer.max_staleness, 0),
        "trainer.warm_start.enabled": (cfg.trainer.warm_start.enabled, False),
        "learner.lora.rank": (cfg.learner.lora.rank, 0),
        "engine.stop": (list(e.stop), []),
    }
    bad = [f"{k}={v!r} (TRL's side needs {want!r})"
           for k, (v, want) in needed.items() if v != want]
    batch = r.env_groups * r.group_size
    if batch % a.ppo_mini_batches or (batch // a.ppo_mini_batches) % a.micro_batch_size:
        bad.append(f"a batch of {batch} rows in {a.ppo_mini_batches} mini-batches of micro-batches "
                   f"of {a.micro_batch_size} rows (algorithm.micro_batch_size)")
    if bad:
        raise ValueError("TRL's GRPOTrainer cannot match this config: " + "; ".join(bad))
    return Settings(
        overrides=tuple(overrides), steps=steps, seed=cfg.seed, dtype=cfg.model.dtype,
        problems=r.env_groups, group_size=r.group_size, max_new_tokens=e.max_new_tokens,
        temperature=e.temperature, top_p=e.top_p,
        eval_temperature=e.eval_temperature if e.eval_temperature is not None else e.temperature,
        eval_episodes=cfg.trainer.eval_episodes, lr=a.lr, clip_low=a.clip_ratio_low,
        clip_high=a.clip_ratio_high, dual_clip_c=a.dual_clip_c, entropy_coef=a.entropy_coef,
        ppo_mini_batches=a.ppo_mini_batches, micro_batch=a.micro_batch_size,
        grad_clip=a.grad_clip, weight_decay=a.weight_decay, norm_adv_by_std=a.norm_adv_by_std,
        format_penalty=r.format_penalty, response_format=r.response_format)


def trl_config_kwargs(s: Settings) -> dict[str, Any]:
    """``trl.GRPOConfig`` keyword arguments (all but ``output_dir``) for the same update."""
    return dict(
        # generation: one batch of problems x group_size per generation, its rows then split
        # into ppo_mini_batches optimiser steps of gradient_accumulation_steps micro-batches
        per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=s.rows_per_update // s.micro_batch,
        steps_per_generation=s.batch // s.micro_batch, num_generations=s.group_size,
        max_completion_length=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
        top_k=0, repetition_penalty=1.0,
        # the loss: token-mean PPO-clip, clip-higher, dual clip (delta), no KL, entropy bonus
        loss_type="dapo", epsilon=s.clip_low, epsilon_high=s.clip_high, delta=s.dual_clip_c,
        beta=0.0, entropy_coef=s.entropy_coef, num_iterations=1,
        scale_rewards="group" if s.norm_adv_by_std else "none", mask_truncated_completions=False,
        # the optimiser: torch AdamW as ragen2's learner, constant lr
        optim="adamw_torch", learning_rate=s.lr, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, weight_decay=s.weight_decay, max_grad_norm=s.grad_clip,
        lr_scheduler_type="constant", warmup_steps=0,
        max_steps=s.steps * s.ppo_mini_batches, seed=s.seed, shuffle_dataset=False,
        use_cpu=True, bf16=s.dtype == "bfloat16", fp16=False, disable_dropout=True,
        gradient_checkpointing=False, logging_steps=1, report_to="none", save_strategy="no",
        dataloader_num_workers=0)


class ReplayPolicy:
    """A ``TurnPolicy`` whose replies are given token ids (one per episode, in spec order)."""

    policy_version = 0

    def __init__(self, replies: Sequence[Sequence[int]], eos_ids: Sequence[int]) -> None:
        self.replies, self.eos_ids = [list(x) for x in replies], set(eos_ids)

    def act(self, episodes: Sequence[Any], turn: int) -> list[Any]:
        from ragen2.engines.base import Generation

        if turn != 0 or len(episodes) != len(self.replies):
            raise RuntimeError(f"replay: turn {turn} of {len(episodes)} episodes, "
                               f"{len(self.replies)} replies (one turn, every episode, expected)")
        return [Generation(ids, [0.0] * len(ids),
                           "eos" if ids and ids[-1] in self.eos_ids else "length")
                for ids in self.replies]


class Ragen2Episodes:
    """ragen2's episode runner (:func:`ragen2.rollout.runner.run_episodes`, as a rollout worker
    calls it) on given replies: the prompts it renders and the reward it gives (no engine)."""

    def __init__(self, cfg: Any, tokenizer: Any) -> None:
        from ragen2.rollout.chat import ChatRenderer
        from ragen2.rollout.envs import all_entries, format_penalties, make_env

        entries = {e.name: e for e in all_entries(cfg.env)}
        self.cfg, self.renderer = cfg, ChatRenderer(tokenizer)
        self.penalties = format_penalties(list(entries.values()), cfg.rollout.format_penalty)
        self.make_env = lambda name: make_env(entries[name].id, entries[name].kwargs)
        self.envs: dict[str, list] = {}

    def run(self, specs: Sequence[Any], replies: Sequence[Sequence[int]]) -> list[Any]:
        from ragen2.rollout.runner import run_episodes

        r = self.cfg.rollout
        return run_episodes(specs, self.make_env, self.renderer,
                            ReplayPolicy(replies, [self.renderer.eos_token_id]),
                            max_turns=r.max_turns, format_penalty=self.penalties,
                            max_context_tokens=r.max_context_tokens,
                            max_new_tokens=self.cfg.engine.max_new_tokens, envs=self.envs,
                            actions_per_turn=r.actions_per_turn, action_sep=r.action_sep,
                            response_format=r.response_format)

    def prompts(self, specs: Sequence[Any]) -> list[list[int]]:
        """The first prompt's token ids of each episode (an empty reply is replayed)."""
        return [t.input_ids[:t.first_prompt_len] for t in self.run(specs, [[] for _ in specs])]


def ragen2_reward(episodes: Ragen2Episodes, curve: list[dict[str, float]]) -> Any:
    """TRL's reward function: each completion's token ids replayed by ragen2's runner under its
    own problem (the dataset columns of :func:`prompt_rows`); the reward ragen2 gives it, and
    the batch's ``rollout/*`` statistics (ragen2's ``episode_stats``) appended to ``curve``."""
    from ragen2.controller.episodes import episode_stats
    from ragen2.rollout.runner import EpisodeSpec

    def ragen2_env_reward(prompts: list, completions: list, completion_ids: list, env: list,
                          env_seed: list, group: list, ragen2_prompt_ids: list,
                          **_: Any) -> list[float]:
        specs = [EpisodeSpec(sd, g, name) for sd, g, name in zip(env_seed, group, env)]
        trajs = episodes.run(specs, completion_ids)
        if any(t.input_ids[:t.first_prompt_len] != list(ids)
               for t, ids in zip(trajs, ragen2_prompt_ids)):
            raise RuntimeError("a TRL completion was scored under another prompt than its own")
        curve.append(episode_stats(trajs, "rollout"))
        return [t.reward for t in trajs]

    return ragen2_env_reward


def step_specs(cfg: Any, steps: int) -> dict[int, list[Any]]:
    """ragen2's episode specs of steps 1..``steps`` (``RolloutSource.plan``: the training part of
    the problem split, drawn from the run's seed and the step)."""
    from types import SimpleNamespace

    from ragen2.controller.problems import Problems
    from ragen2.controller.rollouts import RolloutSource
    from ragen2.filtering.pipeline import FilterPipeline

    problems = Problems(cfg)
    pipeline = FilterPipeline(cfg.filter, cfg.seed, [e.share for e in problems.train_envs])
    source = RolloutSource(cfg, problems, pipeline,
                           SimpleNamespace(workers=[None] * cfg.rollout.num_workers))
    try:
        return {s: source.plan(s)[0] for s in range(1, steps + 1)}
    finally:
        problems.split.close()


def prompt_rows(cfg: Any, tokenizer: Any, steps: int) -> list[dict[str, Any]]:
    """TRL's dataset: one row per group of each step, in ragen2's order, with the prompt as text
    and as ragen2's token ids (``ragen2_prompt_ids``)."""
    episodes, rows = Ragen2Episodes(cfg, tokenizer), []
    for step, specs in step_specs(cfg, steps).items():
        firsts = [sp for i, sp in enumerate(specs) if i % cfg.rollout.group_size == 0]
        for sp, ids in zip(firsts, episodes.prompts(firsts)):
            rows.append({"prompt": tokenizer.decode(ids, skip_special_tokens=False),
                         "ragen2_prompt_ids": ids, "env": sp.env, "env_seed": sp.env_seed,
                         "group": sp.group_id, "step": step})
    return rows


def trl_prompt_ids(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids TRL 1.16 gives a plain-text prompt (``GRPOTrainer._tokenize_prompts``)."""
    return [list(x) for x in tokenizer(text=list(texts))["input_ids"]]


def save_settings(work: Path, s: Settings) -> None:
    (work / "settings.json").write_text(json.dumps(asdict(s), indent=1) + "\n")


def load_settings(work: Path) -> Settings:
    d = json.loads((work / "settings.json").read_text())
    return Settings(**{**d, "overrides": tuple(d["overrides"])})
