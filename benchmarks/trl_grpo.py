"""ragen2 vs TRL's ``GRPOTrainer``: time per GRPO step on the same tiny model and task, on this CPU.

Task: ``ragen2/Math-v0`` single turn (one answer per problem), the tiny model built for it,
random-initialised (no warm start on either side), fp32. One step on both sides: 8 problems x 4
samples of at most 40 new tokens at temperature 1, rewards (the env's reward; -0.1 for a reply
that does not parse), group-normalised advantages, token-mean PPO-clip (eps 0.2 / 0.28), no KL,
one AdamW step (lr 5e-4, gradient clip 1.0) over micro-batches of 16.

* ragen2: its default stack (Ray, the vLLM rollout worker, two FSDP2 learner ranks, weight sync
  and probe every step) with ``env=math rollout.max_turns=1 trainer.warm_start.enabled=false
  monitor=none algorithm.ppo_mini_batches=1``; step time = ``Controller.train_step`` wall time.
* TRL: ``GRPOTrainer`` in its own process with its default generation (transformers'
  ``generate``; TRL's vLLM modes need CUDA), prompts rendered by ragen2's chat template (the same
  token ids), the reward from the same env; ``per_device_train_batch_size=16``,
  ``gradient_accumulation_steps=2`` (one generation of 32 completions per optimiser step);
  step time = wall time between consecutive ``on_step_end`` callbacks.

Medians over steps 2.. (step 1 is a warm-up). Goal: TRL / ragen2 step time >= 1.5. TRL is not a
ragen2 dependency: it comes with the ``bench`` extra.

Both sides do the same update maths; where ragen2 saves: vLLM generation, and the learner's
shared-prefix forward (each group's ~195-token prompt forwarded once, not once per sample; TRL
forwards all 32 rows in full). Profiled before that forward existed, the update was 60% of
ragen2's step (0.53 of 0.88 s) and the ratio 1.1.

Usage::

    python benchmarks/trl_grpo.py [--quick] [--steps N]

``--model smollm2`` runs the other comparison, on SmolLM2-135M-Instruct with both learning
curves (``trl_grpo_smollm2.py``: what it matches and what differs; results in
``trl_grpo_smollm2.json``, this model's ``trl.json`` untouched)::

    python benchmarks/trl_grpo.py --model smollm2 [--steps 30] [--seed 1] [--dtype auto]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"steps": 6, "prompts": 8, "group_size": 4, "max_new_tokens": 40, "micro_batch": 16,
        "lr": 5e-4}
QUICK = {**FULL, "steps": 3}
RAGEN2 = ["env=math", "rollout.max_turns=1", "trainer.warm_start.enabled=false", "monitor=none",
          "algorithm.ppo_mini_batches=1"]


def ragen2_side(s: dict) -> dict:
    overrides = [*RAGEN2, f"rollout.env_groups={s['prompts']}", f"rollout.group_size={s['group_size']}",
                 f"engine.max_new_tokens={s['max_new_tokens']}",
                 f"algorithm.micro_batch_size={s['micro_batch']}", f"algorithm.lr={s['lr']}",
                 "algorithm.lr_warmup_steps=1", "algorithm.dual_clip_c=null"]
    with common.controller(overrides) as ctl:
        rows = common.interleaved_steps(ctl, {"ragen2": lambda _: None}, s["steps"])["ragen2"]
    return {"step_s": common.median([r["wall_s"] for r in rows]),
            "completion_tokens_mean": common.median([r["rollout/response_tokens_mean"] for r in rows]),
            "overrides": overrides, "samples": [r["wall_s"] for r in rows]}


def trl_side(s: dict) -> dict:
    """Runs in a subprocess (no Ray, its own torch threads)."""
    import tempfile

    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ragen2.models.loading import load_causal_lm, load_tokenizer
    from ragen2.rollout.chat import ChatRenderer, system_prompt
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.parsing import parse_response
    from ragen2.rollout.runner import env_instructions

    torch.set_num_threads(os.cpu_count() or 1)
    path = common.model_path(["env=math"])
    tok = load_tokenizer(path)
    renderer, env = ChatRenderer(tok), make_env("ragen2/Math-v0", {})
    rows = []
    for seed in range(s["prompts"] * s["steps"]):
        obs, info = env.reset(seed=seed)
        ids = renderer.initial_prompt(system_prompt(env_instructions(env, info)), obs)
        rows.append({"prompt": tok.decode(ids, skip_special_tokens=False), "seed": seed})
    eos_text = tok.decode([tok.eos_token_id])

    def reward(prompts, completions, seed, **_):
        out = []
        for text, sd in zip(completions, seed):
            parsed = parse_response(text, eos_text)
            if not parsed.format_ok:
                out.append(-0.1)
                continue
            env.reset(seed=sd)
            out.append(float(env.step(parsed.answer)[1]))
        return out

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.last, self.times, self.lengths = time.perf_counter(), [], []

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            self.times.append(now - self.last)
            self.last = now

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    timer = StepTimes()
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out, per_device_train_batch_size=s["micro_batch"],
            gradient_accumulation_steps=s["prompts"] * s["group_size"] // s["micro_batch"],
            num_generations=s["group_size"], max_completion_length=s["max_new_tokens"],
            temperature=1.0, top_p=1.0, top_k=0, learning_rate=s["lr"],
            lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=1.0, weight_decay=0.0,
            beta=0.0, loss_type="dapo", epsilon=0.2, epsilon_high=0.28, num_iterations=1,
            max_steps=s["steps"], use_cpu=True, bf16=False, fp16=False, logging_steps=1,
            report_to="none", save_strategy="no", seed=0, shuffle_dataset=False,
            disable_dropout=True)
        trainer = GRPOTrainer(model=load_causal_lm(path, dtype="float32"), reward_funcs=reward,
                              args=cfg, train_dataset=Dataset.from_list(rows),
                              processing_class=tok, callbacks=[timer])
        timer.last = time.perf_counter()
        trainer.train()
    steps = timer.times[1:]
    return {"step_s": common.median(steps),
            "completion_tokens_mean": common.median(timer.lengths[1:] or [float("nan")]),
            "samples": steps}


MODELS = ("tiny", "smollm2")
SMOLLM2_ONLY = ("seed", "dtype", "work_dir")


def positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not >= 1")
    return n


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", choices=MODELS, default="tiny",
                    help="tiny: step time on the random-initialised tiny model (trl.json); "
                         "smollm2: SmolLM2-135M-Instruct, step time and learning curves "
                         "(trl_grpo_smollm2.json, trl_grpo_smollm2.py)")
    ap.add_argument("--steps", type=positive_int, default=None,
                    help="GRPO steps on each side (tiny: 6, --quick 3; smollm2: 30, --quick 3)")
    ap.add_argument("--seed", type=int, default=None, help="smollm2: both sides' seed (1)")
    ap.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default=None,
                    help="smollm2: both sides' compute dtype; auto (the default): ragen2's "
                         "model.dtype=auto on this CPU (bf16 with avx512_bf16 / amx_bf16)")
    ap.add_argument("--work-dir", default=None,
                    help="smollm2: run directories, checkpoints and evaluations "
                         "(default outputs/trl_grpo_smollm2/TIME)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; a bad ``--model`` (or a SmolLM2-only option with the tiny model) exits
    with status 2 and the reason."""
    args = common.parse_args(__doc__, options, argv)
    given = [f"--{k.replace('_', '-')}" for k in SMOLLM2_ONLY if getattr(args, k) is not None]
    if args.model == "tiny" and given:
        print(f"trl_grpo.py: error: {', '.join(given)} only with --model smollm2", file=sys.stderr)
        raise SystemExit(2)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.model == "smollm2":
        import trl_grpo_smollm2

        trl_grpo_smollm2.run(args)
        return
    s = {**(QUICK if args.quick else FULL), **({"steps": args.steps} if args.steps else {})}
    if args.child:
        common.emit(trl_side(s))
        return
    common.model_path(["env=math"])
    trl = common.run_child([__file__, "--child"] + (["--quick"] if args.quick else [])
                           + ([f"--steps={args.steps}"] if args.steps else []))
    print("trl", {k: v for k, v in trl.items() if k != "samples"}, flush=True)
    ours = ragen2_side(s)
    print("ragen2", {k: v for k, v in ours.items() if k != "samples"}, flush=True)
    ratios = {"trl_over_ragen2": trl["step_s"] / ours["step_s"]}
    common.write_result("trl", args, {**s, "ragen2_overrides": ours.pop("overrides"),
                                      "trl": "GRPOTrainer, transformers generate, fp32, CPU"},
                        {"ragen2": ours, "trl": trl}, ratios, {"trl_over_ragen2": "higher"},
                        {"trl_over_ragen2": ">= 1.5"})


if __name__ == "__main__":
    main()
