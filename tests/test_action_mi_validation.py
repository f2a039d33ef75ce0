"""I(A; Z | X) tells a policy that acts on its reasoning from one whose reasoning is decoration (tier 2).

Two policies are warm-started on the same env (`tests/choice_env.py`, ChoiceWord: twelve valid
words, any of them wins) with the same reasoning, a random pick of the allowed words. One answers
what it picked, the other an independent random pick. Both win and reason alike, so neither
success nor the prompt-side MI (~0 for both: the allowed words are the same for every prompt)
tells them apart; ``collapse/action/mi`` must. The tiny model is built once and both runs load it
(``model=hf model.path=<tiny> recipe=tiny``), each with its own cached warm start.
"""

from __future__ import annotations

import pytest

from tests.control_arms import step1_rows
from tests.runs import ONE_RANK

pytestmark = pytest.mark.e2e

BASE = ["env.id=tests.choice_env:ChoiceWord-v0", "trainer.total_steps=1", "monitor.every=1",
        "rollout.max_turns=1", "rollout.env_groups=12", "rollout.group_size=4",
        "trainer.warm_start.random_action_prob=0", "trainer.warm_start.episodes=4096",
        "trainer.warm_start.epochs=4", "trainer.warm_start.batch_size=16",
        "trainer.warm_start.lr=1e-3", "trainer.eval_episodes=16", "trainer.eval_every=0",
        "trainer.loggers=[jsonl]", ONE_RANK,
        # nothing here reads the probe panel (its default, 32 prompts x 4 samples at steps 0 and 1,
        # cost more than the step itself): off
        "monitor.panel_size=0"]


def test_action_mi_separates_acting_on_reasoning_from_decoration(ray_session, tmp_path):
    """Own run: two arms, each warm-started on its own answers (the control study itself)."""
    step1 = step1_rows(BASE, "env.kwargs.answer", ("follow", "independent"), tmp_path)
    keys = ("rollout/success", "collapse/mi", "collapse/action/mi", "collapse/action/mi_null",
            "collapse/action/mi_p_value", "collapse/action/mi_bound", "collapse/action/log_k",
            "collapse/action/retrieval_acc@1", "collapse/action/retrieval_chance@1",
            "collapse/action/h_cond", "collapse/action/n_samples")
    for mode, r in step1.items():
        print(mode, {k: round(r[k], 3) for k in keys})
    f, i = step1["follow"], step1["independent"]
    # The follow policy learns its copy in a jump: its warm-start loss sits at ~0.47 (answers
    # independent of its pick), then falls to ~0.12 within ~50 steps once it copies. At lr 3e-3
    # the jump came late or never: 2 of 6 warm starts measured 2026-12-05 jumped within 768
    # steps (seeds 0 and 1, with other words, five repeats, and the code before and after a
    # change at float-rounding level: attention mask dropped for right-padded rows), one only
    # at step ~1,150, and CI failed on one that did not (action mi 0.000). At lr 1e-3 all 4
    # measured jumped at steps ~320-450 (seeds 0, 1, 2, and 3 with model.tiny.seed=1); the 4
    # epochs (1,024 steps) leave twice that. Step 1 here (2 CPU cores, empty caches, 295 s):
    #   follow:      success 1.00, action mi 1.30 of bound 1.30, null -5.0, p 0.048 (=1/21),
    #                retrieval@1 1.00 (chance 0.27), H(A|X,Z) 0.005
    #   independent: success 0.98, action mi 0.00, p 0.24, retrieval@1 0.36 (chance 0.26: its
    #                47 samples put chance's 3 standard deviations at +0.19), H(A|X,Z) 2.52
    # Both policies do the task, and for both the prompt-side MI is ~0 (the prompt carries
    # nothing to reason about) ...
    assert f["rollout/success"] > 0.8 and i["rollout/success"] > 0.8
    assert abs(f["collapse/mi"]) < 0.1 and abs(i["collapse/mi"]) < 0.1
    assert f["collapse/action/n_samples"] >= 44 and i["collapse/action/n_samples"] >= 44
    # ... but only one answer carries its reasoning: near the batch's bound (mean over samples of
    # log(4 / #identical reasonings in the group): about 1.3 nats for 12 words in groups of 4), far
    # above its floor, its own reasoning retrieved well above chance
    assert f["collapse/action/mi"] > 0.6 * f["collapse/action/mi_bound"]
    assert f["collapse/action/mi"] > f["collapse/action/mi_null"] + 1.0
    assert f["collapse/action/mi_p_value"] < 0.1
    assert f["collapse/action/retrieval_acc@1"] > f["collapse/action/retrieval_chance@1"] + 0.3
    # the other's answers ignore what it reasoned: ~0 and retrieval at chance
    assert abs(i["collapse/action/mi"]) < 0.05
    assert i["collapse/action/retrieval_acc@1"] < i["collapse/action/retrieval_chance@1"] + 0.2
