"""A NaN/inf loss or gradient skips the optimiser step on every rank: weights and Adam untouched."""

from __future__ import annotations

import math

import numpy as np
import torch

from tests.learner.test_rank import _batch, _rank


def _weights(r) -> dict[str, np.ndarray]:
    """A copy of the full policy weights (on one rank ``policy_weights`` may share their memory)."""
    return {k: v.copy() for k, v in r.policy_weights().items()}


def _snapshot(r) -> tuple[dict[str, np.ndarray], list[dict[str, torch.Tensor]]]:
    """Full policy weights and a copy of every optimiser state tensor (Adam's moments, step)."""
    from ragen2.learner.fsdp import full_tensor

    optim = [{k: full_tensor(v).clone() if torch.is_tensor(v) else v for k, v in s.items()}
             for s in r.state.optim.state.values()]
    return _weights(r), optim


def _assert_same(a, b) -> None:
    (wa, oa), (wb, ob) = a, b
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    assert len(oa) == len(ob)
    for sa, sb in zip(oa, ob):
        for k in sa:
            assert torch.equal(sa[k], sb[k]), k
            assert torch.isfinite(sb[k]).all(), k


def _stamped(version: int, **changes) -> dict[str, np.ndarray]:
    batch = _batch()
    batch["policy_version"] = np.full(len(batch["rewards"]), version)
    return {**batch, **changes}


def test_nan_rewards_skip_the_update_and_leave_weights_and_adam_alone(tiny_model_path):
    r = _rank(tiny_model_path, "algorithm.ppo_mini_batches=2")
    try:
        clean = r.update(_batch(), step=1)  # Adam now has moments to poison
        assert clean["actor/nonfinite_skipped"] == 0 and clean["actor/optimizer_steps"] == 2
        before = _snapshot(r)
        rewards = np.array([1, 0, np.nan, 1, np.inf, 1], np.float32)  # both groups non-finite
        m = r.update(_stamped(1, rewards=rewards), step=2)
        _assert_same(before, _snapshot(r))
        assert m["actor/nonfinite_skipped"] == 2 and m["actor/optimizer_steps"] == 0
        assert math.isnan(m["actor/loss"]) and math.isnan(m["actor/grad_norm"])
        # the update still counts as a policy version (same weights): the controller's stays in step
        assert m["actor/policy_version"] == 2 and r.get_version() == 2
        after = r.update(_stamped(2), step=3)  # training goes on from the untouched state
        assert after["actor/nonfinite_skipped"] == 0 and math.isfinite(after["actor/loss"])
        assert any(not np.array_equal(before[0][k], v) for k, v in r.policy_weights().items())
    finally:
        r.shutdown()


def test_one_bad_mini_batch_is_skipped_the_others_apply(tiny_model_path):
    r = _rank(tiny_model_path, "algorithm.ppo_mini_batches=2")
    try:
        before = _snapshot(r)
        weights = np.array([1, np.inf, 1, 1, 1, 1], np.float32)  # row 1 (group 0): adv * inf
        m = r.update(_stamped(0, sample_weights=weights), step=1)
        assert m["actor/nonfinite_skipped"] == 1 and m["actor/optimizer_steps"] == 1
        for k in ("actor/loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
            assert math.isfinite(m[k]), k
        after = _snapshot(r)
        assert any(not np.array_equal(before[0][k], after[0][k]) for k in before[0])
        for s in after[1]:
            assert all(torch.isfinite(v).all() for v in s.values() if torch.is_tensor(v))
    finally:
        r.shutdown()


def test_nonfinite_critic_loss_skips_actor_and_critic(tiny_model_path, monkeypatch):
    """algorithm=ppo: a NaN value loss skips the whole mini-batch, policy and value model alike."""
    import ragen2.algos.objective as rank_mod  # the critic's term: objective.value_term

    r = _rank(tiny_model_path, "algorithm=ppo", "algorithm.ppo_mini_batches=1")
    try:
        critic = {k: v.clone() for k, v in r.state.critic.state_dict().items()}
        before = _snapshot(r)
        real = rank_mod.value_loss
        monkeypatch.setattr(rank_mod, "value_loss",
                            lambda *a, **k: (real(*a, **k)[0] * float("nan"), {}))
        m = r.update(_batch(), step=1)
        assert m["actor/nonfinite_skipped"] == 1 and m["actor/optimizer_steps"] == 0
        _assert_same(before, _snapshot(r))
        assert all(torch.equal(v, critic[k]) for k, v in r.state.critic.state_dict().items())
        assert not r.state.critic_optim.state  # Adam never stepped
    finally:
        r.shutdown()


def test_nonfinite_warm_start_step_is_skipped(tiny_model_path, monkeypatch):
    import ragen2.learner.sft as rank_mod

    r = _rank(tiny_model_path)
    try:
        before = _weights(r)
        real = rank_mod.logprobs_from_logits
        monkeypatch.setattr(rank_mod, "logprobs_from_logits",
                            lambda *a, **k: real(*a, **k) * float("inf"))
        m = r.sft_step(_batch(), np.arange(6), 1e-2)
        assert m["warm_start/nonfinite_skipped"] == 1.0 and math.isnan(m["warm_start/grad_norm"])
        after = _weights(r)
        for k in before:
            np.testing.assert_array_equal(before[k], after[k], err_msg=k)
        assert not r.state.sft_optim.state
        monkeypatch.setattr(rank_mod, "logprobs_from_logits", real)
        m = r.sft_step(_batch(), np.arange(6), 1e-2)
        assert m["warm_start/nonfinite_skipped"] == 0.0 and math.isfinite(m["warm_start/loss"])
    finally:
        r.shutdown()


# --------------------------------------------------------------- two ranks


def _worker(rank: int, path: str, rdv, out_dir: str) -> None:
    """Rank 1 alone sees a NaN loss (its gradients stay finite): both ranks must skip. Runs in
    the learner tests' shared two-rank spawn (tests/learner/two_ranks.py)."""
    torch.set_num_threads(1)
    import ragen2.learner.ppo as ppo
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config

    cfg = load_config(["cluster.learner_world_size=2", "algorithm.lr=1e-3",
                       "algorithm.ppo_mini_batches=2"])
    r = LearnerRank(cfg, path, rank, 2, threads=1, settings=learner_settings(cfg))
    rdv.setup(r)
    step = ppo.optimizer_step  # the update's step, in this process only (the next jobs: restored)
    try:
        ppo.optimizer_step = lambda s, pairs, loss: step(s, pairs,
                                                         float("nan") if rank == 1 else loss)
        before = {k: v.clone() for k, v in r.named_weights()}
        m = r.update(_batch(), step=1)
        same = all(torch.equal(before[k], v) for k, v in r.named_weights())
    finally:
        ppo.optimizer_step = step
        r.shutdown()
    torch.save({"metrics": m, "same": same}, f"{out_dir}/rank{rank}.pt")


def test_a_nan_loss_on_one_rank_skips_the_step_on_all(two_rank_results):
    for rank, out in enumerate(two_rank_results["nonfinite"]):
        assert out["same"], rank
        assert out["metrics"]["actor/nonfinite_skipped"] == 2, rank
        assert out["metrics"]["actor/optimizer_steps"] == 0, rank
