"""The update reads device values on the host once per optimiser step and once at the end, never
per micro-batch, and that changes none of its numbers.

On CUDA a host read of a device value (``.item()``, ``float(t)``, ``.tolist()``, a boolean mask's
selection, ...) waits for every queued kernel. On the CPU nothing waits, so :class:`HostReads`
counts the reads that would: it marks the tensors the learner puts on its device (and everything
computed from them) and counts the host reads of marked tensors.
"""

from __future__ import annotations

import math
import weakref
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import ragen2.learner.forward as forward_module
import ragen2.learner.ppo as ppo_module
import ragen2.learner.sft as sft_module
from ragen2.algos.advantages import AdvantageInputs
from ragen2.algos.objective import (LossInputs, assign_credit, combined_regulariser_weights,
                                    compute_loss, snr_gate)
from ragen2.learner.forward import (MaskFacts, forward, holding, micro_batches, prefix_plan,
                                    scales, tensors)
from ragen2.learner.microbatch import mini_batches
from ragen2.learner.ppo import optimizer_step
from tests.learner.test_rank import _batch, _rank

aten = torch.ops.aten
#: ops whose output size, or result, the host must read (on CUDA: a synchronisation)
READS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
         aten.equal.default, aten.is_nonzero.default, aten._unique2.default,
         aten.unique_consecutive.default, aten.repeat_interleave.Tensor}
BOOL_INDEXED = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default}


class Marks:
    """A set of live tensors by identity (a WeakSet would compare tensors with ``==``)."""

    def __init__(self) -> None:
        self.refs: dict[int, weakref.ref] = {}

    def add(self, t: torch.Tensor) -> None:
        key = id(t)
        self.refs[key] = weakref.ref(t, lambda _: self.refs.pop(key, None))

    def __contains__(self, t: torch.Tensor) -> bool:
        ref = self.refs.get(id(t))
        return ref is not None and ref() is t


class HostReads(TorchDispatchMode):
    """Counts host reads of values computed on the learner's (here: simulated) device."""

    def __init__(self) -> None:
        super().__init__()
        self.device_values = Marks()
        self.reads: list[str] = []
        self.in_model: list[str] = []  # reads inside a model's forward (the model's own)
        self.depth = 0

    def watch(self, model: torch.nn.Module) -> None:
        """Count reads inside ``model``'s forward apart (transformers' own, e.g. its check that
        an attention mask has no padding)."""
        model.register_forward_pre_hook(lambda *_: setattr(self, "depth", self.depth + 1))
        model.register_forward_hook(lambda *_: setattr(self, "depth", self.depth - 1))

    def marked(self, tree: Any) -> bool:
        return any(isinstance(t, torch.Tensor) and t in self.device_values
                   for t in tree_flatten(tree)[0])

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.marked((args, kwargs)):
            bool_index = func in BOOL_INDEXED and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in tree_flatten(args[1])[0])
            if func in READS or bool_index:
                (self.in_model if self.depth else self.reads).append(str(func))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.device_values.add(t)
        return out


@contextmanager
def counting_host_reads() -> Iterator[HostReads]:
    """Within: a tensor the learner moves to its device is a fresh copy, marked; reads of marked
    tensors are counted (``.tolist()``, ``.cpu()``, ``.numpy()`` dispatch no op on the CPU, so
    they are counted here)."""
    mode = HostReads()
    to_device = forward_module.to_device

    def marked_copy(rank: Any, t: torch.Tensor) -> torch.Tensor:
        out = to_device(rank, t).clone()
        mode.device_values.add(out)
        return out

    patched = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu", "numpy")}

    def host_read(name: str) -> Any:
        def read(self: torch.Tensor, *a: Any, **k: Any) -> Any:
            if self in mode.device_values:
                mode.reads.append(f"Tensor.{name}")
            return patched[name](self, *a, **k)
        return read

    forward_module.to_device = ppo_module.to_device = sft_module.to_device = marked_copy
    for name in patched:
        setattr(torch.Tensor, name, host_read(name))
    try:
        with mode:
            yield mode
    finally:
        forward_module.to_device = ppo_module.to_device = sft_module.to_device = to_device
        for name, fn in patched.items():
            setattr(torch.Tensor, name, fn)


