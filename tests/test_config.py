"""The typed config: defaults compose, and bad input fails in a few lines naming the key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragen2.compose import check_override_keys
from ragen2.config import ConfigError
from ragen2.train import load_config


def test_defaults_compose(base_config):
    c = base_config
    assert c.env.id == "ragen2/FrozenLake-v0" and c.model.name == "tiny" and c.model.path is None
    assert (c.rollout.env_groups, c.rollout.group_size) == (16, 4)
    assert c.trainer.warm_start.epochs == 3
    assert c.trainer.warm_start.enabled


def test_public_keys_override():
    c = load_config(["seed=3", "env.id=ragen2/FrozenLake-v0", "env.kwargs.size=5",
                     "rollout.env_groups=2", "rollout.group_size=3", "rollout.max_turns=4",
                     "trainer.total_steps=7", "trainer.save_every=2", "trainer.resume=true"])
    assert (c.seed, c.env.kwargs["size"], c.rollout.env_groups, c.rollout.group_size) == (3, 5, 2, 3)
    assert (c.rollout.max_turns, c.trainer.total_steps, c.trainer.save_every) == (4, 7, 2)
    assert c.trainer.resume is True


@pytest.mark.parametrize("override,key", [
    ("trainer.total_stepz=2", "trainer.total_stepz"),
    ("rollout.groupsize=2", "rollout.groupsize"),
    ("trainr.total_steps=2", "trainr"),
])
def test_unknown_key_suggests(override, key):
    with pytest.raises(ConfigError) as e:
        check_override_keys([override])
    assert e.value.key == key
    assert "allowed" in str(e.value)


@pytest.mark.parametrize("overrides", [["experiment=ragen2_sokoban"],
                                       ["seed=1", "experiment=ragen2_sokoban"]])
def test_an_optional_group_without_its_plus_says_to_add_one(overrides):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert e.value.key == "experiment"
    assert "+experiment=ragen2_sokoban" in str(e.value)
    assert load_config(["+experiment=ragen2_sokoban"]).env.id == "ragen2/Sokoban-v0"


def test_free_form_kwargs_are_allowed():
    check_override_keys(["env.kwargs.anything=1", "hydra.run.dir=/tmp/x", "+foo=1", "model=tiny"])


@pytest.mark.parametrize("override,key", [
    ("rollout.group_size=0", "rollout.group_size"),
    ("algorithm.clip_ratio_high=-1", "algorithm.clip_ratio_high"),
    ("algorithm.loss_agg_mode=mean", "algorithm.loss_agg_mode"),
    ("engine.top_p=1.5", "engine.top_p"),
    ("trainer.warm_start.random_action_prob=2", "trainer.warm_start.random_action_prob"),
    ("model.dtype=float16", "model.dtype"),  # fp16 is refused on the CPU device (bf16 runs)
    ("rollout.response_format=json", "rollout.response_format"),
    ("rollout.max_worker_restarts=-1", "rollout.max_worker_restarts"),
    ("trainer.early_stop.spread_frac=1.5", "trainer.early_stop.spread_frac"),
    ("trainer.early_stop.eval_patience=0", "trainer.early_stop.eval_patience"),
    ("monitor.panel_size=1", "monitor.panel_size"),
    ("monitor.panel_bootstrap=1", "monitor.panel_bootstrap"),
    ("monitor.on_collapse=retry", "monitor.on_collapse"),
    ("monitor.rollback_filter_factor=1", "monitor.rollback_filter_factor"),
    ("monitor.alert_patience=0", "monitor.alert_patience"),
    ("trainer.eval_episodes=2000000000", "trainer.eval_episodes"),  # would reach the panel seeds
    ("trainer.max_staleness=-1", "trainer.max_staleness"),
    ("trainer.max_staleness=1.5", "trainer.max_staleness"),
    ("algorithm.tis_cap=1", "algorithm.tis_cap"),  # a cap must be > 1 (the weights' mean is 1)
    ("algorithm.tis_cap=0.5", "algorithm.tis_cap"),
])
def test_out_of_range_values(override, key):
    with pytest.raises(ConfigError) as e:
        load_config([override])
    assert e.value.key == key


def test_the_cpu_split_layout_needs_this_jobs_own_ray():
    """On the CPU ``cluster.layout=split`` pins actors to this machine's core numbers."""
    assert load_config(["cluster.layout=split"]).cluster.layout == "split"
    with pytest.raises(ConfigError, match="local Ray") as e:
        load_config(["cluster.layout=split", "cluster.address=auto"])
    assert e.value.key == "cluster.layout"


@pytest.mark.parametrize("off", ["monitor.panel_size=0", "monitor.name=none", "monitor.every=0",
                                 "trainer.eval_every=0"])
