"""The learner's maths does not depend on how a batch is cut into micro-batches or mini-batches."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.controller import learner_settings
from ragen2.learner.rank import LearnerRank, StaleBatchError
from ragen2.train import load_config
from tests.learner.pinned import pinned


def _rank(path: str, *overrides: str) -> LearnerRank:
    cfg = load_config(pinned("cluster.learner_world_size=1", "algorithm.lr=1e-3", *overrides))
    r = LearnerRank(cfg, path, 0, 1, threads=1, settings=learner_settings(cfg))
    r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
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


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
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


def test_sample_weights_and_loss_scale_scale_the_update(tiny_model_path):
    r = _rank(tiny_model_path)
    try:
        base = r.update(_batch(), step=1)
    finally:
        r.shutdown()
    for extra, factor in [({"sample_weights": np.full(6, 2.0, np.float32)}, 2.0),
                          ({"loss_scale": np.array(0.5)}, 0.5)]:
        r = _rank(tiny_model_path)
        try:
            m = r.update({**_batch(), **extra}, step=1)
        finally:
            r.shutdown()
        assert m["actor/grad_norm"] == pytest.approx(factor * base["actor/grad_norm"], rel=1e-4)
    # rewards are [1, 0, 0 | 1, 1, 1]: only group 0 has advantages, so weighting it out leaves no
    # gradient and weighting out group 1 changes nothing
    for weights, expected in [([1, 1, 1, 0, 0, 0], base["actor/grad_norm"]), ([0, 0, 0, 1, 1, 1], 0.0)]:
        r = _rank(tiny_model_path)
        try:
            m = r.update({**_batch(), "sample_weights": np.array(weights, np.float32)}, step=1)
        finally:
            r.shutdown()
        assert m["actor/grad_norm"] == pytest.approx(expected, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("target", ["loss", "advantage"])
def test_sample_weights_weight_the_whole_loss_or_only_the_advantages(tiny_model_path, target):
    """Rewards without spread (no task gradient): the gradient is the entropy term's. Halving
    every sample's weight halves it with weight_target=loss; with weight_target=advantage the
    regulariser keeps full weight and the gradient does not move. The filter decides once, on the
    controller's side: its regulariser weights travel in the batch."""
    from ragen2.filtering.pipeline import FilterPipeline

    filt = FilterPipeline(load_config([f"filter.tiered.weight_target={target}"]).filter, seed=0)
    extra = ["algorithm.entropy_coef=0.05", "algorithm.grad_clip=1e9"]
    norms = []
    for w in (1.0, 0.5):
        r = _rank(tiny_model_path, *extra)
        weights = np.full(6, w, np.float32)
        try:
            m = r.update({**_batch(), "rewards": np.ones(6, np.float32), "sample_weights": weights,
                          "regulariser_weights": filt.regulariser_weights(weights)}, step=1)
        finally:
            r.shutdown()
        norms.append(m["actor/grad_norm"])
    assert norms[0] > 0
    assert norms[1] == pytest.approx((0.5 if target == "loss" else 1.0) * norms[0], rel=1e-4)


@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
def test_grad_snr_measures_without_changing_the_policy(tiny_model_path, entropy_coef):
    r = _rank(tiny_model_path, f"algorithm.entropy_coef={entropy_coef}")
    try:
        before = r.policy_weights()
        batch = _batch()
        batch["rewards"] = np.array([1, 1, 1, 0, 1, 0], np.float32)  # group 0 has no spread
        out = r.grad_snr(batch, np.array([0, 0, 0, 1, 1, 1]))
        after = r.policy_weights()
    finally:
        r.shutdown()
    assert set(out) == {f"grad_snr/b{b}/{t}" for b in (0, 1)
                        for t in ("task_norm", "entropy_norm", "entropy_norm_raw")}
    assert out["grad_snr/b0/task_norm"] == 0.0  # zero advantages: no task gradient at all
    assert out["grad_snr/b1/task_norm"] > 0 and out["grad_snr/b0/entropy_norm_raw"] > 0
    for b in (0, 1):  # the entropy term as it enters the loss: its coefficient times its norm
        assert out[f"grad_snr/b{b}/entropy_norm"] == pytest.approx(
            entropy_coef * out[f"grad_snr/b{b}/entropy_norm_raw"], rel=1e-6)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])


def test_a_gated_update_gives_groups_without_spread_no_regulariser_gradient(tiny_model_path):
    norms = {}
    for gate in ("none", "threshold"):
        r = _rank(tiny_model_path, "algorithm.entropy_coef=0.05", f"algorithm.regulariser_gate={gate}")
        try:
            norms[gate] = r.update({**_batch(), "rewards": np.ones(6, np.float32)}, step=1)["actor/grad_norm"]
        finally:
            r.shutdown()
    assert norms["none"] > 0 and norms["threshold"] == 0.0


