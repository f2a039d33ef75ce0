"""Does the default job learn on every seed? The distribution of `make train` over seeds.

Runs the default job (``ragen2-train``, the command behind ``make train``) for every warm-start
seed (``trainer.warm_start.seed``) x RL seed (``seed``) pair, one after another, each in its own
process with its own **empty caches** (tiny model, warm start, vLLM and torch compile caches all
under a fresh temporary directory), the way a newcomer on a fresh machine runs it. Per run it
records held-out success before and after RL, the gain, the training curve, the wall time of the
whole command (tiny-model build and warm start included) and the exit status, and writes
everything with the machine description to ``benchmarks/results/robustness.json``.

Runs are keyed by a *label* (a name for one configuration: the default job, or the default job
with ``--set`` overrides): a run already recorded under its label with the same overrides is
skipped, so one distribution can be gathered over several sittings, and a second label measured
in the same sitting gives a side-by-side comparison (wall times of machines of this kind differ
~3x, so only ratios within one sitting mean anything).

Usage::

    python benchmarks/robustness.py                          # today's default job (CURRENT), 3 x 2
    python benchmarks/robustness.py --label pre_issue14      # the default as it was (PRESETS)
    python benchmarks/robustness.py --label lr1e-3 --set algorithm.lr=1e-3
    python benchmarks/robustness.py --warm-seeds 3 4 --rl-seeds 2   # seeds not tuned on
    python benchmarks/robustness.py --report --against pre_issue14  # the bar, no new runs
    python benchmarks/robustness.py --report --label staleness1_lr2.5e-4 --against staleness0 \
        --bar near                                                  # issue 31's bar

``--share-warm-start`` gives all RL seeds of one warm-start seed one cache (the first run builds
the warm start, the others load it): cheaper, but only the first run of each is cold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from common import machine  # noqa: E402  (benchmarks/common.py)

RESULTS = HERE / "results" / "robustness.json"

#: named configurations: the overrides that turn today's default job into that configuration
PRESETS: dict[str, list[str]] = {
    # issue 14's default job, recorded with no overrides while it was the default (2026-12-01):
    # retired (RETIRED) since the defaults moved on
    "default": [],
    # the default job of 2026-12-07 (issue 44): the settings it made the defaults, spelled out
    # (retired since: RETIRED)
    "fast_v1": ["model.dtype=auto", "learner.micro_batch_tokens=8192",
                "monitor.first_turn_panel=auto"],
    # today's default job (issue 44, 2026-12-08): fast_v1's settings, the attention's backward in
    # fp32 and the gradients reduced once an optimiser step, spelled out
    "reduce_once_xeon": ["model.dtype=auto", "learner.micro_batch_tokens=8192",
                         "monitor.first_turn_panel=auto",
                         "learner.attn_implementation=sdpa_fp32_backward",
                         "learner.reduce_once=true"],
    # issue 14's default job with its settings spelled out, measured again at fast_v1's commit
    # (the held-out split of ca16521 and later changes moved its figures since `default`'s runs)
    "issue14_job": ["model.dtype=float32", "learner.micro_batch_tokens=0",
                    "monitor.first_turn_panel=always"],
    # the default job as it was when issue 14 was filed (commit 71f3b68), every knob the issue's
    # work touched set to its value then
    "pre_issue14": ["trainer.total_steps=40", "trainer.warm_start.episodes=512",
                    "trainer.warm_start.epochs=1", "trainer.warm_start.batch_size=8",
                    "trainer.warm_start.lr=2e-3", "trainer.warm_start.random_action_prob=0.5",
                    "rollout.env_groups=8", "rollout.group_size=4", "rollout.max_turns=8",
                    "algorithm.lr=5e-4", "algorithm.ppo_epochs=1", "algorithm.ppo_mini_batches=2",
                    "filter=none"],
}
#: the label a run without --label measures: today's default job
CURRENT = "reduce_once_xeon"
#: labels whose recorded overrides no longer make the job they measured (the defaults changed
#: under them): reported and judged, never extended
RETIRED = {"default": "issue 14's default job, recorded with no overrides before the defaults "
                      "changed on 2026-12-07 (issue 44); measure it again under another --label "
                      "with --set model.dtype=float32 learner.micro_batch_tokens=0 "
                      "monitor.first_turn_panel=always",
           "fast_v1": "the default job of 2026-12-07; the tiny recipe has since taken "
                      "learner.attn_implementation=sdpa_fp32_backward and learner.reduce_once=true, "
                      "which its recorded overrides do not set: measure it again under another "
                      "--label with --set learner.attn_implementation=sdpa learner.reduce_once=false",
           **{label: "recorded before the tiny recipe took learner.reduce_once=true (2026-12-08), "
                     "which its overrides do not set: measure it again under another --label "
                     "with --set learner.reduce_once=false"
              for label in ("fast_v1_xeon", "attn_bwd_xeon", "ws2_xeon")}}
#: per-step metrics kept as the training curve
CURVE_KEYS = ("rollout/success", "rollout/reward_mean", "rollout/format_error_rate",
              "rollout/in_group_reward_std", "actor/entropy", "eval/success", "timing/step_s",
              "timing/warm_start_s", "timing/eval_s", "async/staleness_mean",
              "async/is_weight_mean", "async/is_weight_max", "async/is_truncated_frac")
#: the bar of the default job (issue 14): every gain, the median gain, the wall-time ratio
BAR = {"min_gain": 0.15, "median_gain": 0.25, "max_wall_ratio": 2.0}
#: the bar of a variant that must learn as well as its baseline (issue 31, item 4: the default
#: job at trainer.max_staleness=1 next to k = 0): every gain, and the median gain's distance
NEAR_BAR = {"min_gain": 0.15, "median_gain_within": 0.05}
#: the runs the bar is about: warm-start seeds 0-2 x RL seeds 0-1 (others are reported beside it)
BAR_SEEDS = {"warm": (0, 1, 2), "rl": (0, 1)}


def run_key(warm_seed: int, rl_seed: int) -> str:
    return f"w{warm_seed}_s{rl_seed}"


def cold_env(cache: Path) -> dict[str, str]:
    """The environment of a run whose every cache lives (empty at first) under ``cache``."""
    env = dict(os.environ)
    env.update({
        "RAGEN2_CACHE": str(cache / "ragen2"),  # tiny model + warm start
        "XDG_CACHE_HOME": str(cache / "xdg"),  # vLLM (VLLM_CACHE_ROOT follows it), HF, pip
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "RAY_AUTH_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def read_curve(run_dir: Path) -> list[dict[str, float]]:
    """The run's ``metrics.jsonl`` reduced to :data:`CURVE_KEYS` per step (torn rows skipped)."""
    curve = []
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return curve
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        curve.append({"step": row["step"], **{k: row[k] for k in CURVE_KEYS if k in row}})
    return curve


