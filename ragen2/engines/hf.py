"""The HF-transformers engine: batched ``model.generate`` with per-token logprobs (CPU default)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ragen2.config import HF_MAX_BATCH
from ragen2.engines.base import Generation, SamplingParams, Weights, named_tensors
from ragen2.seeding import request_seed


class _PolicySampler:
    """A logits processor that *is* the sampling distribution, and records its logprobs.

    ``generate`` runs with no processor of its own (see :meth:`HFEngine.generation_config`), so
    at every step this sees the model's raw logits, stores ``log_softmax(logits / T)`` (the policy
    the learner scores), and hands back the logits ``generate`` samples from: ``logits / T``,
    top-p truncated when ``top_p < 1`` (greedy: unchanged). The sampled token's logprob is read at
    the next step (the token is then the last of ``input_ids``) or by :meth:`finish`, so memory is
    one ``(B, V)`` row of logprobs, never ``(B, new tokens, V)`` (128 x 400 tokens x a 150k
    vocabulary would be 31 GB in fp32).
    """

    def __init__(self, temperature: float, top_p: float, top_logprobs: int) -> None:
        self.greedy = temperature == 0
        self.temperature = 1.0 if self.greedy else temperature
        self.top_p, self.k = top_p, top_logprobs
        self._last: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []  # per step: (B,)
        self.top: list[tuple[torch.Tensor, torch.Tensor]] = []  # per step: (B, k) ids, values

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._last is not None:
            self._take(input_ids[:, -1])
        logits = scores.float() / self.temperature
        logp = torch.log_softmax(logits, dim=-1)
        self._last = logp
        if self.k > 0:
            v, i = logp.topk(self.k, dim=-1)
            self.top.append((i, v))
        if self.greedy or self.top_p >= 1:
            return logits
        return _top_p_mask(logits, logp, self.top_p)

    def _take(self, sampled: torch.Tensor) -> None:
        self.logprobs.append(self._last.gather(-1, sampled[:, None].to(self._last.device))[:, 0])
        self._last = None

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(B, n) logprobs of ``new_tokens`` (B, n), the ids ``generate`` appended."""
        if self._last is not None:
            self._take(new_tokens[:, -1])
        n = new_tokens.shape[1]
        if len(self.logprobs) != n:
            raise RuntimeError(f"HF engine: {len(self.logprobs)} sampling steps recorded for {n} "
                               "generated tokens (a logits processor was skipped)")
        return torch.stack(self.logprobs, dim=1).cpu() if n else torch.zeros(new_tokens.shape)


