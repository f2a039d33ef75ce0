"""Collapse study 3 (README "Study 3", pre-registered 2026-12-04): its arms, its order, its dose
pilot and the runner that makes its runs resumable.

* **Arms**: three entropy-bonus doses, 0, c_low and c_high (``algorithm.entropy_coef``), each
  without a filter (``filter=none``) and with RAGEN-2's top-p 0.9 (``filter=ragen2_paper``):
  ``d0``, ``d0_top_p``, ``dlow``, ``dlow_top_p``, ``dhigh``, ``dhigh_top_p``. The doses come from
  ``results_v3/doses.json``, written by the pilot and committed before the first counted run.
* **Runs**: the default job, 100 RL steps, held-out evaluation (128 episodes), the MI monitor and
  both probe panels (with the one-coordinate contrast sets, ``monitor.panel_contrast=8``) every
  10 steps; seeds k = 0..3 with warm-start seed k and RL seed k; seed-major, and within a seed
  ``d0``, ``dhigh``, then the others (:func:`run_order`). Each run lives in
  ``results_v3/runs/<arm>_s<seed>/`` and checkpoints every 10 steps (``checkpoints/`` stays out of
  git: ``.gitignore``).
* **Resumable**: a run recorded in ``results.json`` with exit 0, the same overrides and its
  ``summary.json`` is skipped; a run with a complete checkpoint in its folder continues from it
  (``trainer.resume=true``, docs/how-to/resume.md: the same run, exactly); anything else in the
  folder is a broken start and is started again.
* **The pilot** (exploratory, counts toward nothing): seed 100, ``filter=none``, candidates
  :data:`PILOT_CANDIDATES` in order, stopping at the first that survives (:func:`survives`); a run
  is stopped early once the batch's format-error rate is above 0.50 for 5 steps in a row
  (:func:`early_stop`); the doses follow (:func:`choose_doses`) and go to ``doses.json``.

The analysis is :mod:`study3_analysis` (the rules) and :mod:`study3_report` (the files). Entry point: ``run.py --design v3`` (``--pilot``,
``--dry-run``, ``--analyze-only``).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _p in (str(HERE.parent), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from common import git_commit, run_watched  # noqa: E402  (benchmarks/common.py)
from robustness import cold_env  # noqa: E402  (benchmarks/robustness.py)

RESULTS = HERE / "results_v3"
#: the registered protocol of every counted run (README "Study 3", Design)
FULL = {"steps": 100, "eval_every": 10, "eval_episodes": 128, "monitor_every": 10,
        "panel_contrast": 8, "save_every": 10, "seeds": [0, 1, 2, 3]}
#: the arms, as registered: (dose name, filter); the order of the README's list
ARMS = {"d0": ("d0", "none"), "d0_top_p": ("d0", "top_p"),
        "dlow": ("dlow", "none"), "dlow_top_p": ("dlow", "top_p"),
        "dhigh": ("dhigh", "none"), "dhigh_top_p": ("dhigh", "top_p")}
#: within a seed: d0, then dhigh, then the others (README "Order")
FIRST = ("d0", "dhigh")
FILTERS = {"none": ["filter=none"],
           # RAGEN-2's top-p 0.9 (configs/filter/ragen2_paper.yaml). A step whose filter keeps no
           # group applies no update; Study 2's dated deviation (run.py NEVER_STOP_ON_EMPTY_FILTER)
           # lets such a run go on being measured instead of ending at 5 empty steps in a row.
           "top_p": ["filter=ragen2_paper", "trainer.max_skipped_steps=1000"]}

#: the dose pilot (README "The pilot")
PILOT_SEED = 100
PILOT_CANDIDATES = (0.1, 0.03, 0.01, 0.003)
FALLBACK = {"d0": 0.0, "dlow": 0.0003, "dhigh": 0.003}
#: "survives": held-out format errors at most this at every evaluation, and the batch's mean
#: over steps 91-100 at most this
SURVIVE_MAX = 0.20
SURVIVE_STEPS = range(91, 101)
#: a pilot run may stop once the batch format-error rate is above this for STOP_RUN steps in a row
STOP_ABOVE, STOP_RUN = 0.50, 5
#: every dose is below the bonus that destroyed the text in Study 2
BLOW_UP = 0.29
#: step times count only from runs others shared the machine with by fewer cores (README "Timings")
QUIET_CORES = 0.1

EVAL_FORMAT = "eval/format_error_rate"
BATCH_FORMAT = "rollout/format_error_rate"


def train_command() -> str:
    return str(Path(sys.executable).with_name("ragen2-train"))


# ---------------------------------------------------------------- doses


def round_1sig(x: float) -> float:
    """``x`` rounded to one significant digit (0.0003 for 0.00031, 0.01 for 0.0095)."""
    return float(f"{x:.1g}")


def load_doses(out: Path = RESULTS) -> dict[str, float]:
    """``{"d0": 0.0, "dlow": c_low, "dhigh": c_high}`` from ``out/doses.json``; a clear
    ``SystemExit`` when it is missing or breaks the registration (d0 = 0 < dlow < dhigh < 0.29)."""
    path = out / "doses.json"
    if not path.is_file():
        raise SystemExit(
            f"{path} is missing: the counted runs of Study 3 read their doses from it. Run the "
            "dose pilot first (python benchmarks/collapse_study/run.py --design v3 --pilot) and "
            "commit its doses.json before the first counted run (README 'Study 3', The pilot).")
    try:
        doses = json.loads(path.read_text())["doses"]
        d = {k: float(doses[k]) for k in ("d0", "dlow", "dhigh")}
    except (ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: expected {{\"doses\": {{\"d0\", \"dlow\", \"dhigh\"}}}} with "
                         f"numbers ({type(e).__name__}: {e})") from None
    if not (d["d0"] == 0.0 < d["dlow"] < d["dhigh"] < BLOW_UP):
        raise SystemExit(f"{path}: doses {d} break the registration: d0 = 0 < dlow < dhigh < "
                         f"{BLOW_UP}")
    return d


def choose_doses(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """The registered rule on the pilot's outcomes (candidates in :data:`PILOT_CANDIDATES`
    order, each ``{"coef", "survives"}``; the pilot stops at the first survivor, so later
    candidates may be absent): c_high = the first candidate that survives, c_low = c_high / 10
    rounded to one significant digit; none survives -> the fallback 0, 0.0003, 0.003 (a
    deviation to record). ``{"doses", "c_high", "c_low", "fallback"}``; ``ValueError`` while
    the rule is undecided (a candidate before the first survivor has no outcome)."""
    by = {float(o["coef"]): o for o in outcomes}
    for c in PILOT_CANDIDATES:
        o = by.get(c)
        if o is None or o.get("survives") is None:
            raise ValueError(f"candidate {c} has no outcome yet: the rule is undecided")
        if o["survives"]:
            low = round_1sig(c / 10)
            return {"doses": {"d0": 0.0, "dlow": low, "dhigh": c}, "c_high": c, "c_low": low,
                    "fallback": False}
    return {"doses": dict(FALLBACK), "c_high": None, "c_low": None, "fallback": True}


# ---------------------------------------------------------------- runs and commands


def run_order(seeds: list[int] = FULL["seeds"], arms: list[str] | None = None
              ) -> list[tuple[str, int]]:
    """(arm, seed) in the registered order: seed-major; within a seed d0, dhigh, the others."""
    chosen = list(ARMS) if arms is None else arms
    unknown = [a for a in chosen if a not in ARMS]
    if unknown:
        raise ValueError(f"not an arm of Study 3: {', '.join(unknown)}; allowed: {', '.join(ARMS)}")
    within = [a for a in FIRST if a in chosen] + [a for a in ARMS if a in chosen and a not in FIRST]
    return [(arm, seed) for seed in seeds for arm in within]


def protocol(seed: int, s: dict[str, Any] = FULL) -> list[str]:
    """The overrides every run of the study shares, for one seed."""
    return [f"seed={seed}", f"trainer.warm_start.seed={seed}",
            f"trainer.total_steps={s['steps']}", f"trainer.eval_every={s['eval_every']}",
            f"trainer.eval_episodes={s['eval_episodes']}", f"monitor.every={s['monitor_every']}",
            f"monitor.panel_contrast={s['panel_contrast']}",
            f"trainer.save_every={s['save_every']}", "trainer.save_rollouts_every=1",
            "trainer.loggers=[jsonl]", *s.get("extra", [])]


def dose_override(coef: float | str) -> str:
    return f"algorithm.entropy_coef={coef if isinstance(coef, str) else repr(float(coef))}"


def overrides(arm: str, seed: int, doses: dict[str, Any], s: dict[str, Any] = FULL) -> list[str]:
    """One counted run's overrides (``doses``: :func:`load_doses`, or placeholders for a dry
    run before the pilot)."""
    dose, filt = ARMS[arm]
    return [*FILTERS[filt], dose_override(doses[dose]), *protocol(seed, s)]


def pilot_overrides(coef: float, s: dict[str, Any] = FULL) -> list[str]:
    return [*FILTERS["none"], dose_override(coef), *protocol(PILOT_SEED, s)]


def resume_from(run_dir: Path, overs: list[str]) -> int | None:
    """The step of the newest complete checkpoint in ``run_dir``, if the run there had exactly
    ``overs`` (its ``.hydra/overrides.yaml``, ``trainer.resume=true`` aside); None: nothing to
    resume (no checkpoint, or a run of other overrides -- other doses, another protocol --
    which is started again from scratch)."""
    from ragen2.analysis.rollouts import load_overrides
    from ragen2.learner import checkpoint

    ckpt = checkpoint.latest(run_dir)
    try:
        recorded = load_overrides(run_dir)
    except ValueError:
        recorded = None
    if ckpt is None or recorded is None or [x for x in recorded if x != "trainer.resume=true"] != overs:
        return None
    return int(ckpt.name.split("_")[1])


def command(overs: list[str], run_dir: Path, resume: bool) -> list[str]:
    return [train_command(), *overs, *(["trainer.resume=true"] if resume else []),
            f"hydra.run.dir={run_dir}"]


def plan(out: Path, doses: dict[str, Any], seeds: list[int], arms: list[str] | None = None,
         s: dict[str, Any] = FULL, rerun: bool = False) -> list[dict[str, Any]]:
    """Every counted run in order, with what the runner will do: ``{"arm", "seed", "run_dir",
    "overrides", "action": "skip" | "resume" | "start", "resume_step", "command"}``."""
    previous = _results(out)
    done = {(r["arm"], r["seed"]): r for r in previous.get("runs", []) if r.get("returncode") == 0}
    steps = []
    for arm, seed in run_order(seeds, arms):
        run_dir = out / "runs" / f"{arm}_s{seed}"
        overs = overrides(arm, seed, doses, s)
        prev = done.get((arm, seed))
        if (not rerun and prev and prev.get("overrides") == overs
                and (run_dir / "summary.json").exists()):
            action, step = "skip", None
        else:
            step = None if rerun or not run_dir.exists() else resume_from(run_dir, overs)
            action = "start" if step is None else "resume"
        steps.append({"arm": arm, "seed": seed, "run_dir": run_dir, "overrides": overs,
                      "action": action, "resume_step": step,
                      "command": command(overs, run_dir, action == "resume")})
    return steps


def _results(out: Path) -> dict[str, Any]:
    path = out / "results.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def study_env(cache: Path) -> dict[str, str]:
    """Every cache under ``cache`` (cold per seed, as in Study 2) and Ray's workers at niceness 0."""
    return {**cold_env(cache), "RAY_worker_niceness": "0"}


