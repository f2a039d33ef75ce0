"""``ragen2 eval``: the trainer's held-out evaluation of a model, without training (no Ray, no
learner): ``eval/*`` metrics over ``trainer.eval_episodes`` held-out seeds, written to eval.json."""

from __future__ import annotations

import json

from ragen2.evaluate import evaluate_model, main
from ragen2.rollout.archive import load_outcomes
from ragen2.rollout.envs import eval_entries
from ragen2.rollout.split import ProblemSplit
from ragen2.seeding import eval_seed
from ragen2.glossary import describe
from ragen2.train import load_config

OVERRIDES = ["engine=hf", "trainer.eval_episodes=4", "rollout.max_turns=2", "engine.max_new_tokens=16",
             "trainer.log_samples=2"]


def test_a_model_is_evaluated_on_held_out_seeds(tiny_model_path, tmp_path, capsys):
    model = ["model=hf", f"model.path={tiny_model_path}", "recipe=tiny"]
    assert main([*model, *OVERRIDES, "--out", str(tmp_path / "a")]) == 0
    assert "held-out success" in capsys.readouterr().out
    saved = json.loads((tmp_path / "a" / "eval.json").read_text())
    assert saved["episodes"] == 4 and 0 <= saved["eval/success"] <= 1
    assert saved["eval/num_turns_mean"] <= 2
    assert all(describe(k) for k in saved if "/" in k)
    assert len((tmp_path / "a" / "samples.jsonl").read_text().splitlines()) == 2
    # every episode's outcome, keyed by its held-out seed, agrees with the success rate
    outcomes = load_outcomes(tmp_path / "a" / "outcomes.jsonl")
    cfg = load_config([*model, *OVERRIDES])
    entries = eval_entries(cfg.env)
    held_out = ProblemSplit(entries, cfg.env.heldout_fraction).eval_specs(entries, 4)
    assert len(outcomes) == 4 and {seed for _, seed in outcomes} == {s.env_seed for s in held_out}
    assert min(seed for _, seed in outcomes) >= eval_seed(0)  # held-out seeds, resolved
    assert sum(outcomes.values()) / 4 == saved["eval/success"]
    # the evaluation's sampling seed is fixed: the same model scores the same episodes again
    again = evaluate_model(load_config([*model, *OVERRIDES]), tiny_model_path, tmp_path / "b")
    assert again["eval/reward_mean"] == saved["eval/reward_mean"]


def test_a_bad_override_exits_2_naming_it(capsys):
    assert main(["trainer.eval_episodez=4"]) == 2
    assert "eval_episodez" in capsys.readouterr().err
