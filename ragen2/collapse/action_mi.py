"""Does the action follow the reasoning? I(A; Z | X) from cross-scoring answers under reasonings.

The prompt-side monitor (:mod:`ragen2.collapse.mi`) asks whether the reasoning Z depends on the
input X. This module asks the next question: whether the action A depends on the reasoning. A
policy whose reasoning is decoration writes an answer that is the same (in distribution) whatever
it reasoned, so I(A; Z | X) ~ 0 even when I(X; Z) is high; a policy that acts on what it reasoned
has I(A; Z | X) up to H(Z | X).

Where the samples come from (see :func:`build_action_inputs`). Only the first turn has several
reasonings of one prompt: all rollouts of a group start from the same rendered prompt X, so the
group's first-turn reasonings z_1..z_K are K samples of p(z | X). From the second turn on every
episode's conversation holds its own earlier replies and observations, the contexts diverge, and
"the other reasonings of the same prompt" no longer exist, so this is a first-turn measurement.
Samples sharing X are those whose token ids before the reasoning (``input_ids[:a]`` with
``(a, b) = think_span``: the prompt and the sampled ``<think>``) are identical; an episode with an
env error, no closed first-turn reasoning or no prompt is left out, so groups can be smaller than
``rollout.group_size``, and a group left with one sample has nothing to compare and is excluded.
Scoring costs K forwards of short answers per sample in a group of K (one per reasoning), so the
monitor splits groups larger than ``max_group`` (8) into smaller groups of the same prompt
(:func:`build_action_inputs`); the estimator and its bound are then those of the smaller groups.

Scoring. For sample s of a group g with members m_1 < ... < m_K (sample indices), the context
of member j is ``c_j = input_ids_j[:b_j]`` (X, ``<think>`` and its sampled reasoning, ending where
``</think>`` starts) and the action of s is ``a_s = input_ids_s[b_s : turn_ends[0] + 1]`` (the
closing tag, ``<answer>...</answer>`` and whatever else the engine sampled in that turn, token
exact; a token straddling ``</think>`` stays with the action). The learner teacher-forces a_s
under every c_j of its group:

    logp[s, c] = log p(a_s | x, z_{m_c})      (summed token logprobs, c = 0 .. K_g - 1)

Definitions (all float64; the own column of s is o_s, the position of s among its group's members;
K_s = size of s's group; means over the S samples of groups with K >= 2):

    matched_s  = logp[s, o_s]
    marginal_s = logsumexp_{c < K_s} logp[s, c] - log K_s      (log of the empirical p(a_s | x))
    h_cond     = -mean_s matched_s                              (estimate of H(A | X, Z))
    h_marginal = -mean_s marginal_s                             (estimate of H(A | X))
    mi         = mean_s (matched_s - marginal_s) = h_marginal - h_cond        (nats)
    log_k      = mean_s log K_s                                 (the bound with all z distinct)
    mi_bound   = mean_s log(K_s / n_s),  n_s = #members of s's group whose reasoning is identical
                 to s's (``reasoning_keys``; n_s = 1 without them). Identical reasonings give
                 identical columns, so pmi_s = matched_s - marginal_s <= log(K_s / n_s): this is
                 the most an answer that follows its reasoning exactly can score on this batch.

Permutation floor: each of P permutations shuffles, *within every group*, which reasoning is each
answer's own (s claims the column of pi(s), pi a random permutation of s's group); the marginal is
untouched, so mi' = mean_s logp[s, o_{pi(s)}] - mean_s marginal_s. ``mi_null`` is the mean of the
P values, ``p_value`` = (1 + #{mi' >= mi}) / (1 + P). When the action ignores the reasoning (all
columns of a row equal) every mi' equals mi exactly and p_value = 1.

Retrieval: ``retrieval_acc@k`` is the share of answers whose own reasoning ranks in the top k of
their row among the group's reasonings, identical reasonings merged into one candidate (scored by
their max) and ties broken uniformly at random, computed exactly as in
:func:`ragen2.collapse.mutual_information`; ``retrieval_chance@k`` = mean_s min(k, C_s) / C_s with
C_s the number of distinct reasonings in s's group.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ragen2.collapse.mi_inputs import check_ks, dense_ids
from ragen2.rollout.trajectory import Trajectory

__all__ = ["ActionInputs", "build_action_inputs", "conditional_mutual_information", "group_layout",
           "score_actions"]


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------
def _group_ids(group) -> Tensor:
    if isinstance(group, Tensor):
        g = group
    else:
        g = torch.as_tensor(np.asarray(group))
    if g.dim() != 1:
        raise ValueError(f"group must be a 1-D tensor of group ids (one per sample), got shape "
                         f"{tuple(g.shape)}")
    if g.is_floating_point() or g.is_complex() or g.dtype == torch.bool:
        raise ValueError(f"group must hold integer group ids (torch.long), got dtype {g.dtype}")
    if g.shape[0] < 1:
        raise ValueError("group needs at least one sample")
    return dense_ids(g.tolist(), "group")


def group_layout(group) -> tuple[Tensor, Tensor, Tensor]:
    """Where every sample's group members sit: the column layout of the ``logp`` matrix.

    Args:
        group: (S,) integer group ids (samples sharing the prompt X share an id; any integers).
    Returns:
        ``members`` (S, K_max) long: members[s, c] = index of the c-th sample (in index order) of
        s's group, -1 past the group's size; ``own`` (S,) long: the column of s itself in its row;
        ``size`` (S,) long: the size K_s of s's group.
    """
    return _layout(_group_ids(group))


def _layout(gid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    S = gid.shape[0]
    order = torch.argsort(gid, stable=True)  # samples grouped, index order inside a group
    counts = torch.bincount(gid)
    starts = torch.cumsum(counts, 0) - counts
    size = counts[gid]
    pos = torch.empty(S, dtype=torch.long)
    pos[order] = torch.arange(S) - starts[gid[order]]
    c = torch.arange(int(counts.max()))
    idx = starts[gid][:, None] + c[None, :]
    valid = c[None, :] < size[:, None]
    members = torch.where(valid, order[idx.clamp(max=S - 1)], torch.full_like(idx, -1))
    return members, pos, size


def _first_where(mask: Tensor) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in row) for row in mask.nonzero()[:5]]


# --------------------------------------------------------------------------------------------
# the estimator
# --------------------------------------------------------------------------------------------
def conditional_mutual_information(
    logp: Tensor,
    group,
    *,
    reasoning_keys: Sequence[Hashable] | None = None,
    ks: Sequence[int] = (1,),
    num_permutations: int = 20,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """I(A; Z | X) in nats from answers cross-scored under their group's reasonings.

    Args:
        logp: (S, K) float, K >= the largest group. logp[s, c] = log p(a_s | x, z_{m_c}) with m_c
            the c-th member (in sample-index order) of s's group, see :func:`group_layout`;
            cells at c >= K_s are padding and ignored (any value, NaN included). Within a group:
            finite, except -inf off a sample's own column when ``num_permutations`` = 0.
        group: (S,) integer group ids: samples with equal ids share the prompt X. Samples alone
            in their group are excluded (``n_excluded``).
        reasoning_keys: optional (S,) hashables; equal keys within a group mark identical
            reasonings (merged for retrieval, and the tighter ``mi_bound``).
        ks: the k's of ``retrieval_acc@k``.
        num_permutations: P >= 0 within-group shuffles for the floor (0: no ``mi_null``).
        generator: torch.Generator for reproducible shuffles (None: torch's global RNG).
    Returns:
        dict of floats (the module docstring has the definitions): ``mi``, ``h_cond``,
        ``h_marginal``, ``mi_bound``, ``log_k``, ``retrieval_acc@k`` and ``retrieval_chance@k``
        per k, ``n_samples`` (samples in groups of 2+), ``n_groups`` (such groups),
        ``n_excluded`` (samples alone in their group); with P > 0 also ``mi_null``,
        ``mi_null_std``, ``mi_floor`` (the null's 95th percentile), ``p_value`` and
        ``num_permutations``.
    Raises:
        ValueError: logp not a 2-D float tensor with one row per sample and a column per member of
            the largest group; NaN or +inf in a group's cell; -inf at a sample's own column (or
            anywhere in its group when P > 0); group not 1-D integer; no group of 2+ samples;
            reasoning_keys of the wrong length or unhashable; bad ks or num_permutations.
    """
    x = torch.as_tensor(logp)
    if x.dim() != 2:
        raise ValueError(f"logp must be a 2-D (S samples, K group members) tensor, got shape "
                         f"{tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"logp must be a floating-point tensor of log-likelihoods, got dtype {x.dtype}")
    gid = _group_ids(group)
    members, own, size = _layout(gid)
    S = members.shape[0]
    if x.shape[0] != S:
        raise ValueError(f"logp has {x.shape[0]} rows but group names {S} samples")
    if x.shape[1] < members.shape[1]:
        raise ValueError(f"logp has {x.shape[1]} columns but the largest group has "
                         f"{members.shape[1]} samples; one column per group member is needed")
    ks = check_ks(ks)
    if (isinstance(num_permutations, bool) or not isinstance(num_permutations, int)
            or num_permutations < 0):
        raise ValueError(f"num_permutations must be an integer >= 0, got {num_permutations!r}")
    if reasoning_keys is not None:
        keys = list(reasoning_keys)
        if len(keys) != S:
            raise ValueError(f"reasoning_keys has {len(keys)} entries but there are {S} samples")
        key_id = dense_ids(keys, "reasoning_keys")
    else:
        key_id = torch.arange(S)
    keep = size >= 2
    n_excluded = int((~keep).sum())
    if not keep.any():
        raise ValueError(f"no group has 2 or more samples (group sizes {size.tolist()}); I(A; Z | X) "
                         "compares an answer's own reasoning with others of the same prompt")
    rows = keep.nonzero().squeeze(1)
    x = x.detach().to(torch.float64)[:, : members.shape[1]][rows]
    members, own, size, gid = members[rows], own[rows], size[rows], gid[rows]
    valid = members >= 0
    cells = x[valid]
    where = lambda m: [(int(rows[s]), c) for s, c in _first_where(m)]
    if torch.isnan(cells).any():
        raise ValueError(f"logp contains NaN at (sample, column) {where(valid & torch.isnan(x))}")
    if torch.isposinf(cells).any():
        raise ValueError(f"logp contains +inf at (sample, column) {where(valid & torch.isposinf(x))}")
    scores = torch.where(valid, x, torch.full_like(x, -math.inf))
    matched = scores.gather(1, own[:, None]).squeeze(1)
    if not torch.isfinite(matched).all():
        bad = [int(rows[s]) for s in (~torch.isfinite(matched)).nonzero()[:5, 0]]
        raise ValueError(f"logp is -inf at the own column of sample(s) {bad}: an answer must have a "
                         "finite log-likelihood under the reasoning it was sampled after")
    if num_permutations and torch.isneginf(cells).any():
        raise ValueError(f"the permutation floor needs every in-group cell of logp finite (a "
                         f"shuffled pairing can land on any), found -inf at (sample, column) "
                         f"{where(valid & torch.isneginf(x))}; pass num_permutations=0 to skip it")
    n = scores.shape[0]
    log_size = size.to(torch.float64).log()
    marginal = torch.logsumexp(scores, dim=1) - log_size

    # ---- identical reasonings: equivalence classes within a row ----
    cls = torch.where(valid, key_id[members.clamp(min=0)], torch.full_like(members, -1))
    same = (cls[:, :, None] == cls[:, None, :]) & valid[:, :, None] & valid[:, None, :]
    cls_score = scores[:, None, :].expand_as(same).masked_fill(~same, -math.inf).amax(2)
    first = ~(same & torch.ones_like(same).tril(-1)).any(2)  # c is its class's first column
    rep = first & valid
    own_cls = cls.gather(1, own[:, None])
    n_same = (cls == own_cls).sum(1).to(torch.float64)
    own_score = cls_score.gather(1, own[:, None])
    others = rep & (cls != own_cls)
    greater = (others & (cls_score > own_score)).sum(1).to(torch.float64)
    tied = (others & (cls_score == own_score)).sum(1).to(torch.float64)
    n_cand = rep.sum(1).to(torch.float64)

    # ---- observed mi and the within-group permutation floor, by the same arithmetic ----
    if num_permutations:
        gen_device = generator.device if generator is not None else torch.device("cpu")
        noise = torch.rand((num_permutations, n), generator=generator, device=gen_device).cpu()
        shuffled = torch.argsort(gid[None, :].double() * 2.0 + noise, dim=1)  # grouped, random inside
        base = torch.argsort(gid, stable=True)
        perm = torch.empty_like(shuffled)
        perm[:, base] = shuffled  # perm[p, s] = pi_p(s), a sample of s's group
        claims = torch.cat([own[:, None], own[perm].T], dim=1)  # (n, 1 + P)
    else:
        claims = own[:, None]
    vals = scores.gather(1, claims).mean(0) - marginal.mean()
    out: dict[str, float] = {
        "mi": float(vals[0]),
        "h_cond": 0.0 - float(matched.mean()),
        "h_marginal": 0.0 - float(marginal.mean()),
        "mi_bound": float((log_size - n_same.log()).mean()),
        "log_k": float(log_size.mean()),
        "n_samples": float(n),
        "n_groups": float(len(set(gid.tolist()))),
        "n_excluded": float(n_excluded),
    }
    if num_permutations:
        null = vals[1:]
        out.update({"mi_null": float(null.mean()), "mi_null_std": float(null.std(correction=0)),
                    "mi_floor": float(torch.quantile(null, 0.95)),  # linear, as permutation_null
                    "p_value": (1.0 + float((null >= vals[0]).sum())) / (1.0 + num_permutations),
                    "num_permutations": float(num_permutations)})
    for k in ks:
        hit = torch.minimum((k - greater).clamp(min=0.0), tied + 1.0) / (tied + 1.0)
        out[f"retrieval_acc@{k}"] = float(hit.mean())
        out[f"retrieval_chance@{k}"] = float((n_cand.clamp(max=float(k)) / n_cand).mean())
    return out


# --------------------------------------------------------------------------------------------
# from trajectories to the scorer and back
# --------------------------------------------------------------------------------------------
@dataclass
class ActionInputs:
    contexts: list[list[int]]  # distinct (X, reasoning) contexts, ids up to where </think> starts
    continuations: list[list[int]]  # one per sample: its first-turn action (from </think> on)
    group: np.ndarray  # (S,) index of the sample's group: its prompt X (groups of 2+ only)
    context: np.ndarray  # (S,) index into ``contexts`` of the sample's own (X, reasoning)


def build_action_inputs(trajs: Sequence[Trajectory],
                        max_group: int | None = None) -> ActionInputs | None:
    """First-turn (X, reasoning) contexts and actions of a batch; None without a group of 2+.

    Token-exact, as :func:`ragen2.collapse.monitor.build_inputs`: with ``(a, b) = think_span``,
    a sample shares X with the others whose ``input_ids[:a]`` are identical, its context is
    ``input_ids[:b]`` and its action ``input_ids[b : turn_ends[0] + 1]``, the ids as sampled.
    Identical contexts (equal reasoning under equal X) are listed once.

    ``max_group`` (None or 0: no cap; else >= 2) caps the cost, which grows with the group size
    (every answer is scored under every reasoning of its group): a group of K > max_group samples
    is split, in batch order, into ceil(K / max_group) groups of sizes as equal as possible (e.g.
    64 -> 8 x 8, 9 -> 5 + 4), every sample kept. Samples of one prompt are exchangeable, so this
    is the same estimator on smaller groups; its bound becomes mean log K of the smaller groups.
    """
    if max_group is not None and (isinstance(max_group, bool) or not isinstance(max_group, int)
                                  or max_group == 1 or max_group < 0):
        raise ValueError(f"max_group must be None, 0 (no cap) or an integer >= 2, got {max_group!r}")
    by_prompt: dict[tuple[int, ...], list[Trajectory]] = {}
    for t in trajs:
        if (t.think_span is None or t.env_error is not None or t.first_prompt_len == 0
                or not t.turn_ends or t.think_span[1] > t.turn_ends[0]):
            continue
        by_prompt.setdefault(tuple(t.input_ids[: t.think_span[0]]), []).append(t)
    contexts: list[list[int]] = []
    ctx_index: dict[tuple[int, ...], int] = {}
    conts, group, context = [], [], []
    for members in (m for m in by_prompt.values() if len(m) >= 2):
        k = len(members)
        parts = -(-k // max_group) if max_group else 1
        base = group[-1] + 1 if group else 0
        for i, t in enumerate(members):
            b = t.think_span[1]
            ctx = tuple(t.input_ids[:b])
            if ctx not in ctx_index:
                ctx_index[ctx] = len(contexts)
                contexts.append(list(ctx))
            conts.append(list(t.input_ids[b: t.turn_ends[0] + 1]))
            group.append(base + i * parts // k)
            context.append(ctx_index[ctx])
    if not conts:
        return None
    return ActionInputs(contexts, conts, np.asarray(group, dtype=np.int64),
                        np.asarray(context, dtype=np.int64))


def score_actions(inputs: ActionInputs, scorer) -> np.ndarray:
    """(S, K_max) logp[s, c] = log p(action_s | context of the c-th member of s's group).

    ``scorer(contexts, continuations, columns (S, D)) -> (logp_sum, tokens)`` is the learner's
    (:meth:`ragen2.learner.group.LearnerGroup.score`). Each action is scored once per *distinct*
    reasoning of its group (D = the most distinct ones in a group; shorter rows are padded with
    their first context and the padding discarded), then spread over the members, so identical
    reasonings get identical columns.
    """
    members, _, _ = group_layout(inputs.group)
    members = members.numpy()
    S = len(inputs.continuations)
    distinct: dict[int, dict[int, None]] = {}  # group -> its distinct contexts (an ordered set)
    for s in range(S):
        distinct.setdefault(int(inputs.group[s]), {})[int(inputs.context[s])] = None
    d_max = max(len(v) for v in distinct.values())
    columns = np.empty((S, d_max), dtype=np.int64)
    for s in range(S):
        ctxs = list(distinct[int(inputs.group[s])])
        columns[s] = ctxs + [ctxs[0]] * (d_max - len(ctxs))
    scored, _ = scorer(inputs.contexts, inputs.continuations, columns)
    scored = np.asarray(scored, dtype=np.float64)
    logp = np.full(members.shape, np.nan)
    for s in range(S):
        pos = {j: i for i, j in enumerate(distinct[int(inputs.group[s])])}
        for c, m in enumerate(members[s]):
            if m >= 0:
                logp[s, c] = scored[s, pos[int(inputs.context[m])]]
    return logp
