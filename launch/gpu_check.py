"""The GPU check as one script that needs neither Ray, Hydra nor vLLM (a bare CUDA machine).

It drives ragen2's own pieces directly, in two processes sharing one GPU, the way a colocated run
does: the FSDP2 learner (:class:`ragen2.learner.rank.LearnerRank`, one rank on NCCL, bf16 compute
over fp32 master weights) in this process, the HF engine (:class:`ragen2.engines.hf.HFEngine`, bf16)
in a spawned child, and the ``cuda_ipc`` weight push between them (the strategy's own
``share_next_bucket`` / ``load_shared_bucket``). Sections, each timed and written to
``OUT/summary.json`` (the only file besides the logs; the model and every other scratch file go to
``--scratch``, outside ``OUT``):

1. ``env``: GPU, torch, CUDA, bf16, packages;
2. ``model``: the Qwen2-0.5B-shaped random model built offline (its vocabulary is the offline
   BPE's, 390 tokens, under the spec's bound of 151,936), its final
   norm scaled so that its logits have a pretrained model's spread (std ``--logit-std`` over the
   vocabulary; a random model's are near-uniform, which would make every bf16 gap look small);
3. ``nccl_group``: the ``nccl`` strategy's weight-sync group constructor (``ProcessGroupNCCL`` with
   its timeout options) and a broadcast with a timed wait, on the installed torch (one rank: NCCL
   refuses two ranks on one GPU);
4. ``precision``: the post-sync probe's gap between a bf16 engine and the bf16 learner on the
   same weights -- the floor ``ragen2.sync.probe.ProbePolicy`` measures at policy version 0 -- and
   the threshold the defaults derive from it; the learner's bf16 logprobs against fp32 ones;
5. ``update``: ``--steps`` GRPO updates (KL to a reference model included) on a synthetic batch of
   ``--rows`` x ``--length`` tokens: time, tokens/s, loss and grad-norm finite, peak memory beside
   ``ragen2.cluster.memory``'s estimate of the same terms (measured / estimated printed for the
   resident state, the last update on top of it and the peak);
6. ``scorer``: the MI scorer's time and peak memory (``ragen2.learner.scoring``) for
   ``--score-rows`` x ``--score-width`` continuations, at ``--score-tokens``, unsliced and at the
   budget ``monitor.score_tokens=null`` sizes to this device, beside the estimate;
7. ``push``: ``--pushes`` consecutive ``cuda_ipc`` pushes, each after an update (the engine is
   stale before it: the probe gap and the checksums say so), with the memory of both processes
   after each, the checksums of ``ragen2.sync.checksum`` and the probe after each;
8. ``generate``: the engine's sampled tokens/s (``--gen-prompts`` x ``--gen-tokens``);
9. ``versus_hand``: "update vs hand-written loop", ragen2's update beside
   the same update written by hand in PyTorch (:class:`HandLoop`) on the same batches, at
   micro-batches of 1 and ``--micro-batch`` rows: the time ratio and the share of the dtype's
   peak FLOP/s (goal: ratio <= 1.05 at both sizes, >= 40% of the bf16 peak on Qwen2-0.5B).

``--device cpu`` runs the same sections on the CPU (gloo, fp32, the tiny default model; the push
sends numpy buckets, there being no CUDA IPC): CI runs it that way so the script cannot rot.
A failed section is recorded (its error in the summary) and the rest still run; exit status 1
if any section failed.

    python launch/gpu_check.py --out OUT              # on the GPU machine (~3-5 min on one H200)
    python launch/gpu_check.py --device cpu --quick   # the CPU rehearsal (CI)

Runnable from a checkout that is not installed (no ``PYTHONPATH`` needed: it puts the checkout on
``sys.path``, and ragen2 finds ``envs/`` and ``configs/`` there, ``ragen2/_checkout.py``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # runnable from a plain checkout, without `pip install -e .`: ragen2
    sys.path.insert(0, str(REPO))  # finds envs/ and configs/ beside it (ragen2/_checkout.py)

#: the Qwen2-0.5B body (configs/model/qwen2_0.5b_random.yaml), random weights, BPE built offline
QWEN2_05B = dict(hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                 intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                 rope_theta=1e6, tie_word_embeddings=True, seed=0)


# ------------------------------------------------------------------------ the engine process
def _engine_main(model_path: str, dtype: str, device: str, inbox: Any, outbox: Any) -> None:
    """Child process: one HF engine serving (command, args) requests until ``None``."""
    try:
        from ragen2.engines.base import SamplingParams
        from ragen2.engines.hf import HFEngine
        from ragen2.rollout.worker import greedy_continuation

        worker = SimpleNamespace(engine=HFEngine(model_path, dtype=dtype, device=device))
        outbox.put(("ready", None))
    except BaseException as e:  # noqa: BLE001  (reported to the parent, which fails the section)
        outbox.put(("error", f"{type(e).__name__}: {e}"))
        return
    while (msg := inbox.get()) is not None:
        cmd, args = msg
        try:
            if cmd == "continue":
                out = greedy_continuation(worker.engine, *args)
            elif cmd == "load_ipc":
                from ragen2.sync.cuda_ipc import load_shared_bucket

                load_shared_bucket(worker, args)
                out = None
            elif cmd == "load_numpy":
                worker.engine.load_weights(args, worker.engine.policy_version)
                out = None
            elif cmd == "finish":
                worker.engine.finish_update(args)
                out = worker.engine.policy_version
            elif cmd == "checksums":
                from ragen2.sync.checksum import engine_reports

                out = engine_reports(worker, args)
            elif cmd == "memory":
                out = _memory(device)
            elif cmd == "generate":
                prompts, n_tokens = args
                params = SamplingParams(temperature=1.0, max_new_tokens=n_tokens, stop=(), seed=0)
                _sync(device)
                t0 = time.perf_counter()
                gens = worker.engine.generate(prompts, params)
                _sync(device)
                dt = time.perf_counter() - t0
                out = {"seconds": dt, "tokens": sum(len(g.token_ids) for g in gens),
                       "peak_mem_gib": _peak_gib(device)}
            else:
                raise ValueError(f"unknown engine command {cmd!r}")
            outbox.put(("ok", out))
        except BaseException as e:  # noqa: BLE001
            outbox.put(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"))


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _peak_gib(device: str) -> float | None:
    if device != "cuda":
        return None
    import torch

    return torch.cuda.max_memory_allocated() / 2**30


def _memory(device: str) -> dict[str, float]:
    """This process's memory now, GiB: CUDA allocated / reserved, else the resident set."""
    if device == "cuda":
        import torch

        return {"allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 3),
                "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 3)}
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return {"rss_gib": round(int(line.split()[1]) / 2**20, 3)}
    return {}


class EngineProcess:
    """The parent's handle on the engine child (spawned: CUDA cannot be forked)."""

    def __init__(self, model_path: str, dtype: str, device: str, timeout: float) -> None:
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.inbox, self.outbox, self.timeout = ctx.Queue(), ctx.Queue(), timeout
        self.proc = ctx.Process(target=_engine_main,
                                args=(model_path, dtype, device, self.inbox, self.outbox),
                                daemon=True)
        self.proc.start()
        self._answer("starting the engine")

    def _answer(self, what: str) -> Any:
        status, out = self.outbox.get(timeout=self.timeout)
        if status == "error":
            raise RuntimeError(f"engine process, {what}: {out}")
        return out

    def call(self, cmd: str, args: Any) -> Any:
        self.inbox.put((cmd, args))
        return self._answer(cmd)

    def close(self) -> None:
        self.inbox.put(None)
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()


# --------------------------------------------------------------------------------- sections
def section_env(device: str) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                           "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   bf16=torch.cuda.is_bf16_supported())
    for m in ("transformers", "tokenizers", "omegaconf", "gymnasium", "ray", "hydra", "vllm",
              "flash_attn", "peft"):
        try:
            out[m] = getattr(importlib.import_module(m), "__version__", "?")
        except Exception as e:  # noqa: BLE001
            out[m] = f"missing ({type(e).__name__})"
    # which copy runs: an installed ragen2, or the checkout (envs/ as ragen2_envs: ragen2._checkout)
    for m in ("ragen2", "ragen2_envs"):
        try:
            out[f"{m}_from"] = str(Path(importlib.import_module(m).__file__).parent)
        except Exception as e:  # noqa: BLE001  (the sections that need it fail, naming it)
            out[f"{m}_from"] = f"missing ({type(e).__name__}: {e})"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch sees no CUDA device")
    return out


def build_model(args: argparse.Namespace) -> dict[str, Any]:
    """The model to check (built offline into the scratch folder) and its logits' spread."""
    if args.model_path:
        return {"path": args.model_path}
    from ragen2.models.tiny import TinyModelSpec, default_corpus, ensure_tiny_model

    spec = TinyModelSpec(**QWEN2_05B) if args.model == "qwen2_0.5b_random" else TinyModelSpec()
    built = ensure_tiny_model(spec, default_corpus, os.path.join(args.scratch, "cache"))
    return calibrate_logit_scale(str(built), os.path.join(args.scratch, f"{built.name}-scaled"),
                                 args.logit_std)


def calibrate_logit_scale(src: str, dst: str, target_std: float) -> dict[str, Any]:
    """Copy the model at ``src`` to ``dst`` with its final norm scaled so that the logits' std
    over the vocabulary is ``target_std`` (fp32, on a fixed input); the logits scale linearly
    with the final norm's weight. A pretrained LM's logits spread over several nats (the bf16
    probe gap grows with it); a randomly initialised one's hardly at all."""
    import shutil

    import torch

    from ragen2.models.loading import load_causal_lm, load_tokenizer
    from ragen2.sync.probe import probe_ids

    model = load_causal_lm(src, dtype="float32").eval()
    ids = torch.tensor([probe_ids(len(load_tokenizer(src)), 64)])

    def spread() -> dict[str, float]:
        with torch.no_grad():
            z = model(input_ids=ids).logits[0].float()
        lp = torch.log_softmax(z, -1)
        return {"logit_std": float(z.std(-1).mean()),
                "entropy_nats": float(-(lp.exp() * lp).sum(-1).mean()),
                "top1_prob": float(lp.max(-1).values.exp().mean())}

    before = spread()
    with torch.no_grad():
        model.model.norm.weight.mul_(target_std / before["logit_std"])
    after = spread()
    if not os.path.exists(os.path.join(dst, "config.json")):
        tmp = f"{dst}.tmp-{os.getpid()}"
        model.save_pretrained(tmp)
        for f in os.listdir(src):  # tokenizer and generation config
            if not f.endswith((".safetensors", ".bin", ".json")) or "token" in f or "generation" in f:
                if os.path.isfile(os.path.join(src, f)) and not os.path.exists(os.path.join(tmp, f)):
                    shutil.copy(os.path.join(src, f), tmp)
        os.replace(tmp, dst)
    return {"path": dst, "source": src, "before": before, "after": after}


def learner_config(args: argparse.Namespace) -> Any:
    """The learner's config as the recipe of a bf16 GPU run sets it (no Hydra: the dataclass)."""
    from ragen2.config import Config

    cfg = Config()
    cuda = args.device == "cuda"
    cfg.cluster.device, cfg.cluster.backend = ("cuda", "nccl") if cuda else ("cpu", "gloo")
    cfg.cluster.learner_world_size = 1
    cfg.model.dtype = args.dtype
    # large enough that the engine is measurably stale after --steps updates (the push section)
    cfg.algorithm.lr, cfg.algorithm.lr_warmup_steps = 1e-4, 0
    cfg.algorithm.kl_coef = 1e-3  # a reference model too, as the paper presets train
    cfg.algorithm.micro_batch_size = args.micro_batch
    cfg.engine.temperature = 1.0
    return cfg


def synthetic_batch(rows: int, length: int, vocab: int, version: int, seed: int) -> dict[str, Any]:
    """A GRPO batch of ``rows`` x ``length`` tokens (groups of 4, mixed rewards, 60% trained)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, (rows, length))
    attn = np.ones((rows, length), np.int64)
    mask = (rng.random((rows, length)) < 0.6).astype(np.int64)
    mask[:, 0] = 0
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": mask,
            "logprobs": np.zeros((rows, length), np.float32),
            "token_rewards": np.zeros((rows, length), np.float32),
            "rewards": rng.integers(0, 2, rows).astype(np.float32),
            "group_ids": np.arange(rows) // 4, "policy_version": np.full(rows, version, np.int64)}


def probe_gap(learner: Any, engine: EngineProcess, ids: list[int]) -> dict[str, float]:
    """The post-sync probe of a run (ragen2.sync.probe), between these two processes."""
    from ragen2.sync.probe import compare, learner_logprobs_at, queries_of

    cont = engine.call("continue", (ids, 4, 5))
    full, queries = queries_of(ids, cont)
    mean, worst = compare(learner_logprobs_at(learner, full, queries),
                          [list(d.values()) for d in cont[1]])
    return {"mean": mean, "max": worst}


def section_precision(learner: Any, engine: EngineProcess, ids: list[int],
                      model_path: str, device: str) -> dict[str, Any]:
    """Probe gap bf16 engine vs bf16 learner (same weights), and bf16 vs fp32 learner logprobs."""
    import torch

    from ragen2.config import Config
    from ragen2.models.loading import load_causal_lm
    from ragen2.sync.base import WeightSyncError
    from ragen2.sync.probe import ProbePolicy

    gap = probe_gap(learner, engine, ids)
    sync = Config().sync
    policy = ProbePolicy(sync.tolerance(learner.cfg.model.dtype), sync.probe_floor_multiple)
    out: dict[str, Any] = {"probe_gap": gap}
    try:  # the defaults' verdict on this floor (a refusal is a finding: the number stays)
        policy.check([(gap["mean"], gap["max"])], version=0)
        out.update(probe_floor=policy.floor, probe_threshold=policy.threshold())
    except WeightSyncError as e:
        out["probe_floor_refused"] = str(e)
    ref = load_causal_lm(model_path, dtype="float32").to(device).eval()
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        lp32 = torch.log_softmax(ref(input_ids=x).logits[0, :-1].float(), -1)
        lp32 = lp32.gather(-1, x[0, 1:, None])[:, 0].cpu()
    del ref
    lp = torch.tensor(learner.logprobs(ids))
    d = (lp - lp32).abs()
    out["learner_vs_fp32"] = {"mean": float(d.mean()), "max": float(d.max())}
    return out


def section_update(learner: Any, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    """``--steps`` updates: time, tokens/s, loss and grad norm; on CUDA the peak, what stays
    resident between updates (weights, Adam, reference) and what the last update added on top,
    each beside ``ragen2.cluster.memory``'s estimate of the same terms."""
    import math

    import torch

    cuda = args.device == "cuda"
    times, metrics, resident, above, peak = [], [], 0, 0, 0
    for step in range(1, args.steps + 1):
        batch = synthetic_batch(args.rows, args.length, vocab, learner.get_version(), step)
        _sync(args.device)
        if cuda:  # each update's own peak above what it started from
            torch.cuda.reset_peak_memory_stats()
            resident = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        m = learner.update(batch, step=step)
        _sync(args.device)
        times.append(time.perf_counter() - t0)
        metrics.append(m)
        if cuda:
            above = torch.cuda.max_memory_allocated() - resident
            peak = max(peak, resident + above)
    finite = all(math.isfinite(m["actor/loss"]) and math.isfinite(m["actor/grad_norm"])
                 for m in metrics)
    if not finite:
        raise RuntimeError(f"non-finite loss or grad norm: {metrics}")
    med = statistics.median(times[1:] if len(times) > 1 else times)  # the first one warms up
    est = update_estimate(learner, args)
    out = {"steps": args.steps, "update_s": times, "update_s_median": med,
           "tokens_per_s": args.rows * args.length / med,
           "loss": [m["actor/loss"] for m in metrics],
           "grad_norm": [m["actor/grad_norm"] for m in metrics],
           "peak_mem_gib": peak / 2**30 if cuda else None, "estimate_gib": est["terms"]}
    if cuda:  # measured / estimated, per part the measurement separates
        gib = 2**30
        out["measured_vs_estimate_gib"] = {
            "resident (weights, Adam, reference)": [round(resident / gib, 3), est["resident"]],
            "update above resident (gradients, gathered weights, activations, logits)":
                [round(above / gib, 3), est["update"]],
            "peak": [round(out["peak_mem_gib"], 3), est["peak"]]}
        for k, (m_, e_) in out["measured_vs_estimate_gib"].items():
            print(f"   {k}: measured {m_:.2f} GiB, estimated {e_:.2f} GiB ({m_ / e_:.2f}x)",
                  flush=True)
    return out


#: dense bf16/fp16 tensor-core peaks, FLOP/s, by a substring of the device name (``--peak-tflops``
#: for another device)
BF16_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12,
              "L4": 121e12}


