"""The shipped presets: the RAGEN-2 experiments, the GPU cluster and model presets, the sweeps.

Everything here only composes and validates configs (``ragen2.train.load_config``): no model is
loaded, no GPU is needed (the GPU presets set ``cluster.device=cuda``, which validation accepts on
any machine).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from ragen2.config import Config, ConfigError
from ragen2.models.tiny import TinyModelSpec
from ragen2.train import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ENVS = {"sokoban": "ragen2/Sokoban-v0", "frozenlake": "ragen2/FrozenLake-v0",
        "math": "ragen2/Math-v0", "code": "ragen2/Code-v0", "countdown": "ragen2/Countdown-v0"}
ALGORITHMS = ("ppo", "grpo", "dapo", "drgrpo")
FILTERS = ("none", "top_p", "tiered")
# `+experiment=x` appends the group; were config.yaml to list `optional experiment: null` in its
# defaults, the override would be `experiment=x` (Hydra refuses the other form in each case).
_DEFAULTS = yaml.safe_load((CONFIGS / "config.yaml").read_text())["defaults"]
EXP = ("experiment" if any(isinstance(d, dict) and any(k.split(" ")[-1] == "experiment" for k in d)
                           for d in _DEFAULTS) else "+experiment")


def compose_with_hydra(overrides: list[str]):
    """The composed DictConfig including its ``hydra`` node (sweeper params, job settings)."""
    from hydra import compose, initialize_config_module

    from ragen2.compose import normalize_overrides, register_schema
    from ragen2.train import CONFIG_MODULE

    register_schema()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(config_name="config", overrides=normalize_overrides(overrides),
                       return_hydra_config=True)


def assert_paper_setup(c: Config) -> None:
    """The RAGEN-2 numbers every paper experiment shares, whatever the algorithm and filter."""
    assert (c.rollout.env_groups, c.rollout.group_size) == (8, 16)
    assert c.rollout.max_turns == (1 if c.env.id == "ragen2/Countdown-v0" else 5)
    assert c.trainer.total_steps == 400
    a = c.algorithm
    assert (a.lr, a.critic_lr) == (1e-6, 1e-5)
    assert a.kl_coef == 0.0
    assert (a.gamma, a.lam, a.lr_warmup_steps) == (1.0, 1.0, 0)
    e = c.engine
    assert (e.name, e.max_new_tokens, e.temperature, e.eval_temperature) == ("vllm", 400, 1.0, 0.5)
    assert not e.enforce_eager and not e.sleep_mode
    assert c.model.dtype == "bfloat16" and c.model.name == "hf"
    assert c.cluster.device == "cuda" and c.cluster.backend == "nccl"
    assert c.sync.tolerance(c.model.dtype) == pytest.approx(0.1)  # bf16, by model.dtype
    assert not c.trainer.warm_start.enabled
    # Code's 42 tasks: its 15 held-out ones, each once (docs/reference/deviations.md)
    assert c.trainer.eval_episodes == (15 if c.env.id == "ragen2/Code-v0" else 512)
    assert c.rollout.format_penalty == -0.1
    # a whole episode fits the context, and the context fits the engine
    assert e.max_model_len >= c.rollout.max_context_tokens >= 4096
    # colocated: one engine per learner GPU (ragen2.config.ClusterConfig)
    if c.cluster.layout == "colocated":
        assert c.rollout.num_workers * e.tensor_parallel_size == c.cluster.learner_world_size


def assert_algorithm(c: Config, algorithm: str) -> None:
    a = c.algorithm
    assert a.name == algorithm
    assert a.adv_estimator == ("gae" if algorithm == "ppo" else "grpo")
    assert a.norm_adv_by_std is (algorithm != "drgrpo")
    assert a.loss_agg_mode == ("seq-mean-token-sum-norm" if algorithm == "drgrpo" else "token-mean")
    if algorithm in ("dapo", "drgrpo"):
        assert a.dual_clip_c is None
    # RAGEN-2's entropy bonus and clip-higher for the algorithms it ran; DAPO and Dr.GRPO as
    # defined (no entropy bonus; Dr.GRPO's symmetric clip)
    assert a.entropy_coef == (0.001 if algorithm in ("ppo", "grpo") else 0.0)
    assert (a.clip_ratio_low, a.clip_ratio_high) == (0.2, 0.2 if algorithm == "drgrpo" else 0.28)


def assert_filter(c: Config, filt: str) -> None:
    f = c.filter
    assert f.strategy == ("none" if filt == "none" else "top_p")
    assert f.tiered.enabled is (filt == "tiered")
    if filt != "none":
        assert (f.value, f.metric, f.include_zero) == (0.9, "reward_std", False)


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("env", ENVS)
def test_paper_experiment_composes_and_validates(env, algorithm, filt):
    c = load_config([f"{EXP}=ragen2_{env}", f"algorithm={algorithm}", f"filter={filt}"])
    assert c.env.id == ENVS[env]
    assert c.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert (c.cluster.learner_world_size, c.cluster.layout) == (8, "colocated")
    assert_paper_setup(c)
    assert_algorithm(c, algorithm)
    assert_filter(c, filt)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("env", ENVS)
def test_half_billion_variant(env, algorithm):
    c = load_config([f"{EXP}=ragen2_{env}_0.5b", f"algorithm={algorithm}", "filter=top_p"])
    assert c.env.id == ENVS[env]
    assert c.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert (c.cluster.learner_world_size, c.rollout.num_workers) == (1, 1)
    assert_paper_setup(c)
    assert_algorithm(c, algorithm)


def test_env_specific_settings():
    """Each env file sets what its env needs on top of the shared setup."""
    sokoban = load_config([f"{EXP}=ragen2_sokoban"])
    assert sokoban.env.kwargs == {"size": 6, "num_boxes": 1, "max_steps": 100}
    assert sokoban.rollout.format_penalty == -0.1  # RAGEN's, not env/sokoban.yaml's -1.0
    lake = load_config([f"{EXP}=ragen2_frozenlake"])
    assert lake.env.kwargs["is_slippery"] is True
    assert lake.env.kwargs["slip_prob"] == pytest.approx(2 / 3)
    assert (lake.env.kwargs["size"], lake.env.kwargs["hole_prob"]) == (4, 0.2)
    # the retry envs get as many attempts as the paper has turns (env/math.yaml has 3 turns)
    for env in ("math", "code"):
        c = load_config([f"{EXP}=ragen2_{env}"])
        assert c.env.kwargs["max_attempts"] == c.rollout.max_turns == 5
    code = load_config([f"{EXP}=ragen2_code"])
    assert code.rollout.max_context_tokens == code.engine.max_model_len == 6144


def test_model_override_on_the_command_line():
    # a command-line group choice wins over the experiment's `override /model`
    c = load_config([f"{EXP}=ragen2_sokoban", "model=qwen2.5_0.5b"])
    assert c.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert_paper_setup(c)


@pytest.mark.parametrize("preset,learners,workers,layout", [
    ("gpu_1", 1, 1, "colocated"), ("gpu_8", 8, 8, "colocated"), ("gpu_8_split", 4, 4, "split")])
def test_cluster_presets(preset, learners, workers, layout):
    c = load_config([f"cluster={preset}"])  # with the default (hf, tiny, fp32) config
    assert (c.cluster.device, c.cluster.backend) == ("cuda", "nccl")
    assert (c.cluster.learner_world_size, c.rollout.num_workers, c.cluster.layout) == (
        learners, workers, layout)
    paper = load_config([f"{EXP}=ragen2_sokoban", f"cluster={preset}"])
    assert (paper.cluster.learner_world_size, paper.rollout.num_workers) == (learners, workers)
    assert_paper_setup(paper)
    if layout == "split":  # the rollout GPUs are vLLM's alone
        assert paper.engine.gpu_memory_utilization > 0.8


def test_split_layout_refuses_sleep_mode():
    from ragen2.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_config([f"{EXP}=ragen2_sokoban", "cluster=gpu_8_split", "engine.sleep_mode=true"])
    assert e.value.key == "engine.sleep_mode"


def sweep_jobs(overrides: list[str]) -> tuple[dict[str, list[str]], list[list[str]]]:
    """The preset's hydra.sweeper.params and the jobs Hydra's basic sweeper makes of them."""
    params = OmegaConf.to_container(compose_with_hydra(overrides).hydra.sweeper.params)
    swept = {k: str(v).split(",") for k, v in params.items()}
    jobs = [[*overrides, *(f"{k}={v}" for k, v in zip(swept, values))]
            for values in itertools.product(*swept.values())]
    return swept, jobs


def test_algorithm_by_filter_sweep():
    base = [f"{EXP}=[ragen2_sokoban,ragen2_sweep]"]
    swept, jobs = sweep_jobs(base)
    assert swept == {"algorithm": list(ALGORITHMS), "filter": list(FILTERS)}
    assert len(jobs) == 12
    seen = set()
    for job in jobs:
        c = load_config(job)
        assert_paper_setup(c)
        assert c.env.id == "ragen2/Sokoban-v0"
        seen.add((c.algorithm.name, c.filter.strategy, c.filter.tiered.enabled))
    assert len(seen) == 12
    hydra = compose_with_hydra(base).hydra
    assert list(hydra.job.config.override_dirname.exclude_keys) == ["experiment"]


def test_top_p_sweep():
    base = [f"{EXP}=[ragen2_math_0.5b,top_p_sweep]", "algorithm=ppo"]
    swept, jobs = sweep_jobs(base)
    assert swept == {"filter.value": ["1.0", "0.98", "0.95", "0.9", "0.8", "0.6", "0.4"]}
    values = []
    for job in jobs:
        c = load_config(job)
        assert_paper_setup(c)
        assert (c.filter.strategy, c.filter.include_zero) == ("top_p", False)
        assert c.algorithm.name == "ppo"
        values.append(c.filter.value)
    assert values == [1.0, 0.98, 0.95, 0.9, 0.8, 0.6, 0.4]


def test_top_p_of_one_drops_only_zero_spread_groups():
    """What top_p_sweep.yaml says about p = 1.0 (and DAPO's dynamic sampling in dapo.yaml)."""
    from ragen2.filtering import select_groups

    spread = [0.5, 0.0, 0.1, 0.0, 0.4]
    assert select_groups(spread, "top_p", 1.0, include_zero=False).tolist() == [0, 2, 4]
    assert select_groups(spread, "top_p", 1.0, include_zero=True).tolist() == [0, 1, 2, 3, 4]
    # p < 1: zero-spread groups never enter the prefix either way (0.5 + 0.4 = 0.9 of 1.0)
    for include_zero in (False, True):
        assert select_groups(spread, "top_p", 0.9, include_zero=include_zero).tolist() == [0, 4]


def _yaml_presets() -> list[tuple[str, str]]:
    out = []
    for path in sorted(CONFIGS.rglob("*.yaml")):
        rel = path.relative_to(CONFIGS)
        # algorithm_invariants follow the chosen algorithm (tests/test_recipe.py), never chosen;
        # hydra/launcher/* are Hydra's own groups, needing their plugin (tests/test_launch_examples.py)
        if rel.parts != ("config.yaml",) and rel.parts[0] not in ("algorithm_invariants", "hydra"):
            out.append((rel.parent.as_posix(), rel.stem))
    return out


@pytest.mark.parametrize("group,name", _yaml_presets())
def test_every_preset_composes(group, name):
    data = yaml.safe_load((CONFIGS / group / f"{name}.yaml").read_text()) or {}
    if group == "experiment":
        overrides = [f"{EXP}={name}"]
    else:
        overrides = [f"{group}={name}"]
        if group == "model" and data.get("dtype") == "bfloat16":
            overrides.append("cluster=gpu_1")  # the bf16 model presets are sized for GPUs
        if group == "model" and data.get("path") == "???":  # model=hf: the user names the model
            with pytest.raises(ConfigError, match="model.name='hf': with model.path null"):
                load_config(overrides)
            overrides.append("model.path=/models/any")
    assert isinstance(load_config(overrides), Config)


def test_model_presets():
    c = load_config(["model=qwen2.5_3b", "cluster=gpu_8"])
    assert (c.model.name, c.model.path, c.model.dtype) == ("hf", "Qwen/Qwen2.5-3B-Instruct",
                                                           "bfloat16")
    c = load_config(["model=qwen2.5_0.5b", "cluster=gpu_1"])
    assert (c.model.name, c.model.path, c.model.dtype) == ("hf", "Qwen/Qwen2.5-0.5B-Instruct",
                                                           "bfloat16")
    c = load_config(["model=qwen2.5_0.5b", "model.dtype=float32"])  # runs on the CPU too
    assert c.cluster.device == "cpu"


# Qwen2-0.5B (and Qwen2.5-0.5B) as published: 494,032,768 parameters with its 151,936-token vocab.
QWEN2_05B_PARAMS = 494_032_768


def test_qwen2_half_billion_random_spec():
    c = load_config(["model=qwen2_0.5b_random", "cluster=gpu_1"])
    assert (c.model.name, c.model.path, c.model.dtype) == ("tiny", None, "bfloat16")
    s = TinyModelSpec.from_config(c.model.tiny)
    assert (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads) == (896, 24, 14, 2)
    assert (s.intermediate_size, s.max_position_embeddings) == (4864, 32768)
    assert s.tie_word_embeddings and s.rope_theta == 1e6
    # parameters by hand: per layer q (with bias), k and v (with bias, 2 KV heads of 64), o (no
    # bias), gate/up/down, two RMSNorms; then the final norm and one tied embedding
    head_dim = s.hidden_size // s.num_heads
    kv = s.num_kv_heads * head_dim
    h = s.hidden_size
    layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * s.intermediate_size + 2 * h
    body = s.num_layers * layer + h
    assert (head_dim, kv, layer, body) == (64, 128, 14_912_384, 357_898_112)
    assert body + s.vocab_size * h == QWEN2_05B_PARAMS  # vocab_size is Qwen's 151,936 (a bound)
    # ... and the same count from transformers' own Qwen2 built on the meta device (no memory)
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=s.vocab_size, hidden_size=h,
                         intermediate_size=s.intermediate_size, num_hidden_layers=s.num_layers,
                         num_attention_heads=s.num_heads, num_key_value_heads=s.num_kv_heads,
                         tie_word_embeddings=True)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    assert sum(p.numel() for p in model.parameters()) == QWEN2_05B_PARAMS


