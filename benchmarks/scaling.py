"""Step time against the number of env groups per step and the number of turns per episode.

One real ragen2 run (the default FrozenLake job from its cached warm start, Ray, vLLM, FSDP2)
steps through every setting interleaved (round r runs step r once per setting): first
``rollout.env_groups`` in GROUPS at the default ``rollout.max_turns``, then ``rollout.max_turns``
in TURNS at the default groups. Step time is the wall time of ``Controller.train_step``, median
over rounds 2..; the slopes (least squares) are seconds per extra group and per extra turn.
Turns are a cap: episodes that end earlier (goal, hole) do not use them all, so the per-turn
slope is per *allowed* turn (``turns_mean`` says how many were used). The MI monitor is off.

The ratios checked for regressions are scale-free: step time at the largest setting over the
smallest, against the ideal linear growth (1.0 = exactly proportional to the work).

Usage::

    python benchmarks/scaling.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"groups": [2, 4, 8, 16], "turns": [1, 3, 5], "default_groups": 8, "default_turns": 5,
        "group_size": 4, "rounds": 4}
QUICK = {"groups": [2, 8], "turns": [1, 3], "default_groups": 4, "default_turns": 3,
         "group_size": 4, "rounds": 3}


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL

    def arm(groups, turns):
        return lambda ctl: common.set_rollout(ctl, env_groups=groups, max_turns=turns)

    arms = {f"groups={g}": arm(g, s["default_turns"]) for g in s["groups"]}
    arms.update({f"turns={t}": arm(s["default_groups"], t) for t in s["turns"]})
    overrides = ["monitor=none"]
    with common.controller(overrides, group_size=s["group_size"]) as ctl:
        steps = common.interleaved_steps(ctl, arms, s["rounds"])
    res = {name: {"step_s": common.median([r["wall_s"] for r in rows]),
                  "rollout_s": common.median([r.get("timing/rollout_s", 0.0) for r in rows]),
                  "update_s": common.median([r.get("timing/update_s", 0.0) for r in rows]),
                  "turns_mean": common.median([r["rollout/num_turns_mean"] for r in rows]),
                  "samples": [r["wall_s"] for r in rows]} for name, rows in steps.items()}
    for name, r in res.items():
        print(name, {k: round(v, 3) for k, v in r.items() if k != "samples"}, flush=True)
    g_time = [res[f"groups={g}"]["step_s"] for g in s["groups"]]
    t_time = [res[f"turns={t}"]["step_s"] for t in s["turns"]]
    per_group, g0 = common.fit_slope(s["groups"], g_time)
    per_turn, t0 = common.fit_slope(s["turns"], t_time)
    fits = {"seconds_per_group": per_group, "intercept_groups_s": g0,
            "seconds_per_turn": per_turn, "intercept_turns_s": t0,
            "groups_exponent": common.fit_exponent(s["groups"], g_time),
            "turns_exponent": common.fit_exponent(s["turns"], t_time)}
    print(fits, flush=True)
    ratios = {"groups_growth_over_linear": (g_time[-1] / g_time[0]) / (s["groups"][-1] / s["groups"][0]),
              "turns_growth_over_linear": (t_time[-1] / t_time[0]) / (s["turns"][-1] / s["turns"][0])}
    common.write_result("scaling", args, {**s, "overrides": overrides}, {"steps": res, "fits": fits},
                        ratios, {k: "lower" for k in ratios})


if __name__ == "__main__":
    main()
