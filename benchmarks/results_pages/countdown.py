"""Blocks from the ``smollm2_countdown`` runs (issue 46, items 3-4): held-out success over problems
before and after RL per seed, turns per held-out episode and the bar, and the collapse instruments
at their first and last measurement, from ``benchmarks/results/smollm2_countdown.json``
(``python benchmarks/smollm2_learning.py --name smollm2_countdown RUN1 RUN2 RUN3``):
results/real-models.md. Until that file is committed each block says so."""

from __future__ import annotations

from .data import ROOT, f, joined, load, signed, table

DOC = "benchmarks/results/smollm2_countdown.json"
PRESET = "smollm2_countdown"
COMMAND = (f'`make train ARGS="+experiment={PRESET} seed=S"` for seeds 1, 2 and 3, then '
           f"`python benchmarks/smollm2_learning.py --name {PRESET} RUN1 RUN2 RUN3`")

#: the instruments table: (what, section, scope, field, decimals); section "mi" and "grounding"
#: read ``instruments[section][scope][first|last][field]``, "series" reads
#: ``instruments["entropy_length"][field]``
ROWS: tuple[tuple[str, str, str, str, int], ...] = (
    ("later-turn MI, batch (nats)", "mi", "later_turns", "mi", 3),
    ("its floor (permutation null, 95th percentile)", "mi", "later_turns", "mi_floor", 3),
    ("its bound", "mi", "later_turns", "mi_bound", 3),
    ("retrieval@1", "mi", "later_turns", "retrieval_acc@1", 2),
    ("retrieval@1 by chance", "mi", "later_turns", "retrieval_chance@1", 3),
    ("later-turn MI, probe panel (nats)", "mi", "later_turn_panel", "mi", 3),
    ("first-turn MI, batch (nats)", "mi", "first_turn", "mi", 3),
    ("its floor", "mi", "first_turn", "mi_floor", 3),
    ("its bound", "mi", "first_turn", "mi_bound", 3),
    ("retrieval@1", "mi", "first_turn", "retrieval_acc@1", 2),
    ("retrieval@1 by chance", "mi", "first_turn", "retrieval_chance@1", 3),
    ("first-turn MI, probe panel (nats) [95%]", "mi", "first_turn_panel", "mi", 3),
    ("its floor", "mi", "first_turn_panel", "mi_floor", 3),
    ("its bound", "mi", "first_turn_panel", "mi_bound", 3),
    ("retrieval@1", "mi", "first_turn_panel", "retrieval_acc@1", 2),
    ("retrieval@1 by chance", "mi", "first_turn_panel", "retrieval_chance@1", 3),
    ("grounding, batch later turns", "grounding", "later_turns", "frac", 2),
    ("grounding, batch first turns", "grounding", "first_turn", "frac", 2),
    ("token entropy, batch (nats a token)", "series", "", "collapse/token_entropy", 3),
    ("token entropy, probe panel", "series", "", "collapse/panel/token_entropy", 3),
    ("token entropy, learner", "series", "", "actor/entropy", 3),
    ("reasoning length, batch first turns (tokens)", "series", "",
     "collapse/reasoning_tokens_mean", 0),
    ("reply length, training turns (tokens)", "series", "", "rollout/response_tokens_mean", 0),
    ("reply length, held-out turns (tokens)", "series", "", "eval/response_tokens_mean", 0),
)
#: the metric key each instruments row reads, by (section, scope)
SCOPE_KEYS = {("mi", "later_turns"): "collapse/turns/", ("mi", "later_turn_panel"):
              "collapse/panel/turns/", ("mi", "first_turn"): "collapse/",
              ("mi", "first_turn_panel"): "collapse/panel/",
              ("grounding", "later_turns"): "collapse/turns/grounding/",
              ("grounding", "first_turn"): "collapse/grounding/"}


def runs() -> list[dict] | None:
    """The runs' summaries, None until ``DOC`` is committed."""
    return load(DOC)["results"] if (ROOT / DOC).exists() else None


def _none_yet(what: str) -> str:
    return f"No runs committed yet: {what} will be generated from `{DOC}`, written by {COMMAND}."


def _rate(before: float | None, after: float | None) -> str:
    return "n/a" if before is None or after is None else f"{f(before)} -> {f(after)}"


def _gain(p: dict | None) -> str:
    if not p or p.get("gain") is None:
        return "n/a"
    if p.get("gain_lo") is None:
        return f"{signed(p['gain'])} [n/a]"
    return f"{signed(p['gain'])} [{signed(p['gain_lo'])}, {signed(p['gain_hi'])}]"


def _turns(t: dict) -> str:
    return ("n/a" if t.get("before") is None or t.get("after") is None
            else f"{t['before']:.2f} -> {t['after']:.2f}")


