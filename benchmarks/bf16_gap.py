"""The engine-vs-learner logprob gap of SmolLM2-135M-Instruct on this CPU, fp32 and bf16, measured
with identical weights: what ``sync.probe_tolerance`` (by ``model.dtype``) and the probe's floor
must allow, and what ``actor/logprob_gap`` reads when nothing is wrong (issue 28, item 1).

Two numbers per (engine, dtype), each with the engine and the learner in a process of its own (as
in a run: vLLM and the FSDP2 learner both set up torch.distributed):

* ``probe``: the weight-sync probe exactly as ``ragen2.sync.probe.run_probe`` runs it: a fixed
  320-token random sequence (``probe_ids``), the engine's greedy 4-token continuation with its
  top-5 logprobs at each position, the learner's logprobs of the same 20 (position, token) pairs;
  mean and max |gap|. Repeated for ``--probes`` sequences (seeds 1234, 1235, ...).
* ``sampled``: ``actor/logprob_gap`` on real prompts: the engine samples at temperature 1 from
  ``--prompts`` first-turn Math prompts (ragen2's chat rendering and format), and the learner
  recomputes the logprob of every sampled token; mean and max |gap| per token, and the 99th
  percentile.

The learner is ``ragen2.learner.rank.LearnerRank`` on one gloo rank (``model.dtype=bfloat16``:
FSDP2 mixed precision, fp32 master weights cast to bf16 for compute, as in training); the engines
are ``ragen2.engines.hf.HFEngine`` / ``ragen2.engines.vllm.VLLMEngine`` in ``--engines`` loading
the same checkpoint in the same dtype.

Usage::

    python benchmarks/bf16_gap.py                  # hf and vllm, float32 and bfloat16
    python benchmarks/bf16_gap.py --quick          # hf only, 1 probe, 2 prompts
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit, parse_args, run_child, write_result  # noqa: E402

PROBE_TOKENS, PROBE_NEW, PROBE_TOP = 320, 4, 5  # sync.probe_tokens; run_probe's defaults


def _model_path() -> str:
    from ragen2.models.smollm2 import ensure_smollm2

    return str(ensure_smollm2())


def engine_side(engine_name: str, dtype: str, probes: int, prompts: int, new_tokens: int) -> dict:
    """Child: the engine's probe continuations and its samples (ids and logprobs)."""
    import gymnasium as gym

    import ragen2_envs  # noqa: F401
    from ragen2.engines.base import SamplingParams
    from ragen2.rollout.chat import ChatRenderer, system_prompt
    from ragen2.sync.probe import probe_ids

    path = _model_path()
    if engine_name == "vllm":
        from ragen2.config import EngineConfig
        from ragen2.engines.vllm import VLLMEngine

        engine = VLLMEngine(path, dtype=dtype, device="cpu", seed=0,
                            options=EngineConfig(name="vllm", max_model_len=1024, cpu_kvcache_gb=1))
    else:
        from ragen2.engines.hf import HFEngine

        engine = HFEngine(path, dtype=dtype, device="cpu", seed=0)
    tok = engine.tokenizer
    out: dict[str, Any] = {"probes": [], "samples": []}
    for k in range(probes):
        ids = probe_ids(len(tok), PROBE_TOKENS, seed=1234 + k)
        g = engine.generate([ids], SamplingParams(temperature=0.0, max_new_tokens=PROBE_NEW,
                                                  stop=(), top_logprobs=PROBE_TOP))[0]
        out["probes"].append({"ids": ids, "gen": g.token_ids,
                              "tops": [{str(t): v for t, v in d.items()} for d in g.top_logprobs]})
    renderer = ChatRenderer(tok)
    ps = []
    for i in range(prompts):
        env = gym.make("ragen2/Math-v0", difficulty=1).unwrapped
        obs, _ = env.reset(seed=2**31 + i)
        ps.append(renderer.initial_prompt(system_prompt(env.instructions), obs))
    gens = engine.generate(ps, SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=7))
    out["samples"] = [{"prompt": p, "gen": g.token_ids, "logprobs": g.logprobs}
                      for p, g in zip(ps, gens)]
    return out


