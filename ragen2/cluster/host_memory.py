"""Host memory of a CPU job, per process, estimated before anything starts; and the plan that
picks the learner's memory knobs to fit it.

On ``cluster.device=cpu`` every process of a run lives in one machine's memory: the driver, Ray's
own processes, ``cluster.learner_world_size`` learner ranks and ``rollout.num_workers`` rollout
workers (each with its engine). :func:`estimate_host_memory` adds up what each needs at its peak,
term by term (:class:`HostBudget`); :func:`plan_host_memory` picks ``learner.micro_batch_tokens``
and ``learner.activation_checkpointing`` where the config leaves them ``null`` (the fastest pair
that fits, see :data:`CANDIDATES`), and with ``engine=hf`` ``engine.hf_max_batch`` (256, or the
largest of :data:`HF_BATCHES` that fits when no learner setting fits 256);
:func:`host_memory_problems` is the preflight's refusal, with the numbers and the keys to change.
The GPU estimate is :mod:`ragen2.cluster.memory`; the shapes and the per-token activation bytes
``a`` are shared with it (:mod:`ragen2.cluster.shapes`).

**The formula** (bytes; P = parameters of the policy, P_c = of the critic, W = learner ranks, c =
compute bytes: 4 in fp32, 2 in bf16 (``model.dtype=bfloat16``: FSDP2 mixed precision, fp32 master
weights), H / L / V = hidden size, layers, vocabulary):

learner rank, resident
  * ``LEARNER_PROCESS``: the Ray actor with torch, transformers and gloo imported
  * policy ``12 P / W`` (fp32 weights and AdamW's two moments; LoRA ``4 P / W``), reference
    ``4 P / W`` with ``algorithm.kl_coef > 0``, critic ``12 P_c / W`` with ``adv_estimator=gae``
learner rank, on top, the largest of three moments that never overlap
  * the update: gradients ``4 P / W`` (+ ``4 P_c / W``; LoRA none), the gathered compute copy
    ``c P`` when the model is sharded (W > 1 or bf16; one fp32 rank computes on its own weights),
    the activations of one micro-batch of ``N = max(learner.micro_batch_tokens,
    rollout.max_context_tokens)`` tokens: ``N L a c / 2`` (``a`` is bf16 bytes per token and
    layer), with activation checkpointing ``N (c H L + a c / 2)``; and the logits ``N V (c + 12)``,
    ``N V (c + 20)`` with an entropy bonus (the logits, their fp32 upcast, the saved log-softmax
    and the gradient; the entropy's gradient path keeps two more fp32 copies: the GPU estimate's
    per-logit bytes, ``ragen2.cluster.memory``)
  * the MI monitor's scoring (``monitor.name=mi``): the gathered compute copy (sharded) and one
    slice of ``S = monitor.score_tokens`` continuation tokens (null: 2048 on the CPU,
    ``SCORE_TOKENS_CPU``), ``S V (c + 8)`` (the logits, their fp32 upcast and log-softmax;
    ``ragen2.learner.scoring`` slices by that budget)
  * loading (rank 0 of a sharded learner): one full fp32 copy ``4 P`` besides its shards
rollout worker (one per ``rollout.num_workers``)
  * HF engine: ``HF_ENGINE_PROCESS``, weights ``c P``, and for each sequence it generates at once
    (``B = min(episodes of the worker, engine.hf_max_batch)``; the episodes: the most of a training
    step's or an evaluation's per worker; it generates a turn's prompts in chunks of
    ``engine.hf_max_batch``) the KV cache at ``rollout.max_context_tokens`` (``2 L kv d c`` bytes
    a token) and the sampler's ``16 V`` bytes (fp32 logits, log-softmax, the top-p sort)
  * vLLM-CPU: ``VLLM_ENGINE_PROCESS``, weights ``c P`` and its KV cache ``engine.cpu_kvcache_gb``
    (VLLM_CPU_KVCACHE_SPACE, allocated at start; it queues what does not fit)
the rest
  * the driver (``DRIVER_PROCESS``), Ray's daemons (``RAY_PROCESSES``), and the weights in Ray's
    object store during a sync (``4 P``: fp32 numpy buckets, ``ragen2.sync.object_store``)

The room: ``MemAvailable`` minus what Ray's memory monitor keeps free (it kills the newest worker
when the node's use passes ``RAY_memory_usage_threshold``, 0.95 of ``MemTotal`` by default), so
memory other jobs hold is respected. A fit within ``MARGIN`` of the room is a warning.
The process constants were measured on the CPU machines (``benchmarks/host_memory.py``); the
update and scoring terms are upper bounds (full-length rows, no credit for the shared prefix or
``logits_to_keep``).
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Optional

from ragen2.cluster.host import HostMemory, host_memory
from ragen2.cluster.memory import trains_critic
from ragen2.cluster.shapes import ModelShape, model_shape
from ragen2.config import HF_MAX_BATCH, SCORE_TOKENS_CPU, Config

GiB = 2**30
LEARNER_PROCESS = 1.0 * GiB
HF_ENGINE_PROCESS = 1.0 * GiB
VLLM_ENGINE_PROCESS = 1.5 * GiB
DRIVER_PROCESS = 1.2 * GiB
RAY_PROCESSES = 1.0 * GiB
RAY_THRESHOLD = 0.95  # Ray's memory monitor default (RAY_memory_usage_threshold)
MARGIN = 0.10
#: the batches the plan chooses from below that (powers of 2 and 1.5x them): a coarse grid, so a
#: few hundred MB more or less free memory at launch rarely changes the batch, and with it which
#: samples a seed draws
HF_BATCHES = (192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 6, 4, 3, 2, 1)
BATCH = "engine.hf_max_batch"
#: (activation checkpointing, micro-batch tokens), fastest first: without recomputation any
#: micro-batch of >= 1k tokens keeps both CPU cores busy, so recomputation (~+30% of a step) is
#: the last resort, and a smaller micro-batch only costs per-call overhead
CANDIDATES: tuple[tuple[bool, int], ...] = (
    (False, 4096), (False, 2048), (False, 1024),
    (True, 4096), (True, 2048), (True, 1024), (True, 512))
__all__ = ["CANDIDATES", "HF_MAX_BATCH", "HostBudget", "estimate_host_memory",
           "host_memory_problems", "plan_host_memory", "planning_host"]


@dataclass
class HostBudget:
    """Peak bytes of every process of a CPU job on one machine (see the module docstring)."""

    model: str
    room: float  # what the job may use: MemAvailable less Ray's reserve
    host: HostMemory
    learner: dict[str, float] = field(default_factory=dict)  # resident terms of one rank
    update: dict[str, float] = field(default_factory=dict)  # one rank's update, on top
    scoring: dict[str, float] = field(default_factory=dict)  # one rank's monitor scoring, on top
    loading: float = 0.0  # rank 0's full copy while it loads, on top
    ranks: int = 1
    engine: dict[str, float] = field(default_factory=dict)  # one rollout worker
    workers: int = 1
    shared: dict[str, float] = field(default_factory=dict)  # driver, Ray, the object store
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def learner_peak(self) -> float:
        """One learner rank at its peak (rank 0's loading copy included)."""
        extra = max(sum(self.update.values()), sum(self.scoring.values()), self.loading)
        return sum(self.learner.values()) + extra

    @property
    def engine_peak(self) -> float:
        return sum(self.engine.values())

    @property
    def need(self) -> float:
        return (self.ranks * self.learner_peak + self.workers * self.engine_peak
                + sum(self.shared.values()))

    @property
    def fits(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """Every term in GiB, one line per kind of process (for the log and the refusal)."""
        def terms(d: dict[str, float]) -> str:
            return ", ".join(f"{k} {gib(v)}" for k, v in d.items() if v)

        return "\n".join([
            f"host memory ({self.model}): need {gib(self.need)} of the {gib(self.room)} this job "
            f"may use ({gib(self.host.available)} available of {gib(self.host.total)}, less Ray's "
            f"{1 - _ray_threshold():.0%} reserve)",
            f"  {self.ranks} learner rank(s), {gib(self.learner_peak)} each at the peak: "
            f"{terms(self.learner)}; + the largest of: update {gib(sum(self.update.values()))} "
            f"({terms(self.update)}), monitor scoring {gib(sum(self.scoring.values()))} "
            f"({terms(self.scoring)}), loading {gib(self.loading)}",
            f"  {self.workers} rollout worker(s), {gib(self.engine_peak)} each: {terms(self.engine)}",
            f"  shared: {terms(self.shared)}"])


def gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def _ray_threshold() -> float:
    try:
        return float(os.environ.get("RAY_memory_usage_threshold", RAY_THRESHOLD))
    except ValueError:
        return RAY_THRESHOLD


def compute_bytes(cfg: Config) -> int:
    """Bytes of the compute dtype: 2 for bf16/fp16 (an unresolved ``auto`` counts as fp32)."""
    return 2 if cfg.model.dtype in ("bfloat16", "float16") else 4


def micro_batch_tokens(cfg: Config, mbt: Optional[int] = None) -> int:
    """``N``, the padded tokens of the largest micro-batch (module docstring)."""
    mbt = cfg.learner.micro_batch_tokens if mbt is None else mbt
    if mbt and mbt > 0:
        return max(mbt, cfg.rollout.max_context_tokens)
    return cfg.algorithm.micro_batch_size * cfg.rollout.max_context_tokens


def update_terms(cfg: Config, shape: ModelShape, ckpt: bool, n_tok: int) -> dict[str, float]:
    """What one learner rank adds during an update, on top of what it keeps resident."""
    p, pc, w, c = shape.params(), shape.critic_params(), cfg.cluster.learner_world_size, compute_bytes(cfg)
    lora, critic = cfg.learner.lora.rank > 0, trains_critic(cfg)
    h, layers = shape.hidden_size, shape.num_layers
    a = shape.activation_bytes_per_token_layer() * c / 2
    sharded = w > 1 or c == 2
    gathered = (c * p if cfg.learner.shared_prefix else 2 * c * p / layers) if sharded else 0.0
    per_logit = c + 12 + (8 if cfg.algorithm.entropy_coef > 0 else 0)
    return {
        "gradients": (0 if lora else 4 * p / w) + (4 * pc / w if critic else 0),
        "gathered weights": gathered,
        "activations": n_tok * (c * h * layers + a) if ckpt else n_tok * a * layers,
        "logits": n_tok * shape.vocab_size * per_logit,
    }


def scoring_terms(cfg: Config, shape: ModelShape) -> dict[str, float]:
    """One scoring slice of the MI monitor and probe panel (none when neither runs)."""
    m = cfg.monitor
    if m.name != "mi" or not (m.every > 0 or m.panel_size > 0):
        return {}
    c, w = compute_bytes(cfg), cfg.cluster.learner_world_size
    s = m.score_tokens or SCORE_TOKENS_CPU  # null: the scorer's budget on the CPU
    return {"gathered weights": c * shape.params() if (w > 1 or c == 2) else 0.0,
            "scoring logits": s * shape.vocab_size * (c + 8)}


def _episodes_per_worker(cfg: Config) -> int:
    ro, workers = cfg.rollout, max(1, cfg.rollout.num_workers)
    return max(math.ceil(ro.env_groups * ro.group_size / workers),
               math.ceil(cfg.trainer.eval_episodes / workers))


def hf_sequences(cfg: Config, batch: Optional[int] = None) -> int:
    """``B``: the sequences one HF engine holds at once, its episodes capped by the batch
    (``batch``, default ``engine.hf_max_batch``, null: :data:`HF_MAX_BATCH`)."""
    batch = batch or cfg.engine.hf_max_batch or HF_MAX_BATCH
    return min(_episodes_per_worker(cfg), batch)


def hf_sequence_bytes(cfg: Config, shape: ModelShape) -> float:
    """What one more sequence of the HF engine costs: its KV cache at full context and the
    sampler's rows."""
    return (cfg.rollout.max_context_tokens * shape.kv_bytes_per_token(compute_bytes(cfg))
            + shape.vocab_size * 16)


def estimate_host_memory(cfg: Config, host: HostMemory, shape: Optional[ModelShape] = None,
                         ckpt: Optional[bool] = None, mbt: Optional[int] = None,
                         batch: Optional[int] = None) -> Optional[HostBudget]:
    """The host-memory budget of CPU job ``cfg`` on a machine with ``host``; None on CUDA or for
    a model whose shape is unknown. ``ckpt`` / ``mbt`` / ``batch`` stand in for the learner's
    activation checkpointing, micro-batch tokens and ``engine.hf_max_batch`` (the plan tries
    candidates; default: the config's)."""
    if cfg.cluster.device != "cpu":
        return None
    shape = shape or model_shape(cfg)
    if shape is None:
        return None
    lc, alg = cfg.learner, cfg.algorithm
    ckpt = bool(lc.activation_checkpointing) if ckpt is None else ckpt
    p, pc, w, c = shape.params(), shape.critic_params(), cfg.cluster.learner_world_size, compute_bytes(cfg)
    learner = {"process": LEARNER_PROCESS,
               "policy weights+Adam": (4 * p if lc.lora.rank > 0 else 12 * p) / w}
    if alg.kl_coef > 0:
        learner["reference"] = 4 * p / w
    if trains_critic(cfg):
        learner["critic weights+Adam"] = 12 * pc / w
    b = HostBudget(model=shape.name or cfg.model.path or cfg.model.name,
                   room=host.available - (1 - _ray_threshold()) * host.total, host=host,
                   learner=learner, ranks=w, workers=max(1, cfg.rollout.num_workers),
                   update=update_terms(cfg, shape, ckpt, micro_batch_tokens(cfg, mbt)),
                   scoring=scoring_terms(cfg, shape),
                   loading=4 * p if (w > 1 or c == 2) else 0.0)
    if cfg.engine.name == "vllm":
        b.engine = {"process": VLLM_ENGINE_PROCESS, "weights": c * p,
                    "KV cache (engine.cpu_kvcache_gb)": cfg.engine.cpu_kvcache_gb * GiB}
    else:
        seqs, episodes = hf_sequences(cfg, batch), _episodes_per_worker(cfg)
        kv = (f"KV of {seqs} sequences" if seqs == episodes else
              f"KV of {seqs} sequences (engine.hf_max_batch; {episodes} episodes)")
        b.engine = {"process": HF_ENGINE_PROCESS, "weights": c * p,
                    kv: seqs * cfg.rollout.max_context_tokens * shape.kv_bytes_per_token(c),
                    "sampler": seqs * shape.vocab_size * 16}
    b.shared = {"driver": DRIVER_PROCESS, "Ray": RAY_PROCESSES, "object store (sync)": 4 * p}
    if b.need > b.room:
        b.problems.append(f"the job needs {gib(b.need)} of host memory and may use {gib(b.room)}")
    elif b.need > (1 - MARGIN) * b.room:
        b.warnings.append(f"the job's host-memory estimate {gib(b.need)} is within {MARGIN:.0%} "
                          f"of the {gib(b.room)} it may use")
    return b


_PLANNING_HOST: Optional[HostMemory] = None


@contextmanager
def planning_host(host: HostMemory) -> Iterator[None]:
    """Within it, :func:`plan_host_memory` plans for ``host`` instead of this machine (``ragen2 memory
    --host-gib``: the knobs ``load_config`` resolves, for another machine)."""
    global _PLANNING_HOST
    before, _PLANNING_HOST = _PLANNING_HOST, host
    try:
        yield
    finally:
        _PLANNING_HOST = before


def plan_host_memory(cfg: Config, host: Optional[HostMemory] = None,
                     shape: Optional[ModelShape] = None) -> dict[str, Any]:
    """``{learner.activation_checkpointing, learner.micro_batch_tokens, engine.hf_max_batch}``
    for the knobs ``cfg`` leaves null (the batch only with ``engine=hf``; with vLLM it stays as
    set): the first of :data:`CANDIDATES` (fixed knobs held) whose estimate fits. A null HF batch
    is given up last: the largest batch that fits with any candidate (the worker's episodes, else
    the largest of :data:`HF_BATCHES` below them), and the fastest candidate at that batch; a
    batch that holds every episode (or 256 of them) is planned as :data:`HF_MAX_BATCH`, what the
    engine always used, so a job that fitted before samples exactly as before. When nothing fits
    even one sequence at a time, the pair that needs least and a batch of 256, which the
    preflight then refuses naming what to set. Knobs set in the config are returned as they are;
    on CUDA, or with no estimate, null knobs get :data:`FALLBACK`."""
    lc, hf = cfg.learner, cfg.engine.name == "hf"
    fixed = {"learner.activation_checkpointing": lc.activation_checkpointing,
             "learner.micro_batch_tokens": lc.micro_batch_tokens, BATCH: cfg.engine.hf_max_batch}
    open_batch = hf and cfg.engine.hf_max_batch is None
    if all(v is not None for k, v in fixed.items() if k != BATCH) and not open_batch:
        return fixed
    host = host or _PLANNING_HOST or host_memory()
    shape = shape or model_shape(cfg)
    if cfg.cluster.device != "cpu" or host is None or shape is None:
        return {k: FALLBACK[k] if v is None and (k != BATCH or hf) else v
                for k, v in fixed.items()}
    options = [(ck, mb) for ck, mb in CANDIDATES
               if lc.activation_checkpointing in (None, ck) and lc.micro_batch_tokens in (None, mb)]
    if not options:  # a knob fixed to a value outside the candidates
        options = [(ck if lc.activation_checkpointing is None else lc.activation_checkpointing,
                    mb if lc.micro_batch_tokens is None else lc.micro_batch_tokens)
                   for ck, mb in CANDIDATES]
    seen, distinct = set(), []
    for ck, mb in options:
        n = micro_batch_tokens(cfg, mb)
        if (ck, n) not in seen:  # rows longer than the budget: the same N as a larger candidate
            seen.add((ck, n))
            distinct.append((ck, mb))

    def plan(ck: bool, mb: int, batch: Optional[int]) -> dict[str, Any]:
        return {"learner.activation_checkpointing": ck, "learner.micro_batch_tokens": mb,
                BATCH: batch}

    def fits(ck: bool, mb: int, batch: Optional[int]) -> bool:
        b = estimate_host_memory(cfg, host, shape, ckpt=ck, mbt=mb, batch=batch)
        return b is not None and b.fits

    if not open_batch:
        batch = cfg.engine.hf_max_batch
        for ck, mb in distinct:
            if fits(ck, mb, batch):
                return plan(ck, mb, batch)
    else:  # the batch is given up last: the largest that fits, then the fastest pair there
        full = hf_sequences(cfg, HF_MAX_BATCH)
        best = (0, None)
        for ck, mb in distinct:
            top = next((x for x in (full, *HF_BATCHES) if x <= full and fits(ck, mb, x)), 0)
            if top > best[0]:
                best = (top, (ck, mb))
            if top == full:
                break
        top, pair = best
        if pair is not None:
            return plan(*pair, HF_MAX_BATCH if top == full else top)
    # nothing fits: the pair that needs least (the engine's term is the same for every pair) and
    # the batch as it always was, so cluster.memory_check=false launches what it did before
    batch = HF_MAX_BATCH if open_batch else cfg.engine.hf_max_batch
    needs = [(estimate_host_memory(cfg, host, shape, ckpt=ck, mbt=mb, batch=batch).need, ck, mb)
             for ck, mb in distinct]
    _, ck, mb = min(needs)
    return plan(ck, mb, batch)


#: what null knobs become without a host estimate (CUDA: the pretrained recipe's values; the HF
#: engine's batch as it always was)
FALLBACK = {"learner.activation_checkpointing": False, "learner.micro_batch_tokens": 4096,
            BATCH: HF_MAX_BATCH}


def apply_plan(cfg: Config, plan: dict[str, Any]) -> Config:
    """``cfg`` with the plan's knobs set (a new object; ``cfg`` is not changed)."""
    learner = replace(cfg.learner, activation_checkpointing=plan["learner.activation_checkpointing"],
                      micro_batch_tokens=plan["learner.micro_batch_tokens"])
    engine = replace(cfg.engine, hf_max_batch=plan.get(BATCH, cfg.engine.hf_max_batch))
    return replace(cfg, learner=learner, engine=engine)


def fix_advice(cfg: Config, b: HostBudget) -> str:
    """The config keys that lower the need, biggest lever first, for the refusal."""
    out = []
    if cfg.cluster.learner_world_size > 1:
        out.append(f"cluster.learner_world_size=1 (now {cfg.cluster.learner_world_size}: every "
                   f"rank holds {gib(b.learner_peak)})")
    if not cfg.learner.activation_checkpointing:
        out.append("learner.activation_checkpointing=true")
    ctx, mbt = cfg.rollout.max_context_tokens, cfg.learner.micro_batch_tokens or 0
    out.append(f"a smaller learner.micro_batch_tokens (now {mbt})" if mbt > ctx else
               f"a smaller rollout.max_context_tokens (now {ctx}: a row that long is one "
               "micro-batch)")
    if cfg.engine.name == "hf":
        seqs = hf_sequences(cfg)
        kv = next((v for k, v in b.engine.items() if k.startswith("KV of")), 0.0)
        if seqs > 1:  # one sequence at a time: the KV cache is no lever any more
            batch = cfg.engine.hf_max_batch or HF_MAX_BATCH
            out.append(f"a smaller engine.hf_max_batch (now {batch}: {seqs} sequences at once, "
                       f"KV {gib(kv)} at {cfg.rollout.max_context_tokens} tokens each)")
            out.append("engine=vllm (a fixed KV cache; it queues what does not fit)")
            out.append(f"a smaller trainer.eval_episodes (now {cfg.trainer.eval_episodes})")
    elif cfg.engine.cpu_kvcache_gb > 1:
        out.append(f"a smaller engine.cpu_kvcache_gb (now {cfg.engine.cpu_kvcache_gb})")
    if b.scoring and sum(b.scoring.values()) >= sum(b.update.values()):
        now = cfg.monitor.score_tokens or SCORE_TOKENS_CPU
        out.append(f"a smaller monitor.score_tokens (now {now})")
    if cfg.learner.lora.rank == 0:
        out.append("learner.lora.rank=16 (adapters only)")
    from ragen2.cluster.host import cpu_bf16

    if compute_bytes(cfg) == 4 and cpu_bf16():
        out.append("model.dtype=bfloat16 (this CPU has bf16 instructions)")
    return "; ".join(out)


def host_memory_problems(cfg: Config, host: Optional[HostMemory] = None,
                         ) -> tuple[list[str], list[str]]:
    """(problems, warnings) of CPU job ``cfg`` on this machine (or ``host``): each problem one
    message with the estimate and the keys to change; empty on CUDA or when it cannot be told."""
    host = host or host_memory()
    if host is None:
        return [], []
    b = estimate_host_memory(cfg, host)
    if b is None:
        return [], []
    warnings = [f"host memory estimate: {w}" for w in b.warnings]
    if b.fits:
        return [], warnings
    msg = (f"the job does not fit in this machine's memory (ragen2.cluster.host_memory "
           f"estimate): {'; '.join(b.problems)}.\n{b.describe()}\n  fix: {fix_advice(cfg, b)}; "
           "or cluster.memory_check=false to launch anyway")
    if not cfg.cluster.memory_check:
        return [], warnings + [msg.replace("does not fit", "may not fit", 1)]
    return [msg], warnings
