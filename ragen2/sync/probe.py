"""The post-sync probe: does every engine now compute what the learner computes?

Each engine continues a fixed prompt, longer than a KV-cache block, greedily for a few tokens
and reports their logprobs; the learner scores the same tokens after the same prompt. After a
correct sync the two agree to numerical noise (fp32: ~5e-5 per token). Two silent failures show
up as a large gap: a sync that did not change the engine's weights, and a vLLM engine whose
prefix cache still holds KV blocks computed with the old weights (the previous probe cached the
prompt's blocks). vLLM's prompt logprobs would not do: requests asking for them bypass the
prefix cache, so they cannot see stale blocks.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ragen2.sync.base import WeightSyncError


def probe_ids(vocab_size: int, length: int, seed: int = 1234) -> list[int]:
    """``length`` token ids drawn uniformly (fixed seed) from ``[0, vocab_size)``."""
    if vocab_size < 1 or length < 2:
        raise ValueError(f"probe needs vocab_size >= 1 and length >= 2, got {vocab_size}, {length}")
    return np.random.default_rng(seed).integers(0, vocab_size, size=length).tolist()


def logprob_gap(learner: Sequence[float], engine: Sequence[float]) -> tuple[float, float]:
    """(mean, max) of |learner - engine| over positions; the lists must have equal length."""
    a, b = np.asarray(learner, np.float64), np.asarray(engine, np.float64)
    if a.shape != b.shape or a.size == 0:
        raise WeightSyncError(f"probe: learner scored {a.size} positions, engine {b.size}")
    d = np.abs(a - b)
    if not np.isfinite(d).all():
        return float("inf"), float("inf")
    return float(d.mean()), float(d.max())


def engine_continuation(worker: Any, ids: Sequence[int], new_tokens: int) -> tuple[list[int], list[float]]:
    """Worker side: the engine's greedy continuation of ``ids`` and its temperature-1 logprobs."""
    from ragen2.engines.base import SamplingParams

    g = worker.engine.generate([list(ids)], SamplingParams(temperature=0.0, max_new_tokens=new_tokens,
                                                           stop=()))[0]
    return g.token_ids, g.logprobs


def check_probe(learner: Sequence[Sequence[float]], engines: Sequence[Sequence[float]],
                tolerance: float, version: int) -> dict[str, float]:
    """Compare each engine's logprobs with the learner's for the same tokens.

    Returns ``sync/probe_logprob_gap`` (the worst engine's mean gap) and its max; raises
    :class:`WeightSyncError` above ``tolerance``.
    """
    gaps = [logprob_gap(a, b) for a, b in zip(learner, engines, strict=True)]
    mean = max(g[0] for g in gaps)
    worst = max(g[1] for g in gaps)
    if not mean <= tolerance:
        bad = int(np.argmax([g[0] for g in gaps]))
        raise WeightSyncError(
            f"weight sync probe failed after syncing policy version {version}: rollout worker {bad} "
            f"scores the probe tokens with a mean |logprob gap| of {mean:.3g} against the learner "
            f"(max {worst:.3g}; sync.probe_tolerance={tolerance:g}). The engine is not running the "
            "learner's weights: the sync did not apply them, or a prefix cache kept KV blocks from "
            "the old weights. Raise sync.probe_tolerance only if the engine computes in lower "
            "precision than the learner (bf16: ~3e-2).")
    return {"sync/probe_logprob_gap": mean, "sync/probe_logprob_gap_max": worst}


def run_probe(learners: Any, workers: Sequence[Any], ids: Sequence[int], tolerance: float,
              version: int, new_tokens: int = 8) -> dict[str, float]:
    """Continue ``ids`` on every engine, score the continuations on the learner, then check."""
    import ray

    conts = ray.get([w.run.remote(engine_continuation, list(ids), new_tokens) for w in workers])
    scored: dict[tuple[int, ...], list[float]] = {}
    gaps = []
    for gen, lps in conts:
        key = tuple(gen)
        if key not in scored:
            scored[key] = learners.logprobs(list(ids) + list(gen))[-len(gen):]
        gaps.append((scored[key], lps))
    return check_probe([g[0] for g in gaps], [g[1] for g in gaps], tolerance, version)
