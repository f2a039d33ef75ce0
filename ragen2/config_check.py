"""The config checks the schema cannot make on its own: names against ragen2's registries, and
rules that read several sections at once.

:func:`check_config` runs every check of a typed :class:`~ragen2.config.Config` in one fixed
order (the top level, then each section's own range checks with its registry checks beside them,
then the cross-section rules) and raises :class:`~ragen2.config.ConfigError` at the first failure.
:func:`ragen2.compose.to_config` calls it for every composed config. The registries are imported
inside the checks, so importing this module stays as light as the schema. The modules listed in
``plugins`` are imported first (:func:`ragen2.plugins.import_plugins`), so a name they register
passes the checks; every check of a registered name says so in its "allowed" list.
"""

from __future__ import annotations

from typing import Any, Callable

from ragen2.config import (AlgorithmConfig, Config, ConfigError, EngineConfig, FilterConfig,
                           ModelConfig, SyncConfig, TieredSNRConfig, TrainerConfig, _check,
                           _choice)


#: the end of every "allowed" list of registered names: where a name of one's own comes from
PLUGIN_HINT = "; or a name registered by a module listed in plugins (docs/development.md)"


def check_config(cfg: Config) -> None:
    """Every check of ``cfg``: the schema's, the registries' and the cross-section rules, after
    importing the ``plugins`` (what they register is then allowed)."""
    cfg.validate_top()
    check_plugins(cfg)
    check_recipe(cfg)
    for name, section in cfg.sections():
        before, after = SECTION_CHECKS.get(name, (None, None))
        if before is not None:
            before(section, name)
        section.validate(name)
        if after is not None:
            after(section, name)
    check_cross_section(cfg)


def check_plugins(cfg: Config) -> None:
    """Import the modules of ``plugins``; one that fails is a :class:`ConfigError` naming it."""
    from ragen2.plugins import PluginError, import_plugins

    try:
        import_plugins(cfg.plugins)
    except PluginError as e:
        raise ConfigError("plugins", cfg.plugins, str(e)) from e


def _registered(obj: Any, p: str, name: str, allowed: list[str]) -> None:
    """``obj.name`` is one of the registered names ``allowed`` (a plugin's included)."""
    v = getattr(obj, name)
    _check(v in allowed, f"{p}.{name}", v, "allowed: " + ", ".join(allowed) + PLUGIN_HINT)


def check_recipe(cfg: Config) -> None:
    """``recipe=tiny`` only for a model ragen2 initialised itself."""
    if cfg.recipe == "tiny":
        from ragen2.builtin_models import random_init

        _check(random_init(cfg.model), "recipe", cfg.recipe,
               f"the tiny recipe (behaviour-cloning warm start at lr "
               f"{cfg.trainer.warm_start.lr:g}, RL at lr {cfg.algorithm.lr:g}) is for the "
               f"random-initialised models ragen2 builds, and model "
               f"{cfg.model.path or cfg.model.name!r} is a pretrained checkpoint it would "
               "wreck in a few steps: drop recipe=tiny or pass recipe=pretrained "
               "(configs/recipe/pretrained.yaml)")


# ------------------------------------------------------------------ each section's registries
def check_model(m: ModelConfig, p: str) -> None:
    """A built-in model name, and a tiny architecture ``TinyModelSpec`` accepts."""
    from ragen2.builtin_models import BUILT_IN
    from ragen2.models.tiny import TinyModelSpec

    if not m.path:
        _check(m.name in BUILT_IN, f"{p}.name", m.name,
               f"with {p}.path null, a built-in model: {', '.join(BUILT_IN.names())} (or set "
               f"{p}.path to a local HF directory or hub name)")
    try:
        TinyModelSpec.from_config(m.tiny)  # TinyModelSpec owns the rules (positive sizes, ...)
    except ValueError as e:  # "TinyModelSpec.<field>=<value> is invalid; allowed: ..."
        field_name = str(e).split("=", 1)[0].rpartition(".")[2]
        raise ConfigError(f"{p}.tiny.{field_name}", getattr(m.tiny, field_name, None),
                          str(e)) from None


def check_engine(e: EngineConfig, p: str) -> None:
    from ragen2.engines import ENGINES

    _registered(e, p, "name", ENGINES.names())


def check_algorithm_names(a: AlgorithmConfig, p: str) -> None:
    from ragen2.algos import ADVANTAGE_ESTIMATORS, LOSS_AGG_MODES, POLICY_LOSSES
    from ragen2.algos.kl import KL_PENALTIES

    _registered(a, p, "adv_estimator", ADVANTAGE_ESTIMATORS.names())
    _registered(a, p, "policy_loss", POLICY_LOSSES.names())
    _registered(a, p, "loss_agg_mode", LOSS_AGG_MODES.names())
    _registered(a, p, "kl_estimator", KL_PENALTIES.names())


