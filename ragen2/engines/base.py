"""The generation-engine interface every rollout backend (HF, vLLM) implements."""

from __future__ import annotations

from dataclasses import dataclass, field
import warnings
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class SamplingParams:
    """How to sample ``n`` responses per prompt. ``temperature == 0`` means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48
    stop: tuple[str, ...] = ("</answer>",)
    seed: int = 0
    n: int = 1
    top_logprobs: int = 0  # also report the k most likely tokens' logprobs at each position

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n={self.n} is invalid; allowed: n >= 1")


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
    #: with ``SamplingParams.top_logprobs = k``: per position, {token id: logprob} of (at least)
    #: the k most likely tokens under the same distribution as ``logprobs``
    top_logprobs: list[dict[int, float]] | None = field(default=None, repr=False)


#: full, unsharded policy weights with HF parameter names: a mapping or a (lazy) pair stream
Weights = Mapping[str, Any] | Iterable[tuple[str, Any]]


class GenerationEngine(Protocol):
    """Batched sampling over token-id prompts plus in-place weight updates."""

    policy_version: int

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Sample ``params.n`` responses for each prompt (a list of token ids), prompt-major."""
        ...

    def load_weights(self, weights: Weights, version: int) -> None:
        """Replace every policy weight and set the version (after all of them are in)."""
        ...

    def finish_update(self, version: int) -> None:
        """After weights were written by another path (CUDA IPC, NCCL): drop state computed with
        the old ones (vLLM: the prefix cache) and set the version."""
        ...


def named_tensors(weights: Weights) -> Iterator[tuple[str, Any]]:
    """``(name, torch.Tensor)`` pairs from a mapping or pair stream of numpy arrays or tensors."""
    import torch

    items = weights.items() if isinstance(weights, Mapping) else weights
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only numpy from the object store
        for name, value in items:
            yield name, torch.as_tensor(value)
