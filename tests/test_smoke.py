"""Tier 1's one end-to-end run (marked ``smoke``): the real parts together, once.

``four_steps`` (tests/conftest.py) trains 4 steps through Ray with two FSDP2 ranks and the vLLM
engine, syncing weights and probing them after every update, checkpointing every 2 steps; a
second run resumes from a copy of its step-2 checkpoint and must reproduce steps 3 and 4 exactly.
Every other end-to-end run is in tier 2 (``make test-e2e``).
"""

from __future__ import annotations

import json

import pytest

from ragen2.rollout.archive import load_outcomes
from ragen2.train import load_config, train
from tests.runs import resumable_copy, rows, small, without_timing

pytestmark = pytest.mark.smoke


def test_four_steps_log_metrics_and_checkpoint(four_steps):
    r = rows(four_steps)
    assert sorted(r) == [0, 1, 2, 3, 4]
    for step in range(1, 5):
        assert {"rollout/success", "rollout/reward_mean", "actor/loss", "actor/logprob_gap",
                "timing/step_s"} <= set(r[step])
        # on-policy fp32 CPU data: engine (vLLM) and learner logprobs agree
        assert r[step]["actor/logprob_gap"] < 1e-3
        assert r[step]["sync/probe_logprob_gap"] < 1e-3
        assert r[step]["actor/policy_version"] == step
    assert "eval/success" in r[0] and "eval/success" in r[4]
    for step in (0, 4):  # every held-out episode's outcome, on the same held-out seeds
        outcomes = load_outcomes(four_steps / "evaluations" / f"step_{step:06d}.jsonl")
        assert sum(outcomes.values()) / len(outcomes) == pytest.approx(r[step]["eval/success"])
    assert load_outcomes(four_steps / "evaluations" / "step_000000.jsonl").keys() == outcomes.keys()
    assert r[0]["sync/probe_logprob_gap"] < 1e-3  # the first sync, after the warm start
    latest = json.loads((four_steps / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 4
    assert not list((four_steps / "checkpoints").glob("*.tmp-*"))


def test_resume_continues_the_same_run(four_steps, ray_session, tiny_model_path, tmp_path):
    """Own run: the resume itself, from a copy of the reference run's step-2 checkpoint (no
    second reference run): steps 3 and 4 come out the same. (A finished run extended by a resume:
    tests/test_sweeps.py; the CLI after kill -9: tests/test_kill_resume.py.)"""
    run = resumable_copy(four_steps, tmp_path / "run", 2)
    train(load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2",
                            "trainer.resume=true")), run)
    full, resumed = rows(four_steps), rows(run)
    assert sorted(resumed) == [0, 1, 2, 3, 4]
    # it resumed (a run started over would rewrite every row): rows up to the checkpoint are kept
    # verbatim, wall times included, and the later ones are new
    assert all(resumed[step] == full[step] for step in (0, 1, 2))
    assert resumed[3]["timing/step_s"] != full[3]["timing/step_s"]
    for step in (3, 4):
        assert without_timing(resumed[step]) == without_timing(full[step])