def check_algorithm_gate(a: AlgorithmConfig, p: str) -> None:
    from ragen2.algos.gating import REGULARISER_GATES

    _registered(a, p, "regulariser_gate", REGULARISER_GATES.names())


def check_filter_names(f: FilterConfig, p: str) -> None:
    from ragen2.filtering import GROUP_SELECTORS
    from ragen2.filtering.select import KEEP_MODES

    _registered(f, p, "strategy", ["none", *GROUP_SELECTORS.names()])
    _choice(f, p, "keep", KEEP_MODES)


def check_filter(f: FilterConfig, p: str) -> None:
    """The selector's own rules for its value, keep mode and scores; the tiered SNR settings."""
    from ragen2.filtering import GROUP_SCORES, GROUP_SELECTORS, LOSS_SCALES

    if f.strategy != "none" and f.keep == "smallest":
        _check(GROUP_SELECTORS.get(f.strategy).has_smallest, f"{p}.keep", f.keep,
               f"{f.strategy} has no keep=smallest form: top_p, top_p_softmax, top_k or "
               "top_k_abs")
    _registered(f, p, "metric", GROUP_SCORES.names())
    _registered(f, p, "loss_scale", LOSS_SCALES.names())
    if f.strategy != "none":
        try:
            GROUP_SELECTORS.get(f.strategy).check_value(f.strategy, f.value)
        except ValueError as e:
            raise ConfigError(f"{p}.value", f.value, str(e)) from None
        if GROUP_SELECTORS.get(f.strategy).nonnegative_scores:
            _check(f.metric != "reward_mean", f"{p}.metric", f.metric,
                   f"{f.strategy} needs non-negative scores: reward_std, entropy or "
                   "response_length (or use top_k / top_p_softmax with reward_mean)")
    check_tiered(f.tiered, f"{p}.tiered")


def check_tiered(t: TieredSNRConfig, p: str) -> None:
    """``TieredSNR`` owns the rules of its thresholds, weights and pool."""
    if not t.enabled:
        return
    from ragen2.filtering import TieredSNR

    try:
        TieredSNR(t.pool_size, ema=t.ema, low_threshold=t.low_threshold,
                  high_threshold=t.high_threshold, reestimate_every=t.reestimate_every,
                  priority_ratio=t.priority_ratio, low_weight=t.low_weight,
                  high_weight=t.high_weight, perturb_threshold=t.perturb_threshold,
                  perturb_temperature=t.perturb_temperature)
    except ValueError as e:  # "TieredSNR <arg>=<value> is invalid; allowed: ..."
        key = str(e).split(" ", 2)[1].split("=", 1)[0]
        raise ConfigError(f"{p}.{key}", getattr(t, key, None),
                          str(e).split("allowed: ", 1)[-1]) from None


def check_trainer(t: TrainerConfig, p: str) -> None:
    from ragen2.metrics import SINKS

    for s in t.loggers:
        _check(s in SINKS, f"{p}.loggers", s, "allowed: " + ", ".join(SINKS.names()) + PLUGIN_HINT)


def check_sync(s: SyncConfig, p: str) -> None:
    from ragen2.sync import WEIGHT_SYNCS

    _registered(s, p, "strategy", ["auto", *WEIGHT_SYNCS.names()])


Check = Callable[[Any, str], None]
# section -> (checks before its own validate, checks after it): the order of the messages a config
# with several errors gets is the order these checks had when they lived in the schema
SECTION_CHECKS: dict[str, tuple[Check | None, Check | None]] = {
    "model": (None, check_model),
    "engine": (check_engine, None),
    "algorithm": (check_algorithm_names, check_algorithm_gate),
    "filter": (check_filter_names, check_filter),
    "trainer": (None, check_trainer),
    "sync": (check_sync, None),
}


