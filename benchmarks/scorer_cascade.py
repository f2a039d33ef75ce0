"""The MI scorer with and without its shared-context ("cascade") attention on the CPU (issue 44).

The later-turn probe panel is the largest instrument of the default job: every sampled reasoning
scored under every panel prompt (32 contexts of ~430 tokens x ~127 continuations of ~31). The
generic scorer (:mod:`ragen2.learner.scoring`) gives each continuation row its own copy of its
context's KV cache (``batch_select_indices``), appends the row's keys to it (the cache's ``cat``),
repeats the grouped keys and values per query head (``repeat_kv``) and runs SDPA with a padding
mask: profiled on a panel call dumped from a real job (2026-12-07), about a third of the call
copied keys and values. :mod:`ragen2.learner.cascade` computes the same attention without the
copies: per context, the queries of all its rows over the context's cached keys at once, each row
causally over its own keys, the two merged by log-sum-exp. ragen2 takes it on the CPU for Llama
and Qwen2 models (``cascade.applies``); this benchmark switches it off for the other side.

One process, one thread (what a learner rank gets), the default job's model in the dtype
``model.dtype=auto`` picks, random token ids shaped like the panel call; the generic scorer and the
cascade alternate, each the median of ``repeats`` calls of ``score_batched`` at the CPU's token
budget (``monitor.score_tokens`` null). Reported: the medians, cascade / generic, and the largest
difference of the summed logprobs (float rounding only if both compute the same function).

Usage::

    python benchmarks/scorer_cascade.py            # ~1 min on 2 cores
    python benchmarks/scorer_cascade.py --quick

Writes ``benchmarks/results/scorer_cascade[.quick].json``. Run nothing else meanwhile.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"contexts": 32, "ctx_len": [400, 470], "continuations": 127, "cont_len": [20, 40],
        "repeats": 3}
QUICK = {"contexts": 8, "ctx_len": [200, 260], "continuations": 32, "cont_len": [10, 20],
         "repeats": 1}


def panel_items(rng: np.random.Generator, s: dict, vocab: int,
                ) -> list[tuple[list[int], list[list[int]]]]:
    """Every continuation under every context, as the later-turn panel scores them."""
    conts = [rng.integers(3, vocab, rng.integers(*s["cont_len"], endpoint=True)).tolist()
             for _ in range(s["continuations"])]
    return [(rng.integers(3, vocab, rng.integers(*s["ctx_len"], endpoint=True)).tolist(), conts)
            for _ in range(s["contexts"])]


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    import torch

    import ragen2.learner.scoring as scoring
    from ragen2.config import SCORE_TOKENS_CPU
    from ragen2.learner import cascade

    model, dtype, _ = common.rank_model()
    model.eval()
    items = panel_items(np.random.default_rng(0), s, model.config.vocab_size)
    applies = cascade.applies
    sides = {"today": lambda *a: False, "cascade": applies}  # today: the generic forward
    times: dict[str, list[float]] = {k: [] for k in sides}
    sums: dict[str, Any] = {}
    try:
        with torch.no_grad():
            if not applies(model, "cpu"):
                raise SystemExit("the cascade does not apply to the default job's model")
            for _ in range(s["repeats"] + 1):  # the first round warms up, untimed
                for name, side in sides.items():
                    cascade.applies = side
                    t0 = time.perf_counter()
                    out = scoring.score_batched(model, items, token_budget=SCORE_TOKENS_CPU)
                    times[name].append(time.perf_counter() - t0)
                    sums[name] = torch.cat([lp for lp, _ in out])
    finally:
        cascade.applies = applies
    tokens = torch.cat([n for _, n in out]).clamp(min=1)
    diff = (sums["cascade"] - sums["today"]).abs()
    med = {k: common.median(v[1:]) for k, v in times.items()}
    settings = {**s, "dtype": dtype, "threads": 1, "token_budget": SCORE_TOKENS_CPU,
                "commit": common.git_commit()}
    results = {"today_s": med["today"], "cascade_s": med["cascade"], "times": times,
               "pairs": int(len(diff)), "max_abs_logp_diff": float(diff.max()),
               "max_abs_logp_diff_per_token": float((diff / tokens).max()),
               "mean_abs_logp": float(sums["today"].abs().mean())}
    common.write_result("scorer_cascade", args, settings, results,
                        {"cascade_over_today": med["cascade"] / med["today"]},
                        {"cascade_over_today": "lower"})


if __name__ == "__main__":
    main()