def test_a_collapse_rollback_needs_the_probe_panel(off):
    load_config(["monitor.on_collapse=rollback"])
    with pytest.raises(ConfigError, match="probe panel|periodic held-out") as e:
        load_config(["monitor.on_collapse=rollback", off])
    assert e.value.key == "monitor.on_collapse"


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "ragen2.train", *args], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("args,needle", [
    (["trainer.total_stepz=2"], "total_stepz"),
    (["trainer.total_steps=abc"], "total_steps"),
    (["rollout.group_size=0"], "rollout.group_size"),
    (["env.id=ragen2/Nope-v0"], "ragen2/Nope-v0"),
])
def test_cli_errors_are_short_and_named(args, needle, tmp_path):
    """No run: the command line refuses each bad config before anything starts."""
    r = _cli(*args, f"hydra.run.dir={tmp_path}")
    assert r.returncode != 0
    err = r.stderr.strip()
    assert needle in err
    assert len(err.splitlines()) <= 8, err
    assert "Traceback" not in err


def test_tiered_pool_must_hold_a_step_of_prompts():
    from ragen2.config import ConfigError
    from ragen2.train import load_config

    with pytest.raises(ConfigError) as e:
        load_config(["filter=tiered", "filter.tiered.pool_size=4", "rollout.env_groups=8"])
    assert e.value.key == "filter.tiered.pool_size" and "rollout.env_groups=8" in str(e.value)
    assert load_config(["filter=tiered", "filter.tiered.pool_size=16"]).filter.tiered.pool_size == 16


@pytest.mark.parametrize("overrides,key,needle", [
    (["engine.sleep_mode=true"], "engine.sleep_mode", "cluster.device=cuda"),
    (["learner.cpu_offload=true"], "learner.cpu_offload", "cluster.device=cuda"),
    (["learner.attn_implementation=flash_attention_2"], "learner.attn_implementation",
     "cluster.device=cuda"),
    (["sync.strategy=cuda_ipc"], "sync.strategy", "cuda_ipc shares CUDA buffers"),
    (["engine=hf", "engine.multiprocess=true"], "engine.multiprocess", "only the vllm engine"),
    (["cluster.device=cuda", "cluster.backend=nccl", "engine=hf", "engine.sleep_mode=true"],
     "engine.sleep_mode",
     "engine=vllm"),
    (["cluster.device=cuda", "cluster.backend=nccl", "engine=vllm", "engine.sleep_mode=true",
      "cluster.layout=split"], "engine.sleep_mode", "colocated"),
    (["sync.strategy=carrier_pigeon"], "sync.strategy", "object_store"),
    (["sync.probe_tolerance=0"], "sync.probe_tolerance", "> 0"),
    (["engine.eval_temperature=-1"], "engine.eval_temperature", ">= 0"),
    (["learner.lora.rank=-2"], "learner.lora.rank", ">= 0"),
    (["learner.micro_batch_tokens=-1"], "learner.micro_batch_tokens", ">= 0"),
])
def test_gpu_only_and_sync_options_are_refused_with_the_rule(overrides, key, needle):
    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert e.value.key == key and needle in str(e.value)


def test_gpu_layouts_compose_without_a_gpu():
    """Composing and validating a GPU config needs no GPU (hardware is checked at launch)."""
    c = load_config(["cluster.device=cuda", "cluster.backend=nccl", "engine=vllm",
                     "engine.sleep_mode=true", "model.dtype=bfloat16", "sync.strategy=cuda_ipc"])
    assert c.engine.sleep_mode and c.sync.strategy == "cuda_ipc"


def test_context_budget_must_fit_the_vllm_model_length():
    from ragen2.config import ConfigError
    from ragen2.train import load_config

    with pytest.raises(ConfigError, match=r"rollout.max_context_tokens=4096: at most "
                                          r"engine.max_model_len=2048"):
        load_config(["engine=vllm", "rollout.max_context_tokens=4096"])
    load_config(["engine=vllm", "rollout.max_context_tokens=4096", "engine.max_model_len=4096"])


def test_monitor_mi_yaml_lists_every_monitor_key_at_its_default():
    """configs/monitor/mi.yaml is where a user reads the monitor's options: it names every
    MonitorConfig key, each at the dataclass default (so the YAML cannot drift from the code)."""
    import dataclasses
    from pathlib import Path

    import yaml

    from ragen2.config import MonitorConfig

    y = yaml.safe_load((Path(__file__).parent.parent / "configs/monitor/mi.yaml").read_text())
    d = dataclasses.asdict(MonitorConfig())
    assert set(y) == set(d)
    assert {k: y[k] for k in d} == d


def test_bounded_staleness_keys_and_their_rules():
    assert load_config([]).trainer.max_staleness == 0  # the default is the on-policy loop
    cfg = load_config(["trainer.max_staleness=2", "algorithm.tis_cap=null"])
    assert cfg.trainer.max_staleness == 2 and cfg.algorithm.tis_cap is None
    with pytest.raises(ConfigError, match="an integer >= 0") as e:
        load_config(["trainer.max_staleness=-1"])
    assert e.value.key == "trainer.max_staleness"
    with pytest.raises(ConfigError, match="null .no cap. or a number > 1"):
        load_config(["algorithm.tis_cap=1.0"])
    # colocated engines sleep through the update: nothing can be generated meanwhile
    with pytest.raises(ConfigError, match="engine.sleep_mode") as e:
        load_config(["trainer.max_staleness=1", "engine.sleep_mode=true"])
    assert e.value.key == "trainer.max_staleness"
