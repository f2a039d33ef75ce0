"""Held out by construction: training and held-out evaluation draw from disjoint *problems*.

Disjoint seeds are not enough: an env generates its problem from the seed, so a small space
(one-digit Math: 162 problems) puts the same problem on both sides of 2**31. An env that names the
problem of its episode (``problem_key()``, optional, docs/reference/environments.md) has its
problem space split by a stable hash of the key (:func:`part_of`): a share
``env.heldout_fraction`` of the keys is held out, the rest is for training. Each consumer asks for
its part: RL groups, warm-start demonstrations and the tiered filter's prompt pool the training
part; held-out evaluation (trainer and ``ragen2 eval``) and the MI monitor's probe panels the
held-out part. :func:`resolve_seed` turns a drawn seed into one whose problem lies in the asked-for
part by deterministic retries (:func:`ragen2.seeding.split_seed`), so seeds stay a pure function of
(run seed, purpose, position) and the resolved seed is the one a trajectory records.

An env whose ``problem_keys()`` enumerates its space is evaluated on distinct held-out problems
(:meth:`ProblemSplit.eval_seeds`) and checked before any actor starts (:func:`check_split`). An
env without ``problem_key`` is not split: its seeds are used as drawn (logged once).
"""

from __future__ import annotations

import hashlib
import logging
import math
from typing import Any, Callable, Sequence

import gymnasium as gym

from ragen2 import seeding
from ragen2.rollout.envs import (EnvEntry, EnvSpecError, all_entries, allocate, assign,
                                 eval_entries, make_env)
from ragen2.rollout.runner import EpisodeSpec

log = logging.getLogger("ragen2")

TRAIN, HELDOUT = "train", "heldout"
_PART_NAMES = {TRAIN: "training", HELDOUT: "held-out"}
#: seeds tried per drawn seed before a part is declared unreachable
MAX_ATTEMPTS = 1000


class SplitError(EnvSpecError):
    """A part of an env's problem split is empty, too small, or unreachable from its seeds."""


def part_of(key: str, heldout_fraction: float) -> str:
    """``"heldout"`` when the key's sha256 falls in the first ``heldout_fraction`` of the hash
    range, else ``"train"``. Stable across processes, machines and Python versions (never
    ``hash()``); the same key is in the same part under any env kwargs, and a key held out at one
    fraction stays held out at every larger one."""
    u = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2.0**64
    return HELDOUT if u < heldout_fraction else TRAIN


def key_function(env: gym.Env) -> Callable[[], Any] | None:
    """The env's ``problem_key`` method, or None when it has none (the env is not split)."""
    fn = getattr(env.unwrapped, "problem_key", None)
    return fn if callable(fn) else None


def enumerated_keys(env: gym.Env) -> list[str] | None:
    """Every problem key of the env's space, sorted and each once (``problem_keys()``), or None
    when the env does not enumerate its space."""
    fn = getattr(env.unwrapped, "problem_keys", None)
    keys = fn() if callable(fn) else None
    return None if keys is None else sorted({str(k) for k in keys})


def _check_seed(seed: int, part: str) -> None:
    heldout = part == HELDOUT
    if part not in (TRAIN, HELDOUT):
        raise ValueError(f"part must be {TRAIN!r} or {HELDOUT!r}, got {part!r}")
    if heldout != (seed >= seeding.EVAL_SEED_BASE) or seed < 0:
        raise ValueError(f"seed {seed} is not a {part} seed (training seeds lie in [0, 2**31), "
                         "held-out ones from 2**31 on: ragen2.seeding)")


def resolve(env: gym.Env, seed: int, part: str, heldout_fraction: float,
            max_attempts: int = MAX_ATTEMPTS, what: str = "env") -> tuple[int, str | None]:
    """(the seed, the problem key it gives): ``seed`` itself when its problem lies in ``part``,
    else the first retry :func:`ragen2.seeding.split_seed` ``(seed, 1)``, ``(seed, 2)``, ... that
    does. ``env`` is a scratch instance, left reset on the returned seed. An env without
    ``problem_key`` gives (``seed``, None) without a reset. Raises :class:`SplitError` after
    ``max_attempts`` seeds."""
    _check_seed(seed, part)
    key_of = key_function(env)
    if key_of is None:
        return seed, None
    candidate = seed
    for attempt in range(max_attempts):
        if attempt:
            candidate = seeding.split_seed(seed, attempt, part == HELDOUT)
        env.reset(seed=candidate)
        key = str(key_of())
        if part_of(key, heldout_fraction) == part:
            return candidate, key
    raise SplitError(
        f"{what}: none of {max_attempts} seeds derived from seed {seed} gives a problem in the "
        f"{_PART_NAMES[part]} part of its problem split (env.heldout_fraction="
        f"{heldout_fraction}): that part holds none or almost none of the problems the env "
        "draws. Change env.heldout_fraction, or make problem_key() tell more problems apart")


