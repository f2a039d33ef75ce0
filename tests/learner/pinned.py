"""The learner tests' numerics, pinned: fp32 and one micro-batch per ``algorithm.micro_batch_size``
rows (issue 14's job). The defaults changed (issue 44: ``model.dtype=auto``, bf16 on CPUs with
bf16 instructions, a token budget per micro-batch, and the gradients reduced once an optimiser
step), but these tests check exactness to fp32 rounding, one unsharded rank and row micro-batches
with a reduction each; a test that sets one of these keys keeps its own."""

from __future__ import annotations

PINNED = {"model.dtype": "float32", "learner.micro_batch_tokens": "0",
          "learner.reduce_once": "false"}


def pinned(*overrides: str) -> list[str]:
    """``overrides`` after :data:`PINNED`'s keys that they do not set themselves."""
    mine = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    return [*(f"{k}={v}" for k, v in PINNED.items() if k not in mine), *overrides]
