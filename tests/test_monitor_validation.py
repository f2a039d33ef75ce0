"""The MI monitor tells a policy that reads its input from one that recites a template (tier 2).

Two policies are warm-started on the same env (`tests/reasoning_env.py`, EchoWord) with the same
actions; only the reasoning differs: one restates the secret word, the other names a random word
that does not depend on the input. Both solve the task and both have near-zero token entropy, so
neither success nor entropy tells them apart; the monitor's MI and retrieval accuracy must.
"""

from __future__ import annotations

import pytest

from tests.control_arms import step1_rows
from tests.runs import ONE_RANK

pytestmark = pytest.mark.e2e

BASE = ["env.id=tests.reasoning_env:EchoWord-v0", "trainer.total_steps=1", "monitor.every=1",
        "rollout.max_turns=1", "rollout.env_groups=12", "rollout.group_size=4",
        "trainer.warm_start.random_action_prob=0", "trainer.warm_start.episodes=2048",
        "trainer.warm_start.epochs=2", "trainer.warm_start.batch_size=16",
        "trainer.warm_start.lr=3e-3", "trainer.eval_episodes=16", "trainer.eval_every=0",
        "trainer.loggers=[jsonl]", ONE_RANK,
        # nothing here reads the probe panel (its default, 32 prompts x 4 samples at steps 0 and 1,
        # cost more than the step itself): off
        "monitor.panel_size=0"]


def test_monitor_separates_describing_from_template_reasoning(ray_session, tmp_path):
    """Own run: two arms, each warm-started on its own reasoning (the control study itself)."""
    step1 = step1_rows(BASE, "env.kwargs.reasoning", ("describe", "template"), tmp_path)
    d, t = step1["describe"], step1["template"]
    # both policies do the task (chance: 1/12) and are nearly deterministic ... (the template
    # policy must answer a word its reasoning did not name, which it learns more slowly: its
    # success after this warm start was 0.71 on one machine with empty caches; with two learner
    # ranks 0.62 there and 0.96 on another. Half the warm start (1024 episodes) learns neither:
    # both ~0.1, measured)
    assert d["rollout/success"] > 0.5 and t["rollout/success"] > 0.5
    assert d["collapse/token_entropy"] < 0.2 and t["collapse/token_entropy"] < 0.2
    # ... but only one reasoning carries the input (bound: log 12 = 2.48 nats)
    assert d["collapse/mi"] > 1.0 and d["collapse/mi"] > d["collapse/mi_null"] + 0.5
    assert abs(t["collapse/mi"]) < 0.05
    assert d["collapse/retrieval_acc@1"] > 0.9
    assert t["collapse/retrieval_acc@1"] < 0.4  # chance is 1 / (distinct prompts)
