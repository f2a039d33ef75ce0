"""The MI contrast a part of the state cannot satisfy: inputs that differ in one coordinate.

Why. Retrieval@1 asks whether a reasoning picks its own input out of the others scored with it.
When those others differ from it in many ways, a reasoning that keeps one part of the state can
still pick it out: in collapse study 2 the later-turn reasoning of one run stated its row and
stopped tracking its column (the stated position was right 0.96 -> 0.46 of the time) while the
batch's later-turn retrieval@1 among 8 inputs stayed at 0.64: the row alone told the input apart.
The contrast asks the same question among inputs that share everything but one coordinate, which
that reasoning cannot answer for the column.

Coordinates. An env may describe the state a reasoning is about with the optional hook
``state_coordinates()`` -> ``{"row": 2, "col": 3}`` (FrozenLake: the player's cell; Sokoban: the
player's cell and the boxes, ``{"row", "col", "boxes"}``; docs/reference/environments.md). The
runner records it every turn, before the action (``Trajectory.coordinates``); the later-turn
probe panel reads it where it builds its states. A **stratum** is everything the coordinates do
not describe and that must match too: the env and its problem (env name and env seed, i.e. the
same map). Two inputs are

* *equivalent* for the contrast: same stratum, every coordinate equal (the same state; e.g. the
  same cell reached by another history);
* *candidates on c*: same stratum, the same coordinate names, equal on every coordinate but c,
  different on c ("same map, same row, another column" for c = ``col``).

Per sample s (its own input o) and coordinate c with at least one candidate among the inputs its
reasoning was scored under (ℓ[s, j] = log p(z_s | x_j), the monitor's score matrix):

* the own class scores max_{j equivalent to o} ℓ[s, j]; each distinct value of c among the
  candidates is one class scoring the max of its inputs (duplicates cannot push the owner down,
  as in ``retrieval_acc@k``);
* ``hit_s`` = the probability that the own class ranks first when ties are broken uniformly at
  random: [no candidate class scores higher] / (1 + #candidate classes scoring the same);
* ``chance_s`` = 1 / (1 + #candidate classes): what a reasoning blind to c gets (its scores are
  equal across the classes, so every class ties);
* ``pmi_s`` = ℓ[s, o] - log mean_{j in J} exp ℓ[s, j] with J = the equivalent inputs and the
  candidates: the pointwise MI of the mutual-information estimator (:mod:`ragen2.collapse.mi`)
  restricted to the stratum slice, an estimate of I(X_c; Z | X_{-c}); its bound
  ``bound_s`` = log(|J| / #equivalent inputs).

Metrics of a scope (``<scope>contrast/<c>/``), over the samples that have a candidate on c:

* ``acc@1`` = mean hit_s: **the primary measure**. It reads like retrieval@1, has a chance level
  of its own and cannot be met by another coordinate: a reasoning that writes only the row gets
  exactly ``chance@1`` on ``col`` however well it retrieves among the batch's inputs;
* ``chance@1`` = mean chance_s; ``acc@1_lo`` / ``acc@1_hi``: a 95% percentile bootstrap interval
  over prompts (:func:`ragen2.collapse.grounding.grounding_interval`: the samples of one prompt are
  not independent, the prompt is);
* ``mi`` = mean pmi_s (nats; 0 for a reasoning blind to c, negative by noise) and ``mi_bound`` =
  mean bound_s: the conditional MI, secondary (its scale depends on how many candidates each
  sample had, and its sum-of-logprobs scores grow with the reasoning's length);
* ``n_samples`` (samples with a candidate on c) and ``n_prompts`` (their inputs): always logged;
  the values only from ``monitor.min_samples`` samples of 2+ prompts (:mod:`ragen2.collapse.withhold`).

Scopes:

======================================  ========================================================
``collapse/turns/contrast/<c>/``        the batch's later turns (one per trajectory, as
                                        ``collapse/turns/``): candidates are other trajectories'
                                        turns on the same map (a group's episodes, or another
                                        group with the same seed); each sample with one is also
                                        scored under its candidates (an extra, small scoring)
``collapse/panel/turns/contrast/<c>/``  the later-turn probe panel's contrast sets: the first
                                        ``monitor.panel_contrast`` panel prompts (with
                                        siblings) each get up to ``SIBLINGS`` sibling states on
                                        the same map per coordinate, reached by another
                                        scripted opening of the same length and differing from
                                        it in that coordinate only (:func:`ragen2.collapse.
                                        panel_turns.contrast_siblings`); scored within the set
======================================  ========================================================

The batch's candidates share the map and the other coordinates, not the history (the
conversation before the turn); the panel's differ in their scripted opening too. Both contrast
inputs, not clean interventions on one coordinate: a reasoning could tell them apart by the
history. Where the envs have no ``state_coordinates`` hook nothing is logged.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ragen2.collapse.grounding import grounding_interval
from ragen2.collapse.withhold import MIN_SAMPLES

__all__ = ["ContrastSamples", "StateKey", "contrast_counts", "contrast_fields", "contrast_metrics",
           "contrast_rows", "contrast_samples", "measure_contrast", "score_rows", "state_key"]

#: the stratum (what must match and is never contrasted) and the sorted (name, value) pairs
StateKey = tuple[Hashable, tuple[tuple[str, Any], ...]]

#: scorer(contexts, continuations, columns (S, K)) -> (logp_sum (S, K), tokens (S, K))
Scorer = Callable[[list[list[int]], list[list[int]], np.ndarray], tuple[np.ndarray, np.ndarray]]


def state_key(stratum: Hashable, coordinates: Mapping[str, Any] | None) -> StateKey | None:
    """The contrast's description of one input: ``(stratum, sorted coordinate items)``; None
    when there are no coordinates (the input takes part in no contrast)."""
    if coordinates is None:
        return None
    return stratum, tuple(sorted(coordinates.items()))


@dataclass(frozen=True)
class ContrastSamples:
    """One coordinate's per-sample terms (one entry per sample with a candidate on it)."""

    hit: np.ndarray  # P(own input ranked first among its class and the candidate classes)
    chance: np.ndarray  # 1 / (1 + candidate classes)
    pmi: np.ndarray  # the stratum slice's pointwise MI
    bound: np.ndarray  # log(|J| / #equivalent inputs)
    prompt: np.ndarray  # the sample's own input (the bootstrap's unit)


