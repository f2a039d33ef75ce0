"""Rows padded on the right are forwarded without an attention mask (causal attention gives their
real tokens the same logits, and SDPA then skips the blocks above the diagonal); a row with a hole
in its mask still gets the mask."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ragen2.learner.forward import MaskFacts, forward
from tests.learner.test_rank import _batch, _rank


def _t(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64)


@pytest.mark.parametrize("attn, gapped", [
    ([[1, 1, 1, 1], [1, 1, 1, 1]], False),  # no padding
    ([[1, 1, 1, 1], [1, 1, 0, 0]], False),  # right padding
    ([[1, 1, 1, 0], [0, 1, 1, 1]], True),   # left padding: a 0 before a 1
    ([[1, 0, 1, 1], [1, 1, 1, 1]], True),   # a hole inside a row
])
def test_only_a_hole_in_a_row_needs_the_mask(attn, gapped):
    a = _t(attn)
    facts = MaskFacts.of(a, a)
    assert facts.gapped is gapped
    # the other facts: first trained column (column 0 never counts) and trained tokens
    assert facts.first == 1 and facts.trained == int(a[:, 1:].sum())


def _forward(rank, b: dict, facts: bool, grad: bool) -> tuple[torch.Tensor, torch.Tensor, list]:
    ids, attn, mask = (torch.from_numpy(b[k]) for k in ("input_ids", "attention_mask", "loss_mask"))
    rank.model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(grad):
        lp, ent = forward(rank.state, rank.model, ids, attn, mask, entropy=True,
                          entropy_grad=grad, facts=MaskFacts.of(mask, attn) if facts else None)
    grads = []
    if grad:
        ((lp * mask).sum() + (ent * mask).sum()).backward()
        grads = [p.grad.detach().clone() for p in rank.state.trainable if p.grad is not None]
    m = mask.bool()
    return lp.detach()[m], ent.detach()[m], grads


def test_right_padded_rows_get_the_same_logprobs_without_the_mask(tiny_model_path):
    """Logprobs and entropies of the trained tokens equal bit for bit; the gradients equal up
    to float rounding (the causal kernel sums its blocks in another order)."""
    r = _rank(tiny_model_path)
    try:
        b = _batch(length=24)
        assert not bool(b["attention_mask"].all())  # the rows are padded (on the right)
        lp_mask, ent_mask, g_mask = _forward(r, b, facts=False, grad=True)  # mask passed
        lp_none, ent_none, g_none = _forward(r, b, facts=True, grad=True)  # no mask
        assert torch.equal(lp_mask, lp_none) and torch.equal(ent_mask, ent_none)
        assert len(g_mask) == len(g_none) > 0
        for x, y in zip(g_mask, g_none):
            torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6 * float(x.abs().max()))
    finally:
        r.shutdown()


def test_a_row_with_a_hole_still_gets_the_mask(tiny_model_path):
    """Left padding: forwarding it without the mask would change the logprobs (the check that
    this test can fail), so the facts keep the mask and the result is the masked one."""
    r = _rank(tiny_model_path)
    try:
        b = _batch(length=24)
        n = b["attention_mask"].sum(1)
        for k in ("input_ids", "attention_mask", "loss_mask"):  # right padding -> left padding
            b[k] = np.stack([np.roll(row, len(row) - int(m)) for row, m in zip(b[k], n)])
        ids, attn, mask = (torch.from_numpy(b[k]) for k in ("input_ids", "attention_mask",
                                                              "loss_mask"))
        assert MaskFacts.of(mask, attn).gapped
        lp_mask, _, _ = _forward(r, b, facts=False, grad=False)
        lp_facts, _, _ = _forward(r, b, facts=True, grad=False)
        assert torch.equal(lp_mask, lp_facts)
        with torch.no_grad():  # what dropping the mask would have given
            unmasked = forward(r.state, r.model, ids, torch.ones_like(attn), mask)[0][mask.bool()]
        assert not torch.allclose(unmasked, lp_mask, atol=1e-4)
    finally:
        r.shutdown()


def test_the_warm_start_step_reads_the_same_loss_without_the_mask(tiny_model_path):
    """The behaviour-cloning step forwards right-padded rows without the mask: its loss and token
    accuracy equal, bit for bit, those of the masked forward of the same weights."""
    from ragen2.algos import logprobs_from_logits
    from ragen2.batch import TrainingBatch

    r = _rank(tiny_model_path)
    try:
        b = _batch(length=24)
        ids, attn, mask = (torch.from_numpy(b[k]) for k in ("input_ids", "attention_mask",
                                                              "loss_mask"))
        with torch.no_grad():  # the reference: the masked forward, before the step
            logits = r.model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1]
            mk = mask[:, 1:].float()
            n_tok = float(mask.sum())
            loss = float(-(logprobs_from_logits(logits, ids[:, 1:]) * mk).sum() / n_tok)
            acc = float(((logits.argmax(-1) == ids[:, 1:]).float() * mk).sum()) / n_tok
        m = r.sft_step(TrainingBatch.of(b), np.arange(len(b["rewards"])), lr=1e-3)
        assert m["warm_start/loss"] == loss and m["warm_start/token_acc"] == acc
    finally:
        r.shutdown()
