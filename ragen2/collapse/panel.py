"""The fixed probe panel: MI on the same held-out prompts every time, with bootstrap intervals.

The per-batch monitor (:mod:`ragen2.collapse.monitor`) measures MI on whatever prompts the step
drew (8-16 groups: ceiling log 8-16, values that move with the draw). The panel instead holds
``monitor.panel_size`` distinct prompts fixed for the whole run (and for every run of the same
env: panel seeds are ``seeding.panel_seed(i)`` resolved into the env's held-out problems
(:mod:`ragen2.rollout.split`), never trained on). At step 0 and every ``monitor.every`` steps the rollout workers sample
``monitor.panel_samples`` fresh first turns per prompt from the current policy, the learner
cross-scores every reasoning under every panel prompt (the full (S, N) matrix), and the
``collapse/panel/*`` metrics are

    mi, h_cond, h_marginal, retrieval_acc@k, retrieval_chance@k, mi_bound, log_n   (mi.py)
    mi_lo / mi_hi, h_cond_lo / _hi, retrieval_acc@1_lo / _hi   percentile bootstrap, 95%, over
                                                               prompts (mi.bootstrap_intervals)
    mi_null, mi_floor, mi_p_value    the permutation null's mean, its 95th percentile (the floor)
                                     and the one-sided p-value of the observed MI
    healthy                          1.0 when mi_lo > mi_floor: the interval clears chance
    n_samples, n_prompts             the samples with reasoning and their prompts: always logged;
                                     below ``monitor.min_samples`` samples (or 2 prompts) they are
                                     all there is (:mod:`ragen2.collapse.withhold`)
    action/*                         I(A; Z | X) over the panel's groups (every prompt's samples
                                     share X): does the action follow the reasoning
                                     (:mod:`ragen2.collapse.action_mi`; ``monitor.action_mi``)
    grounding/*                      where the env has a ``ground`` hook: the share of the
                                     reasoning's claims about the state that are true, with a 95%
                                     bootstrap interval over prompts
                                     (:mod:`ragen2.collapse.grounding`)

so values are comparable across steps, runs and policy versions. The same panel seeds measured
at a later turn, after a fixed scripted opening, are ``collapse/panel/turns/*``
(:mod:`ragen2.collapse.panel_turns`): on a layout whose first observation carries nothing the first
reasoning needs (the default FrozenLake), only those can move. Each measurement's samples are
written to ``RUN_DIR/panel/step_XXXXXX.jsonl`` (one record per prompt; ``ragen2-report`` shows
them side by side).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ragen2 import seeding
from ragen2.atomic import atomic_write
from ragen2.collapse.action_mi import (build_action_inputs, conditional_mutual_information,
                                       score_actions)
from ragen2.collapse.grounding import grounding_metrics, grounding_samples
from ragen2.collapse.mi import bootstrap_intervals, mutual_information, permutation_null
from ragen2.collapse.monitor import (RETRIEVAL_KS, Scorer, action_counts, build_inputs,
                                     token_entropy)
from ragen2.collapse.withhold import MIN_SAMPLES
from ragen2.rollout.trajectory import Trajectory

log = logging.getLogger("ragen2")

PREFIX = "collapse/panel/"


@dataclass(frozen=True)
class PanelPrompt:
    env: str  # the env entry's name
    seed: int
    observation: str  # the first observation (distinct within the panel)


def choose_panel(envs: Sequence[tuple[str, int]], observe: Callable[[str, int], str],
                 tries_per_prompt: int = 8,
                 seed_of: Callable[[str, int], int] | None = None) -> list[PanelPrompt]:
    """The panel: for each ``(env name, count)``, the first ``count`` panel seeds whose first
    observation no earlier panel prompt has (seeds ``seed_of(env, 0)``, ``(env, 1)``, ... per
    env, so one env's panel does not depend on the others of a mixture; by default
    ``seeding.panel_seed(i)``, the trainer's resolved into the env's held-out problems).

    ``observe(env, seed)`` returns the env's first observation; a seed on which it raises is
    skipped (logged), as a failed episode is. An env with fewer distinct first observations
    than asked within ``tries_per_prompt * count`` seeds gives what it has (logged)."""
    seed_of = seed_of or (lambda env, index: seeding.panel_seed(index))
    chosen: list[PanelPrompt] = []
    seen: set[str] = set()
    for env, count in envs:
        found, index, failed, first_error = 0, 0, 0, None
        while found < count and index < tries_per_prompt * count:
            seed = seed_of(env, index)
            index += 1
            try:
                obs = observe(env, seed)
            except Exception as e:  # noqa: BLE001 — an env failing on a seed only loses that seed
                if getattr(e, "stops_run", False):  # an env server that stays down
                    raise  # stops the run (ragen2.rollout.runner.stops_run)
                failed += 1
                first_error = first_error or f"seed {seed}: {type(e).__name__}: {e}"
                continue
            if obs in seen:
                continue
            seen.add(obs)
            chosen.append(PanelPrompt(env, seed, obs))
            found += 1
        if found < count:
            log.warning("probe panel: env %r has only %d distinct first observations among %d "
                        "seeds (asked for %d prompts)", env, found, index, count)
        if failed:
            log.warning("probe panel: env %r failed in reset on %d of %d seeds, which were "
                        "skipped (first: %s)", env, failed, index, first_error)
    return chosen


@dataclass(frozen=True)
class PanelMeasurement:
    """One measurement of a panel (this one or the later-turn one): the values the collapse
    alert and the rollback verdict decide on, and the metrics logged for it."""

    #: ``collapse/panel/*`` (the later-turn panel: ``collapse/panel/turns/*``)
    metrics: dict[str, float]
    #: the MI's bootstrap lower bound; None when fewer than 2 prompts produced reasoning or the
    #: samples were fewer than ``monitor.min_samples`` (no value: nothing shows input dependence)
    mi_lo: float | None = None
    #: the permutation floor (the null's 95th percentile); None as ``mi_lo``
    mi_floor: float | None = None

    @property
    def healthy(self) -> bool | None:
        """The MI interval clears the floor (None: nothing measurable)."""
        if self.mi_lo is None or self.mi_floor is None:
            return None
        return self.mi_lo > self.mi_floor


def panel_estimates(logp: np.ndarray, owner: np.ndarray, prompt_keys: Sequence[str],
                    bootstrap: int, permutations: int, seed: int
                    ) -> tuple[dict[str, float], float, float]:
    """(:func:`panel_metrics`, ``mi_lo``, ``mi_floor``) of the full (S, N) cross-scored matrix."""
    scores = torch.from_numpy(np.asarray(logp, dtype=np.float64))
    own = torch.from_numpy(np.asarray(owner, dtype=np.int64))
    gen = torch.Generator().manual_seed(seed)
    point = mutual_information(scores, own, prompt_keys=list(prompt_keys), ks=RETRIEVAL_KS)
    null = permutation_null(scores, own, num_permutations=permutations, generator=gen)
    ci = bootstrap_intervals(scores, own, num_resamples=bootstrap, generator=gen)
    mi_lo, mi_floor = ci["mi_lo"], null["mi_null_q95"]
    out = {k: float(v) for k, v in point.items()}
    out.update({k: v for k, v in ci.items() if k != "num_resamples"})
    out["mi_null"], out["mi_floor"] = null["mi_null"], mi_floor
    out["mi_p_value"] = null["p_value"]
    out["healthy"] = float(mi_lo > mi_floor)
    return out, mi_lo, mi_floor


def panel_metrics(logp: np.ndarray, owner: np.ndarray, prompt_keys: Sequence[str],
                  bootstrap: int, permutations: int, seed: int) -> dict[str, float]:
    """``collapse/panel/*`` (without the prefix) from the full (S, N) cross-scored matrix.

    ``seed`` drives the bootstrap resamples and the permutations (reproducible on resume)."""
    return panel_estimates(logp, owner, prompt_keys, bootstrap, permutations, seed)[0]


class ProbePanel:
    """Samples, scores and records the fixed panel (stateless: everything derives from the step)."""

    def __init__(self, prompts: Sequence[PanelPrompt], samples: int, bootstrap: int,
                 permutations: int, seed: int, action_mi: bool = True, *,
                 min_samples: int = MIN_SAMPLES) -> None:
        if len(prompts) < 2:
            raise ValueError(f"the probe panel needs >= 2 distinct prompts, got {len(prompts)}")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
        self.min_samples = min_samples
        self.prompts, self.samples = list(prompts), samples
        self.bootstrap, self.permutations, self.seed = bootstrap, permutations, seed
        self.action_mi = action_mi

    def specs(self) -> list[Any]:
        """``samples`` first-turn episodes per panel prompt; group id = the prompt's index."""
        from ragen2.rollout.runner import EpisodeSpec

        return [EpisodeSpec(p.seed, i, p.env, 1.0)
                for i, p in enumerate(self.prompts) for _ in range(self.samples)]

    def measure(self, trajs: Sequence[Trajectory], scorer: Scorer, step: int
                ) -> PanelMeasurement:
        """One measurement, ``collapse/panel/*`` its metrics. Below 2 panel prompts with
        reasoning or ``min_samples`` samples only the counts (``n_samples``, ``n_prompts``; the
        action MI's ``action/n_samples``, ``action/n_groups``), the reasoning share and the token
        entropy: no value, nothing scored; the action MI likewise below ``min_samples`` answers."""
        ok = [t for t in trajs if t.env_error is None]
        with_reasoning = sum(t.think_span is not None for t in ok)
        out = {PREFIX + "reasoning_frac": with_reasoning / max(len(trajs), 1),
               PREFIX + "token_entropy": token_entropy(ok) if ok else float("nan")}
        inputs = build_inputs(ok, min_prompts=0)
        n = len(inputs.contexts)
        out[PREFIX + "n_samples"], out[PREFIX + "n_prompts"] = float(len(inputs.owner)), float(n)
        seed = seeding.panel_bootstrap_seed(self.seed, step)
        grounded = grounding_samples(ok, "first")
        if grounded is not None:  # the envs' own check of the stated state (their ground hook)
            g = grounding_metrics(grounded, self.min_samples, self.bootstrap, seed + 3)
            out.update({PREFIX + "grounding/" + k: v for k, v in g.items()})
        actions = build_action_inputs(ok) if self.action_mi else None
        counts = action_counts(actions)
        if self.action_mi:
            out.update({PREFIX + "action/" + k: v for k, v in counts.items()})
        if n < 2 or len(inputs.owner) < self.min_samples:
            return PanelMeasurement(out)
        columns = np.tile(np.arange(n), (len(inputs.owner), 1))
        logp, _ = scorer(inputs.contexts, inputs.continuations, columns)
        m, mi_lo, mi_floor = panel_estimates(logp, inputs.owner, inputs.prompt_keys,
                                             self.bootstrap, self.permutations, seed)
        out.update({PREFIX + k: v for k, v in m.items()})
        if counts["n_samples"] >= self.min_samples:
            a = conditional_mutual_information(
                torch.from_numpy(score_actions(actions, scorer)), torch.from_numpy(actions.group),
                reasoning_keys=actions.context.tolist(), num_permutations=self.permutations,
                generator=torch.Generator().manual_seed(seed + 1))
            a["mi_p_value"] = a.pop("p_value")
            out.update({PREFIX + "action/" + k: v for k, v in a.items() if k != "num_permutations"})
        return PanelMeasurement(out, mi_lo, mi_floor)

    def records(self, trajs: Sequence[Trajectory], step: int, eos_text: str | None = None
                ) -> list[dict[str, Any]]:
        """One record per panel prompt: its samples' reasoning and parsed answers (text)."""
        from ragen2.rollout.archive import MAX_TEXT
        from ragen2.rollout.parsing import parse_response

        by_prompt: dict[int, list[Trajectory]] = {}
        for t in trajs:
            by_prompt.setdefault(t.group_id, []).append(t)
        out = []
        for i, p in enumerate(self.prompts):
            ts = by_prompt.get(i, [])
            out.append({"step": step, "key": p.seed, "env": p.env, "prompt": p.observation[:MAX_TEXT],
                        "reasoning": [(t.first_think or "")[:MAX_TEXT] for t in ts],
                        "answers": [(parse_response(t.responses[0], eos_text).answer or "")[:MAX_TEXT]
                                    if t.responses else "" for t in ts]})
            if any(t.grounding is not None for t in ts):  # the env's verdict per sample
                out[-1]["grounding"] = [t.grounding[0] if t.grounding else None for t in ts]
        return out


def write_records(run_dir: Path, step: int, records: Sequence[dict[str, Any]],
                  folder: str = "panel") -> Path:
    """``RUN_DIR/<folder>/step_XXXXXX.jsonl`` (``panel``; the later-turn panel: ``panel/turns``),
    written atomically."""
    folder = Path(run_dir) / folder
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{step:06d}.jsonl"
    with atomic_write(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path