def _relation(own: StateKey, other: StateKey | None) -> tuple[str, ...] | None:
    """The coordinates ``other`` differs from ``own`` in (() = equivalent); None when it is in
    another stratum or has other coordinate names."""
    if other is None or other[0] != own[0]:
        return None
    a, b = own[1], other[1]
    if len(a) != len(b) or any(x[0] != y[0] for x, y in zip(a, b)):
        return None
    return tuple(x[0] for x, y in zip(a, b) if x[1] != y[1])


def contrast_rows(owner: Sequence[int], states: Sequence[StateKey | None]) -> list[list[int]]:
    """Per sample, the inputs its contrasts need it scored under: its own first, then every other
    input of its stratum that is equivalent to it or differs in exactly one coordinate (in
    index order). A sample whose input has no candidate on any coordinate gets ``[own]``."""
    rows = []
    for o in owner:
        o = int(o)
        own = states[o]
        row = [o]
        if own is not None:
            related = [j for j, st in enumerate(states) if j != o
                       and (d := _relation(own, st)) is not None and len(d) <= 1]
            if any(_relation(own, states[j]) for j in related):  # some candidate
                row += related
        rows.append(row)
    return rows


def contrast_counts(owner: Sequence[int], states: Sequence[StateKey | None]
                    ) -> dict[str, tuple[int, int]]:
    """{coordinate: (samples with a candidate on it among all inputs, their distinct inputs)}
    for every coordinate name any input has (0, 0 where none has a candidate)."""
    names = sorted({n for st in states if st is not None for n, _ in st[1]})
    samples: dict[str, list[int]] = {n: [] for n in names}
    for o in owner:
        own = states[int(o)]
        if own is None:
            continue
        differing = {d[0] for j, st in enumerate(states) if j != int(o)
                     and (d := _relation(own, st)) is not None and len(d) == 1}
        for n in differing:
            samples[n].append(int(o))
    return {n: (len(v), len(set(v))) for n, v in samples.items()}