def run_one(overrides: list[str], warm_seed: int, rl_seed: int, run_dir: Path,
            cache: Path) -> dict[str, Any]:
    """One ``ragen2-train`` process; returns its record (before/after/gain/wall/curve)."""
    train = Path(sys.executable).with_name("ragen2-train")
    cmd = [str(train), *overrides, f"seed={rl_seed}", f"trainer.warm_start.seed={warm_seed}",
           f"hydra.run.dir={run_dir}"]
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log = run_dir.parent / f"{run_dir.name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=cold_env(cache),
                            cwd=ROOT, check=False).returncode
    wall = time.perf_counter() - t0
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    curve = read_curve(run_dir)
    step0 = next((r for r in curve if r["step"] == 0), {})
    before, after = summary.get("eval_before"), summary.get("eval_after")
    rec = {"warm_seed": warm_seed, "rl_seed": rl_seed, "returncode": rc, "wall_s": wall,
           "before": before, "after": after,
           "gain": None if before is None or after is None else after - before,
           "warm_start_s": step0.get("timing/warm_start_s"), "command": cmd[1:-1],
           "log_tail": log.read_text()[-2000:] if rc else "",
           "load_avg_1m_after": os.getloadavg()[0],
           "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "curve": curve}
    print(f"  {run_key(warm_seed, rl_seed)}: exit {rc}, {wall:.0f} s, before {before}, "
          f"after {after}", flush=True)
    return rec


def stats(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs),
            "mean": statistics.fmean(xs), "n": len(xs)}


