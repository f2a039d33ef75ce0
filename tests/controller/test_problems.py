"""ragen2/controller/problems.py: which problems each kind of episode draws, with the problem split
replaced by a stand-in whose answers are known."""

from __future__ import annotations

from ragen2.config import Config
from ragen2.controller.problems import Problems
from ragen2.rollout.envs import EnvEntry
from ragen2.rollout.runner import EpisodeSpec
from ragen2.rollout.split import HELDOUT, TRAIN
from ragen2 import seeding


class _Split:
    """Training seeds + 1000, held-out seeds + 2000; records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def resolve(self, name: str, seed: int, part: str) -> int:
        self.calls.append((name, seed, part))
        return seed + (1000 if part == TRAIN else 2000)

    def eval_specs(self, entries, episodes):  # noqa: ANN001
        return [("eval", e.name, episodes) for e in entries]


def _problems() -> tuple[Problems, _Split]:
    p = Problems(Config())
    split = p.__dict__["split"] = _Split()  # the cached property, answered by the stand-in
    return p, split


def test_groups_split_by_share_on_training_seeds():
    p, split = _problems()
    entries = [EnvEntry("a", "A-v0", share=2.0), EnvEntry("b", "B-v0", share=1.0)]
    specs = p.episode_specs(entries, groups=3, group_size=2, seed_of=lambda g: 10 * g,
                            temperature_of=lambda g: 1.0 + g)
    assert specs == [EpisodeSpec(1000, 0, "a", 1.0), EpisodeSpec(1000, 0, "a", 1.0),
                     EpisodeSpec(1010, 1, "a", 2.0), EpisodeSpec(1010, 1, "a", 2.0),
                     EpisodeSpec(1020, 2, "b", 3.0), EpisodeSpec(1020, 2, "b", 3.0)]
    assert split.calls == [("a", 0, TRAIN), ("a", 10, TRAIN), ("b", 20, TRAIN)]


def test_evaluation_and_panels_draw_held_out_problems():
    p, split = _problems()
    assert [e.name for e in p.train_envs] == [e.name for e in p.eval_envs] == ["frozenlake"]
    assert p.eval_specs(5) == [("eval", "frozenlake", 5)]
    assert p.panel_seed("frozenlake", 3) == seeding.panel_seed(3) + 2000
    assert split.calls == [("frozenlake", seeding.panel_seed(3), HELDOUT)]
