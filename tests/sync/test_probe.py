"""ragen2/sync/probe.py: the post-sync probe end to end over stand-in actors (the worker's half is
``RolloutWorker.probe_continuation``, the learner's ``learner_logprobs_at``), by hand: a learner
whose policy is uniform over 4 tokens against engines reporting log 1/4, or not."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import ray

from ragen2.sync import ProbePolicy, WeightSyncError, run_probe
from ragen2.sync.probe import learner_logprobs_at, queries_of
from tests.learner.toy import toy_state

U = -math.log(4)


class _Worker:
    """``probe_continuation.remote(...)`` answers at once (``ray.get`` is the identity here)."""

    def __init__(self, top: float) -> None:
        self.probe_continuation = SimpleNamespace(
            remote=lambda ids, new, k: ([1, 2][:new], [{1: top, 0: top}, {2: top, 3: top}][:new]))


class _Learners:
    def __init__(self) -> None:
        self.rank = toy_state(vocab=4)

    def run(self, fn, *args):  # noqa: ANN001
        return [fn(self.rank, *args)]


def test_the_queries_and_the_learners_answers():
    full, queries = queries_of([5, 6], ([1, 2], [{1: U, 0: U}, {2: U}]))
    assert full == [5, 6, 1, 2] and queries == [(2, [1, 0]), (3, [2])]
    assert learner_logprobs_at(toy_state(vocab=4), full, queries) == [pytest.approx([U, U]),
                                                                      pytest.approx([U])]


def test_run_probe_measures_the_floor_then_checks(monkeypatch):
    monkeypatch.setattr(ray, "get", lambda refs: refs)
    policy = ProbePolicy(tolerance=0.01, multiple=4.0)
    m = run_probe(_Learners(), [_Worker(U), _Worker(U)], [0, 3], policy, version=0, new_tokens=2)
    assert m["sync/probe_logprob_gap"] == pytest.approx(0.0, abs=1e-6) and policy.floor is not None
    assert m["sync/probe_threshold"] == 0.01  # max(4 x floor ~ 0, the tolerance)
    with pytest.raises(WeightSyncError, match="rollout worker 1 scores the probe tokens with a "
                                              "mean \\|logprob gap\\| of 0.5"):
        run_probe(_Learners(), [_Worker(U), _Worker(U - 0.5)], [0, 3], policy, version=1,
                  new_tokens=2)