class HandLoop:
    """The update as one would write it by hand, in PyTorch and transformers only: fp32 weights
    under bf16 autocast (ragen2's learner: fp32 master weights, bf16 compute), the reference's
    logprobs without grad, logits from the first trained column on, log-softmax + gather, GRPO's
    group-normalised advantages, the clipped loss (clip-higher, dual clip) plus the k3 KL,
    token-mean over the batch, backward per micro-batch, gradient clipping, one AdamW step."""

    def __init__(self, path: str, learner: Any) -> None:
        import torch

        from ragen2.models.loading import load_causal_lm

        self.a, self.device = learner.cfg.algorithm, learner.device
        self.dtype = getattr(torch, learner.cfg.model.dtype)
        self.model = load_causal_lm(path, dtype="float32").to(self.device).train()
        self.ref = (load_causal_lm(path, dtype=learner.cfg.model.dtype).to(self.device).eval()
                    if learner.state.ref is not None else None)
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=self.a.lr,
                                       weight_decay=self.a.weight_decay, foreach=True)

    def logprobs(self, model: Any, ids: Any, attn: Any, first: int) -> Any:
        import torch

        keep = ids.shape[1] - first + 1
        with torch.autocast(self.device.type, self.dtype, enabled=self.dtype != torch.float32):
            logits = model(input_ids=ids, attention_mask=attn, use_cache=False,
                           logits_to_keep=keep).logits[:, :-1]
        return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, first:, None]).squeeze(-1)

    def update(self, batch: dict[str, Any], micro: int) -> None:
        import numpy as np
        import torch

        a, dev = self.a, self.device
        r, g = batch["rewards"].astype(np.float64), batch["group_ids"]
        mean = {k: r[g == k].mean() for k in set(g.tolist())}
        std = {k: r[g == k].std(ddof=1) for k in mean}
        adv = np.array([(r[i] - mean[k]) / (std[k] + 1e-6) for i, k in enumerate(g)], np.float32)
        n_tok = float(batch["loss_mask"].sum())
        for i in range(0, len(r), micro):
            rows = slice(i, i + micro)
            mask_np = batch["loss_mask"][rows]
            first = 1 + int(np.flatnonzero(mask_np[:, 1:].any(0))[0])
            ids, attn, mask = (torch.from_numpy(batch[k][rows]).to(dev, non_blocking=True)
                               for k in ("input_ids", "attention_mask", "loss_mask"))
            m = mask[:, first:].float()
            A = torch.from_numpy(adv[rows]).to(dev)[:, None] * m
            lp = self.logprobs(self.model, ids, attn, first)
            ratio = torch.exp(lp - lp.detach())  # one mini-batch: pi_old is this forward
            loss = torch.maximum(-A * ratio, -A * ratio.clamp(1 - a.clip_ratio_low,
                                                              1 + a.clip_ratio_high))
            if a.dual_clip_c is not None:
                loss = torch.where(A < 0, torch.minimum(loss, -A * a.dual_clip_c), loss)
            total = (loss * m).sum() / n_tok
            if self.ref is not None:
                with torch.no_grad():
                    ref = self.logprobs(self.ref, ids, attn, first)
                log_ratio = (ref - lp).clamp(-20, 20)
                total = total + a.kl_coef * ((log_ratio.exp() - log_ratio - 1) * m).sum() / n_tok
            total.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.grad_clip)
        self.optim.step()
        self.optim.zero_grad(set_to_none=True)


