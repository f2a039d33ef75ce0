"""Blocks from the collapse study's committed results: ``results.json`` of each study directory
under ``benchmarks/collapse_study/`` and, for a value before RL that ``results.json`` does not
keep, the committed run's ``metrics.jsonl``; for Study 3, also its pilot's ``pilot.json`` and its
``doses.json``: results/collapse-study.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .data import ROOT, count, f, joined, load, median, pct, series, table

STUDY = "benchmarks/collapse_study"
V2, SOKOBAN = "results_v2", "results_v2_sokoban"
V1, RANDOM_START = "results", "results_random_start"
V3 = "results_v3"
#: the arm of Study 2 run outside its registration
EXPLORATORY = "none_ent_paper"
#: RAGEN-2's figures the study is compared with (the paper's, not this repository's data)
PAPER = {"entropy_rho": "−0.1", "top_p_shorter": "26–41%"}
#: the registered rule for Sokoban: the median gain over seeds that lets the bonus arms run there
SOKOBAN_RULE = 0.10
PANEL_MI, PANEL_FLOOR = "collapse/panel/turns/mi", "collapse/panel/turns/mi_floor"
RETRIEVAL = "collapse/turns/retrieval_acc@1"


def doc(study: str) -> dict:
    return load(f"{STUDY}/{study}/results.json")


def _runs(study: str, arm: str | None = None) -> list[dict]:
    return [r for r in doc(study)["runs"] if r["returncode"] == 0 and arm in (None, r["arm"])]


def _series(study: str, r: dict, key: str) -> dict[int, float]:
    return series(f"{STUDY}/{study}/runs/{r['arm']}_s{r['seed']}", key)


def _ends(study: str, r: dict, key: str) -> tuple[float, float]:
    """A run's first and last logged value of ``key``."""
    s = _series(study, r, key)
    return s[min(s)], s[max(s)]


def _coef(arm: str) -> str | None:
    """The entropy bonus an arm of Study 2 sets, if any."""
    return next((o.split("=", 1)[1] for o in doc(V2)["settings"]["arms"][arm]
                 if o.startswith("algorithm.entropy_coef=")), None)


def _verdicts(prefix: str) -> list[str]:
    return [h["verdict"] for h in doc(V2)["hypotheses"] if h["id"].startswith(prefix)]


def _seeds(seeds: list[int]) -> str:
    return (f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1))
            else joined(list(map(str, seeds))))


def _above_floor(r: dict) -> tuple[float, float] | None:
    """A Study 2 run's later-turn panel MI first -> last, if it started above its floor."""
    mi, floor = _series(V2, r, PANEL_MI), _series(V2, r, PANEL_FLOOR)
    first = min(mi)
    return (mi[first], mi[max(mi)]) if mi[first] > floor.get(first, float("-inf")) else None


def study2_setup() -> str:
    """The registered arms, seeds and schedule of Study 2."""
    s = doc(V2)["settings"]
    arms = [a for a in s["arms"] if a != EXPLORATORY]
    bonus = [a for a in arms if _coef(a)]
    return """
`python benchmarks/collapse_study/run.py` trains the FrozenLake default in {n} pre-registered arms
(`none`, `top_p` = RAGEN-2's filter, {bonus} with the entropy bonus the gradient-SNR diagnostic
chose, c = {coef}, and `tiered`), seeds {seeds} (warm-start and RL seed), {steps} steps each,
held-out success on {episodes} episodes every {eval_every} steps, the later-turn probe panel every
{monitor_every}. Results in `benchmarks/collapse_study/results_v2/` (tables, curves, reasoning
examples with the template n-grams marked, `report.html`):""".format(
        n=count(len(arms)), bonus=" and ".join(f"`{a}`" for a in bonus),
        coef=", ".join(sorted({_coef(a) for a in bonus})), seeds=_seeds(s["seeds"]),
        steps=s["steps"], episodes=s["eval_episodes"], eval_every=s["eval_every"],
        monitor_every=s["monitor_every"])


