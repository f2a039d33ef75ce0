"""Tiered SNR filtering (design document 三.2, 四.2, 七): per-prompt SNR history, grades, priority
sampling, loss weights and a temperature perturbation for template-like prompts.

Prompts must repeat for a history to mean anything, so in tiered mode every step draws its prompts
(env seeds) from a fixed pool of ``pool_size`` integer keys. A prompt never seen yet is graded
medium (it gets explored at the medium rate).

Formula
-------
Template score of group g at one step (:func:`template_score`, cross-prompt duplication): every
first-turn reasoning text is lower-cased and split into words (runs of letters/digits; whitespace,
punctuation and ``_`` separate words). A text's grams are its distinct word 3-grams, or its distinct
words if it has fewer than 3 words. A gram is *shared* if it occurs (as a 3-gram or as a word) in
a reasoning text of at least one OTHER group of the same step. The text's share = shared grams /
grams (an empty text counts 1.0: fully templated); τ_g = mean share over the group's texts.
A template repeated regardless of input gives 1; input-specific reasoning gives ~0.

Per prompt i (EMAs with decay ``ema``; the first observation initialises):
    σ̄_i ← ema·σ̄_i + (1 − ema)·σ_i        (σ_i = population std of the group's returns)
    τ̄_i ← ema·τ̄_i + (1 − ema)·τ_i
    S       = running max over all steps of the group reward std σ seen so far
    signal_i = min(1, σ̄_i / S)   (0 while S = 0)
    noise_i  = τ̄_i
    SNR_i    = signal_i / (signal_i + noise_i + 1e-6)   in [0, 1]; 0.5 means signal = noise
Grades: low if SNR < low_threshold, high if SNR >= high_threshold, else medium. After every
``reestimate_every``-th :meth:`TieredSNR.update` (counted, not by step number), the thresholds
become the 1/3 and 2/3 quantiles (numpy linear interpolation) of the seen prompts' SNRs, when
at least 6 prompts have been seen, clipped to [0.05, 0.95].

Worked example (ema 0.7, thresholds 0.5 / 0.7)
    Texts: A "I move LEFT, to reach the goal." has 3-grams {i move left, move left to,
    left to reach, to reach the, reach the goal}; B "i move left to push the box" shares
    {i move left, move left to} -> τ_A = τ_B = 2/5 = 0.4; C "left" (one word) uses the unigram
    {left}, which A and B contain -> τ_C = 1.0.
    Step 1: prompt 3 has σ = 0.5, τ = 0.2; prompt 5 has σ = 0, τ = 0.9. S = 0.5.
        SNR_3 = 1 / (1 + 0.2 + 1e-6) = 0.8333 -> high;  SNR_5 = 0 / (0 + 0.9 + 1e-6) = 0 -> low.
    Step 2: prompt 3 has σ = 0.25, τ = 0.6: σ̄_3 = 0.7·0.5 + 0.3·0.25 = 0.425,
        τ̄_3 = 0.7·0.2 + 0.3·0.6 = 0.32, signal = 0.425 / 0.5 = 0.85,
        SNR_3 = 0.85 / (0.85 + 0.32 + 1e-6) = 0.72650 -> still high.
    Prompt 5 (τ̄ = 0.9 >= 0.8) is sampled next time at 1.3x the temperature.

Mechanisms
----------
* Sampling (:meth:`sample_prompts`): weight ``priority_ratio`` (7) for high, sqrt(ratio) for
  medium (the geometric middle), 1 for low; ``n`` distinct prompts are drawn without replacement.
  A single draw is exactly 7:1 high vs low; with n > 1 the inclusion ratio is flatter (a prompt
  cannot be drawn twice), the more so the larger n is relative to the pool.
* Loss weights (:meth:`loss_weights`): low -> ``low_weight`` (0.5, attenuates low-SNR gradients),
  medium -> 1, high -> ``high_weight`` (1.5, in [1, 2]: the document's 1.5-2.0 amplification).
* Perturbation (:meth:`temperature_multipliers`): τ̄_i >= ``perturb_threshold`` -> the sampling
  temperature is multiplied by ``perturb_temperature`` the next time prompt i is sampled, to
  shake the model out of the template (the document's "random perturbation").
* :meth:`diversity_warning`: the document asks for an SNR std across prompts > 0.3.

Reported per step: ``snr/frac_{low,medium,high}`` over the seen pool (:meth:`metrics`), and
``snr/batch_frac_{low,medium,high}`` over the step's own groups (:meth:`batch_grade_shares`).
"""

from __future__ import annotations

import math
import numbers
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

