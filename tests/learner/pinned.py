"""The learner tests' numerics, pinned: fp32 and one micro-batch per ``algorithm.micro_batch_size``
rows (issue 14's job). The defaults changed (issue 44: ``model.dtype=auto``, bf16 on CPUs with
bf16 instructions, and a token budget per micro-batch), but these tests check exactness to fp32
rounding, one unsharded rank and row micro-batches; a test that sets either key keeps its own."""

from __future__ import annotations

PINNED = {"model.dtype": "float32", "learner.micro_batch_tokens": "0"}


def pinned(*overrides: str) -> list[str]:
    """``overrides`` after :data:`PINNED`'s keys that they do not set themselves."""
    mine = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    return [*(f"{k}={v}" for k, v in PINNED.items() if k not in mine), *overrides]
