"""The per-phase account of the default job (issue 44, item 1): where one RL step and the whole
job spend their time, each phase beside its arithmetic floor on this machine.

One process, in this order:

1. **The machine's ceilings**, measured here before the job: the matmul peak (``torch.mm`` of
   square matrices of the model's sizes: hidden, MLP and vocabulary width; median of repeats,
   GFLOP/s) in fp32, and in bf16 where the CPU has ``avx512_bf16`` / ``amx_bf16``, at the torch
   thread counts the job's processes get (a learner rank: ``cluster.torch_threads`` or cores /
   ``cluster.learner_world_size``; a rollout worker: cores / ``rollout.num_workers``), and the
   memory bandwidth (a large tensor copy: bytes read + written per second). ``--quick``: fewer
   sizes and repeats, a smaller copy.
2. **The job**: ``ragen2-train`` with ``--set`` overrides (e.g. ``trainer.total_steps=10``) in a
   fresh cache directory (tiny model, warm start, vLLM and inductor caches empty, as
   ``benchmarks/robustness.py`` runs it; ``--cache DIR`` reuses one), timed as a process, with the
   CPU time other processes took meanwhile (``foreign_cores``); or ``--run DIR`` reads a finished
   run directory instead (its ``.hydra/overrides.yaml`` gives the config).
3. **The account**, from the run's ``metrics.jsonl``: every ``timing/*`` key the loop logs, the
   median over steps 2..N (steps 0 and 1 left out: the warm start, compilation, first syncs),
   each phase's share of the step, and the whole job (warm start, evaluations, steps, panels,
   what no key times). Beside each phase its floor: FLOPs / the measured matmul peak of the dtype
   in use at the phase's thread count, and bytes / the measured bandwidth, the larger of the two
   (``bound`` says which); ``over_floor`` = measured / floor.
4. ``--profile-update`` (optional): one update of ``LearnerRank`` profiled outside Ray, in
   ``cluster.learner_world_size`` spawned processes over gloo (as ``learner_overhead.py`` builds
   them) on a synthetic batch shaped like the run's (rows, tokens per row, turns, reply length,
   first-prompt length shared within each group): unprofiled repeats time its sub-phases
   (no-grad forwards, forwards, backwards, the optimiser step with clipping, the shared-prefix
   plan, the rest), then ``torch.profiler`` attributes one update's time to aten matmuls, other
   aten ops, collectives (gloo ops and FSDP2's all-gather / reduce-scatter ranges, waits
   included), the optimiser, the autograd engine and Python / framework code.

FLOPs counted (``ModelShape``, ``forward_flops``): a forward is 2 x the matmul weights of the
blocks x tokens + 2 x the LM head x the tokens whose logits are needed + attention
(2 x layers x heads x head_dim x sum of L^2, causal). What ragen2 runs per update
(``ragen2/learner/ppo.py``): the old-logprob forward of every mini-batch but the first
((M-1)/M of the rows; all of them with LoRA dropout), the reference forward when
``algorithm.kl_coef`` > 0, ``ppo_epochs`` x (forward + backward = 3 forwards), the critic's
forward and epochs when the estimator needs one, AdamW. Generation: one forward over every
token (prefix caching: each token once) with logits at the generated ones; its bytes are the
weights read per decode step and the KV cache each generated token reads. Tokens come from the
run's ``rollout/sequence_tokens_mean``, ``rollout/num_turns_mean``,
``rollout/response_tokens_mean`` and ``filter/kept_ratio`` (``eval/*`` for evaluations); the
shared-prefix saving is not subtracted (the floor counts the dense forward), and Sigma L^2 is
taken as rows x mean^2 (a lower bound).

Usage::

    python benchmarks/step_account.py --set trainer.total_steps=10 --profile-update  # ~10 min
    python benchmarks/step_account.py --profile-update       # the default job: ~20 min on 2 cores
    python benchmarks/step_account.py --run outputs/2026-12-04/20-54-45   # read a finished run
    python benchmarks/step_account.py --quick --run DIR      # quick microbenchmarks

Writes ``benchmarks/results/step_account[.quick].json`` (``common.py``'s layout; ``--name``
changes the file name) and prints the table. Run nothing else meanwhile: the job's time is the measurement.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402  (benchmarks/common.py)

DEFAULT_RUN_ROOT = common.ROOT / "outputs" / "step_account"
FROM_STEP = 2  # steps 0 and 1 are not typical: warm start, first compilation, first syncs

#: every timing key the training loop logs today (ragen2/controller/, ragen2/evaluate.py):
#: key -> (phase name, where it runs). "step": inside ``timing/step_s``; "loop": in the RL loop
#: outside ``timing/step_s``; "before_rl": step 0 only.
TIMING_KEYS: dict[str, tuple[str, str]] = {
    "timing/step_s": ("step", "step"),
    "timing/rollout_s": ("generation (rollout)", "step"),
    "timing/generate_s": ("engine generate", "step"),
    "timing/env_s": ("env steps", "step"),
    "timing/monitor_s": ("MI monitor", "step"),
    "timing/update_s": ("update", "step"),
    "timing/sync_s": ("weight sync", "step"),
    "timing/probe_s": ("sync probe", "step"),
    "timing/rollout_wait_s": ("wait for batches generated ahead", "step"),
    "timing/overlap_s": ("generation overlapped with the update", "step"),
    "timing/panel_s": ("probe panel", "loop"),
    "timing/panel_turns_s": ("later-turn probe panel", "loop"),
    "timing/eval_s": ("evaluation", "loop"),
    "timing/warm_start_s": ("warm start", "before_rl"),
}
#: what happens in a step or the loop without a timing key of its own
UNTIMED = {
    "scoring/filtering (untimed)": "rollout metrics, grounding, the filter's selection, the "
                                   "rollout archive, collate, ray.put of the batch, the sync's "
                                   "checksums: timing/step_s less every timed part",
    "runner overhead (untimed)": "timing/rollout_s less the engine's generate and the env steps: "
                                 "rendering, tokenising, Ray hops",
    "checkpoint (untimed)": "written after the step's row is logged (trainer.save_every): inside "
                            "the job's untimed remainder",
}


# ------------------------------------------------------------------- the machine's ceilings
def has_bf16() -> bool:
    """Whether the CPU computes bf16 products in hardware (``ragen2.cluster.host.cpu_bf16``)."""
    from ragen2.cluster.host import cpu_bf16

    return cpu_bf16()


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def matmul_gflops(n: int, dtype: str = "float32", threads: int = 1, repeats: int = 5,
                  min_flop: float = 2e9) -> float:
    """GFLOP/s of ``n x n @ n x n`` (2 n^3 FLOP) at ``threads`` torch threads: the median of
    ``repeats`` timings, each of enough products to make ``min_flop``."""
    import torch

    with torch_threads(threads):
        dt = getattr(torch, dtype)
        x, y = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
        out = torch.empty(n, n, dtype=dt)
        k = max(1, round(min_flop / (2 * n ** 3)))
        for _ in range(2):  # warm-up
            torch.mm(x, y, out=out)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(k):
                torch.mm(x, y, out=out)
            times.append(time.perf_counter() - t0)
    return 2 * n ** 3 * k / statistics.median(times) / 1e9


def copy_bandwidth(mbytes: int = 256, threads: int = 1, repeats: int = 5) -> dict[str, float]:
    """A ``mbytes`` MiB tensor copied into another at ``threads`` threads, the median of
    ``repeats``: ``copy_bytes_per_s`` (bytes copied a second) and ``traffic_bytes_per_s`` (read
    + written: twice that, what a phase's memory traffic is divided by)."""
    import torch

    with torch_threads(threads):
        src = torch.ones(mbytes * 2 ** 20 // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        dst.copy_(src)  # warm-up: pages touched
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    per_s = src.numel() * 4 / statistics.median(times)
    return {"copy_bytes_per_s": per_s, "traffic_bytes_per_s": 2 * per_s, "mbytes": mbytes}


def measure_ceilings(sizes: Sequence[int], threads: Sequence[int], quick: bool) -> dict[str, Any]:
    """The matmul peaks (per dtype, per thread count: each size's GFLOP/s and the best) and the
    copy bandwidth per thread count."""
    dtypes = ["float32"] + (["bfloat16"] if has_bf16() else [])
    repeats = 3 if quick else 7
    min_flop = 5e8 if quick else 2e9
    peaks: dict[str, dict[str, Any]] = {}
    for dtype in dtypes:
        for t in sorted(set(threads)):
            per = {str(n): matmul_gflops(n, dtype, t, repeats, min_flop) for n in sizes}
            peaks.setdefault(dtype, {})[str(t)] = {"sizes": per, "gflops": max(per.values())}
            print(f"  matmul {dtype} {t} thread(s): " + ", ".join(
                f"{n}^2 {g:.1f}" for n, g in per.items()) + " GFLOP/s", flush=True)
    bandwidth = {}
    for t in sorted(set(threads)):
        bandwidth[str(t)] = copy_bandwidth(64 if quick else 256, t, repeats)
        print(f"  copy {t} thread(s): {bandwidth[str(t)]['copy_bytes_per_s'] / 1e9:.1f} GB/s "
              "copied", flush=True)
    return {"matmul": peaks, "bandwidth": bandwidth, "sizes": list(sizes),
            "bf16_in_hardware": "bfloat16" in dtypes}


# ------------------------------------------------------------------------ model and FLOPs
@dataclass(frozen=True)
class ModelShape:
    """A Llama/Qwen2-style decoder's shape, from its Hugging Face config."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool

    @classmethod
    def from_hf(cls, c: Mapping[str, Any]) -> ModelShape:
        heads = int(c["num_attention_heads"])
        hidden = int(c["hidden_size"])
        return cls(hidden=hidden, layers=int(c["num_hidden_layers"]), heads=heads,
                   kv_heads=int(c.get("num_key_value_heads") or heads),
                   head_dim=int(c.get("head_dim") or hidden // heads),
                   intermediate=int(c["intermediate_size"]), vocab=int(c["vocab_size"]),
                   tied=bool(c.get("tie_word_embeddings", False)),
                   qkv_bias=bool(c.get("attention_bias", c.get("model_type") == "qwen2")))

    @property
    def _layer_weights(self) -> int:
        h, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return h * q + 2 * h * kv + q * h + 3 * h * self.intermediate

    @property
    def body_matmul_params(self) -> int:
        """The blocks' matmul weights (each multiplies every token once per forward)."""
        return self.layers * self._layer_weights

    @property
    def head_params(self) -> int:
        """The LM head (the embedding when tied): multiplies only the tokens whose logits are
        needed."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Every parameter, tied weights once (what ``sum(p.numel() for p in
        model.parameters())`` gives)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        bias = (q + 2 * kv) if self.qkv_bias else 0
        per_layer = self._layer_weights + bias + 2 * self.hidden  # + two RMSNorms
        return (self.vocab * self.hidden + self.layers * per_layer + self.hidden
                + (0 if self.tied else self.vocab * self.hidden))

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def forward_flops(shape: ModelShape, tokens: float, logit_tokens: float, seq_sq_sum: float,
                  causal: bool = True) -> float:
    """FLOPs of one forward over ``tokens`` tokens whose sequences' squared lengths sum to
    ``seq_sq_sum``, logits at ``logit_tokens`` of them. Attention: QK^T and AV, 2 FLOP per
    multiply-add each, over the L^2 / 2 (query, key) pairs of a causal sequence (L^2 computed
    in full when not ``causal``, as the eager kernel does)."""
    pairs = seq_sq_sum / 2 if causal else seq_sq_sum
    attn = 4 * shape.layers * shape.heads * shape.head_dim * pairs
    return 2 * shape.body_matmul_params * tokens + 2 * shape.head_params * logit_tokens + attn


@dataclass(frozen=True)
class Tokens:
    """A batch of ``rows`` sequences of ``seq_mean`` tokens, ``trained_mean`` of them generated
    (trained) per row."""

    rows: float
    seq_mean: float
    trained_mean: float

    @property
    def total(self) -> float:
        return self.rows * self.seq_mean

    @property
    def trained(self) -> float:
        return self.rows * self.trained_mean

    @property
    def seq_sq_sum(self) -> float:  # rows x mean^2 <= the true sum of L^2 (a floor)
        return self.rows * self.seq_mean ** 2


def update_work(shape: ModelShape, tok: Tokens, s: Mapping[str, Any]) -> dict[str, float]:
    """FLOPs and bytes of one ragen2 update (``ragen2/learner/ppo.py``) on ``tok``; ``s`` is
    :func:`job_settings`. Bytes: AdamW's state traffic, the logits written and read, FSDP's
    gathers of the fp32 weights (activations not counted)."""
    fwd = forward_flops(shape, tok.total, tok.trained, tok.seq_sq_sum)
    m, e = s["ppo_mini_batches"], s["ppo_epochs"]
    old_frac = 1.0 if s.get("lora_dropout") else (m - 1) / m
    lora = s.get("lora_rank", 0) > 0
    out = {"old_logprob_flops": old_frac * fwd,
           "ref_flops": fwd if s["kl_coef"] > 0 else 0.0,
           # LoRA: the frozen weights need the activations' gradient only (adapters not counted)
           "train_flops": e * (2 if lora else 3) * fwd, "critic_flops": 0.0}
    if s.get("critic"):
        cfwd = forward_flops(shape, tok.total, 0, tok.seq_sq_sum) + 2 * shape.hidden * tok.total
        out["critic_flops"] = cfwd + e * 3 * cfwd
    steps = m * e
    opt_params = shape.params * (2 if s.get("critic") else 1)
    out["optimizer_flops"] = 12.0 * opt_params * steps
    out["flops"] = sum(v for k, v in out.items() if k.endswith("_flops"))
    param_bytes = 4 * shape.params  # fp32 master weights
    passes_nograd = old_frac + (1 if s["kl_coef"] > 0 else 0)
    logits = tok.trained * shape.vocab * 4 * (2 * passes_nograd + 4 * e)
    world = s.get("world_size", 1)
    gathers = 0.0
    if world > 1:  # per micro-batch: a gather per no-grad forward, two + a reduce per training
        rows_rank = math.ceil(tok.rows / m / world)
        micro = m * math.ceil(rows_rank / max(1, s["micro_batch_size"]))
        gathers = 2 * param_bytes * micro * (passes_nograd + 3 * e)
    out.update(optimizer_bytes=7.0 * param_bytes * steps, logits_bytes=logits,
               collective_bytes=gathers)
    out["bytes"] = out["optimizer_bytes"] + logits + gathers
    return out


def generation_work(shape: ModelShape, tok: Tokens, decode_steps: float,
                    dtype_bytes: int) -> dict[str, float]:
    """FLOPs and bytes of generating ``tok`` (every token forwarded once, prefix caching; logits
    at the generated ones): the weights read at each of ``decode_steps`` batched decode steps
    and the KV cache each generated token reads (its context: on average half a sequence)."""
    flops = forward_flops(shape, tok.total, tok.trained, tok.seq_sq_sum)
    weights = shape.params * dtype_bytes * decode_steps
    kv = tok.trained * (tok.seq_mean / 2) * shape.kv_bytes_per_token(dtype_bytes)
    return {"flops": flops, "bytes": weights + kv, "weight_bytes": weights, "kv_bytes": kv}


def floor_seconds(flops: float | None, nbytes: float | None, flops_per_s: float | None,
                  bytes_per_s: float | None) -> dict[str, Any]:
    """The floor of a phase: the larger of FLOPs / peak and bytes / bandwidth (``bound`` says
    which); None where neither can be computed."""
    compute = flops / flops_per_s if flops and flops_per_s else None
    memory = nbytes / bytes_per_s if nbytes and bytes_per_s else None
    known = [(v, k) for v, k in ((compute, "compute"), (memory, "memory")) if v is not None]
    if not known:
        return {"compute_s": None, "memory_s": None, "floor_s": None, "bound": None}
    floor, bound = max(known)
    return {"compute_s": compute, "memory_s": memory, "floor_s": floor, "bound": bound}


# ----------------------------------------------------------------------------- the run's data
def read_metrics(path: Path) -> dict[int, dict[str, Any]]:
    """``{step: row}`` of a ``metrics.jsonl`` (rows of one step merged, torn lines skipped)."""
    rows: dict[int, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "step" in row:
            rows.setdefault(int(row["step"]), {}).update(row)
    return rows


def _num(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else None


def stats(values: Sequence[tuple[int, float]]) -> dict[str, Any] | None:
    """Median, count, total and steps of ``(step, seconds)`` pairs; None when empty."""
    if not values:
        return None
    xs = [v for _, v in values]
    return {"median_s": statistics.median(xs), "n": len(xs), "total_s": sum(xs),
            "steps": [s for s, _ in values]}


def series(rows: Mapping[int, Mapping[str, Any]], key: str, steps: Sequence[int],
           ) -> list[tuple[int, float]]:
    return [(s, v) for s in steps if (v := _num(rows.get(s, {}), key)) is not None]


def step_residual(row: Mapping[str, Any]) -> float | None:
    """The untimed part of a step: ``timing/step_s`` less the rollout, monitor, update, sync and
    probe (scoring, grounding, filtering, archive, collate, checksums)."""
    step = _num(row, "timing/step_s")
    if step is None:
        return None
    parts = ("timing/rollout_s", "timing/monitor_s", "timing/update_s", "timing/sync_s",
             "timing/probe_s")
    return step - sum(_num(row, k) or 0.0 for k in parts)


def rollout_residual(row: Mapping[str, Any]) -> float | None:
    r = _num(row, "timing/rollout_s")
    if r is None or _num(row, "timing/generate_s") is None:
        return None
    return r - (_num(row, "timing/generate_s") or 0.0) - (_num(row, "timing/env_s") or 0.0) \
        - (_num(row, "timing/rollout_wait_s") or 0.0)


def steps_used(rows: Mapping[int, Mapping[str, Any]], from_step: int = FROM_STEP) -> list[int]:
    """The RL steps the medians are over: from ``from_step`` on, those that trained (a step whose
    filter kept nothing logs no ``timing/step_s``)."""
    return [s for s in sorted(rows)
            if s >= from_step and _num(rows[s], "timing/step_s") is not None]


def aggregate(rows: Mapping[int, Mapping[str, Any]], from_step: int = FROM_STEP,
              ) -> dict[str, Any]:
    """Every phase's statistics over :func:`steps_used` (in-step phases: also their share of the
    summed step time) and the timing keys the run logged."""
    used = steps_used(rows, from_step)
    step_total = sum(v for _, v in series(rows, "timing/step_s", used))
    phases: dict[str, Any] = {}
    loop_steps = [s for s in sorted(rows) if s >= from_step]
    for key, (name, where) in TIMING_KEYS.items():
        if where == "before_rl":
            continue
        st = stats(series(rows, key, used if where == "step" else loop_steps))
        if st is None:
            continue
        st.update(key=key, name=name, where=where)
        if where == "step" and step_total:
            st["share_of_step"] = st["total_s"] / step_total
        phases[key] = st
    for key, fn, name in (("untimed/step", step_residual, "scoring/filtering (untimed)"),
                          ("untimed/rollout", rollout_residual, "runner overhead (untimed)")):
        st = stats([(s, v) for s in used if (v := fn(rows[s])) is not None])
        if st is not None:
            st.update(key=key, name=name, where="step", note=UNTIMED[name])
            if step_total:
                st["share_of_step"] = st["total_s"] / step_total
            phases[key] = st
    logged = sorted({k for r in rows.values() for k in r if k.startswith("timing/")})
    return {"steps_used": used, "phases": phases, "timing_keys_logged": logged,
            "timing_keys_unknown": [k for k in logged if k not in TIMING_KEYS]}


def batch_tokens(rows: Mapping[int, Mapping[str, Any]], steps: Sequence[int], prefix: str,
                 episodes: float, kept: bool) -> tuple[Tokens | None, float | None, str]:
    """The median batch of ``prefix``'s metrics (``rollout`` or ``eval``) over ``steps``:
    (tokens, decode steps per batch = turns x reply tokens, where the figures came from)."""
    seq, turns, reply = ([_num(rows[s], f"{prefix}/{k}") for s in steps if s in rows]
                         for k in ("sequence_tokens_mean", "num_turns_mean",
                                   "response_tokens_mean"))
    seq, turns, reply = ([x for x in xs if x is not None] for xs in (seq, turns, reply))
    if not (seq and turns and reply):
        return None, None, (f"{prefix}/sequence_tokens_mean, num_turns_mean, "
                            "response_tokens_mean not logged")
    rows_n = episodes
    if kept:
        ratios = [x for s in steps if (x := _num(rows.get(s, {}), "filter/kept_ratio")) is not None]
        errors = [x for s in steps
                  if (x := _num(rows.get(s, {}), f"{prefix}/env_errors")) is not None]
        rows_n = episodes * (statistics.median(ratios) if ratios else 1.0) \
            - (statistics.median(errors) if errors else 0.0)
    t, r = statistics.median(turns), statistics.median(reply)
    return (Tokens(rows_n, statistics.median(seq), t * r), t * r,
            f"median {prefix}/* over steps {steps[0]}..{steps[-1]}" if steps else prefix)


def estimated_tokens(s: Mapping[str, Any], episodes: float) -> Tokens:
    """A batch estimated from the config alone (no token metrics): every turn used, every reply
    ``engine.max_new_tokens`` long, observations as long as the replies (a rough upper guess)."""
    trained = s["max_turns"] * s["max_new_tokens"]
    return Tokens(episodes, 2.0 * trained, float(trained))


# ------------------------------------------------------------------------------ the account
def dtype_bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def peak_for(ceilings: Mapping[str, Any], dtype: str, threads: int, parallel: int,
             ) -> tuple[float | None, str]:
    """FLOP/s of ``parallel`` processes of ``threads`` threads each in ``dtype`` (the fp32 peak
    where ``dtype`` was not measured, said in the note)."""
    table = ceilings["matmul"].get(dtype) or ceilings["matmul"].get("float32")
    note = "" if dtype in ceilings["matmul"] else f"{dtype} peak not measured: fp32's"
    entry = table.get(str(threads)) if table else None
    if entry is None:
        return None, f"no peak measured at {threads} thread(s)"
    return entry["gflops"] * 1e9 * parallel, note


def bandwidth_for(ceilings: Mapping[str, Any], threads: int) -> float | None:
    b = ceilings["bandwidth"].get(str(threads))
    return b["traffic_bytes_per_s"] if b else None


def score_flops(shape: ModelShape, row: Mapping[str, Any], prefix: str,
                cont_tokens: float | None) -> float | None:
    """A lower bound on a cross-scoring matrix's FLOPs: ``n_samples x n_prompts`` continuations
    of ``cont_tokens`` tokens forwarded (contexts not counted)."""
    n, p = _num(row, prefix + "n_samples"), _num(row, prefix + "n_prompts")
    if n is None or p is None or not cont_tokens:
        return None
    return forward_flops(shape, n * p * cont_tokens, n * p * cont_tokens, n * p * cont_tokens ** 2)


def _median_over(rows: Mapping[int, Mapping[str, Any]], steps: Sequence[int],
                 fn: Any) -> float | None:
    xs = [v for s in steps if s in rows and (v := fn(rows[s])) is not None]
    return statistics.median(xs) if xs else None


def build_account(rows: Mapping[int, Mapping[str, Any]], s: Mapping[str, Any],
                  shape: ModelShape, ceilings: Mapping[str, Any],
                  summary: Mapping[str, Any] | None = None, process_wall_s: float | None = None,
                  from_step: int = FROM_STEP) -> dict[str, Any]:
    """The account: per phase its medians, shares, work and floor; the whole job."""
    agg = aggregate(rows, from_step)
    used, phases = agg["steps_used"], agg["phases"]
    dt, nb = s["dtype"], dtype_bytes(s["dtype"])
    cores = s["cores"]
    lt, wt = s["learner_threads"], s["worker_threads"]
    learner_peak, lnote = peak_for(ceilings, dt, lt, min(s["world_size"], max(1, cores // lt)))
    worker_peak, wnote = peak_for(ceilings, dt, wt, min(s["num_workers"], max(1, cores // wt)))
    lbw, wbw = bandwidth_for(ceilings, lt), bandwidth_for(ceilings, wt)
    notes: dict[str, list[str]] = {}

    episodes = s["env_groups"] * s["group_size"]
    gen_tok, decode, src = batch_tokens(rows, used, "rollout", episodes, kept=False)
    kept_tok, _, _ = batch_tokens(rows, used, "rollout", episodes, kept=True)
    if gen_tok is None:
        notes.setdefault("timing/rollout_s", []).append(f"{src}: estimated from the config")
        gen_tok = kept_tok = estimated_tokens(s, episodes)
        decode = gen_tok.trained_mean
    work: dict[str, dict[str, float]] = {}
    work["timing/rollout_s"] = generation_work(shape, gen_tok, decode, nb)
    work["timing/generate_s"] = work["timing/rollout_s"]
    work["timing/update_s"] = update_work(shape, kept_tok, s)
    weights = 4 * shape.params  # the sync ships fp32
    work["timing/sync_s"] = {"flops": 0.0, "bytes": 2.0 * weights}
    if s.get("probe_tokens"):
        work["timing/probe_s"] = {"flops": 2 * forward_flops(
            shape, s["probe_tokens"], s["probe_tokens"], s["probe_tokens"] ** 2), "bytes": 0.0}
    # evaluations: their own token metrics, at the steps they ran
    ev_steps = phases.get("timing/eval_s", {}).get("steps") or \
        [st for st in sorted(rows) if _num(rows[st], "timing/eval_s") is not None]
    ev_tok, ev_decode, _ = batch_tokens(rows, ev_steps, "eval", s["eval_episodes"], kept=False) \
        if ev_steps else (None, None, "")
    if ev_tok is not None:
        work["timing/eval_s"] = generation_work(shape, ev_tok, ev_decode, nb)
    reply = gen_tok.trained_mean / max(_median_over(rows, used, lambda r: _num(
        r, "rollout/num_turns_mean")) or 1.0, 1.0)
    mon_steps = phases.get("timing/monitor_s", {}).get("steps", [])
    mon = _median_over(rows, mon_steps, lambda r: sum(x for x in (
        score_flops(shape, r, "collapse/", _num(r, "collapse/reasoning_tokens_mean")),
        score_flops(shape, r, "collapse/turns/", reply)) if x is not None) or None)
    if mon:
        work["timing/monitor_s"] = {"flops": mon, "bytes": 0.0}
        notes.setdefault("timing/monitor_s", []).append(
            "floor: first-turn and later-turn score matrices' continuations only (contexts, "
            "action MI, contrast sets not counted)")
    for key, prefix in (("timing/panel_s", "collapse/panel/"),
                        ("timing/panel_turns_s", "collapse/panel/turns/")):
        st = phases.get(key, {}).get("steps", [])
        fl = _median_over(rows, st, lambda r, p=prefix: score_flops(shape, r, p, reply))
        if fl:
            n = _median_over(rows, st, lambda r, p=prefix: _num(r, p + "n_samples")) or 0.0
            gen = forward_flops(shape, n * reply, n * reply, n * reply ** 2)
            work[key] = {"flops": fl + gen, "bytes": 0.0}
            notes.setdefault(key, []).append("floor: the samples' replies generated and scored "
                                             "under every panel prompt (prompts not counted)")

    out_phases = []
    for key, st in phases.items():
        w = work.get(key)
        on_worker = key in ("timing/rollout_s", "timing/generate_s", "timing/eval_s")
        peak, bw = (worker_peak, wbw) if on_worker else (learner_peak, lbw)
        fl = floor_seconds(w["flops"], w["bytes"], peak, bw) if w else floor_seconds(
            None, None, None, None)
        entry = {**st, **fl, "flops": w["flops"] if w else None,
                 "bytes": w["bytes"] if w else None}
        entry["over_floor"] = (st["median_s"] / fl["floor_s"]) if fl["floor_s"] else None
        if key == "timing/update_s":
            entry["work"] = w
        n = notes.get(key, []) + ([st["note"]] if "note" in st else [])
        peak_note = wnote if on_worker else lnote
        if w and peak_note:
            n.append(peak_note)
        if entry["over_floor"] and entry["over_floor"] > 20 and fl["bound"]:
            n.append("overhead-bound: the arithmetic and the memory traffic are a small part")
        entry.pop("note", None)
        entry["notes"] = n
        out_phases.append(entry)
    in_step = [p for p in out_phases if p["where"] == "step" and p["key"] not in (
        "timing/step_s", "timing/generate_s", "timing/env_s", "untimed/rollout",
        "timing/overlap_s")]
    step_floor = sum(p["floor_s"] * p["n"] for p in in_step if p["floor_s"]) / max(len(used), 1)
    step = phases.get("timing/step_s")
    for p in out_phases:
        if p["key"] == "timing/step_s":
            p.update(floor_s=step_floor or None, bound="phases",  # the sum of its phases' floors
                     over_floor=step["median_s"] / step_floor if step_floor else None)
    tokens = {"generation": asdict(gen_tok), "update": asdict(kept_tok),
              "evaluation": asdict(ev_tok) if ev_tok else None, "source": src,
              "decode_steps_per_batch": decode}
    return {"steps_used": used, "phases": out_phases, "tokens": tokens,
            "timing_keys_logged": agg["timing_keys_logged"],
            "timing_keys_unknown": agg["timing_keys_unknown"],
            "not_timed": UNTIMED, "learner_subphases_logged": False,
            "peaks_used": {"learner_flops_per_s": learner_peak, "worker_flops_per_s": worker_peak,
                           "learner_traffic_bytes_per_s": lbw, "worker_traffic_bytes_per_s": wbw,
                           "dtype": dt},
            "job": job_account(rows, summary, process_wall_s, shape, s, ceilings, learner_peak)}


def job_account(rows: Mapping[int, Mapping[str, Any]], summary: Mapping[str, Any] | None,
                process_wall_s: float | None, shape: ModelShape | None = None,
                s: Mapping[str, Any] | None = None, ceilings: Mapping[str, Any] | None = None,
                learner_peak: float | None = None) -> dict[str, Any]:
    """The whole job in parts: before RL (warm start, first push, evaluation, panels), the RL
    steps, the loop's evaluations and panels, what no key times inside the run (controller
    start-up: Ray actors and vLLM engines; checkpoints; logging) and outside it (imports, the
    tiny model's build, Ray's start, shutdown)."""
    r0 = rows.get(0, {})
    rl = [s_ for s_ in sorted(rows) if s_ >= 1]

    def total(key: str, steps: Sequence[int]) -> float:
        return sum(_num(rows[s_], key) or 0.0 for s_ in steps)

    parts: dict[str, float] = {
        "warm start": _num(r0, "timing/warm_start_s") or 0.0,
        "first weight sync and probe": total("timing/sync_s", [0]) + total("timing/probe_s", [0]),
        "evaluation before RL": total("timing/eval_s", [0]),
        "probe panels before RL": total("timing/panel_s", [0]) + total("timing/panel_turns_s", [0]),
        "RL steps": total("timing/step_s", rl),
        "evaluations during RL": total("timing/eval_s", rl),
        "probe panels during RL": total("timing/panel_s", rl) + total("timing/panel_turns_s", rl),
    }
    timed = sum(parts.values())
    run_wall = _num(summary or {}, "wall_s")
    if run_wall is not None:
        parts["untimed inside the run"] = run_wall - timed
    if process_wall_s is not None and run_wall is not None:
        parts["outside the run"] = process_wall_s - run_wall
    whole = process_wall_s if process_wall_s is not None else run_wall
    out: dict[str, Any] = {"parts": parts, "process_wall_s": process_wall_s,
                           "run_wall_s": run_wall, "steps": len(rl),
                           "shares": {k: v / whole for k, v in parts.items()} if whole else None}
    if shape is not None and s is not None and ceilings is not None:
        out["warm_start_floor"] = warm_start_floor(rows, shape, s, ceilings, learner_peak)
    return out


def warm_start_floor(rows: Mapping[int, Mapping[str, Any]], shape: ModelShape,
                     s: Mapping[str, Any], ceilings: Mapping[str, Any],
                     learner_peak: float | None) -> dict[str, Any]:
    """The behaviour cloning's floor: ``epochs`` x (forward + backward) over the demonstrations.
    Their token counts are not logged: the step-0 evaluation's stand in (said in ``note``)."""
    r0 = rows.get(0, {})
    ws = s["warm_start"]
    if not ws["enabled"]:
        return {"floor_s": None, "note": "warm start off"}
    if _num(r0, "warm_start/cached") == 1.0:
        nbytes = 2.0 * 4 * shape.params
        bw = bandwidth_for(ceilings, s["learner_threads"])
        return {**floor_seconds(0, nbytes, learner_peak, bw),
                "note": "loaded from the cache: one copy of the weights"}
    tok, _, src = batch_tokens(rows, [0], "eval", ws["episodes"], kept=False)
    if tok is None:
        tok, src = estimated_tokens(s, ws["episodes"]), "estimated from the config"
    flops = ws["epochs"] * 3 * forward_flops(shape, tok.total, tok.trained, tok.seq_sq_sum)
    measured = _num(r0, "timing/warm_start_s")
    fl = floor_seconds(flops, None, learner_peak, None)
    return {**fl, "flops": flops, "over_floor": measured / fl["floor_s"] if measured and
            fl["floor_s"] else None,
            "note": "demonstration token counts are not logged: the step-0 evaluation's "
                    f"stand in ({src}); the demonstrations themselves need no model"}


