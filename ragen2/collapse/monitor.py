"""The online MI collapse monitor: cross-score first-turn reasoning under every group's prompt.

From an (unfiltered) rollout batch it builds one context per group (the group's rendered first
prompt followed by the sampled ``<think>``) and one continuation per episode (its first-turn
reasoning, tags excluded, as the sampled token ids), asks a scorer for log p(z_s | x_j) over an (S, K) column
plan (every prompt, or the owner plus ``max_negatives`` sampled ones), and turns the matrix into
``collapse/*`` metrics with :func:`ragen2.collapse.mutual_information` (sums of token logprobs, the
SPEC's definition) plus a per-token-mean variant and a permutation null (``mi_null`` its mean,
``mi_floor`` its 95th percentile, ``mi_p_value``): on the full matrix the sample<->prompt pairing
shuffled (:func:`ragen2.collapse.mi.permutation_null`), on a subsampled plan a pseudo-owner drawn
per row among its scored columns (:func:`ragen2.collapse.mi.permutation_null_subsampled`, from
its own generator so that every other draw stays as it was).

With ``action_mi`` it also asks whether the first turn's action follows its reasoning,
I(A; Z | X) under ``collapse/action/*`` (:mod:`ragen2.collapse.action_mi`): every answer scored
under its own and the other reasonings of its group. Where the envs report state coordinates, the
later turns also get the contrast among inputs that differ in one coordinate,
``collapse/turns/contrast/<c>/*`` (:mod:`ragen2.collapse.contrast`).

Every measurement logs its counts (``n_samples``, ``n_prompts``; the action MI ``n_groups``);
one with fewer than ``min_samples`` samples (``monitor.min_samples``) or fewer than 2 prompts logs
only those and scores nothing: no MI, retrieval, floor or ``mi_z`` (its EMA skips it), see
:mod:`ragen2.collapse.withhold`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ragen2.collapse.action_mi import (ActionInputs, build_action_inputs,
                                       conditional_mutual_information, score_actions)
from ragen2.collapse.contrast import measure_contrast, state_key
from ragen2.collapse.mi import (EMA, choose_negatives, mutual_information,
                                mutual_information_subsampled, permutation_null,
                                permutation_null_subsampled)
from ragen2.collapse.withhold import MIN_SAMPLES
from ragen2.rollout.trajectory import Trajectory

#: retrieval accuracy is logged at these k's, each beside its chance level (RAGEN-2's k's)
RETRIEVAL_KS = (1, 2, 4, 8)

#: scorer(contexts, continuations, columns (S, K)) -> (logp_sum (S, K), tokens (S, K))
Scorer = Callable[[list[list[int]], list[list[int]], np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class MonitorMeasurement:
    """One batch measurement of :class:`MIMonitor`."""

    #: ``collapse/*`` for logging (only the counts where a measurement had too few samples)
    metrics: dict[str, float]
    #: the sampling policy's per-token entropy (:func:`token_entropy`); None when fewer than 2
    #: prompts had reasoning (the prompt-side measurement did not run)
    token_entropy: float | None = None


@dataclass
class MonitorInputs:
    contexts: list[list[int]]  # one per prompt (group)
    prompt_keys: list[str]  # the prompt text: identical prompts are equivalent for retrieval
    continuations: list[list[int]]  # one per sample
    owner: np.ndarray  # (S,) prompt index of each sample
    #: per prompt, its state for the contrast (:func:`ragen2.collapse.contrast.state_key`: the
    #: env and seed, and the coordinates its env reported); None where the envs report none
    states: list | None = None


def build_inputs(trajs: Sequence[Trajectory], min_prompts: int = 2) -> MonitorInputs | None:
    """Contexts and continuations from a batch; None when fewer than ``min_prompts`` prompts
    have reasoning (``min_prompts=0``: always the inputs, possibly empty, e.g. to count them).

    Token-exact: a sample's continuation is its first-turn reasoning as the engine sampled it
    (``Trajectory.think_span``), and a group's context is its first sample's ids up to there (the
    rendered prompt and the sampled ``<think>``), never a re-tokenisation of the text.
    """
    groups: dict[int, int] = {}
    contexts, keys, conts, owner = [], [], [], []
    for t in trajs:
        if t.think_span is None or t.env_error is not None or t.first_prompt_len == 0:
            continue
        a, b = t.think_span
        if t.group_id not in groups:
            groups[t.group_id] = len(contexts)
            contexts.append(list(t.input_ids[:a]))
            keys.append(t.observations[0] if t.observations else str(t.env_seed))
        conts.append(list(t.input_ids[a:b]))
        owner.append(groups[t.group_id])
    if len(contexts) < min_prompts:
        return None
    return MonitorInputs(contexts, keys, conts, np.asarray(owner, dtype=np.int64))


def build_turn_inputs(trajs: Sequence[Trajectory], rng: np.random.Generator,
                      mode: str = "trajectory", min_prompts: int = 2) -> MonitorInputs | None:
    """(context, reasoning) pairs from every turn, not only the first (RAGEN-2's two modes):
    ``trajectory``: per trajectory one turn drawn uniformly among those with reasoning;
    ``turn``: as many pairs as trajectories, drawn uniformly from all (trajectory, turn) pairs
    with reasoning (long episodes weigh more). A sample's context is its own conversation up to
    that turn's ``<think>`` (sampled ids, as in :func:`build_inputs`); identical conversations
    are one prompt. None below ``min_prompts`` prompts (2; 0: always)."""
    ok = [t for t in trajs if t.env_error is None and t.first_prompt_len > 0]
    spans = [[s for s in t.think_spans if s is not None] for t in ok]  # per trajectory
    if mode == "trajectory":
        chosen = [(t, sp[int(rng.integers(len(sp)))]) for t, sp in zip(ok, spans) if sp]
    elif mode == "turn":
        pairs = [(t, s) for t, sp in zip(ok, spans) for s in sp]
        n = min(len(pairs), len(ok))
        chosen = [pairs[int(i)] for i in np.sort(rng.choice(len(pairs), size=n, replace=False))]
    else:
        raise ValueError(f"mode {mode!r} is invalid; allowed: trajectory, turn")
    index: dict[tuple[int, ...], int] = {}  # identical conversations are one prompt
    contexts, conts, owner, states = [], [], [], []
    for t, (a, b) in chosen:
        ctx = tuple(t.input_ids[:a])
        if ctx not in index:
            index[ctx] = len(contexts)
            contexts.append(list(ctx))
            turn = t.think_spans.index((a, b))  # the state this turn's reasoning is about
            coords = t.coordinates[turn] if t.coordinates and turn < len(t.coordinates) else None
            states.append(state_key((t.env_name, str(t.env_seed)), coords))
        conts.append(list(t.input_ids[a:b]))
        owner.append(index[ctx])
    if len(contexts) < min_prompts:
        return None
    keys = [str(i) for i in range(len(contexts))]  # already distinct
    return MonitorInputs(contexts, keys, conts, np.asarray(owner, dtype=np.int64),
                         states if any(st is not None for st in states) else None)


class MIMonitor:
    """Runs the cross-scoring at a cadence and keeps the EMA of ``mi_z`` (resumable state)."""

    def __init__(self, every: int, max_negatives: int = 0, permutations: int = 20,
                 ema: float = 0.9, seed: int = 0, turn_negatives: int | None = 7,
                 turn_uniform: bool = False, *, action_mi: bool = True,
                 action_max_group: int | None = 8, min_samples: int = MIN_SAMPLES) -> None:
        """``turn_negatives``: other conversations each later-turn sample is scored under
        (``collapse/turns/*``, trajectory-uniform; 0 = all of them, None = later turns off);
        ``turn_uniform``: also the turn-uniform pairs (``collapse/turn_uniform/*``);
        ``action_mi``: also I(A; Z | X) of the first turn (``collapse/action/*``), groups larger
        than ``action_max_group`` split into smaller ones (the cost per sample grows with the
        group size; None = whole groups); ``min_samples``: the fewest samples a measurement
        reports a value from (``monitor.min_samples``; below it only its counts)."""
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
        self.min_samples = min_samples
        self.every, self.max_negatives, self.permutations = every, max_negatives, permutations
        self.seed, self.turn_negatives, self.turn_uniform = seed, turn_negatives, turn_uniform
        self.action_mi, self.action_max_group = action_mi, action_max_group
        self.mi_z_ema = EMA(ema)

    def due(self, step: int) -> bool:
        return self.every > 0 and (step == 1 or step % self.every == 0)

    def measure(self, trajs: Sequence[Trajectory], scorer: Scorer, step: int) -> MonitorMeasurement:
        """One batch's measurement; its ``collapse/*`` metrics: the first turn's under
        ``collapse/``, a turn drawn per trajectory under ``collapse/turns/``, the first turn's
        I(A; Z | X) under ``collapse/action/``; each with its counts, and its values only from at
        least ``min_samples`` samples of 2+ prompts (groups, for the action MI)."""
        out, entropy = self._measure_prompts(trajs, scorer, step)
        if self.action_mi:
            out.update(self._measure_actions(trajs, scorer, step))
        return MonitorMeasurement(out, entropy)

    def _measure_prompts(self, trajs: Sequence[Trajectory], scorer: Scorer,
                         step: int) -> tuple[dict[str, float], float | None]:
        """The first turn's ``collapse/*`` and the later turns'; the token entropy (None when
        fewer than 2 prompts had first-turn reasoning, as the entropy reference then waits)."""
        inputs = build_inputs(trajs, min_prompts=0)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        m = self._score(inputs, scorer, self.max_negatives, gen, self._null_seed(step, 0))
        out = {f"collapse/{k}": v for k, v in m.items()}
        entropy = None
        if len(inputs.contexts) >= 2:
            if "mi_z" in m:  # a withheld measurement leaves the EMA as it was
                out["collapse/mi_z_ema"] = self.mi_z_ema.update(m["mi_z"])
            out["collapse/reasoning_tokens_mean"] = float(np.mean([len(c) for c in
                                                                   inputs.continuations]))
            entropy = token_entropy(trajs)
            out["collapse/token_entropy"] = entropy
        if self.turn_negatives is not None:
            modes = [("trajectory", "turns")] + ([("turn", "turn_uniform")] if self.turn_uniform else [])
            for i, (mode, name) in enumerate(modes):
                rng = np.random.default_rng([self.seed, step, 7 + i])
                turns = build_turn_inputs(trajs, rng, mode, min_prompts=0)
                m = self._score(turns, scorer, self.turn_negatives, gen,
                                self._null_seed(step, 1 + i))
                out.update({f"collapse/{name}/{k}": v for k, v in m.items()})
                if mode == "trajectory":  # among inputs that differ in one coordinate
                    out.update(measure_contrast(
                        turns.contexts, turns.continuations, turns.owner, turns.states, scorer,
                        "collapse/turns/", min_samples=self.min_samples,
                        seed=int(np.random.SeedSequence([self.seed, step, 11]).generate_state(1)[0])))
        return out, entropy

    def _measure_actions(self, trajs: Sequence[Trajectory], scorer: Scorer,
                         step: int) -> dict[str, float]:
        """``collapse/action/*``: I(A; Z | X) of the first turn, its bound, floor and retrieval
        (only its counts below ``min_samples`` answers in groups of 2+). Its own generator
        (seeded by step), so the other metrics are unchanged by it."""
        inputs = build_action_inputs(trajs, self.action_max_group)
        counts = action_counts(inputs)
        if counts["n_samples"] < self.min_samples:
            return {f"collapse/action/{k}": v for k, v in counts.items()}
        logp = score_actions(inputs, scorer)
        gen = torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 4 + 3)
        m = conditional_mutual_information(torch.from_numpy(logp), torch.from_numpy(inputs.group),
                                           reasoning_keys=inputs.context.tolist(),
                                           num_permutations=self.permutations, generator=gen)
        out = {f"collapse/action/{k}": v for k, v in m.items() if k not in ("p_value", "num_permutations")}
        out["collapse/action/mi_p_value"] = m["p_value"]
        out["collapse/action/answer_tokens_mean"] = float(np.mean([len(c) for c in inputs.continuations]))
        return out

    def _null_seed(self, step: int, scope: int) -> int:
        """Seed of the subsampled plan's permutation null (scope 0: the first turn; 1 + i: the
        i-th later-turn mode). Its own stream, derived from the monitor's seed and the step
        only: drawing it neither advances the shared ``gen`` (the negatives of the later turns
        are drawn from it after the first turn's) nor touches any other generator."""
        return int(np.random.SeedSequence([self.seed, step, 13, scope]).generate_state(1)[0])

    def _score(self, inputs: MonitorInputs, scorer: Scorer, max_negatives: int,
               gen: torch.Generator, null_seed: int) -> dict[str, float]:
        """MI (summed and per-token-mean logprobs), retrieval@k and the permutation null of one
        set of (context, reasoning) pairs; only ``n_samples`` and ``n_prompts`` (the prompts
        each sample would be scored under) below ``min_samples`` samples or 2 prompts, and then
        nothing is scored. ``gen`` draws the negatives and the full matrix's null (in that
        order, as always); the subsampled plan's null draws from ``null_seed``'s own generator."""
        n, n_samples = len(inputs.contexts), len(inputs.owner)
        if n < 2 or n_samples < self.min_samples:
            scored = 1 + min(max_negatives, n - 1) if max_negatives and n >= 2 else n
            return {"n_samples": float(n_samples), "n_prompts": float(scored)}
        owner = torch.from_numpy(inputs.owner)
        if max_negatives and max_negatives < n - 1:
            columns = choose_negatives(owner, n, max_negatives, gen).numpy()
        else:
            columns = np.tile(np.arange(n), (len(owner), 1))
        logp, tokens = scorer(inputs.contexts, inputs.continuations, columns)
        logp_t = torch.from_numpy(np.asarray(logp, dtype=np.float64))
        mean_t = logp_t / torch.from_numpy(np.maximum(tokens, 1)).double()
        cols = torch.from_numpy(columns)
        if columns.shape[1] == n:  # columns are 0..N-1 in order on every row
            summed = mutual_information(logp_t, owner, prompt_keys=inputs.prompt_keys,
                                        ks=RETRIEVAL_KS)
            mean = mutual_information(mean_t, owner, prompt_keys=inputs.prompt_keys)
            null = permutation_null(logp_t, owner, num_permutations=self.permutations, generator=gen)
        else:
            summed = mutual_information_subsampled(logp_t, cols, prompt_keys=inputs.prompt_keys,
                                                   ks=RETRIEVAL_KS)
            mean = mutual_information_subsampled(mean_t, cols, prompt_keys=inputs.prompt_keys)
            null = permutation_null_subsampled(logp_t, cols, num_permutations=self.permutations,
                                               generator=torch.Generator().manual_seed(null_seed))
        out = {k: float(v) for k, v in summed.items()}
        out["mi_token_mean"] = float(mean["mi"])
        out["mi_null"] = float(null["mi_null"])
        out["mi_floor"] = float(null["mi_null_q95"])  # the null's 95th percentile
        out["mi_p_value"] = float(null["p_value"])
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"mi_z_ema": self.mi_z_ema.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mi_z_ema.load_state_dict(state["mi_z_ema"])


def action_counts(inputs: ActionInputs | None) -> dict[str, float]:
    """``n_samples`` (answers in groups of 2+) and ``n_groups`` (such groups) of the action MI's
    inputs, as :func:`ragen2.collapse.action_mi.conditional_mutual_information` counts them (0, 0
    when no group has 2 samples)."""
    if inputs is None:
        return {"n_samples": 0.0, "n_groups": 0.0}
    sizes = np.unique(inputs.group, return_counts=True)[1]
    return {"n_samples": float(sizes[sizes >= 2].sum()), "n_groups": float((sizes >= 2).sum())}


def token_entropy(trajs: Sequence[Trajectory]) -> float:
    """Per-token entropy estimate of the sampling policy: mean -logprob over generated tokens."""
    total = count = 0.0
    for t in trajs:
        lp, mask = np.asarray(t.logprobs), np.asarray(t.loss_mask, dtype=bool)
        total += float(-lp[mask].sum())
        count += float(mask.sum())
    return total / count if count else float("nan")
