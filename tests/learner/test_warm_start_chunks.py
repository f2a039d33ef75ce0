"""The warm start's behaviour cloning run in chunks of steps per call (one Ray round trip each,
:data:`ragen2.controller.warm_start.STEPS_PER_CALL`) and read on the host once per step and once
per chunk gives, bit for bit, the weights, Adam state and ``warm_start/*`` metrics of the loop it
replaced: one call per step, the loss and accuracy read at every micro-batch.

In process (one rank, the tiny model); the same comparison on two gloo ranks runs in the learner
tests' shared two-rank spawn (``_worker`` below, tests/learner/two_ranks.py).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import ragen2.controller.warm_start as warm_start_module
import ragen2.learner.forward as forward_module
from ragen2.algos import logprobs_from_logits
from ragen2.batch import TrainingBatch
from ragen2.controller.warm_start import WarmStart
from ragen2.learner.build import new_optimizer
from ragen2.learner.fsdp import full_tensor
from ragen2.learner.group import sft_outcome
from ragen2.learner.ppo import allreduce, optimizer_step
from ragen2.run_state import UpdateResult
from tests.learner.test_host_syncs import counting_host_reads
from tests.learner.pinned import pinned
from tests.learner.test_rank import _rank
from tests.learner.two_ranks import counting_calls

#: 10 demonstration rows in batches of 3 (the last of each epoch 1 row), 2 epochs: 8 steps;
#: micro-batches of 2 rows: a step of 3 rows runs 2
OVERRIDES = ("trainer.warm_start.epochs=2", "trainer.warm_start.batch_size=3",
             "trainer.warm_start.lr=2e-3", "algorithm.micro_batch_size=2")
ROWS = 10


def demo_batch(n: int = ROWS, length: int = 24, vocab: int = 50) -> TrainingBatch:
    """Right-padded rows of random tokens, the loss mask on about 60% of each row's tokens."""
    rng = np.random.default_rng(1)
    lens = rng.integers(8, length + 1, n)
    attn = (np.arange(length)[None] < lens[:, None]).astype(np.int64)
    mask = attn * (rng.random((n, length)) < 0.6)
    mask[:, 0] = 0
    zeros = np.zeros((n, length), np.float32)
    return TrainingBatch(input_ids=rng.integers(3, vocab, (n, length)) * attn, attention_mask=attn,
                         loss_mask=mask.astype(np.int64), logprobs=zeros, token_rewards=zeros,
                         rewards=np.zeros(n, np.float32), group_ids=np.arange(n),
                         policy_version=np.zeros(n, np.int64))


def reference_sft_step(rank: Any, batch: TrainingBatch, rows: np.ndarray,
                       lr: float) -> dict[str, float]:
    """ragen2/learner/sft.py's step as it was (at 4cfe1c7): the loss and accuracy read on the host
    at every micro-batch, the metrics summed over the ranks after the optimiser step."""
    if rank.sft_optim is None:
        rank.sft_optim = new_optimizer(rank.trainable, rank.cfg.algorithm, lr)
    rows = np.asarray(rows)
    n_tok = float(batch.loss_mask[rows].sum())
    loss_sum = correct = 0.0
    with forward_module.train_mode(rank):
        for micro in forward_module.micro_batches(rank, batch, rows):
            host = forward_module.host_tensors(batch, micro, "input_ids", "attention_mask",
                                               "loss_mask")
            ids, attn, mask = (forward_module.to_device(rank, t) for t in host)
            gapped = forward_module.MaskFacts.of(host[2], host[1]).gapped
            kwargs = {"attention_mask": attn} if gapped else {}
            logits = rank.model(input_ids=ids, use_cache=False, **kwargs).logits[:, :-1]
            lp = logprobs_from_logits(logits, ids[:, 1:])
            mk = mask[:, 1:].float()
            loss = -(lp * mk).sum() / max(n_tok, 1.0)
            (loss * rank.world_size).backward()
            loss_sum += loss.detach().item()
            correct += float(((logits.argmax(-1) == ids[:, 1:]).float() * mk).sum())
    norms = optimizer_step(rank, [(rank.trainable, rank.sft_optim)], loss_sum)
    r = allreduce(rank, {"loss": loss_sum, "correct": correct})
    return {"warm_start/loss": r["loss"], "warm_start/token_acc": r["correct"] / max(n_tok, 1.0),
            "warm_start/grad_norm": norms[0] if norms else math.nan,
            "warm_start/nonfinite_skipped": float(norms is None)}


