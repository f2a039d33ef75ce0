"""The HF-transformers engine: batched ``model.generate`` with per-token logprobs (CPU default)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ragen2.engines.base import Generation, SamplingParams, Weights, named_tensors


class HFEngine:
    """Left-padded batched sampling with ``transformers``' ``generate``.

    Logprobs are recomputed from the raw logits ``generate`` returns, as
    ``log_softmax(logits / T)`` at the sampled ids, so they describe the policy distribution the
    learner scores (before top-p truncation).
    """

    def __init__(self, model_path: str, *, dtype: str = "float32", device: str = "cpu",
                 trust_remote_code: bool = False, max_batch_size: int = 256,
                 options: Any = None, seed: int = 0) -> None:
        from ragen2.models.loading import load_causal_lm, load_tokenizer

        self.tokenizer = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
        self.model = load_causal_lm(model_path, dtype=dtype, trust_remote_code=trust_remote_code)
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        self.max_batch_size = max_batch_size
        self.policy_version = 0
        self._tied = self._tied_parameter_names()

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
            out.extend(self._generate_batch(chunk, params, seed=params.seed + start))
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
        greedy = params.temperature == 0
        kwargs = dict(do_sample=not greedy, max_new_tokens=params.max_new_tokens,
                      pad_token_id=pad_id, eos_token_id=tok.eos_token_id,
                      output_logits=True, return_dict_in_generate=True)
        if not greedy:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=tok)
        torch.manual_seed(seed)
        res = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                  **kwargs)
        new = res.sequences[:, width:].cpu()
        logits = torch.stack(res.logits, dim=1).float().cpu()  # (B, n, V)
        temp = params.temperature if not greedy else 1.0
        full = torch.log_softmax(logits / temp, dim=-1)
        lps = full.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        top = full.topk(params.top_logprobs, dim=-1) if params.top_logprobs > 0 else None
        gens = []
        for i in range(len(prompts)):
            tops = None
            if top is not None:
                tops = [dict(zip(ix.tolist(), v.tolist())) for ix, v in zip(top.indices[i], top.values[i])]
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