def section_versus_hand(learner: Any, path: str, args: argparse.Namespace,
                        vocab: int) -> dict[str, Any]:
    """"update vs hand-written loop": on the same batches, ragen2's update beside
    :class:`HandLoop` at micro-batches of 1 row and of ``--micro-batch`` rows (one warm-up of
    each, then ``--steps`` alternating rounds): median seconds, the ratio ragen2 / hand, and the
    achieved model FLOP/s (6 x parameters x trained tokens per second) as a share of the
    dtype's peak (``BF16_PEAKS`` or ``--peak-tflops``; none on the CPU). Goal on a GPU: ratio
    <= 1.05 at both sizes, >= 40% of the bf16 peak on the Qwen2-0.5B shape."""
    import torch

    if learner.cfg.algorithm.ppo_mini_batches != 1 or learner.cfg.algorithm.ppo_epochs != 1:
        raise ValueError("the hand-written loop is one mini-batch, one epoch")
    hand = HandLoop(path, learner)
    params = sum(p.numel() for p in hand.model.parameters())
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if peak is None and args.device == "cuda" and args.dtype in ("bfloat16", "float16"):
        name = torch.cuda.get_device_name(0)
        peak = next((v for k, v in BF16_PEAKS.items() if k in name), None)
    tokens = args.rows * args.length
    keep = learner.cfg.algorithm.micro_batch_size
    out: dict[str, Any] = {"params_m": round(params / 1e6, 1), "tokens": tokens,
                           "peak_tflops": peak / 1e12 if peak else None}

    def timed(fn: Callable[[], Any]) -> float:
        _sync(args.device)
        t0 = time.perf_counter()
        fn()
        _sync(args.device)
        return time.perf_counter() - t0

    try:
        for micro in sorted({1, args.micro_batch}):
            learner.cfg.algorithm.micro_batch_size = micro
            ours, theirs = [], []
            for i in range(args.steps + 1):  # round 0 warms up
                batch = synthetic_batch(args.rows, args.length, vocab, learner.get_version(),
                                        1000 + i)
                t_ours = timed(lambda: learner.update(batch, step=1000 + i))
                t_hand = timed(lambda: hand.update(batch, micro))
                if i:
                    ours.append(t_ours)
                    theirs.append(t_hand)
            s_ours, s_hand = statistics.median(ours), statistics.median(theirs)
            flops = 6 * params * tokens
            out[f"micro_batch_{micro}"] = {
                "ragen2_s": round(s_ours, 4), "hand_s": round(s_hand, 4),
                "ratio": round(s_ours / s_hand, 3),
                "ragen2_tflops": float(f"{flops / s_ours / 1e12:.4g}"),
                "hand_tflops": float(f"{flops / s_hand / 1e12:.4g}"),
                "ragen2_peak_share": round(flops / s_ours / peak, 3) if peak else None,
                "hand_peak_share": round(flops / s_hand / peak, 3) if peak else None}
            print(f"   micro-batch {micro}: ragen2 {s_ours:.3f} s, hand {s_hand:.3f} s, ratio "
                  f"{s_ours / s_hand:.3f}" + (f", {flops / s_ours / peak:.1%} of the peak"
                                              if peak else ""), flush=True)
    finally:
        learner.cfg.algorithm.micro_batch_size = keep
        del hand
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return out


