"""Per-GPU memory budget of a config, estimated before anything starts.

:func:`estimate_memory` turns a config and a GPU size into a :class:`MemoryBudget` (what the
learner and the vLLM engine each need on one GPU, term by term); :func:`memory_problems` turns a
budget that does not fit into a message naming the numbers and the config keys to change. The
hardware preflight (:mod:`ragen2.cluster.preflight`) calls it with the GPU it finds
(``torch.cuda.get_device_properties(0).total_memory``), so a run that cannot fit is refused before
Ray reserves anything; ``cluster.memory_check=false`` turns the refusal into a warning.

The model's shape comes from :mod:`ragen2.cluster.shapes` (``config.json`` when it is on disk or in
the Hugging Face cache, else the presets' known shapes); a model whose shape cannot be found is not
estimated. ``ragen2 memory OVERRIDES...`` (:mod:`ragen2.memory`) prints the budget without a GPU.

**The formula** (bytes on one GPU; P = parameters of the policy, P_c = of the critic (the policy's
backbone plus a scalar head: P minus an untied output head), W = ``cluster.learner_world_size``,
FSDP2 shards every parameter, gradient and optimiser state over the W learner ranks):

learner, resident between updates (``learner.cpu_offload=true`` moves all of it to the CPU)
  * policy  ``(4 + 8) P / W``: fp32 master weights and AdamW's two fp32 moments (LoRA: the frozen
    base ``4 P / W`` only, its adapters are negligible)
  * reference ``4 P / W``: fp32 weights, only with ``algorithm.kl_coef > 0``
  * critic ``(4 + 8) P_c / W``: only with ``algorithm.adv_estimator=gae`` (PPO)
learner, during the update, on top
  * gradients ``4 P / W`` (and ``4 P_c / W``), fp32 (LoRA: none to speak of); with
    ``learner.reduce_once`` also the unsharded fp32 gradients a step accumulates before its one
    reduce-scatter, ``4 P`` (and ``4 P_c``)
  * gathered weights ``b P``: FSDP2 un-shards the compute copy (``b`` = 2 bytes in bf16/fp16 mixed
    precision, 4 in fp32); with ``learner.shared_prefix`` (default) the whole model stays gathered
    through a micro-batch, without it two blocks at a time (``2 b P / L``)
  * activations of one micro-batch of ``N`` tokens: ``N = max(learner.micro_batch_tokens,
    rollout.max_context_tokens)`` when ``micro_batch_tokens > 0``, else ``algorithm.micro_batch_size
    x rollout.max_context_tokens`` (padded rows, no credit for the shared prefix). Per token and
    layer a Llama/Qwen block keeps ``a = 2 ((4 + b) H + 4) + 5 b q + 4 heads + 4 b I`` bytes
    (:meth:`~ragen2.cluster.shapes.ModelShape.saved_bytes_per_token_layer`: its norms' fp32 inputs
    and outputs, q and the repeated k and v, the attention output twice, sdpa's log-sum-exp, no
    ``s^2`` term, and the SwiGLU's four ``I``-wide tensors; ``q = heads x d``), and the final
    norm ``(4 + b) H``; with ``learner.activation_checkpointing`` only each block's input
    (``b H`` bytes per layer) is kept plus one block being recomputed: ``N (b H L + a + (4 + b)
    H)``, without it ``N (a L + (4 + b) H)``. Checked against an H200's measured peaks
    (``benchmarks/results/gpu/2026-12-04_memory.json``, ``tests/cluster/test_memory.py``: the
    learner's terms less the overhead within 25% of ``torch.cuda.max_memory_allocated``)
  * logits ``N V (b + 12)``, ``N V (b + 20)`` with ``algorithm.entropy_coef > 0``
    (:func:`logits_bytes_per_logit`): the logits in the compute dtype, their fp32 upcast, the
    saved log-softmax and the dense gradient the gather's backward scatters into; the entropy's
    gradient path adds its saved ``p = exp(log p)`` and ``p log p``. 14 / 22 bytes a logit in bf16,
    not the 10 / 14 this estimate counted before (issue 30, read against ragen2.algos.logits: the
    entropy path holds ~18-22; ``launch/gpu_check.py`` measures the update's peak). The critic's
    forward/backward comes after the policy's and has no vocabulary, so it is not counted on top
learner, while the MI monitor / probe panel scores (before the update, vLLM awake, colocated)
  * resident + gathered weights + one slice of ``S`` padded continuation tokens
    (:func:`scorer_slice_bytes`: per token the logits, their fp32 upcast and log-softmax ``V (b +
    8)``, the widest moment of a block's forward and the keys and values it caches; per row a
    copy of the context's cache). ``S = monitor.score_tokens`` when set; null (the default) sizes
    the slices to the free memory (:func:`ragen2.learner.scoring.slice_budget`), which never
    goes below one ``engine.max_new_tokens`` continuation, so that is what must fit here
  * ``LEARNER_OVERHEAD`` (2 GiB): CUDA context, NCCL buffers, allocator fragmentation
  * loading: a learner that loads each model in fp32 and moves it to the GPU whole before sharding
    it peaks at ``4 P`` plus what is already resident; a sharded learner (W > 1, mixed precision or
    cpu_offload) that builds its models on the meta device (:data:`SHARDED_META_INIT`) never holds
    a full copy on the GPU, so the term is 0 there
vLLM engine, on ``engine.gpu_memory_utilization x GPU`` (vLLM's own budget: its weights, activations,
CUDA graphs and KV cache must fit in it, and it refuses to start with less free memory than that)
  * weights ``2 P / T`` in bf16/fp16 (``4 P / T`` in fp32), T = ``engine.tensor_parallel_size``
  * ``ENGINE_OVERHEAD`` (2 GiB): the profile run's activations, sampler
  * KV cache: ``2 L kv d b / T`` bytes per token (keys and values of every layer). vLLM refuses to
    start if it cannot hold one ``engine.max_model_len`` sequence (a refusal here); holding every
    episode an engine runs at once (``env_groups x group_size / rollout.num_workers``, or
    ``trainer.eval_episodes / num_workers`` for evaluation, x ``rollout.max_context_tokens``, no
    credit for prefix caching) is only needed for full speed: short of it vLLM queues sequences,
    so that is a warning
HF engine (``engine=hf``), no budget of its own
  * its weights in ``model.dtype``, a KV cache for every episode of its share at once (the count
    above, each at ``rollout.max_context_tokens``), fp32 last-token logits and
    ``HF_ENGINE_OVERHEAD`` (1 GiB); PyTorch's cache keeps those blocks reserved after generating,
    so colocated the learner gets the rest of the GPU (``learner peak + HF engine <= GPU``)
vLLM engine, outside its budget (:func:`engine_outside_budget`)
  * ``ENGINE_CONTEXT`` (1 GiB): the engine process's CUDA context and NCCL buffers, which
    ``gpu_memory_utilization`` does not cover
  * ``CUDA_GRAPH_POOL`` (3 GiB; 0 with ``engine.enforce_eager``): the captured CUDA graphs' private
    memory pool, which sleep mode does not free (vllm PR #56373, #47654: several GiB per GPU)
the GPU
  * ``cluster.layout=split``: a learner GPU holds the learner alone (the whole GPU), an engine GPU
    the engine alone (its budget plus what lies outside it)
  * ``colocated`` without ``engine.sleep_mode``: ``learner peak + engine budget + outside <= GPU``
  * ``colocated`` with sleep mode: vLLM frees its weights and KV cache while the learner updates
    (what lies outside its budget stays: context and graph pool), so ``learner peak + outside <=
    GPU`` during updates and ``learner resident + engine budget + outside <= GPU`` while it
    generates (the learner empties PyTorch's cache before vLLM wakes up:
    ``LearnerRank.release_cuda_cache``)

Assumptions: a dense decoder (no MoE), AdamW, fp32 master weights (what ``ragen2.learner.rank``
does), no credit for sequence packing or the shared prefix, even shards (``P / W``). It is an
estimate: a fit with less than ``MARGIN`` (10%) to spare is reported as tight (a warning).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ragen2.cluster.shapes import KNOWN_SHAPES, ModelShape, model_shape
from ragen2.config import Config

GiB = 2**30

#: Sharded learner ranks build their models on the meta device and fill them from rank 0, so none
#: holds a full copy on its GPU while loading (``LearnerRank.meta_init``, the learner's own switch:
#: only a comparison of the two paths turns it off; tests/learner/test_rank_state.py checks that
#: the two agree)
SHARDED_META_INIT = True

LEARNER_OVERHEAD = 2 * GiB
ENGINE_OVERHEAD = 2 * GiB
ENGINE_CONTEXT = 1 * GiB  # outside gpu_memory_utilization: CUDA context, NCCL
CUDA_GRAPH_POOL = 3 * GiB  # outside it too, and kept through sleep (vllm #56373, #47654)
HF_ENGINE_OVERHEAD = 1 * GiB
MARGIN = 0.10
# torch.cuda.get_device_properties(0).total_memory of the GPUs the presets are sized for
H100_80GB = 81_559 * 2**20  # 79.6 GiB (A100-80GB: 81,251 MiB)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
__all__ = ["KNOWN_SHAPES", "MemoryBudget", "ModelShape", "estimate_memory", "fix_advice",
           "memory_problems", "model_shape", "plan_memory"]


@dataclass
class MemoryBudget:
    """Bytes on one GPU, term by term, and whether they fit (see the module docstring)."""

    model: str
    params: int
    gpu_bytes: int
    layout: str
    learner_terms: dict[str, float] = field(default_factory=dict)  # resident ones
    update_terms: dict[str, float] = field(default_factory=dict)  # added during the update
    load_peak: float = 0.0
    engine_terms: dict[str, float] = field(default_factory=dict)
    engine_budget: float = 0.0  # gpu_memory_utilization x GPU
    kv_available: float = 0.0
    kv_one_sequence: float = 0.0
    kv_full_batch: float = 0.0
    hf_engine_terms: dict[str, float] = field(default_factory=dict)  # engine=hf on the GPU
    engine_outside: dict[str, float] = field(default_factory=dict)  # beside vLLM's budget
    scorer_terms: dict[str, float] = field(default_factory=dict)  # on top of the resident ones
    sleep_mode: bool = False
    # filled by _judge
    learner_room: float = 0.0  # what the learner may use on its GPU while it updates
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def learner_resident(self) -> float:
        return sum(self.learner_terms.values())

    @property
    def learner_peak(self) -> float:
        return max(self.learner_resident + sum(self.update_terms.values()), self.load_peak)

    @property
    def fits(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """Every term in GiB, one line per side (for the log and the refusal)."""
        def terms(d: dict[str, float]) -> str:
            return ", ".join(f"{k} {gib(v)}" for k, v in d.items() if v)

        lines = [f"memory per GPU ({gib(self.gpu_bytes)} GPU, cluster.layout={self.layout}, "
                 f"{self.model}: {self.params / 1e9:.2f}B params)",
                 f"  learner {gib(self.learner_peak)} at its peak of {gib(self.learner_room)} it "
                 f"may use: {terms(self.learner_terms)}; during the update + "
                 f"{terms(self.update_terms)}"
                 + (f"; loading peak {gib(self.load_peak)}" if self.load_peak else "")]
        if self.hf_engine_terms:
            lines.append(f"  HF engine {gib(sum(self.hf_engine_terms.values()))}: "
                         f"{terms(self.hf_engine_terms)}")
        if self.engine_budget:
            lines.append(f"  vLLM engine {gib(self.engine_budget)} (engine.gpu_memory_utilization):"
                         f" {terms(self.engine_terms)}, leaving {gib(self.kv_available)} of KV "
                         f"cache (one engine.max_model_len sequence needs "
                         f"{gib(self.kv_one_sequence)}, every episode at once "
                         f"{gib(self.kv_full_batch)}); outside that budget "
                         f"{terms(self.engine_outside)}")
        if self.scorer_terms:
            lines.append(f"  MI scoring on the learner: resident + {terms(self.scorer_terms)}")
        return "\n".join(lines)


def gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def trains_critic(cfg: Config) -> bool:
    """Whether the learner trains a critic: ``algorithm.adv_estimator`` reads critic values (GAE,
    or a plugin's estimator registered with ``needs_critic``)."""
    from ragen2.algos.objective import needs_critic

    return needs_critic(cfg.algorithm)


def estimate_memory(cfg: Config, gpu_bytes: int, shape: Optional[ModelShape] = None
                    ) -> Optional[MemoryBudget]:
    """The per-GPU budget of ``cfg`` on GPUs of ``gpu_bytes``; None on CPU or for an unknown model."""
    if cfg.cluster.device != "cuda":
        return None
    shape = shape or model_shape(cfg)
    if shape is None:
        return None
    lc, alg, eng, ro = cfg.learner, cfg.algorithm, cfg.engine, cfg.rollout
    w, t = cfg.cluster.learner_world_size, eng.tensor_parallel_size
    p, pc = shape.params(), shape.critic_params()
    compute_b = DTYPE_BYTES[cfg.model.dtype]
    lora = lc.lora.rank > 0
    offload = lc.cpu_offload

    resident: dict[str, float] = {}
    resident["policy weights+Adam"] = (4 * p if lora else 12 * p) / w
    if alg.kl_coef > 0:
        resident["reference"] = 4 * p / w
    critic = trains_critic(cfg)
    if critic:
        resident["critic weights+Adam"] = 12 * pc / w
    if offload:  # FSDP2 CPUOffloadPolicy: sharded parameters, gradients and Adam states on the CPU
        resident = {k: 0.0 for k in resident}
    resident["CUDA/NCCL overhead"] = LEARNER_OVERHEAD

    update: dict[str, float] = {}
    if not offload:
        update["gradients"] = (0 if lora else 4 * p / w) + (4 * pc / w if critic else 0)
    if lc.reduce_once:  # accumulated unsharded (fp32) until the step's one reduce-scatter
        update["accumulated gradients"] = (0 if lora else 4 * p) + (4 * pc if critic else 0)
    gathered = compute_b * p if lc.shared_prefix else 2 * compute_b * p / shape.num_layers
    update["gathered weights"] = gathered
    if lc.micro_batch_tokens > 0:
        n_tok = max(lc.micro_batch_tokens, ro.max_context_tokens)
    else:
        n_tok = alg.micro_batch_size * ro.max_context_tokens
    update["activations"] = activation_bytes(shape, n_tok, compute_b, lc.activation_checkpointing)
    update["logits"] = n_tok * shape.vocab_size * logits_bytes_per_logit(compute_b,
                                                                        alg.entropy_coef > 0)
    sharded = w > 1 or cfg.model.dtype != "float32" or offload
    load_peak = (0.0 if offload or (sharded and SHARDED_META_INIT)
                 else 4 * max(p, pc if critic else 0) + sum(resident.values()))

    b = MemoryBudget(model=shape.name or cfg.model.path or cfg.model.name, params=p,
                     gpu_bytes=gpu_bytes, layout=cfg.cluster.layout, learner_terms=resident,
                     update_terms=update, load_peak=load_peak,
                     sleep_mode=eng.sleep_mode and cfg.cluster.layout == "colocated")
    if eng.name == "vllm":
        wb = 4 if cfg.model.dtype == "float32" else 2
        b.engine_budget = eng.gpu_memory_utilization * gpu_bytes
        b.engine_terms = {"weights": wb * p / t, "overhead": ENGINE_OVERHEAD}
        b.engine_outside = engine_outside_budget(eng.enforce_eager)
        b.kv_available = b.engine_budget - sum(b.engine_terms.values())
        per_tok = shape.kv_bytes_per_token(wb) / t
        b.kv_one_sequence = eng.max_model_len * per_tok
        seqs = _episodes_per_worker(cfg)
        b.kv_full_batch = seqs * ro.max_context_tokens * per_tok
    elif eng.name == "hf":
        wb = DTYPE_BYTES[cfg.model.dtype]
        seqs = _episodes_per_worker(cfg)
        b.hf_engine_terms = {
            "weights": wb * p, "overhead": HF_ENGINE_OVERHEAD,
            f"KV of {seqs} sequences": seqs * ro.max_context_tokens * shape.kv_bytes_per_token(wb),
            "logits": seqs * shape.vocab_size * 4}
    if cfg.monitor.name == "mi" and (cfg.monitor.every > 0 or cfg.monitor.panel_size > 0):
        tokens = cfg.monitor.score_tokens or eng.max_new_tokens  # null: at least one row
        b.scorer_terms = {"gathered weights": gathered,
                          "scorer slice": scorer_slice_bytes(
                              shape, compute_b, tokens, max(1, tokens // eng.max_new_tokens),
                              ro.max_context_tokens)}
    _judge(cfg, b)
    _judge_scorer(b)
    return b


def activation_bytes(shape: ModelShape, tokens: int, compute_bytes: int,
                     checkpointing: bool) -> int:
    """The activations one micro-batch of ``tokens`` keeps for its backward (module docstring):
    every block's saved tensors, or with activation checkpointing each block's input plus one
    block recomputed; and the final norm's."""
    a = shape.saved_bytes_per_token_layer(compute_bytes)
    h, b = shape.hidden_size, compute_bytes
    per_token = (b * h * shape.num_layers + a) if checkpointing else a * shape.num_layers
    return tokens * (per_token + (4 + b) * h)


def logits_bytes_per_logit(compute_bytes: int, entropy_grad: bool) -> int:
    """Bytes the policy update holds per logit (``ragen2.algos.logits`` under autograd).

    ``compute_bytes`` for the logits themselves, 4 for their fp32 upcast (``_scaled``), 4 for the
    log-softmax output autograd saves, 4 for the dense gradient the gather's backward scatters
    into; with an entropy bonus (``entropy_grad``) its gradient path keeps ``p = exp(log p)`` and
    ``p log p`` (4 each). bf16: 14, with the entropy 22 (issue 30 put the entropy path at
    ~18-22 bytes; the estimate counted 10 and 14 before).
    """
    return compute_bytes + 12 + (8 if entropy_grad else 0)


def scorer_bytes(score_tokens: int, vocab_size: int, compute_bytes: int) -> int:
    """The MI scorer's logits (``ragen2.learner.scoring.score_continuations``): ``score_tokens``
    positions of logits in the compute dtype, their fp32 upcast and the fp32 log-softmax. No
    gradients: scoring runs under ``torch.no_grad``. The logits' share of
    :func:`scorer_slice_bytes` (what the CPU host estimate counts)."""
    return score_tokens * vocab_size * (compute_bytes + 8)


def scorer_slice_bytes(shape: ModelShape, compute_bytes: int, tokens: int, rows: int,
                       context: int) -> int:
    """Peak bytes of one scorer slice of ``rows`` continuations, ``tokens`` padded tokens in
    all, under a ``context``-token prompt (``ragen2.learner.scoring.score_continuations``;
    :meth:`~ragen2.cluster.shapes.ModelShape.scorer_bytes_per_token` and ``_per_row``). An H200
    measured 0.14, 0.38 and 1.39 GiB above its base for 5, 16 and 64 rows of 400 tokens under 256
    (this: 0.11, 0.35, 1.41; ``benchmarks/results/gpu/2026-12-04_memory.json``)."""
    return (tokens * shape.scorer_bytes_per_token(compute_bytes)
            + rows * shape.scorer_bytes_per_row(compute_bytes, context))


def scorer_reserve_bytes(cfg: Config) -> int:
    """What an engine beside a learner rank on its GPU may still allocate while the learner
    scores (the scorer sizes its slices to the free memory less this): with ``engine=hf``
    colocated, its KV cache and logits for the sequences it generates at once (it allocates them
    as it generates, and with ``trainer.max_staleness > 0`` it generates while the learner
    scores); 0 for vLLM (its budget, KV cache included, is allocated when it starts, and it is
    awake whenever the learner scores), for ``cluster.layout=split`` and off CUDA."""
    c = cfg.cluster
    if c.device != "cuda" or c.layout != "colocated" or cfg.engine.name != "hf":
        return 0
    shape = model_shape(cfg)
    if shape is None:
        return 0
    wb = DTYPE_BYTES.get(cfg.model.dtype, 2)
    seqs = min(_episodes_per_worker(cfg), cfg.engine.hf_max_batch or 1 << 30)
    return int(seqs * (cfg.rollout.max_context_tokens * shape.kv_bytes_per_token(wb)
                       + shape.vocab_size * 4))


def engine_outside_budget(enforce_eager: bool) -> dict[str, float]:
    """What a vLLM engine holds on its GPU beside ``gpu_memory_utilization`` (and keeps while
    asleep): its process's CUDA context and NCCL buffers, and the CUDA-graph pool unless
    ``engine.enforce_eager`` (sleep mode does not release it: vllm PR #56373, #47654)."""
    out = {"CUDA context": float(ENGINE_CONTEXT)}
    if not enforce_eager:
        out["CUDA graph pool"] = float(CUDA_GRAPH_POOL)
    return out


def _judge_scorer(b: MemoryBudget) -> None:
    """The learner's peak while it scores for the MI monitor / panel: colocated, vLLM is awake
    then (scoring comes before the engines sleep for the update)."""
    if not b.scorer_terms:
        return
    need = b.learner_resident + sum(b.scorer_terms.values())
    outside = sum(b.engine_outside.values())
    hf = sum(b.hf_engine_terms.values())
    if b.layout == "split" or not (b.engine_budget or hf):
        room = b.gpu_bytes
    else:
        room = b.gpu_bytes - (b.engine_budget + outside if b.engine_budget else hf)
    if need > room:
        b.problems.append(f"the learner needs {gib(need)} per GPU while it scores for the MI "
                          f"monitor beside the awake engine and has {gib(room)}")


def _episodes_per_worker(cfg: Config) -> int:
    """Episodes one rollout worker runs at once: its share of a step's, or of an evaluation's."""
    ro, workers = cfg.rollout, max(1, cfg.rollout.num_workers)
    return max(math.ceil(ro.env_groups * ro.group_size / workers),
               math.ceil(cfg.trainer.eval_episodes / workers))


def _judge(cfg: Config, b: MemoryBudget) -> None:
    """Fill ``learner_room``, ``problems`` and ``warnings``."""
    g = b.gpu_bytes
    engine = b.engine_budget
    outside = sum(b.engine_outside.values())
    if b.layout == "split" or not engine:
        b.learner_room = g
    elif b.sleep_mode:
        b.learner_room = g - outside
    else:
        b.learner_room = g - engine - outside
    if engine and b.layout == "split" and engine + outside > g:
        b.problems.append(f"vLLM's budget {gib(engine)} and what it holds beside it "
                          f"({gib(outside)}) exceed its GPU's {gib(g)}")
    hf = sum(b.hf_engine_terms.values())
    if hf and b.layout == "split" and hf > g:
        b.problems.append(f"the HF engine needs {gib(hf)} per GPU and has {gib(g)}")
    elif hf and b.layout == "colocated":
        b.learner_room = g - hf
    need = b.learner_peak
    if need > b.learner_room:
        b.problems.append(f"the learner needs {gib(need)} per GPU and has {gib(b.learner_room)}")
    elif need > (1 - MARGIN) * b.learner_room:
        b.warnings.append(f"the learner's estimate {gib(need)} is within {MARGIN:.0%} of the "
                          f"{gib(b.learner_room)} it has")
    if b.sleep_mode and engine and b.learner_resident + engine + outside > g:
        b.problems.append(f"while vLLM generates (awake, {gib(engine + outside)}) the learner keeps "
                          f"{gib(b.learner_resident)} resident: "
                          f"{gib(b.learner_resident + engine + outside)} > the GPU's {gib(g)}")
    if engine:
        if b.kv_available < b.kv_one_sequence:
            b.problems.append(
                f"vLLM's budget {gib(engine)} leaves {gib(max(b.kv_available, 0))} of KV cache "
                f"after its weights and overhead, less than one engine.max_model_len="
                f"{cfg.engine.max_model_len} sequence ({gib(b.kv_one_sequence)}): vLLM refuses "
                "to start")
        elif b.kv_available < b.kv_full_batch:
            b.warnings.append(
                f"vLLM's KV cache ({gib(b.kv_available)}) holds fewer than every episode of a "
                f"step at once ({gib(b.kv_full_batch)}): it will queue sequences (slower "
                "rollouts, same results)")


def fix_advice(cfg: Config, b: MemoryBudget) -> str:
    """The config keys that lower the need or raise the room, for the refusal message."""
    c, lc, alg, eng = cfg.cluster, cfg.learner, cfg.algorithm, cfg.engine
    out = []
    learner_short = b.learner_peak > b.learner_room or (
        b.sleep_mode and b.learner_resident + b.engine_budget > b.gpu_bytes) or any(
        "scores for the MI monitor" in p for p in b.problems)
    if learner_short:
        out.append(f"more learner GPUs (now cluster.learner_world_size={c.learner_world_size}; "
                   "e.g. cluster=gpu_8)")
        if not lc.cpu_offload:
            out.append("learner.cpu_offload=true")
        if trains_critic(cfg):
            out.append("algorithm=grpo (no critic)")
        if lc.lora.rank == 0:
            out.append("learner.lora.rank=16 (adapters only)")
        if not lc.activation_checkpointing:
            out.append("learner.activation_checkpointing=true")
        if c.layout == "colocated" and b.engine_budget:
            if not eng.sleep_mode:
                out.append("engine.sleep_mode=true")
            out.append(f"a lower engine.gpu_memory_utilization (now {eng.gpu_memory_utilization:g})")
        tokens = "learner.micro_batch_tokens" if lc.micro_batch_tokens > 0 else "algorithm.micro_batch_size"
        out.append(f"a smaller {tokens}")
        if b.scorer_terms and cfg.monitor.score_tokens:
            out.append(f"a smaller monitor.score_tokens (now {cfg.monitor.score_tokens}) or null "
                       "(the scorer's slices sized to the free memory)")
    if b.hf_engine_terms:
        out.append("engine=vllm (a fixed KV budget; it queues what does not fit)")
        out.append(f"a smaller trainer.eval_episodes (now {cfg.trainer.eval_episodes}) or "
                   "rollout.env_groups x group_size")
    if b.engine_budget and b.kv_available < b.kv_one_sequence:
        out.append(f"a higher engine.gpu_memory_utilization (now {eng.gpu_memory_utilization:g}), "
                   f"a lower engine.max_model_len (now {eng.max_model_len}) or a larger "
                   "engine.tensor_parallel_size")
    return ", ".join(dict.fromkeys(out))


def memory_problems(cfg: Config, gpu_bytes: int) -> tuple[list[str], list[str]]:
    """(problems, warnings) of ``cfg`` on GPUs of ``gpu_bytes``: each problem one message naming
    the numbers and the keys to change; empty when it fits, on CPU, or for an unknown model."""
    b = estimate_memory(cfg, gpu_bytes)
    if b is None:
        return [], []
    warnings = [f"memory estimate: {w}" for w in b.warnings]
    if b.fits:
        return [], warnings
    msg = (f"the job does not fit in GPU memory (ragen2.cluster.memory estimate): "
           f"{'; '.join(b.problems)}.\n{b.describe()}\n  fix: {fix_advice(cfg, b)}; or "
           "cluster.memory_check=false to launch anyway (the estimate is documented in "
           "ragen2/cluster/memory.py)")
    if not cfg.cluster.memory_check:
        return [], warnings + [msg.replace("does not fit", "may not fit", 1)]
    return [msg], warnings


def plan_memory(cfg: Config, nodes) -> Optional[MemoryBudget]:  # noqa: ANN001  (NodeResources)
    """:func:`estimate_memory` on the smallest GPU of ``nodes`` whose GPU memory is known (a
    described node list, e.g. in tests or from an inventory); None when none is known."""
    sizes = [n.gpu_memory for n in nodes if n.gpus > 0 and n.gpu_memory > 0]
    return estimate_memory(cfg, min(sizes)) if sizes else None