def study2_findings() -> str:
    """The findings of Study 2, each figure from its runs."""
    s = doc(V2)["settings"]
    none = _runs(V2, "none")
    bonus_arms = [a for a in s["arms"] if a != EXPLORATORY and _coef(a)]
    bonus = [r for a in bonus_arms for r in _runs(V2, a)]
    reasoning_last = max(max(_series(V2, r, RETRIEVAL)) for r in bonus)
    by = reasoning_last + s["monitor_every"]
    # the largest fall of the later-turn panel MI among the runs that kept their text (not the
    # bonus arms') and started above their floor
    kept = [r for r in _runs(V2) if r["arm"] not in bonus_arms and r["arm"] != EXPLORATORY]
    falls = [(r, p) for r in kept if (p := _above_floor(r))]
    ex, (a, b) = min(falls, key=lambda rp: rp[1][1] / rp[1][0])
    none_mi = [p for r in none if (p := _above_floor(r))]
    registered = """
- **No template collapse emerged without the bonus.** `none` learned (held-out {none_before:.2f} ->
  {none_after:.2f} median) with its later-turn panel MI at its warm-start level ({none_mi} nats
  where it started above its floor).
- **The bonus destroyed the text instead of templating it**, filtered or not: format errors
  {errors:.1f} and no parsable reasoning by step {by} in all {n_bonus} bonus runs, held-out success
  {bonus_success}. H1 (collapse under the bonus) and H2 (top-p prevents it) {h12}; at step
  {reasoning_last}, the last step with reasoning, retrieval was falling while entropy rose, but the
  format was already breaking.
- **H3 goes against the MI at this scale**: entropy tracked held-out success (per-run rho {rho:.2f}
  median) better than the flat MI did (H3a {h3a}, H3b {h3b}).
- **H4 (filtering shortens steps): {h4}**, too few runs had the machine to themselves.
- **The clearest template signature is exploratory**: `{ex_arm}` seed {ex_seed}'s later-turn panel
  MI {fell} ({a:.2f} -> {b:.2f} nats) while its reasoning stayed fluent, its entropy rose and its
  success rose {ex_before:.2f} -> {ex_after:.2f}; it writes the start state's sentence on states
  elsewhere.""".format(
        none_before=median(r["initial_success"] for r in none),
        none_after=median(r["final_success"] for r in none),
        none_mi=", ".join(f"{x:.2f} -> {y:.2f}" for x, y in none_mi),
        errors=min(_series(V2, r, "rollout/format_error_rate")[by] for r in bonus), by=by,
        n_bonus=count(len(bonus)), bonus_success=f(max(r["final_success"] for r in bonus)),
        h12=("therefore have no data" if set(_verdicts("H1") + _verdicts("H2")) == {"no data"}
             else "have data: see the tables"),
        reasoning_last=reasoning_last,
        rho=doc(V2)["spearman_default_arms"]["entropy_vs_success"]["rho"],
        h3a=_verdicts("H3a")[0], h3b=_verdicts("H3b")[0],
        h4="no data" if set(_verdicts("H4")) == {"no data"} else "see the tables",
        ex_arm=ex["arm"], ex_seed=ex["seed"], fell="halved" if 0.4 <= b / a <= 0.6 else "fell",
        a=a, b=b, ex_before=ex["initial_success"], ex_after=ex["final_success"])
    return registered + "\n\n" + "\n".join(_exploratory() + [_sokoban()])


def _exploratory() -> list[str]:
    """RAGEN-2's own bonus, run on one seed outside the registration."""
    runs = _runs(V2, EXPLORATORY)
    if not runs:
        return []
    r = runs[0]
    t0, t1 = _ends(V2, r, RETRIEVAL)
    n0, n1 = _ends(V2, _runs(V2, "none")[0], RETRIEVAL)
    same = f"{t0:.2f}{t1:.2f}" == f"{n0:.2f}{n1:.2f}"
    return ["""
- **RAGEN-2's own bonus ({coef}, exploratory, {n} seed{s})** behaved like no bonus: held-out
  {before:.2f} -> {after:.2f}, entropy flat, later-turn retrieval {t0:.2f} -> {t1:.2f}{same}.
""".strip().format(coef=_coef(EXPLORATORY), n=count(len(runs)), s="s" if len(runs) > 1 else "",
                   before=r["initial_success"], after=r["final_success"], t0=t0, t1=t1,
                   same=" as in `none`" if same else "")]


