"""Step time with RAGEN-2 top-p group filtering (p = 0.9, 0.6) vs no filtering.

A real ragen2 run (Ray, the vLLM rollout worker, FSDP2 learners, the default FrozenLake job from
its cached warm start, seed 0) trains with the three filter settings interleaved: round r runs
step r once per setting (the same env and sampling seeds), so the settings see the same policy
and the same machine noise. Step time is the wall time of ``Controller.train_step`` (rollout,
filter, update, weight sync and probe), median over rounds 2.. (round 1 is a warm-up). The MI
monitor is off here (``monitor_cost`` measures it). Filtering shortens only the update: the
rollout is the same, so the saving is the update's share of a step times the dropped share.

The RAGEN-2 paper reports 26-41% shorter steps (ratios 0.59-0.74) on its GPU setup.

Usage::

    python benchmarks/filter_step_time.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"env_groups": 8, "group_size": 4, "max_turns": 8, "rounds": 6}
QUICK = {"env_groups": 4, "group_size": 4, "max_turns": 3, "rounds": 3}
ARMS = {"none": ["filter=none"], "p0.9": ["filter=top_p", "filter.value=0.9"],
        "p0.6": ["filter=top_p", "filter.value=0.6"]}


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    from ragen2.filtering.pipeline import FilterPipeline
    from ragen2.train import load_config

    filters = {name: load_config(o).filter for name, o in ARMS.items()}

    def arm(name):
        def setup(ctl):  # the step's filter, and the one that draws the groups' prompts
            ctl.filter = ctl.rollouts.filter = FilterPipeline(filters[name], ctl.cfg.seed)
        return setup

    overrides = ["monitor=none"]
    rollout = {k: s[k] for k in ("env_groups", "group_size", "max_turns")}
    with common.controller(overrides, **rollout) as ctl:
        steps = common.interleaved_steps(ctl, {name: arm(name) for name in ARMS}, s["rounds"])
    res = {}
    for name, rows in steps.items():
        trained = [r for r in rows if r["trained"]]
        res[name] = {"step_s": common.median([r["wall_s"] for r in rows]),
                     "kept_ratio": common.median([r.get("filter/kept_ratio", 1.0) for r in rows]),
                     "rollout_s": common.median([r["timing/rollout_s"] for r in trained] or [0.0]),
                     "update_s": common.median([r["timing/update_s"] for r in trained] or [0.0]),
                     "skipped_steps": len(rows) - len(trained),
                     "samples": [r["wall_s"] for r in rows]}
        print(name, {k: v for k, v in res[name].items() if k != "samples"}, flush=True)
    ratios = {"p0.9_over_none": res["p0.9"]["step_s"] / res["none"]["step_s"],
              "p0.6_over_none": res["p0.6"]["step_s"] / res["none"]["step_s"]}
    common.write_result("filter_step_time", args, {**s, "overrides": overrides, "arms": ARMS},
                        res, ratios, {k: "lower" for k in ratios},
                        {"p0.6_over_none": "<= 0.74 (paper: 0.59-0.74)"})


if __name__ == "__main__":
    main()
