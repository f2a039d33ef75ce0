"""The learner's maths does not depend on how a batch is cut into micro-batches or mini-batches."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from ragen2.learner.rank import LearnerRank, StaleBatchError
from ragen2.train import load_config


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(path: str, *overrides: str) -> LearnerRank:
    cfg = load_config(["cluster.learner_world_size=1", "algorithm.lr=1e-3", *overrides])
    r = LearnerRank(cfg, path, 0, 1, threads=1)
    r.setup("127.0.0.1", _port())
    return r


def _batch(n: int = 6, length: int = 20, vocab: int = 50) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab, (n, length))
    lens = rng.integers(10, length + 1, n)
    attn = (np.arange(length)[None] < lens[:, None]).astype(np.int64)
    mask = attn * (rng.random((n, length)) < 0.6)
    mask[:, 0] = 0
    return {"input_ids": ids * attn, "attention_mask": attn, "loss_mask": mask.astype(np.int64),
            "logprobs": np.zeros((n, length), np.float32), "token_rewards": np.zeros((n, length), np.float32),
            "rewards": np.array([1, 0, 0, 1, 1, 1], np.float32)[:n],
            "group_ids": np.array([0, 0, 0, 1, 1, 1])[:n], "policy_version": np.zeros(n, np.int64)}


def _run(path: str, *overrides: str) -> tuple[dict, dict]:
    r = _rank(path, *overrides)
    try:
        m = r.update(_batch(), step=1)
        return m, r.policy_weights()
    finally:
        r.shutdown()


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batch_size_does_not_change_the_update(tiny_model_path, agg):
    m1, w1 = _run(tiny_model_path, "algorithm.micro_batch_size=1", f"algorithm.loss_agg_mode={agg}")
    m8, w8 = _run(tiny_model_path, "algorithm.micro_batch_size=8", f"algorithm.loss_agg_mode={agg}")
    assert m1["actor/loss"] == pytest.approx(m8["actor/loss"], rel=1e-5, abs=1e-7)
    assert m1["actor/grad_norm"] == pytest.approx(m8["actor/grad_norm"], rel=1e-4)
    # Adam's first step is ~lr * sign(grad): a weight whose gradient is ~0 can move by a different
    # amount under float reordering, so weights are compared to 1% of lr (1e-3), not bit for bit.
    for k in w1:
        np.testing.assert_allclose(w1[k], w8[k], atol=1e-5, err_msg=k)


def test_logprob_gap_and_version(tiny_model_path):
    """Engine logprobs of 0 make the gap equal the learner's mean negative logprob (> 0)."""
    r = _rank(tiny_model_path)
    try:
        m = r.update(_batch(), step=1)
        assert m["actor/logprob_gap"] > 1.0  # a random model: -log p is about log(vocab)
        assert m["actor/policy_version"] == 1 and r.get_version() == 1
        with pytest.raises(StaleBatchError, match="policy version"):
            r.update(_batch(), step=2)  # still stamped version 0
    finally:
        r.shutdown()
