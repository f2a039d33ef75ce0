"""``ragen2 eval``: held-out success of a checkpoint or a model, without training.

The protocol is the trainer's own evaluation (:meth:`ragen2.controller.evaluation.Evaluator.evaluate`):
``trainer.eval_episodes`` episodes on held-out problems (:mod:`ragen2.rollout.split`: never trained
on; distinct problems where the env enumerates its space) of ``env.eval`` (or the training envs),
sampled at ``engine.eval_temperature`` with the fixed
evaluation sampling seed, by one rollout worker in this process (no Ray, no learner). A checkpoint
is first exported to a model folder (:mod:`ragen2.export`) and evaluated under its run's config;
a model is evaluated under the config the overrides compose (``model=smollm2``,
``model=hf model.path=DIR``). The result goes to ``OUT/eval.json`` with a few episodes as text in
``OUT/samples.jsonl`` and every episode's outcome in ``OUT/outcomes.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

PROG = "ragen2 eval"
log = logging.getLogger("ragen2")


def evaluate_model(cfg, model_path: str, out: str | Path) -> dict[str, float]:  # noqa: ANN001
    """Evaluate the model at ``model_path`` under ``cfg``'s evaluation settings; writes
    ``out/eval.json``, ``out/samples.jsonl`` and ``out/outcomes.jsonl`` and returns the ``eval/*`` metrics."""
    from ragen2 import seeding
    from ragen2.controller.episodes import check_env_errors, rollout_metrics
    from ragen2.rollout.archive import save_outcomes, spread
    from ragen2.rollout.envs import eval_entries
    from ragen2.rollout.split import ProblemSplit, check_split
    from ragen2.rollout.worker import RolloutWorker

    t0 = time.perf_counter()
    check_split(cfg.env, cfg.trainer.eval_episodes)
    entries = eval_entries(cfg.env)
    n = cfg.trainer.eval_episodes
    split = ProblemSplit(entries, cfg.env.heldout_fraction)
    specs = split.eval_specs(entries, n)
    split.close()
    worker = RolloutWorker(cfg, model_path, 0)
    trajs, _ = worker.rollout(specs, seeding.eval_sampling_seed(0),
                              worker.engine.policy_version, evaluation=True)
    check_env_errors(trajs, cfg.rollout.max_env_error_frac, "evaluation")
    metrics = rollout_metrics(trajs, "eval", per_env=len(entries) > 1)
    metrics["timing/eval_s"] = time.perf_counter() - t0
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "samples.jsonl", "w") as f:
        for t in spread(trajs, cfg.trainer.log_samples):
            f.write(json.dumps(t.as_text_record()) + "\n")
    save_outcomes(out / "outcomes.jsonl", trajs)
    (out / "eval.json").write_text(json.dumps({"model": model_path, "episodes": n, **metrics},
                                              indent=1, sort_keys=True) + "\n")
    return metrics


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Evaluate a checkpoint or a model on held-out problems, without "
        "training (the trainer's own evaluation protocol).",
        epilog="examples: ragen2 eval --checkpoint outputs/DATE/TIME  |  ragen2 eval model=hf "
               "model.path=/models/Qwen2.5-0.5B-Instruct env=sokoban trainer.eval_episodes=64")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="a checkpoint directory or a run directory (its latest checkpoint); "
                        "without it, the model the overrides name is evaluated")
    p.add_argument("--out", type=Path, default=None,
                   help="where eval.json and samples.jsonl go (default: eval/ in the checkpoint's "
                        "run directory, else ./eval)")
    p.add_argument("overrides", nargs="*",
                   help="config overrides (on top of the run's own for a checkpoint), e.g. "
                        "trainer.eval_episodes=512 engine=hf")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ragen2.config import ConfigError
    from ragen2.export import ExportError, export_checkpoint, find_checkpoint, run_config, run_dir_of
    from ragen2.rollout.envs import EnvSpecError
    from ragen2.train import load_config, resolve_model_path

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.checkpoint is not None:
            ckpt = find_checkpoint(args.checkpoint)
            cfg = run_config(ckpt, args.overrides)
            out = args.out or run_dir_of(ckpt) / "eval" / ckpt.name
            with tempfile.TemporaryDirectory(prefix="ragen2-eval-") as tmp:
                folder = export_checkpoint(ckpt, tmp, cfg, resolve_model_path(cfg))
                m = evaluate_model(cfg, str(folder), out)
            what = str(ckpt)
        else:
            cfg = load_config(args.overrides)
            out = args.out or Path("eval")
            what = resolve_model_path(cfg)
            m = evaluate_model(cfg, what, out)
    except (ExportError, ConfigError, EnvSpecError, FileNotFoundError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"{what}: held-out success {m['eval/success']:.3f} over {cfg.trainer.eval_episodes} "
          f"episodes (format errors {m['eval/format_error_rate']:.3f}); wrote {out}/eval.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
