"""ragen2/learner/forward.py: which rows a rank runs, its micro-batches, the masks' host facts and
the forward's logprobs and entropy, by hand (the logprobs on a toy LM whose logits are one bias
vector, tests/learner/toy.py: uniform over V = 4 tokens)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ragen2.config import Config
from ragen2.learner.forward import (MaskFacts, Rows, accepts_logits_to_keep, first_trained_position,
                                    forward, host_tensors, micro_batches, rank_rows)
from tests.learner.toy import BiasLM, batch_of, toy_state


def test_first_trained_position():
    assert first_trained_position(torch.tensor([[0, 0, 1, 1], [0, 0, 0, 1]])) == 2
    assert first_trained_position(torch.tensor([[1, 0, 0, 1]])) == 3  # column 0 never counts
    assert first_trained_position(torch.zeros(2, 5)) == 4  # none: the last column


def test_each_rank_takes_a_contiguous_share_padded_alike():
    mb = np.arange(10, 15)  # 5 rows over 2 ranks: 3 each, rank 1's last a dummy row
    r0 = rank_rows(SimpleNamespace(world_size=2, rank=0), mb)
    r1 = rank_rows(SimpleNamespace(world_size=2, rank=1), mb)
    assert r0.index.tolist() == [10, 11, 12] and r0.real.tolist() == [True, True, True]
    assert r1.index.tolist() == [13, 14, 10] and r1.real.tolist() == [True, True, False]


def test_micro_batches_of_rows_and_of_tokens():
    cfg = Config()
    s = toy_state(cfg=replace(cfg, algorithm=replace(cfg.algorithm, micro_batch_size=2)))
    batch = batch_of([[1] * 6] * 5, [[0, 1, 1, 1, 1, 1]] * 5)
    assert [m.index.tolist() for m in micro_batches(s, batch, np.arange(5))] == [[0, 1], [2, 3], [4]]
    # micro_batch_tokens: at most 12 padded tokens (2 rows of 6) per micro-batch
    s = toy_state(cfg=replace(cfg, learner=replace(cfg.learner, micro_batch_tokens=12)))
    micros = micro_batches(s, batch, np.arange(5))
    assert sorted(i for m in micros for i in m.index.tolist()) == [0, 1, 2, 3, 4]
    assert all(len(m.index) * 6 <= 12 for m in micros)


def test_host_tensors_trim_the_padding_and_zero_the_dummy_rows():
    batch = replace(batch_of([[5, 6, 7, 0], [8, 9, 0, 0]], [[0, 1, 1, 0], [0, 1, 0, 0]]),
                    attention_mask=np.array([[1, 1, 1, 0], [1, 1, 0, 0]]))
    ids, mask = host_tensors(batch, Rows(np.array([1, 0]), np.array([True, False])),
                             "input_ids", "loss_mask")
    assert ids.tolist() == [[8, 9, 0], [5, 6, 7]]  # the longest row's 3 columns
    assert mask.tolist() == [[0, 1, 0], [0, 0, 0]]  # the dummy row trains nothing


def test_mask_facts():
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 0]])
    attn = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    # trained: (0, 2) and (1, 1); (0, 3) is masked for the loss but padding
    # right padding has no hole (no mask needed); a 0 before a 1 is one
    assert MaskFacts.of(mask, attn) == MaskFacts(first=1, trained=2, gapped=False)
    assert MaskFacts.of(mask, torch.ones(2, 4, dtype=torch.long)).gapped is False
    assert MaskFacts.of(mask, torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])).gapped is True


def test_forward_logprobs_and_entropy_of_a_uniform_policy():
    s = toy_state(vocab=4)
    assert not accepts_logits_to_keep(s.model)  # BiasLM.forward takes no logits_to_keep

    class Keeps(BiasLM):
        def forward(self, input_ids, logits_to_keep=0, **kw):  # noqa: ANN001
            return super().forward(input_ids, **kw)

    assert accepts_logits_to_keep(Keeps(2))
    ids = torch.tensor([[1, 2, 3, 0]])
    mask = torch.tensor([[0, 0, 1, 1]])
    lp, ent = forward(s, s.model, ids, torch.ones_like(ids), mask, entropy=True)
    # from the first trained position on: log 1/4 and entropy log 4; before it nothing is computed
    assert lp.tolist()[0][2:] == pytest.approx([-math.log(4)] * 2)
    assert lp.tolist()[0][:2] == [0.0, 0.0]
    assert ent.tolist()[0][2:] == pytest.approx([math.log(4)] * 2)
    lp2, none = forward(s, s.model, ids, torch.ones_like(ids), mask, torch.tensor([2.0]))
    assert none is None and lp2.tolist()[0][2:] == pytest.approx([-math.log(4)] * 2)  # still uniform
