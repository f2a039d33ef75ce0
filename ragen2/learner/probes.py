"""Measurements that read the policy without training it: the gradient-SNR diagnostic, the MI
monitor's cross-scoring and the weight-sync probe's logprobs. All collective over the ranks."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterable

import numpy as np
import torch
import torch.distributed as dist

from ragen2.algos import logprobs_from_logits
from ragen2.algos.advantages import AdvantageInputs
from ragen2.algos.objective import (LossInputs, assign_credit, entropy_term, kl_term, needs_critic,
                                    policy_term, snr_gate)
from ragen2.batch import TrainingBatch
from ragen2.learner.forward import forward, holding, micro_batches, prefix_plan, tensors
from ragen2.learner.fsdp import full_tensor, gathered
from ragen2.learner.rank_state import RankState

if TYPE_CHECKING:
    from ragen2.cluster.shapes import ModelShape


def grad_snr(rank: RankState, batch: TrainingBatch, buckets: np.ndarray) -> dict[str, float]:
    """Per reward-spread bucket, the gradient norms of the task, entropy and KL terms.

    ``buckets`` (N,) gives each row's bucket (-1 = not measured). For every bucket and term a
    separate forward + backward over the bucket's rows (token-mean over the bucket), the
    total gradient norm is read and the gradients are dropped: no optimiser step, nothing
    changes. The task term is the policy loss (:func:`ragen2.algos.objective.policy_term`) at
    ratio 1 (the first mini-batch of an update), with the update's advantages (group-relative
    where the estimator needs a critic). The entropy and KL norms are reported as they enter the
    loss, times ``algorithm.entropy_coef`` / ``kl_coef`` (``{term}_norm``; 0 for a term that is
    off), and unscaled as ``{term}_norm_raw``; both with ``algorithm.regulariser_gate`` applied.
    """
    a = rank.cfg.algorithm
    credit = replace(a, adv_estimator="grpo") if needs_critic(a) else a  # no critic forward here
    rewards = torch.tensor(batch.rewards, dtype=torch.float64)
    group_ids = torch.tensor(batch.group_ids)
    terms = ["task", "entropy"] + (["kl"] if rank.ref is not None else [])
    coef = {"entropy": a.entropy_coef, "kl": a.kl_coef}
    gate = snr_gate(torch.tensor(batch.rewards), group_ids, a)  # as the update weights them
    out: dict[str, float] = {}
    rank.optim.zero_grad(set_to_none=True)
    for b in sorted(set(int(x) for x in buckets.tolist()) - {-1}):
        mb = np.flatnonzero(buckets == b)
        micros = micro_batches(rank, batch, mb)
        n_tok = float(batch.loss_mask[mb].sum())
        for term in terms:
            for micro in micros:
                ids, attn, mask, tok_r = tensors(rank, batch, micro, "input_ids", "attention_mask",
                                                 "loss_mask", "token_rewards")
                rows = torch.from_numpy(micro.index)
                share = prefix_plan(rank, ids, attn, mask)
                with holding(rank, share):
                    lp, ent = forward(rank, rank.model, ids, attn, mask, entropy=term == "entropy",
                                      entropy_grad=True, plan=share)
                    x = LossInputs(lp, lp.detach(), lp.new_zeros(()), mask, entropy=ent,
                                   regulariser_weights=(None if gate is None else
                                                        gate[rows].to(rank.device).unsqueeze(1)),
                                   agg_mode="token-mean", num_tokens=n_tok, num_seqs=1.0)
                    if term == "task":
                        x.advantages, _ = assign_credit(
                            AdvantageInputs(rewards, group_ids, rows, tok_r, mask), credit)
                        loss, _ = policy_term(x, a)
                    elif term == "entropy":
                        loss = entropy_term(x)
                    else:
                        with torch.no_grad():
                            x.ref_logprobs, _ = forward(rank, rank.ref, ids, attn, mask, plan=share)
                        loss = kl_term(x, a)
                    (loss * rank.world_size).backward()
            norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(rank.trainable, float("inf"))))
            if term == "task":
                out[f"grad_snr/b{b}/task_norm"] = norm
            else:  # as it enters the loss (coefficient x term; 0 when the term is off)
                out[f"grad_snr/b{b}/{term}_norm"] = coef[term] * norm
                out[f"grad_snr/b{b}/{term}_norm_raw"] = norm
            rank.optim.zero_grad(set_to_none=True)
    return out


def score(rank: RankState, contexts: list[list[int]], continuations: list[list[int]],
          columns: np.ndarray, chunk: int = 64) -> list[tuple[int, int, float, int]]:
    """log p(continuations[s] | contexts[columns[s, k]]) for this rank's share (collective).

    Work items (one context, up to ``chunk`` of its continuations) are dealt round-robin to the
    ranks. Returns (s, k, summed logprob, tokens) for this rank's items.

    On the CPU the parameters are gathered once for the whole call (:func:`gathered` with
    ``now``): no forward is then collective, and each rank scores its items in batches, several
    contexts and their continuations to a forward (:func:`score_batched`, ``monitor.score_tokens``
    or 2048 padded tokens a forward). Elsewhere the scorer's memory budget assumes sharded
    parameters, so FSDP's forwards stay collective: every rank runs the same number of items
    (dummy ones are discarded) and, item by item, the same number of forwards (each rank knows
    every rank's items, so it pads its own to the largest :func:`forward_count` of the round),
    each item scored alone (:func:`score_continuations`) in slices of :func:`score_budget` padded
    tokens: with ``monitor.score_tokens`` null, as many of its rows at once as fit in the free
    memory.
    """
    from ragen2.learner.scoring import forward_count, score_batched, score_continuations

    columns = np.asarray(columns)
    items = []
    for j in range(len(contexts)):
        where = np.argwhere(columns == j)
        for i in range(0, len(where), chunk):
            items.append((j, where[i:i + chunk]))
    world = rank.world_size
    mine = items[rank.rank::world]
    memory = score_memory(rank)  # collective on a GPU: the room every rank slices to
    temperature, device = rank.settings.temperature, rank.device

    def budget(item: tuple[int, np.ndarray]) -> int:  # the same on every rank
        j, where = item
        lengths = [len(continuations[s]) for s, _ in where]
        return score_budget(rank, len(contexts[j]), max(lengths, default=0), len(lengths), memory)

    def conts(where: np.ndarray) -> list[list[int]]:
        return [continuations[s] for s, _ in where]

    with torch.no_grad():
        if device.type == "cpu":
            with gathered(rank.model, now=True):
                scored = score_batched(rank.model, [(contexts[j], conts(w)) for j, w in mine],
                                       token_budget=score_budget(rank, 0, 0, 0, memory),
                                       temperature=temperature, device=device)
        else:
            per_rank = -(-len(items) // world)
            dummy = (0, np.array([[0, 0]]))
            dealt = [items[r::world] + [dummy] * (per_rank - len(items[r::world]))
                     for r in range(world)]
            scored = []
            for i in range(per_rank):
                rounds = max(forward_count([len(continuations[s]) for s, _ in dealt[r][i][1]],
                                           budget(dealt[r][i])) for r in range(world))
                j, where = dealt[rank.rank][i]
                scored.append(score_continuations(
                    rank.model, contexts[j], conts(where), temperature=temperature,
                    device=device, token_budget=budget((j, where)), forwards=rounds))
    return [(int(s), int(k), float(v), int(c)) for (_, where), (lp, n) in zip(mine, scored)
            for (s, k), v, c in zip(where, lp.tolist(), n.tolist())]


def assemble_scores(shape: tuple[int, ...], parts: Iterable[Iterable[tuple[int, int, float, int]]]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The (S, K) summed-logprob and token-count matrices from the ranks' :func:`score` parts
    (``(s, k, logprob, tokens)`` entries); RuntimeError if any (sample, prompt) pair is left
    unscored."""
    logp, tokens = np.full(shape, np.nan), np.zeros(shape, dtype=np.int64)
    for part in parts:
        for s, k, v, n in part:
            logp[s, k], tokens[s, k] = v, n
    if np.isnan(logp).any():
        raise RuntimeError("learner ranks left some (sample, prompt) pairs unscored")
    return logp, tokens


def score_memory(rank: RankState) -> tuple[int, ModelShape, int] | None:
    """The scorer's room on this device when ``monitor.score_tokens`` is null and the learner is
    on CUDA: (bytes, the model's shape, compute bytes), the room being the free memory less what
    the engine beside it may still take (``LearnerSettings.score_reserve_bytes``) and
    :data:`~ragen2.learner.scoring.SCORE_MARGIN` of the card, the smallest over the ranks
    (collective: every rank must slice alike, FSDP's forwards being collective). None where the
    budget is fixed: set in the config, off CUDA, or a model whose config.json is not a dense
    decoder's (2048 then, as on the CPU)."""
    from ragen2.cluster.shapes import shape_from_config_json
    from ragen2.learner.scoring import SCORE_MARGIN, device_memory

    memory = None if rank.cfg.monitor.score_tokens else device_memory(rank.device)
    if memory is None:
        return None
    try:
        shape = shape_from_config_json(rank.model.config.to_dict())
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    free, total = memory
    room = int(free - rank.settings.score_reserve_bytes - SCORE_MARGIN * total)
    if rank.world_size > 1:
        t = torch.tensor([room], dtype=torch.int64, device=rank.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        room = int(t.item())
    return room, shape, {"float32": 4}.get(rank.cfg.model.dtype, 2)


def score_budget(rank: RankState, context: int, width: int, rows: int,
                 memory: tuple[int, ModelShape, int] | None | str = "ask") -> int:
    """The scorer's slice budget for one item, ``rows`` continuations of at most ``width`` tokens
    under a ``context``-token prompt (:func:`ragen2.learner.scoring.slice_budget`):
    ``monitor.score_tokens`` when set; null: 2048 off CUDA, else sized to the room
    :func:`score_memory` found (``memory``; asked for when not given: collective then)."""
    from ragen2.learner.scoring import slice_budget

    memory = score_memory(rank) if memory == "ask" else memory
    if memory is None:
        return slice_budget(rank.cfg.monitor.score_tokens, width, rows, per_token=0, per_row=0,
                            free=None)
    room, shape, b = memory
    return slice_budget(None, width, rows, per_token=shape.scorer_bytes_per_token(b),
                        per_row=shape.scorer_bytes_per_row(b, context), free=room, margin=0)


def logprobs(rank: RankState, ids: list[int]) -> list[float] | None:
    """Raw log p(ids[t] | ids[:t]) for t = 1 .. len(ids) - 1 under the current policy.

    Temperature 1, no per-row scaling: what an engine reports for the same tokens (the
    weight-sync probe compares the two). Collective: every rank runs the same forward; rank 0
    returns the ``len(ids) - 1`` floats, the others None.
    """
    if len(ids) < 2:
        raise ValueError(f"logprobs needs at least 2 token ids, got {len(ids)}")
    t = torch.tensor([list(ids)], dtype=torch.long, device=rank.device)
    with torch.no_grad():
        logits = rank.model(input_ids=t, use_cache=False).logits[:, :-1]
        lp = logprobs_from_logits(logits.float(), t[:, 1:])
    return lp[0].cpu().tolist() if rank.rank == 0 else None
