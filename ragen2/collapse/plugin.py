"""Offline plug-in MI from saved rollouts: I(input id; reasoning cluster id) from text alone.

No model is needed: reasoning texts are clustered by their word n-grams, and I(X; C) is read off
the joint histogram of (input id, cluster id), as in the design document's snippet
(sum p(x,c) log p(x,c) / (p(x) p(c))), here in nats, with the Miller-Madow bias correction and a
permutation floor. Low MI with many distinct clusters is the text-level signature of template
collapse: the reasoning varies, but not with the input.

Pipeline:
    clusters = reasoning_signatures(texts)                     # list[int]
    plugin_mutual_information(input_ids, clusters)["mi"]
    plugin_permutation_floor(input_ids, clusters)["mi_floor_q95"]
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence

__all__ = [
    "BIAS_CORRECTIONS",
    "ngram_signature",
    "plugin_mutual_information",
    "plugin_permutation_floor",
    "reasoning_signatures",
]

BIAS_CORRECTIONS = ("miller_madow", "none")

# Runs of letters and digits (any script). Punctuation, underscores and whitespace separate words
# and are dropped; digits are KEPT (see ngram_signature).
_WORD_RE = re.compile(r"[^\W_]+")


def ngram_signature(text: str, n: int = 3) -> frozenset[tuple[str, ...]]:
    """The set of word n-grams of a normalised text.

    Normalisation: casefold; words = maximal runs of letters/digits, so whitespace, punctuation and
    markup ("(1,2)." -> "1", "2") do not matter. Digits are kept as words, on purpose: in our
    environments they carry the input-specific content (grid coordinates, the numbers of a math
    problem), and mapping them to a placeholder would merge input-specific reasoning into one
    "template" cluster and understate the MI. A text with fewer than n words has the single
    "n-gram" made of all its words; an empty text has the empty signature.
    """
    words = _WORD_RE.findall(text.casefold())
    if len(words) < n:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def _jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def reasoning_signatures(
    texts: Sequence[str], n: int = 3, num_clusters: int | None = None, *, threshold: float = 0.5
) -> list[int]:
    """Cluster reasoning texts by their word n-gram sets; deterministic.

    Similarity = Jaccard similarity of the n-gram sets (``ngram_signature``; two empty texts: 1).

    * ``num_clusters=None`` (default): greedy leader clustering in input order. Each text joins
      the existing cluster whose leader (its first text) is most similar, if that similarity is
      >= ``threshold`` (ties: the earliest cluster); otherwise it founds a new cluster. Texts with
      identical signatures always share a cluster. ``threshold=1.0`` gives exact-signature
      clusters; the default 0.5 is a usual near-duplicate level, so surface variants of one
      template (a reworded clause) merge, while texts that differ in their input-specific words
      (several coordinates) do not. Caveat: Jaccard counts shared frame text, so texts that differ
      in only a few input-specific words inside a long common frame can still merge at 0.5 (which
      understates the MI); raise ``threshold`` for such data.
    * ``num_clusters=k``: farthest-point (Gonzalez k-center) clustering. The first leader is
      text 0; each next leader is the text least similar to all current leaders (ties: lowest
      index); stops early when every text has a leader with an identical signature. Each text
      joins its most similar leader (ties: the earlier leader). ``threshold`` is unused.

    Cluster ids are renumbered 0, 1, 2, ... in order of first appearance, so the output depends
    only on the texts and their order.

    Args:
        texts: the reasoning strings (e.g. the <think> content of the first turn).
        n: n-gram length in words (>= 1).
        num_clusters: None, or the maximum number of clusters (>= 1).
        threshold: Jaccard level in (0, 1] for the leader scheme.
    Returns:
        list of len(texts) cluster ids.
    Raises:
        ValueError: a text that is not a str, n < 1, num_clusters < 1, threshold outside (0, 1].
    """
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of strings, got a single str")  # noqa: TRY004
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise ValueError(f"texts[{i}] must be a str, got {type(t).__name__}")  # noqa: TRY004
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (n-gram length) must be an integer >= 1, got {n!r}")
    if num_clusters is not None and (
        isinstance(num_clusters, bool) or not isinstance(num_clusters, int) or num_clusters < 1
    ):
        raise ValueError(f"num_clusters must be None or an integer >= 1, got {num_clusters!r}")
    if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
        raise ValueError(f"threshold must be a Jaccard similarity in (0, 1], got {threshold!r}")
    sigs = [ngram_signature(t, n) for t in texts]
    if not sigs:
        return []
    raw = _leader_clusters(sigs, threshold) if num_clusters is None else _k_center(sigs, num_clusters)
    relabel: dict[int, int] = {}
    return [relabel.setdefault(c, len(relabel)) for c in raw]


def _leader_clusters(sigs: list[frozenset], threshold: float) -> list[int]:
    exact: dict[frozenset, int] = {}
    leaders: list[frozenset] = []
    postings: dict[tuple, list[int]] = defaultdict(list)  # n-gram -> clusters whose leader has it
    out = []
    for sig in sigs:
        c = exact.get(sig)
        if c is None and threshold < 1.0 and sig:
            shared: Counter = Counter()
            for g in sig:
                shared.update(postings.get(g, ()))
            best, best_sim = None, -1.0
            for cand in sorted(shared):
                inter = shared[cand]
                sim = inter / (len(sig) + len(leaders[cand]) - inter)
                if sim > best_sim:
                    best, best_sim = cand, sim
            if best is not None and best_sim >= threshold:
                c = best
        if c is None:
            c = len(leaders)
            leaders.append(sig)
            for g in sig:
                postings[g].append(c)
        exact.setdefault(sig, c)
        out.append(c)
    return out


def _k_center(sigs: list[frozenset], k: int) -> list[int]:
    leaders = [0]
    best_sim = [_jaccard(s, sigs[0]) for s in sigs]  # similarity to the most similar leader
    best_leader = [0] * len(sigs)
    while len(leaders) < k:
        nxt = min(range(len(sigs)), key=lambda i: (best_sim[i], i))
        if best_sim[nxt] >= 1.0:
            break  # every text already has an identical leader
        leaders.append(nxt)
        c = len(leaders) - 1
        for i, s in enumerate(sigs):
            sim = _jaccard(s, sigs[nxt])
            if sim > best_sim[i]:  # strict: ties stay with the earlier leader
                best_sim[i], best_leader[i] = sim, c
    return best_leader


# --------------------------------------------------------------------------------------------
# plug-in mutual information
# --------------------------------------------------------------------------------------------
def _entropy(counts, n: int) -> float:
    """Plug-in entropy in nats: sum_b (c_b / n) log(n / c_b) (each term >= 0, no cancellation)."""
    return math.fsum((c / n) * math.log(n / c) for c in counts if c > 0)


def _check_pairs(input_ids, cluster_ids) -> tuple[list, list]:
    xs, ys = list(input_ids), list(cluster_ids)
    if len(xs) != len(ys):
        raise ValueError(
            f"input_ids and cluster_ids must pair up one to one, got {len(xs)} and {len(ys)} entries"
        )
    if not xs:
        raise ValueError("need at least one (input id, cluster id) pair, got none")
    for name, seq in (("input_ids", xs), ("cluster_ids", ys)):
        for i, v in enumerate(seq):
            try:
                hash(v)
            except TypeError:
                raise ValueError(f"{name}[{i}] = {v!r} is not hashable") from None
    return xs, ys


def _check_bias_correction(bias_correction: str) -> None:
    if bias_correction not in BIAS_CORRECTIONS:
        raise ValueError(
            f"unknown bias_correction {bias_correction!r}; allowed: {', '.join(BIAS_CORRECTIONS)}"
        )


def _plugin(xs: list, ys: list, bias_correction: str) -> dict[str, float]:
    n = len(xs)
    cx, cy, cxy = Counter(xs), Counter(ys), Counter(zip(xs, ys))
    hx, hy, hxy = _entropy(cx.values(), n), _entropy(cy.values(), n), _entropy(cxy.values(), n)
    mi_raw = hx + hy - hxy
    mx, my, mxy = len(cx), len(cy), len(cxy)
    if bias_correction == "miller_madow":
        # H_MM = H_hat + (m - 1) / (2 n) per entropy term, m = number of non-empty bins.
        hx_c, hy_c, hxy_c = hx + (mx - 1) / (2 * n), hy + (my - 1) / (2 * n), hxy + (mxy - 1) / (2 * n)
    else:
        hx_c, hy_c, hxy_c = hx, hy, hxy
    return {
        "mi": hx_c + hy_c - hxy_c,
        "mi_raw": mi_raw,
        "h_input": hx_c,
        "h_cluster": hy_c,
        "h_joint": hxy_c,
        "h_input_raw": hx,
        "h_cluster_raw": hy,
        "h_joint_raw": hxy,
        "n": float(n),
        "n_inputs": float(mx),
        "n_clusters": float(my),
        "n_cells": float(mxy),
    }


def plugin_mutual_information(
    input_ids: Sequence[Hashable],
    cluster_ids: Sequence[Hashable],
    *,
    bias_correction: str = "miller_madow",
) -> dict[str, float]:
    """Plug-in estimate of I(input; cluster) in nats from the joint histogram.

    I = H(X) + H(C) - H(X, C) with plug-in entropies H_hat = -sum_b p_b log p_b over the
    non-empty bins. With ``bias_correction="miller_madow"`` every entropy term gets
    + (m - 1) / (2 n) (m = its number of non-empty bins, n = number of pairs), i.e.
    I_MM = I_raw + (m_x + m_c - m_xc - 1) / (2 n); the plug-in I_raw is biased upwards by about
    (m_x - 1)(m_c - 1) / (2 n) for independent variables, which this removes to first order.
    The corrected value is NOT clipped at 0 (an independent pair scatters around 0), so that
    averages over runs stay unbiased. Miller-Madow counts only non-empty bins, so it
    under-corrects when the joint table is sparse (n not much larger than m_x * m_c); compare
    with ``plugin_permutation_floor`` rather than with 0 in that regime.

    Args:
        input_ids: (n,) hashables, e.g. the prompt / env seed of each rollout.
        cluster_ids: (n,) hashables, e.g. ``reasoning_signatures(texts)``.
        bias_correction: "miller_madow" (default) or "none".
    Returns:
        dict of floats: ``mi`` (with the chosen correction), ``mi_raw`` (uncorrected),
        ``h_input``, ``h_cluster``, ``h_joint`` (corrected) and their ``*_raw`` versions,
        ``n``, ``n_inputs``, ``n_clusters``, ``n_cells`` (non-empty bins of each histogram).
    Raises:
        ValueError: lengths differ, no pairs, unhashable ids, unknown bias_correction.
    """
    _check_bias_correction(bias_correction)
    xs, ys = _check_pairs(input_ids, cluster_ids)
    return _plugin(xs, ys, bias_correction)


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an ascending list."""
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (pos - lo) * (sorted_vals[hi] - sorted_vals[lo])


