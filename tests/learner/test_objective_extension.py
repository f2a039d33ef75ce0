"""The objective is extended from outside ragen2: an advantage estimator registered here, in the
test module, is chosen by ``algorithm.adv_estimator`` and trains a step of the real learner (one
rank, the tiny model, no Ray) with no edit to ``ragen2/learner/``."""

from __future__ import annotations

import pytest

from ragen2.algos import ADVANTAGE_ESTIMATORS
from ragen2.algos.advantages import AdvantageEstimator, AdvantageInputs
from tests.learner.test_rank import _run

NAME = "test_doubled_grpo"


def doubled_grpo(x: AdvantageInputs, algorithm) -> tuple:
    """Twice GRPO's advantages: the policy gradient at ratio 1 is linear in them."""
    adv, _ = ADVANTAGE_ESTIMATORS.get("grpo").assign(x, algorithm)
    return 2.0 * adv, None


@pytest.fixture
def registered():
    ADVANTAGE_ESTIMATORS.register(NAME)(AdvantageEstimator(doubled_grpo))
    try:
        yield NAME
    finally:  # the registry is process-wide: other tests see it as it was
        ADVANTAGE_ESTIMATORS._items.pop(NAME)


def test_an_estimator_registered_outside_trains_a_step(tiny_model_path, registered):
    one = "algorithm.ppo_mini_batches=1"  # one step at ratio 1: the gradient is linear in A
    base, _ = _run(tiny_model_path, one)
    m, _ = _run(tiny_model_path, one, f"algorithm.adv_estimator={registered}")
    assert m["actor/optimizer_steps"] == 1 and m["actor/policy_version"] == 1
    assert m["actor/grad_norm"] == pytest.approx(2 * base["actor/grad_norm"], rel=1e-4)
    assert m["actor/loss"] == pytest.approx(2 * base["actor/loss"], rel=1e-4, abs=1e-7)
