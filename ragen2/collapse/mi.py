"""Online mutual-information collapse monitor: I(X; Z) between prompts and reasoning.

The learner teacher-forces every reasoning sample z_s under every prompt x_j and hands over the
cross-scored matrix

    logp[s, j] = log p(z_s | x_j)        (S samples x N prompts; summed or per-token-mean logprobs)

together with ``owner[s]``, the prompt z_s was actually generated from. Everything here is a pure
tensor function of that matrix (no model calls), computed in float64 and returned as Python floats.

Definitions (SPEC section 4, "MI collapse monitor"):
    matched_s  = logp[s, owner[s]]
    marginal_s = logsumexp_j logp[s, j] - log N          (log of the empirical p(z_s) = mean_j p(z_s|x_j))
    h_cond     = -mean_s matched_s                        (estimate of H(Z|X))
    h_marginal = -mean_s marginal_s                       (estimate of H(Z))
    mi         = h_marginal - h_cond = mean_s (matched_s - marginal_s)      (<= log N)
    mi_z       = mean_s (matched_s - marginal_s) / (std_s(marginal) + eps)  (population std over s)
    retrieval_acc@k = share of samples whose own prompt is in the top-k of their row (see below)

``mi`` is an average of per-sample pointwise MI; on a finite batch it can come out slightly
negative (e.g. an input-blind policy plus noise) and is not clipped.

Template collapse = h_cond stays high (diverse reasoning) while mi falls to ~0 (reasoning no longer
depends on the prompt); the columns of ``logp`` then become (nearly) identical.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from ragen2.collapse.mi_inputs import (as_index_vector, as_score_matrix, check_eps, check_ks,
                                       check_matched_finite, first_where, key_ids)

__all__ = [
    "EMA",
    "bootstrap_intervals",
    "choose_negatives",
    "mutual_information",
    "mutual_information_subsampled",
    "permutation_null",
    "permutation_null_subsampled",
    "resample_statistics",
]


# --------------------------------------------------------------------------------------------
# the shared estimator core
# --------------------------------------------------------------------------------------------
def _metrics(scores: Tensor, own: Tensor, classes: Tensor | None, ks: tuple[int, ...],
             eps: float) -> dict[str, float]:
    """All metrics from an already validated float64 score matrix.

    Args:
        scores: (S, K) float64, log p(z_s | candidate prompt in column c).
        own: (S,) long, column of sample s's own prompt.
        classes: (S, K) long equivalence-class id of every column (equal id = identical prompts),
            or None when all columns of a row are distinct prompts.
    """
    S, K = scores.shape
    dev = scores.device
    own = own.to(dev)
    classes = None if classes is None else classes.to(dev)
    log_k = math.log(K)
    matched = scores.gather(1, own[:, None]).squeeze(1)  # (S,)
    marginal = torch.logsumexp(scores, dim=1) - log_k  # (S,)
    h_cond = -matched.mean()
    h_marginal = -marginal.mean()
    # mi as h_marginal - h_cond (= mean(matched - marginal) up to rounding); permutation_null uses
    # the very same arithmetic so that an unchanged pairing reproduces mi bit for bit.
    mi = matched.mean() - marginal.mean()
    pmi = matched - marginal
    std_marg = marginal.std(correction=0)
    mi_z = (pmi / (std_marg + eps)).mean()

    # ---- retrieval: collapse equivalent columns by max, then rank classes ----
    if classes is None:
        cls_scores, own_cls = scores, own
        present = torch.ones_like(scores, dtype=torch.bool)
        own_class_size = torch.ones(S, dtype=torch.float64, device=dev)
    else:
        n_cls = int(classes.max()) + 1
        cls_scores = torch.full((S, n_cls), -math.inf, dtype=torch.float64, device=dev).scatter_reduce(
            1, classes, scores, reduce="amax", include_self=True
        )
        present = torch.zeros((S, n_cls), dtype=torch.bool, device=dev).scatter_(1, classes, True)
        own_cls = classes.gather(1, own[:, None]).squeeze(1)
        own_class_size = (classes == own_cls[:, None]).sum(1).to(torch.float64)
    own_score = cls_scores.gather(1, own_cls[:, None])  # (S, 1)
    others = present.clone()
    others.scatter_(1, own_cls[:, None], False)
    greater = ((cls_scores > own_score) & others).sum(1).to(torch.float64)  # (S,)
    tied = ((cls_scores == own_score) & others).sum(1).to(torch.float64)  # (S,)
    n_cand = present.sum(1).to(torch.float64)  # distinct candidate prompts per row

    out: dict[str, float] = {
        "mi": float(mi),
        "h_cond": float(h_cond),
        "h_marginal": float(h_marginal),
        "mi_z": float(mi_z),
        "marginal_std": float(std_marg),
        "log_n": log_k,
        # With duplicated prompts the attainable maximum is lower than log N:
        # mean_s log(N / #columns equivalent to owner_s). Equals log N when all prompts differ.
        "mi_bound": float((log_k - own_class_size.log()).mean()),
        "n_samples": float(S),
        "n_prompts": float(K),
    }
    for k in ks:
        # Owner's rank under uniformly random tie-breaking is uniform on greater+1 .. greater+tied+1,
        # so P(rank <= k) = clamp(k - greater, 0, tied + 1) / (tied + 1).
        hit = torch.minimum((k - greater).clamp(min=0.0), tied + 1.0) / (tied + 1.0)
        out[f"retrieval_acc@{k}"] = float(hit.mean())
        out[f"retrieval_chance@{k}"] = float((torch.clamp(n_cand, max=float(k)) / n_cand).mean())
    return out


# --------------------------------------------------------------------------------------------
# public estimators
# --------------------------------------------------------------------------------------------
def mutual_information(
    logp: Tensor,
    owner: Tensor,
    *,
    prompt_keys: Sequence[Hashable] | None = None,
    ks: Sequence[int] = (1,),
    eps: float = 1e-6,
) -> dict[str, float]:
    """Cross-scoring estimate of I(X; Z) and its companions from the full (S, N) matrix.

    Args:
        logp: (S, N) float. logp[s, j] = log p(z_s | x_j) (summed or per-token mean; used as
            given). Must be finite except that -inf is allowed off the owner's column.
        owner: (S,) integer. owner[s] in [0, N) is the prompt sample s was generated from.
        prompt_keys: optional (N,) hashables; equal keys mark identical prompts (e.g. the same env
            seed drawn twice). They only affect retrieval (and ``mi_bound``), see below.
        ks: the k's of ``retrieval_acc@k`` (each an int >= 1; k above the number of distinct
            prompts gives 1.0).
        eps: added to the std in ``mi_z`` (>= 0).

    Returns:
        dict of floats:
          ``mi``, ``h_cond``, ``h_marginal``, ``mi_z``: as in the module docstring
              (mi = h_marginal - h_cond, bounded above by log N);
          ``marginal_std``: population std over samples of marginal_s (the mi_z denominator);
          ``log_n``: log N, the upper bound of mi; ``mi_bound``: the tighter bound
              mean_s log(N / #prompts equivalent to owner_s) (= log N with distinct prompts);
          ``n_samples`` = S, ``n_prompts`` = N;
          ``retrieval_acc@k`` and ``retrieval_chance@k`` for each k.

    Retrieval (the exact rule):
        1. Equivalent prompts (equal ``prompt_keys``) are merged into one candidate whose score in
           row s is the max of their columns, so a sample counts as retrieved if ANY prompt
           identical to its owner ranks high, and duplicates cannot push the owner down the list.
        2. With g = #other candidates scoring strictly higher than the owner's candidate and
           t = #other candidates scoring exactly equal, the sample's hit at k is
           clamp(k - g, 0, t + 1) / (t + 1): the probability that the owner lands in the top k
           when ties are broken uniformly at random (computed exactly, no randomness). Without
           ties this is 1 if g < k else 0; a row whose columns are all equal scores k / C.
        3. ``retrieval_chance@k`` = mean_s min(k, C) / C with C the number of distinct candidates
           (k / N when all prompts differ): what a collapsed, input-blind policy would get.

    Raises:
        ValueError: logp not 2-D float, fewer than 2 prompts or 1 sample, NaN / +inf anywhere,
            -inf at a sample's own prompt; owner not 1-D integer of length S or out of [0, N);
            prompt_keys of the wrong length or unhashable; bad ks or eps.
    """
    scores = as_score_matrix(logp, "logp")
    S, N = scores.shape
    own = as_index_vector(owner, "owner", S, N, "N").to(scores.device)
    ks = check_ks(ks)
    eps = check_eps(eps)
    check_matched_finite(scores, own, "logp", "its owner column logp[s, owner[s]]")
    classes = None if prompt_keys is None else key_ids(prompt_keys, N)[None, :].expand(S, N)
    return _metrics(scores, own, classes, ks, eps)


def choose_negatives(
    owner: Tensor, n_prompts: int, max_negatives: int, generator: torch.Generator | None = None
) -> Tensor:
    """Pick, per sample, which prompt columns to score (owner first, then random negatives).

    Lets the monitor score S x K instead of S x N (sub-quadratic cost) with
    K = 1 + min(max_negatives, n_prompts - 1).

    Args:
        owner: (S,) integer own-prompt index of every sample, in [0, n_prompts).
        n_prompts: N, the number of prompts (>= 2).
        max_negatives: how many other prompts to score per sample (>= 1); capped at N - 1.
        generator: torch.Generator for reproducible draws (None: torch's global RNG).
    Returns:
        (S, K) long on owner's device; column 0 is owner[s], columns 1.. are distinct prompts
        != owner[s], a uniformly random subset (in random order) of the other N - 1 prompts.
    Raises:
        ValueError: bad owner, n_prompts < 2 or max_negatives < 1.
    """
    if isinstance(n_prompts, bool) or not isinstance(n_prompts, int) or n_prompts < 2:
        raise ValueError(f"n_prompts must be an integer >= 2, got {n_prompts!r}")
    if isinstance(max_negatives, bool) or not isinstance(max_negatives, int) or max_negatives < 1:
        raise ValueError(f"max_negatives must be an integer >= 1, got {max_negatives!r}")
    own_t = torch.as_tensor(owner)
    length = own_t.shape[0] if own_t.dim() == 1 else -1
    own = as_index_vector(own_t, "owner", length, n_prompts, "n_prompts")
    S = own.shape[0]
    k = 1 + min(max_negatives, n_prompts - 1)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    # Random keys in [0, 1); the owner gets -1 so it sorts first; the k-1 smallest other keys are
    # a uniform random subset of the other prompts.
    keys = torch.rand((S, n_prompts), generator=generator, device=gen_device)
    keys.scatter_(1, own.to(gen_device)[:, None], -1.0)
    return keys.argsort(dim=1)[:, :k].to(own.device)


def mutual_information_subsampled(
    logp_sub: Tensor,
    cols: Tensor,
    *,
    prompt_keys: Sequence[Hashable] | None = None,
    ks: Sequence[int] = (1,),
    eps: float = 1e-6,
) -> dict[str, float]:
    """The same metrics from sampled negatives only (the InfoNCE-style estimator).

    Args:
        logp_sub: (S, K) float. logp_sub[s, c] = log p(z_s | x_{cols[s, c]}).
        cols: (S, K) integer prompt indices as returned by ``choose_negatives``; column 0 is the
            sample's own prompt; the K entries of a row must be distinct.
        prompt_keys: optional (N,) hashables indexed by global prompt index (the values in cols);
            equal keys = identical prompts, merged for retrieval exactly as in
            ``mutual_information``.
        ks, eps: as in ``mutual_information``.

    Returns:
        the dict of ``mutual_information`` computed over the K scored columns: the marginal is
        logsumexp over the K columns - log K, so ``mi`` is the standard sampled-negatives
        (InfoNCE / CPC) bound, itself bounded by ``log_n`` = log K; ``n_prompts`` = K; retrieval is
        among the K candidates (chance k / K). Columns are put in ascending prompt order before
        anything is summed, so when every row scores all N prompts (K = N) the result is
        identical, bit for bit, to ``mutual_information`` on the full matrix.

    Raises:
        ValueError: shapes differ / not 2-D, K < 2, non-integer or negative cols, a prompt listed
            twice in one row, cols beyond prompt_keys, or the value checks of the full estimator.
    """
    scores, own, _, cols_sorted = _sorted_columns(logp_sub, cols)
    ks = check_ks(ks)
    eps = check_eps(eps)
    check_matched_finite(scores, own, "logp_sub", "column 0 (the sample's own prompt)")
    classes = None
    if prompt_keys is not None:
        ids = key_ids(prompt_keys, None)
        if int(cols_sorted.max()) >= ids.shape[0]:
            raise ValueError(
                f"cols refers to prompt {int(cols_sorted.max())} but prompt_keys has only "
                f"{ids.shape[0]} entries; allowed: 0 <= cols < len(prompt_keys)"
            )
        classes = ids[cols_sorted]
    return _metrics(scores, own, classes, ks, eps)


def _sorted_columns(logp_sub: Tensor, cols: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validate a subsampled column plan and put every row's columns in ascending prompt order.

    Args:
        logp_sub: (S, K) float scores; cols: (S, K) integer prompt indices, column 0 the owner.
    Returns:
        scores (S, K) float64 in sorted column order, own (S,) long (where column 0 went),
        order (S, K) long (sorted position -> original column, on the CPU) and cols_sorted
        (S, K) long (on the CPU).
    Raises:
        ValueError: as ``mutual_information_subsampled`` (shapes, dtypes, negative or repeated
            prompts in a row); the value checks of ``as_score_matrix``.
    """
    scores = as_score_matrix(logp_sub, "logp_sub")
    S, K = scores.shape
    cols_t = torch.as_tensor(cols)
    if tuple(cols_t.shape) != (S, K):
        raise ValueError(f"cols must have the shape of logp_sub {(S, K)}, got {tuple(cols_t.shape)}")
    if cols_t.is_floating_point() or cols_t.is_complex() or cols_t.dtype == torch.bool:
        raise ValueError(f"cols must hold integer prompt indices (torch.long), got dtype {cols_t.dtype}")
    cols_t = cols_t.long().cpu()
    if (cols_t < 0).any():
        raise ValueError(f"cols must be >= 0 (prompt indices), found {int(cols_t.min())}")
    order = cols_t.argsort(dim=1, stable=True)
    cols_sorted = cols_t.gather(1, order)
    dup = cols_sorted[:, 1:] == cols_sorted[:, :-1]
    if dup.any():
        s = int(dup.nonzero()[0, 0])
        raise ValueError(
            f"cols row {s} lists a prompt more than once ({cols_t[s].tolist()}); every scored "
            "prompt of a row must be distinct (use choose_negatives)"
        )
    scores = scores.gather(1, order.to(scores.device))
    # where the owner (original column 0) went after sorting
    own = (order == 0).long().argmax(dim=1).to(scores.device)
    return scores, own, order, cols_sorted


def permutation_null(
    logp: Tensor,
    owner: Tensor,
    *,
    num_permutations: int = 20,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """MI floor under a shuffled sample<->prompt pairing, and a one-sided significance test.

    Each permutation pi of the S samples re-assigns owner'[s] = owner[pi(s)]: the matrix (the
    column structure) is untouched and every prompt still owns as many samples as before, only
    which prompt a sample claims as its own is shuffled. The marginal does not depend on owners,
    so mi' = mean_s logp[s, owner'[s]] - mean_s marginal_s.

    Args:
        logp: (S, N) float, every entry finite (a shuffled pairing can land on any cell).
        owner: (S,) integer own-prompt indices in [0, N).
        num_permutations: P >= 1.
        generator: torch.Generator for reproducible shuffles (None: torch's global RNG).
    Returns:
        dict of floats: ``mi`` (observed, same arithmetic as ``mutual_information``),
        ``mi_null`` (mean of the P null values), ``mi_null_std`` (their population std),
        ``mi_null_q95`` (their 95th percentile, linear interpolation: the permutation floor),
        ``p_value`` = (1 + #{null mi >= observed mi}) / (1 + P), ``num_permutations`` = P.
        An input-blind policy (identical columns) gives null == observed for every permutation,
        hence p_value = 1; a strongly input-dependent one gives p_value = 1 / (1 + P).
    Raises:
        ValueError: as ``mutual_information``, plus any -inf entry or num_permutations < 1.
    """
    if isinstance(num_permutations, bool) or not isinstance(num_permutations, int) or num_permutations < 1:
        raise ValueError(f"num_permutations must be an integer >= 1, got {num_permutations!r}")
    scores = as_score_matrix(logp, "logp")
    S, N = scores.shape
    own = as_index_vector(owner, "owner", S, N, "N").to(scores.device)
    if torch.isneginf(scores).any():
        raise ValueError(
            f"permutation_null needs every entry of logp finite (a shuffled pairing can land on any "
            f"cell), found -inf at (sample, prompt) {first_where(torch.isneginf(scores))}"
        )
    marginal_mean = (torch.logsumexp(scores, dim=1) - math.log(N)).mean()
    observed = scores.gather(1, own[:, None]).squeeze(1).mean() - marginal_mean
    gen_device = generator.device if generator is not None else torch.device("cpu")
    perms = torch.rand((num_permutations, S), generator=generator, device=gen_device).argsort(dim=1)
    owners = own[perms.to(own.device)]  # (P, S): owners[p, s] = owner[perm_p(s)]
    null = scores.gather(1, owners.T).mean(dim=0) - marginal_mean  # (P,)
    return _null_summary(observed, null)


def permutation_null_subsampled(
    logp_sub: Tensor,
    cols: Tensor,
    *,
    num_permutations: int = 20,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """MI floor and significance test of the sampled-negatives estimate
    (:func:`mutual_information_subsampled`), from the (S, K) scores it already has.

    The null is "the reasoning does not depend on its prompt". Row s scores z_s under its owner
    (column 0) and K - 1 prompts drawn uniformly from the others, so under the null the owner's
    score is exchangeable with its negatives' scores: which of the K is the owner carries no
    information. Each permutation therefore draws, independently per row, a pseudo-owner column
    c'[p, s] uniformly among the row's K scored columns (the owner included) and computes
    mi'_p = mean_s logp_sub[s, c'[p, s]] - mean_s marginal_s; the marginal (logsumexp over the
    K columns - log K) does not depend on which column is the owner, as in
    :func:`permutation_null`. The full-matrix null shuffles owners across samples; a sample's
    shuffled owner need not be among its K scored prompts here, so the re-draw is per row (a
    row keeps the owner itself with probability 1 / K).

    Calibration. With independent rows the draw is an exact randomization test (the observed
    pseudo-owner assignment is one of the K^S equally likely ones). Rows that share an owner also
    share its offset b_j (a prompt under which every reasoning scores higher): the observed value
    holds the count-weighted mean of the owners' offsets, sum_j n_j b_j / S, the same whichever
    negatives were drawn, while each null draw re-picks the offsets row by row. Where prompts own
    equal numbers of samples (the first turn's groups; the later turns' conversations) offsets
    only widen the null, so the floor is conservative; with very unequal counts and large offsets
    the observed value moves with the heavy prompts' offsets and the test is liberal. The
    full-matrix null keeps the counts and has neither effect. Simulated (the model of
    tests/collapse/test_mi_floor_subsampled.py: scores = sample effect + prompt offset (sd b) +
    cell noise (sd 1); 400 trials, K = 8, P = 100), the share with
    p_value <= 0.05 was 0.048 with no offsets (16 prompts x 4), 0.003 with sd b = 2 (16 x 4 or
    64 x 1), 0.033-0.043 with counts 1-6 and sd b 0.5-2, but 0.29 when one of 25 prompts owned
    40 of the 64 samples (sd b = 0.5).

    Identical prompts (equal ``prompt_keys`` in the estimator) need no special case: under the
    null a negative identical to the owner is as exchangeable as any other, so drawing it as
    pseudo-owner keeps the test valid; under input dependence it scores like the owner and
    lifts the null towards the estimate (lower power), as a shuffle onto a duplicate prompt does
    in :func:`permutation_null`, which takes no keys either.

    Args:
        logp_sub: (S, K) float, logp_sub[s, c] = log p(z_s | x_{cols[s, c]}); every entry finite
            (a pseudo-owner can land on any scored cell).
        cols: (S, K) integer prompt indices, column 0 the owner, as for
            :func:`mutual_information_subsampled` (the K entries of a row distinct).
        num_permutations: P >= 1.
        generator: torch.Generator for reproducible draws (None: torch's global RNG). The draw
            is exactly ``torch.randint(K, (P, S), generator=generator)`` (on the generator's
            device): c'[p, s] indexes row s's columns as given, 0 = the owner.
    Returns:
        the keys of :func:`permutation_null`: ``mi`` (observed; equal bit for bit to
        ``mutual_information_subsampled(logp_sub, cols)["mi"]``), ``mi_null`` (mean of the P
        null values), ``mi_null_std`` (their population std), ``mi_null_q95`` (their 95th
        percentile, linear interpolation: the floor), ``p_value`` = (1 + #{null mi >= observed
        mi}) / (1 + P), ``num_permutations`` = P. Rows whose K scores are equal (an input-blind
        policy) give null == observed in every draw, hence p_value = 1; an owner column far above
        the rest gives p_value = 1 / (1 + P) unless a draw keeps the owner on every row
        (probability K^-S).
    Raises:
        ValueError: as :func:`mutual_information_subsampled`, plus any -inf entry or
            num_permutations < 1.
    """
    if isinstance(num_permutations, bool) or not isinstance(num_permutations, int) or num_permutations < 1:
        raise ValueError(f"num_permutations must be an integer >= 1, got {num_permutations!r}")
    scores, own, order, cols_sorted = _sorted_columns(logp_sub, cols)
    S, K = scores.shape
    if torch.isneginf(scores).any():
        s, pos = first_where(torch.isneginf(scores))[0]
        raise ValueError(
            f"permutation_null_subsampled needs every entry of logp_sub finite (a pseudo-owner can "
            f"land on any scored cell), found -inf for sample {s} under prompt "
            f"{int(cols_sorted[s, pos])}"
        )
    # the estimator's arithmetic (columns in ascending prompt order): observed == its mi bit for bit
    matched = scores.gather(1, own[:, None]).squeeze(1)  # (S,)
    marginal_mean = (torch.logsumexp(scores, dim=1) - math.log(K)).mean()
    observed = matched.mean() - marginal_mean
    gen_device = generator.device if generator is not None else torch.device("cpu")
    picks = torch.randint(K, (num_permutations, S), generator=generator, device=gen_device)
    # original column c of row s sits at sorted position position[s, c]
    position = order.argsort(dim=1).to(scores.device)  # (S, K)
    sorted_picks = position.gather(1, picks.to(scores.device).T)  # (S, P)
    values = scores.gather(1, sorted_picks).T.contiguous()  # (P, S): logp_sub[s, c'[p, s]]
    # one 1-D mean per draw, the reduction of the observed mean: a draw that lands on values equal
    # to the owner's reproduces the estimate exactly (no rounding difference in either direction)
    null = torch.stack([v.mean() for v in values]) - marginal_mean  # (P,)
    return _null_summary(observed, null)



def _null_summary(observed: Tensor, null: Tensor) -> dict[str, float]:
    """The permutation nulls' report: the observed MI, the (P,) null values' mean, population std
    and 95th percentile (the floor), and the one-sided p-value (1 + #{null >= observed}) / (1 + P)."""
    p = null.numel()
    return {
        "mi": float(observed),
        "mi_null": float(null.mean()),
        "mi_null_std": float(null.std(correction=0)),
        "mi_null_q95": float(torch.quantile(null, 0.95)),
        "p_value": (1.0 + float((null >= observed).sum())) / (1.0 + p),
        "num_permutations": float(p),
    }

def bootstrap_intervals(
    logp: Tensor,
    owner: Tensor,
    *,
    num_resamples: int = 200,
    level: float = 0.95,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Percentile bootstrap intervals over prompts of ``mi``, ``h_cond`` and ``retrieval_acc@1``.

    The prompt is the unit: one resample draws N prompts with replacement (counts c_j) and keeps
    every sample of each drawn prompt c_j times; the estimates are averages of per-sample terms
    (:func:`resample_statistics`), so a resample's value is their c-weighted mean. Every sample
    stays scored against all N prompts: re-weighting the columns too would make the marginal
    log(sum_j c_j p(z|x_j) / N) a log of a randomly weighted sum, whose Jensen gap biases the
    resampled MI upwards (measured: the whole interval lay above the estimate). The interval is
    the ((1 - level) / 2, (1 + level) / 2) quantile pair (linear interpolation) of B resamples.

    Args:
        logp: (S, N) float, every entry finite.
        owner: (S,) integer prompt index of each sample in [0, N).
        num_resamples: B >= 2.
        level: interval coverage in (0, 1).
        generator: torch.Generator for reproducible resamples.
    Returns:
        ``{mi,h_cond,retrieval_acc@1}_{lo,hi}`` and ``num_resamples``.
    Raises:
        ValueError: as :func:`permutation_null` (non-finite entries included), B < 2, bad level.
    """
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 2:
        raise ValueError(f"num_resamples must be an integer >= 2, got {num_resamples!r}")
    if not (isinstance(level, (int, float)) and 0.0 < level < 1.0):
        raise ValueError(f"level must be a coverage in (0, 1), got {level!r}")
    scores = as_score_matrix(logp, "logp")
    S, N = scores.shape
    own = as_index_vector(owner, "owner", S, N, "N").to(scores.device)
    if not torch.isfinite(scores).all():
        raise ValueError(
            f"bootstrap_intervals needs every entry of logp finite, found a non-finite one at "
            f"(sample, prompt) {first_where(~torch.isfinite(scores))}")
    gen_device = generator.device if generator is not None else torch.device("cpu")
    draws = torch.randint(N, (num_resamples, N), generator=generator, device=gen_device)
    counts = torch.zeros((num_resamples, N), dtype=torch.float64, device=scores.device)
    counts.scatter_add_(1, draws.to(scores.device), torch.ones_like(counts))  # (B, N)
    stats = resample_statistics(scores, own, counts)
    q = torch.tensor([(1.0 - level) / 2, (1.0 + level) / 2], dtype=torch.float64,
                     device=scores.device)
    out: dict[str, float] = {"num_resamples": float(num_resamples)}
    for name, v in stats.items():
        lo, hi = torch.quantile(v, q).tolist()
        out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
    return out


def resample_statistics(logp: Tensor, owner: Tensor, counts: Tensor) -> dict[str, Tensor]:
    """``mi``, ``h_cond`` and ``retrieval_acc@1`` of B prompt-weighted resamples.

    Per sample (as in :func:`mutual_information` without ``prompt_keys``, all N prompts scored):
    pmi_s = matched_s - marginal_s, -matched_s and hit_s = [no other prompt scores higher] /
    (1 + #other prompts scoring the same); a resample's statistic is their mean weighted by
    w_s = counts[b, owner[s]]. With all counts 1 this is the point estimate.

    Args:
        logp: (S, N) finite float64 scores (validated by the caller).
        owner: (S,) long prompt index of each sample.
        counts: (B, N) float64 multiplicity of each prompt in each resample (0 = left out).
    Returns:
        name -> (B,) float64.
    """
    S, N = logp.shape
    matched = logp.gather(1, owner[:, None]).squeeze(1)  # (S,)
    marginal = torch.logsumexp(logp, dim=1) - math.log(N)
    others = torch.ones((S, N), dtype=torch.bool, device=logp.device)
    others.scatter_(1, owner[:, None], False)
    greater = ((logp > matched[:, None]) & others).sum(1)
    tied = ((logp == matched[:, None]) & others).sum(1)
    hit = (greater == 0).double() / (1.0 + tied.double())  # (S,)
    w = counts[:, owner]  # (B, S)
    total = w.sum(1)
    return {"mi": w @ (matched - marginal) / total, "h_cond": -(w @ matched) / total,
            "retrieval_acc@1": w @ hit / total}


class EMA:
    """Exponential moving average of a scalar (used for ``collapse/mi_z_ema``).

    value_0 = x_0 (the first update initialises, no zero-bias); value_t = decay * value_{t-1}
    + (1 - decay) * x_t. ``value`` is None before the first update.
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = self._check_decay(decay)
        self.value: float | None = None
        self.count = 0

    @staticmethod
    def _check_decay(decay) -> float:
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must be a float in [0, 1), got {decay!r}")
        return float(decay)

    def update(self, x: float) -> float:
        """Fold in one observation (a finite float); returns the new average."""
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"EMA.update needs a finite value, got {x}")
        self.value = x if self.value is None else self.decay * self.value + (1.0 - self.decay) * x
        self.count += 1
        return self.value

    def state_dict(self) -> dict:
        return {"decay": self.decay, "value": self.value, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        missing = {"decay", "value", "count"} - set(state)
        if missing:
            raise ValueError(f"EMA state is missing {sorted(missing)}; expected keys decay, value, count")
        self.decay = self._check_decay(state["decay"])
        self.value = None if state["value"] is None else float(state["value"])
        self.count = int(state["count"])
