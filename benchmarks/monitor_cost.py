"""Cost of the MI collapse monitor: its share of step time, and its growth with the prompt count.

* ``share``: a real ragen2 run (the default FrozenLake job from its cached warm start) with the
  monitor forced due at every step; ``timing/monitor_s`` against the wall time of the step it
  ran in, median over rounds 2... At the default cadence (``monitor.every=5``) the amortised
  share is ``(m / 5) / (step - m + m / 5)``. Goal: <= 10%.
* ``growth``: ``MIMonitor.measure`` alone, in this process, on a ``LearnerRank`` of world size 1
  (one thread; CPU seconds, see ``common.cpu_timed``) as the scorer, over batches of N groups x 4 episodes whose first-turn reasoning
  comes from the env's expert (real prompts and reasoning of realistic length), for N in
  ``groups``: seconds per measurement and the log-log slope over N. With ``max_negatives=0``
  every reasoning is scored under every prompt (N x 4N pairs, quadratic); with
  ``max_negatives=k`` under its own prompt and k sampled others (linear in N; k = 4 here so
  that it subsamples from N = 6 on: with k >= N - 1 the monitor scores the full matrix).

Usage::

    python benchmarks/monitor_cost.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"groups": [4, 8, 16, 32], "negatives": [0, 4], "repeats": 3, "group_size": 4,
        "share": {"env_groups": 8, "max_turns": 8, "rounds": 4}}
QUICK = {"groups": [4, 8, 16], "negatives": [0, 4], "repeats": 1, "group_size": 4,
         "share": {"env_groups": 4, "max_turns": 3, "rounds": 2}}


def expert_batch(groups: int, group_size: int, tokenizer):
    """First turns of ``groups x group_size`` FrozenLake episodes played by the env's expert."""
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.runner import DemonstrationPolicy, EpisodeSpec, run_episodes

    specs = [EpisodeSpec(100 + g, g, "frozenlake") for g in range(groups) for _ in range(group_size)]
    return run_episodes(specs, lambda _: make_env("ragen2/FrozenLake-v0", {}), ChatRenderer(tokenizer),
                        DemonstrationPolicy(tokenizer, 0.0, 0), max_turns=1, format_penalty=-0.1,
                        max_context_tokens=4096, max_new_tokens=64)


def growth(s: dict) -> dict:
    from ragen2.collapse.monitor import MIMonitor
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.models.loading import load_tokenizer
    from ragen2.train import load_config, resolve_model_path

    cfg = load_config(["cluster.learner_world_size=1"])
    path = resolve_model_path(cfg)
    rank = LearnerRank(cfg, path, 0, 1, threads=1, settings=learner_settings(cfg))
    rank.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    tokenizer = load_tokenizer(path)

    def scorer(contexts, continuations, columns):  # LearnerGroup.score with one in-process rank
        logp, tokens = np.full(columns.shape, np.nan), np.zeros(columns.shape, np.int64)
        for i, k, v, n in rank.score(contexts, continuations, columns):
            logp[i, k], tokens[i, k] = v, n
        return logp, tokens

    out: dict = {}
    batches = {n: expert_batch(n, s["group_size"], tokenizer) for n in s["groups"]}
    MIMonitor(every=1).measure(batches[s["groups"][0]], scorer, step=1)  # warm-up
    for k in s["negatives"]:
        monitor = MIMonitor(every=1, max_negatives=k, permutations=cfg.monitor.permutations)
        times = {}
        for n, trajs in batches.items():
            run = lambda m=monitor, b=trajs: m.measure(b, scorer, 1)  # noqa: E731
            times[n] = common.median([common.cpu_timed(run)[1] for _ in range(s["repeats"])])
            print(f"  max_negatives={k} groups={n}: {times[n]:.3f} s", flush=True)
        out[f"max_negatives={k}"] = {"seconds": {str(n): t for n, t in times.items()},
                                     "exponent": common.fit_exponent(list(times), list(times.values()))}
    rank.shutdown()
    return out


def share(s: dict) -> dict:
    c = s["share"]
    rollout = {"env_groups": c["env_groups"], "max_turns": c["max_turns"],
               "group_size": s["group_size"]}
    with common.controller(**rollout) as ctl:
        every = ctl.cfg.monitor.every
        ctl.watch.monitor.every = 1  # due at every step
        rows = common.interleaved_steps(ctl, {"monitor": lambda _: None}, c["rounds"])["monitor"]
    m = common.median([r["timing/monitor_s"] for r in rows])
    step = common.median([r["wall_s"] for r in rows])
    return {"rollout": rollout, "default_every": every, "monitor_s": m, "step_s": step,
            "share_every1": m / step, "share_default": (m / every) / (step - m + m / every),
            "samples": {"monitor_s": [r["timing/monitor_s"] for r in rows],
                        "step_s": [r["wall_s"] for r in rows]}}


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    g = growth(s)
    sh = share(s)
    print("share", {k: v for k, v in sh.items() if k != "samples"}, flush=True)
    ratios = {"share_at_default_every": sh["share_default"],
              **{f"exponent_{k}": v["exponent"] for k, v in g.items()}}
    common.write_result("monitor_cost", args, s, {"share": sh, "growth": g}, ratios,
                        {k: "lower" for k in ratios},
                        {"share_at_default_every": "<= 0.10"})


if __name__ == "__main__":
    main()
