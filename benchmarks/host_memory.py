"""The CPU memory estimate (``ragen2.cluster.host_memory``) against the measured peak resident
memory of each kind of process of a SmolLM2-135M-Instruct job (issue 28, item 0).

Every scenario runs in a fresh process and reports its kernel high-water mark (``VmHWM``) and its
resident set after the imports (``base``); the estimate for the same settings is computed by the
same functions the preflight uses, on one learner rank (W = 1):

* ``learner_<dtype>_<ckpt|full>_<N>``: ``LearnerRank`` on one gloo rank runs one GRPO update (the
  recipe's entropy bonus, ``ppo_mini_batches=1``) on a synthetic batch of 4 rows x ``--row-tokens``
  tokens (every token trained) with ``learner.micro_batch_tokens=N``, against
  ``LEARNER_PROCESS + resident + max(update, loading)``;
* ``scoring_<dtype>``: ``LearnerRank.score``, the MI monitor's scoring, of 64 continuations of 64
  tokens under one 256-token context, against ``LEARNER_PROCESS + resident + scoring``;
* ``hf_<dtype>``: ``HFEngine.generate`` of ``--seqs`` sequences (a 256-token prompt, 64 new
  tokens each), against the HF engine's terms with the context at 320 tokens;
* ``vllm_<dtype>``: ``VLLMEngine`` with ``engine.cpu_kvcache_gb=1``, the same generation.

Usage::

    python benchmarks/host_memory.py                # every scenario (~10 min on a quiet machine)
    python benchmarks/host_memory.py --quick        # fp32 learner at 1024 tokens + HF engine
    python benchmarks/host_memory.py --dtypes bfloat16 --only learner_bfloat16_full_1024 vllm_bfloat16
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit, kib, parse_args, run_child, write_result  # noqa: E402

GiB = 2**30


def _status(key: str) -> int:
    return kib(key) * 1024


def _cfg(dtype: str, ckpt: bool, mbt: int, ctx: int, extra: tuple[str, ...] = ()) -> Any:
    from ragen2.train import load_config

    return load_config(["model=smollm2", f"model.dtype={dtype}", "cluster.learner_world_size=1",
                        f"learner.activation_checkpointing={str(ckpt).lower()}",
                        f"learner.micro_batch_tokens={mbt}", f"rollout.max_context_tokens={ctx}",
                        "algorithm.ppo_mini_batches=1", "engine.max_new_tokens=64", *extra])


def _rank(cfg: Any) -> Any:
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.models.smollm2 import ensure_smollm2

    r = LearnerRank(cfg, str(ensure_smollm2()), 0, 1, threads=0, settings=learner_settings(cfg))
    r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    return r


def learner_child(dtype: str, ckpt: bool, mbt: int, row_tokens: int) -> dict:
    import numpy as np
    import torch  # noqa: F401  (the imports are part of the base)

    base = _status("VmRSS")
    cfg = _cfg(dtype, ckpt, mbt, row_tokens)
    r = _rank(cfg)
    after_setup = _status("VmRSS")
    n, rng = 4, np.random.default_rng(0)
    ids = rng.integers(3, 49_000, (n, row_tokens))
    mask = np.ones((n, row_tokens), np.int64)
    mask[:, 0] = 0
    batch = {"input_ids": ids, "attention_mask": np.ones((n, row_tokens), np.int64),
             "loss_mask": mask, "logprobs": np.zeros((n, row_tokens), np.float32),
             "token_rewards": np.zeros((n, row_tokens), np.float32),
             "rewards": np.array([1, 0, 1, 0], np.float32), "group_ids": np.zeros(n, np.int64),
             "policy_version": np.zeros(n, np.int64)}
    r.update(batch, step=1)
    return {"base": base, "after_setup": after_setup, "peak": _status("VmHWM")}


def scoring_child(dtype: str) -> dict:
    import numpy as np
    import torch  # noqa: F401

    base = _status("VmRSS")
    r = _rank(_cfg(dtype, False, 1024, 1024))
    after_setup = _status("VmRSS")
    rng = np.random.default_rng(0)
    contexts = [rng.integers(3, 49_000, 256).tolist()]
    conts = [rng.integers(3, 49_000, 64).tolist() for _ in range(64)]
    r.score(contexts, conts, np.zeros((64, 1), np.int64))
    return {"base": base, "after_setup": after_setup, "peak": _status("VmHWM")}


def engine_child(name: str, dtype: str, seqs: int) -> dict:
    import numpy as np
    import torch  # noqa: F401

    from ragen2.engines.base import SamplingParams
    from ragen2.models.smollm2 import ensure_smollm2

    base = _status("VmRSS")
    path = str(ensure_smollm2())
    if name == "vllm":
        from ragen2.config import EngineConfig
        from ragen2.engines.vllm import VLLMEngine

        eng = VLLMEngine(path, dtype=dtype, device="cpu", seed=0,
                         options=EngineConfig(name="vllm", max_model_len=1024, cpu_kvcache_gb=1))
    else:
        from ragen2.engines.hf import HFEngine

        eng = HFEngine(path, dtype=dtype, device="cpu", seed=0)
    after_setup = _status("VmRSS")
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 49_000, 256).tolist() for _ in range(seqs)]
    eng.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=64, stop=(), seed=1))
    return {"base": base, "after_setup": after_setup, "peak": _status("VmHWM")}


def estimate(kind: str, dtype: str, ckpt: bool = False, mbt: int = 1024, ctx: int = 1024,
             seqs: int = 0) -> dict:
    from ragen2.cluster import host_memory as hm
    from ragen2.cluster.host import HostMemory

    big = HostMemory(1024 * GiB, 1000 * GiB)
    if kind in ("hf", "vllm"):
        cfg = _cfg(dtype, False, 1024, 320, (f"engine={kind}", "rollout.env_groups=1",
                                             f"rollout.group_size={seqs}",
                                             f"trainer.eval_episodes={seqs}",
                                             "engine.cpu_kvcache_gb=1", "engine.max_model_len=1024"))
        b = hm.estimate_host_memory(cfg, big)
        return {"estimate": b.engine_peak, "terms": b.engine}
    b = hm.estimate_host_memory(_cfg(dtype, ckpt, mbt, ctx), big)
    resident = sum(b.learner.values())
    if kind == "scoring":
        return {"estimate": resident + sum(b.scoring.values()),
                "terms": {**b.learner, **b.scoring}}
    return {"estimate": resident + max(sum(b.update.values()), b.loading),
            "terms": {**b.learner, **b.update, "loading": b.loading}}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "learner":
            emit(learner_child(rest[0], rest[1] == "1", int(rest[2]), int(rest[3])))
        elif kind == "scoring":
            emit(scoring_child(rest[0]))
        else:
            emit(engine_child(kind, rest[0], int(rest[1])))
        return

    def extra(ap):
        ap.add_argument("--row-tokens", type=int, default=1024)
        ap.add_argument("--seqs", type=int, default=32)
        ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
        ap.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="run only these scenarios (names as printed)")

    args = parse_args(__doc__.split("\n")[0], extra)
    t = args.row_tokens
    scenarios: list[tuple[str, list[str], dict]] = []
    for d in (["float32"] if args.quick else args.dtypes):
        for ckpt, mbt in ([(False, t)] if args.quick else [(False, t), (False, 4 * t), (True, 4 * t)]):
            scenarios.append((f"learner_{d}_{'ckpt' if ckpt else 'full'}_{mbt}",
                              ["learner", d, str(int(ckpt)), str(mbt), str(t)],
                              estimate("learner", d, ckpt, mbt, t)))
        if not args.quick:
            scenarios.append((f"scoring_{d}", ["scoring", d], estimate("scoring", d)))
        for eng in (["hf"] if args.quick else ["hf", "vllm"]):
            scenarios.append((f"{eng}_{d}", [eng, d, str(args.seqs)],
                              estimate(eng, d, seqs=args.seqs)))
    if args.only:
        scenarios = [s for s in scenarios if s[0] in args.only]
    results, ratios = {}, {}
    for name, child, est in scenarios:
        m = run_child([__file__, "--child", *child], timeout=1800)
        r = {**{k: v / GiB for k, v in m.items()}, "estimate": est["estimate"] / GiB,
             "terms": {k: v / GiB for k, v in est["terms"].items()}}
        r["estimate_over_peak"] = est["estimate"] / m["peak"]
        results[name], ratios[f"{name}_estimate_over_peak"] = r, r["estimate_over_peak"]
        print(f"[host_memory] {name}: peak {r['peak']:.2f} GiB (base {r['base']:.2f}, set up "
              f"{r['after_setup']:.2f}), estimate {r['estimate']:.2f} GiB "
              f"({r['estimate_over_peak']:.2f}x)", flush=True)
        # after every scenario: a run stopped early keeps what it measured
        write_result("host_memory", args, {"row_tokens": t, "seqs": args.seqs,
                                           "model": "SmolLM2-135M-Instruct", "learner_ranks": 1},
                     results, ratios, {k: "higher" for k in ratios},
                     {k: ">= 1.0" for k in ratios})


if __name__ == "__main__":
    main()