def learner_side(dtype: str, engine_json: str) -> dict:
    """Child: the learner's logprobs of what the engine produced, and the gaps."""
    import numpy as np

    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.sync.probe import compare, learner_logprobs_at, queries_of
    from ragen2.train import load_config

    data = json.loads(Path(engine_json).read_text())
    cfg = load_config(["model=smollm2", f"model.dtype={dtype}", "cluster.learner_world_size=1",
                       "learner.micro_batch_tokens=1024", "learner.activation_checkpointing=false"])
    rank = LearnerRank(cfg, _model_path(), 0, 1, threads=0, settings=learner_settings(cfg))
    rank.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    probes = []
    for p in data["probes"]:
        tops = [{int(t): v for t, v in d.items()} for d in p["tops"]]
        full, queries = queries_of(p["ids"], (p["gen"], tops))
        ref = learner_logprobs_at(rank, full, queries)
        mean, worst = compare(ref, [list(d.values()) for d in tops])
        probes.append({"mean": mean, "max": worst})
    diffs = []
    for s in data["samples"]:
        ids = s["prompt"] + s["gen"]
        lp = rank.logprobs(ids)[len(s["prompt"]) - 1:]
        diffs.extend(abs(a - b) for a, b in zip(lp, s["logprobs"]))
    rank.shutdown()
    d = np.asarray(diffs)
    return {"probe": probes,
            "probe_mean": float(np.mean([p["mean"] for p in probes])),
            "probe_worst_mean": float(max(p["mean"] for p in probes)),
            "probe_max": float(max(p["max"] for p in probes)),
            "sampled_tokens": int(d.size), "sampled_mean": float(d.mean()),
            "sampled_p99": float(np.quantile(d, 0.99)), "sampled_max": float(d.max())}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("--engine-side", "--learner-side"):
        side, rest = sys.argv[1], sys.argv[2:]
        if side == "--engine-side":
            emit(engine_side(rest[0], rest[1], int(rest[2]), int(rest[3]), int(rest[4])))
        else:
            emit(learner_side(rest[0], rest[1]))
        return

    def extra(ap):
        ap.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
        ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                        choices=["float32", "bfloat16"])
        ap.add_argument("--probes", type=int, default=4)
        ap.add_argument("--prompts", type=int, default=8)
        ap.add_argument("--new-tokens", type=int, default=128)

    args = parse_args(__doc__.split("\n")[0], extra)
    if args.quick:
        args.engines, args.probes, args.prompts, args.new_tokens = ["hf"], 1, 2, 32
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragen2-bf16-gap-") as tmp:
        for engine in args.engines:
            for dtype in args.dtypes:
                name = f"{engine}_{dtype}"
                side = Path(tmp) / f"{name}.json"
                side.write_text(json.dumps(run_child(
                    [__file__, "--engine-side", engine, dtype, str(args.probes),
                     str(args.prompts), str(args.new_tokens)], timeout=1800)))
                results[name] = run_child([__file__, "--learner-side", dtype, str(side)],
                                          timeout=1800)
                r = results[name]
                print(f"[bf16_gap] {name}: probe mean {r['probe_mean']:.3g} (worst probe "
                      f"{r['probe_worst_mean']:.3g}, max pair {r['probe_max']:.3g}); sampled "
                      f"{r['sampled_tokens']} tokens mean {r['sampled_mean']:.3g} p99 "
                      f"{r['sampled_p99']:.3g} max {r['sampled_max']:.3g}", flush=True)
    ratios = {f"{k}_probe_mean": v["probe_mean"] for k, v in results.items()}
    write_result("bf16_gap", args,
                 {"model": "SmolLM2-135M-Instruct", "probe_tokens": PROBE_TOKENS,
                  "probe_new_tokens": PROBE_NEW, "probe_top_k": PROBE_TOP,
                  "probes": args.probes, "prompts": args.prompts, "new_tokens": args.new_tokens,
                  "engines": args.engines, "dtypes": args.dtypes},
                 results, ratios, {k: "lower" for k in ratios})


if __name__ == "__main__":
    main()