def dry_run_lines(steps: list[dict[str, Any]], cache_root: Path, header: list[str]) -> list[str]:
    lines = [f"# {h}" for h in header]
    seen: set[int] = set()
    for i, st in enumerate(steps, 1):
        if st["seed"] not in seen:
            seen.add(st["seed"])
            cache = cache_root / f"s{st['seed']}"
            lines.append(f"# seed {st['seed']}: caches cold under {cache} "
                         "(emptied before the seed's first run of the invocation)")
        what = {"skip": "recorded, skipped", "start": "start",
                "resume": f"resume from the checkpoint of step {st['resume_step']}"}[st["action"]]
        lines.append(f"[{i}/{len(steps)}] {st['arm']} seed {st['seed']} ({what}): "
                     f"{shlex.join(st['command'])}")
    return lines


# ---------------------------------------------------------------- the pilot's rule


def _rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """metrics.jsonl as {step: row}, read leniently (a run in progress may leave a torn line)."""
    path = run_dir / "metrics.jsonl"
    out: dict[int, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            out[row["step"]] = row
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def early_stop(metrics: dict[int, dict[str, Any]]) -> int | None:
    """The first RL step ending a run of :data:`STOP_RUN` consecutive steps whose batch
    format-error rate is above :data:`STOP_ABOVE` (None: no such run yet)."""
    streak, prev = 0, None
    for step in sorted(s for s in metrics if s >= 1):
        v = metrics[step].get(BATCH_FORMAT)
        high = _number(v) and v > STOP_ABOVE
        streak = (streak + 1 if prev == step - 1 else 1) if high else 0
        prev = step
        if streak >= STOP_RUN:
            return step
    return None


def survives(metrics: dict[int, dict[str, Any]], s: dict[str, Any] = FULL) -> dict[str, Any]:
    """The registered survival rule on one finished pilot run: held-out format errors at most
    0.20 at every evaluation (steps 0, 10, ..., 100: each must be there) and the batch's
    format-error rate at most 0.20 averaged over steps 91-100 (each must be there).
    ``{"survives": bool, "why": str, "eval_format_errors": {step: v}, "batch_91_100": mean}``."""
    evals = list(range(0, s["steps"] + 1, s["eval_every"]))
    got = {st: metrics[st][EVAL_FORMAT] for st in evals
           if st in metrics and _number(metrics[st].get(EVAL_FORMAT))}
    batch = [metrics[st][BATCH_FORMAT] for st in SURVIVE_STEPS
             if st in metrics and _number(metrics[st].get(BATCH_FORMAT))]
    mean = sum(batch) / len(batch) if batch else None
    why = []
    if len(got) < len(evals):
        why.append(f"no held-out format errors at step(s) {', '.join(str(x) for x in evals if x not in got)}")
    high = [f"{st}: {v:.3f}" for st, v in got.items() if v > SURVIVE_MAX]
    if high:
        why.append(f"held-out format errors above {SURVIVE_MAX} at step(s) {', '.join(high)}")
    if len(batch) < len(SURVIVE_STEPS):
        why.append(f"batch format errors logged at {len(batch)} of steps 91-100")
    elif mean > SURVIVE_MAX:
        why.append(f"batch format errors {mean:.3f} > {SURVIVE_MAX} over steps 91-100")
    return {"survives": not why, "why": "; ".join(why) or "every evaluation and steps 91-100 "
            f"at most {SURVIVE_MAX}", "eval_format_errors": got, "batch_91_100": mean}


def pilot_outcome(run_dir: Path, returncode: int | None, stopped_at: int | None,
                  s: dict[str, Any] = FULL) -> dict[str, Any]:
    """One candidate's outcome: stopped early (not surviving), finished (the survival rule), or
    neither (a failed run: no outcome, ``survives`` None)."""
    metrics = _rows(run_dir)
    if stopped_at is None:
        stopped_at = early_stop(metrics)
    if stopped_at is not None:
        return {"survives": False, "stopped_at": stopped_at, "returncode": returncode,
                "why": f"batch format errors above {STOP_ABOVE} for {STOP_RUN} steps in a row "
                       f"(steps {stopped_at - STOP_RUN + 1}-{stopped_at}): stopped early"}
    if returncode == 0 and (run_dir / "summary.json").exists():
        return {**survives(metrics, s), "stopped_at": None, "returncode": returncode}
    return {"survives": None, "stopped_at": None, "returncode": returncode,
            "why": f"the run did not finish (exit {returncode}): no outcome"}


def run_stoppable(cmd: list[str], log_path: Path, env: dict[str, str], run_dir: Path,
                  stop: Callable[[dict[int, dict[str, Any]]], int | None], every_s: float = 10.0
                  ) -> tuple[int, int | None, float]:
    """Run ``cmd`` and check ``stop(metrics so far)`` every ``every_s`` s; when it names a step,
    SIGTERM (the trainer finishes its step, checkpoints and exits 75), then SIGKILL of the
    process group after 300 s. (returncode, the step ``stop`` named or None, wall seconds)."""
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
        stopped = None
        while True:
            try:
                proc.wait(timeout=every_s)
                break
            except subprocess.TimeoutExpired:
                pass
            if stopped is None and (stopped := stop(_rows(run_dir))) is not None:
                print(f"    stopping early at step {stopped} (the pilot's rule)", flush=True)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                break
    return proc.returncode, stopped, time.perf_counter() - t0


def _print(lines: list[str]) -> None:
    print("\n".join(lines), flush=True)


def run_pilot(out: Path, cache_root: Path, dry_run: bool = False, s: dict[str, Any] = FULL
              ) -> int:
    """The dose pilot: candidates in order until one survives (each resumable: a candidate with
    an outcome in ``pilot/pilot.json`` is not run again), then ``doses.json``."""
    if (out / "doses.json").exists() and not dry_run:
        print(f"{out / 'doses.json'} exists (the doses are chosen): nothing to do. "
              f"{json.dumps(json.loads((out / 'doses.json').read_text())['doses'])}")
        return 0
    book_path = out / "pilot" / "pilot.json"
    book = json.loads(book_path.read_text()) if book_path.is_file() else {"candidates": []}
    outcomes = {float(o["coef"]): o for o in book["candidates"] if o.get("survives") is not None}
    if dry_run:
        lines = [f"# Study 3 dose pilot (exploratory): seed {PILOT_SEED}, filter none, "
                 f"candidates {', '.join(map(str, PILOT_CANDIDATES))} in order, stopping at the "
                 f"first that survives; caches cold under {cache_root / ('s' + str(PILOT_SEED))}"]
        for i, c in enumerate(PILOT_CANDIDATES, 1):
            run_dir = out / "pilot" / f"c{c}_s{PILOT_SEED}"
            state = ("outcome recorded: " + ("survives" if outcomes[c]["survives"] else "does not "
                     "survive") if c in outcomes else "runs first" if i == 1 else
                     "runs only if no earlier candidate survives")
            lines.append(f"[{i}/{len(PILOT_CANDIDATES)}] entropy_coef {c} ({state}): "
                         f"{shlex.join(command(pilot_overrides(c, s), run_dir, False))}")
        _print(lines)
        return 0
    cache = cache_root / f"s{PILOT_SEED}"
    shutil.rmtree(cache, ignore_errors=True)
    for c in PILOT_CANDIDATES:
        if c not in outcomes:
            run_dir = out / "pilot" / f"c{c}_s{PILOT_SEED}"
            step = resume_from(run_dir, pilot_overrides(c, s)) if run_dir.exists() else None
            if run_dir.exists() and step is None:
                shutil.rmtree(run_dir)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            cmd = command(pilot_overrides(c, s), run_dir, step is not None)
            print(f"  pilot: entropy_coef {c}" + (f" (resume from step {step})" if step else ""),
                  flush=True)
            rc, stopped, wall = run_stoppable(cmd, run_dir.parent / f"{run_dir.name}.log",
                                              study_env(cache), run_dir, early_stop)
            outcomes[c] = {"coef": c, **pilot_outcome(run_dir, rc, stopped, s), "wall_s": wall,
                           "overrides": pilot_overrides(c, s), "commit": git_commit(),
                           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            book = {"candidates": [outcomes[k] for k in PILOT_CANDIDATES if k in outcomes]}
            book_path.write_text(json.dumps(book, indent=1, default=str))
            print(f"  pilot: entropy_coef {c}: {outcomes[c]['why']}", flush=True)
            if outcomes[c]["survives"] is None:
                raise SystemExit(f"pilot run {run_dir} failed (exit {rc}); see "
                                 f"{run_dir.parent / (run_dir.name + '.log')}. Rerun --pilot to "
                                 "resume it; the rule is undecided until it finishes.")
        if outcomes[c]["survives"]:
            break
    chosen = choose_doses(list(outcomes.values()))
    doses = {**chosen, "pilot": [outcomes[c] for c in PILOT_CANDIDATES if c in outcomes],
             "rule": ("c_high = the first of 0.1, 0.03, 0.01, 0.003 whose seed-100 run (filter "
                      "none, 100 steps) keeps held-out format errors <= 0.20 at every evaluation "
                      "and the batch's <= 0.20 averaged over steps 91-100 (stopped early, and "
                      "not surviving, once the batch's is > 0.50 for 5 steps in a row); c_low = "
                      "c_high / 10 to one significant digit; none surviving: 0, 0.0003, 0.003, "
                      "recorded as a deviation (README 'Study 3')"),
             "commit": git_commit(), "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "doses.json").write_text(json.dumps(doses, indent=1, default=str))
    print(f"doses: {doses['doses']}" + (" (fallback: no candidate survived -- record it as a "
                                        "dated deviation)" if chosen["fallback"] else ""))
    return 0


# ---------------------------------------------------------------- the counted runs


def run_study(out: Path, seeds: list[int], arms: list[str] | None, cache_root: Path,
              rerun: bool = False, dry_run: bool = False, s: dict[str, Any] = FULL,
              plots: bool = True) -> int:
    """Every counted run in the registered order (skipping finished ones, resuming interrupted
    ones), the analysis after each (``plots``: also the curves)."""
    import study3_report

    try:
        doses: dict[str, Any] = load_doses(out)
    except SystemExit:
        if not dry_run:
            raise
        doses = {"d0": 0.0, "dlow": "<dlow from doses.json>", "dhigh": "<dhigh from doses.json>"}
        print(f"# {out / 'doses.json'} is missing: the doses below are placeholders (run the "
              "pilot first)")
    steps = plan(out, doses, seeds, arms, s, rerun)
    if dry_run:
        _print(dry_run_lines(steps, cache_root, [
            f"Study 3: {len({a for a, _ in run_order(seeds, arms)})} arms x {len(seeds)} seeds x "
            f"{s['steps']} steps, one at a time; doses d0 {doses['d0']}, dlow {doses['dlow']}, "
            f"dhigh {doses['dhigh']}"]))
        return 0
    settings = {**s, "seeds": seeds, "design": "v3", "doses": doses,
                "arms": {a: [*FILTERS[f], dose_override(doses[d])] for a, (d, f) in ARMS.items()}}
    cold: set[int] = set()
    failed = []
    for st in steps:
        arm, seed, run_dir = st["arm"], st["seed"], st["run_dir"]
        if st["action"] == "skip":
            print(f"  {arm} seed {seed}: recorded, skipped", flush=True)
            continue
        cache = cache_root / f"s{seed}"
        if seed not in cold:  # cold caches per seed and sitting, as in Study 2
            shutil.rmtree(cache, ignore_errors=True)
            cold.add(seed)
        if st["action"] == "start" and run_dir.exists():  # a start that left no checkpoint
            shutil.rmtree(run_dir)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        w = run_watched(st["command"], run_dir.parent / f"{run_dir.name}.log",
                        env=study_env(cache), cwd=ROOT)
        print(f"  {arm} seed {seed}: exit {w['returncode']}, {w['wall_s']:.0f} s, others used "
              f"{w['foreign_cores']:.2f} cores meanwhile", flush=True)
        row = {"arm": arm, "seed": seed, "returncode": w["returncode"], "wall_s": w["wall_s"],
               "foreign_cores": w["foreign_cores"], "foreign_cpu_s": w["foreign_cpu_s"],
               "overrides": st["overrides"], "resumed_from": st["resume_step"],
               "commit": git_commit(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        previous = _results(out)
        runs = [r for r in previous.get("runs", []) if (r["arm"], r["seed"]) != (arm, seed)]
        order = {k: i for i, k in enumerate(run_order(sorted({*seeds, *(r["seed"] for r in runs)})))}
        runs = sorted([*runs, row], key=lambda r: order.get((r["arm"], r["seed"]), len(order)))
        study3_report.analyze(out, runs, {**previous.get("settings", {}), **settings,
                                            "seeds": sorted({*seeds, *previous.get("settings", {})
                                                             .get("seeds", [])})}, plots=plots)
        if w["returncode"] != 0:
            failed.append(f"{arm} seed {seed} (exit {w['returncode']})")
    if failed:
        print(f"failed or interrupted runs: {', '.join(failed)} (logs in {out / 'runs'}; "
              "rerun to resume them)", file=sys.stderr)
        return 1
    return 0