def _top_p_mask(logits: torch.Tensor, logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` (B, V) with every token outside the smallest set of mass >= ``top_p`` at -inf
    (the most likely token always stays)."""
    order = logp.argsort(dim=-1, descending=True)
    probs = logp.gather(-1, order).exp()
    outside = probs.cumsum(-1) - probs > top_p  # the mass before this token already covers top_p
    drop = torch.zeros_like(outside).scatter(-1, order, outside)
    return logits.masked_fill(drop, float("-inf"))


class HFEngine:
    """Left-padded batched sampling with ``transformers``' ``generate``.

    Sampling is exactly what :class:`SamplingParams` says: the model's own
    ``generation_config.json`` (Qwen2.5-Instruct ships ``repetition_penalty`` 1.05-1.1, others
    top-k 50) is set aside at load time, and temperature / top-p are applied by
    :class:`_PolicySampler`, which records ``log_softmax(logits / T)`` at the sampled ids as
    generation proceeds: the policy distribution the learner scores (before top-p truncation).

    A generate call runs its prompts in chunks of ``max_batch_size`` (the argument, else
    ``options.hf_max_batch``, else :data:`ragen2.config.HF_MAX_BATCH`), chunk ``k`` starting at
    prompt ``s`` under ``torch.manual_seed(request_seed(params.seed, s))``; all of a chunk's rows
    draw from that one stream. So the first chunk is seeded as a single batch is: a call with no
    more prompts than the batch samples exactly what it did before the batch was configurable,
    and a chunked call is reproducible (the same prompts, seed and batch give the same samples)
    but samples rows beyond the first differently from one batch. Greedy decoding does not depend on the chunking
    (``tests/engines/test_hf.py``).
    """

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu",
                 trust_remote_code: bool = False, max_batch_size: int | None = None,
                 options: Any = None, seed: int = 0) -> None:
        from ragen2.models.loading import load_causal_lm, load_tokenizer

        self.tokenizer = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
        self.model = load_causal_lm(model_path, dtype=dtype, trust_remote_code=trust_remote_code)
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        #: the model's shipped generation defaults, kept for reference and never applied
        self.shipped_generation_config = self.model.generation_config
        self.model.generation_config = self.generation_config()
        self.max_batch_size = (max_batch_size or getattr(options, "hf_max_batch", None)
                               or HF_MAX_BATCH)
        self.policy_version = 0
        self._tied = self._tied_parameter_names()

    def generation_config(self) -> Any:
        """A ``GenerationConfig`` whose every logits processor is off (``generate`` fills unset
        fields from the model's config, so each one that changes the distribution is set)."""
        from transformers import GenerationConfig

        tok = self.tokenizer
        return GenerationConfig(
            temperature=1.0, top_k=0, top_p=1.0, min_p=None, typical_p=1.0, epsilon_cutoff=0.0,
            eta_cutoff=0.0, repetition_penalty=1.0, encoder_repetition_penalty=1.0,
            no_repeat_ngram_size=0, bad_words_ids=None, min_length=0, min_new_tokens=None,
            forced_bos_token_id=None, forced_eos_token_id=None, suppress_tokens=None,
            begin_suppress_tokens=None, sequence_bias=None, renormalize_logits=False,
            num_beams=1, length_penalty=1.0, bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)

    # ------------------------------------------------------------------ weights
    def _tied_parameter_names(self) -> set[str]:
        names = set(self.model.state_dict().keys())
        return names - {n for n, _ in self.model.named_parameters(remove_duplicate=True)} - {
            n for n, _ in self.model.named_buffers()}

    @torch.no_grad()
    def load_weights(self, weights: Weights, version: int) -> None:
        """Copy every weight in place (a lazy pair stream is consumed one tensor at a time)."""
        params = self.model.state_dict()
        seen, unexpected = set(), []
        for name, value in named_tensors(weights):
            if name not in params:
                unexpected.append(name)
                continue
            if tuple(value.shape) != tuple(params[name].shape):
                raise ValueError(f"weight sync: {name} has shape {tuple(value.shape)}, the engine's "
                                 f"model expects {tuple(params[name].shape)}")
            params[name].copy_(value)
            seen.add(name)
        missing = [k for k in params if k not in seen and k not in self._tied]
        if missing or unexpected:
            raise KeyError(f"weight sync mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
        self.finish_update(version)

    def finish_update(self, version: int) -> None:
        """After a weight update (any transport): no cache to drop here, just the version."""
        self.policy_version = version

    # --------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if params.n > 1:
            from dataclasses import replace

            flat = [p for p in prompts for _ in range(params.n)]
            return self.generate(flat, replace(params, n=1))
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            chunk = prompts[start:start + self.max_batch_size]
            out.extend(self._generate_batch(chunk, params, seed=request_seed(params.seed, start)))
        return out

    def _generate_batch(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                        seed: int) -> list[Generation]:
        if not prompts:
            return []
        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError("empty prompt: every prompt needs at least one token")
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
        from transformers import LogitsProcessorList

        sampler = _PolicySampler(params.temperature, params.top_p, params.top_logprobs)
        kwargs = dict(do_sample=not sampler.greedy, max_new_tokens=params.max_new_tokens,
                      logits_processor=LogitsProcessorList([sampler]))
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        torch.manual_seed(seed)
        sequences = self.model.generate(input_ids=ids.to(self.device),
                                        attention_mask=mask.to(self.device), **kwargs)
        new = sequences[:, width:].cpu()
        lps = sampler.finish(new)
        gens = []
        for i in range(len(prompts)):
            tops = None
            if sampler.k > 0:
                tops = [dict(zip(ix[i].tolist(), v[i].tolist())) for ix, v in sampler.top]
            gens.append(self._finish(new[i].tolist(), lps[i].tolist(), params, tops))
        return gens

    def _finish(self, ids: list[int], lps: list[float], params: SamplingParams,
                tops: list[dict[int, float]] | None = None) -> Generation:
        """Cut one row where generation ended for it: at EOS, at a stop string, or at the cap."""
        eos = self.tokenizer.eos_token_id
        n, reason = len(ids), "length"
        if eos is not None and eos in ids:
            n, reason = ids.index(eos) + 1, "eos"
        k = self._stop_len(ids[:n], params.stop)
        if k is not None:
            n, reason = k, "stop"
        ids, lps = ids[:n], lps[:n]
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Generation(ids, lps, reason, self.policy_version, text,
                          tops[:n] if tops is not None else None)

    def _stop_len(self, ids: list[int], stop: Sequence[str]) -> int | None:
        """Shortest prefix length whose decoded text contains a stop string (binary search)."""
        dec = lambda k: self.tokenizer.decode(ids[:k], skip_special_tokens=False)  # noqa: E731
        if not stop or not any(s in dec(len(ids)) for s in stop):
            return None
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in dec(mid) for s in stop):
                hi = mid
            else:
                lo = mid + 1
        return lo