def _bar(r: dict, bar_gain: float, bar_turns: float) -> str:
    """``yes``, or ``no`` with each unmet check (``n/a`` for a figure the run lacks)."""
    bar = r.get("multi_turn_bar")
    if bar is None:
        return "n/a (not a multi-turn run)"
    if bar["passes"]:
        return "yes"
    p, t = r.get("held_out_problems") or {}, r["turns"]
    why = []
    if bar["gain"] is not True:
        why.append("gain n/a" if bar["gain"] is None
                   else f"gain {signed(p['gain'])} < {signed(bar_gain)}")
    if bar["interval"] is not True:
        why.append("no interval" if bar["interval"] is None else "interval's low end <= 0")
    if bar["turns"] is not True:
        why.append("turns n/a" if bar["turns"] is None
                   else f"{t['after']:.2f} turns <= {bar_turns:g}")
    return "no: " + ", ".join(why)


def smollm2_countdown() -> str:
    """Per seed: held-out success over problems before -> after, the gain with its paired 95%
    interval over problems, turns per held-out episode before -> after, the bar; a sentence with
    the bar over the seeds."""
    rs = runs()
    if rs is None:
        return _none_yet("the per-seed table (held-out success over problems before and after RL, "
                         "the paired interval, turns per held-out episode, issue 46's bar)")
    doc = load(DOC)
    bar = doc.get("multi_turn_bar") or {}
    bar_gain, bar_turns = bar.get("gain", doc["settings"]["bar_gain"]), bar.get("turns", 1.5)
    rows = []
    for r in rs:
        p, h = r.get("held_out_problems") or {}, r["held_out"]
        n = p.get("problems")
        rows.append([str(r["seed"]),
                     f"{_rate(p.get('before'), p.get('after'))} (episodes "
                     f"{_rate(h['before'], h['after'])})",
                     f"**{_gain(p)}** over {n if n is not None else 'n/a'} problems",
                     "n/a" if not p else f"{p['improved']} / {p['worsened']}",
                     _turns(r["turns"]), _bar(r, bar_gain, bar_turns)])
    head = ["RL seed", "held-out success before -> after, mean over problems",
            "gain, paired 95% interval over problems", "problems better / worse",
            "turns per held-out episode before -> after", "issue 46's bar"]
    seeds = [str(s) for s in bar.get("seeds", [])]
    need = bar.get("min_seeds", 3)
    if bar.get("met"):
        verdict = f"is met: by every one of the {len(seeds)} seeds"
    else:
        missing = [str(r["seed"]) for r in rs if not (r.get("multi_turn_bar") or {}).get("passes")]
        parts = []
        if missing:
            parts.append(f"not by seed {joined(missing)}")
        if len(seeds) < need:
            parts.append(f"{len(seeds)} of the {need} seeds it asks for are in")
        verdict = "is not met: " + "; ".join(parts or ["no multi-turn run"])
    eps = sorted({str(r["held_out_problems"]["episodes_before"]) for r in rs
                  if r.get("held_out_problems")})
    return table(head, rows) + f"""

Issue 46's bar (at least {need} seeds, each gaining at least {bar_gain * 100:.0f} points of
held-out success over problems with its paired interval excluding 0, and more than
{bar_turns:g} turns per held-out episode after training) {verdict}. Each evaluation plays
{'/'.join(eps) or 'n/a'} episodes on the held-out problems with repeats, the same env seeds at
every evaluation: a problem's success is the mean of its episodes, and the interval resamples
problems ({doc['settings']['resamples']:,} bootstrap draws of the per-problem after-minus-before
differences; every episode's problem regenerated from its env seed with the run's env). The
episodes' success rates are shown beside; turns are `eval/num_turns_mean` of the two
evaluations.{_same_outcomes(rs)}"""


def _same_outcomes(rs: list[dict]) -> str:
    """A sentence for seeds whose last evaluations won and lost the very same episodes (identical
    rows above are then no copying slip), saying whether their rewards differ too; '' if none."""
    groups: dict[str, list[dict]] = {}
    for r in rs:
        fo = r.get("final_outcomes")
        if fo:
            groups.setdefault(fo["success_digest"], []).append(r)
    out = []
    for same in (g for g in groups.values() if len(g) > 1):
        seeds = joined([str(r["seed"]) for r in same])
        n = same[0]["final_outcomes"]["episodes"]
        rewards = ("their episode rewards differ, so the replies do"
                   if len({r["final_outcomes"]["reward_digest"] for r in same}) > 1
                   else "their episode rewards are identical too")
        out.append(f" Seeds {seeds} end with the same outcome on each of the {n} held-out "
                   f"episodes of their last evaluation (checked episode by episode): {rewards}.")
    return "".join(out)


def _value(x: float | None, d: int) -> str:
    return "n/a" if x is None else f"{x:.{d}f}"