def test_snr_gated_regularisers_move_the_task_to_regulariser_ratio_per_bucket(tiny_model_path):
    """Group 0 has no reward spread (bucket 0), group 1 has (bucket 1). Gated by threshold, the
    entropy term of bucket 0 vanishes while bucket 1's is untouched: bucket 0's regulariser-to-task
    ratio goes from "all regulariser" to nothing, bucket 1's does not move."""
    batch = {**_batch(), "rewards": np.array([1, 1, 1, 0, 1, 0], np.float32)}
    out = {}
    for gate in ("none", "threshold"):
        r = _rank(tiny_model_path, "algorithm.entropy_coef=0.01",
                  f"algorithm.regulariser_gate={gate}")
        try:
            out[gate] = r.grad_snr(batch, np.array([0, 0, 0, 1, 1, 1]))
        finally:
            r.shutdown()
    plain, gated = out["none"], out["threshold"]
    assert plain["grad_snr/b0/entropy_norm"] > 0 and gated["grad_snr/b0/entropy_norm"] == 0.0
    assert gated["grad_snr/b1/entropy_norm"] == pytest.approx(plain["grad_snr/b1/entropy_norm"], rel=1e-6)
    assert gated["grad_snr/b1/task_norm"] == pytest.approx(plain["grad_snr/b1/task_norm"], rel=1e-6)


def test_score_matches_full_sequence_logprobs(tiny_model_path):
    import torch

    from ragen2.algos import logprobs_from_logits
    from ragen2.models.loading import load_causal_lm

    contexts = [list(range(5, 40)), list(range(60, 71))]
    conts = [[7, 8, 9], [10] * 6, [300, 20]]
    columns = np.array([[0, 1], [1, 0], [0, 1]])
    r = _rank(tiny_model_path)
    try:
        got = r.score(contexts, conts, columns, chunk=2)
    finally:
        r.shutdown()
    model = load_causal_lm(tiny_model_path, dtype="float32").eval()
    temp = load_config([]).engine.temperature
    assert len(got) == 6
    for s, k, value, n in got:
        ctx, c = contexts[columns[s, k]], conts[s]
        ids = torch.tensor([ctx + c])
        with torch.no_grad():
            lp = logprobs_from_logits(model(input_ids=ids).logits[:, :-1], ids[:, 1:], temp)
        assert n == len(c)
        assert value == pytest.approx(float(lp[0, len(ctx) - 1:].sum()), abs=1e-4)


def _own_logprobs(r: LearnerRank, batch: dict[str, np.ndarray]) -> np.ndarray:
    """The rank's per-token logprobs of each row's tokens (0 at each row's first token)."""
    out = np.zeros(batch["input_ids"].shape, np.float32)
    for i, (ids, attn) in enumerate(zip(batch["input_ids"], batch["attention_mask"])):
        n = int(attn.sum())
        out[i, 1:n] = r.logprobs([int(x) for x in ids[:n]])
    return out


def test_bounded_staleness_weights_the_update_by_the_behaviour_gap(tiny_model_path):
    """trainer.max_staleness=1: engine logprobs log 2 above the learner's own give every trained
    token the importance weight 1/2 (half the k = 0 gradient); log 4 below give 4, truncated at
    algorithm.tis_cap=2 (twice the gradient, every token truncated). Then a batch one version old
    trains and one two versions old is refused."""
    exact = ["algorithm.grad_clip=1e9", "algorithm.ppo_mini_batches=1"]
    r = _rank(tiny_model_path, *exact)
    try:
        own = _own_logprobs(r, _batch())
        base = r.update(_batch(), step=1)
    finally:
        r.shutdown()
    assert not any(k.startswith("async/") for k in base)  # k = 0: no correction, no metrics
    for shift, factor, truncated in [(np.log(2.0), 0.5, 0.0), (-np.log(4.0), 2.0, 1.0)]:
        r = _rank(tiny_model_path, *exact, "trainer.max_staleness=1", "algorithm.tis_cap=2")
        try:
            b = _batch()
            b["logprobs"] = ((own + shift) * b["loss_mask"]).astype(np.float32)
            m = r.update(b, step=1)
            assert m["actor/grad_norm"] == pytest.approx(factor * base["actor/grad_norm"], rel=1e-3)
            assert m["async/is_weight_mean"] == pytest.approx(factor, rel=1e-3)
            assert m["async/is_weight_max"] == pytest.approx(1 / np.exp(shift), rel=1e-3)
            assert m["async/is_truncated_frac"] == truncated
            if truncated:
                continue
            r.update(_batch(), step=2)  # version 0 at learner version 1: one version old, trains
            assert r.get_version() == 2
            with pytest.raises(StaleBatchError, match=r"max_staleness=1 allows versions 1..2"):
                r.update(_batch(), step=3)  # two versions old
        finally:
            r.shutdown()