def plugin_permutation_floor(
    input_ids: Sequence[Hashable],
    cluster_ids: Sequence[Hashable],
    num_permutations: int = 50,
    seed: int = 0,
    *,
    bias_correction: str = "miller_madow",
) -> dict[str, float]:
    """The plug-in MI that chance alone produces: MI after shuffling the cluster ids.

    Shuffling keeps both marginal histograms (so the bias of the estimator stays) and destroys
    any dependence. ``random.Random(seed)`` drives the shuffles, so the result is reproducible.

    Args:
        input_ids, cluster_ids, bias_correction: as in ``plugin_mutual_information``.
        num_permutations: P >= 1 shuffles.
        seed: integer seed.
    Returns:
        dict of floats, all with the chosen bias correction: ``mi`` (observed), ``mi_floor_mean``
        (mean over shuffles), ``mi_floor_q95`` (95th percentile, linear interpolation),
        ``p_value`` = (1 + #{shuffled >= observed}) / (1 + P); the same for the uncorrected
        estimate as ``mi_raw``, ``mi_raw_floor_mean``, ``mi_raw_floor_q95``; ``num_permutations``.
    Raises:
        ValueError: as ``plugin_mutual_information``, plus num_permutations < 1 or a non-int seed.
    """
    _check_bias_correction(bias_correction)
    if isinstance(num_permutations, bool) or not isinstance(num_permutations, int) or num_permutations < 1:
        raise ValueError(f"num_permutations must be an integer >= 1, got {num_permutations!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")  # noqa: TRY004
    xs, ys = _check_pairs(input_ids, cluster_ids)
    observed = _plugin(xs, ys, bias_correction)
    rng = random.Random(seed)
    shuffled = list(ys)
    null, null_raw = [], []
    for _ in range(num_permutations):
        rng.shuffle(shuffled)
        res = _plugin(xs, shuffled, bias_correction)
        null.append(res["mi"])
        null_raw.append(res["mi_raw"])
    # Compare with a relative tolerance: a shuffle that reproduces the same histogram must count
    # as ">= observed" even when fsum orders differ in the last bit.
    tol = 1e-12 * max(1.0, abs(observed["mi"]))
    exceed = sum(1 for v in null if v >= observed["mi"] - tol)
    null_sorted, raw_sorted = sorted(null), sorted(null_raw)
    return {
        "mi": observed["mi"],
        "mi_floor_mean": math.fsum(null) / num_permutations,
        "mi_floor_q95": _quantile(null_sorted, 0.95),
        "p_value": (1.0 + exceed) / (1.0 + num_permutations),
        "mi_raw": observed["mi_raw"],
        "mi_raw_floor_mean": math.fsum(null_raw) / num_permutations,
        "mi_raw_floor_q95": _quantile(raw_sorted, 0.95),
        "num_permutations": float(num_permutations),
    }