def update_estimate(learner: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``ragen2.cluster.memory``'s terms for this update, GiB: the preflight's own estimate for
    these rows, micro-batches and dtype, on the model's config.json (the CUDA/NCCL overhead
    aside: ``torch.cuda.max_memory_allocated`` does not see the context or the allocator's
    fragmentation)."""
    from dataclasses import replace

    from ragen2.cluster.memory import estimate_memory
    from ragen2.cluster.shapes import shape_from_config_json

    cfg = learner.cfg
    cfg = replace(cfg, cluster=replace(cfg.cluster, device="cuda"),
                  rollout=replace(cfg.rollout, max_context_tokens=args.length))
    shape = shape_from_config_json(learner.model.config.to_dict())
    b = estimate_memory(cfg, 80 * 2**30, shape)
    resident = {k: v for k, v in b.learner_terms.items() if k != "CUDA/NCCL overhead"}
    gib = lambda x: round(x / 2**30, 3)  # noqa: E731
    return {"terms": {k: gib(v) for k, v in {**resident, **b.update_terms}.items()},
            "resident": gib(sum(resident.values())), "update": gib(sum(b.update_terms.values())),
            "peak": gib(sum(resident.values()) + sum(b.update_terms.values()))}


def section_nccl_group(args: argparse.Namespace) -> dict[str, Any]:
    """The ``nccl`` strategy's group constructor and a broadcast with a timed wait, one rank."""
    import torch

    from ragen2.sync.base import sync_state
    from ragen2.sync.nccl import _broadcast, join_group

    holder = SimpleNamespace()
    backend = "nccl" if args.device == "cuda" else "gloo"
    t0 = time.perf_counter()
    # port 0: a group of one binds its store on a port the OS assigns (ragen2.cluster.rendezvous)
    join_group(holder, "127.0.0.1", 0, 1, 0, backend, 60.0, "rank 0 = this process")
    flat = torch.arange(1024, dtype=torch.float32, device=args.device)
    _broadcast(holder, flat, "the check's broadcast")
    if args.device == "cuda":
        torch.cuda.synchronize()
    ok = bool((flat.cpu() == torch.arange(1024, dtype=torch.float32)).all())
    if not ok:
        raise RuntimeError("a one-rank broadcast changed the tensor")
    return {"backend": backend, "group": type(sync_state(holder)["nccl"].group).__name__,
            "seconds": round(time.perf_counter() - t0, 3),
            "nccl_version": str(torch.cuda.nccl.version()) if args.device == "cuda" else None}


