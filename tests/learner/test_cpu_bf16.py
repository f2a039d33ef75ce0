"""bf16 on the CPU (``model.dtype=bfloat16``, what ``auto`` picks on CPUs with avx512_bf16): one
learner rank computes in bf16 with fp32 master weights, updates, and scores like fp32 to bf16's
rounding. (Two ranks: the ``bf16`` scenario of tests/learner/test_rank_world2.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from tests.learner.test_rank import _batch, _rank

IDS = [5, 17, 40, 3, 99, 12, 8, 230, 41, 41, 7, 300, 2, 64, 9, 10]


def test_one_bf16_rank_updates_with_fp32_masters(tiny_model_path):
    fp32 = _rank(tiny_model_path)
    try:
        ref, before = fp32.logprobs(IDS), fp32.policy_weights()
        ref_m = fp32.update(_batch(), step=1)
    finally:
        fp32.shutdown()
    r = _rank(tiny_model_path, "model.dtype=bfloat16")
    try:
        assert r.state.sharded  # mixed precision is an FSDP2 policy, even on one rank
        lp = r.logprobs(IDS)
        gap = np.abs(np.subtract(lp, ref)).mean()
        assert 0 < gap < 0.05, gap  # the same weights, bf16 compute
        m = r.update(_batch(), step=1)
        assert m["actor/optimizer_steps"] == ref_m["actor/optimizer_steps"]
        assert m["actor/grad_norm"] == pytest.approx(ref_m["actor/grad_norm"], rel=0.05)
        after = r.policy_weights()
        assert all(v.dtype == np.float32 for v in after.values())
        assert any(not np.array_equal(before[k], after[k]) for k in before)
    finally:
        r.shutdown()