def summarize(runs: dict[str, dict]) -> dict[str, Any]:
    ok = [r for r in runs.values() if r["returncode"] == 0 and r["gain"] is not None]
    return {k: stats([r[k] for r in ok]) for k in ("before", "after", "gain", "wall_s")} | {
        "runs": len(runs), "failed": len(runs) - len(ok)}


def bar_grid() -> set[str]:
    """The run keys every bar judges (:data:`BAR_SEEDS`)."""
    return {run_key(w, r) for w in BAR_SEEDS["warm"] for r in BAR_SEEDS["rl"]}


def cpu_kinds(runs: dict[str, dict]) -> list[str]:
    """The CPU kinds the runs ran on (each run's ``machine.cpu``)."""
    return sorted({(r.get("machine") or {}).get("cpu") or "unrecorded" for r in runs.values()})


def machine_caveat(label: str, doc: dict, against: str) -> list[str]:
    """A line when the two labels' runs ran on different CPU kinds: the same code and seeds
    learn differently there (their bf16 and fp32 kernels differ, and the job is chaotic), so
    the comparison mixes the machine with the setting."""
    mine, base = (cpu_kinds(doc["labels"][lb]["runs"]) for lb in (label, against))
    if mine == base:
        return []
    return [f"CPU kinds differ ({label}: {', '.join(mine)}; {against}: {', '.join(base)}): "
            "the comparison mixes the machine with the setting"]


def check_bar(label: str, doc: dict, against: str) -> list[str]:
    """Lines stating whether ``label`` meets the bar against the baseline ``against``."""
    grid = bar_grid()
    every = doc["labels"][label]["runs"]
    runs = {k: r for k, r in every.items() if k in grid}
    s, b = summarize(runs), summarize(doc["labels"][against]["runs"])
    if s["gain"] is None or b["after"] is None:
        return [f"{label} vs {against}: not enough finished runs"]
    missing = sorted(grid - set(runs))
    gains = [r["gain"] for r in runs.values() if r["gain"] is not None]
    walls = [r["wall_s"] for r in runs.values()]
    wall_ref = b["wall_s"]["median"]
    lines = [
        f"every gain >= {BAR['min_gain']}: {min(gains):.3f} (min) -> "
        f"{'yes' if min(gains) >= BAR['min_gain'] and s['failed'] == 0 else 'NO'}",
        f"median gain >= {BAR['median_gain']}: {s['gain']['median']:.3f} -> "
        f"{'yes' if s['gain']['median'] >= BAR['median_gain'] else 'NO'}",
        f"median after {s['after']['median']:.3f} > {against}'s {b['after']['median']:.3f} -> "
        f"{'yes' if s['after']['median'] > b['after']['median'] else 'NO'}",
        f"every wall <= {BAR['max_wall_ratio']}x {against}'s median {wall_ref:.0f} s: max "
        f"{max(walls):.0f} s = {max(walls) / wall_ref:.2f}x -> "
        f"{'yes' if max(walls) <= BAR['max_wall_ratio'] * wall_ref else 'NO'}",
    ]
    if missing:
        lines.append(f"not run yet: {', '.join(missing)} -> NO")
    lines += machine_caveat(label, doc, against)
    others = {k: r for k, r in every.items() if k not in grid}
    if others:
        lines.append("seeds outside the bar's grid: " + ", ".join(
            f"{k} gain {r['gain']:.3f}" if r["gain"] is not None else f"{k} failed"
            for k, r in sorted(others.items())))
    return lines


