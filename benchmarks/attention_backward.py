"""The CPU's attention kernels in bf16 and fp32, forward and backward: why ``sdpa_fp32_backward``.

The update profiled in the default job (``step_account.py --profile-update``) spent a third of
its time in ``_scaled_dot_product_flash_attention_for_cpu_backward``, in bf16. This script times
one attention's forward and backward on one thread (what a learner rank gets) at the shapes the
tiny model's passes have (4 query heads, 2 key/value heads of 32 dims; the update's micro-batches
of ~20 rows of ~400 tokens, the warm start's 4 rows of 300-700, shorter rows), causal, three ways:

* ``sdpa``: ``F.scaled_dot_product_attention`` on bf16 tensors (the CPU flash kernel, both ways);
* ``sdpa_fp32_backward``: ``ragen2.learner.attention.flash_fp32_backward``, the same bf16
  forward, the backward in fp32;
* ``fp32``: SDPA on fp32 copies (both ways in fp32), for reference.

Each side's median over ``repeats`` fresh inputs (one warm-up first), and each side's gradient
error: the largest |difference| from a float64 computation on the same bf16 inputs, summed over
q, k and v.

Usage::

    python benchmarks/attention_backward.py           # ~1 min
    python benchmarks/attention_backward.py --quick

Writes ``benchmarks/results/attention_backward[.quick].json``. Run nothing else meanwhile.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32
FULL = {"shapes": [[20, 400], [20, 128], [4, 300], [4, 700], [10, 600]], "repeats": 7}
QUICK = {"shapes": [[4, 128]], "repeats": 3}
SIDES = ("sdpa", "sdpa_fp32_backward", "fp32")


def _inputs(rows: int, length: int, seed: int) -> list[Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    shapes = [(rows, HEADS, length, HEAD_DIM), (rows, KV_HEADS, length, HEAD_DIM),
              (rows, KV_HEADS, length, HEAD_DIM), (rows, HEADS, length, HEAD_DIM)]
    return [torch.randn(s, generator=g).to(torch.bfloat16) for s in shapes]


def _sides() -> dict[str, Callable[..., Any]]:
    import torch.nn.functional as F

    from ragen2.learner.attention import flash_fp32_backward

    return {
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                               enable_gqa=True),
        "sdpa_fp32_backward": lambda q, k, v: flash_fp32_backward(q, k, v, is_causal=True),
        "fp32": lambda q, k, v: F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True).to(q.dtype),
        "float64": lambda q, k, v: F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True),
    }


def _run(fn: Callable[..., Any], q: Any, k: Any, v: Any, gout: Any) -> tuple[float, float, list]:
    """(forward seconds, backward seconds, the gradients of q, k, v)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    t0 = time.perf_counter()
    out = fn(q, k, v)
    t1 = time.perf_counter()
    out.backward(gout.to(out.dtype))
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, [x.grad for x in (q, k, v)]


def measure(rows: int, length: int, repeats: int) -> dict[str, Any]:
    sides = _sides()
    times: dict[str, dict[str, list[float]]] = {s: {"forward": [], "backward": []} for s in SIDES}
    for r in range(repeats + 1):
        q, k, v, gout = _inputs(rows, length, r)
        for side in SIDES:  # interleaved: a drift of the machine hits every side
            fwd, bwd, _ = _run(sides[side], q, k, v, gout)
            if r:  # the first: warm-up
                times[side]["forward"].append(fwd)
                times[side]["backward"].append(bwd)
    q, k, v, gout = _inputs(rows, length, 10_000)
    exact = _run(sides["float64"], q, k, v, gout)[2]
    out: dict[str, Any] = {}
    for side in SIDES:
        grads = _run(sides[side], q, k, v, gout)[2]
        err = sum(float((g.double() - x).abs().max()) for g, x in zip(grads, exact))
        fwd, bwd = (common.median(times[side][p]) for p in ("forward", "backward"))
        out[side] = {"forward_s": fwd, "backward_s": bwd, "total_s": fwd + bwd,
                     "grad_error": err, "samples": times[side]}
    print(f"{rows} rows x {length}: " + ", ".join(
        f"{s} {out[s]['forward_s'] * 1e3:.1f}+{out[s]['backward_s'] * 1e3:.1f} ms "
        f"(grad error {out[s]['grad_error']:.3f})" for s in SIDES), flush=True)
    return out


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    import torch

    torch.set_num_threads(1)
    shapes = {f"{rows}x{length}": measure(rows, length, s["repeats"])
              for rows, length in s["shapes"]}
    ratios = {f"{key}_total": v["sdpa_fp32_backward"]["total_s"] / v["sdpa"]["total_s"]
              for key, v in shapes.items()}
    settings = {**s, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "threads": 1,
                "dtype": "bfloat16", "causal": True}
    common.write_result("attention_backward", args, settings, {"shapes": shapes}, ratios,
                        {k: "lower" for k in ratios}, {})


if __name__ == "__main__":
    main()