def resolve_seed(env: gym.Env, seed: int, part: str, heldout_fraction: float,
                 max_attempts: int = MAX_ATTEMPTS) -> int:
    """The seed :func:`resolve` lands on: ``seed`` or its first retry whose problem is in ``part``
    (``"train"``: ``seed`` and its retries in [0, 2**31); ``"heldout"``: from 2**31 on)."""
    return resolve(env, seed, part, heldout_fraction, max_attempts)[0]


def _describe(entry: EnvEntry) -> str:
    kwargs = f", kwargs {entry.kwargs}" if entry.kwargs else ""
    return f"env {entry.name!r} ({entry.id}{kwargs})"


class ProblemSplit:
    """The problem split of a run's envs: one scratch env per entry name in this process (made on
    first use) and the seeds resolved so far. Every answer is a pure function of the entries, the
    fraction and the asked seed, so a resumed run resolves exactly as the original did."""

    def __init__(self, entries: Sequence[EnvEntry], heldout_fraction: float) -> None:
        self.entries = {e.name: e for e in entries}
        self.fraction = float(heldout_fraction)
        self._envs: dict[str, gym.Env | None] = {}
        self._keys: dict[str, list[str] | None] = {}
        self._resolved: dict[tuple[str, int, str], tuple[int, str | None]] = {}
        self._eval: dict[tuple[str, int], list[int]] = {}

    def scratch(self, name: str) -> gym.Env | None:
        """Entry ``name``'s scratch env, or None when it has no ``problem_key`` (not split)."""
        if name not in self._envs:
            entry = self.entries[name]
            env = make_env(entry.id, entry.kwargs)
            if key_function(env) is None:
                env.close()
                env = None
                log.info("%s has no problem_key(): it is not split by problem; its held-out "
                         "episodes use seeds >= 2**31, whose problems training may also draw "
                         "(docs/reference/environments.md)", _describe(entry))
            self._envs[name] = env
        return self._envs[name]

    def keys(self, name: str) -> list[str] | None:
        """Every problem key of entry ``name`` (sorted), or None: not split or not enumerated."""
        if name not in self._keys:
            env = self.scratch(name)
            self._keys[name] = None if env is None else enumerated_keys(env)
        return self._keys[name]

    def sizes(self, name: str) -> tuple[int, int] | None:
        """(training, held-out) problem counts of an enumerated entry, else None."""
        keys = self.keys(name)
        if keys is None:
            return None
        held = sum(part_of(k, self.fraction) == HELDOUT for k in keys)
        return len(keys) - held, held

    def resolve_key(self, name: str, seed: int, part: str) -> tuple[int, str | None]:
        """(seed, problem key) of :func:`resolve` for entry ``name``, remembered."""
        memo = (name, int(seed), part)
        if memo not in self._resolved:
            env = self.scratch(name)
            if env is None:
                _check_seed(seed, part)
                self._resolved[memo] = (int(seed), None)
            else:
                if len(self._resolved) > 200_000:  # a long run: forget the old steps' seeds
                    self._resolved.clear()
                self._resolved[memo] = resolve(env, int(seed), part, self.fraction,
                                               what=_describe(self.entries[name]))
        return self._resolved[memo]

    def resolve(self, name: str, seed: int, part: str) -> int:
        """The seed entry ``name`` runs for drawn ``seed`` in ``part`` (``seed`` itself when the
        env is not split)."""
        return self.resolve_key(name, seed, part)[0]

    def eval_seeds(self, name: str, count: int) -> list[int]:
        """The seeds of entry ``name``'s first ``count`` held-out evaluation episodes. An
        enumerated space: distinct held-out problems, in the order the resolved evaluation seeds
        ``seeding.eval_seed(0)``, ``(1)``, ... first reach them (the same for every run).
        Otherwise the resolved evaluation seeds themselves."""
        if (name, count) in self._eval:
            return self._eval[(name, count)]
        sizes = self.sizes(name)
        if sizes is None:
            out = [self.resolve(name, seeding.eval_seed(i), HELDOUT) for i in range(count)]
        else:
            held = sizes[1]
            if count > held:
                raise SplitError(_eval_size_message(self.entries[name], count, sizes,
                                                    self.fraction))
            # collecting `count` of `held` equally likely problems: about held * ln(held) draws
            cap = int(held * (math.log(max(held, 1)) + 20)) + 100
            out, seen, index = [], set(), 0
            while len(out) < count:
                if index >= cap:
                    raise SplitError(
                        f"{_describe(self.entries[name])}: {cap} held-out seeds reached only "
                        f"{len(out)} of the {count} distinct held-out problems asked for (its "
                        "problem_keys() lists problems its reset rarely or never draws)")
                seed, key = self.resolve_key(name, seeding.eval_seed(index), HELDOUT)
                index += 1
                if key not in seen:
                    seen.add(key)
                    out.append(seed)
        self._eval[(name, count)] = out
        return out

    def eval_specs(self, entries: Sequence[EnvEntry], episodes: int) -> list[EpisodeSpec]:
        """The held-out evaluation: ``episodes`` episodes split between ``entries`` by share,
        one per group; an enumerated entry's are distinct problems (:meth:`eval_seeds`), any
        other's episode i runs the resolved ``seeding.eval_seed(i)``."""
        names = assign(episodes, entries)
        distinct = {e.name: iter(self.eval_seeds(e.name, names.count(e.name)))
                    for e in entries if self.keys(e.name) is not None}
        return [EpisodeSpec(next(distinct[n]) if n in distinct else
                            self.resolve(n, seeding.eval_seed(i), HELDOUT), i, n)
                for i, n in enumerate(names)]

    def close(self) -> None:
        for env in self._envs.values():
            if env is not None:
                env.close()
        self._envs.clear()


