"""The post-sync probe: does every engine now compute what the learner computes?

Each engine continues a fixed prompt, longer than a KV-cache block, greedily for a few tokens and
reports, at every continuation position, the logprobs of its ``k`` most likely next tokens; the
learner scores the same tokens at the same positions. After a correct sync the two agree to
numerical noise (fp32 on CPU: < 1e-6; what "noise" means is calibrated per run by
:class:`ProbePolicy`). Two silent failures show up as a large gap:

* a sync that did not change the engine's weights;
* a vLLM engine whose prefix cache still holds KV blocks computed with the old weights (the
  previous probe cached the prompt's blocks).

Design notes: vLLM's *prompt* logprobs cannot see stale blocks (requests asking for them bypass
the prefix cache), hence a continuation; and the greedy token of a confident policy has
logprob ~0 under almost any weights, hence the top-k alternatives, whose logprobs move with every
weight.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ragen2.sync.base import WeightSyncError

#: (continuation ids, per position {token id: engine logprob})
Continuation = tuple[list[int], list[dict[int, float]]]
log = logging.getLogger(__name__)


def probe_ids(vocab_size: int, length: int, seed: int = 1234) -> list[int]:
    """``length`` token ids drawn uniformly (fixed seed) from ``[0, vocab_size)``."""
    if vocab_size < 1 or length < 2:
        raise ValueError(f"probe needs vocab_size >= 1 and length >= 2, got {vocab_size}, {length}")
    return np.random.default_rng(seed).integers(0, vocab_size, size=length).tolist()


def learner_logprobs_at(rank: Any, ids: Sequence[int],
                        queries: Sequence[tuple[int, Sequence[int]]]) -> list[list[float]] | None:
    """Learner side (every rank forwards; rank 0 answers): ``log p(tok | ids[:t])`` at
    temperature 1 for each ``(t, tokens)`` query."""
    import torch

    x = torch.tensor([list(ids)], dtype=torch.long, device=rank.device)
    with torch.no_grad():
        logits = rank.model(input_ids=x, use_cache=False).logits[0].float()
    lsm = torch.log_softmax(logits, dim=-1).cpu()
    if rank.rank != 0:
        return None
    return [[float(lsm[t - 1, tok]) for tok in toks] for t, toks in queries]


def compare(learner: Sequence[Sequence[float]], engine: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(mean, max) of |learner - engine| over all queried (position, token) pairs."""
    a = np.concatenate([np.asarray(x, np.float64) for x in learner]) if learner else np.zeros(0)
    b = np.concatenate([np.asarray(x, np.float64) for x in engine]) if engine else np.zeros(0)
    if a.shape != b.shape or a.size == 0:
        raise WeightSyncError(f"probe: learner scored {a.size} (position, token) pairs, engine {b.size}")
    d = np.abs(a - b)
    if not np.isfinite(d).all():
        return float("inf"), float("inf")
    return float(d.mean()), float(d.max())


def check_probe(gaps: Sequence[tuple[float, float]], tolerance: float, version: int,
                what: str = "") -> dict[str, float]:
    """``sync/probe_logprob_gap`` (the worst engine's mean gap) and its max over engines.

    ``gaps[i]`` is engine i's (mean, max) from :func:`compare`; raises :class:`WeightSyncError`
    when a mean exceeds ``tolerance`` (``what`` says where that threshold came from).
    """
    mean = max(g[0] for g in gaps)
    worst = max(g[1] for g in gaps)
    if not mean <= tolerance:
        bad = int(np.argmax([g[0] for g in gaps]))
        raise WeightSyncError(
            f"weight sync probe failed after syncing policy version {version}: rollout worker {bad} "
            f"scores the probe tokens with a mean |logprob gap| of {mean:.3g} against the learner "
            f"(max {worst:.3g}; allowed {tolerance:.3g}{what}). The engine is not running the "
            "learner's weights: the sync did not apply them, or a prefix cache kept KV blocks from "
            "the old weights.")
    return {"sync/probe_logprob_gap": mean, "sync/probe_logprob_gap_max": worst}


@dataclass
class ProbePolicy:
    """When a probe gap stops the run: relative to the gap measured with identical weights.

    The engine and the learner compute differently (bf16 kernels, fused ops), so even identical
    weights leave a gap; in bf16 it is ~0.03-0.06 nats (Fast-LLM PR #525, verl-omni #637), more on
    the top-k alternatives the probe scores. The first probe of a run (policy version 0, or the
    first after a resume: the push just made the weights identical, and the checksums of
    :mod:`ragen2.sync.checksum` confirm it) measures that **floor**. It is refused only when it is
    above ``multiple x tolerance`` (then the engine computes something else altogether, e.g. a
    stale output head: 0.85 nats). Every later probe fails only above

        ``threshold = max(multiple x floor, tolerance)``

    ``tolerance`` is ``sync.probe_tolerance`` (the absolute minimum: a gap at or below it always
    passes; by ``model.dtype`` when null) and ``multiple`` is ``sync.probe_floor_multiple``. The
    floor, the threshold and every gap are logged (``sync/probe_*``). A stale engine whose weights
    moved less than the noise cannot be seen here: the checksums catch it exactly.
    """

    tolerance: float
    multiple: float
    floor: Optional[float] = None

    def threshold(self) -> float:
        """The gap above which a later sync fails (before the floor is known: the floor's cap)."""
        if self.floor is None:
            return self.multiple * self.tolerance
        return max(self.multiple * self.floor, self.tolerance)

    def check(self, gaps: Sequence[tuple[float, float]], version: int) -> dict[str, float]:
        """Check one probe's per-engine (mean, max) gaps; the first one sets the floor."""
        measuring = self.floor is None
        limit = self.threshold()
        what = (f": the floor measured with identical weights may be at most "
                f"sync.probe_floor_multiple={self.multiple:g} x sync.probe_tolerance="
                f"{self.tolerance:g}" if measuring else
                f": max(sync.probe_floor_multiple={self.multiple:g} x the floor {self.floor:.3g}"
                f" measured with identical weights, sync.probe_tolerance={self.tolerance:g})")
        m = check_probe(gaps, limit, version, what)
        if measuring:
            self.floor = m["sync/probe_logprob_gap"]
            log.info("weight sync probe: floor %.3g at policy version %d (identical weights); "
                     "later syncs fail above %.3g", self.floor, version, self.threshold())
        m.update({"sync/probe_floor": float(self.floor), "sync/probe_threshold": self.threshold()})
        return m


def queries_of(ids: Sequence[int], cont: Continuation) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """The full sequence and the learner's (position, tokens) queries for one continuation."""
    gen, tops = cont
    full = list(ids) + list(gen)
    return full, [(len(ids) + j, list(d)) for j, d in enumerate(tops)]


def run_probe(learners: Any, workers: Sequence[Any], ids: Sequence[int], policy: ProbePolicy,
              version: int, new_tokens: int = 4, top_k: int = 5) -> dict[str, float]:
    """Continue ``ids`` on every engine, score the same tokens on the learner, then check
    against ``policy`` (which the first call calibrates)."""
    import ray

    # worker side: RolloutWorker.probe_continuation (ragen2.rollout.worker.greedy_continuation)
    conts = ray.get([w.probe_continuation.remote(list(ids), new_tokens, top_k) for w in workers])
    gaps = []
    for cont in conts:
        full, queries = queries_of(ids, cont)
        ref = learners.run(learner_logprobs_at, full, queries)[0]
        gaps.append(compare(ref, [list(d.values()) for d in cont[1]]))
    return policy.check(gaps, version)
