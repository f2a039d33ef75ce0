"""Peak host memory of the MI scorer (``ragen2.learner.scoring.score_continuations``) on the CPU.

The MI monitor, the probe panel and the action MI all teacher-force B continuations of width W
under one context on the learner. Scored at once, the logits are a (B, W, V) tensor, held several
times over (the model's output, a copy, the fp32 log-softmax): at Qwen2.5's 151,936-token
vocabulary and 64 x 400 tokens, ~16 GB per fp32 copy. Sliced by ``monitor.score_tokens`` the
logits held are at most ``score_tokens x V x (b + 8)`` bytes.

Each configuration runs in a fresh process on a random model of SmolLM2-135M's shape (vocabulary
49,152, hidden 576, GQA 9/3 heads, MLP 1536; ``--layers`` of its 30 blocks: the logits do not
depend on depth) in fp32: the peak is the kernel's high-water mark of the resident set
(``VmHWM``, reset through ``/proc/self/clear_refs`` right before scoring) minus the resident set
then. ``--rev REV`` also measures the scorer as committed at REV (e.g. the one before slicing),
loaded from git. The summed logprobs of every configuration must agree with the first's.

Usage::

    python benchmarks/scorer_memory.py [--rows 32 --width 128 --budgets 0 512 --rev REV]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from common import kib  # noqa: E402
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
               num_key_value_heads=3, tie_word_embeddings=True, max_position_embeddings=2048)


def measure(args: argparse.Namespace) -> dict:
    """In this process: build the model, score once, report the peak above the resident set."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=args.layers, **SMOLLM2)).eval()
    if args.rev:
        import importlib.util

        src = subprocess.run(["git", "show", f"{args.rev}:ragen2/learner/scoring.py"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        spec = importlib.util.spec_from_loader("scoring_at_rev", loader=None)
        mod = importlib.util.module_from_spec(spec)
        exec(compile(src, f"scoring.py@{args.rev}", "exec"), mod.__dict__)
        score = mod.score_continuations
        kwargs = {}
    else:
        from ragen2.learner.scoring import score_continuations as score

        kwargs = {"token_budget": args.budget}
    rng = np.random.default_rng(0)
    ctx = rng.integers(3, SMOLLM2["vocab_size"], args.context).tolist()
    conts = [rng.integers(3, SMOLLM2["vocab_size"], args.width - (i % 7)).tolist()
             for i in range(args.rows)]
    with torch.no_grad():
        score(model, ctx, conts[:2], **kwargs)  # allocator and kernels warmed up
        open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM
        base = kib("VmRSS")
        t0 = time.perf_counter()
        lp, n = score(model, ctx, conts, **kwargs)
        seconds = time.perf_counter() - t0
        peak = kib("VmHWM")
    return {"peak_mb": round((peak - base) / 1024, 1), "seconds": round(seconds, 2),
            "logp_sum": [float(x) for x in lp], "tokens": int(n.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--budgets", type=int, nargs="+", default=[0, 512])
    ap.add_argument("--rev", default=None, help="also measure scoring.py as committed at REV")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    runs = ([("rev " + args.rev, ["--rev", args.rev])] if args.rev else []) + \
        [(f"score_tokens={b}" if b else "score_tokens=0 (all rows at once)", ["--budget", str(b)])
         for b in args.budgets]
    common = ["--rows", str(args.rows), "--width", str(args.width), "--context",
              str(args.context), "--layers", str(args.layers)]
    results, ref = {}, None
    for name, extra in runs:
        out = subprocess.run([sys.executable, __file__, "--child", *common, *extra], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        lp = r.pop("logp_sum")
        ref = ref or lp
        r["max_logp_diff"] = max(abs(a - b) for a, b in zip(lp, ref))
        results[name] = r
        print(name, r, flush=True)
    logits_mb = args.rows * args.width * SMOLLM2["vocab_size"] * 4 / 2**20
    summary = {"rows": args.rows, "width": args.width, "vocab": SMOLLM2["vocab_size"],
               "layers": args.layers, "fp32_logits_one_copy_mb": round(logits_mb, 1),
               "runs": results}
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