def _sokoban() -> str:
    """Sokoban's `none` runs and the registered rule they decide."""
    runs = _runs(SOKOBAN, "none")
    seeds = doc(SOKOBAN)["settings"]["seeds"]
    gains = [r["final_success"] - r["initial_success"] for r in runs]
    if len(runs) == len(seeds) - 1:  # the last seed cannot move the median out of the two
        lo, hi = min(gains), max(gains)
        decided = (f"is decided by these two: a median of three lies between {lo:+.2f} and "
                   f"{hi:+.2f} whatever seed {seeds[-1]} does, so the study "
                   + ("stops on Sokoban as registered" if hi < SOKOBAN_RULE
                      else "goes on to the bonus arms"))
    else:
        decided = (f"gives a median of {median(gains):+.2f} over {len(runs)} seeds, so the study "
                   + ("stops on Sokoban" if median(gains) < SOKOBAN_RULE
                      else "goes on to the bonus arms"))
    ret = [_ends(SOKOBAN, r, RETRIEVAL) for r in runs]
    chance = _series(SOKOBAN, runs[0], "collapse/turns/retrieval_chance@1")
    return """
- **Sokoban, `none`, seeds {seeds}**: held-out {held_out}. The registered rule (median gain over
  seeds {all_seeds} at least {rule:+.2f} before the bonus arms run there) {decided}. Seed
  {first}'s batch later-turn retrieval fell {r0:.2f} -> {r1:.2f} (chance {chance}) with entropy
  flat{others}; the probe panels sat at their floors.""".strip().format(
        seeds=joined([str(r["seed"]) for r in runs]),
        held_out=" and ".join(f"{f(r['initial_success'])} -> {f(r['final_success'])}"
                              for r in runs),
        all_seeds=_seeds(seeds), rule=SOKOBAN_RULE, decided=decided, first=runs[0]["seed"],
        r0=ret[0][0], r1=ret[0][1], chance=chance[min(chance)],
        others="".join(f", seed {r['seed']}'s {x:.2f} -> {y:.2f}"
                       for r, (x, y) in zip(runs[1:], ret[1:])))


def study1_setup() -> str:
    """Study 1's arms, seeds, steps and wall time (the regulariser arm apart)."""
    s = doc(V1)["settings"]
    arms = [a for a in s["arms"] if a != "reg"]
    names = {"none": "no filter", "top_p": "top-p", "tiered": "tiered"}
    return """
`python benchmarks/collapse_study/run.py --design v1` ({minutes:.0f} min here) trains the
FrozenLake default (with the earlier default's smaller batch and one-epoch warm start) in {n} arms
({names}), {seeds} seeds each, for {steps} steps. `--arms reg` adds a regulariser-heavy arm. What
reproduced at the tiny model's scale and what did not:""".format(
        minutes=sum(r["wall_s"] for r in _runs(V1) if r["arm"] in arms) / 60, n=count(len(arms)),
        names=", ".join(names[a] for a in arms), seeds=len(s["seeds"]), steps=s["steps"])


def _rho(c: dict) -> str:
    """``−0.16``: a Spearman rho with the Unicode minus."""
    return f"{c['rho']:+.2f}".replace("-", "−")


