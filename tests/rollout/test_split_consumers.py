"""Every consumer of env seeds draws from its part of the problem split: the trainer's RL groups
(plain and from the tiered filter's prompt pool) and warm-start demonstrations train on training
problems only; its held-out evaluation and probe-panel seeds are held-out problems. The
controller's real components (no Ray, no model) build the specs; a stand-in ``gather`` records
them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragen2.rollout.envs import eval_entries, make_env, train_entries
from ragen2.rollout.split import HELDOUT, TRAIN, part_of

ONE_DIGIT = ["env=math", "env.kwargs.difficulty=1", "env.kwargs.max_operand=9",
             "env.heldout_fraction=0.35", "trainer.eval_episodes=55", "monitor=none",
             "rollout.env_groups=8", "rollout.group_size=2", "trainer.warm_start.episodes=64"]


class Gathered(Exception):
    pass


def _controller(overrides: list[str]):
    from ragen2.controller.evaluation import Evaluator
    from ragen2.controller.problems import Problems
    from ragen2.controller.rollouts import RolloutSource
    from ragen2.controller.warm_start import WarmStart
    from ragen2.filtering.pipeline import FilterPipeline
    from ragen2.train import load_config

    cfg = load_config(overrides)
    calls: list = []

    def gather(method, specs, *args):
        calls.append((method, specs))
        raise Gathered

    actors = SimpleNamespace(workers=[None, None], gather=gather)
    problems = Problems(cfg)
    pipeline = FilterPipeline(cfg.filter, cfg.seed, [e.share for e in problems.train_envs])
    ctl = SimpleNamespace(cfg=cfg, problems=problems, train_envs=problems.train_envs,
                          eval_envs=problems.eval_envs,
                          rollouts=RolloutSource(cfg, problems, pipeline, actors),
                          warm=WarmStart(cfg, "unused", problems, actors),
                          evaluator=Evaluator(cfg, problems, actors, None))
    return ctl, calls


def _specs(ctl, calls, run) -> list:
    with pytest.raises(Gathered):
        run()
    return calls.pop()[1]


def _keys(ctl, specs) -> dict[str, set[str]]:
    """The problem of each spec's episode, by env name (reset in fresh envs)."""
    entries = {e.name: e for e in ctl.train_envs + ctl.eval_envs}
    envs, out = {}, {}
    for s in specs:
        if s.env not in envs:
            envs[s.env] = make_env(entries[s.env].id, entries[s.env].kwargs)
        envs[s.env].reset(seed=s.env_seed)
        out.setdefault(s.env, set()).add(envs[s.env].unwrapped.problem_key())
    return out


@pytest.mark.parametrize("extra", [[], ["filter=tiered"]], ids=["groups", "tiered_pool"])
def test_the_trainer_trains_and_evaluates_on_disjoint_problems(extra):
    ctl, calls = _controller(ONE_DIGIT + extra)
    f = ctl.cfg.env.heldout_fraction
    train_specs = [s for step in range(1, 31)
                   for s in _specs(ctl, calls, lambda: ctl.rollouts.collect(step, 0))]
    demo_specs = _specs(ctl, calls, lambda: ctl.warm.behaviour_clone(ctl.train_envs))
    eval_specs = _specs(ctl, calls, lambda: ctl.evaluator.evaluate(0, 0))
    panel_seeds = [ctl.problems.panel_seed("math", i) for i in range(32)]
    assert all(s.env_seed < 2**31 for s in train_specs + demo_specs)
    assert all(s >= 2**31 for s in [s.env_seed for s in eval_specs] + panel_seeds)

    trained = _keys(ctl, train_specs)["math"] | _keys(ctl, demo_specs)["math"]
    held = _keys(ctl, eval_specs)["math"]
    panel = _keys(ctl, [SimpleNamespace(env="math", env_seed=s) for s in panel_seeds])["math"]
    assert len(trained) > 60 and all(part_of(k, f) == TRAIN for k in trained)
    # 55 episodes, 55 distinct problems: the whole held-out part, none of them trained on
    assert len(eval_specs) == 55 and len(held) == 55
    assert all(part_of(k, f) == HELDOUT for k in held | panel)
    assert not trained & (held | panel)

    # resume: a fresh controller resolves every seed the same way
    again, calls2 = _controller(ONE_DIGIT + extra)
    assert _specs(again, calls2, lambda: again.rollouts.collect(7, 0)) == train_specs[7 * 16 - 16:7 * 16]
    assert _specs(again, calls2, lambda: again.evaluator.evaluate(10, 0)) == eval_specs


def test_a_mixture_keeps_each_envs_parts_apart():
    ctl, calls = _controller(["env=mixed", "monitor=none", "rollout.env_groups=8",
                              "rollout.group_size=1", "trainer.eval_episodes=64"])
    f = ctl.cfg.env.heldout_fraction
    trained = _keys(ctl, [s for step in range(1, 21)
                          for s in _specs(ctl, calls, lambda: ctl.rollouts.collect(step, 0))])
    held = _keys(ctl, _specs(ctl, calls, lambda: ctl.evaluator.evaluate(0, 0)))
    assert set(trained) == set(held) == {"sokoban", "frozenlake", "math"}
    for name in trained:
        assert trained[name] and held[name] and not trained[name] & held[name], name
        assert all(part_of(k, f) == TRAIN for k in trained[name])
        assert all(part_of(k, f) == HELDOUT for k in held[name])


def test_the_probe_panels_are_built_on_held_out_problems():
    from ragen2.collapse.panel import choose_panel
    from ragen2.collapse.panel_turns import choose_turn_panel

    ctl, _ = _controller(ONE_DIGIT)
    env = make_env(ctl.train_envs[0].id, ctl.train_envs[0].kwargs)

    def observe(name, seed):
        return env.reset(seed=seed)[0]

    panel = choose_panel([("math", 16)], observe, seed_of=ctl.problems.panel_seed)
    keys = _keys(ctl, [SimpleNamespace(env=p.env, env_seed=p.seed) for p in panel])["math"]
    assert len(panel) == len(keys) == 16
    assert all(part_of(k, ctl.cfg.env.heldout_fraction) == HELDOUT for k in keys)
    turns = choose_turn_panel([("math", 4)], lambda name, seed: ((), f"state {seed}"),
                              seed_of=ctl.problems.panel_seed)
    assert [p.seed for p in turns] == [ctl.problems.panel_seed("math", i) for i in range(4)]
