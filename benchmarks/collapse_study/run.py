"""The collapse study: RAGEN-2's signature in miniature on the CPU (tiny model, FrozenLake, Sokoban).

Three designs (``--design``):

* ``v3`` (README "Study 3", pre-registered 2026-12-04; results in ``results_v3/``): a dose series
  of the entropy bonus (0, c_low, c_high from the pilot's ``results_v3/doses.json``), each without
  a filter and with RAGEN-2's top-p, 4 seeds, 100 steps, resumable from checkpoints; ``--pilot``
  runs the registered dose pilot, ``--screen`` the warm-start screen that picks the 4 counted
  seeds (``results_v3/screen.json``), ``--dry-run`` prints every command in order. Its code:
  ``study3.py`` (arms, order, pilot, runner), ``study3_analysis.py`` (the registered rules),
  ``study3_report.py`` (results.json, tables.md, curves, examples).

* ``v2`` (default; pre-registered in README.md "Study 2", results in ``results_v2/``): today's
  default job (16 groups x 4 rollouts, 3-epoch warm start), five arms -- ``none``, ``top_p``
  (``filter=ragen2_paper``, RAGEN-2's top-p), ``none_ent`` and ``top_p_ent`` (the same with the
  entropy bonus :data:`ENTROPY_COEF`, chosen by the gradient-SNR measurement ``--measure-entropy``)
  and ``tiered`` -- on seeds k = 0, 1, 2, each run with warm-start seed k and RL seed k (every arm
  of a seed starts from the same warm start: arms are compared seed by seed). 40 steps, held-out
  success every 10 steps on 128 episodes, the MI monitor and its probe panels (first turn and
  later turns) every 5, the gradient-SNR diagnostic every 5, every batch saved. The hypotheses
  (:data:`HYPOTHESES`) are evaluated by :mod:`ragen2.analysis.hypotheses`.
* ``v1``: the study committed on 2026-11-30 in ``results/`` (superseded; README "Study 1"):
  8 groups, 1-epoch warm start, arms none / top_p / tiered (+ reg), one warm start for all.

Every run is ``ragen2-train`` in its own process. Caches are cold: each seed's caches (tiny
model, warm start, vLLM, inductor) live in a fresh folder under ``--cache-root`` emptied when an
invocation starts, so the first run of a seed in a sitting builds its warm start and the seed's
other arms load it (``warm_start_built`` in each run's row); ``--quick`` (the CI smoke) uses the
caller's caches instead. Runs already recorded in
``results.json`` with exit 0, the same overrides and a ``summary.json`` are skipped (``--rerun``
repeats them), so one study is gathered over several sittings; ``results.json`` is rewritten after
every run. A run interrupted mid-way is started again from scratch.

Usage::

    python benchmarks/collapse_study/run.py --measure-entropy   # the gradient-SNR measurement
    python benchmarks/collapse_study/run.py                 # v2: 5 arms x 3 seeds x 40 steps
    python benchmarks/collapse_study/run.py --variant sokoban --arms none   # Sokoban, tiny model
    python benchmarks/collapse_study/run.py --quick         # 3 arms x 1 seed x 2 steps (smoke test)
    python benchmarks/collapse_study/run.py --analyze-only  # redo the analysis of existing runs
    python benchmarks/collapse_study/run.py --design v1     # the superseded 2026-11-30 study
    python benchmarks/collapse_study/run.py --design v3 --pilot     # Study 3's dose pilot
    python benchmarks/collapse_study/run.py --design v3 --screen    # Study 3's warm-start screen
    python benchmarks/collapse_study/run.py --design v3 --dry-run   # Study 3's commands, in order
    python benchmarks/collapse_study/run.py --design v3             # Study 3's counted runs
    python benchmarks/collapse_study/run.py --design v3 --report    # its ragen2 sweep report
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from common import git_commit, run_watched  # noqa: E402  (benchmarks/common.py)
from robustness import cold_env  # noqa: E402  (benchmarks/robustness.py: every cache under one folder)

#: a run whose wall time others shared by more than this many cores on average is not counted
#: in the step-time hypotheses (H4); its other figures do not depend on the machine's load
QUIET_CORES = 0.1

#: the entropy bonus of the ``*_ent`` arms: the smallest coefficient at which the entropy term's
#: gradient norm in zero-spread groups reaches the task gradient norm of the highest-spread bucket
#: at the warm start (README "Study 2", measured by ``--measure-entropy``: per seed 0.3155,
#: 0.2805, 0.2300, median 0.2805, rounded up to 2 significant digits; results_v2/entropy_coef.json).
#: None would make the ``*_ent`` arms refuse to run.
ENTROPY_COEF: float | None = 0.29


def _ent() -> str:
    if ENTROPY_COEF is None:
        raise SystemExit("ENTROPY_COEF is not set: run --measure-entropy first and commit its value "
                         "(README 'Study 2', the pre-registered rule)")
    return f"algorithm.entropy_coef={ENTROPY_COEF}"


#: Deviation from the pre-registration (README "Study 2", decided 2026-12-03 after top_p_ent seed
#: 0, before any other top_p_ent run): the bonus turned the text into noise, every group's rewards
#: were all 0, the top-p filter kept no group for 5 steps in a row and the trainer's guard
#: (trainer.max_skipped_steps=5) stopped the run at step 10 with exit 1. A step that keeps no group
#: applies no update, so letting the run go on changes no weight: it only keeps measuring the same
#: policy to step 40, as every other run is measured. Only the filtered arms can skip steps.
NEVER_STOP_ON_EMPTY_FILTER = "trainer.max_skipped_steps=1000"

#: RAGEN-2's entropy bonus (its Sokoban runs: retrieval 0.73 -> ~0.2 by step 40 under it)
PAPER_ENTROPY_COEF = 0.003

#: arm -> its overrides (a callable: evaluated when the arm runs)
ARMS_V2 = {"none": lambda: ["filter=none"],
           "top_p": lambda: ["filter=ragen2_paper"],
           "none_ent": lambda: ["filter=none", _ent()],
           "top_p_ent": lambda: ["filter=ragen2_paper", _ent(), NEVER_STOP_ON_EMPTY_FILTER],
           "tiered": lambda: ["filter=tiered"],
           # exploratory, no verdict (README "Study 2", deviation of the second sitting): the
           # registered bonus left no reasoning to measure by step 10 in every bonus run, so H1
           # is read descriptively at RAGEN-2's own coefficient; run with --arms none_ent_paper
           "none_ent_paper": lambda: ["filter=none", f"algorithm.entropy_coef={PAPER_ENTROPY_COEF}"],
           # and a tenth of c: between the paper's bonus and the one that destroyed the format
           "none_ent_tenth": lambda: ["filter=none", f"algorithm.entropy_coef={ENTROPY_COEF / 10:.3g}"]}
#: the arms a plain invocation runs (the pre-registered five)
REGISTERED_V2 = ["none", "top_p", "none_ent", "top_p_ent", "tiered"]
ARMS_V1 = {"none": lambda: ["filter=none"], "top_p": lambda: ["filter=top_p"],
           "tiered": lambda: ["filter=tiered"],
           # strong input-agnostic regularisers (an entropy bonus and a KL pull to the warm start)
           "reg": lambda: ["filter=none", "algorithm.entropy_coef=0.05", "algorithm.kl_coef=0.1"]}
#: the task every arm trains on: overrides added to every run (``--variant``)
VARIANTS = {
    "default": [],  # the default job: FrozenLake 4x4, fixed start and goal
    # v1 only: start and goal drawn per seed and stated in the prompt, and a warm start long enough
    # for the tiny model to copy them into its reasoning: first-turn MI starts at its bound log N
    "random_start": ["env.kwargs.random_start_goal=true", "trainer.warm_start.episodes=2048",
                     "trainer.warm_start.epochs=2", "trainer.warm_start.batch_size=16",
                     "trainer.warm_start.lr=3e-3", "trainer.warm_start.random_action_prob=0"],
    "sokoban": ["env=sokoban"],  # v2: text Sokoban (env/sokoban.yaml), the tiny model's recipe
}
DESIGNS = {
    "v2": {"arms": ARMS_V2, "default_arms": REGISTERED_V2, "results": "results_v2",
           "full": {"steps": 40, "eval_every": 10, "eval_episodes": 128, "monitor_every": 5,
                    "grad_snr_every": 5, "seeds": [0, 1, 2]},
           # today's default job; each seed k its own warm start (warm-start seed k, RL seed k)
           "base": [], "warm_seed": True},
    "v1": {"arms": ARMS_V1, "default_arms": ["none", "top_p", "tiered"], "results": "results",
           "full": {"steps": 40, "eval_every": 10, "eval_episodes": 128, "monitor_every": 5,
                    "seeds": [0, 1, 2]},
           # the default job's batch and warm start as they were on 2026-11-30 (issue 14 then made
           # the default 16 groups and 3 warm-start epochs); one warm start (seed 0) for every run
           "base": ["rollout.env_groups=8", "trainer.warm_start.epochs=1"], "warm_seed": False},
}
# the CI smoke test of this script: three kinds of arm and the whole analysis, at the smallest
# budget that still has a warm-started policy and a probe panel to measure
QUICK = {"steps": 2, "eval_every": 1, "eval_episodes": 8, "monitor_every": 1, "grad_snr_every": 1,
         "seeds": [0], "arms": ["none", "top_p", "tiered"],
         "extra": ["trainer.warm_start.episodes=64", "monitor.panel_size=4",
                   "monitor.panel_samples=2"]}


def hypotheses():
    """Study 2's pre-registered hypotheses (README "Study 2"; the same text, as code)."""
    from ragen2.analysis.hypotheses import Change, Ratio, Tracks

    mi = "panel_turns_mi"  # the primary instrument: the later-turn probe panel (fixed states)
    return [
        Change("H1a", "under the entropy bonus, the unfiltered arm's later-turn panel MI falls "
               "more than without it", arm="none_ent", baseline="none", metric=mi,
               direction="negative"),
        Change("H1b", "under the entropy bonus, the unfiltered arm's later-turn retrieval@1 "
               "(training batch) falls more than without it", arm="none_ent", baseline="none",
               metric="turns_retrieval", direction="negative"),
        Change("H1c", "under the entropy bonus, the unfiltered arm's token entropy falls "
               "(H1 predicts it does not: 'supported' here would go against H1)",
               arm="none_ent", metric="token_entropy", direction="negative"),
        Change("H2a", "under the same bonus, the paper's top-p filter holds the later-turn panel "
               "MI better than no filter", arm="top_p_ent", baseline="none_ent", metric=mi,
               direction="positive"),
        Change("H2b", "under the same bonus, top-p holds later-turn retrieval@1 better than no "
               "filter", arm="top_p_ent", baseline="none_ent", metric="turns_retrieval",
               direction="positive"),
        Tracks("H3a", "the later-turn panel MI tracks held-out success better than token "
               "entropy does (per run: rho(MI, success) - |rho(entropy, success)|)",
               x=mi, than="token_entropy"),
        Tracks("H3b", "later-turn retrieval@1 tracks held-out success better than token entropy",
               x="turns_retrieval", than="token_entropy"),
        Ratio("H4a", "top-p filtering shortens steps (no bonus)", arm="top_p", baseline="none"),
        Ratio("H4b", "top-p filtering shortens steps (with the bonus)", arm="top_p_ent",
              baseline="none_ent"),
    ]


