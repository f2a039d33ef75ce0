"""Shared-prefix forward: the plan worked by hand, and the same logprobs, gradients and update as
the full forward (world size 1 here; two FSDP2 ranks in test_rank_world2.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ragen2.learner.forward import forward, prefix_plan
from ragen2.learner.prefix import plan_shared_prefix, to_positions
from tests.learner.test_rank import _rank


def prefix_batch(seed: int = 0, vocab: int = 50) -> dict[str, np.ndarray]:
    """8 rows in 2 groups of 4 sharing a prompt (lengths 12 and 9), own responses of 3..8 tokens,
    right-padded to 20; the loss mask covers the responses (with a hole, as tool output makes)."""
    rng = np.random.default_rng(seed)
    width, rows = 20, []
    prompts = [rng.integers(3, vocab, 12), rng.integers(3, vocab, 9)]
    ids = np.zeros((8, width), np.int64)
    attn, mask = np.zeros_like(ids), np.zeros_like(ids)
    for i in range(8):
        p = prompts[i // 4]
        r = rng.integers(3, vocab, int(rng.integers(3, 9)))
        row = np.concatenate([p, r])
        rows.append(row)
        ids[i, :len(row)], attn[i, :len(row)] = row, 1
        mask[i, len(p):len(row)] = 1
        mask[i, len(p) + 1] = 0
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask,
            "logprobs": np.zeros((8, width), np.float32), "token_rewards": np.zeros((8, width), np.float32),
            "rewards": np.array([1, 0, 0, 1, 1, 1, 0, 1], np.float32),
            "group_ids": np.arange(8) // 4, "policy_version": np.zeros(8, np.int64)}


def test_plan_by_hand():
    # rows 0 and 2 share the prefix [5, 6] (first trained token at 3); row 1 shares nothing
    ids = torch.tensor([[5, 6, 7, 8, 9, 0],
                        [5, 4, 7, 8, 0, 0],
                        [5, 6, 7, 3, 3, 3]])
    attn = (ids > 0).long()
    attn[2] = 1
    mask = torch.tensor([[0, 0, 0, 1, 1, 0],
                         [0, 0, 0, 1, 0, 0],
                         [0, 0, 0, 0, 1, 1]])
    plan = plan_shared_prefix(ids, attn, mask, min_saving=-float("inf"))
    # row 2's first trained token is 4: its prefix [5, 6, 7] differs from row 0's [5, 6]
    assert plan.offset.tolist() == [2, 2, 3]
    assert plan.group.tolist() == [0, 1, 2]
    mask[2, 3] = 1  # now row 2 starts at 3 too: rows 0 and 2 share [5, 6]
    plan = plan_shared_prefix(ids, attn, mask, min_saving=-float("inf"))
    assert plan.group.tolist() == [0, 1, 0]
    assert plan.prefix_ids.tolist() == [[5, 6], [5, 4]]
    assert plan.suffix_ids.tolist() == [[7, 8, 9, 0], [7, 8, 0, 0], [7, 3, 3, 3]]
    assert plan.suffix_attn.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    # 2 x 2 prefix + 3 x 4 suffix = 16 tokens against 3 x 6 = 18: an 11% saving
    assert plan_shared_prefix(ids, attn, mask, min_saving=0.1) is not None
    assert plan_shared_prefix(ids, attn, mask, min_saving=0.2) is None
    mask[1, 1] = 1  # trained from position 1: no prefix to share
    assert plan_shared_prefix(ids, attn, mask, min_saving=-float("inf")) is None


def test_to_positions_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    # row 0: column j -> position 1 + 1 + j; row 1: offset 3 -> positions 4, 5 (6 is cut off)
    out = to_positions(x, torch.tensor([1, 3]), 6)
    assert out.tolist() == [[0, 0, 1, 2, 3, 0], [0, 0, 0, 0, 4, 5]]


@pytest.mark.parametrize("checkpointing", [False, True])
def test_shared_forward_equals_full_forward(tiny_model_path, checkpointing):
    """Logprobs at the trained tokens and the gradient of their sum, shared vs one full pass
    (activation checkpointing recomputes the passes in the backward)."""
    batch = prefix_batch()
    ids, attn, mask = (torch.from_numpy(batch[k]) for k in ("input_ids", "attention_mask", "loss_mask"))
    r = _rank(tiny_model_path, f"learner.activation_checkpointing={str(checkpointing).lower()}")
    try:
        plan = prefix_plan(r.state, ids, attn, mask)
        assert plan is not None and plan.group.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        out = {}
        for name, p in (("full", None), ("shared", plan)):
            lp, ent = forward(r.state, r.model, ids, attn, mask, entropy=True, entropy_grad=True,
                               plan=p)
            ((lp + ent) * mask).sum().backward()
            out[name] = (lp * mask, ent * mask,
                         {n: q.grad.clone() for n, q in r.model.named_parameters()})
            r.model.zero_grad(set_to_none=True)
    finally:
        r.shutdown()
    (lp_f, ent_f, g_f), (lp_s, ent_s, g_s) = out["full"], out["shared"]
    torch.testing.assert_close(lp_s, lp_f, rtol=0, atol=2e-5)
    torch.testing.assert_close(ent_s, ent_f, rtol=0, atol=2e-5)
    assert float(lp_f.detach().abs().sum()) > 1.0  # the mask selects real logprobs
    for n, g in g_f.items():  # float rounding only: relative to the tensor's largest entry
        assert float((g_s[n] - g).abs().max()) <= 1e-5 * float(g.abs().max()) + 1e-9, n


def test_update_same_with_and_without_sharing(tiny_model_path):
    out = {}
    for on in ("true", "false"):
        r = _rank(tiny_model_path, f"learner.shared_prefix={on}", "algorithm.ppo_mini_batches=1",
                  "algorithm.micro_batch_size=8", "algorithm.kl_coef=0.1")
        try:
            out[on] = r.update(prefix_batch(), step=1), r.policy_weights()
        finally:
            r.shutdown()
    (m_on, w_on), (m_off, w_off) = out["true"], out["false"]
    for key in ("actor/loss", "actor/grad_norm", "actor/entropy", "actor/kl_loss"):
        assert m_on[key] == pytest.approx(m_off[key], rel=1e-5, abs=1e-7), key
    for k in w_on:  # Adam's first step ~ lr * sign(grad): compared to 1% of lr (see test_rank)
        np.testing.assert_allclose(w_on[k], w_off[k], atol=1e-5, err_msg=k)
