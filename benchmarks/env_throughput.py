"""Environment throughput: env steps per second per environment, concurrent vs serial env steps,
and the share of a training step spent inside environments.

Three measurements, side by side in one run, medians over ``--repeats``:

* ``steps_per_s``: single-threaded ``reset`` + ``step`` calls per second for each built-in env,
  driven by the env's own expert (``demonstration()``); only time inside the env is counted.
* ``concurrency``: the episode runner with a scripted policy over 16 Code-v0 episodes (every
  answer runs hidden tests in the sandbox), ``rollout.env_threads`` 1 vs 8: env wall seconds and the
  speed-up. The baseline is the serial runner, measured in the same run.
* ``step_share``: ``timing/env_s / timing/step_s`` from a short real training run of each env
  preset from its warm-started policy (Ray + FSDP2 + the tiny model), i.e. how much of a step the
  envs cost. Code-v0 is left out: the tiny model writes no parsable code, so its env is never
  called (a Code-v0 call costs ~25 ms, see ``steps_per_s``). Skipped by ``--quick``.

Usage::

    python benchmarks/env_throughput.py [--quick] [--repeats 5] [--out-dir benchmarks/results]

``--quick`` also drops to 2 repeats. The checked ratio is the threaded speed-up.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

ENVS = {
    "frozenlake": ("ragen2/FrozenLake-v0", {}),
    "sokoban": ("ragen2/Sokoban-v0", {}),
    "math": ("ragen2/Math-v0", {}),
    "code": ("ragen2/Code-v0", {}),
}


def steps_per_second(env_id: str, kwargs: dict, episodes: int) -> float:
    """Env calls per second of env time, the expert choosing actions (its own time excluded)."""
    from ragen2.rollout.envs import make_env

    env = make_env(env_id, kwargs)
    calls, inside = 0, 0.0
    for seed in range(episodes):
        t0 = time.perf_counter()
        env.reset(seed=1000 + seed)
        inside += time.perf_counter() - t0
        calls += 1
        for _ in range(20):
            _, action = env.unwrapped.demonstration()
            t0 = time.perf_counter()
            _, _, term, trunc, _ = env.step(action)
            inside += time.perf_counter() - t0
            calls += 1
            if term or trunc:
                break
    env.close()
    return calls / inside


class _WrongThenRightPolicy:
    """Turn 0 answers with a wrong function (the tests run and fail), turn 1 with the reference."""

    policy_version = 0

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def act(self, episodes, turn):
        from ragen2.engines.base import Generation

        out = []
        for ep in episodes:
            _, reference = ep.env.unwrapped.demonstration()
            code = reference if turn else reference.replace("return ", "return None and ", 1)
            text = f"<think>write it</think><answer>{code}</answer>"
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            out.append(Generation(ids, [0.0] * len(ids), "stop", 0, text))
        return out


def concurrency(threads: int, episodes: int, tokenizer) -> float:
    """Env wall seconds of ``episodes`` Code-v0 episodes through the runner."""
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.runner import EpisodeSpec, run_episodes

    specs = [EpisodeSpec(s, s, "code") for s in range(episodes)]
    stats: dict[str, float] = {}
    executor = ThreadPoolExecutor(threads) if threads > 1 else None
    try:
        run_episodes(specs, lambda _: make_env(*ENVS["code"]), ChatRenderer(tokenizer),
                     _WrongThenRightPolicy(tokenizer), max_turns=2, format_penalty=-0.1,
                     max_context_tokens=100_000, max_new_tokens=64, executor=executor, stats=stats)
    finally:
        if executor is not None:
            executor.shutdown()
    return stats["env_s"]


def step_share(name: str) -> dict:
    """Median env share of step time over a 3-step run of the ``env=<name>`` preset (first step
    dropped), from the warm-started policy (the default warm start, reused from the cache when an
    earlier run built it): the share depends on how often the policy's replies reach the env."""
    from ragen2.train import load_config, train

    overrides = [f"env={name}", "trainer.total_steps=3", "trainer.eval_episodes=2",
                 "trainer.eval_every=0", "trainer.loggers=[jsonl]", "trainer.save_rollouts_every=0"]
    with tempfile.TemporaryDirectory() as run_dir:
        train(load_config(overrides), run_dir)
        rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 2 and "timing/step_s" in r]
    return {"env_s": statistics.median(r["timing/env_s"] for r in steps),
            "step_s": statistics.median(r["timing/step_s"] for r in steps),
            "env_share": statistics.median(r["timing/env_s"] / r["timing/step_s"] for r in steps),
            "format_error_rate": statistics.median(r["rollout/format_error_rate"] for r in steps)}


def main() -> None:
    args = common.parse_args(__doc__, lambda ap: ap.add_argument("--repeats", type=int, default=5))
    if args.quick:
        args.repeats = min(args.repeats, 2)

    from ragen2.models.loading import load_tokenizer
    from ragen2.train import load_config, resolve_model_path

    result: dict = {"steps_per_s": {}}
    for name, (env_id, kwargs) in ENVS.items():
        runs = [steps_per_second(env_id, kwargs, 4 if name == "code" else 50)
                for _ in range(args.repeats)]
        result["steps_per_s"][name] = statistics.median(runs)
        print(f"{name:>10}: {result['steps_per_s'][name]:10.1f} env calls/s", flush=True)

    model_path = resolve_model_path(load_config([]))
    tokenizer = load_tokenizer(model_path)
    serial = statistics.median(concurrency(1, 16, tokenizer) for _ in range(args.repeats))
    threaded = statistics.median(concurrency(8, 16, tokenizer) for _ in range(args.repeats))
    result["concurrency"] = {"episodes": 16, "turns": 2, "serial_env_s": serial,
                             "threads8_env_s": threaded, "speedup": serial / threaded}
    print(f"code env, 16 episodes x 2 turns: serial {serial:.2f} s, 8 threads {threaded:.2f} s "
          f"({serial / threaded:.2f}x)", flush=True)

    if not args.quick:
        import ray

        from ragen2.train import ensure_ray

        ensure_ray(load_config([]))
        result["step_share"] = {}
        for name in ("frozenlake", "sokoban", "math"):  # the tiny model writes no parsable code
            result["step_share"][name] = step_share(name)
            print(f"{name:>10}: env share of step time "
                  f"{result['step_share'][name]['env_share']:.5f}", flush=True)
        ray.shutdown()

    common.write_result("env_throughput", args, {"repeats": args.repeats,
                                                 "training_runs": not args.quick},
                        result, {"threads8_speedup": result["concurrency"]["speedup"]},
                        {"threads8_speedup": "higher"})


if __name__ == "__main__":
    main()