def _reads(path: str, *overrides: str, batch_version: int = 0) -> tuple[HostReads, dict]:
    r = _rank(path, *overrides)
    try:
        batch = _batch()
        if batch_version:  # one update first, so the batch below is one version old
            r.update(_batch(), step=1)
        batch["policy_version"][:] = batch_version - 1 if batch_version else 0
        with counting_host_reads() as count:
            for model in (r.model, r.state.ref, r.state.critic):
                if model is not None:
                    count.watch(model)
            m = r.update(batch, step=2)
        return count, m
    finally:
        r.shutdown()


CONFIGS = {
    "grpo": ("algorithm.ppo_mini_batches=2", "algorithm.entropy_coef=0.01"),
    "ppo_gae_kl": ("algorithm.adv_estimator=gae", "algorithm.kl_coef=0.05",
                   "algorithm.ppo_epochs=2"),
    "stale_k1": ("trainer.max_staleness=1", "engine.sleep_mode=false",
                 "algorithm.ppo_mini_batches=2"),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_host_reads_do_not_grow_with_the_micro_batches(tiny_model_path, config):
    """One read per optimiser step (its finite check and gradient norms) and one for every
    metric of the update, whether the 6 rows run as 6 micro-batches or as 1 per mini-batch.
    The policy's forward reads nothing either way: rows padded on the right get no attention
    mask (which transformers would read back), see ``MaskFacts.gapped``."""
    extra = CONFIGS[config]
    lag = 1 if config == "stale_k1" else 0
    one_row, m = _reads(tiny_model_path, *extra, "algorithm.micro_batch_size=1", batch_version=lag)
    all_rows, _ = _reads(tiny_model_path, *extra, "algorithm.micro_batch_size=8", batch_version=lag)
    steps = m["actor/optimizer_steps"] + m["actor/nonfinite_skipped"]
    assert one_row.reads == all_rows.reads == ["Tensor.tolist"] * int(steps + 1), one_row.reads
    if config != "ppo_gae_kl":  # (the critic's forward passes its mask through)
        assert one_row.in_model == all_rows.in_model == []


def _reference_update(r: Any, batch: dict[str, np.ndarray], step: int) -> dict[str, float]:
    """The update as it read its terms before (``.item()`` per micro-batch, Python-float sums)
    for one epoch of GRPO without a critic, staleness nor dropout: the same maths, read on the
    host at every micro-batch."""
    from ragen2.batch import TrainingBatch

    b, a, s = TrainingBatch.of(batch), r.cfg.algorithm, r.state
    lr = a.lr * min(1.0, (s.version + 1) / max(1, a.lr_warmup_steps))
    for g in s.optim.param_groups:
        g["lr"] = lr
    gen = torch.Generator().manual_seed(r.cfg.seed * 1_000_003 + step)
    perm = torch.randperm(len(b.rewards), generator=gen).tolist()
    minis = [np.asarray(mb) for mb in mini_batches(perm, b.group_ids.tolist(), a.ppo_mini_batches)]
    plan = [(mb, micro_batches(s, b, mb)) for mb in minis]
    gap = tokens = 0.0
    old = {}
    with torch.no_grad():
        for mi, (_, micros) in enumerate(plan[1:], 1):
            for ui, micro in enumerate(micros):
                ids, attn, mask, eng = tensors(s, b, micro, "input_ids", "attention_mask",
                                               "loss_mask", "logprobs")
                old[mi, ui] = forward(s, s.model, ids, attn, mask, scales(b, micro),
                                      plan=prefix_plan(s, ids, attn, mask),
                                      facts=MaskFacts.of(mask, attn))[0]
                gap += float(((eng - old[mi, ui]).abs() * mask).sum())
                tokens += float(mask.sum())
    rewards, group_ids = torch.tensor(b.rewards, dtype=torch.float64), torch.tensor(b.group_ids)
    reg = combined_regulariser_weights(torch.ones(len(b.rewards)),
                                       snr_gate(torch.tensor(b.rewards), group_ids, a))
    m = dict.fromkeys(("pg_loss", "entropy", "kl", "clipfrac", "approx_kl", "tokens", "norm"), 0.0)
    for mi, (mb, micros) in enumerate(plan):
        mask_all = b.loss_mask[mb]
        counts = dict(agg_mode=a.loss_agg_mode, num_tokens=float(mask_all.sum()),
                      num_seqs=float((mask_all.sum(1) > 0).sum()),
                      norm_tokens=r.settings.norm_tokens)
        loss_sum = 0.0
        for ui, micro in enumerate(micros):
            ids, attn, mask, eng, tok_r = tensors(s, b, micro, "input_ids", "attention_mask",
                                                  "loss_mask", "logprobs", "token_rewards")
            rows = torch.from_numpy(micro.index)
            adv, _ = assign_credit(AdvantageInputs(rewards, group_ids, rows, tok_r, mask), a)
            share, facts = prefix_plan(s, ids, attn, mask), MaskFacts.of(mask, attn)
            with holding(s, share):
                lp, ent = forward(s, s.model, ids, attn, mask, scales(b, micro), entropy=True,
                                  entropy_grad=a.entropy_coef > 0, plan=share, facts=facts)
                if mi == 0:
                    old[mi, ui] = lp.detach()
                    gap += float(((eng - old[mi, ui]).abs() * mask).sum())
                    tokens += float(mask.sum())
                ref = None
                if s.ref is not None:
                    with torch.no_grad():
                        ref = forward(s, s.ref, ids, attn, mask, scales(b, micro), plan=share,
                                      facts=facts)[0]
                out = compute_loss(LossInputs(lp, old[mi, ui], adv, mask, entropy=ent,
                                              ref_logprobs=ref,
                                              regulariser_weights=None if reg is None
                                              else reg[rows].unsqueeze(1), **counts), a)
                out.loss.backward()
            w = float(mask.sum())
            loss_sum += out.loss.item()
            m["pg_loss"] += out.policy_loss.item()
            m["entropy"] += out.entropy.item()
            m["kl"] += out.kl.item() if out.kl is not None else 0.0
            m["clipfrac"] += float(out.policy_metrics["clipfrac"]) * w
            m["approx_kl"] += float(out.policy_metrics["approx_kl"]) * w
            m["tokens"] += w
        m["norm"] += optimizer_step(s, [(s.trainable, s.optim)], loss_sum)[0]
    s.version += 1
    n = len(minis)
    return {"actor/loss": m["pg_loss"] / n, "actor/entropy": m["entropy"] / n,
            "actor/pg_clipfrac": m["clipfrac"] / m["tokens"],
            "actor/ppo_kl": m["approx_kl"] / m["tokens"], "actor/grad_norm": m["norm"] / n,
            "actor/logprob_gap": gap / tokens, "actor/kl_loss": m["kl"] / n}


@pytest.mark.parametrize("overrides", [
    ("algorithm.micro_batch_size=2", "algorithm.entropy_coef=0.01", "algorithm.kl_coef=0.05",
     "algorithm.ppo_mini_batches=2", "algorithm.regulariser_gate=scaled"),
    ("learner.micro_batch_tokens=40", "algorithm.ppo_mini_batches=2"),
])
def test_the_update_equals_the_per_micro_batch_reads_bit_for_bit(tiny_model_path, overrides):
    """Metrics and weights of one update equal those of the same update read on the host at
    every micro-batch (float64 sums in the same order: the same bits)."""
    batch = _batch()
    batch["temperature_scales"] = np.array([1, 1.2, 1, 1, 0.9, 1], np.float32)
    results = []
    for update in (lambda r: r.update(batch, step=1), lambda r: _reference_update(r, batch, 1)):
        r = _rank(tiny_model_path, *overrides)  # (one process group at a time)
        try:
            results.append((update(r), r.policy_weights()))
        finally:
            r.shutdown()
    (got, w_ours), (want, w_ref) = results
    assert got["actor/optimizer_steps"] == 2 and all(math.isfinite(v) for v in want.values())
    for key, value in want.items():
        if key in got:
            assert got[key] == value, key
    assert "actor/kl_loss" in got or "algorithm.kl_coef=0.05" not in overrides
    for k in w_ref:
        np.testing.assert_array_equal(w_ours[k], w_ref[k], err_msg=k)
