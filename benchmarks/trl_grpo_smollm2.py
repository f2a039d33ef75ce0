"""ragen2 vs TRL's ``GRPOTrainer`` on SmolLM2-135M-Instruct, one-digit Math in one answer: the time
per GRPO step and both learning curves, one side after the other in one sitting on this machine
(issue 46, item 5).

Run (nothing else on the machine; ~1.5 hours at 30 steps on a quiet 2-core AVX-512-BF16
machine, see "Time" below; TRL from the ``bench`` extra)::

    python benchmarks/trl_grpo.py --model smollm2 [--steps 30] [--seed 1] [--dtype auto]
                                  [--work-dir DIR]

writes ``benchmarks/results/trl_grpo_smollm2.json`` (every setting of both sides, the per-step
times and curves, the held-out results) and ``trl_grpo_smollm2.png``; run directories,
checkpoints (~3 GB) and evaluation outcomes go to ``--work-dir``
(``outputs/trl_grpo_smollm2/TIME``). The same command with the same ``--work-dir`` after a failure
resumes: each finished stage (the ragen2 run, TRL, each evaluation) is read back, not rerun; an
unfinished ragen2 run is refused (its step times would span two processes).

In order: (1) ragen2: ``python -m ragen2.train +experiment=smollm2_math`` with
``trl_grpo_settings.OVERRIDES`` (its own process: Ray, vLLM-CPU rollouts, one learner rank, weight
sync and probe every step); step time = ``timing/step_s`` (rollout, update, push and probe).
(2) TRL 1.16: ``GRPOTrainer`` in its own process; step time = the wall time of one generation and
its optimiser steps (``on_step_end`` marks, the first from ``on_train_begin``). (3) Held-out
success of the base model, ragen2's final checkpoint (exported to a model folder) and TRL's final
model, each by ragen2's own evaluation (:func:`ragen2.evaluate.evaluate_model`: the env's held-out
problems, ``ragen2.rollout.split``, 55 of them each once, temperature 0.5, the fixed evaluation
seed), paired problem by problem (``smollm2_learning.paired_gain``); ragen2's own evaluations at
steps 0 and N are kept as a cross-check. Step times are medians over steps 2.. (step 1 warms up).

Matched (``trl_grpo_settings.settings`` reads every value from the composed preset, and refuses a
config TRL cannot reproduce; the JSON states them all):

* model: the same local SmolLM2 directory (``resolve_model_path``), fp32 master weights and AdamW
  state on both sides; compute dtype the same, ``--dtype auto`` = ragen2's ``model.dtype=auto``
  here (bf16 on a CPU with avx512_bf16 / amx_bf16: both libraries compute bf16 on the CPU; fp32
  elsewhere), passed to both;
* problems and prompts: step s's 8 problems are the ones ragen2's ``RolloutSource.plan`` draws at
  step s (training part of the split, same seed), in its order (TRL: ``shuffle_dataset=False``);
  each prompt token for token as ragen2's runner renders it (the chat template, ``plain`` format),
  decoded to text that TRL's tokenisation gives back exactly (checked on TRL's own
  ``_tokenize_prompts`` before training and in the tests);
* reward and curve metrics: each TRL completion's token ids are replayed through ragen2's own
  episode runner (``run_episodes``): the env's reward, the -0.1 format penalty, success, and
  ``episode_stats`` for the curve, the same function as ragen2's ``rollout/*``;
* sampling: 8 x 8 = 64 replies a step, at most 128 new tokens, temperature 1, top-p 1, no top-k, no
  repetition penalty, stop at EOS only (``engine.stop=[]`` on ragen2's side: the preset's
  ``</answer>`` is never written in the plain format, and TRL's generate takes no stop strings);
* update: group-normalised advantages (unbiased std), PPO-clip 0.2 / 0.28 with dual clip 3 for
  negative advantages (TRL ``delta=3``: the same bound), token-mean, no KL, entropy bonus 0.001,
  one epoch of 2 optimiser steps per batch (random mini-batches of 32 rows; TRL
  ``steps_per_generation=4`` x 16 rows, ``gradient_accumulation_steps=2``), old logprobs by the
  learner, AdamW (0.9, 0.999, 1e-8) lr 1e-5 constant, no weight decay, gradient-norm clip 1.0.

Differs (neither library can be set to match):

* generation: vLLM-CPU (ragen2) vs transformers ``generate`` (TRL's vLLM modes need CUDA): other
  samplers, so the replies differ even from the same weights and seed;
* bf16: ragen2's learner casts parameters to bf16 (FSDP2 ``MixedPrecisionPolicy``) and vLLM runs
  bf16 weights; TRL autocasts (``bf16=True``: torch.autocast on the CPU, some ops kept fp32);
* advantage eps 1e-6 (ragen2) vs 1e-4 (TRL); TRL's token-mean divides by half the batch's tokens,
  ragen2's by each mini-batch's own; TRL's entropy term is a mean per 16-row micro-batch, ragen2's
  over the mini-batch; the mini-batch draws use different generators;
* speed only: ragen2 forwards each group's prompt once (shared prefix) and takes the first
  mini-batch's old logprobs from its own forward; TRL forwards every row in full, with an extra
  no-grad pass for the old logprobs; micro-batches of 4096 padded tokens vs 16 rows;
* off on ragen2's side for the comparison: the MI monitor (``monitor=none``; TRL has none; the
  preset runs it at steps 1, 10, 20, 30, ~75-95 s each); ragen2 also writes a checkpoint at the end
  (outside its step time) for the evaluation.

Time, measured (2026-12-06, 30 steps, bf16, a quiet 2-core AMD EPYC; ``trl_grpo_smollm2.json``):
the ragen2 side 17 min (steps 985 s), TRL 62 min (steps 3,700 s: its step follows its replies'
lengths, 50-192 s), the three evaluations 20-26 s each; ~80 minutes in all. The estimate before the
first run (30-60 min for TRL) was short.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from trl_grpo_settings import (DEFAULT_SEED, DEFAULT_STEPS, QUICK_STEPS,  # noqa: E402
                               Ragen2Episodes, Settings, load_settings, prompt_rows,
                               ragen2_reward, save_settings, settings, trl_config_kwargs)

NAME = "trl_grpo_smollm2"
EVALUATED = ("base", "ragen2", "trl")  # the held-out evaluations: the start, both final policies


def trl_side(work: Path) -> dict[str, Any]:
    """TRL's GRPOTrainer for ``steps`` generations; writes the final model to ``work/trl/final``."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ragen2.models.loading import load_causal_lm, load_tokenizer
    from ragen2.train import load_config

    s = load_settings(work)
    cfg = load_config(list(s.overrides))
    torch.set_num_threads(os.cpu_count() or 1)
    path = common.model_path(s.overrides)
    tok = load_tokenizer(path)
    rows, curve = prompt_rows(cfg, tok, s.steps), []

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.marks: list[float] = []
            self.logs: list[dict[str, Any]] = []

        def on_train_begin(self, args, state, control, **kw):
            self.marks = [time.perf_counter()]

        def on_step_end(self, args, state, control, **kw):
            self.marks.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs:
                self.logs.append({"optimizer_step": state.global_step, **logs})

    out = work / "trl"
    clock = Clock()
    args = GRPOConfig(output_dir=str(out / "trainer"), **trl_config_kwargs(s))
    trainer = GRPOTrainer(model=load_causal_lm(path, dtype="float32"),
                          reward_funcs=ragen2_reward(Ragen2Episodes(cfg, tok), curve), args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=tok,
                          callbacks=[clock])
    first = rows[:s.problems]  # TRL's own tokenisation of step 1's prompts
    if (trainer._tokenize_prompts([r["prompt"] for r in first])[0]
            != [r["ragen2_prompt_ids"] for r in first]):
        raise RuntimeError("TRL tokenises the prompts differently from ragen2's runner")
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    final = out / "final"
    trainer.accelerator.unwrap_model(trainer.model).save_pretrained(final, safe_serialization=True)
    tok.save_pretrained(final)  # as ragen2's export writes its tokenizer
    return {"step_s": step_times(clock.marks, s.ppo_mini_batches), "curve": curve,
            "logs": clock.logs, "train_s": train_s, "final_model": str(final),
            "grpo_config": args.to_dict()}


