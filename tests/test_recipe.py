"""The recipe comes with the model (configs/recipe/<model>.yaml): tiny for the random-initialised
models ragen2 builds, pretrained (RAGEN-2's settings) for everything else; the tiny recipe on a
pretrained model is refused before anything starts, and so is a chat template ragen2 cannot
render turn by turn."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragen2.config import ConfigError
from ragen2.train import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# RAGEN's released settings for Qwen2.5-Instruct (configs/recipe/pretrained.yaml), by hand
PRETRAINED = dict(lr=1e-6, critic_lr=1e-5, lr_warmup_steps=0, clip=(0.2, 0.28), entropy_coef=1e-3,
                  kl_coef=0.0, warm_start=False, max_new_tokens=400, temperature=(1.0, 0.5),
                  context=(4096, 4096), micro_batch_tokens=4096)


def _recipe_values(c) -> dict:
    a, e = c.algorithm, c.engine
    return dict(lr=a.lr, critic_lr=a.critic_lr, lr_warmup_steps=a.lr_warmup_steps,
                clip=(a.clip_ratio_low, a.clip_ratio_high), entropy_coef=a.entropy_coef,
                kl_coef=a.kl_coef, warm_start=c.trainer.warm_start.enabled,
                max_new_tokens=e.max_new_tokens, temperature=(e.temperature, e.eval_temperature),
                context=(c.rollout.max_context_tokens, e.max_model_len),
                micro_batch_tokens=c.learner.micro_batch_tokens)


@pytest.mark.parametrize("overrides", [
    ["model=smollm2"],
    ["model=smollm2", "env=sokoban"],  # after the env preset's tiny-tokenizer budget of 64
    ["model=hf", "model.path=/models/Llama-3.2-3B-Instruct"],
    ["model=qwen2.5_0.5b", "model.dtype=float32"],
    ["model=smollm2", "algorithm=ppo"],  # after the algorithm group's lr and critic lr
])
def test_a_pretrained_model_gets_the_pretrained_recipe(overrides):
    c = load_config(overrides)
    assert c.recipe == "pretrained"
    want = dict(PRETRAINED)
    if c.model.name == "smollm2":  # on the CPU its recipe leaves the micro-batch to the memory
        # plan (configs/recipe/smollm2.yaml; tests/cluster/test_host_memory.py)
        assert c.learner.micro_batch_tokens in (4096, 2048, 1024, 512)
        want["micro_batch_tokens"] = c.learner.micro_batch_tokens
    assert _recipe_values(c) == want


@pytest.mark.parametrize("algorithm, entropy, clip_high", [
    ("grpo", 1e-3, 0.28), ("ppo", 1e-3, 0.28),
    ("dapo", 0.0, 0.28),    # DAPO is defined without an entropy bonus
    ("drgrpo", 0.0, 0.2),   # Dr.GRPO: no entropy bonus, the symmetric PPO clip
])
def test_the_recipe_keeps_what_defines_an_algorithm(algorithm, entropy, clip_high):
    for overrides in (["model=smollm2"], ["+experiment=ragen2_frozenlake"]):
        a = load_config([*overrides, f"algorithm={algorithm}"]).algorithm
        assert (a.lr, a.entropy_coef, a.clip_ratio_high, a.kl_coef) == (1e-6, entropy, clip_high, 0.0)


def test_the_tiny_model_keeps_its_recipe():
    c = load_config([])
    assert c.recipe == "tiny"
    assert (c.algorithm.lr, c.trainer.warm_start.enabled, c.trainer.warm_start.lr) == (5e-4, True, 2e-3)
    assert (c.engine.max_new_tokens, c.algorithm.entropy_coef) == (40, 0.0)
    assert load_config(["env=sokoban"]).engine.max_new_tokens == 64
    assert load_config(["model=qwen2_0.5b_random", "model.dtype=float32"]).recipe == "tiny"


def test_the_command_line_and_experiment_presets_still_win():
    c = load_config(["model=smollm2", "algorithm.lr=3e-6", "engine.max_new_tokens=128"])
    assert (c.algorithm.lr, c.engine.max_new_tokens, c.algorithm.critic_lr) == (3e-6, 128, 1e-5)
    c = load_config(["+experiment=ragen2_sokoban_0.5b", "algorithm.entropy_coef=0.01"])
    assert (c.recipe, c.algorithm.lr, c.algorithm.entropy_coef) == ("pretrained", 1e-6, 0.01)
    assert c.rollout.max_turns == 5 and c.algorithm.micro_batch_size == 4  # the preset's own keys


def test_every_model_preset_has_a_recipe():
    models = {p.stem for p in (CONFIGS / "model").glob("*.yaml")}
    recipes = {p.stem for p in (CONFIGS / "recipe").glob("*.yaml")}
    assert models <= recipes, f"models without configs/recipe/<model>.yaml: {models - recipes}"


def test_a_model_without_a_recipe_is_refused_naming_the_fix(tmp_path):
    """A user's own model preset (in their config directory) with no recipe file beside it."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text("name: hf\npath: /models/mine\n")
    mine = [f"hydra.searchpath=[file://{tmp_path}]", "model=mine"]
    with pytest.raises(ConfigError, match=r"configs/recipe/<model>.yaml") as e:
        load_config(mine)
    assert e.value.key == "recipe"
    assert load_config([*mine, "recipe=pretrained"]).recipe == "pretrained"


