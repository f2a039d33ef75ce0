"""The typed configuration schema: its dataclasses and their range checks.

Every config group in ``configs/`` is merged onto these dataclasses (registered in Hydra's
ConfigStore as ``ragen2_schema`` by :mod:`ragen2.compose`), so an unknown key or a wrong type fails
while Hydra composes the config. Range checks live in each dataclass's ``validate`` and raise
:class:`ConfigError` naming the key, the value and what is allowed.

The schema is the ground floor of the import graph: it imports nothing of ragen2 (an
import-linter contract in ``pyproject.toml`` holds it there). The checks that need a subsystem
(names against the registries of engines, losses, filters, sinks, ...) or read several sections at
once live in :mod:`ragen2.config_check`; composing the YAML with Hydra in :mod:`ragen2.compose`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


class ConfigError(ValueError):
    """A config value is out of range or inconsistent; the message names key, value and rule."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"invalid config value {key}={value!r}: {allowed}")


def _check(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(key, value, allowed)


def _positive(obj: Any, prefix: str, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        _check(v > 0, f"{prefix}.{n}", v, "must be > 0")


def _number(v: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _choice(obj: Any, prefix: str, name: str, allowed: tuple[str, ...] | list[str]) -> None:
    v = getattr(obj, name)
    _check(v in allowed, f"{prefix}.{name}", v, "allowed: " + ", ".join(allowed))


@dataclass
class EnvEntryConfig:
    """One environment of ``env.mix`` / ``env.eval``: Gymnasium id, kwargs and share of groups."""

    id: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    share: float = 1.0
    format_penalty: Optional[float] = None  # this env's own rollout.format_penalty

    @classmethod
    def parse(cls, key: str, raw: Any) -> "EnvEntryConfig":
        """Check one free-form entry (a mapping with keys id, kwargs, share) and type it."""
        allowed = "a mapping with keys id (required), kwargs, share, format_penalty"
        _check(isinstance(raw, Mapping), key, raw, allowed)
        unknown = sorted(set(raw) - {"id", "kwargs", "share", "format_penalty"})
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}", raw[unknown[0]], f"unknown key; {allowed}")
        _check(isinstance(raw.get("kwargs") or {}, Mapping), f"{key}.kwargs", raw.get("kwargs"),
               "a mapping of constructor kwargs")
        entry = cls(id=raw.get("id") or "", kwargs=dict(raw.get("kwargs") or {}),
                    share=raw.get("share", 1.0), format_penalty=raw.get("format_penalty"))
        _check(isinstance(entry.id, str) and bool(entry.id.strip()), f"{key}.id", entry.id,
               "a Gymnasium env id")
        _check(isinstance(entry.share, (int, float)) and not isinstance(entry.share, bool)
               and 0 < entry.share < math.inf, f"{key}.share", entry.share,
               "a finite number > 0 (shares are normalised)")
        fp = entry.format_penalty
        _check(fp is None or (isinstance(fp, (int, float)) and not isinstance(fp, bool)
                              and -math.inf < fp <= 0),
               f"{key}.format_penalty", fp,
               "a finite number <= 0 (or absent: rollout.format_penalty)")
        return entry


@dataclass
class EnvConfig:
    """The Gymnasium environment(s): any registered id, or ``<module>:<id>`` to import a user module.

    Either one env (``id`` + ``kwargs``) or a mixture ``mix: {name: {id, kwargs, share}}`` whose
    shares split each step's groups. ``eval`` names the held-out evaluation envs the same way;
    empty means the training envs (on held-out seeds). ``mix`` and ``eval`` are free-form in the
    schema (so entries can be added from the command line) and checked by :meth:`entries`.
    """

    # a Gymnasium id; a user env: <module>:<EnvName-v0> (null with mix)
    id: Optional[str] = "ragen2/FrozenLake-v0"
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make
    # several training envs: {name: {id, kwargs, share, format_penalty}}
    mix: dict[str, Any] = field(default_factory=dict)
    # held-out evaluation envs, same form as mix (empty = the training envs)
    eval: dict[str, Any] = field(default_factory=dict)
    # share of each env's problems (by a hash of its problem_key()) held out of training for
    # evaluation and the probe panel, in (0, 1); envs without problem_key() are not split
    heldout_fraction: float = 0.2

    def entries(self, section: str) -> dict[str, EnvEntryConfig]:
        """The typed entries of ``mix`` or ``eval`` (raises :class:`ConfigError` on a bad one)."""
        out = {}
        for name, raw in getattr(self, section).items():
            _check(bool(re.fullmatch(r"[A-Za-z0-9_.-]+", str(name))), f"env.{section}", name,
                   "entry names are metric names: letters, digits, _ . -")
            out[str(name)] = EnvEntryConfig.parse(f"env.{section}.{name}", raw)
        return out

    def validate(self, p: str) -> None:
        if self.mix:
            _check(not self.id, f"{p}.id", self.id,
                   f"null when {p}.mix is set (the mixture names its own ids): start from "
                   f"env=mixed or pass {p}.id=null")
            _check(not self.kwargs, f"{p}.kwargs", self.kwargs, f"empty when {p}.mix is set")
        else:
            _check(bool(self.id and self.id.strip()), f"{p}.id", self.id,
                   f"a Gymnasium env id (or set {p}.mix)")
        self.entries("mix")
        self.entries("eval")
        _check(_number(self.heldout_fraction) and 0 < self.heldout_fraction < 1,
               f"{p}.heldout_fraction", self.heldout_fraction,
               "a number in (0, 1) (0 and 1 excluded): the share of each env's problems held out "
               "of training for evaluation")


@dataclass
class TinySpecConfig:
    """The tiny model's architecture. ``ragen2.models.tiny.TinyModelSpec`` derives from it (and
    owns the rules: positive sizes, head divisibility, the vocabulary floor)."""

    hidden_size: int = 128  # width of the residual stream
    num_layers: int = 4  # decoder layers
    num_heads: int = 4  # attention heads
    num_kv_heads: int = 2  # key/value heads (grouped-query attention)
    intermediate_size: int = 512  # MLP width
    vocab_size: int = 1024  # BPE vocabulary trained on the envs' own text
    max_position_embeddings: int = 2048  # longest sequence (RoPE positions)
    rope_theta: float = 10000.0  # RoPE base
    tie_word_embeddings: bool = True  # output head shares the embedding
    seed: int = 0  # random initialisation seed of the weights


@dataclass
class ModelConfig:
    """``path: null`` builds the built-in model ``name`` (tiny, smollm2); otherwise a local HF
    directory or hub name."""

    name: str = "tiny"  # built-in model built when path is null: tiny | smollm2
    path: Optional[str] = None  # a local HF model directory or hub name (null = the built-in name)
    # float32 | bfloat16 | float16 | auto (bf16 = FSDP2 mixed precision, fp32 master weights);
    # auto: bf16 on CUDA and on CPUs with avx512_bf16/amx_bf16, else fp32 (ragen2.cluster.auto)
    dtype: str = "float32"
    trust_remote_code: bool = False  # passed to transformers for models with their own code
    tiny: TinySpecConfig = field(default_factory=TinySpecConfig)
    cache_dir: Optional[str] = None  # tiny-model cache; default $RAGEN2_CACHE or ~/.cache/ragen2

    def validate(self, p: str) -> None:
        _choice(self, p, "dtype", ("float32", "bfloat16", "float16"))  # auto: resolved before


#: the HF engine's batch (sequences generated at once) when ``engine.hf_max_batch`` is null and it
#: fits (and on CUDA, or with no host estimate): what the engine always used
HF_MAX_BATCH = 256
#: the MI scorer's slice budget (padded continuation tokens a forward) off CUDA when
#: ``monitor.score_tokens`` is null: what the CPU always scored in (ragen2.learner.scoring)
SCORE_TOKENS_CPU = 2048


@dataclass
class EngineConfig:
    """The generation engine (registry ``ragen2.engines.ENGINES``) and its sampling settings.

    The vLLM-only keys are ignored by the HF engine (and ``hf_max_batch`` by vLLM); ``sleep_mode``
    (free the KV cache and weights while the learner updates) needs CUDA and
    ``cluster.layout=colocated``. ``multiprocess`` runs
    vLLM's engine core in a process of its own even with ``tensor_parallel_size=1`` (always so with
    TP > 1): start-up ~25 s instead of ~4 s on the CPU, and weight updates cross a process boundary
    (the object store's buckets through one ``/dev/shm`` file; nccl / cuda_ipc unchanged). Off by
    default; it exists to run the TP > 1 code path on one CPU or GPU.
    """

    name: str = "hf"  # vllm | hf (registry ragen2.engines.ENGINES)
    temperature: float = 1.0  # sampling temperature of training rollouts
    eval_temperature: Optional[float] = None  # held-out evaluation; null = temperature
    top_p: float = 1.0  # nucleus sampling mass
    max_new_tokens: int = 40  # tokens generated per turn at most
    # stop strings (kept in the response)
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    # vLLM
    max_model_len: int = 2048  # vLLM: longest sequence (prompt + generation) per request
    gpu_memory_utilization: float = 0.5  # vLLM: share of the GPU for weights and KV cache
    tensor_parallel_size: int = 1  # vLLM: GPUs per engine
    multiprocess: bool = False  # vLLM's engine core in its own process (forced on when TP > 1)
    enforce_eager: bool = True  # CUDA graphs off (always off on CPU); presets on GPU turn them on
    prefix_caching: bool = True  # vLLM: reuse the KV cache of a turn's shared prefix
    sleep_mode: bool = False  # vLLM on CUDA: free weights and KV cache during updates
    cpu_kvcache_gb: int = 1  # vLLM-CPU KV-cache size in GiB (VLLM_CPU_KVCACHE_SPACE)
    # HF engine: sequences generated at once (a turn's prompts go in chunks of this many; a
    # different value changes which samples a seed draws); null = HF_MAX_BATCH (256), or on the
    # CPU when no learner setting fits that, the largest of a coarse grid that fits
    # (ragen2.cluster.host_memory)
    hf_max_batch: Optional[int] = None

    def validate(self, p: str) -> None:
        _check(self.temperature >= 0, f"{p}.temperature", self.temperature, "must be >= 0")
        _check(self.eval_temperature is None or self.eval_temperature >= 0, f"{p}.eval_temperature",
               self.eval_temperature, "null (= engine.temperature) or >= 0")
        _check(0 < self.top_p <= 1, f"{p}.top_p", self.top_p, "must be in (0, 1]")
        _positive(self, p, "max_new_tokens", "max_model_len", "tensor_parallel_size", "cpu_kvcache_gb")
        _check(self.hf_max_batch is None or self.hf_max_batch >= 1, f"{p}.hf_max_batch",
               self.hf_max_batch, "null (planned) or >= 1")
        _check(0 < self.gpu_memory_utilization <= 1, f"{p}.gpu_memory_utilization",
               self.gpu_memory_utilization, "must be in (0, 1]")
        _check(not self.multiprocess or self.name == "vllm", f"{p}.multiprocess", self.multiprocess,
               "false with engine=hf (only the vllm engine runs out of process)")


@dataclass
class RolloutConfig:
    """One step collects ``env_groups x group_size`` episodes; a group shares its env seed."""

    env_groups: int = 16  # groups (distinct env seeds, the 'prompts') per step
    group_size: int = 4  # rollouts per group, all from the group's seed
    max_turns: int = 8  # turns per episode before truncation
    num_workers: int = 1  # RolloutWorker actors (engines); groups are split between them
    format_penalty: float = -0.1  # reward of a turn that does not parse or whose action is invalid
    max_context_tokens: int = 1536  # a conversation longer than this ends the episode
    env_threads: int = 8  # env.step calls run concurrently on this many threads per worker
    max_env_error_frac: float = 0.25  # episodes whose env raised, tolerated per step (a share)
    max_worker_restarts: int = 3  # dead rollout workers restarted per call (rollout or sync)
    actions_per_turn: int = 1  # > 1: an answer may hold that many actions (RAGEN's "Right || Up")
    action_sep: str = "||"  # separator of several actions in one answer
    # tags: <think>...</think><answer>...</answer>, anything else a format error; plain: no format
    # asked or parsed, the whole reply is the action and the reasoning the MI monitor reads (for a
    # model that ignores the tags, as SmolLM2-135M does: benchmarks/results/smollm2_tasks.json)
    response_format: str = "tags"

    def validate(self, p: str) -> None:
        _positive(self, p, "env_groups", "group_size", "max_turns", "num_workers",
                  "max_context_tokens", "env_threads", "actions_per_turn")
        _check(bool(self.action_sep.strip()), f"{p}.action_sep", self.action_sep,
               "a non-blank separator, e.g. '||'")
        _choice(self, p, "response_format", ("tags", "plain"))
        _check(self.max_worker_restarts >= 0, f"{p}.max_worker_restarts", self.max_worker_restarts,
               "must be >= 0 (0 = a dead rollout worker stops the run)")
        _check(self.format_penalty <= 0, f"{p}.format_penalty", self.format_penalty, "must be <= 0")
        _check(0 <= self.max_env_error_frac <= 1, f"{p}.max_env_error_frac",
               self.max_env_error_frac, "a share in [0, 1] (0 = stop at the first env error)")


@dataclass
class AlgorithmConfig:
    """Advantage estimator, policy loss and regularisers (registries in ``ragen2.algos``; a
    module listed in ``plugins`` may register more)."""

    name: str = "grpo"  # preset name (configs/algorithm): grpo | ppo | dapo | drgrpo
    adv_estimator: str = "grpo"  # grpo | gae (ragen2.algos.ADVANTAGE_ESTIMATORS)
    norm_adv_by_std: bool = True  # GRPO: divide advantages by the group's reward std
    gamma: float = 1.0  # GAE discount
    lam: float = 1.0  # GAE lambda
    policy_loss: str = "ppo_clip"  # registry ragen2.algos.POLICY_LOSSES (ppo_clip)
    clip_ratio_low: float = 0.2  # PPO clip below 1
    clip_ratio_high: float = 0.28  # PPO clip above 1 (clip-higher)
    dual_clip_c: Optional[float] = 3.0  # dual-clip bound for negative advantages (null = off)
    # token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm
    # (ragen2.algos.aggregation.LOSS_AGG_MODES)
    loss_agg_mode: str = "token-mean"
    # seq-mean-token-sum-norm (Dr.GRPO) divides each sequence's token sum by this constant;
    # null = engine.max_new_tokens x rollout.max_turns (the longest response a trajectory holds)
    loss_agg_norm_tokens: Optional[int] = None
    kl_coef: float = 0.0  # KL penalty to a frozen reference (0 = no reference model)
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman's estimators; ragen2.algos.kl.KL_PENALTIES)
    entropy_coef: float = 0.0  # entropy bonus coefficient
    ppo_epochs: int = 1  # passes over a step's batch
    ppo_mini_batches: int = 1  # optimizer steps per pass (the batch split evenly)
    micro_batch_size: int = 16  # memory only: never changes the maths
    lr: float = 5e-4  # policy learning rate (AdamW)
    lr_warmup_steps: int = 3  # linear warm-up over the first RL updates (Adam's first steps are large)
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # global gradient-norm clip
    critic_lr: float = 5e-4  # PPO critic learning rate
    value_clip: Optional[float] = 0.2  # PPO value clip (null = off)
    value_coef: float = 1.0  # weight of the value loss
    # SNR-gated regularisers (ragen2.algos.gating): weight each sample's KL and entropy terms by
    # its group's reward spread: none | threshold (1 if σ_g > regulariser_gate_threshold, else 0)
    # | scaled (σ_g / max σ_g) (registry REGULARISER_GATES)
    regulariser_gate: str = "none"
    regulariser_gate_threshold: float = 0.0  # the threshold gate's σ_g cut
    # bounded staleness (trainer.max_staleness >= 1) only: the cap of the decoupled objective's
    # truncated importance weights pi_prox / pi_behav (ragen2.algos.off_policy; null = no cap)
    tis_cap: Optional[float] = 2.0

    def validate(self, p: str) -> None:
        for n in ("gamma", "lam"):
            v = getattr(self, n)
            _check(0 <= v <= 1, f"{p}.{n}", v, "must be in [0, 1]")
        for n in ("clip_ratio_low", "clip_ratio_high"):
            v = getattr(self, n)
            _check(0 < v < 10, f"{p}.{n}", v, "must be in (0, 10)")
        _check(self.dual_clip_c is None or self.dual_clip_c > 1, f"{p}.dual_clip_c",
               self.dual_clip_c, "null (off) or > 1")
        for n in ("kl_coef", "entropy_coef", "weight_decay", "value_coef"):
            v = getattr(self, n)
            _check(v >= 0, f"{p}.{n}", v, "must be >= 0")
        _check(self.loss_agg_norm_tokens is None or self.loss_agg_norm_tokens > 0,
               f"{p}.loss_agg_norm_tokens", self.loss_agg_norm_tokens,
               "null (= engine.max_new_tokens x rollout.max_turns) or > 0")
        _check(self.lr_warmup_steps >= 0, f"{p}.lr_warmup_steps", self.lr_warmup_steps, "must be >= 0")
        _positive(self, p, "ppo_epochs", "ppo_mini_batches", "micro_batch_size", "lr",
                  "critic_lr", "grad_clip")
        _check(self.value_clip is None or self.value_clip > 0, f"{p}.value_clip",
               self.value_clip, "null (off) or > 0")
        _check(self.regulariser_gate_threshold >= 0, f"{p}.regulariser_gate_threshold",
               self.regulariser_gate_threshold, "must be >= 0")
        _check(self.tis_cap is None or (_number(self.tis_cap) and self.tis_cap > 1),
               f"{p}.tis_cap", self.tis_cap,
               "null (no cap) or a number > 1 (the truncated importance weights' cap)")


@dataclass
class TieredSNRConfig:
    """Tiered SNR filtering (``ragen2.filtering.snr.TieredSNR``); off in the plain modes."""

    enabled: bool = False  # on with filter=tiered
    pool_size: int = 64  # prompts (env seeds) the steps draw from, so per-prompt history repeats
    ema: float = 0.7  # EMA decay of each prompt's reward spread and template score
    low_threshold: float = 0.5  # initial SNR grade threshold low / medium
    high_threshold: float = 0.7  # initial SNR grade threshold medium / high
    reestimate_every: int = 5  # updates between threshold re-estimates (configs/filter/tiered.yaml)
    priority_ratio: float = 7.0  # sampling weight of high vs low SNR prompts
    low_weight: float = 0.5  # loss weight of low-SNR samples (attenuate)
    high_weight: float = 1.5  # loss weight of high-SNR samples (amplify, 1..2)
    perturb_threshold: float = 0.8  # template score at which a prompt is perturbed
    perturb_temperature: float = 1.3  # sampling temperature multiplier for those prompts
    # what the weights scale: "loss" = each sample's whole loss (policy, entropy and KL terms),
    # "advantage" = its advantages only (the regularisers keep full weight, so attenuating a
    # low-SNR sample raises the regulariser's share of its gradient: the opposite of SPEC 1)
    weight_target: str = "loss"

    def validate(self, p: str) -> None:
        _choice(self, p, "weight_target", ("loss", "advantage"))


@dataclass
class FilterConfig:
    """Group filtering between rollout and update (``ragen2.filtering``).

    ``strategy: none`` keeps every group; otherwise groups are scored by ``metric`` and selected by
    ``select_groups(scores, strategy, value, include_zero, temperature)``.
    """

    strategy: str = "none"  # none | top_p | top_p_softmax | top_k | top_k_abs | min_p
    value: float = 1.0  # the strategy's parameter: p, k (fraction or count) or min_p's p
    metric: str = "reward_std"  # reward_std | reward_variance | reward_mean | entropy | response_length
    include_zero: bool = True  # may groups with zero reward spread be kept
    temperature: float = 1.0  # top_p_softmax
    keep: str = "largest"  # largest | smallest: which end of the score order is kept
    epsilon: float = 0.0  # near-ties: groups within this of the last kept score are kept too
    loss_scale: str = "none"  # none | linear | sqrt: scale the loss by the kept fraction
    tiered: TieredSNRConfig = field(default_factory=TieredSNRConfig)

    def validate(self, p: str) -> None:
        _check(self.epsilon >= 0, f"{p}.epsilon", self.epsilon, "must be >= 0 (0 = off)")
        _check(self.temperature > 0, f"{p}.temperature", self.temperature, "must be > 0")
        self.tiered.validate(f"{p}.tiered")


@dataclass
class MonitorConfig:
    """The MI collapse monitor and the gradient-SNR diagnostic (``ragen2.collapse``)."""

    name: str = "mi"  # mi | none
    every: int = 5  # steps between measurements (and step 1)
    max_negatives: int = 0  # prompts scored per sample besides its own; 0 = all of them
    permutations: int = 20  # permutation-null draws
    ema: float = 0.9  # EMA decay of collapse/mi_z
    # the minimum sample of every MI and retrieval value (batch, later turns, panels, action MI):
    # a measurement with fewer parsable reasoning samples logs its counts (<scope>/n_samples,
    # n_prompts) and no value (ragen2.collapse.withhold: why 16)
    min_samples: int = 16
    # later turns (collapse/turns/*): one turn per trajectory, scored under its own conversation
    # and this many others (0 = all of them; null = off)
    turn_negatives: Optional[int] = 7
    turn_uniform: bool = False  # also pairs drawn uniformly over all turns (collapse/turn_uniform/*)
    action_mi: bool = True  # I(A; Z | X) on the first turn (collapse/action/*)
    # padded continuation tokens the learner scores per forward (monitor, panel, action MI); null:
    # sized to the free GPU memory (all at once where they fit, ragen2.learner.scoring.slice_budget),
    # 2048 on the CPU; a number: that budget on every device (its logits peak at score_tokens x
    # vocabulary x (dtype bytes + 8))
    score_tokens: Optional[int] = None
    # the fixed probe panel (collapse/panel/*): held-out prompts measured at step 0 and every
    # `every` steps with fresh first-turn samples, bootstrap 95% intervals over its prompts
    panel_size: int = 32  # distinct prompts (0 = off)
    panel_samples: int = 4  # reasoning samples per panel prompt
    panel_bootstrap: int = 200  # bootstrap resamples
    panel_permutations: int = 200  # permutation-null draws (its 95th percentile is the floor)
    # its later turns (collapse/panel/turns/*, ragen2.collapse.panel_turns): each panel seed
    # played this many scripted turns (expert moves, each random with panel_prefix_random), then
    # the policy's reasoning at the next turn is measured (0 = off)
    panel_prefix_turns: int = 2
    panel_prefix_random: float = 0.5  # share of random moves in those scripted turns
    # its contrast sets (collapse/panel/turns/contrast/<c>/*, ragen2.collapse.contrast): this many
    # later-turn panel prompts each get up to 2 sibling states per coordinate, on the same map,
    # differing in that coordinate only (envs with a state_coordinates hook; 0 = off, the
    # default: each set costs panel_samples more episodes per sibling; collapse study 3 sets 8)
    panel_contrast: int = 0
    # what the collapse alert and the diagnosis read (ragen2.collapse.instrument): auto = the
    # later-turn panel where the env has one, else the first turn | first_turn | later_turns
    alert_instrument: str = "auto"
    # the first-turn panel (collapse/panel/* outside turns/): always | never | auto = not where
    # the later-turn panel exists and the alert does not read the first turn (on FrozenLake the
    # first reasoning is the same for every map, so its MI sits at its floor by construction)
    first_turn_panel: str = "auto"
    # collapse alert (collapse/alert): the panel MI's lower bound at or under the floor for
    # `alert_patience` measurements in a row while held-out success gains no more than
    # `alert_min_gain`; then warn (log + print), rollback (the newest healthy checkpoint, and a
    # stronger filter: docs/concepts/diagnosis.md) or stop
    alert_patience: int = 3
    alert_min_gain: float = 0.0  # held-out success gain that counts as progress
    on_collapse: str = "warn"  # warn | rollback | stop
    max_rollbacks: int = 2  # later alerts only warn
    rollback_filter_factor: float = 0.75  # the kept share shrinks by this factor per rollback
    grad_snr_every: int = 0  # gradient-SNR diagnostic cadence in steps (0 = off)
    grad_snr_buckets: int = 3  # reward-spread quantile buckets

    def validate(self, p: str) -> None:
        _choice(self, p, "name", ("mi", "none"))
        _check(self.turn_negatives is None or self.turn_negatives >= 0, f"{p}.turn_negatives",
               self.turn_negatives, "null (later turns off), 0 (all) or > 0")
        for n in ("every", "max_negatives", "grad_snr_every"):
            v = getattr(self, n)
            _check(v >= 0, f"{p}.{n}", v, "must be >= 0 (0 = off / all)")
        _positive(self, p, "permutations", "grad_snr_buckets", "alert_patience", "max_rollbacks")
        _check(self.score_tokens is None or self.score_tokens > 0, f"{p}.score_tokens",
               self.score_tokens, "null (sized to the free memory) or > 0")
        _check(self.min_samples >= 2, f"{p}.min_samples", self.min_samples,
               "must be >= 2 (parsable reasoning samples an MI or retrieval value needs; an MI "
               "needs at least 2 prompts, so 2 samples)")
        _check(0 <= self.ema < 1, f"{p}.ema", self.ema, "must be in [0, 1)")
        _check(self.panel_size == 0 or self.panel_size >= 2, f"{p}.panel_size", self.panel_size,
               "0 (off) or >= 2 prompts")
        _check(self.panel_samples >= 1, f"{p}.panel_samples", self.panel_samples, "must be >= 1")
        _check(self.panel_bootstrap >= 2, f"{p}.panel_bootstrap", self.panel_bootstrap,
               "must be >= 2 resamples")
        _positive(self, p, "panel_permutations")
        _check(self.panel_prefix_turns >= 0, f"{p}.panel_prefix_turns", self.panel_prefix_turns,
               "must be >= 0 (0 = no later-turn panel)")
        _check(self.panel_contrast >= 0, f"{p}.panel_contrast", self.panel_contrast,
               "must be >= 0 (0 = no contrast sets)")
        _check(0 <= self.panel_prefix_random <= 1, f"{p}.panel_prefix_random",
               self.panel_prefix_random, "must be in [0, 1] (the share of random scripted moves)")
        _choice(self, p, "alert_instrument", ("auto", "first_turn", "later_turns"))
        _choice(self, p, "first_turn_panel", ("always", "never", "auto"))
        _check(not (self.alert_instrument == "first_turn" and self.first_turn_panel == "never"),
               f"{p}.first_turn_panel", self.first_turn_panel, "never, but "
               "monitor.alert_instrument=first_turn reads the first-turn panel: always or auto")
        if self.alert_instrument == "later_turns":
            _check(self.panel_size > 0 and self.panel_prefix_turns > 0, f"{p}.alert_instrument",
                   self.alert_instrument, "later_turns needs the later-turn panel "
                   "(monitor.panel_size > 0 and monitor.panel_prefix_turns > 0); or auto / first_turn")
        _choice(self, p, "on_collapse", ("warn", "rollback", "stop"))
        _check(self.alert_min_gain >= 0, f"{p}.alert_min_gain", self.alert_min_gain, "must be >= 0")
        _check(0 < self.rollback_filter_factor < 1, f"{p}.rollback_filter_factor",
               self.rollback_filter_factor, "in (0, 1): the kept share is multiplied by it")


@dataclass
class WarmStartConfig:
    """Behaviour cloning on the env's (deliberately imperfect) expert demonstrations before RL."""

    enabled: bool = True  # behaviour-clone the env's expert before RL
    episodes: int = 512  # demonstration episodes
    epochs: int = 3  # passes over them
    batch_size: int = 8  # episodes per optimizer step
    lr: float = 2e-3  # learning rate of the warm start
    random_action_prob: float = 0.5  # share of demonstrated actions replaced by random ones
    seed: int = 0  # its own seed: runs differing only in `seed` share one warm-started policy
    cache: bool = True  # reuse a warm-started policy built with identical settings

    def validate(self, p: str) -> None:
        _positive(self, p, "episodes", "epochs", "batch_size", "lr")
        _check(self.seed >= 0, f"{p}.seed", self.seed, "must be >= 0")
        _check(0 <= self.random_action_prob <= 1, f"{p}.random_action_prob",
               self.random_action_prob, "must be in [0, 1]")


@dataclass
class EarlyStopConfig:
    """Early stops (``ragen2.early_stop``), each off at 0."""

    spread_frac: float = 0.0  # stop when the in-group reward spread < this x its first-step value
    spread_patience: int = 5  # ... for this many steps in a row
    eval_floor: float = 0.0  # stop when held-out success < this
    eval_patience: int = 3  # ... for this many evaluations in a row

    def validate(self, p: str) -> None:
        for n in ("spread_frac", "eval_floor"):
            v = getattr(self, n)
            _check(0 <= v <= 1, f"{p}.{n}", v, "in [0, 1] (0 = off)")
        _positive(self, p, "spread_patience", "eval_patience")


@dataclass
class TrainerConfig:
    total_steps: int = 40  # RL steps
    save_every: int = 10  # 0 = only at the end
    resume: bool = False  # continue from the run directory's latest checkpoint
    eval_every: int = 20  # 0 = only before and after RL
    # held-out episodes per evaluation: problems never trained on (env.heldout_fraction),
    # distinct ones where the env enumerates its problems
    eval_episodes: int = 128
    max_skipped_steps: int = 5  # steps in a row where the filter kept nothing, then stop
    max_nonfinite_steps: int = 3  # consecutive updates skipped for a NaN/inf loss or gradient
    keep_checkpoints: int = 2  # newest checkpoints kept
    log_samples: int = 8  # held-out episodes written as text at each evaluation
    save_rollouts_every: int = 1  # steps between saved rollout batches (rollouts/*.jsonl.gz; 0 = off)
    save_rollouts_max_mb: float = 50.0  # oldest rollout files are deleted beyond this total
    # metric sinks: jsonl | tensorboard | console | wandb
    loggers: list[str] = field(default_factory=lambda: ["jsonl", "tensorboard", "console"])
    wandb_project: Optional[str] = None  # W&B project (null = ragen2)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    early_stop: EarlyStopConfig = field(default_factory=EarlyStopConfig)
    # bounded staleness: step t trains on the batch generated by policy version max(0, t-1-k),
    # generated while the learner updates (0 = the on-policy loop; docs/concepts/async.md)
    max_staleness: int = 0

    def validate(self, p: str) -> None:
        _check(isinstance(self.max_staleness, int) and not isinstance(self.max_staleness, bool)
               and self.max_staleness >= 0, f"{p}.max_staleness", self.max_staleness,
               "an integer >= 0 (0 = on-policy; k >= 1 trains on batches at most k versions old)")
        _positive(self, p, "total_steps", "eval_episodes", "max_skipped_steps", "max_nonfinite_steps",
                  "keep_checkpoints", "save_rollouts_max_mb")
        _check(self.eval_episodes <= 2**30, f"{p}.eval_episodes", self.eval_episodes,
               "at most 2**30 (held-out seeds must stay below the probe panel's)")
        _check(self.save_rollouts_every >= 0, f"{p}.save_rollouts_every", self.save_rollouts_every,
               "must be >= 0 (0 = off)")
        for n in ("save_every", "eval_every"):
            v = getattr(self, n)
            _check(v >= 0, f"{p}.{n}", v, "must be >= 0 (0 = only at the end)")
        self.warm_start.validate(f"{p}.warm_start")
        self.early_stop.validate(f"{p}.early_stop")


@dataclass
class LoraConfig:
    """LoRA adapters (peft) on the policy; the engine always receives merged full weights."""

    rank: int = 0  # 0 = off (full fine-tuning)
    alpha: float = 32.0  # LoRA scale numerator: the update is (alpha / rank) B A
    dropout: float = 0.0  # dropout on the adapters' input (updates only)
    target_modules: list[str] = field(default_factory=lambda: [  # module names that get adapters
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])

    def validate(self, p: str) -> None:
        _check(self.rank >= 0, f"{p}.rank", self.rank, "must be >= 0 (0 = off)")
        if self.rank:
            _positive(self, p, "alpha")
            _check(0 <= self.dropout < 1, f"{p}.dropout", self.dropout, "must be in [0, 1)")
            _check(bool(self.target_modules), f"{p}.target_modules", self.target_modules,
                   "at least one module name (e.g. q_proj)")


@dataclass
class LearnerConfig:
    """FSDP2 learner memory/speed settings; none of them changes the maths of an update."""

    # recompute activations in the backward (memory); null: planned (ragen2.cluster.auto)
    activation_checkpointing: Optional[bool] = False
    cpu_offload: bool = False  # FSDP2 CPUOffloadPolicy (CUDA only)
    # sdpa | sdpa_fp32_backward (sdpa, its backward in fp32 for bf16 on the CPU) | eager |
    # flash_attention_2 (CUDA + flash-attn)
    attn_implementation: str = "sdpa"
    # >0: micro-batches balanced by token count within this budget; 0: algorithm.micro_batch_size
    # rows each; null: the largest that fits this machine's memory (CPU; ragen2.cluster.auto)
    micro_batch_tokens: Optional[int] = 0
    shared_prefix: bool = True  # forward a prompt shared by rows of a micro-batch once (same maths)
    # FSDP: reduce-scatter an optimiser step's gradients once, after its last micro-batch, having
    # accumulated them unsharded (fp32) over its micro-batches; false: after every micro-batch.
    # The same gradient to float rounding; costs one unsharded fp32 gradient of the model
    reduce_once: bool = False
    lora: LoraConfig = field(default_factory=LoraConfig)

    def validate(self, p: str) -> None:
        _choice(self, p, "attn_implementation",
                ("sdpa", "sdpa_fp32_backward", "eager", "flash_attention_2"))
        _check(self.micro_batch_tokens is None or self.micro_batch_tokens >= 0,
               f"{p}.micro_batch_tokens", self.micro_batch_tokens,
               "must be >= 0 (0 = algorithm.micro_batch_size rows per micro-batch) or null (planned)")
        self.lora.validate(f"{p}.lora")


# The probe's absolute minimum per model dtype (mean |logprob gap| per token that always passes;
# a later sync fails only above max(sync.probe_floor_multiple x the floor measured with identical
# weights, this): ragen2.sync.probe.ProbePolicy). float32: measured, the engines and the learner
# agree to ~1e-5 on the CPU (tests/sync). bfloat16: the normal engine-vs-learner gap is 0.03-0.06
# nats (Fast-LLM PR #525: 0.031-0.041 RMS for Qwen2.5-0.5B trainer vs vLLM; verl-omni #637: mean
# 6.4e-2 HF+FSDP2 vs vLLM), more on top-k alternatives; float16 (10 mantissa bits, 8x finer):
# scaled from bf16. Neither is measured here yet (launch/gpu_check.py measures the bf16 floor).
PROBE_TOLERANCE = {"float32": 1e-3, "bfloat16": 1e-1, "float16": 2e-2}


@dataclass
class SyncConfig:
    """Weight sync learner -> engines (registry ``ragen2.sync.WEIGHT_SYNCS``) and its checks.

    ``strategy: auto`` picks object_store on CPU, cuda_ipc for colocated GPUs and nccl for split
    GPUs. After every sync two checks run: ``checksum`` compares exact checksums of a few exported
    tensors in every engine process with the learner's (``ragen2.sync.checksum``: a stale engine
    fails whatever the numerics), and the probe scores a fixed token sequence longer than a KV
    block on the learner and the engines. The probe's first gap (identical weights) is the floor;
    a later gap above max(``probe_floor_multiple`` x floor, ``probe_tolerance``) stops the run
    (``ragen2.sync.probe.ProbePolicy``).
    """

    strategy: str = "auto"  # auto | object_store | cuda_ipc | nccl
    bucket_mb: float = 256.0  # weights move in buckets of at most this size
    probe: bool = True  # after every sync, compare engine and learner logprobs
    probe_tokens: int = 320  # longer than a KV block (vLLM: 128 on CPU, 16 on GPU)
    # the absolute minimum of the probe's threshold; null = by model.dtype (PROBE_TOLERANCE)
    probe_tolerance: Optional[float] = None
    # a later gap fails above this multiple of the floor (the gap with identical weights)
    probe_floor_multiple: float = 4.0
    checksum: bool = True  # exact checksums of a few exported tensors after every sync
    # seconds a weight-sync collective (nccl strategy: rendezvous, broadcast) may wait before
    # the run stops with an error naming the strategy and the ranks
    timeout_s: float = 600.0

    def tolerance(self, dtype: str) -> float:
        """The probe's absolute minimum for a model computed in ``dtype``."""
        return self.probe_tolerance if self.probe_tolerance is not None else PROBE_TOLERANCE[dtype]

    def validate(self, p: str) -> None:
        _positive(self, p, "bucket_mb", "probe_tokens", "timeout_s")
        _check(self.probe_tolerance is None or self.probe_tolerance > 0, f"{p}.probe_tolerance",
               self.probe_tolerance, "null (by model.dtype) or > 0")
        _check(self.probe_floor_multiple >= 1, f"{p}.probe_floor_multiple",
               self.probe_floor_multiple, "must be >= 1 (a multiple of the floor)")
        _check(self.probe_tokens >= 2, f"{p}.probe_tokens", self.probe_tokens, "must be >= 2")


@dataclass
class ClusterConfig:
    """Where the actors run: Ray address (null = start a local Ray), learner world size, devices.

    On GPUs ``layout`` places the rollout engines: ``colocated`` shares the learner's GPUs
    (``rollout.num_workers x engine.tensor_parallel_size == learner_world_size``), ``split`` gives
    them GPUs of their own. The plan is checked against the Ray cluster before anything starts.
    On the CPU ``split`` pins the learner ranks to the first half of the cores and the engines to
    the rest (``ragen2.cluster.cores``; this job's own local Ray only).
    """

    # Ray address to join (auto | HOST:PORT); null = a fresh local Ray
    address: Optional[str] = None
    num_cpus: Optional[int] = None  # CPUs of the local Ray (null = all)
    learner_world_size: int = 2  # FSDP2 learner ranks
    device: str = "cpu"  # cpu | cuda
    backend: str = "gloo"  # torch.distributed backend: gloo (CPU) | nccl (GPU)
    torch_threads: int = 0  # 0 = cores / actors
    # colocated | split (GPUs: the engines on GPUs of their own; CPU: on cores of their own)
    layout: str = "colocated"
    placement_strategy: str = "PACK"  # Ray placement-group strategy: PACK | SPREAD | STRICT_PACK
    # refuse a CUDA job whose per-GPU memory estimate (ragen2/cluster/memory.py) does not fit;
    # false: warn and launch anyway
    memory_check: bool = True

    def validate(self, p: str) -> None:
        _positive(self, p, "learner_world_size")
        _check(self.num_cpus is None or self.num_cpus > 0, f"{p}.num_cpus", self.num_cpus,
               "null (all of this machine's cores) or > 0")
        _choice(self, p, "device", ("cpu", "cuda"))
        _choice(self, p, "backend", ("gloo", "nccl"))
        _choice(self, p, "layout", ("colocated", "split"))
        _choice(self, p, "placement_strategy", ("PACK", "SPREAD", "STRICT_PACK"))
        _check(self.torch_threads >= 0, f"{p}.torch_threads", self.torch_threads, "must be >= 0")


RECIPES = ("tiny", "pretrained")
_MODULE_NAME = re.compile(r"(?!.*\.py$)[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")  # a file name is refused


@dataclass
class Config:
    seed: int = 0  # run seed: env seeds, sampling seeds and shuffles derive from it
    # the optimisation recipe, set by configs/recipe/<model>.yaml: tiny (a model ragen2 builds:
    # behaviour-cloned warm start, large learning rates) or pretrained (RAGEN-2's settings)
    recipe: Optional[str] = "tiny"
    # modules imported before the config check and in every learner rank and rollout
    # worker, so what they register (an advantage estimator, a loss, a filter score, an env) is
    # known everywhere: dotted module names, found from the folder ragen2 runs in or PYTHONPATH
    # ('plugins=[my_estimators]'; docs/development.md; ragen2 serve-env takes --plugin)
    plugins: list[str] = field(default_factory=list)
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)

    def sections(self) -> list[tuple[str, Any]]:
        """The top-level sections (``env``, ``model``, ...) in schema order, each with its own
        ``validate``."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                if hasattr(getattr(self, f.name), "validate")]

    def validate_top(self) -> None:
        """The checks of the top level: every number finite and 64-bit, ``seed``, ``recipe``,
        ``plugins``."""
        _check_numbers(self)
        for name in self.plugins:
            _check(bool(_MODULE_NAME.fullmatch(name)), "plugins", self.plugins,
                   f"{name!r} is not a module name: each entry is a dotted Python module name "
                   f"as `import` takes it (plugins=[my_estimators] for ./my_estimators.py)")
        _check(0 <= self.seed < 2**32, "seed", self.seed, "must be in [0, 2**32)")
        _check(self.recipe in RECIPES, "recipe", self.recipe,
               f"one of {', '.join(RECIPES)}: this model has no configs/recipe/<model>.yaml (add "
               "one holding `defaults: [pretrained]`, or pass recipe=pretrained)")

    def validate(self) -> None:
        """Every check the schema makes on its own: the top level and each section's ranges.

        The checks of names against ragen2's registries and those across sections run in
        :func:`ragen2.config_check.check_config` (which ``ragen2.compose.to_config`` calls)."""
        self.validate_top()
        for name, section in self.sections():
            section.validate(name)


def _check_numbers(node: Any, prefix: str = "") -> None:
    """Every number of the schema is finite and fits in 64 bits (torch and numpy hold it so), and
    every ``list[str]`` holds strings (OmegaConf lets ``[1, {a: 2}]`` through)."""
    for f in dataclasses.fields(node):
        key, v = prefix + f.name, getattr(node, f.name)
        if dataclasses.is_dataclass(v):
            _check_numbers(v, key + ".")
        elif isinstance(v, float):
            _check(math.isfinite(v), key, v, "a finite number")
        elif isinstance(v, int) and not isinstance(v, bool):
            _check(-2**63 <= v < 2**63, key, v, "an integer in [-2**63, 2**63)")
        elif f.type == "list[str]":
            for item in v:
                _check(isinstance(item, str), key, v, "a list of strings")