def check_near(label: str, doc: dict, against: str) -> list[str]:
    """Lines stating whether ``label`` meets :data:`NEAR_BAR` against ``against``: every run of
    the grid gains at least ``min_gain`` and the two labels' median gains over the grid differ
    by at most ``median_gain_within``. Both labels are judged on the grid only."""
    grid = bar_grid()
    mine, base = ({k: r for k, r in doc["labels"][lb]["runs"].items() if k in grid}
                  for lb in (label, against))
    s, b = summarize(mine), summarize(base)
    if s["gain"] is None or b["gain"] is None:
        return [f"{label} vs {against}: not enough finished runs"]
    gains = [r["gain"] for r in mine.values() if r["gain"] is not None]
    gap = s["gain"]["median"] - b["gain"]["median"]
    lines = [
        f"every gain >= {NEAR_BAR['min_gain']}: {min(gains):.3f} (min) -> "
        f"{'yes' if min(gains) >= NEAR_BAR['min_gain'] and s['failed'] == 0 else 'NO'}",
        f"median gain {s['gain']['median']:.3f} within {NEAR_BAR['median_gain_within']} of "
        f"{against}'s {b['gain']['median']:.3f}: {gap:+.3f} -> "
        f"{'yes' if abs(gap) <= NEAR_BAR['median_gain_within'] + 1e-12 else 'NO'}",
    ]
    for lb, runs in ((label, mine), (against, base)):
        if missing := sorted(grid - set(runs)):
            lines.append(f"{lb}: not run yet: {', '.join(missing)} -> NO")
    return lines + machine_caveat(label, doc, against)


def table(label: str, runs: dict[str, dict]) -> list[str]:
    out = [f"{label}:", "  run     before  after   gain    wall"]
    for key in sorted(runs):
        r = runs[key]
        f = (lambda v: "  n/a " if v is None else f"{v:6.3f}")
        out.append(f"  {key}  {f(r['before'])}  {f(r['after'])}  {f(r['gain'])}  "
                   f"{r['wall_s']:5.0f} s" + ("" if r["returncode"] == 0 else f"  exit {r['returncode']}"))
    s = summarize(runs)
    for k in ("before", "after", "gain", "wall_s"):
        if s[k]:
            out.append(f"  {k:7s} median {s[k]['median']:.3f}  min {s[k]['min']:.3f}  "
                       f"max {s[k]['max']:.3f}")
    return out