def reference_warm_start(r: Any, batch: TrainingBatch, n: int) -> tuple[dict[str, float], int]:
    """The controller's loop as it was (at 4cfe1c7): a permutation per epoch, one call per step
    of sorted rows; the last step's metrics (with the skips counted) and the calls made."""
    ws = r.cfg.trainer.warm_start
    rng = np.random.default_rng(ws.seed)
    steps_per_epoch = -(-n // ws.batch_size)
    m: dict[str, float] = {}
    calls = skipped = 0
    for _ in range(ws.epochs):
        perm = rng.permutation(n)
        for i in range(steps_per_epoch):
            rows = np.sort(perm[i * ws.batch_size:(i + 1) * ws.batch_size])
            m = reference_sft_step(r.state, batch, rows, ws.lr)
            calls += 1
            skipped += m["warm_start/nonfinite_skipped"]
    return {**m, "warm_start/nonfinite_skipped": skipped}, calls


class InProcessLearners:
    """:class:`ragen2.learner.group.LearnerGroup`'s ``sft_steps`` over one in-process rank (the
    batch itself stands in for its object ref); counts the calls (Ray round trips)."""

    def __init__(self, rank: Any) -> None:
        self.rank, self.calls = rank, 0

    def sft_steps(self, batch: TrainingBatch, steps: Any, lr: float) -> list[UpdateResult]:
        self.calls += 1
        return [UpdateResult(m, sft_outcome(m)) for m in self.rank.sft_steps(batch, steps, lr)]


def chunked_warm_start(r: Any, batch: TrainingBatch, n: int) -> tuple[dict[str, float], int]:
    """The controller's loop (:meth:`WarmStart.clone`) over ``r``: its metrics and calls made."""
    learners = InProcessLearners(r)
    ws = WarmStart(r.cfg, "model", SimpleNamespace(train_envs=[]),
                   SimpleNamespace(learners=learners))
    return ws.clone(batch, n), learners.calls


def final_state(r: Any) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """The policy's full weights and every tensor of the warm start's Adam state."""
    adam = [{k: full_tensor(v).clone() if torch.is_tensor(v) else v for k, v in s.items()}
            for s in r.state.sft_optim.state.values()]
    return {k: v.copy() for k, v in r.policy_weights().items()}, adam


def assert_identical(a: tuple, b: tuple) -> None:
    (wa, oa), (wb, ob) = a, b
    assert wa.keys() == wb.keys() and len(oa) == len(ob) > 0
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    for sa, sb in zip(oa, ob):
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k]) if torch.is_tensor(sa[k]) else sa[k] == sb[k], k


def _run(path: str, warm_start: Any, per_call: int = 16) -> tuple[dict, int, list[str], tuple]:
    """One warm start on a fresh rank: metrics, calls, the host reads of device values, and the
    final weights and Adam state."""
    r = _rank(path, *OVERRIDES)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(warm_start_module, "STEPS_PER_CALL", per_call)
            with counting_host_reads() as count:
                count.watch(r.model)
                m, calls = warm_start(r, demo_batch(), ROWS)
        assert count.in_model == []  # right-padded rows: the model reads no mask back
        return m, calls, count.reads, final_state(r)
    finally:
        r.shutdown()


@pytest.mark.parametrize("per_call", [16, 3])
def test_chunked_warm_start_equals_the_step_by_step_one_bit_for_bit(tiny_model_path, per_call):
    want, calls_before, reads_before, state_before = _run(tiny_model_path, reference_warm_start)
    got, calls_after, reads_after, state_after = _run(tiny_model_path, chunked_warm_start,
                                                      per_call)
    steps = 2 * 4
    assert all(math.isfinite(v) for v in want.values()) and want["warm_start/nonfinite_skipped"] == 0
    assert got == want and list(got) == list(want)  # every metric, bit for bit, in order
    assert_identical(state_after, state_before)
    # Ray round trips: one per step before, one per chunk now
    chunks = -(-steps // per_call)
    assert (calls_before, calls_after) == (steps, chunks)
    # host reads of device values (on CUDA each waits for the queued kernels): before, the loss
    # and the accuracy of every micro-batch (6 steps of 2, 2 steps of 1: 2 x 14) and each step's
    # finite check; now each step's finite check and one read of the chunk's metrics
    assert reads_before.count("aten._local_scalar_dense.default") == 2 * 14
    assert reads_before.count("Tensor.tolist") == steps and len(reads_before) == 28 + steps
    assert reads_after == ["Tensor.tolist"] * (steps + chunks)


# --------------------------------------------------------------- two ranks


def _worker(rank: int, path: str, rdv, out_dir: str) -> None:
    """Both ways on two gloo ranks (each rank half of every step's rows, FSDP's collectives and
    the metrics' all-reduce): rank 0's metrics, calls and final state. Runs in the learner tests'
    shared two-rank spawn (tests/learner/two_ranks.py)."""
    torch.set_num_threads(1)
    from ragen2.controller import learner_settings
    from ragen2.learner.rank import LearnerRank
    from ragen2.train import load_config

    result, per_call = {}, warm_start_module.STEPS_PER_CALL
    for name, warm_start in (("before", reference_warm_start), ("after", chunked_warm_start)):
        cfg = load_config(pinned("cluster.learner_world_size=2", *OVERRIDES))
        r = LearnerRank(cfg, path, rank, 2, threads=1, settings=learner_settings(cfg))
        rdv.setup(r)
        try:
            warm_start_module.STEPS_PER_CALL = 3
            gathers: list = []
            with counting_calls(torch.distributed, "all_gather_single", gathers):
                m, calls = warm_start(r, demo_batch(), ROWS)
            weights = {k: v.clone() for k, v in r.named_weights()}
            adam = [{k: full_tensor(v).clone() if torch.is_tensor(v) else v for k, v in s.items()}
                    for s in r.state.sft_optim.state.values()]
            result[name] = {"metrics": m, "calls": calls, "weights": weights, "adam": adam,
                            "all_gathers": len(gathers)}
        finally:  # the other jobs of the shared spawn see the module as it was
            warm_start_module.STEPS_PER_CALL = per_call
            r.shutdown()
    torch.save(result, f"{out_dir}/rank{rank}.pt")


def test_two_ranks_chunked_warm_start_is_bit_identical(two_rank_results):
    for r in two_rank_results["warm_start"]:
        before, after = r["before"], r["after"]
        assert after["metrics"] == before["metrics"]
        assert (before["calls"], after["calls"]) == (8, 3)
        # FSDP's all-gathers: before, each of the 5 parameter groups (4 blocks, the root) at
        # every micro-batch's forward and again for its backward (the root keeps its own); now
        # each group once a step (ragen2.learner.forward.between_steps): the same bits
        assert after["all_gathers"] == 5 * 8 < before["all_gathers"]
        assert_identical((after["weights"], after["adam"]), (before["weights"], before["adam"]))