def test_the_ragen2_paper_filter_preset():
    """RAGEN-2's release filter (configs/filter/ragen2_paper.yaml cites the script): softmax
    top-p at 0.9 over the reward variance, largest first, zero-spread groups out, no loss scale."""
    f = load_config(["filter=ragen2_paper"]).filter
    assert (f.strategy, f.value, f.metric, f.keep) == ("top_p_softmax", 0.9, "reward_variance", "largest")
    assert (f.include_zero, f.temperature, f.loss_scale) == (False, 1.0, "none")


@pytest.mark.parametrize("env", ENVS)
def test_paper_presets_default_to_ragen2s_algorithm_and_filter(env):
    """Without algorithm= / filter=: PPO with GAE and RAGEN-2's release filter."""
    c = load_config([f"{EXP}=ragen2_{env}"])
    assert (c.algorithm.name, c.algorithm.adv_estimator) == ("ppo", "gae")
    assert (c.filter.strategy, c.filter.metric) == ("top_p_softmax", "reward_variance")
    # several actions per turn where an answer is a move; one where it is a number or code
    assert c.rollout.actions_per_turn == (5 if env in ("sokoban", "frozenlake") else 1)


def _deviation_rows() -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """(setting, presets, [(key, value)]) of the docs' "Deviations from RAGEN-2" table
    (docs/reference/deviations.md)."""
    import re

    section = (CONFIGS.parent / "docs" / "reference" / "deviations.md").read_text()
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 5 or cells[0] in ("setting", "---"):
            continue
        pairs = [tuple(kv.split("=", 1)) for kv in re.findall(r"`([\w.]+=[^`]+)`", cells[2])]
        presets = list(ENVS) if cells[3] == "all" else [p.strip() for p in cells[3].split(",")]
        rows.append((cells[0], presets, pairs))
    return rows


def test_the_deviations_table_matches_the_presets():
    rows = _deviation_rows()
    assert len(rows) >= 15 and all(pairs for _, _, pairs in rows)
    checked = 0
    for env in ENVS:
        for variant in ("", "_0.5b"):
            c = load_config([f"{EXP}=ragen2_{env}{variant}"])
            for setting, presets, pairs in rows:
                if env not in presets:
                    continue
                for key, value in pairs:
                    node = c
                    for part in key.split("."):
                        node = node[part] if isinstance(node, dict) else getattr(node, part)
                    expected = float(value) if isinstance(node, float) else yaml.safe_load(value)
                    assert node == expected, (env + variant, setting, key, node)
                    checked += 1
    assert checked > 200
