"""benchmarks/trl_grpo_settings.py and ``trl_grpo.py --model``: the settings ragen2's side and TRL's
side of the SmolLM2 comparison are built with agree, both sides get the same prompt token ids, TRL's
completions get ragen2's reward, and a bad ``--model`` is refused. No model is run and TRL is not
imported (one test builds TRL's GRPOConfig where TRL is installed)."""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import pytest

from tests.scripts import load_benchmark

STEPS = 4


@pytest.fixture(scope="module")
def tgs():
    had_trl = "trl" in sys.modules
    mod = load_benchmark("trl_grpo_settings.py", "trl_grpo_settings")
    assert had_trl or "trl" not in sys.modules  # TRL is imported only where it is run
    return mod


@pytest.fixture(scope="module")
def tg():
    return load_benchmark("trl_grpo.py", "trl_grpo")


@pytest.fixture(scope="module")
def cfg(tgs):
    from ragen2.train import load_config

    return load_config(tgs.ragen2_overrides(STEPS, 1, "float32"))


@pytest.fixture(scope="module")
def both(tgs, cfg):
    """(ragen2's config, TRL's GRPOConfig keyword arguments), as the script builds them."""
    return cfg, tgs.trl_config_kwargs(tgs.settings(STEPS, 1, "float32", cfg=cfg))


def test_ragen2_side_is_the_preset_without_the_monitor(tgs):
    o = tgs.ragen2_overrides(STEPS, 1, "float32")
    assert o[0] == "+experiment=smollm2_math"
    assert {"monitor=none", "engine.stop=[]", "seed=1", f"trainer.total_steps={STEPS}",
            f"trainer.eval_every={STEPS}", "model.dtype=float32"} <= set(o)
    assert tgs.ragen2_overrides(STEPS, 1, "auto")[-1] in ("model.dtype=float32",
                                                          "model.dtype=bfloat16")


def test_sampling_settings_agree(both):
    cfg, kw = both
    assert kw["num_generations"] == cfg.rollout.group_size == 8
    assert kw["max_completion_length"] == cfg.engine.max_new_tokens == 128
    assert kw["temperature"] == cfg.engine.temperature == 1.0
    assert kw["top_p"] == cfg.engine.top_p == 1.0
    assert kw["top_k"] == 0 and kw["repetition_penalty"] == 1.0  # neither side uses them
    assert list(cfg.engine.stop) == []  # TRL's generate stops at EOS only
    assert not cfg.trainer.warm_start.enabled and cfg.rollout.max_turns == 1


def test_update_settings_agree(both):
    cfg, kw = both
    a = cfg.algorithm
    assert kw["learning_rate"] == a.lr == 1e-5
    assert kw["lr_scheduler_type"] == "constant" and kw["warmup_steps"] == a.lr_warmup_steps == 0
    assert kw["epsilon"] == a.clip_ratio_low == 0.2
    assert kw["epsilon_high"] == a.clip_ratio_high == 0.28
    assert kw["delta"] == a.dual_clip_c == 3.0  # TRL's two-sided bound = the dual clip
    assert kw["beta"] == a.kl_coef == 0.0
    assert kw["entropy_coef"] == a.entropy_coef == 0.001
    assert kw["loss_type"] == "dapo" and a.loss_agg_mode == "token-mean"
    assert kw["scale_rewards"] == "group" and a.norm_adv_by_std
    assert kw["num_iterations"] == a.ppo_epochs == 1
    assert kw["max_grad_norm"] == a.grad_clip == 1.0
    assert kw["weight_decay"] == a.weight_decay == 0.0
    assert kw["seed"] == cfg.seed == 1
    assert kw["bf16"] is False and cfg.model.dtype == "float32"


def test_batches_agree(both):
    """64 replies a generation; 2 optimiser steps of 32 rows, each of 2 micro-batches of 16."""
    cfg, kw = both
    batch = cfg.rollout.env_groups * cfg.rollout.group_size
    assert kw["per_device_train_batch_size"] * kw["steps_per_generation"] == batch == 64
    rows = kw["per_device_train_batch_size"] * kw["gradient_accumulation_steps"]
    assert rows == batch // cfg.algorithm.ppo_mini_batches == 32
    assert kw["steps_per_generation"] // kw["gradient_accumulation_steps"] == 2
    assert kw["max_steps"] == STEPS * cfg.algorithm.ppo_mini_batches
    assert kw["shuffle_dataset"] is False  # the problems in ragen2's order


def test_dtype_is_passed_to_both_sides(tgs, cfg):
    s = tgs.settings(STEPS, 1, "float32", cfg=cfg)
    assert tgs.trl_config_kwargs(replace(s, dtype="bfloat16"))["bf16"] is True
    with pytest.raises(ValueError, match="float16"):
        tgs.resolve_dtype("float16")


def test_grpo_config_takes_the_arguments(both, tmp_path):
    trl = pytest.importorskip("trl")  # the bench extra
    _, kw = both
    c = trl.GRPOConfig(output_dir=str(tmp_path), **kw)
    assert (c.generation_batch_size, c.steps_per_generation) == (64, 4)


def test_a_config_trl_cannot_match_is_refused(tgs, cfg):
    bad = replace(cfg, algorithm=replace(cfg.algorithm, ppo_epochs=2, kl_coef=0.1))
    with pytest.raises(ValueError, match=r"algorithm\.kl_coef=0\.1.*algorithm\.ppo_epochs=2"):
        tgs.settings(STEPS, 1, "float32", cfg=bad)