def _point(end: dict | None, section: str, field: str, d: int,
           least: int) -> tuple[str, int | None]:
    """(the figure, its step) of one end of a measurement; ``n/a`` when absent, with its count
    where the value was withheld under ``monitor.min_samples``."""
    if end is None:
        return "n/a", None
    if section == "series":
        return _value(end["value"], d), end["step"]
    x = end.get(field)
    if x is None:
        n = end.get("n_samples")
        return ("n/a" if n is None or n >= least else f"n/a (n = {n:g} < {least})"), end["step"]
    if field == "mi" and end.get("mi_lo") is not None and end.get("mi_hi") is not None:
        return f"{x:.{d}f} [{end['mi_lo']:.{d}f}, {end['mi_hi']:.{d}f}]", end["step"]
    return _value(x, d), end["step"]


def _cell(r: dict, section: str, scope: str, field: str, d: int) -> str:
    inst = r["instruments"]
    if section == "grounding" and inst["grounding"]["hook"] is False:
        return "n/a (the env has no ground hook)"
    ends = inst["entropy_length"][field] if section == "series" else inst[section][scope]
    (a, sa), (b, sb) = (_point(ends[tag], section, field, d, inst["min_samples"])
                        for tag in ("first", "last"))
    if sa is None:
        return "n/a (not measured)"
    return f"{a} (step {sa})" if sa == sb else f"{a} -> {b} (steps {sa}, {sb})"


def smollm2_countdown_instruments() -> str:
    """The collapse instruments per seed at their first and last measurement (the batch's at step
    1 and the end, the probe panel's at step 0 and the end), each row naming its metric key."""
    rs = runs()
    if rs is None:
        return _none_yet("the instruments (later-turn MI with its floor and bound, retrieval, "
                         "first-turn MI, grounding, token entropy and reasoning length at the "
                         "first and the last measurement)")
    rows = []
    for what, section, scope, field, d in ROWS:
        key = field if section == "series" else SCOPE_KEYS[(section, scope)] + field
        rows.append([what, f"`{key}`", *[_cell(r, section, scope, field, d) for r in rs]])
    head = ["instrument", "metric", *[f"seed {r['seed']}" for r in rs]]
    hooks = {r["instruments"]["grounding"]["hook"] for r in rs}
    ground = ("The env has no `ground` hook, so there is no grounding to read (n/a)."
              if hooks == {False} else "Grounding where the env's `ground` hook checked claims.")
    floors = any(end is not None and end.get("mi") is not None and end.get("mi_floor") is None
                 for r in rs for end in r["instruments"]["mi"]["later_turns"].values())
    floor = (" The later-turn floor is n/a where a run predates the sampled-negatives floor "
             "(`monitor.turn_negatives` below the number of conversations, before "
             "`ragen2.collapse.mi.permutation_null_subsampled`)." if floors else "")
    return table(head, rows) + f"""

Every figure is read from the run's `metrics.jsonl` (n/a where the run logged none, or where a
measurement had fewer samples than `monitor.min_samples`, its count shown). {ground}{floor}"""


def _end(a: dict) -> str:
    steps = a["steps"]
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def smollm2_countdown_attempts() -> str:
    """Per seed, the training episodes of the first and the last archived steps: successes at the
    first attempt and after a retry, and the retries that repeat the previous reply's first line;
    a sentence saying whether any seed's late successes came after a retry."""
    rs = runs()
    if rs is None:
        return _none_yet("where each seed's successes come from (first attempt or a retry)")
    rows, late_retry_wins = [], []
    for r in rs:
        a = r.get("attempts")
        if not a:
            rows.append([str(r["seed"]), "n/a (no rollout archive)", "", "", ""])
            continue
        for end in ("first", "last"):
            e = a[end]
            rows.append([str(r["seed"]), _end(e),
                         f"{e['successes']} of {e['episodes']}",
                         f"{e['first_attempt']} / {e['after_retry']}",
                         f"{e['repeated']} of {e['retries']}"])
        late_retry_wins.append(a["last"]["after_retry"])
    head = ["RL seed", "training steps", "episodes won", "won at the first attempt / after a retry",
            "retries repeating the previous reply's first line"]
    if not late_retry_wins:
        return table(head, rows)
    total = sum(late_retry_wins)
    n = next(len(r["attempts"]["last"]["steps"]) for r in rs if r.get("attempts"))
    said = ("no episode of the last steps was won after a retry, in any seed" if total == 0
            else f"{total} episode(s) of the last steps, over all seeds, were won after a retry")
    return table(head, rows) + f"""

Read from the runs' rollout archives (`rollouts/`: every training episode with every turn's
reply, sampled on-policy), the first and the last {n} archived steps of each run: {said}."""
