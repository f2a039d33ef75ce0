"""The generation-engine interface every rollout backend (HF, vLLM) implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one response per prompt. ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    stop: tuple[str, ...] = ("</answer>",)
    seed: int = 0


@dataclass
class Generation:
    """One sampled response.

    ``token_ids`` are exactly the ids the engine sampled (never re-tokenised), ending with the
    stop string's last token, an EOS id, or cut at ``max_new_tokens``. ``logprobs[i]`` is
    log softmax(logits / T)[token_ids[i]] under the policy that sampled it (T = temperature, 1 when
    greedy), i.e. the distribution before top-p truncation: the learner recomputes the same number.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "eos" | "length"
    policy_version: int = 0
    text: str = field(default="", repr=False)


class GenerationEngine(Protocol):
    """Batched sampling over token-id prompts plus in-place weight updates."""

    policy_version: int

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample one response for each prompt (a list of token ids)."""
        ...

    def load_weights(self, state_dict: Mapping[str, np.ndarray], version: int) -> None:
        """Replace the policy weights (full, unsharded, HF parameter names) and set the version."""
        ...
