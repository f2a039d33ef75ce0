"""Rollout overhead: ragen2's multi-turn episode runner vs the bare engine on the same requests.

ragen2 side: a :class:`~ragen2.rollout.worker.RolloutWorker` built in this process from the
default config (FrozenLake, its env thread pool, the warm-started policy when cached) runs one
step's episodes: ``run_episodes`` with ``EngineTurnPolicy``. Every ``generate`` call it makes is
recorded: the prompts (token ids), the sampling parameters and the tokens each request produced.

Baseline: the same calls replayed on the same engine's backend, with nothing of ragen2 around
them: vLLM's ``LLM.generate`` with the identical per-request sampling parameters (seeds, stop
string, logprobs) and ``max_tokens`` set to the count the runner's request produced; for HF,
``model.generate`` with the identical padded batch, arguments and seed. Same number of calls,
same prompts, the same tokens (checked: ``tokens_identical``), the prefix cache reset before
each arm. Nothing is subtracted: the ratio is runner wall time / summed replay wall time, so it
holds the engine wrapper (decode, logprobs, ``Generation``), chat rendering, parsing and env steps.
The two arms are timed apart, so machine noise hits them unequally; ``outside_backend_s`` (the
runner's wall time minus its time inside the backend's ``generate``, timed in the same run) is
the same overhead measured without that noise, and ``outside_backend_share`` its share.

Each engine runs in its own subprocess; arms alternate within it; the first round is a warm-up.
``--quick`` measures vLLM only, on fewer and shorter episodes.

Usage::

    python benchmarks/rollout_overhead.py [--quick] [--engines vllm hf]
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"groups": 8, "group_size": 4, "max_turns": 8, "repeats": 5}
QUICK = {"groups": 4, "group_size": 4, "max_turns": 4, "repeats": 2}


def _replay_vllm(engine, calls) -> tuple[float, list[list[int]]]:
    from vllm.inputs import TokensPrompt

    total, out = 0.0, []
    for prompts, params, ids in calls:
        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        sampling = [engine._sampling(replace(params, max_new_tokens=len(g)), params.seed + i)
                    for i, g in enumerate(ids)]
        t0 = time.perf_counter()
        res = engine.llm.generate(inputs, sampling, use_tqdm=False)
        total += time.perf_counter() - t0
        out.extend(list(r.outputs[0].token_ids) for r in res)
    return total, out


def _replay_hf(engine, calls) -> tuple[float, list[list[int]]]:
    import torch

    tok = engine.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    total, out = 0.0, []
    for prompts, params, ids in calls:
        width = max(len(p) for p in prompts)
        x = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(x)
        for i, p in enumerate(prompts):
            x[i, width - len(p):] = torch.as_tensor(list(p))
            mask[i, width - len(p):] = 1
        kwargs = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p,
                  "top_k": 0, "max_new_tokens": params.max_new_tokens, "pad_token_id": pad,
                  "eos_token_id": tok.eos_token_id, "output_logits": True,
                  "return_dict_in_generate": True}
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        t0 = time.perf_counter()
        torch.manual_seed(params.seed)
        with torch.no_grad():
            res = engine.model.generate(input_ids=x, attention_mask=mask, **kwargs)
        total += time.perf_counter() - t0
        new = res.sequences[:, width:].tolist()
        out.extend(row[:len(g)] for row, g in zip(new, ids))
    return total, out


def measure(engine_name: str, s: dict) -> dict:
    import torch

    from ragen2.rollout.envs import train_entries
    from ragen2.rollout.runner import EpisodeSpec
    from ragen2.rollout.worker import RolloutWorker
    from ragen2.train import load_config, resolve_model_path

    cfg = load_config([f"engine={engine_name}", f"rollout.max_turns={s['max_turns']}"])
    worker = RolloutWorker(cfg, resolve_model_path(cfg), 0, threads=os.cpu_count() or 1)
    engine = worker.engine
    warm = common.cached_warm_start()
    if warm:
        engine.load_weights(torch.load(warm, weights_only=True), 0)
    calls: list = []
    generate = engine.generate

    def recording(prompts, params):
        gens = generate(prompts, params)
        calls.append(([list(p) for p in prompts], params, [g.token_ids for g in gens]))
        return gens

    engine.generate = recording
    backend = engine.llm if engine_name == "vllm" else engine.model
    backend_generate, inside = backend.generate, [0.0]

    def timing(*a, **kw):  # wall time inside the backend's own generate
        t0 = time.perf_counter()
        try:
            return backend_generate(*a, **kw)
        finally:
            inside[0] += time.perf_counter() - t0

    backend.generate = timing
    reset = getattr(getattr(engine, "llm", None), "reset_prefix_cache", lambda: None)
    replay = _replay_vllm if engine_name == "vllm" else _replay_hf
    name = train_entries(cfg.env)[0].name
    specs = [EpisodeSpec(1000 + g, g, name) for g in range(s["groups"]) for _ in range(s["group_size"])]
    runner, raw, gen_s, env_s, outside, same = [], [], [], [], [], True
    for r in range(s["repeats"] + 1):  # round 0 warms up
        calls.clear()
        reset()
        inside[0] = 0.0
        t0 = time.perf_counter()
        trajs, stats = worker.rollout(specs, seed=7, expected_version=0)
        t_run = time.perf_counter() - t0
        t_out = t_run - inside[0]
        reset()
        t_raw, ids = replay(engine, calls)
        same = same and ids == [g for _, _, gens in calls for g in gens]
        if r:
            runner.append(t_run)
            raw.append(t_raw)
            gen_s.append(stats["generate_s"])
            env_s.append(stats["env_s"])
            outside.append(t_out)
    return {"runner_s": common.median(runner), "raw_generate_s": common.median(raw),
            "runner_generate_s": common.median(gen_s), "runner_env_s": common.median(env_s),
            "ratio": common.median([a / b for a, b in zip(runner, raw)]),
            "outside_backend_s": common.median(outside),
            "outside_backend_share": common.median([o / r for o, r in zip(outside, runner)]),
            "generate_calls": len(calls), "tokens": sum(len(g) for _, _, x in calls for g in x),
            "episodes": len(trajs), "turns_mean": sum(t.num_turns for t in trajs) / len(trajs),
            "policy": "warm_start" if warm else "random", "tokens_identical": same,
            "samples": {"runner_s": runner, "raw_generate_s": raw, "outside_backend_s": outside}}


def main() -> None:
    args = common.parse_args(__doc__, lambda ap: (
        ap.add_argument("--engines", nargs="+", help="default: vllm hf (--quick: vllm)"),
        ap.add_argument("--child", help=__import__("argparse").SUPPRESS)))
    s = QUICK if args.quick else FULL
    args.engines = args.engines or (["vllm"] if args.quick else ["vllm", "hf"])
    if args.child:
        common.emit(measure(args.child, s))
        return
    res = {}
    for e in args.engines:
        res[e] = common.run_child([__file__, "--child", e] + (["--quick"] if args.quick else []))
        print(e, {k: v for k, v in res[e].items() if k != "samples"}, flush=True)
    ratios = {f"{e}_runner_over_raw": res[e]["ratio"] for e in res}
    ratios.update({f"{e}_runner_over_backend": 1 / (1 - res[e]["outside_backend_share"]) for e in res})
    common.write_result("rollout_overhead", args, {**s, "env": "ragen2/FrozenLake-v0",
                                                   "engines": args.engines}, res, ratios,
                        {k: "lower" for k in ratios},
                        {"vllm_runner_over_raw": "<= 1.05", "vllm_runner_over_backend": "<= 1.05"}
                        if "vllm" in res else {})


if __name__ == "__main__":
    main()