# ------------------------------------------------------------------------- across sections
def check_cross_section(cfg: Config) -> None:
    """The rules that read more than one section."""
    if cfg.env.mix:
        from ragen2.rollout.envs import allocate

        mix = cfg.env.entries("mix")
        counts = allocate(cfg.rollout.env_groups, [e.share for e in mix.values()])
        for name, n in zip(mix, counts):
            _check(n > 0, f"env.mix.{name}.share", mix[name].share,
                   f"gives 0 of rollout.env_groups={cfg.rollout.env_groups} groups: raise "
                   "the share or rollout.env_groups")
    if cfg.filter.tiered.enabled:
        _check(cfg.filter.tiered.pool_size >= cfg.rollout.env_groups,
               "filter.tiered.pool_size", cfg.filter.tiered.pool_size,
               f"at least rollout.env_groups={cfg.rollout.env_groups} (each step draws "
               "distinct prompts from the pool)")
        if cfg.env.mix:  # each env draws its groups from its own block of the pool
            from ragen2.rollout.envs import allocate

            shares = [e.share for e in cfg.env.entries("mix").values()]
            blocks = allocate(cfg.filter.tiered.pool_size, shares)
            steps = allocate(cfg.rollout.env_groups, shares)
            _check(all(b >= n for b, n in zip(blocks, steps)), "filter.tiered.pool_size",
                   cfg.filter.tiered.pool_size,
                   f"a pool whose block per env.mix entry ({blocks}, split by share) holds "
                   f"that env's groups of a step ({steps}): raise the pool size")
    if cfg.engine.name == "vllm":  # vLLM refuses a request longer than its model length
        _check(cfg.rollout.max_context_tokens <= cfg.engine.max_model_len,
               "rollout.max_context_tokens", cfg.rollout.max_context_tokens,
               f"at most engine.max_model_len={cfg.engine.max_model_len} (a turn's prompt "
               "plus its generation must fit the engine): raise engine.max_model_len or "
               "lower rollout.max_context_tokens")
    m = cfg.monitor
    if m.on_collapse != "warn":  # the alert reads the probe panel
        _check(m.name == "mi" and m.panel_size > 0 and m.every > 0, "monitor.on_collapse",
               m.on_collapse, "rollback or stop need the probe panel (monitor.name=mi, "
               "monitor.panel_size > 0, monitor.every > 0); warn works without it")
        _check(cfg.trainer.eval_every > 0, "monitor.on_collapse", m.on_collapse,
               "rollback or stop need periodic held-out evaluations (trainer.eval_every > 0): "
               "the alert waits for one to show that success stalled")
        panel = m.panel_size * m.panel_samples
        _check(m.min_samples <= panel, "monitor.min_samples", m.min_samples,
               f"at most monitor.panel_size x monitor.panel_samples = {panel} with "
               f"monitor.on_collapse={m.on_collapse}: a panel measurement with fewer samples "
               "reports no MI, which the alert counts as collapsed, so it would fire on every "
               "measurement; lower monitor.min_samples or enlarge the panel")
    if m.alert_instrument == "later_turns":
        _check(cfg.rollout.max_turns > m.panel_prefix_turns, "monitor.alert_instrument",
               m.alert_instrument, f"later_turns measures turn {m.panel_prefix_turns + 1}, "
               f"past rollout.max_turns={cfg.rollout.max_turns}: lower "
               "monitor.panel_prefix_turns, or use auto / first_turn")
    if cfg.trainer.max_staleness:  # the next batch is generated while the learner updates
        _check(not cfg.engine.sleep_mode, "trainer.max_staleness", cfg.trainer.max_staleness,
               "0 with engine.sleep_mode=true (the engines sleep through the update, so no "
               "generation can overlap it): set engine.sleep_mode=false or trainer.max_staleness=0")
    n_eps = cfg.rollout.env_groups * cfg.rollout.group_size
    _check(cfg.algorithm.ppo_mini_batches <= n_eps, "algorithm.ppo_mini_batches",
           cfg.algorithm.ppo_mini_batches,
           f"at most rollout.env_groups x rollout.group_size = {n_eps}")
    if cfg.cluster.device == "cpu":
        _check(cfg.cluster.backend == "gloo", "cluster.backend", cfg.cluster.backend,
               "gloo on cluster.device=cpu")
        _check(cfg.model.dtype != "float16", "model.dtype", cfg.model.dtype,
               "float32 or bfloat16 on cluster.device=cpu (CPUs have no fast fp16; auto picks "
               "bf16 where the CPU has avx512_bf16)")
        for key, on, what in (
                ("engine.sleep_mode", cfg.engine.sleep_mode, "vLLM sleep mode"),
                ("learner.cpu_offload", cfg.learner.cpu_offload, "FSDP2 CPU offload"),
                ("learner.attn_implementation",
                 cfg.learner.attn_implementation == "flash_attention_2", "flash-attention-2")):
            _check(not on, key, getattr(cfg.engine if key.startswith("engine") else cfg.learner,
                                        key.split(".")[1]),
                   f"{what} needs cluster.device=cuda")
        _check(cfg.sync.strategy != "cuda_ipc", "sync.strategy", cfg.sync.strategy,
               "auto, object_store or nccl on cluster.device=cpu (cuda_ipc shares CUDA "
               "buffers; nccl broadcasts over gloo there)")
        # the CPU split pins actors to this machine's core numbers (ragen2.cluster.cores)
        _check(cfg.cluster.layout == "colocated" or cfg.cluster.address is None,
               "cluster.layout", cfg.cluster.layout,
               "colocated when joining a Ray cluster on the CPU (cluster.address set): split pins "
               "the learner and the engines to this machine's cores, so it needs this job's own "
               "local Ray (cluster.address=null)")
    if cfg.engine.sleep_mode:
        _check(cfg.engine.name == "vllm", "engine.sleep_mode", True,
               "only the vllm engine sleeps (engine=vllm)")
        _check(cfg.cluster.layout == "colocated", "engine.sleep_mode", True,
               "only with cluster.layout=colocated (split rollout GPUs have nothing to free)")