def contrast_samples(logp: np.ndarray, cols: np.ndarray, owner: Sequence[int],
                     states: Sequence[StateKey | None]) -> dict[str, ContrastSamples]:
    """The per-sample terms of every coordinate from a scored matrix.

    Args:
        logp: (S, K) float, ``logp[s, k]`` = log p(z_s | x_{cols[s, k]}); -inf allowed except at
            the sample's own input, ignored where ``cols`` is -1.
        cols: (S, K) int, the input each column scored (-1: padding, not scored); an input listed
            twice in a row counts once (its larger score).
        owner: (S,) the sample's own input; it must be among its row's columns.
        states: per input, :func:`state_key` or None.
    Returns:
        {coordinate: :class:`ContrastSamples`} for every coordinate name of the owners' states,
        possibly with no entry (no sample had a candidate on it among its scored inputs).
    Raises:
        ValueError: shapes, NaN / +inf scores, an owner not scored in its row or scored -inf.
    """
    logp = np.asarray(logp, dtype=np.float64)
    cols = np.asarray(cols)
    if logp.ndim != 2 or cols.shape != logp.shape:
        raise ValueError(f"logp and cols must be (S, K) of one shape, got {logp.shape} and "
                         f"{cols.shape}")
    if len(owner) != logp.shape[0]:
        raise ValueError(f"owner has {len(owner)} entries for {logp.shape[0]} samples")
    if np.isnan(logp).any() or np.isposinf(logp).any():
        raise ValueError("logp must be finite or -inf (NaN / +inf found)")
    names = sorted({n for o in owner if states[int(o)] is not None for n, _ in states[int(o)][1]})
    terms: dict[str, list[tuple[float, float, float, float, int]]] = {n: [] for n in names}
    for s, o in enumerate(owner):
        o = int(o)
        own = states[o]
        row: dict[int, float] = {}
        for j, v in zip(cols[s].tolist(), logp[s].tolist()):
            if j >= 0:
                row[j] = max(row.get(j, -math.inf), v)
        if o not in row or not math.isfinite(row[o]):
            raise ValueError(f"sample {s}: its own input {o} must be scored, with a finite "
                             f"log-likelihood (row {cols[s].tolist()})")
        if own is None:
            continue
        equivalent, by_coordinate = [], {}
        for j in row:
            d = _relation(own, states[j])
            if d == ():
                equivalent.append(j)
            elif d is not None and len(d) == 1:
                value = dict(states[j][1])[d[0]]
                by_coordinate.setdefault(d[0], {}).setdefault(value, []).append(j)
        own_score = max(row[j] for j in equivalent)
        for name, classes in by_coordinate.items():
            scores = [max(row[j] for j in js) for js in classes.values()]
            greater = sum(x > own_score for x in scores)
            tied = sum(x == own_score for x in scores)
            hit = (greater == 0) / (tied + 1.0)
            members = equivalent + [j for js in classes.values() for j in js]
            vals = np.array([row[j] for j in members])
            top = vals.max()
            marginal = top + math.log(np.exp(vals - top).sum()) - math.log(len(members))
            terms[name].append((hit, 1.0 / (1 + len(scores)), row[o] - marginal,
                                math.log(len(members) / len(equivalent)), o))
    out = {}
    for name, t in terms.items():
        a = np.array(t, dtype=np.float64).reshape(-1, 5)
        out[name] = ContrastSamples(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4].astype(np.int64))
    return out