def _eval_size_message(entry: EnvEntry, count: int, sizes: tuple[int, int], fraction: float) -> str:
    train, held = sizes
    return (f"held-out evaluation asks {_describe(entry)} for {count} distinct held-out problems "
            f"(trainer.eval_episodes, split between the eval envs by share), but its held-out "
            f"part has {held} of its {train + held} problems at env.heldout_fraction={fraction}: "
            f"lower trainer.eval_episodes (to at most {held} for this env) or raise "
            "env.heldout_fraction")


def check_split(env_cfg: Any, eval_episodes: int) -> None:
    """Refuse, before any actor starts, a split a run cannot use: an enumerated env whose
    training or held-out part is empty, held-out evaluation asking an enumerated env for more
    distinct problems than its held-out part has, or an env whose seeds never reach a part."""
    fraction = env_cfg.heldout_fraction
    split = ProblemSplit(all_entries(env_cfg), fraction)
    try:
        for name, entry in split.entries.items():
            if split.scratch(name) is None:
                continue
            sizes = split.sizes(name)
            if sizes is None:  # not enumerated: one seed must reach each part
                split.resolve(name, 0, TRAIN)
                split.resolve(name, seeding.eval_seed(0), HELDOUT)
                continue
            train, held = sizes
            if not train or not held:
                empty, fix = ("held-out", "raise") if not held else ("training", "lower")
                raise SplitError(
                    f"{_describe(entry)}: its {train + held} problems split into {train} for "
                    f"training and {held} held out at env.heldout_fraction={fraction}, so the "
                    f"{empty} part is empty: {fix} env.heldout_fraction (in (0, 1)) or use a "
                    "larger problem space")
            log.info("%s: %d problems, %d for training and %d held out (env.heldout_fraction=%g)",
                     _describe(entry), train + held, train, held, fraction)
        entries = eval_entries(env_cfg)
        for entry, count in zip(entries, allocate(eval_episodes, [e.share for e in entries])):
            sizes = split.sizes(entry.name)
            if sizes is not None and count > sizes[1]:
                raise SplitError(_eval_size_message(entry, count, sizes, fraction))
    finally:
        split.close()