def study1_findings() -> str:
    """Study 1's findings, each figure from its results.json or its runs."""
    c, arms = doc(V1)["spearman_default_arms"], doc(V1)["arms"]
    rs = doc(RANDOM_START)
    mi = [abs(v) for r in _runs(V1) for v in _series(V1, r, "collapse/mi").values()]
    bound = max(v for r in _runs(V1) for v in _series(V1, r, "collapse/log_n").values())
    step = {a: arms[a]["mean_step_s"]["mean"] / arms["none"]["mean_step_s"]["mean"] for a in arms}
    rs_step = rs["arms"]["top_p"]["mean_step_s"]["mean"] / rs["arms"]["none"]["mean_step_s"]["mean"]
    return """
- **MI tracks success: not reproduced.** MI stayed at its floor in every run (|MI| ≤ {mi:.3f} nats
  of a possible {bound:.2f}), so its Spearman against held-out success is noise: {mi_rho}, p =
  {mi_p:.2f}. The tiny model's first-turn reasoning ignores the board from the warm start on. The
  monitor diagnoses template collapse from step 1, which is right, but there is no MI signal to
  track.
- **Entropy does not track success: reproduced.** {ent_rho} (p = {ent_p:.2f}), against the paper's
  {paper_rho}.
- **Filtering improves success: not reproduced.** Final held-out success was {none} (none),
  {top_p} (top-p) and {tiered} (tiered), within the seeds' spread.
- **Filtering shortens steps: top-p by {top_p_shorter}**, a little under the paper's
  {paper_shorter}. Tiered is {tiered_step} {tiered_dir}.
- **The regulariser-heavy arm collapsed** in all seeds: entropy rose to {reg_entropy:.1f} nats a
  token and success fell to {reg_success:.0f}. MI could not flag this, because it was already at
  its floor.
- **`--variant random_start`:** the prompt states the start and the goal, and a longer warm start
  copies them into the reasoning. MI starts at its ceiling and stays near it, so against held-out
  success it is {rs_rho}. Against training success it is {rs_train_rho} (p = {rs_train_p:.3f}), but
  that rests on a few dips from the ceiling. top-p steps are {rs_shorter} shorter here.""".format(
        mi=max(mi), bound=bound, mi_rho=_rho(c["mi_vs_success"]), mi_p=c["mi_vs_success"]["p"],
        ent_rho=_rho(c["entropy_vs_success"]), ent_p=c["entropy_vs_success"]["p"],
        paper_rho=PAPER["entropy_rho"], none=f(arms["none"]["final_success"]["mean"]),
        top_p=f(arms["top_p"]["final_success"]["mean"]),
        tiered=f(arms["tiered"]["final_success"]["mean"]), top_p_shorter=pct(1 - step["top_p"]),
        paper_shorter=PAPER["top_p_shorter"], tiered_step=pct(abs(step["tiered"] - 1)),
        tiered_dir="longer" if step["tiered"] > 1 else "shorter",
        reg_entropy=arms["reg"]["final_token_entropy"]["mean"],
        reg_success=arms["reg"]["final_success"]["mean"],
        rs_rho=_rho(rs["spearman"]["mi_vs_success"]),
        rs_train_rho=_rho(rs["spearman"]["mi_vs_train_success"]),
        rs_train_p=rs["spearman"]["mi_vs_train_success"]["p"], rs_shorter=pct(1 - rs_step))


# --- Study 3 --------------------------------------------------------------------------------------


def _study3():
    """``study3`` and ``study3_report``, imported as ``run.py`` imports them (by name, from
    ``benchmarks/collapse_study/``)."""
    here = str(ROOT / STUDY)
    if here not in sys.path:
        sys.path.append(here)
    import study3
    import study3_report
    return study3, study3_report


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def study3_status(out: str = f"{STUDY}/{V3}") -> str:
    """Where Study 3 stands, from ``out`` (``results_v3/``, a path from the repository root) as
    committed: the dose pilot's outcome per candidate (``pilot/pilot.json``; a candidate without
    an entry is running or not run), the doses (``doses.json``, else why they are not chosen
    yet: ``study3.choose_doses``), the warm-start screen (``screen.json``, when there is one),
    the state of every registered run (``study3.run_order`` over the counted seeds,
    ``study3.registered_seeds``; ``study3_report.missing_runs`` on ``results.json``'s records; a run
    without a record counts as not run), each finished run's headline figures as
    ``study3_report.analyze`` recorded them (``per_run``), and the verdicts
    (``study3_analysis.verdict_text``, recorded as ``verdicts``) once every registered run is
    finished; until then, how many are."""
    s3, report = _study3()
    path = ROOT / out
    pilot = (_json(path / "pilot" / "pilot.json") or {"candidates": []})["candidates"]
    return "\n\n".join(x for x in [_pilot(s3, path, pilot), _doses(s3, path, pilot),
                                    _screen(s3, report, path), _study3_runs(s3, report, path)] if x)