def contrast_metrics(samples: ContrastSamples | None, min_samples: int = MIN_SAMPLES,
                     resamples: int = 200, seed: int = 0) -> dict[str, float]:
    """One coordinate's fields (without the prefix): ``n_samples`` and ``n_prompts`` always;
    ``acc@1``, ``chance@1``, ``acc@1_lo``, ``acc@1_hi``, ``mi``, ``mi_bound`` from
    ``min_samples`` samples of 2+ prompts (the interval: ``resamples`` draws seeded by ``seed``)."""
    if samples is None or len(samples.hit) == 0:
        return {"n_samples": 0.0, "n_prompts": 0.0}
    n, n_prompts = len(samples.hit), len(np.unique(samples.prompt))
    out = {"n_samples": float(n), "n_prompts": float(n_prompts)}
    if n < min_samples or n_prompts < 2:
        return out
    lo, hi = grounding_interval(samples.hit, samples.prompt, resamples, np.random.default_rng(seed))
    out.update({"acc@1": float(samples.hit.mean()), "chance@1": float(samples.chance.mean()),
                "acc@1_lo": lo, "acc@1_hi": hi, "mi": float(samples.pmi.mean()),
                "mi_bound": float(samples.bound.mean())})
    return out


def contrast_fields(samples: Mapping[str, ContrastSamples], names: Sequence[str], prefix: str,
                    min_samples: int = MIN_SAMPLES, resamples: int = 200, seed: int = 0
                    ) -> dict[str, float]:
    """``{prefix}contrast/<c>/<field>`` for every coordinate c of ``names``."""
    out: dict[str, float] = {}
    for i, name in enumerate(sorted(names)):
        m = contrast_metrics(samples.get(name), min_samples, resamples, seed + 7919 * i)
        out.update({f"{prefix}contrast/{name}/{k}": v for k, v in m.items()})
    return out


def score_rows(scorer: Scorer, contexts: list[list[int]], continuations: list[list[int]],
               rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Score every sample whose row lists 2+ inputs under them: one scorer call per row width
    (the scorer takes a rectangular plan, and padding would cost forwards). Returns (logp, cols)
    of shape (S, max width): unscored cells are -inf with column -1; a row of one input is left
    unscored but its own cell (there is nothing to contrast it with)."""
    S = len(rows)
    width = max((len(r) for r in rows), default=1)
    logp = np.full((S, width), -math.inf)
    cols = np.full((S, width), -1, dtype=np.int64)
    by_width: dict[int, list[int]] = {}
    for s, r in enumerate(rows):
        if len(r) >= 2:
            by_width.setdefault(len(r), []).append(s)
    for w, members in sorted(by_width.items()):
        plan = np.array([rows[s] for s in members], dtype=np.int64)
        lp, _ = scorer(contexts, [continuations[s] for s in members], plan)
        logp[members, :w] = np.asarray(lp, dtype=np.float64)
        cols[members, :w] = plan
    return logp, cols


def measure_contrast(contexts: list[list[int]], continuations: list[list[int]],
                     owner: Sequence[int], states: Sequence[StateKey | None] | None,
                     scorer: Scorer, prefix: str, *, min_samples: int = MIN_SAMPLES,
                     resamples: int = 200, seed: int = 0, names: Sequence[str] = ()
                     ) -> dict[str, float]:
    """One scope's ``{prefix}contrast/<c>/*`` for the coordinates of ``states`` and ``names``:
    {} when there are none; the counts only (nothing scored) when no coordinate has
    ``min_samples`` samples with a candidate on 2+ prompts; else each sample with a candidate
    scored under its :func:`contrast_rows` inputs."""
    states = [None] * len(contexts) if states is None else list(states)
    counts = {n: (0, 0) for n in names}
    counts.update(contrast_counts(owner, states))
    names = sorted(counts)
    if not names:
        return {}
    if not any(n >= min_samples and p >= 2 for n, p in counts.values()):
        return {f"{prefix}contrast/{c}/{k}": float(v) for c, (n, p) in sorted(counts.items())
                for k, v in (("n_samples", n), ("n_prompts", p))}
    rows = contrast_rows(owner, states)
    logp, cols = score_rows(scorer, contexts, continuations, rows)
    for s, o in enumerate(owner):  # a row with nothing to contrast: its own cell only
        if len(rows[s]) == 1:
            logp[s, 0], cols[s, 0] = 0.0, int(o)
    samples = contrast_samples(logp, cols, owner, states)
    return contrast_fields(samples, names, prefix, min_samples, resamples, seed)
