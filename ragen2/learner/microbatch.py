"""Cutting a mini-batch into micro-batches by padded token count (``learner.micro_batch_tokens``).

A micro-batch costs ``rows x longest row`` tokens (rows are trimmed to the longest one). These pure
functions decide, from the row lengths alone, which rows every FSDP rank runs in which micro-batch.
Every rank sees the whole mini-batch, so every rank computes the same plan and, because FSDP's
forward/backward are collective, every rank gets the same number of micro-batches. The losses use
mini-batch-global token counts, so the partition never changes the gradient, only memory and speed.
"""

from __future__ import annotations

from typing import Sequence


def rows_by_group(group_ids: Sequence[int], group_order: Sequence[int]) -> list[int]:
    """Row ids with the rows of each group together, groups in ``group_order``.

    Args:
        group_ids: (N,) the group of each row (any ints).
        group_order: a permutation of ``range(G)`` over the G distinct groups in sorted order.
    Returns:
        (N,) row ids: the rows of group ``sorted(set(group_ids))[group_order[0]]`` in row order,
        then the next group's. Mini- and micro-batches cut from it hold whole groups where they
        can, so a group's shared prompt is forwarded once (:mod:`ragen2.learner.prefix`).
    """
    keys = sorted(set(group_ids))
    if sorted(group_order) != list(range(len(keys))):
        raise ValueError(f"group_order must be a permutation of range({len(keys)}), got {list(group_order)}")
    rows: dict[int, list[int]] = {k: [] for k in keys}
    for i, g in enumerate(group_ids):
        rows[g].append(i)
    return [i for o in group_order for i in rows[keys[o]]]


def _cost(group: Sequence[int], lengths: Sequence[int]) -> int:
    """Padded tokens of one micro-batch: rows x longest row."""
    return len(group) * max((lengths[i] for i in group), default=0)


def pack_by_tokens(lengths: Sequence[int], budget: int, rows: Sequence[int] | None = None,
                   ) -> list[list[int]]:
    """Greedy packing of ``rows`` (default: all) into micro-batches of at most ``budget`` padded tokens.

    Rows are taken longest first (ties: lower index first); a micro-batch is closed when one more
    row would push ``rows x longest`` over ``budget``. A row longer than ``budget`` alone gets its
    own micro-batch. Deterministic.

    Args:
        lengths: (N,) tokens of each row of the mini-batch.
        budget: padded-token budget per micro-batch (> 0).
        rows: the positions (into ``lengths``) to pack.
    Returns:
        micro-batches as lists of positions, each sorted by decreasing length.
    """
    if budget <= 0:
        raise ValueError(f"budget={budget} must be > 0")
    rows = range(len(lengths)) if rows is None else rows
    order = sorted(rows, key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        # sorted longest first: the group's first row sets its width
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def split_to_count(groups: list[list[int]], lengths: Sequence[int], count: int) -> list[list[int]]:
    """Split micro-batches until there are ``count`` of them (or every one is a single row).

    The costliest multi-row micro-batch (ties: the first) is halved, its longer rows first; splitting
    never raises a micro-batch's cost, so the budget still holds. Returns a new list; the caller
    pads with dummy micro-batches when the rows run out.
    """
    out = [list(g) for g in groups]
    while len(out) < count:
        multi = [j for j, g in enumerate(out) if len(g) > 1]
        if not multi:
            break
        j = max(multi, key=lambda k: (_cost(out[k], lengths), -k))
        g = out[j]
        half = (len(g) + 1) // 2
        out[j:j + 1] = [g[:half], g[half:]]
    return out


def plan_token_micro_batches(lengths: Sequence[int], world_size: int, budget: int,
                             ) -> list[list[list[int]]]:
    """Deal a mini-batch's rows to ``world_size`` ranks and cut each rank's rows into micro-batches.

    Rows are sorted longest first and dealt round-robin (rank r gets sorted[r::world_size]), so the
    ranks' token loads are close. Each rank packs its rows with :func:`pack_by_tokens`; all ranks
    then split up to the largest count K (:func:`split_to_count`), and a rank with fewer than K rows
    gets empty micro-batches ``[]`` (the caller runs a dummy row with a zero loss mask there).

    Args:
        lengths: (N,) tokens of each row of the mini-batch.
        world_size: number of FSDP ranks.
        budget: padded-token budget per micro-batch.
    Returns:
        plan[rank] = K micro-batches (lists of positions into ``lengths``), the same K for every rank.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    per_rank = [pack_by_tokens(lengths, budget, order[r::world_size]) for r in range(world_size)]
    k = max(1, max(len(g) for g in per_rank))
    plan = []
    for groups in per_rank:
        groups = split_to_count(groups, lengths, k)
        plan.append(groups + [[] for _ in range(k - len(groups))])
    return plan