def _screen(s3, report, path: Path) -> str:
    """The warm-start screen (``screen.json``; README "Study 3", Deviations 2026-12-06): one row
    per screened seed, and the counted seeds; empty before the screen."""
    screen = s3.load_screen(path)
    if screen is None:
        return ""
    c = s3.counted_seeds(screen)
    rows = [[str(e["seed"]), "—" if e["grounding"] is None else f"{e['grounding']:.3f}",
             "**yes**" if e["eligible"] else "no"] for e in screen["seeds"]]
    return ("The warm-start screen: a seed counts when its later-turn panel grounding at step 0 "
            f"is at least {report.ELIGIBLE_GROUNDING:g}; the first {s3.COUNTED} such seeds in "
            "order are the counted seeds.\n\n"
            + table(["seed", "grounding at step 0", "eligible"], rows) + "\n\nCounted seeds: "
            + (", ".join(map(str, c["seeds"])) or "none yet")
            + ("" if c["finished"] else " (screening goes on)")
            + (f" (fewer than {s3.COUNTED} after every seed: a deviation)" if c["deviation"]
               else "") + ".")


def _pilot(s3, path: Path, pilot: list[dict]) -> str:
    """The pilot's table: one row per candidate, in the registered order."""
    got = {float(o["coef"]): o for o in pilot}
    rows, survived, waiting = [], False, False
    for c in s3.PILOT_CANDIDATES:
        o = got.get(c)
        if o is None:
            rows.append([f"{c:g}", "not needed: an earlier candidate survives" if survived
                         else "waits for the earlier candidates" if waiting
                         else "running or not run", "", "", ""])
            waiting = True
            continue
        survived = survived or bool(o["survives"])
        logged = s3._rows(path / "pilot" / f"c{c}_s{s3.PILOT_SEED}")
        rows.append([f"{c:g}", {True: "**survives**", False: "does not survive",
                                None: "no outcome"}[o["survives"]], o["why"],
                     str(max(logged, default=o.get("stopped_at") or "—")),
                     f"`{o.get('commit', '—')}`"])
    return (f"The dose pilot (exploratory, counts toward nothing): seed {s3.PILOT_SEED}, filter "
            f"`none`, the candidate bonuses in order until one survives.\n\n"
            + table(["entropy_coef", "outcome", "why", "last step logged", "commit"], rows))


def _doses(s3, path: Path, pilot: list[dict]) -> str:
    """The chosen doses, or why there are none yet."""
    chosen = _json(path / "doses.json")
    if chosen is None:
        try:
            d = s3.choose_doses(pilot)["doses"]
        except ValueError as e:
            return f"The doses are not chosen yet ({e})."
        return (f"The pilot's rule gives d0 {d['d0']:g}, dlow {d['dlow']:g} and dhigh "
                f"{d['dhigh']:g}, but `doses.json` is not committed yet.")
    d = chosen["doses"]
    return (f"Doses (`doses.json`): d0 {d['d0']:g}, dlow {d['dlow']:g} and dhigh {d['dhigh']:g}"
            + (" (the fallback: no candidate survived, a deviation)" if chosen.get("fallback")
               else "") + ".")


def _headline(r: dict, _f) -> list[str]:
    """One finished run's row, from its ``per_run`` entry, in ``tables.md``'s formats (``_f``)."""
    change = (f"{_f(r['grounding_change'], 3, True)} [{_f(r['grounding_lo'], 3, True)}, "
              f"{_f(r['grounding_hi'], 3, True)}]" if r["grounding_change"] is not None
              else f"— ({r['grounding_change_why']})")
    return [f"`{r['key']}`",
            f"{_f(r['grounding_before'])} -> " + ", ".join(_f(v) for v in r["grounding_after"]),
            change, f"{_f(r['success_before'])} -> {_f(r['success_final'])}",
            _f(r["format_errors_final"]),
            {True: "**yes**", False: "no", None: "n/a"}[r["template_collapse"]]]