GRADES = ("low", "medium", "high")
_LOW, _MEDIUM, _HIGH = 0, 1, 2
MIN_PROMPTS_TO_REESTIMATE = 6
MIN_PROMPTS_TO_WARN = 4
DIVERSITY_STD = 0.3
_EPS = 1e-6
_WORD = re.compile(r"[^\W_]+")
_PROMPT_STREAM = 5  # keeps prompt_rng's stream apart from ragen2.seeding's purposes (1-4)


# ------------------------------------------------------------------ template score
def _words(text: str | None) -> list[str]:
    return _WORD.findall((text or "").lower())


def _trigrams(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


def template_score(texts_by_group: Mapping[Hashable, Sequence[str | None] | str]) -> dict[Hashable, float]:
    """{group: its reasoning texts} -> {group: τ in [0, 1]} (cross-group duplication, see above).

    None or "" counts as empty reasoning (1.0); a group with no texts scores 1.0 too.
    """
    texts = {g: [ts] if isinstance(ts, str) or ts is None else list(ts)
             for g, ts in texts_by_group.items()}
    words = {g: [_words(t) for t in ts] for g, ts in texts.items()}
    vocab = {g: set().union(*(_trigrams(w) | {(x,) for x in w} for w in ws))
             for g, ws in words.items()}
    in_groups = Counter(gram for v in vocab.values() for gram in v)  # groups containing each gram
    scores: dict[Hashable, float] = {}
    for g, ws in words.items():
        shares = []
        for w in ws:
            grams = _trigrams(w) if len(w) >= 3 else {(x,) for x in w}
            # a gram of g is in g's own vocab, so "also in another group" means count >= 2
            shares.append(sum(in_groups[x] >= 2 for x in grams) / len(grams) if grams else 1.0)
        scores[g] = float(np.mean(shares)) if shares else 1.0
    return scores


def prompt_rng(seed: int, step: int) -> np.random.Generator:
    """The generator for step ``step``'s prompt draw: a pure function of (seed, step)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), _PROMPT_STREAM, int(step)]))


# ------------------------------------------------------------------ argument checks
def _check(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ValueError(f"TieredSNR {name}={value!r} is invalid; allowed: {allowed}")


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


class TieredSNR:
    """Per-prompt SNR history over a pool of ``pool_size`` prompt keys 0..pool_size-1."""

    def __init__(self, pool_size: int, ema: float = 0.7, low_threshold: float = 0.5,
                 high_threshold: float = 0.7, reestimate_every: int = 100,
                 priority_ratio: float = 7.0, low_weight: float = 0.5, high_weight: float = 1.5,
                 perturb_threshold: float = 0.8, perturb_temperature: float = 1.3) -> None:
        _check(_is_int(pool_size) and pool_size >= 1, "pool_size", pool_size, "an integer >= 1")
        _check(_is_real(ema) and 0 <= ema < 1, "ema", ema, "a number in [0, 1)")
        for name, v in (("low_threshold", low_threshold), ("high_threshold", high_threshold)):
            _check(_is_real(v) and 0 < v < 1, name, v, "a number in (0, 1)")
        _check(low_threshold <= high_threshold, "low_threshold", low_threshold,
               f"<= high_threshold ({high_threshold})")
        _check(_is_int(reestimate_every) and reestimate_every >= 1, "reestimate_every",
               reestimate_every, "an integer >= 1")
        _check(_is_real(priority_ratio) and priority_ratio >= 1, "priority_ratio", priority_ratio,
               "a number >= 1 (high:low sampling weight)")
        _check(_is_real(low_weight) and 0 < low_weight <= 1, "low_weight", low_weight,
               "a number in (0, 1]")
        _check(_is_real(high_weight) and 1 <= high_weight <= 2, "high_weight", high_weight,
               "a number in [1, 2]")
        _check(_is_real(perturb_threshold) and 0 < perturb_threshold <= 1, "perturb_threshold",
               perturb_threshold, "a number in (0, 1]")
        _check(_is_real(perturb_temperature) and perturb_temperature >= 1, "perturb_temperature",
               perturb_temperature, "a number >= 1 (a temperature multiplier)")
        self.pool_size, self.ema = int(pool_size), float(ema)
        self.reestimate_every, self.priority_ratio = int(reestimate_every), float(priority_ratio)
        self.low_weight, self.high_weight = float(low_weight), float(high_weight)
        self.perturb_threshold, self.perturb_temperature = float(perturb_threshold), float(perturb_temperature)
        # state (everything below is in state_dict)
        self.low_threshold, self.high_threshold = float(low_threshold), float(high_threshold)
        self._sigma = np.full(self.pool_size, np.nan)  # σ̄ per prompt; NaN = unseen
        self._tau = np.full(self.pool_size, np.nan)  # τ̄ per prompt
        self.signal_scale = 0.0  # S
        self.num_updates = 0
        self.last_step: int | None = None

    # -------------------------------------------------------------- the per-prompt maths
    @property
    def _seen(self) -> np.ndarray:
        return ~np.isnan(self._sigma)

    def _signal(self) -> np.ndarray:
        """(pool,) signal_i (NaN for unseen)."""
        if self.signal_scale <= 0:
            return np.where(self._seen, 0.0, np.nan)
        return np.minimum(1.0, self._sigma / self.signal_scale)

    def _snr(self) -> np.ndarray:
        """(pool,) SNR_i (NaN for unseen)."""
        sig = self._signal()
        return sig / (sig + self._tau + _EPS)

    def _codes(self) -> np.ndarray:
        """(pool,) grade codes 0 low / 1 medium / 2 high; unseen -> medium."""
        snr = self._snr()
        codes = np.full(self.pool_size, _MEDIUM)
        codes[snr < self.low_threshold] = _LOW  # NaN compares False: unseen stays medium
        codes[snr >= self.high_threshold] = _HIGH
        return codes

    def _keys(self, keys: Sequence[int], what: str = "key") -> np.ndarray:
        arr = np.asarray(list(keys))
        if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= self.pool_size):
            raise ValueError(f"prompt {what}s must be integers in [0, {self.pool_size}) "
                             f"(pool_size={self.pool_size}); got {list(keys)!r}")
        return arr.astype(np.int64)

    # -------------------------------------------------------------- queries
    def snr(self, key: int) -> float | None:
        """SNR of one prompt, None if never seen."""
        v = self._snr()[self._keys([key])[0]]
        return None if np.isnan(v) else float(v)

    def grade(self, key: int) -> str:
        """'low' | 'medium' | 'high' (unseen prompts are 'medium')."""
        return GRADES[self._codes()[self._keys([key])[0]]]

    def loss_weights(self, keys: Sequence[int]) -> np.ndarray:
        """(len(keys),) float64 per-sample loss weight by the prompt's current grade."""
        table = np.array([self.low_weight, 1.0, self.high_weight])
        return table[self._codes()[self._keys(keys)]]

    def temperature_multipliers(self, keys: Sequence[int]) -> np.ndarray:
        """(len(keys),) float64 sampling-temperature multiplier: perturb template-like prompts."""
        tau = self._tau[self._keys(keys)]
        return np.where(tau >= self.perturb_threshold, self.perturb_temperature, 1.0)  # NaN -> 1.0

    def sample_prompts(self, n: int, rng: np.random.Generator,
                       candidates: Sequence[int] | None = None) -> list[int]:
        """``n`` distinct prompt keys (ascending), drawn by grade weight without replacement from
        ``candidates`` (default: the whole pool; e.g. the keys of one env of ``env.mix``)."""
        cand = (np.arange(self.pool_size) if candidates is None
                else self._keys(candidates, "candidate key"))
        _check(_is_int(n) and 0 <= n <= len(cand), "n", n, f"an integer in [0, {len(cand)}]")
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator (e.g. prompt_rng(seed, step)), "
                             f"got {type(rng).__name__}")
        w = self.priority_ratio ** (self._codes()[cand] / 2.0)  # low 1, medium sqrt(r), high r
        return sorted(int(cand[i]) for i in rng.choice(len(cand), size=n, replace=False, p=w / w.sum()))

    # -------------------------------------------------------------- the update
    def update(self, step: int, group_keys: Sequence[int], reward_stds: Sequence[float],
               template_scores: Sequence[float]) -> None:
        """Fold one step's groups in: prompt keys, σ of their rewards, τ of their reasoning."""
        _check(_is_int(step) and (self.last_step is None or step > self.last_step), "step", step,
               f"an integer > the last updated step ({self.last_step})")
        keys = self._keys(group_keys, "group key")
        stds = np.asarray(reward_stds, dtype=np.float64).reshape(-1)
        taus = np.asarray(template_scores, dtype=np.float64).reshape(-1)
        if not len(keys) == len(stds) == len(taus):
            raise ValueError(f"update needs one reward std and one template score per group key; got "
                             f"{len(keys)} keys, {len(stds)} stds, {len(taus)} template scores")
        if len(set(keys.tolist())) != len(keys):
            raise ValueError(f"group keys repeat within step {step}: {keys.tolist()}; each prompt "
                             "may appear once per step (sample_prompts draws without replacement)")
        if not (np.all(np.isfinite(stds)) and np.all(stds >= 0)):
            raise ValueError(f"reward_stds must be finite and >= 0; got {stds.tolist()}")
        if not (np.all(np.isfinite(taus)) and np.all((taus >= 0) & (taus <= 1))):
            raise ValueError(f"template_scores must lie in [0, 1]; got {taus.tolist()}")
        if len(stds):
            self.signal_scale = max(self.signal_scale, float(stds.max()))
        first = np.isnan(self._sigma[keys])
        a = self.ema
        self._sigma[keys] = np.where(first, stds, a * self._sigma[keys] + (1 - a) * stds)
        self._tau[keys] = np.where(first, taus, a * self._tau[keys] + (1 - a) * taus)
        self.num_updates += 1
        self.last_step = int(step)
        if self.num_updates % self.reestimate_every == 0:
            self._reestimate_thresholds()

    def _reestimate_thresholds(self) -> None:
        snr = self._snr()[self._seen]
        if len(snr) < MIN_PROMPTS_TO_REESTIMATE:
            return
        lo, hi = np.clip(np.quantile(snr, [1 / 3, 2 / 3]), 0.05, 0.95)
        self.low_threshold, self.high_threshold = float(lo), float(max(hi, lo))

    # -------------------------------------------------------------- reporting
    def metrics(self) -> dict[str, float]:
        """``snr/*`` summary over the seen prompts (means are 0.0 before any prompt is seen)."""
        seen = self._seen
        snr, codes = self._snr()[seen], self._codes()[seen]
        mean = (lambda x: float(np.mean(x)) if len(x) else 0.0)
        return {
            "snr/mean": mean(snr), "snr/std": float(np.std(snr)) if len(snr) else 0.0,
            "snr/frac_high": mean(codes == _HIGH), "snr/frac_medium": mean(codes == _MEDIUM),
            "snr/frac_low": mean(codes == _LOW),
            "snr/threshold_low": self.low_threshold, "snr/threshold_high": self.high_threshold,
            "snr/signal_mean": mean(self._signal()[seen]), "snr/noise_mean": mean(self._tau[seen]),
            "snr/signal_scale": self.signal_scale, "snr/seen_prompts": float(seen.sum()),
        }

    def batch_grade_shares(self, keys: Sequence[int]) -> dict[str, float]:
        """``snr/batch_frac_{low,medium,high}``: the share of ``keys`` (one step's groups) in each
        grade, as their loss weights use it (``metrics`` gives the shares over the whole seen pool)."""
        codes = self._codes()[self._keys(keys)]
        n = max(len(codes), 1)
        return {f"snr/batch_frac_{g}": float(np.sum(codes == i)) / n for i, g in enumerate(GRADES)}

    def diversity_warning(self) -> str | None:
        """A message when the SNR std over >= 4 seen prompts is < 0.3 (document 七.1), else None."""
        snr = self._snr()[self._seen]
        if len(snr) < MIN_PROMPTS_TO_WARN or float(np.std(snr)) >= DIVERSITY_STD:
            return None
        return (f"SNR std across {len(snr)} prompts is {float(np.std(snr)):.3f} < {DIVERSITY_STD}: "
                "the prompts are not diverse enough for tiered SNR filtering to separate them "
                "(use a larger or more varied prompt pool)")

    # -------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state; floats round-trip exactly through json."""
        seen = np.nonzero(self._seen)[0]
        return {
            "pool_size": self.pool_size, "keys": seen.tolist(),
            "sigma_ema": self._sigma[seen].tolist(), "tau_ema": self._tau[seen].tolist(),
            "signal_scale": self.signal_scale, "low_threshold": self.low_threshold,
            "high_threshold": self.high_threshold, "num_updates": self.num_updates,
            "last_step": self.last_step,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("pool_size") != self.pool_size:
            raise ValueError(f"TieredSNR state has pool_size={state.get('pool_size')!r} but this "
                             f"instance has pool_size={self.pool_size}; resume with the same pool")
        keys = self._keys(state["keys"])
        self._sigma = np.full(self.pool_size, np.nan)
        self._tau = np.full(self.pool_size, np.nan)
        self._sigma[keys] = np.asarray(state["sigma_ema"], dtype=np.float64)
        self._tau[keys] = np.asarray(state["tau_ema"], dtype=np.float64)
        self.signal_scale = float(state["signal_scale"])
        self.low_threshold = float(state["low_threshold"])
        self.high_threshold = float(state["high_threshold"])
        self.num_updates = int(state["num_updates"])
        self.last_step = None if state["last_step"] is None else int(state["last_step"])