def step_times(marks: Sequence[float], per: int) -> list[float]:
    """Seconds of each generation and its ``per`` optimiser steps, from the start mark and the
    end mark of every optimiser step."""
    return [marks[k * per] - marks[(k - 1) * per] for k in range(1, (len(marks) - 1) // per + 1)]


def eval_side(work: Path, which: str) -> dict[str, Any]:
    """Held-out success of ``which`` (base | ragen2 | trl) by ragen2's evaluation, under the
    comparison's config."""
    from ragen2.evaluate import evaluate_model
    from ragen2.train import load_config

    s = load_settings(work)
    cfg = load_config(list(s.overrides))
    path = common.model_path(s.overrides)
    if which == "base":
        folder = path
    elif which == "ragen2":
        from ragen2.export import export_checkpoint, find_checkpoint

        folder = str(export_checkpoint(find_checkpoint(work / "ragen2"), work / "ragen2_final",
                                       cfg, path))
    elif which == "trl":
        folder = str(work / "trl" / "final")
    else:
        raise ValueError(f"eval of {which!r}: one of {EVALUATED}")
    out = work / "eval" / which
    return {"model": folder, "outcomes": str(out / "outcomes.jsonl"),
            **evaluate_model(cfg, folder, out)}


def child(work: Path, argv: Sequence[str], log: Path) -> dict[str, Any]:
    """``python this_file --child ARGV`` with its output in ``log``; its result (``result.json``
    beside the log) and how much CPU other processes took meanwhile."""
    result = log.with_suffix(".json")
    done = finished(log)
    if done is not None and result.exists():  # a resumed comparison
        print(f"{' '.join(argv)}: done before, read from {result}", flush=True)
        return {**json.loads(result.read_text()), "process": done}
    result.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--work", str(work), "--child", *argv]
    watched = common.run_watched(cmd, log, env=child_env(), cwd=common.ROOT)
    if watched["returncode"] or not result.exists():
        raise RuntimeError(f"{' '.join(argv)} exited {watched['returncode']}; see {log}")
    mark_finished(log, watched)
    return {**json.loads(result.read_text()), "process": watched}


def finished(log: Path) -> dict[str, Any] | None:
    """The process record of the stage logging to ``log`` if it finished (``mark_finished``)."""
    done = log.with_suffix(".process.json")
    return json.loads(done.read_text()) if done.exists() else None


def mark_finished(log: Path, watched: dict[str, Any]) -> None:
    """Record the stage logging to ``log`` as finished, with its process record."""
    log.with_suffix(".process.json").write_text(json.dumps(watched) + "\n")


def child_env() -> dict[str, str]:
    path = os.pathsep.join(p for p in [str(common.ROOT), os.environ.get("PYTHONPATH", "")] if p)
    return {**os.environ, "PYTHONPATH": path}


def ragen2_side(work: Path, s: Settings) -> dict[str, Any]:
    """``ragen2.train`` with the comparison's overrides into ``work/ragen2``; its metrics."""
    from ragen2.analysis.rollouts import load_metrics

    run_dir, log = work / "ragen2", work / "ragen2.log"
    cmd = [sys.executable, "-m", "ragen2.train", *s.overrides, f"hydra.run.dir={run_dir}"]
    watched = finished(log)
    if watched is not None:  # a resumed comparison: this side finished before
        print(f"ragen2: done before, read from {run_dir}", flush=True)
    else:
        if run_dir.exists():
            raise SystemExit(f"{run_dir} holds an unfinished ragen2 side (not marked finished): "
                             "its step times would not be one process's; give a new --work-dir")
        watched = common.run_watched(cmd, log, env=child_env(), cwd=common.ROOT)
        if watched["returncode"]:
            raise RuntimeError(f"ragen2 exited {watched['returncode']}; see {log}")
        mark_finished(log, watched)
    m = load_metrics(run_dir)
    steps = [k for k in sorted(m) if k > 0]
    keys = ("rollout/reward_mean", "rollout/success", "rollout/format_error_rate",
            "rollout/response_tokens_mean", "rollout/zero_std_group_frac")
    logs = ("actor/loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm",
            "actor/logprob_gap", "timing/generate_s", "timing/update_s", "timing/sync_s")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"run_dir": str(run_dir), "command": cmd, "process": watched,
            "step_s": [m[k]["timing/step_s"] for k in steps],
            "curve": [{k: m[st].get(k) for k in keys} for st in steps],
            "logs": [{"step": st, **{k: m[st].get(k) for k in logs}} for st in steps],
            "trainer_eval": {st: m[st]["eval/success"] for st in sorted(m)
                             if "eval/success" in m[st]},
            "wall_s": summary.get("wall_s")}


def run(args: Any) -> None:
    """The whole comparison (``trl_grpo.py --model smollm2``): both sides, the evaluations, the
    JSON and the plot."""
    from importlib.util import find_spec

    missing = [m for m in ("trl", "datasets") if find_spec(m) is None]
    if missing:  # before the ragen2 side's ~20 minutes
        raise SystemExit(f"{NAME} needs {' and '.join(missing)}: pip install -e '.[bench]'")
    steps = args.steps or (QUICK_STEPS if args.quick else DEFAULT_STEPS)
    s = settings(steps, DEFAULT_SEED if args.seed is None else args.seed, args.dtype or "auto")
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    work = open_work_dir(Path(args.work_dir or common.ROOT / "outputs" / NAME / stamp), s)
    path = common.model_path(s.overrides)  # SmolLM2 converted once, before anything is timed
    print(f"{NAME}: {steps} steps a side, dtype {s.dtype}, work dir {work}", flush=True)
    ours = ragen2_side(work, s)
    print(f"ragen2: median step {median_after_first(ours['step_s']):.1f} s", flush=True)
    trl = child(work, ["trl"], work / "trl.log")
    print(f"trl: median step {median_after_first(trl['step_s']):.1f} s", flush=True)
    evals = {w: child(work, ["eval", w], work / f"eval_{w}.log") for w in EVALUATED}
    held_out = held_out_results(evals)
    ratio = median_after_first(trl["step_s"]) / median_after_first(ours["step_s"])
    grpo_config = trl.pop("grpo_config")
    config = {"settings": asdict(s), "model_path": path, "commit": common.git_commit(),
              "ragen2": {"command": ours["command"]},
              "trl": {"GRPOConfig": {k: grpo_config.get(k) for k in trl_config_kwargs(s)},
                      "reward": "ragen2's run_episodes replaying each completion's token ids",
                      "generation": "transformers generate"},
              "evaluation": f"ragen2.evaluate.evaluate_model: {s.eval_episodes} held-out problems "
                            f"once each, temperature {s.eval_temperature}, fixed seed",
              "differs": DIFFERS}
    results = {"ragen2": ours, "trl": trl, "held_out": held_out,
               "step_s_median": {"ragen2": median_after_first(ours["step_s"]),
                                 "trl": median_after_first(trl["step_s"])},
               "steps_total_s": {"ragen2": sum(ours["step_s"]), "trl": sum(trl["step_s"])}}
    common.write_result(NAME, args, config, results, {"trl_over_ragen2": ratio},
                        {"trl_over_ragen2": "higher"})
    plot(results, s, Path(args.out_dir) / f"{NAME}{'.quick' if args.quick else ''}.png")


DIFFERS = [
    "generation: vLLM-CPU (ragen2) vs transformers generate (TRL): other samplers",
    "bf16 mechanism: ragen2 FSDP2 parameter cast + bf16 vLLM weights; TRL torch.autocast on the "
    "CPU (fp32 master weights on both)",
    "advantage eps 1e-6 (ragen2) vs 1e-4 (TRL)",
    "token-mean normaliser: each mini-batch's own tokens (ragen2) vs half the batch's (TRL dapo)",
    "entropy term: mini-batch token-mean (ragen2) vs per 16-row micro-batch mean (TRL)",
    "mini-batch draws from different generators",
    "speed only: ragen2's shared-prefix forward and free first old logprobs; TRL's full rows and "
    "an extra no-grad pass; micro-batches 4096 padded tokens vs 16 rows",
    "ragen2 side runs without its MI monitor (monitor=none) and writes one final checkpoint",
]


def open_work_dir(work: Path, s: Settings) -> Path:
    """``work`` with ``s`` saved in it; a folder that holds a comparison is resumed if its
    settings are ``s`` and refused otherwise."""
    if (work / "settings.json").exists():
        if json.loads((work / "settings.json").read_text()) != json.loads(json.dumps(asdict(s))):
            raise SystemExit(f"{work} holds a comparison with other settings "
                             f"({work / 'settings.json'}): give a new --work-dir or the same "
                             "--steps, --seed and --dtype")
        print(f"{NAME}: resuming {work}", flush=True)
        return work
    work.mkdir(parents=True, exist_ok=True)
    save_settings(work, s)
    return work


def median_after_first(xs: Sequence[float]) -> float:
    """The median step time over steps 2.. (all of them for a one-step run)."""
    return common.median(list(xs[1:]) or list(xs))


def held_out_results(evals: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Held-out success of each evaluated model, and paired gains problem by problem."""
    from smollm2_learning import paired_gain

    out: dict[str, Any] = {w: {k: v for k, v in e.items() if k.startswith("eval/") or k in
                               ("model", "outcomes", "process")} for w, e in evals.items()}
    files = {w: Path(e["outcomes"]) for w, e in evals.items()}
    out["gain"] = {side: paired_gain(files["base"], files[side]) for side in ("ragen2", "trl")}
    out["trl_minus_ragen2"] = paired_gain(files["ragen2"], files["trl"])
    return out


def plot(results: dict[str, Any], s: Settings, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for i, side in enumerate(("ragen2", "trl")):
        r, color = results[side], f"C{i}"
        steps = list(range(1, len(r["curve"]) + 1))
        ax.plot(steps, [c["rollout/reward_mean"] for c in r["curve"]], color=color, lw=1,
                alpha=0.7, label=f"{side}: mean training reward")
        g = results["held_out"]["gain"][side]  # paired: the same held-out problems
        ax.plot([0, s.steps], [g["before"], g["after"]], "o--", color=color,
                label=f"{side}: held-out success {g['before']:.2f} -> {g['after']:.2f}")
        for x, (lo, hi) in ((0, g["before_ci"]), (s.steps, g["after_ci"])):
            ax.plot([x, x], [lo, hi], color=color, lw=3, alpha=0.4)  # 95% Wilson
        bx.plot(steps, r["step_s"], "o-", color=color, ms=3,
                label=f"{side}: median {median_after_first(r['step_s']):.1f} s")
    ax.set(xlabel="RL step", ylabel="reward / success", ylim=(-0.1, 1),
           title=f"SmolLM2-135M-Instruct, one-digit Math ({s.problems} x {s.group_size} a step)")
    bx.set(xlabel="RL step", ylabel="seconds", title=f"time per GRPO step ({s.dtype}, this CPU)")
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", flush=True)


def child_main(argv: Sequence[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="a child process of the comparison (internal)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--child", nargs="+", required=True, metavar="SIDE")
    args = ap.parse_args(argv)
    side, *rest = args.child
    if side == "trl":
        result, log = trl_side(args.work), args.work / "trl.json"
    elif side == "eval" and len(rest) == 1:
        result, log = eval_side(args.work, rest[0]), args.work / f"eval_{rest[0]}.json"
    else:
        raise SystemExit(f"unknown child {args.child}")
    log.write_text(json.dumps(result, indent=1, default=str) + "\n")


if __name__ == "__main__":
    child_main()