def _study3_runs(s3, report, path: Path) -> str:
    """The registered runs' states, the finished runs' figures, the verdicts or how many wait."""
    res = _json(path / "results.json") or {}
    seeds = s3.registered_seeds(path)
    order = s3.run_order(seeds)
    done, missing = report.missing_runs(path, res.get("runs", []), seeds)
    recorded = {(r["arm"], r["seed"]) for r in res.get("runs", [])}

    def state(arm: str, seed: int) -> str:
        """Finished, not run, or what missing_runs says of a recorded run (75: interrupted)."""
        if (arm, seed) in done:
            return "**finished**"
        return missing[f"{arm}_s{seed}"] if (arm, seed) in recorded else "not run"

    arms = list(dict.fromkeys(a for a, _ in order))
    parts = [f"The registered runs, in order seed by seed ({', '.join(f'`{a}`' for a in arms)}; "
             "a run in progress counts as not run until it is recorded):",
             table(["arm", *(f"seed {s}" for s in seeds)],
                   [[f"`{a}`", *(state(a, s) for s in seeds)] for a in arms])]
    per = {r["key"]: r for r in res.get("per_run", [])}
    rows = [per[k] for k in (f"{a}_s{s}" for a, s in order if (a, s) in done) if k in per]
    if rows:
        parts += ["Each finished run's later-turn panel grounding and held-out figures (as "
                  "`study3_report.analyze` recorded them):",
                  table(["run", "grounding 0 -> 90, 100", "change [95% over prompts]",
                         "held-out success 0 -> 100", "held-out format errors @100",
                         "template collapse"], [_headline(r, report._f) for r in rows])]
    collapsed = [r["key"] for r in rows if r["template_collapse"]]
    for key in collapsed:
        ex = report.panel_examples(path / "runs" / key, k=1)
        if ex:
            parts += [f"What template collapse looks like in `{key}`: the later-turn panel prompt "
                      f"whose grounding fell most (state `{ex[0]['state']}`), two of its samples "
                      "before RL and at the last panel step, each with the env's verdict (1 states "
                      "the true position, 0 a wrong one, - nothing checkable; `examples.md` has "
                      "three prompts per run):",
                      table(["step", "reasoning", "verdict"],
                            [[str(e["step"]), text.replace("|", "\\|"), mark]
                             for e in ex for text, mark in e["samples"]])]
    apart = res.get("per_run_not_counted", [])
    if apart:
        parts += ["Finished runs of seeds not counted (reported, left out of G1-G5):",
                  table(["run", "grounding 0 -> 90, 100", "change [95% over prompts]",
                         "held-out success 0 -> 100", "held-out format errors @100",
                         "template collapse", "why not counted"],
                        [[*_headline(r, report._f), r["why"]] for r in apart])]
    parts += _answers(report, res, path, bool(missing))
    if missing:
        parts.append(f"The registered verdicts wait for the registered runs: {len(done)} of "
                     f"{len(order)} finished.")
    else:
        parts += ["The verdicts, generated from the registered rules "
                  "(`study3_analysis.verdict_text`):",
                  "\n".join(f"- {line}" for line in res["verdicts"])]
    return "\n\n".join(parts)


def _answers(report, res: dict, path: Path, interim: bool) -> list[str]:
    """The three questions answered from ``results.json`` (``study3_report.answers``); nothing
    before the analysis has recorded them."""
    if "filter_over_doses" not in res:
        return []
    doses = (_json(path / "doses.json") or {"doses": {}})["doses"]
    return ["The three questions of issue 45, answered from the finished runs "
            "(`study3_report.answers`):", *report.answers(res, doses, interim)]


def study3_answers(out: str = f"{STUDY}/{V3}") -> str:
    """The three questions and, once every registered run is finished, the verdicts: the Results
    section of the study's README (``results.json`` as committed)."""
    _, report = _study3()
    path = ROOT / out
    res = _json(path / "results.json") or {}
    parts = _answers(report, res, path, bool(res.get("missing")))
    if res.get("missing"):
        parts.append(f"The registered verdicts wait for the registered runs ({len(res['missing'])}"
                     " not finished); `results_v3/tables.md` has the interim readings.")
    elif res:
        parts += ["The verdicts, generated from the registered rules:",
                  "\n".join(f"- {line}" for line in res["verdicts"])]
    return "\n\n".join(parts) or "Not analysed yet."