def section_scorer(learner: Any, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    """Time and peak memory of the MI scorer on the learner's model, sliced at
    ``--score-tokens``, unsliced, and at the budget ``monitor.score_tokens=null`` picks on this
    device (``ragen2.learner.probes.score_budget``), each beside the estimate of its largest
    slice (``ragen2.cluster.memory.scorer_slice_bytes``)."""
    import numpy as np
    import torch

    from ragen2.cluster.memory import scorer_slice_bytes
    from ragen2.cluster.shapes import shape_from_config_json
    from ragen2.learner.probes import score_budget
    from ragen2.learner.scoring import score_continuations

    rng = np.random.default_rng(3)
    context = 256
    ctx = rng.integers(3, vocab, context).tolist()
    conts = [rng.integers(3, vocab, args.score_width).tolist() for _ in range(args.score_rows)]
    shape = shape_from_config_json(learner.model.config.to_dict())
    b = {"float32": 4}.get(args.dtype, 2)
    auto = score_budget(learner, context, args.score_width, args.score_rows)
    out: dict[str, Any] = {"rows": args.score_rows, "width": args.score_width,
                           "auto_budget": auto}
    rows_of = lambda budget: args.score_rows if not budget else max(  # noqa: E731
        1, min(args.score_rows, budget // args.score_width))
    for budget in (args.score_tokens, 0, auto):
        key = f"score_tokens_{budget}" if budget else "unsliced"
        same = next((k for k, v in out.items() if isinstance(v, dict)
                     and v["rows_per_slice"] == rows_of(budget)), None)
        if same is not None:  # the same slices as a run above: not run twice
            out.setdefault(key, {**out[same], "same_as": same})
            continue
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        with torch.no_grad():
            score_continuations(learner.model, ctx, conts, temperature=learner.temperature,
                                device=learner.device, token_budget=budget)
        _sync(args.device)
        rows = rows_of(budget)
        est = scorer_slice_bytes(shape, b, rows * args.score_width, rows, context)
        out[key] = {"seconds": round(time.perf_counter() - t0, 3), "rows_per_slice": rows,
                    "estimate_gib": round(est / 2**30, 3),
                    "peak_gib": round((torch.cuda.max_memory_allocated() - base) / 2**30, 3)
                    if args.device == "cuda" else None}
    return out


def section_push(learner: Any, engine: EngineProcess, ids: list[int], args: argparse.Namespace,
                 vocab: int) -> dict[str, Any]:
    """``--pushes`` times: one update (the engine is now stale: probe gap and checksums say so),
    the push, the checksums and the probe; the memory of both processes after each push."""
    from ragen2.sync.checksum import checksum_names, learner_mismatches

    names = checksum_names(learner.export_names())
    pushes = []
    for i in range(args.pushes):
        learner.update(synthetic_batch(args.rows, args.length, vocab, learner.get_version(),
                                       100 + i), step=100 + i)
        stale = learner_mismatches(learner, [engine.call("checksums", names)])
        before = probe_gap(learner, engine, ids)
        t0 = time.perf_counter()
        n = push_once(learner, engine, args)
        version = engine.call("finish", learner.get_version())
        seconds = time.perf_counter() - t0
        bad = learner_mismatches(learner, [engine.call("checksums", names)])
        if bad:
            raise RuntimeError(f"push {i}: checksums differ after the push: {bad[:3]}")
        pushes.append({"buckets": n, "seconds": round(seconds, 3), "engine_version": version,
                       "stale_tensors_before": len(stale), "checked_tensors": len(names),
                       "probe_gap_before": before, "probe_gap_after": probe_gap(learner, engine, ids),
                       "learner_memory": _memory(args.device),
                       "engine_memory": engine.call("memory", None)})
    return {"pushes": pushes, "peak_mem_gib": _peak_gib(args.device)}


def push_once(learner: Any, engine: EngineProcess, args: argparse.Namespace) -> int:
    """One push of the learner's weights into the engine; the number of buckets."""
    from ragen2.sync.base import iter_buckets

    bucket_bytes = int(args.bucket_mb * 2**20)
    n = 0
    if args.device == "cuda":  # the cuda_ipc strategy's two halves, as CudaIpcSync.push runs them
        from ragen2.sync.cuda_ipc import share_next_bucket

        while (share := share_next_bucket(learner, bucket_bytes, args.dtype, n == 0)) is not None:
            engine.call("load_ipc", {share[0]: share})
            n += 1
        return n
    weights: dict[str, Any] = {}  # no CUDA IPC on the CPU: numpy buckets, as object_store sends
    for bucket in iter_buckets(learner.named_weights("cpu"), bucket_bytes):
        weights.update({k: t.float().numpy() for k, t in bucket})
        n += 1
    engine.call("load_numpy", weights)  # the HF engine checks that every weight arrived
    return n


def section_generate(engine: EngineProcess, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(7)
    prompts = [rng.integers(3, vocab, 64).tolist() for _ in range(args.gen_prompts)]
    out = engine.call("generate", (prompts, args.gen_tokens))
    out["tokens_per_s"] = out["tokens"] / out["seconds"]
    return out


# -------------------------------------------------------------------------------------- main
#: --quick's sizes (the CPU rehearsal)
QUICK = dict(steps=2, rows=8, length=64, micro_batch=4, probe_tokens=160, gen_prompts=4,
             gen_tokens=16, bucket_mb=1.0, pushes=3, score_rows=8, score_width=32, score_tokens=64)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu_check_out"))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--model", choices=("qwen2_0.5b_random", "tiny"), default=None,
                    help="built offline (default: qwen2_0.5b_random on cuda, tiny on cpu)")
    ap.add_argument("--model-path", default=None, help="a local HF directory instead (e.g. SmolLM2)")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--scratch", default=os.path.join(tempfile.gettempdir(), "ragen2_gpu_check"),
                    help="models and every other scratch file (never under --out)")
    ap.add_argument("--logit-std", type=float, default=3.0,
                    help="the built model's logits' std over the vocabulary (a pretrained LM's)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--probe-tokens", type=int, default=320)
    ap.add_argument("--bucket-mb", type=float, default=256.0)
    ap.add_argument("--pushes", type=int, default=5, help="consecutive update + push rounds")
    ap.add_argument("--score-rows", type=int, default=64)
    ap.add_argument("--score-width", type=int, default=400)
    ap.add_argument("--score-tokens", type=int, default=2048, help="monitor.score_tokens")
    ap.add_argument("--gen-prompts", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=256)
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="the dtype's peak TFLOP/s for versus_hand (default: BF16_PEAKS by name)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per engine request, seconds")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes (the CPU rehearsal); options given explicitly still win")
    if ap.parse_known_args(argv)[0].quick:
        ap.set_defaults(**QUICK)
    a = ap.parse_args(argv)
    a.model = a.model or ("qwen2_0.5b_random" if a.device == "cuda" else "tiny")
    a.dtype = a.dtype or ("bfloat16" if a.device == "cuda" else "float32")
    if a.device == "cpu" and a.dtype != "float32":
        ap.error("--device cpu computes in float32 (bf16 is ~10x slower on these CPUs)")
    if Path(a.scratch).resolve().is_relative_to(Path(a.out).resolve()):
        ap.error(f"--scratch {a.scratch} is inside --out {a.out}: only the summary and logs "
                 "belong there")
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    summary: dict[str, Any] = {"args": vars(args), "sections": {}}
    failed: list[str] = []

    def run(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            result = fn()
            entry = result if isinstance(result, dict) else {"value": result}
            ok = True
        except Exception as e:  # noqa: BLE001  (the summary says which section broke, and why)
            result, entry, ok = None, {"error": f"{type(e).__name__}: {e}",
                                       "traceback": traceback.format_exc(limit=6)}, False
            failed.append(name)
        entry = {**entry, "ok": ok, "wall_s": round(time.perf_counter() - t0, 2)}
        summary["sections"][name] = entry
        print(json.dumps({k: v for k, v in entry.items() if k != "traceback"}, default=str),
              flush=True)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        return result

    if run("env", lambda: section_env(args.device)) is None:
        return 1
    built = run("model", lambda: build_model(args))
    path = built["path"] if built else None
    run("nccl_group", lambda: section_nccl_group(args))
    learner = engine = None
    if path is not None:
        from ragen2.learner.rank import LearnerRank
        from ragen2.controller import learner_settings
        from ragen2.models.loading import load_tokenizer

        def start() -> dict[str, Any]:
            nonlocal learner, engine
            engine = EngineProcess(path, args.dtype, args.device, args.timeout)
            cfg = learner_config(args)
            learner = LearnerRank(cfg, path, 0, 1, threads=0, settings=learner_settings(cfg))
            learner.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
            return {"model_path": path, "params_m": round(
                sum(p.numel() for p in learner.model.parameters()) / 1e6, 1),
                "peak_mem_gib": _peak_gib(args.device)}

        run("start", start)
    if learner is not None and engine is not None:
        from ragen2.sync.probe import probe_ids

        vocab = len(load_tokenizer(path))
        ids = probe_ids(vocab, args.probe_tokens)
        run("precision", lambda: section_precision(learner, engine, ids, path, args.device))
        run("update", lambda: section_update(learner, args, vocab))
        run("scorer", lambda: section_scorer(learner, args, vocab))
        run("push", lambda: section_push(learner, engine, ids, args, vocab))
        run("generate", lambda: section_generate(engine, args, vocab))
        run("versus_hand", lambda: section_versus_hand(learner, path, args, vocab))
    if engine is not None:
        engine.close()
    if learner is not None:
        learner.shutdown()
    summary["failed"] = failed
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"gpu_check: {len(summary['sections']) - len(failed)} sections ok, failed: {failed or 'none'}"
          f" -> {out_dir / 'summary.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