def plot(doc: dict[str, Any], labels: list[str], out: Path) -> Path:
    """``out``: per label, held-out success at every evaluation of every run (thin lines) and
    the median over runs (thick), beside training success (rollout/success, 5-step mean)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(fig)
    ax_eval, ax_train = fig.subplots(1, 2, sharey=True)
    for i, label in enumerate(labels):
        color = f"C{i}"
        runs = [r for r in doc["labels"][label]["runs"].values() if r["returncode"] == 0]
        per_step: dict[int, list[float]] = {}
        for j, r in enumerate(runs):
            ev = [(c["step"], c["eval/success"]) for c in r["curve"] if "eval/success" in c]
            for st, v in ev:
                per_step.setdefault(st, []).append(v)
            ax_eval.plot(*zip(*ev), color=color, alpha=0.3, lw=0.8, marker=".")
            tr = [(c["step"], c["rollout/success"]) for c in r["curve"] if "rollout/success" in c]
            if len(tr) >= 5:
                xs, ys = zip(*tr)
                smooth = [statistics.fmean(ys[max(0, k - 4):k + 1]) for k in range(len(ys))]
                ax_train.plot(xs, smooth, color=color, alpha=0.5, lw=0.8,
                              label=label if j == 0 else None)
        steps = sorted(st for st, v in per_step.items() if len(v) == len(runs))
        ax_eval.plot(steps, [statistics.median(per_step[st]) for st in steps], color=color, lw=2.5,
                     marker="o", label=f"{label} (median of {len(runs)})")
    ax_eval.set(title="held-out success (128 seeds)", xlabel="RL step", ylabel="success")
    ax_train.set(title="training success (5-step mean)", xlabel="RL step")
    for ax in (ax_eval, ax_train):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def load(path: Path) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"benchmark": "robustness", "labels": {}}


def save(path: Path, doc: dict[str, Any]) -> None:
    for entry in doc["labels"].values():
        entry["summary"] = summarize(entry["runs"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)  # a killed sitting never leaves a torn results file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default=None,
                    help=f"name of the configuration (presets: {', '.join(PRESETS)}; any other "
                         f"name needs --set); default: {CURRENT!r}, today's default job (with "
                         "--report: every label)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="ragen2-train overrides added to the label's preset")
    ap.add_argument("--warm-seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--rl-seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--share-warm-start", action="store_true",
                    help="one cache per warm-start seed (only its first run is cold)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--work-dir", type=Path, default=ROOT / "outputs" / "robustness",
                    help="run directories (kept: metrics, samples, checkpoints)")
    ap.add_argument("--rerun", action="store_true", help="run again even if recorded")
    ap.add_argument("--report", action="store_true", help="print the tables, run nothing")
    ap.add_argument("--against", default=None, help="baseline label for the bar")
    ap.add_argument("--bar", choices=("issue14", "near"), default="issue14",
                    help="issue14: gains, after and wall against the baseline (default); near: "
                         "every gain >= 0.15 and the median gain within 0.05 of the baseline's")
    ap.add_argument("--plot", nargs="*", default=None, metavar="LABEL",
                    help="write <out>.png with these labels' curves (no label: all)")
    args = ap.parse_args()
    judged = [args.label] if args.label else None  # --report judges every label unless named
    args.label = args.label or CURRENT
    if args.label in RETIRED and not args.report:
        ap.error(f"--label {args.label!r} is retired: {RETIRED[args.label]}")

    if args.label not in PRESETS and not args.set and not args.report:
        ap.error(f"--label {args.label!r} is no preset ({', '.join(PRESETS)}): give its "
                 "overrides with --set KEY=VALUE ...")
    overrides = [*PRESETS.get(args.label, []), *args.set]
    doc = load(args.out)
    if not args.report:
        entry = doc["labels"].setdefault(args.label, {"overrides": overrides, "runs": {}})
        if entry["overrides"] != overrides:
            sys.exit(f"robustness: label {args.label!r} was recorded with overrides "
                     f"{entry['overrides']}, not {overrides}: use another --label")
        doc["machine"] = machine()
        try:  # the code the runs ran: "+dirty" when the tree had uncommitted changes
            commit = subprocess.run(["git", "describe", "--always", "--dirty=+dirty"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip()
        except OSError:
            commit = ""
        shared: dict[int, Path] = {}
        for w in args.warm_seeds:
            for s in args.rl_seeds:
                key = run_key(w, s)
                done = entry["runs"].get(key)
                if done and done["returncode"] == 0 and not args.rerun:
                    print(f"  {key}: recorded, skipped", flush=True)
                    continue
                if args.share_warm_start:
                    cache = shared.setdefault(w, Path(tempfile.mkdtemp(prefix=f"ragen2-w{w}-")))
                else:
                    cache = Path(tempfile.mkdtemp(prefix=f"ragen2-{key}-"))
                try:
                    rec = run_one(overrides, w, s, args.work_dir / args.label / key, cache)
                finally:
                    if not args.share_warm_start:
                        shutil.rmtree(cache, ignore_errors=True)
                rec.update({"commit": commit, "shared_warm_start": args.share_warm_start,
                            "machine": machine()})
                entry["runs"][key] = rec
                save(args.out, doc)
        for cache in shared.values():
            shutil.rmtree(cache, ignore_errors=True)
        save(args.out, doc)
    for label, entry in doc["labels"].items():
        print("\n".join(table(label, entry["runs"])))
    if args.against:
        if args.against not in doc["labels"]:
            sys.exit(f"robustness: no runs recorded under --against {args.against!r}")
        for label in ([args.label] if not args.report else
                      judged or [lb for lb in doc["labels"] if lb != args.against]):
            print(f"bar for {label} against {args.against}:")
            check = check_near if args.bar == "near" else check_bar
            print("\n".join(f"  {line}" for line in check(label, doc, args.against)))
    if args.plot is not None:
        print(f"wrote {plot(doc, args.plot or list(doc['labels']), args.out.with_suffix('.png'))}")


if __name__ == "__main__":
    main()
