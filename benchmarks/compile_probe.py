"""Would ``torch.compile`` pay for the learner? A probe for issue 44's next cut, not a setting.

The learner's update and the warm start run the tiny model's forward and backward. Profiled in
the default job (py-spy, 2026-12-07), the matmuls are a small part of them: most of the time goes
to elementwise kernels (RMSNorm in fp32, rotary embeddings, SiLU, residual adds, dtype copies)
and SDPA's CPU flash-attention kernels, each pass reading and writing the activations again. A
compiler that fuses those passes is the lever the profile points at; this script measures what
it would give on this machine before any of the learner is changed.

One process, one thread (what a learner rank of the default job gets), the default job's model with
its parameters in the dtype ``model.dtype=auto`` picks (the learner keeps fp32 master weights and
computes in that dtype through FSDP: the forward and backward timed here run in it either way),
SDPA attention. A training step is a forward from the first trained column on
(``logits_to_keep``), log-softmax and gather, a token-mean loss, the backward and AdamW, on
``FULL["rows"]`` right-padded rows whose lengths are drawn anew each step from the default job's
range (so the compiled model sees new shapes, as the update does). The eager
and the compiled model start from the same weights; they alternate step by step after the
compiled one's first call (the compilation, timed on its own). Reported: the median step of
each, compiled / eager, the compilation's seconds and the number of steps it takes to pay back,
and how far the compiled model's first-step logprobs are from the eager ones (float rounding
only if the two compute the same function).

Usage::

    python benchmarks/compile_probe.py            # ~2 min on 2 cores
    python benchmarks/compile_probe.py --quick

Writes ``benchmarks/results/compile_probe[.quick].json``. Run nothing else meanwhile.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"rows": 16, "min_len": 300, "max_len": 480, "prompt": 43, "steps": 8}
QUICK = {"rows": 8, "min_len": 120, "max_len": 200, "prompt": 43, "steps": 3}


def make_rows(rng: np.random.Generator, s: dict, vocab: int) -> tuple[Any, Any, Any]:
    """(ids, attention mask, loss mask), each (rows, longest row): right-padded rows of random
    length, the loss on the tokens after the prompt."""
    import torch

    lens = rng.integers(s["min_len"], s["max_len"] + 1, s["rows"])
    width = int(lens.max())
    pos = np.arange(width)[None]
    attn = (pos < lens[:, None]).astype(np.int64)
    ids = rng.integers(3, vocab, (s["rows"], width)) * attn
    mask = attn * (pos >= s["prompt"])
    return (torch.from_numpy(ids), torch.from_numpy(attn), torch.from_numpy(mask))


def logprobs(model: Any, ids: Any, mask: Any) -> Any:
    """(rows, T - first) logprobs of the trained columns on (causal attention, no mask: the
    rows are right-padded, as the learner runs them)."""
    import torch

    first = 1 + int(torch.nonzero(mask[:, 1:].any(0))[0])
    keep = ids.shape[1] - first + 1
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=keep).logits[:, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, first:, None]).squeeze(-1)


def train_step(model: Any, optim: Any, batch: tuple[Any, Any, Any]) -> Any:
    ids, _, mask = batch
    lp = logprobs(model, ids, mask)
    m = mask[:, -lp.shape[1]:].float()
    loss = -(lp * m).sum() / m.sum()
    loss.backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    return lp.detach()


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    import torch

    eager, dtype, path = common.rank_model()
    compiled_src = copy.deepcopy(eager)
    compiled = torch.compile(compiled_src, dynamic=True)
    opt = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in
           (("eager", eager), ("compiled", compiled_src))}
    vocab = eager.config.vocab_size
    rng = np.random.default_rng(0)

    first = make_rows(rng, s, vocab)
    t0 = time.perf_counter()
    lp_eager = train_step(eager, opt["eager"], first)
    eager_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    lp_comp = train_step(compiled, opt["compiled"], first)
    compile_s = time.perf_counter() - t0
    diff = float((lp_eager - lp_comp).abs().max())

    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    tokens = []
    for _ in range(s["steps"]):
        batch = make_rows(rng, s, vocab)
        tokens.append(int(batch[1].sum()))
        for name, model in (("eager", eager), ("compiled", compiled)):
            t0 = time.perf_counter()
            train_step(model, opt[name], batch)
            times[name].append(time.perf_counter() - t0)
    e, c = common.median(times["eager"]), common.median(times["compiled"])
    saving = e - c
    results = {"eager_step_s": e, "compiled_step_s": c, "compile_s": compile_s,
               "eager_first_step_s": eager_first, "steps_to_pay_back":
               (compile_s - eager_first) / saving if saving > 0 else None,
               "max_abs_logprob_diff": diff, "tokens_per_step": tokens, "samples": times}
    settings = {**s, "dtype": dtype, "threads": 1, "attn_implementation": "sdpa",
                "torch_compile": {"dynamic": True}, "model": path}
    print(f"eager {e:.3f} s a step, compiled {c:.3f} s (x{c / e:.2f}); compilation {compile_s:.1f} s;"
          f" max |logprob diff| {diff:.2e}", flush=True)
    common.write_result("compile_probe", args, settings, results,
                        {"compiled_over_eager": c / e}, {"compiled_over_eager": "lower"}, {})


if __name__ == "__main__":
    main()