@pytest.mark.parametrize("overrides,model", [
    (["model=smollm2"], "'smollm2'"),
    (["model=hf", "model.path=Qwen/Qwen2.5-3B-Instruct"], "Qwen/Qwen2.5-3B-Instruct"),
])
def test_the_tiny_recipe_on_a_pretrained_model_is_refused(overrides, model):
    with pytest.raises(ConfigError, match="pretrained checkpoint it would wreck") as e:
        load_config([*overrides, "recipe=tiny"])
    assert e.value.key == "recipe" and model in str(e.value)


def test_the_tiny_recipe_is_accepted_on_a_saved_tiny_model(tiny_model_path, tmp_path):
    assert load_config(["model=hf", f"model.path={tiny_model_path}", "recipe=tiny"]).recipe == "tiny"
    bare = tmp_path / "pretrained"  # the same files without ragen2's marker: a checkpoint
    shutil.copytree(tiny_model_path, bare, ignore=shutil.ignore_patterns("ragen2_*.json"))
    with pytest.raises(ConfigError, match="pretrained checkpoint"):
        load_config(["model=hf", f"model.path={bare}", "recipe=tiny"])


def test_the_probe_tolerance_follows_the_dtype_unless_set():
    assert load_config([]).sync.tolerance("float32") == 1e-3
    c = load_config(["model=qwen2.5_0.5b", "cluster=gpu_1"])
    assert c.model.dtype == "bfloat16" and c.sync.tolerance(c.model.dtype) == 0.1  # the floor rules above it
    assert load_config(["sync.probe_tolerance=2e-3"]).sync.tolerance("bfloat16") == 2e-3
    with pytest.raises(ConfigError, match="null"):
        load_config(["sync.probe_tolerance=0"])


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "ragen2.train", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_the_command_line_refuses_the_tiny_recipe_on_smollm2(tmp_path):
    """No run: refused at config time."""
    r = _cli("model=smollm2", "recipe=tiny", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 2, r.stderr
    assert "recipe='tiny'" in r.stderr and "pretrained checkpoint" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "metrics.jsonl").exists()


def test_the_command_line_refuses_a_chat_template_before_ray_starts(tiny_model_path, tmp_path):
    """No run: refused before Ray starts. The template only keeps the last user message. The Ray address points nowhere: had the
    run reached Ray first, the error would be about connecting, not the template."""
    from tests.rollout.test_chat_templates import LAST_ONLY

    model = tmp_path / "m"
    shutil.copytree(tiny_model_path, model)
    (model / "chat_template.jinja").write_text(LAST_ONLY)
    r = _cli("model=hf", f"model.path={model}", "recipe=tiny", "cluster.address=127.0.0.1:1",
             f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr
    assert "chat template" in r.stderr.lower(), r.stderr
    assert "Traceback" not in r.stderr and "Ray" not in r.stderr, r.stderr