def overrides(arm: str, seed: int, s: dict) -> list[str]:
    d = DESIGNS[s["design"]]
    seeds = [f"seed={seed}"] + ([f"trainer.warm_start.seed={seed}"] if d["warm_seed"] else [])
    grad = [f"monitor.grad_snr_every={s['grad_snr_every']}"] if s.get("grad_snr_every") else []
    return [*d["base"], *VARIANTS[s["variant"]], *d["arms"][arm](), *seeds,
            f"trainer.total_steps={s['steps']}",
            f"trainer.eval_every={s['eval_every']}", f"trainer.eval_episodes={s['eval_episodes']}",
            f"monitor.every={s['monitor_every']}", *grad, "trainer.save_every=0",
            "trainer.save_rollouts_every=1", "trainer.loggers=[jsonl]", *s.get("extra", [])]


def study_env(cache: Path | None) -> dict[str, str]:
    """A run's environment: every cache under ``cache`` (:func:`robustness.cold_env`; ``None``, as
    ``--quick`` does: the caller's own caches, so the CI smoke reuses the test session's tiny model
    and vLLM compile cache), and Ray's workers at niceness 0 instead of Ray's default 15, so niced
    work elsewhere on the machine takes only idle CPU from the run (the figures do not depend on
    it; the step times do)."""
    env = (cold_env(cache) if cache is not None
           else {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"})
    return {**env, "RAY_worker_niceness": "0"}


def run_one(arm: str, seed: int, s: dict, run_dir: Path, cache: Path | None) -> dict:
    """``ragen2-train`` in a subprocess (its own Ray session, caches under ``cache``); returns its
    bookkeeping row (wall time, exit code, whether it built the warm start)."""
    cmd = [str(Path(sys.executable).with_name("ragen2-train")), *overrides(arm, seed, s),
           f"hydra.run.dir={run_dir}"]
    if run_dir.exists():  # an interrupted earlier attempt: start again
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    w = run_watched(cmd, run_dir.parent / f"{run_dir.name}.log", env=study_env(cache), cwd=ROOT)
    rc, wall = w["returncode"], w["wall_s"]
    step0 = {}
    if (run_dir / "metrics.jsonl").exists():
        first = (run_dir / "metrics.jsonl").read_text().split("\n", 1)[0]
        step0 = json.loads(first) if first.strip() else {}
    built = step0.get("warm_start/cached") == 0.0 if "warm_start/cached" in step0 else None
    print(f"  {arm} seed {seed}: exit {rc}, {wall:.0f} s, others used {w['foreign_cores']:.2f} "
          "cores meanwhile", flush=True)
    return {"foreign_cores": w["foreign_cores"], "foreign_cpu_s": w["foreign_cpu_s"],
            "arm": arm, "seed": seed, "returncode": rc, "wall_s": wall,
            "overrides": overrides(arm, seed, s), "commit": git_commit(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "warm_start_built": built,
            "load_avg_1m_after": os.getloadavg()[0]}


def fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def headline(table: dict, corr: dict, metrics: dict, corr_default: dict | None = None,
             default_arms: list[str] | None = None) -> str:
    from ragen2.analysis.study import series

    def rho(c: dict) -> str:  # the median of the per-run rhos, its bootstrap interval over runs
        if c["rho"] is None:
            return "n/a"
        ci = "" if c["lo"] is None else f" [{c['lo']:+.2f}, {c['hi']:+.2f}]"
        return f"{c['rho']:+.2f}{ci} (median over {c['runs']} runs)"

    def both(cs: dict) -> str:
        later = cs.get("panel_turns_mi_vs_success", {})
        return (f"first-turn MI {rho(cs['mi_vs_success'])}, "
                + (f"later-turn panel MI {rho(later)}, " if later.get("rho") is not None else "")
                + f"token entropy {rho(cs['entropy_vs_success'])}")

    if corr_default:
        parts = [f"per-run Spearman vs held-out success, {'/'.join(default_arms or [])} runs: "
                 f"{both(corr_default)}",
                 f"all runs: {both(corr)}"]
    else:
        parts = [f"per-run Spearman vs held-out success: {both(corr)}"]
    turns = [v for m in metrics.values() for _, v in series(m, "panel_turns_mi")]
    if turns:
        parts.append(f"later-turn panel MI over all monitor steps: {min(turns):.3f} to "
                     f"{max(turns):.3f} nats")
    mi = [abs(v) for m in metrics.values() for _, v in series(m, "mi")]
    bound = [row["collapse/log_n"] for m in metrics.values() for row in m.values()
             if isinstance(row.get("collapse/log_n"), (int, float))]
    if mi:
        parts.append(f"largest |first-turn MI| at any monitor step of any run: {max(mi):.4f} nats"
                     + (f" (bound log N = {max(bound):.2f})" if bound else ""))
    finals = ", ".join(f"{arm} {fmt(t.get('final_success', {}).get('mean'))}"
                       for arm, t in table.items())
    parts.append(f"final held-out success (mean over seeds): {finals}")
    steps = {arm: t.get("mean_step_s", {}).get("mean") for arm, t in table.items()}
    if steps.get("none"):
        parts.append("step time vs none: " + ", ".join(
            f"{arm} {v / steps['none']:.2f}" for arm, v in steps.items() if arm != "none" and v))
    return "; ".join(parts)


def analyze(out: Path, runs: list[dict], settings: dict) -> dict:
    from ragen2.analysis import study
    from ragen2.analysis.hypotheses import Ratio, evaluate
    from ragen2.analysis.rollouts import run_min_samples

    design = DESIGNS[settings.get("design", "v1")]
    dirs = {(r["arm"], r["seed"]): out / "runs" / f"{r['arm']}_s{r['seed']}" for r in runs
            if r["returncode"] == 0}
    metrics = study.load_study(dirs)
    summaries = study.load_summaries(dirs)
    order = list(settings.get("arms", {}))
    rows = []
    for r in sorted(runs, key=lambda r: (r["seed"], order.index(r["arm"]) if r["arm"] in order
                                         else len(order))):
        key = (r["arm"], r["seed"])
        row = {**r}
        if key in metrics:
            row.update(study.run_summary(*key, metrics[key], summaries[key]))
        rows.append(row)
    corr = study.correlations(metrics)
    by_arm = {arm: study.correlations({k: m for k, m in metrics.items() if k[0] == arm})
              for arm in dict.fromkeys(a for a, _ in metrics)}
    default = {k: m for k, m in metrics.items() if k[0] in design["default_arms"]}
    corr_default = study.correlations(default) if default and len(default) < len(metrics) else None
    table = study.arm_table([r for r in rows if r["returncode"] == 0])
    # arm minus none, mean over seeds, with a bootstrap interval over the runs (seeds)
    diffs = study.arm_differences([r for r in rows if r["returncode"] == 0 and "arm" in r], "none")
    # step times count only from runs nobody else shared the machine with (QUIET_CORES)
    quiet = {(r["arm"], r["seed"]) for r in runs
             if r.get("foreign_cores") is not None and r["foreign_cores"] < QUIET_CORES}
    # the verdicts read the registered arms only (an exploratory arm changes none of them)
    registered = {k: m for k, m in metrics.items() if k[0] in design["default_arms"]}
    tested = ([evaluate({k: m for k, m in registered.items() if k in quiet}
                        if isinstance(h, Ratio) else registered, h) for h in hypotheses()]
              if settings.get("design") == "v2" and not settings.get("quick") else [])
    for h in tested:  # a run left out of a timing for its load says so
        if h["kind"] == "Ratio":
            h["dropped"].update({
                f"{r['arm']}/{r['seed']}": (f"not quiet: other processes used "
                                            f"{fmt(r.get('foreign_cores'))} cores (< {QUIET_CORES} "
                                            "counts)")
                for r in runs if r["returncode"] == 0 and r["arm"] in (h["arm"], h["baseline"])
                and (r["arm"], r["seed"]) not in quiet})
    plots = study.write_plots(metrics, corr, out) if metrics else []
    result = {"settings": settings, "machine": {"python": platform.python_version(),
                                                "cpus": os.cpu_count()},
              "runs": rows, "arms": table, "spearman": corr,
              **({"spearman_default_arms": corr_default} if corr_default else {}),
              "spearman_by_arm": by_arm, "arm_differences_vs_none": diffs,
              **({"hypotheses": tested} if tested else {}),
              "headline": headline(table, corr, metrics, corr_default, design["default_arms"]),
              "plots": [p.name for p in plots]}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    write_examples(out, rows, dirs, metrics)
    write_tables(out, result, metrics, {k: run_min_samples(d) for k, d in dirs.items()})
    print(result["headline"], flush=True)
    for h in tested:
        print(f"  {h['id']}: effect {fmt(h['effect'])} [{fmt(h['lo'])}, {fmt(h['hi'])}] "
              f"over {h['n']} -> {h['verdict']}", flush=True)
        for unit, why in h.get("dropped", {}).items():
            print(f"      left out {unit}: {why}", flush=True)
    return result


#: the per-arm table's columns: (series, its label, the step of its "before" value or None)
TABLE_SERIES = (("success", "held-out success", 0), ("panel_turns_mi", "later-turn panel MI", 0),
                ("turns_retrieval", "later-turn retrieval@1 (batch)", 1),
                ("turns_grounded", "later-turn grounded (batch)", 1),
                ("panel_turns_grounded", "later-turn grounded (panel)", 0),
                ("token_entropy", "token entropy (reasoning)", 1),
                ("format_errors", "format errors (batch)", 1), ("kept_ratio", "kept ratio", None))


def _spread(vals: list[float], digits: int = 2) -> str:
    """median [min, max] of the runs' values (just the value for one run)."""
    if not vals:
        return "-"
    med = statistics.median(vals)
    if len(vals) == 1:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} [{min(vals):.{digits}f}, {max(vals):.{digits}f}]"


def _no_value(metrics: dict, name: str, step: int, least: int) -> str:
    """Why one run has no value of series ``name`` at ``step``: ``n = 3 < 16`` (withheld, the
    measurement's sample count under ``monitor.min_samples``), ``n = 20, 1 prompt`` (enough
    samples, all of one prompt: no MI), ``< 2 prompts`` (fewer than 2 prompts with reasoning, no
    sample count logged: runs before it was), ``nothing logged`` (the instrument logged nothing
    at that step: not due, or, before the counts were logged, no prompts with reasoning)."""
    from ragen2.analysis.study import withheld

    empty = dict(withheld(metrics, name))
    if step not in empty:
        return "nothing logged"
    n = empty[step]
    if n is None:
        return "< 2 prompts"
    return f"n = {n:g} < {least}" if n < least else f"n = {n:g}, 1 prompt"


def _missing(metrics: dict, keys: list, mins: dict, name: str, step: int) -> str:
    """`` (k none at step s: why, ...; last at ...)`` for the runs without a value at ``step``
    ('' when every run has one); 'last at' is each such run's last step with a value."""
    from ragen2.analysis.study import series
    from ragen2.collapse.withhold import MIN_SAMPLES

    gone = [k for k in keys if step not in dict(series(metrics[k], name))]
    if not gone:
        return ""
    why = [_no_value(metrics[k], name, step, mins.get(k, MIN_SAMPLES)) for k in gone]
    last = [str(max(dict(series(metrics[k], name)), default="never")) for k in gone]
    return f" ({len(gone)} none at step {step}: {', '.join(why)}; last at {', '.join(last)})"


def write_tables(out: Path, result: dict, metrics: dict, mins: dict | None = None) -> None:
    """``tables.md``: per arm, each instrument before RL and at the last step (median and range
    over the arm's runs; a run without a value at either step is counted apart, with why -- its
    sample count when the value was withheld under ``monitor.min_samples`` (``mins``: per run,
    default 16) -- and the step of its last value), wall time per run; then every hypothesis's
    effect and verdict."""
    from ragen2.analysis.study import series, withheld
    from ragen2.collapse.withhold import MIN_SAMPLES

    mins = mins or {}
    arms = list(dict.fromkeys(r["arm"] for r in result["runs"] if r["returncode"] == 0))
    last_step = result["settings"].get("steps")
    head = ["arm", "runs"] + [label for _, label, _ in TABLE_SERIES] + ["wall per run (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in arms:
        keys = sorted(k for k in metrics if k[0] == arm)
        cells = [f"`{arm}`", str(len(keys))]
        for name, _, first in TABLE_SERIES:
            per = [dict(series(metrics[k], name)) for k in keys]
            end = [p[last_step] for p in per if last_step in p]
            if not any(per) and not any(withheld(metrics[k], name) for k in keys):
                cells.append("not logged")  # by no run of the arm (an older code, an env without it)
                continue
            if first is None:  # a mean over the RL steps
                cell = _spread([statistics.fmean(v for st, v in p.items() if st >= 1) for p in per
                                if any(st >= 1 for st in p)])
            else:
                cell = (f"{_spread([p[first] for p in per if first in p])}"
                        f"{_missing(metrics, keys, mins, name, first)} -> {_spread(end)}"
                        f"{_missing(metrics, keys, mins, name, last_step)}")
            cells.append(cell)
        walls = [r["wall_s"] for r in result["runs"] if r["arm"] == arm and r["returncode"] == 0]
        cells.append(_spread(walls, 0))
        lines.append("| " + " | ".join(cells) + " |")
    least = sorted(set(mins.values())) or [MIN_SAMPLES]
    text = ["# Tables", "", (f"Median [min, max] over each arm's runs; \"a -> b\": before RL (step 0 "
                             f"for held-out success and the probe panel, step 1 for batch "
                             f"instruments) and at step {last_step}. An MI, retrieval or "
                             f"grounded value measured from fewer than monitor.min_samples = "
                             f"{', '.join(map(str, least))} parsable reasoning samples is withheld "
                             f"(ragen2.collapse.withhold): such a run counts among the \"none\", "
                             f"with its sample count (\"n = 3 < 16\")."), "", *lines, ""]
    if result.get("hypotheses"):
        text += ["| hypothesis | effect [95% interval] | runs or seeds | verdict | left out |",
                 "|---|---|---|---|---|"]
        for h in result["hypotheses"]:
            extra = f" (ratio {fmt(h.get('ratio'))})" if h.get("ratio") is not None else ""
            claim = h["claim"].replace("|", "\\|")  # a literal bar inside a table cell
            text.append(f"| {h['id']}: {claim} | {fmt(h['effect'])} [{fmt(h['lo'])}, "
                        f"{fmt(h['hi'])}]{extra} | {h['n']} | {h['verdict']} | "
                        f"{len(h.get('dropped', {}))} |")
        text.append("")
    (out / "tables.md").write_text("\n".join(text))


def write_examples(out: Path, rows: list[dict], dirs: dict, metrics: dict) -> None:
    """Later-turn reasoning (the later-turn probe panel: the same fixed states at every
    measurement) at the first and the last panel step of the most and the least collapsed runs
    -- the largest and the smallest fall of the later-turn panel MI among runs that start above
    the panel's permutation floor and still write reasoning at the end -- and of a run whose
    reasoning vanished, if any. The template n-grams
    (3-grams in the reasoning of at least half the panel's prompts at that step, the report's
    template mining) are marked."""
    from ragen2.analysis.report_samples import highlight, load_panel, template_ngrams
    from ragen2.analysis.study import series

    def share_with_reasoning(prompts: list[dict]) -> float:
        texts = [t for p in prompts for t in p["reasoning"]]
        return sum(bool(t) for t in texts) / max(len(texts), 1)

    panels, falls, vanished = {}, {}, []
    for r in rows:
        key = (r["arm"], r["seed"])
        panel = load_panel(dirs[key], "panel/turns") if key in dirs else {}
        mi = series(metrics.get(key, {}), "panel_turns_mi")
        if len(panel) < 2 or len(mi) < 2:
            continue
        panels[key] = panel
        floor = dict(series(metrics[key], "panel_turns_mi_floor")).get(mi[0][0])
        if share_with_reasoning(panel[max(panel)]) >= 0.5:
            if floor is None or mi[0][1] > floor:  # a panel that starts at its floor cannot fall
                falls[key] = mi[0][1] - mi[-1][1]
        else:
            vanished.append(key)
    lines = ["# Reasoning examples", "",
             ("Later-turn `<think>` text from the later-turn probe panel (the same fixed states, "
              "after a scripted 2-turn opening, at every measurement): three prompts, one sample "
              "each, at the first and the last panel step. <mark>Marked</mark>: the 3-grams in "
              "the reasoning of at least half the panel's prompts at that step (template mining, "
              "as in `ragen2-report`)."), ""]
    if not falls and not vanished:
        lines.append("No run has a later-turn panel at two steps (monitor.panel_size > 0 and "
                     "a later-turn panel are needed).")
    chosen = []
    if falls:
        most, least = max(falls, key=falls.get), min(falls, key=falls.get)
        chosen += [("most collapsed (largest fall of the later-turn panel MI)", most)]
        if least != most:
            chosen += [("least collapsed (smallest fall)", least)]
    if vanished:
        chosen += [("reasoning vanished (under half the samples write any at the end)", vanished[0])]
    for title, key in chosen:
        mi = series(metrics[key], "panel_turns_mi")
        row = next(r for r in rows if (r["arm"], r["seed"]) == key)
        panel = panels[key]
        # the last panel step may have no value (too few samples: monitor.min_samples)
        end = (f"{mi[-1][1]:.2f} nats" + ("" if mi[-1][0] == max(panel) else
                                          f" at step {mi[-1][0]}, none after"))
        lines += [(f"## {title}: {key[0]} seed {key[1]} (later-turn panel MI {mi[0][1]:.2f} -> "
                   f"{end}; held-out success {fmt(row.get('initial_success'))} -> "
                   f"{fmt(row.get('final_success'))})"), ""]
        for step in (min(panel), max(panel)):
            prompts = panel[step]
            mined = template_ngrams(prompts, 3)
            marks = {g for g, _ in mined}
            top = ", ".join(f"\"{' '.join(g)}\" {share:.0%}" for g, share in mined[:5]) or "none"
            lines += [f"- step {step}: {share_with_reasoning(prompts):.0%} of the samples write "
                      f"reasoning; template 3-grams: {top}"]
            for p in prompts[:3]:
                text = next((t for t in p["reasoning"] if t), "")
                state = (p["prompt"] or "").strip().replace("\n", " / ")
                lines += [f"  - state: `{state[:160]}`",
                          f"    reasoning: {highlight(text[:300], marks, 3) or '(none)'}"]
        lines.append("")
    (out / "examples.md").write_text("\n".join(lines))


def measure_entropy(out: Path, seeds: list[int], cache_root: Path) -> dict:
    """The pre-registered choice of the entropy coefficient (README "Study 2"): at each seed's
    warm start (step 1, before any update), the gradient-SNR diagnostic on a batch of 64 groups x
    4 rollouts (the default's policy and protocol, 4x the groups: more zero-spread groups to
    measure); per seed c = task_norm(highest-spread bucket) / entropy_norm_raw(zero-spread
    bucket); the coefficient is the median over seeds, rounded up to 2 significant digits."""
    import math

    rows = []
    for seed in seeds:
        run_dir = out / "entropy_measurement" / f"s{seed}"
        cache = cache_root / f"s{seed}"
        cmd = [str(Path(sys.executable).with_name("ragen2-train")), f"seed={seed}",
               f"trainer.warm_start.seed={seed}", "trainer.total_steps=1", "rollout.env_groups=64",
               "monitor.grad_snr_every=1", "monitor.panel_size=0", "trainer.eval_every=0",
               "trainer.eval_episodes=32",
               "trainer.save_every=0", "trainer.loggers=[jsonl]", f"hydra.run.dir={run_dir}"]
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        rc = run_watched(cmd, run_dir.parent / f"s{seed}.log", env=cold_env(cache), cwd=ROOT
                         )["returncode"]
        if rc:
            raise SystemExit(f"the measurement run of seed {seed} failed (exit {rc}): "
                             f"{run_dir.parent / f's{seed}.log'}")
        m = next(json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()
                 if json.loads(x)["step"] == 1)
        g = {k.split("/")[1]: None for k in m if k.startswith("grad_snr/b")}
        top = max(int(b[1:]) for b in g)
        task, ent = m.get(f"grad_snr/b{top}/task_norm"), m.get("grad_snr/b0/entropy_norm_raw")
        rows.append({"seed": seed, "top_bucket": top, "task_norm_top": task,
                     "entropy_norm_raw_b0": ent,
                     "reward_std_per_bucket": {b: m.get(f"grad_snr/{b}/reward_std") for b in sorted(g)},
                     "zero_std_group_frac": m.get("rollout/zero_std_group_frac"),
                     "coef": None if not task or not ent else task / ent,
                     "grad_snr": {k: v for k, v in m.items() if k.startswith("grad_snr/")}})
        print(f"  seed {seed}: task norm (b{top}) {task}, entropy norm (b0) {ent}", flush=True)
    coefs = sorted(r["coef"] for r in rows if r["coef"] is not None)
    if not coefs:
        raise SystemExit("no seed had both a zero-spread bucket and a bucket with spread")
    med = coefs[len(coefs) // 2] if len(coefs) % 2 else (coefs[len(coefs) // 2 - 1] + coefs[len(coefs) // 2]) / 2
    digits = 1 - math.floor(math.log10(med))
    chosen = math.ceil(med * 10 ** digits) / 10 ** digits
    result = {"rule": measure_entropy.__doc__, "per_seed": rows, "median": med, "chosen": chosen,
              "commit": git_commit()}
    (out / "entropy_coef.json").write_text(json.dumps(result, indent=1))
    print(f"entropy coefficient: median {med:.4g} over seeds -> {chosen}", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--design", choices=sorted([*DESIGNS, "v3"]), default="v2",
                    help="v3: Study 3 (study3.py; its doses from results_v3/doses.json)")
    ap.add_argument("--quick", action="store_true", help="3 arms x 1 seed x 2 steps (CI smoke test)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default: benchmarks/collapse_study/<design's results>"
                         "[_<variant>][_quick])")
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--arms", nargs="+", default=None, help="default: the design's arms")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="default",
                    help="the task: the default job, random_start (v1) or sokoban (v2)")
    ap.add_argument("--cache-root", type=Path,
                    default=Path(tempfile.gettempdir()) / "ragen2_collapse_study_cache",
                    help="each seed's caches live in <cache-root>/s<seed>, emptied at start")
    ap.add_argument("--rerun", action="store_true", help="repeat runs already recorded")
    ap.add_argument("--analyze-only", action="store_true", help="reuse the runs in --out")
    ap.add_argument("--measure-entropy", action="store_true",
                    help="measure the *_ent arms' entropy coefficient (README 'Study 2')")
    ap.add_argument("--pilot", action="store_true",
                    help="v3: the dose pilot (seed 100), then results_v3/doses.json")
    ap.add_argument("--screen", action="store_true",
                    help="v3: screen the warm starts (seeds 0, 1, ... until 4 are eligible), "
                         "then results_v3/screen.json")
    ap.add_argument("--dry-run", action="store_true",
                    help="v3: print every run's command in order, run nothing")
    ap.add_argument("--report", action="store_true",
                    help="v3: ragen2's sweep report of the finished counted runs, one arm per "
                         "(filter, entropy_coef): results_v3/report.html")
    args = ap.parse_args()
    if args.design == "v3":
        return main_v3(ap, args)
    if args.pilot or args.dry_run or args.screen or args.report:
        ap.error("--pilot, --screen, --dry-run and --report belong to --design v3")
    design = DESIGNS[args.design]
    arms = args.arms or (QUICK["arms"] if args.quick else design["default_arms"])
    unknown = [a for a in arms if a not in design["arms"]]
    if unknown:
        ap.error(f"--arms {' '.join(unknown)}: not an arm of design {args.design}; "
                 f"allowed: {', '.join(design['arms'])}")
    s = {**(QUICK if args.quick else design["full"]), "variant": args.variant, "design": args.design}
    s.pop("arms", None)
    if args.seeds:
        s["seeds"] = args.seeds
    suffix = ("" if args.variant == "default" else f"_{args.variant}") + ("_quick" if args.quick else "")
    out = args.out or HERE / f"{design['results']}{suffix}"
    (out / "runs").mkdir(parents=True, exist_ok=True)
    if args.measure_entropy:
        measure_entropy(out, s["seeds"], args.cache_root)
        return 0
    previous = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    if args.analyze_only:
        if not previous:
            ap.error(f"--analyze-only: no {out / 'results.json'} to reanalyse")
        analyze(out, previous["runs"], previous["settings"])
        return 0
    from ragen2.analysis.study import merge_runs

    settings = {**s, "arms": {a: design["arms"][a]() for a in arms}, "quick": args.quick,
                "env": f"{args.variant}: {VARIANTS[args.variant] or 'the default job'}"}
    done = {(r["arm"], r["seed"]): r for r in previous.get("runs", [])
            if r.get("returncode") == 0 and not args.rerun}
    for seed in s["seeds"]:
        cache = None if args.quick else args.cache_root / f"s{seed}"
        if cache is not None:  # cold: this sitting's first run of the seed builds
            shutil.rmtree(cache, ignore_errors=True)
        for arm in arms:
            run_dir = out / "runs" / f"{arm}_s{seed}"
            prev = done.get((arm, seed))
            if (prev and prev.get("overrides") == overrides(arm, seed, s)
                    and (run_dir / "summary.json").exists()):
                print(f"  {arm} seed {seed}: recorded, skipped", flush=True)
                continue
            row = run_one(arm, seed, s, run_dir, cache)
            runs, merged = merge_runs(previous, [row], settings)
            previous = analyze(out, runs, merged)
    if not previous:
        return 1
    failed = [f"{r['arm']} seed {r['seed']}" for r in previous["runs"] if r["returncode"] != 0]
    if failed:
        print(f"failed runs: {', '.join(failed)} (logs in {out / 'runs'})", file=sys.stderr)
        return 1
    return 0


def main_v3(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Study 3 (README "Study 3"): the dose pilot, the counted runs (resumable) or the analysis."""
    sys.path.insert(0, str(HERE))
    import study3
    import study3_report

    if args.quick or args.measure_entropy or args.variant != "default":
        ap.error("--quick, --measure-entropy and --variant belong to designs v1/v2")
    out = args.out or study3.RESULTS
    if args.pilot:
        return study3.run_pilot(out, args.cache_root, dry_run=args.dry_run)
    if args.screen:
        return study3.run_screen(out, args.cache_root, dry_run=args.dry_run)
    if args.analyze_only or args.report:
        previous = study3._results(out)
        if not previous:
            ap.error(f"--analyze-only / --report: no {out / 'results.json'} to read")
        if args.analyze_only:
            study3_report.analyze(out, previous["runs"], previous["settings"])
        if args.report:
            print(f"wrote {study3_report.sweep_page(out, previous['runs'])}")
        return 0
    try:  # the screen's counted seeds (README "Study 3", Deviations 2026-12-06) unless named
        seeds = args.seeds or study3.seeds_to_run(out)
    except SystemExit:
        if not args.dry_run:
            raise
        seeds = study3.FULL["seeds"]
        print(f"# {out / 'screen.json'} is missing or unfinished: the seeds below are "
              "placeholders (screen first: --screen)")
    try:
        study3.run_order(seeds, args.arms)
    except ValueError as e:
        ap.error(f"--arms: {e}")
    return study3.run_study(out, seeds, args.arms, args.cache_root, rerun=args.rerun,
                            dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