# --------------------------------------------------------------------------------- settings
def job_settings(cfg: Any) -> dict[str, Any]:
    """What the account needs from a composed ``ragen2.config.Config``."""
    from ragen2.algos.objective import needs_critic

    c = cfg
    cores = c.cluster.num_cpus or os.cpu_count() or 1
    world, workers = c.cluster.learner_world_size, c.rollout.num_workers
    learner_t = c.cluster.torch_threads or max(1, cores // world)
    worker_t = c.cluster.torch_threads or max(1, cores // workers)
    if c.cluster.layout == "split" and c.cluster.device == "cpu" and not c.cluster.torch_threads:
        from ragen2.cluster.cores import split_cores, usable_cores

        learner_t, worker_t = split_cores(usable_cores()).threads(world, workers)
    a = c.algorithm
    return {"env_groups": c.rollout.env_groups, "group_size": c.rollout.group_size,
            "max_turns": c.rollout.max_turns, "max_new_tokens": c.engine.max_new_tokens,
            "ppo_epochs": a.ppo_epochs, "ppo_mini_batches": a.ppo_mini_batches,
            "micro_batch_size": a.micro_batch_size, "kl_coef": a.kl_coef,
            "critic": bool(needs_critic(a)), "lora_rank": c.learner.lora.rank,
            "lora_dropout": bool(c.learner.lora.rank and c.learner.lora.dropout > 0),
            "world_size": world, "num_workers": workers, "cores": cores,
            "learner_threads": learner_t, "worker_threads": worker_t,
            "dtype": c.model.dtype, "eval_episodes": c.trainer.eval_episodes,
            "warm_start": {"enabled": c.trainer.warm_start.enabled,
                           "episodes": c.trainer.warm_start.episodes,
                           "epochs": c.trainer.warm_start.epochs},
            "probe_tokens": c.sync.probe_tokens if c.sync.probe else 0,
            "layout": c.cluster.layout, "shared_prefix": c.learner.shared_prefix,
            "max_staleness": c.trainer.max_staleness}


def run_overrides(run_dir: Path, fallback: Sequence[str]) -> list[str]:
    """The task overrides a run was started with (``.hydra/overrides.yaml``), else ``fallback``."""
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return list(fallback)
    import yaml

    return [o for o in yaml.safe_load(path.read_text()) or [] if not o.startswith("hydra.")]


def model_shape(model_path: str) -> ModelShape:
    return ModelShape.from_hf(json.loads((Path(model_path) / "config.json").read_text()))


# ------------------------------------------------------------------------- the job itself
def run_job(overrides: Sequence[str], run_dir: Path, cache: Path) -> dict[str, Any]:
    """``ragen2-train OVERRIDES hydra.run.dir=RUN_DIR`` with every cache under ``cache``."""
    from robustness import cold_env  # benchmarks/robustness.py

    train = Path(sys.executable).with_name("ragen2-train")
    cmd = [str(train), *overrides, f"hydra.run.dir={run_dir}"]
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    print(f"running {' '.join(cmd[1:])} (log {log})", flush=True)
    res = common.run_watched(cmd, log, env=cold_env(cache), cwd=common.ROOT)
    res["command"] = ["ragen2-train", *overrides]
    res["log"] = str(log)
    if res["returncode"]:
        print(log.read_text()[-3000:], flush=True)
    return res


# -------------------------------------------------------------------- the update's profile
def synthetic_batch(rows: int, group_size: int, prompt_tokens: int, turns_mean: float,
                    reply_tokens: int, obs_tokens: int, max_turns: int, vocab: int,
                    seed: int = 0) -> dict[str, Any]:
    """A training batch shaped like a multi-turn run's: each group's rows share their first
    ``prompt_tokens`` tokens, then per turn ``reply_tokens`` trained tokens followed (but the
    last) by ``obs_tokens`` observation tokens; turns per row around ``turns_mean`` (1 ..
    ``max_turns``); rewards alternate 0 / 1 within every group."""
    import numpy as np

    rng = np.random.default_rng(seed)
    turns = np.clip(np.rint(rng.normal(turns_mean, 1.5, rows)), 1, max_turns).astype(int)
    lengths = prompt_tokens + turns * reply_tokens + (turns - 1) * obs_tokens
    width = int(lengths.max())
    ids = np.zeros((rows, width), np.int64)
    loss = np.zeros((rows, width), np.int64)
    prompts = rng.integers(3, vocab, (math.ceil(rows / group_size), prompt_tokens))
    for i in range(rows):
        ids[i, :lengths[i]] = rng.integers(3, vocab, lengths[i])
        ids[i, :prompt_tokens] = prompts[i // group_size]
        pos = prompt_tokens
        for _ in range(turns[i]):
            loss[i, pos:pos + reply_tokens] = 1
            pos += reply_tokens + obs_tokens
    attn = (np.arange(width)[None] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": attn, "loss_mask": loss * attn,
            "logprobs": np.where(loss > 0, -2.0, 0.0).astype(np.float32),
            "token_rewards": np.zeros((rows, width), np.float32),
            "rewards": (np.arange(rows) % 2).astype(np.float32),
            "group_ids": np.arange(rows) // group_size,
            "policy_version": np.zeros(rows, np.int64)}


def batch_spec(tok: Tokens, turns: float, group_size: int, max_turns: int,
               prompt_tokens: float | None) -> dict[str, Any]:
    """:func:`synthetic_batch`'s shape from a run's median batch; the first prompt's length,
    when not measured, as long as one turn's observation."""
    reply = max(1, round(tok.trained_mean / max(turns, 1.0)))
    rest = tok.seq_mean - turns * reply  # prompt + observations
    if prompt_tokens is None:
        prompt_tokens = rest / max(turns, 1.0)
    obs = max(0.0, (rest - prompt_tokens) / max(turns - 1, 1.0))
    return {"rows": max(group_size, int(round(tok.rows / group_size)) * group_size),
            "group_size": group_size, "prompt_tokens": max(1, round(prompt_tokens)),
            "turns_mean": turns, "reply_tokens": reply, "obs_tokens": round(obs),
            "max_turns": max_turns}


def first_prompt_tokens(run_dir: Path, model_path: str, steps: Sequence[int]) -> float | None:
    """The median token count of the first prompts in the run's saved rollouts (the text of the
    first observation, tokenised; the chat template's few tokens not counted)."""
    files = [run_dir / "rollouts" / f"step_{s:06d}.jsonl.gz" for s in steps]
    files = [f for f in files if f.exists()][:3]
    if not files:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    counts = []
    for f in files:
        with gzip.open(f, "rt") as fh:
            for line in fh:
                prompt = json.loads(line).get("prompt")
                if prompt:
                    counts.append(len(tok(prompt).input_ids))
    return float(statistics.median(counts)) if counts else None


#: FSDP2's record_function ranges that hold a collective (and its wait)
FSDP_COLLECTIVES = ("FSDP::all_gather", "FSDP::all_gather_copy_out", "FSDP::post_backward_reduce",
                    "FSDP::post_backward_rs_wait")
COLLECTIVE_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "gloo:",
                       "record_param_comms")
MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
              "aten::linear", "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_efficient_attention", "aten::scaled_dot_product_attention",
              "aten::_scaled_dot_product_attention_math", "aten::addmv", "aten::mv", "aten::dot"}
CATEGORIES = ("aten matmul", "aten other", "collectives", "optimizer", "autograd engine",
              "python / framework")


def base_label(name: str) -> str:
    """An FSDP range's name without its module (``FSDP::all_gather (model.layers.0)``)."""
    return name.split(" (", 1)[0].split(" for ", 1)[0]


def classify(name: str, ancestors: Sequence[str] = ()) -> str:
    """The category of a profiler event's self time, by its name and its enclosing ranges:
    collectives (any gloo/c10d op, or inside an FSDP all-gather / reduce range) first, then the
    optimiser step, aten matmuls, other aten ops, the autograd engine, and the rest (Python and
    the framework's own ranges: their self time is code between ops)."""
    chain = [name, *ancestors]
    if any(n.startswith(COLLECTIVE_PREFIXES) or base_label(n) in FSDP_COLLECTIVES
           or base_label(n).endswith("_prefetch") for n in chain):
        return "collectives"
    if any(n.startswith(("Optimizer.step", "Optimizer.zero_grad")) for n in chain):
        return "optimizer"
    if name.startswith("aten::"):
        return "aten matmul" if name in MATMUL_OPS else "aten other"
    if name.startswith("autograd::") or name.endswith("Backward0") or "Backward" in name:
        return "autograd engine"
    return "python / framework"


def attribute(events: Any, wall_s: float, top: int = 25) -> dict[str, Any]:
    """Self CPU time of the profiled update's events (the thread that ran it) by category, the
    untracked rest counted as Python, and the ``top`` ops by self time."""
    root = next((e for e in events if e.name == "account::update"), None)
    thread = root.thread if root is not None else None
    cats = dict.fromkeys(CATEGORIES, 0.0)
    ops: dict[str, list[float]] = {}
    tracked = 0.0
    for e in events:
        if thread is not None and e.thread != thread:
            continue
        if e.name == "account::update":
            continue
        ancestors, p = [], e.cpu_parent
        while p is not None:
            ancestors.append(p.name)
            p = p.cpu_parent
        self_s = e.self_cpu_time_total / 1e6
        cats[classify(e.name, ancestors)] += self_s
        tracked += self_s
        o = ops.setdefault(e.name, [0, 0.0, 0.0])
        o[0] += 1
        o[1] += self_s
        o[2] += e.cpu_time_total / 1e6
    cats["python / framework"] += max(0.0, wall_s - tracked)
    ranked = sorted(ops.items(), key=lambda kv: -kv[1][1])[:top]
    return {"wall_s": wall_s, "categories_s": cats,
            "shares": {k: v / wall_s for k, v in cats.items()} if wall_s else None,
            "top_ops": [{"name": k, "calls": int(v[0]), "self_s": v[1], "total_s": v[2]}
                        for k, v in ranked]}


class PhaseTimer:
    """Wall seconds per label, for the update's sub-phases."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        from torch.profiler import record_function

        t0 = time.perf_counter()
        with record_function(f"account::{label}"):
            yield
        self.totals[label] = self.totals.get(label, 0.0) + time.perf_counter() - t0


def instrument(rank: Any, timer: PhaseTimer) -> None:
    """Time the update's sub-phases on this rank: forwards (with / without autograd), backwards,
    the optimiser step (clipping, the finite check's all-reduce, AdamW), the shared-prefix plan
    and FSDP's gather for it (patched in this process only). An older checkout (``update_ab.py
    --base``) may lack some of these functions: what it lacks is left untimed (its time falls in
    ``other``), and an update that calls ``rank._forward`` gets that timed as the forward."""
    import torch

    import ragen2.learner.ppo as ppo

    def timed(fn: Any, label: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            with timer.phase(label() if callable(label) else label):
                return fn(*a, **k)
        return wrapper

    def fwd_label() -> str:
        return "forward" if torch.is_grad_enabled() else "forward_nograd"

    for name, label in (("forward", fwd_label), ("optimizer_step", "optimizer"),
                        ("prefix_plan", "prefix_plan")):
        if hasattr(ppo, name):
            setattr(ppo, name, timed(getattr(ppo, name), label))
    if not hasattr(ppo, "forward") and hasattr(rank, "_forward"):
        rank._forward = timed(rank._forward, fwd_label)
    backward = torch.Tensor.backward

    def timed_backward(self: Any, *a: Any, **k: Any) -> Any:
        with timer.phase("backward"):
            return backward(self, *a, **k)

    torch.Tensor.backward = timed_backward
    holding = getattr(ppo, "holding", None)
    if holding is None:
        return

    @contextmanager
    def timed_holding(r: Any, share: Any) -> Iterator[None]:
        with ExitStack() as stack:
            with timer.phase("gather_for_shared_prefix"):
                stack.enter_context(holding(r, share))
            yield

    ppo.holding = timed_holding


def _policy_version(rank: Any) -> int:
    """The rank's policy version (``rank.state.version``; ``rank.version`` in a checkout from
    before ``RankState``, as ``update_ab.py --base`` may import)."""
    return rank.state.version if hasattr(rank, "state") else rank.version


def _profile_rank(rank_id: int, world: int, rdv: Any, spec: dict, queue: Any) -> None:
    """One learner rank: ``spec["repeats"]`` timed updates after a warm-up, then one profiled."""
    try:
        import torch

        from ragen2.controller import learner_settings
        from ragen2.learner.rank import LearnerRank
        from ragen2.train import load_config

        cfg = load_config(spec["overrides"])
        rank = LearnerRank(cfg, spec["model_path"], rank_id, world, threads=spec["threads"],
                           settings=learner_settings(cfg))
        if world == 1:
            rank.setup("127.0.0.1", 0)
        else:
            rdv.setup(rank)
        batch = synthetic_batch(**spec["batch"], vocab=spec["vocab"])
        timer = PhaseTimer()
        instrument(rank, timer)
        samples = []
        for r in range(spec["repeats"] + 1):
            batch["policy_version"][:] = _policy_version(rank)
            timer.totals = {}
            t0 = time.perf_counter()
            rank.update(batch, step=1)
            wall = time.perf_counter() - t0
            if r:  # the first: warm-up
                phases = dict(timer.totals)
                phases["other"] = wall - sum(phases.values())
                samples.append({"wall_s": wall, **phases})
        batch["policy_version"][:] = _policy_version(rank)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            with torch.profiler.record_function("account::update"):
                rank.update(batch, step=1)
            wall = time.perf_counter() - t0
        prof_out = attribute(prof.events(), wall)
        keys = sorted({k for smp in samples for k in smp})
        med = {k: statistics.median(smp.get(k, 0.0) for smp in samples) for k in keys}
        queue.put((rank_id, {"update_s": med.pop("wall_s"), "phases_s": med, "samples": samples,
                             "profiled": prof_out, "threads": torch.get_num_threads()}))
        rank.shutdown()
    except BaseException:  # noqa: BLE001  (the parent reports it)
        queue.put((rank_id, {"error": traceback.format_exc()}))
        raise


def profile_update(overrides: Sequence[str], spec_batch: dict, s: Mapping[str, Any],
                   model_path: str, vocab: int, repeats: int, timeout_s: float = 1800,
                   ) -> dict[str, Any]:
    """:func:`_profile_rank` in ``world_size`` spawned processes; every rank's result."""
    import multiprocessing as mp

    from ragen2.cluster.rendezvous import SpawnRendezvous

    world = s["world_size"]
    ctx = mp.get_context("spawn")
    queue, rdv = ctx.Queue(), SpawnRendezvous(world, ctx)
    spec = {"overrides": list(overrides), "model_path": model_path, "batch": spec_batch,
            "vocab": vocab, "repeats": repeats, "threads": s["learner_threads"]}
    procs = [ctx.Process(target=_profile_rank, args=(r, world, rdv, spec, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    got: dict[int, dict] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(got) < world:
            try:
                rank_id, res = queue.get(timeout=max(1.0, deadline - time.monotonic()))
            except Exception:  # queue.Empty: a rank hangs (or died without a word)
                break
            got[rank_id] = res
            if "error" in res:
                break
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():  # a rank stuck in a collective after the other failed
                p.terminate()
    errors = {r: v["error"] for r, v in got.items() if "error" in v}
    if errors or len(got) < world:
        raise RuntimeError(f"the profiled update failed: {errors or 'a rank did not report'}")
    slowest = max(got.values(), key=lambda v: v["update_s"])
    return {"world_size": world, "threads_per_rank": s["learner_threads"], "batch": spec_batch,
            "repeats": repeats, "update_s": slowest["update_s"],
            "phases_s": got[0]["phases_s"], "profiled": got[0]["profiled"],
            "ranks": {str(r): {k: v for k, v in res.items() if k != "samples"}
                      for r, res in sorted(got.items())}}


# ------------------------------------------------------------------------------- the table
def _s(x: float | None, d: int = 2) -> str:
    if x is None:
        return "-"
    return f"{x:.{d}f}" if x >= 0.01 else f"{x:.2g}"


def format_table(account: Mapping[str, Any]) -> str:
    head = f"{'phase':44s} {'runs':>4s} {'median s':>9s} {'share':>6s} {'floor s':>9s} " \
           f"{'bound':>8s} {'x floor':>8s}"
    lines = [head, "-" * len(head)]
    for p in account["phases"]:
        share = f"{100 * p['share_of_step']:.0f}%" if p.get("share_of_step") is not None else ""
        bound = (p.get("bound") or "")[:8]
        ratio = f"{p['over_floor']:.1f}" if p.get("over_floor") else "-"
        lines.append(f"{p['name'][:44]:44s} {p['n']:4d} {_s(p['median_s']):>9s} {share:>6s} "
                     f"{_s(p.get('floor_s'), 3):>9s} {bound:>8s} {ratio:>8s}")
    noted = [f"  {p['name']}: {'; '.join(p['notes'])}" for p in account["phases"] if p.get("notes")]
    if noted:
        lines += ["", "notes:", *noted]
    job = account["job"]
    lines += ["", "whole job:"]
    for name, v in job["parts"].items():
        share = f"{100 * job['shares'][name]:.0f}%" if job.get("shares") else ""
        lines.append(f"  {name:40s} {v:9.1f} s {share:>5s}")
    prof = account.get("update_profile")
    if prof and "error" in prof:
        lines += ["", f"update profile failed: {prof['error'][-500:]}"]
    elif prof:
        lines += ["", f"update profile ({prof['world_size']} rank(s), {prof['threads_per_rank']} "
                      f"thread(s) each): {prof['update_s']:.2f} s"]
        for k, v in prof["phases_s"].items():
            lines.append(f"  {k:40s} {v:9.3f} s")
        wall = prof["profiled"]["wall_s"]
        lines.append(f"  profiled update {wall:.2f} s, by category:")
        for k, v in prof["profiled"]["categories_s"].items():
            lines.append(f"  {k:40s} {v:9.3f} s {100 * v / wall:4.0f}%")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- main
def extra_args(ap: Any) -> None:
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for the job (e.g. trainer.total_steps=10)")
    ap.add_argument("--run", default=None, metavar="DIR",
                    help="read this finished run directory instead of running the job")
    ap.add_argument("--run-dir", default=None, metavar="DIR",
                    help=f"where the job runs (default {DEFAULT_RUN_ROOT}/<time>)")
    ap.add_argument("--cache", default=None, metavar="DIR",
                    help="use these caches (default: a fresh empty directory, removed after)")
    ap.add_argument("--profile-update", action="store_true",
                    help="profile one learner update outside Ray (torch.profiler)")
    ap.add_argument("--profile-repeats", type=int, default=None,
                    help="timed updates in the profile (default 3, --quick 1)")
    ap.add_argument("--from-step", type=int, default=FROM_STEP,
                    help=f"first step of the medians (default {FROM_STEP})")
    ap.add_argument("--name", default="step_account",
                    help="the result file's name (another commit's account beside the first)")


def main() -> None:
    args = common.parse_args(__doc__, extra_args)
    from ragen2.train import load_config, resolve_model_path

    read_only = args.run is not None
    commit = None if read_only else common.git_commit()  # the code the job runs, read before it
    run_dir = Path(args.run if read_only else args.run_dir or DEFAULT_RUN_ROOT / time.strftime(
        "%Y-%m-%d_%H-%M-%S")).resolve()
    overrides = run_overrides(run_dir, args.set) if read_only else list(args.set)
    cfg = load_config(overrides)
    s = job_settings(cfg)
    tiny = cfg.model.tiny
    sizes = sorted({min(2048, n) for n in (tiny.hidden_size, tiny.intermediate_size,
                                           tiny.vocab_size)} if cfg.model.name == "tiny"
                   else {512, 1024, 2048})
    if args.quick:
        sizes = sizes[-1:]
    print(f"ceilings at {s['learner_threads']} (learner) and {s['worker_threads']} (worker) "
          "thread(s):", flush=True)
    ceilings = measure_ceilings(sizes, [s["learner_threads"], s["worker_threads"]], args.quick)

    cache = Path(args.cache).resolve() if args.cache else None
    fresh = None
    job = None
    try:
        if not read_only:
            if cache is None:
                fresh = cache = Path(tempfile.mkdtemp(prefix="ragen2_step_account_"))
            job = run_job(overrides, run_dir, cache)
            if job["returncode"]:
                raise SystemExit(f"the job exited {job['returncode']}: see {job['log']}")
        if cache is not None:  # the job's tiny model
            os.environ["RAGEN2_CACHE"] = str(cache / "ragen2")
        model_path = resolve_model_path(cfg)
        shape = model_shape(model_path)
        rows = read_metrics(run_dir / "metrics.jsonl")
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
        account = build_account(rows, s, shape, ceilings, summary,
                                job["wall_s"] if job else None, args.from_step)
        account["update_profile"] = None
        if args.profile_update:
            used = account["steps_used"]
            prompt = first_prompt_tokens(run_dir, model_path, used)
            turns = _median_over(rows, used, lambda r: _num(r, "rollout/num_turns_mean")) or 1.0
            kept = Tokens(**account["tokens"]["update"])
            spec = batch_spec(kept, turns, s["group_size"], s["max_turns"], prompt)
            spec_note = ("first prompt tokenised from the saved rollouts" if prompt is not None
                         else "first prompt as long as one turn's observation (no rollouts saved)")
            repeats = args.profile_repeats or (1 if args.quick else 3)
            print(f"profiling one update: {spec}", flush=True)
            try:
                prof = profile_update(overrides, spec, s, model_path, shape.vocab, repeats)
            except Exception as e:  # noqa: BLE001  (the job's account is kept all the same)
                print(f"the update's profile failed: {e}", flush=True)
                prof = {"error": str(e), "batch": spec}
            prof["batch_note"] = spec_note
            upd = next((p for p in account["phases"] if p["key"] == "timing/update_s"), None)
            if upd is not None:
                prof["job_update_median_s"] = upd["median_s"]
            account["update_profile"] = prof
    finally:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)

    print(format_table(account), flush=True)
    phase = {p["key"]: p for p in account["phases"]}
    ratios, better, goal = {}, {}, {}
    for key, name in (("timing/update_s", "update_over_floor"),
                      ("timing/rollout_s", "generation_over_floor"),
                      ("timing/step_s", "step_over_floor")):
        if phase.get(key, {}).get("over_floor"):
            ratios[name], better[name] = phase[key]["over_floor"], "lower"
    if "timing/step_s" in phase:
        ratios["step_median_s"] = phase["timing/step_s"]["median_s"]
        better["step_median_s"] = "lower"
        goal["step_median_s"] = "<= 8"
    if "update_over_floor" in ratios:
        goal["update_over_floor"] = "<= 3"
    settings = {"overrides": overrides, "run_dir": os.path.relpath(run_dir, common.ROOT),
                "source": "read" if read_only else "ran", "from_step": args.from_step,
                "commit": commit,
                "fresh_cache": fresh is not None, "job_settings": s,
                "model": {**asdict(shape), "params": shape.params,
                          "body_matmul_params": shape.body_matmul_params,
                          "head_params": shape.head_params}}
    results = {"ceilings": ceilings, "job_process": job, **account}
    common.write_result(args.name, args, settings, results, ratios, better, goal)


if __name__ == "__main__":
    main()