@pytest.fixture(scope="module")
def rows(tgs, cfg, smollm2_tokenizer):
    return tgs.prompt_rows(cfg, smollm2_tokenizer, 2)


def test_prompts_are_the_same_token_ids(tgs, cfg, rows, smollm2_tokenizer):
    from ragen2.rollout.chat import ChatRenderer, system_prompt
    from ragen2.rollout.envs import all_entries, make_env
    from ragen2.rollout.runner import env_instructions

    tok = smollm2_tokenizer
    assert [(r["step"], r["group"]) for r in rows] == [(s, g) for s in (1, 2) for g in range(8)]
    (entry,) = all_entries(cfg.env)
    renderer, env = ChatRenderer(tok), make_env(entry.id, entry.kwargs)
    for r in rows[:3] + rows[-2:]:
        assert tgs.trl_prompt_ids(tok, [r["prompt"]])[0] == r["ragen2_prompt_ids"]  # TRL's side
        obs, info = env.reset(seed=r["env_seed"])  # rendered here by hand
        system = system_prompt(env_instructions(env, info), response_format="plain")
        assert renderer.initial_prompt(system, obs) == r["ragen2_prompt_ids"]
        assert r["prompt"].endswith("<|im_start|>assistant\n") and "<think>" not in r["prompt"]


def test_completions_get_ragen2s_reward(tgs, cfg, rows, smollm2_tokenizer):
    """Right (1), a number but wrong (0), no number (0 - 0.1: invalid), empty (-0.1: format)."""
    from ragen2.rollout.runner import EpisodeSpec

    tok, r = smollm2_tokenizer, rows[0]
    a, op, b = re.search(r"What is (\d+) ([+-]) (\d+)\?", r["prompt"]).groups()
    right = int(a) + int(b) if op == "+" else int(a) - int(b)
    eos = [tok.eos_token_id]
    replies = [tok.encode(f"{a} {op} {b} = {right}") + eos,
               tok.encode(f"{a} {op} {b} = {right + 1}") + eos, tok.encode("I do not know") + eos,
               eos]
    spec = EpisodeSpec(r["env_seed"], 0, r["env"])
    trajs = tgs.Ragen2Episodes(cfg, tok).run([spec] * 4, replies)
    assert [t.reward for t in trajs] == pytest.approx([1.0, 0.0, -0.1, -0.1])
    assert [t.success for t in trajs] == [True, False, False, False]
    assert all(t.input_ids[:t.first_prompt_len] == r["ragen2_prompt_ids"] for t in trajs)
    assert [t.num_generated for t in trajs] == [len(x) for x in replies]


def test_a_bad_model_is_refused(tg, capsys):
    with pytest.raises(SystemExit) as e:
        tg.parse(["--model", "qwen"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --model: invalid choice: 'qwen'" in err and "tiny" in err and "smollm2" in err
    with pytest.raises(SystemExit) as e:
        tg.parse(["--dtype", "float32"])  # a SmolLM2-only option with the tiny model
    assert e.value.code == 2
    assert "--dtype only with --model smollm2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        tg.parse(["--model", "smollm2", "--steps", "0"])
    assert e.value.code == 2
    args = tg.parse(["--model", "smollm2", "--steps", "5"])
    assert (args.model, args.steps, args.seed, args.dtype) == ("smollm2", 5, None, None)


def test_trl_step_times_cover_a_generation_and_its_optimiser_steps():
    run = load_benchmark("trl_grpo_smollm2.py", "trl_grpo_smollm2")
    # start, then the end of each optimiser step: 2 a generation
    assert run.step_times([0.0, 1.0, 3.0, 6.0, 10.0], 2) == [3.0, 7.0]
    assert run.step_times([0.0, 1.0, 3.0, 6.0], 2) == [3.0]  # an unfinished generation is left out
    assert run.median_after_first([9.0, 1.0, 2.0, 3.0]) == 2.0  # step 1 warms up


def test_a_stopped_comparison_resumes_from_its_finished_stages(tgs, cfg, tmp_path, monkeypatch):
    """No run: the stages' results are written by hand and every process start is refused."""
    run = load_benchmark("trl_grpo_smollm2.py", "trl_grpo_smollm2")
    s = tgs.settings(STEPS, 1, "float32", cfg=cfg)
    work = run.open_work_dir(tmp_path / "cmp", s)
    assert tgs.load_settings(work).steps == STEPS
    assert run.open_work_dir(work, s) == work  # the same settings: resumed
    with pytest.raises(SystemExit, match="holds a comparison with other settings"):
        run.open_work_dir(work, replace(s, steps=STEPS + 1))

    def no_process(*a, **k):
        raise AssertionError("a finished stage was started again")

    monkeypatch.setattr(run.common, "run_watched", no_process)
    (work / "trl.json").write_text('{"step_s": [2.0, 3.0]}\n')
    (work / "trl.process.json").write_text('{"returncode": 0, "wall_s": 5.0}\n')
    assert run.child(work, ["trl"], work / "trl.log") == {
        "step_s": [2.0, 3.0], "process": {"returncode": 0, "wall_s": 5.0}}
    # a result without its process record is a stage that did not finish: it runs again
    (work / "eval_base.json").write_text('{"eval/success": 0.1}\n')
    with pytest.raises(AssertionError, match="started again"):
        run.child(work, ["eval", "base"], work / "eval_base.log")
    assert not (work / "eval_base.json").exists()
    # a ragen2 run folder without its process record: refused, not timed over two processes
    (work / "ragen2").mkdir()
    with pytest.raises(SystemExit, match="unfinished ragen2 side"):
        run.ragen2_side(work, s)
