"""Blocks from ``benchmarks/results/robustness.json``: the default job as a distribution over
seeds (README, results/robustness.md) and the overlapped-generation comparison (how-to/async.md).

The bar's runs are :func:`robustness.bar_grid` (warm-start seeds 0-2 x RL seeds 0-1); a label's
other runs are shown beside them, never pooled with them.
"""

from __future__ import annotations

from typing import Any

import robustness as bench  # benchmarks/robustness.py

from .data import count, f, floor_to, joined, load, median, minus, signed, signed_span, span, table

DOC = "benchmarks/results/robustness.json"
#: the label whose runs are today's default job (the README's `make train` row)
CURRENT = bench.CURRENT
#: a label's name in the robustness table (its overrides are in the JSON; `default` has none)
NAMES = {"default": "issue 14's default (16 groups x 4, 3-epoch warm start)",
         "pre_issue14": "the earlier default (8 groups x 4, 1 epoch)"}
#: a remark on one run of one label, shown in its cell of the staleness table
NOTES = {("staleness1_lr2.5e-4", "w0_s0"): "the run the rate was chosen on"}


def label(name: str) -> dict[str, Any] | None:
    return load(DOC)["labels"].get(name)


def grid(name: str) -> dict[str, dict]:
    """The label's finished runs on the bar's grid (none for a label not in the JSON)."""
    runs = (label(name) or {"runs": {}})["runs"]
    return {k: r for k, r in sorted(runs.items())
            if k in bench.bar_grid() and r["returncode"] == 0 and r["gain"] is not None}


def summary(name: str) -> dict[str, Any]:
    """Median, min and max of before, after, gain and wall time over the label's grid."""
    return bench.summarize(grid(name))


def _override(name: str, key: str) -> str | None:
    return next((o.split("=", 1)[1] for o in (label(name) or {}).get("overrides", [])
                 if o.startswith(key + "=")), None)


def _dates(runs: dict[str, dict]) -> str:
    days = sorted({r["finished"][:10] for r in runs.values()})
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def robustness_table() -> str:
    """The default job against the earlier default: medians (min-max) of before, after, gain and
    wall time over the bar's grid."""
    rows = []
    for name in ("default", "pre_issue14"):
        s = summary(name)
        b, a, g, w = s["before"], s["after"], s["gain"], s["wall_s"]
        mark = "**" if name == "default" else ""
        rows.append([NAMES[name], f"{f(b['median'])} ({span(b['min'], b['max'])})",
                     f"{mark}{f(a['median'])}{mark} ({span(a['min'], a['max'])})",
                     f"{mark}{signed(g['median'])}{mark} ({signed_span(g['min'], g['max'])})",
                     f"{w['median']:.0f} s ({w['min']:.0f}-{w['max']:.0f} s)"])
    cur = grid("default")
    steps = max(p["step"] for r in cur.values() for p in r["curve"])
    head = ["default job", "before RL", f"after {steps} RL steps", "gain", "wall time, cold caches"]
    return """
Measured {date} on one 2-core machine, the baseline (the earlier default, {groups} groups x {size}
and a {epochs}-epoch warm start, recorded under the label `pre_issue14`) and issue 14's default (label
`default`) in the same sitting; held-out success on `trainer.eval_episodes=128` held-out seeds, same sampling
protocol before and after:

{table}

Medians, (min-max) over the {n} runs.""".format(
        date=_dates(cur | grid("pre_issue14")),
        groups=_override("pre_issue14", "rollout.env_groups"),
        size=_override("pre_issue14", "rollout.group_size"),
        epochs=_override("pre_issue14", "trainer.warm_start.epochs"), table=table(head, rows),
        n=len(cur))


def robustness_other_seeds() -> str:
    """The default job's runs on seeds outside the bar's grid (not tuned on)."""
    floor = floor_to(min(r["gain"] for r in grid("default").values()))
    others = {k: r for k, r in sorted(label("default")["runs"].items())
              if k not in bench.bar_grid()}
    if not others:
        return f"Every run gained at least {floor}."
    runs = [f"warm-start seed {r['warm_seed']} x RL seed {r['rl_seed']} {'went ' * (i == 0)}"
            f"{f(r['before'])} -> {f(r['after'])} ({signed(r['gain'])}, {r['wall_s']:.0f} s)"
            for i, r in enumerate(others.values())]
    return """
Every run gained at least {floor}. On seeds it was not tuned on (`--warm-seeds {warm} --rl-seeds
{rl}`, commit {commits}, {date}): {runs}.""".format(
        floor=floor, warm=" ".join(sorted({str(r["warm_seed"]) for r in others.values()})),
        rl=" ".join(sorted({str(r["rl_seed"]) for r in others.values()})),
        commits=", ".join(sorted({r["commit"] for r in others.values()})), date=_dates(others),
        runs=joined(runs))


def robustness_staleness() -> str:
    """k = 1 at half the rate against k = 0, both measured on the same commit (robustness.md)."""
    one, zero = summary("staleness1_lr2.5e-4")["gain"], summary("staleness0")["gain"]
    plain = [r["gain"] for r in (label("staleness1") or {"runs": {}})["runs"].values()
             if r["gain"] is not None]
    default_rate = ("" if not plain else
                    f"; at the default rate k = 1 gained {signed(plain[0], 2)} on the one pair run"
                    if len(plain) == 1 else
                    f"; at the default rate k = 1 gained {signed(min(plain), 2)} to "
                    f"{signed(max(plain), 2)} on {count(len(plain))} pairs")
    return """
At `trainer.max_staleness=1 algorithm.lr=2.5e-4` the same {n} seed pairs (commit {commits}, cold
caches) gained {one} median ({one_range}), against {zero} ({zero_range}) for k = 0 measured again
on that commit{default_rate}.""".format(
        n=count(len(grid("staleness1_lr2.5e-4"))),
        commits=", ".join(sorted({r["commit"] for n in ("staleness1_lr2.5e-4", "staleness0")
                                  for r in grid(n).values()})),
        one=signed(one["median"]), one_range=signed_span(one["min"], one["max"]),
        zero=signed(zero["median"]), zero_range=signed_span(zero["min"], zero["max"]),
        default_rate=default_rate)


def _describe(name: str) -> str:
    """``k = 1 at lr 2.5e-4`` from a label's overrides ("" for a label not in the JSON)."""
    k, lr = _override(name, "trainer.max_staleness"), _override(name, "algorithm.lr")
    return "" if k is None else f"k = {k}" + (f" at lr {lr}" if lr else "")


def pair_table(*labels: str) -> str:
    """Held-out success per seed pair of the bar's grid for each label, and the first label's
    gain minus each other's; a label or a run not in the JSON reads "not run"."""
    first, rest = labels[0], labels[1:]
    keys = sorted(bench.bar_grid())

    def head(name: str) -> str:
        return f"{_describe(name)} (`{name}`)" if _describe(name) else f"`{name}`"

    def diff_head(other: str) -> str:
        k = [(_describe(n) or n).split(" at ")[0] for n in (first, other)]
        lr = {_override(n, "algorithm.lr") for n in (first, other)}
        same = f", both at lr {lr.pop()}" if len(lr) == 1 and None not in lr else ""
        return f"{k[0]} − {k[1]}{same}"

    def cell(name: str, key: str) -> str:
        r = grid(name).get(key)
        if r is None:
            return "not run"
        note = NOTES.get((name, key))
        return f"{f(r['before'])} -> {f(r['after'])}, {signed(r['gain'])}" + (
            f" ({note})" if note else "")

    def diff(other: str, key: str) -> str:
        a, b = grid(first).get(key), grid(other).get(key)
        return minus(a["gain"] - b["gain"]) if a and b else "not run"

    def medians(name: str) -> str:
        g = summary(name)["gain"]
        return "not run" if g is None else \
            f"**{signed(g['median'])}** ({signed_span(g['min'], g['max'])})"

    def median_diff(other: str) -> str:
        a, b = grid(first), grid(other)
        both = [k for k in keys if k in a and k in b]
        if not both:
            return "not run"
        gap = summary(first)["gain"]["median"] - summary(other)["gain"]["median"]
        pairs = median(a[k]["gain"] - b[k]["gain"] for k in both)
        return f"{minus(gap)} between the medians ({minus(pairs)} median pair difference)"

    rows = [[key, *[cell(n, key) for n in labels], *[diff(o, key) for o in rest]] for key in keys]
    rows.append(["**median gain (range)**", *map(medians, labels), *map(median_diff, rest)])
    return table(["run", *map(head, labels), *map(diff_head, rest)], rows)


#: runs a registration set aside as the ones a setting was chosen on (reported, never judged)
TUNED_ON = {"staleness1_lr2.5e-4": ("w0_s0",)}


def near_verdict(first: str, *baselines: str) -> str:
    """The registered bar (:data:`robustness.NEAR_BAR`) judged as registered: on the grid's runs
    the setting was not chosen on (:data:`TUNED_ON`), ``first`` against each baseline; the
    six-pair figures beside it. A baseline with a missing confirmation run is "not decided"."""
    confirm = sorted(bench.bar_grid() - set(TUNED_ON.get(first, ())))
    bar = bench.NEAR_BAR
    lines = []
    for base in baselines:
        a = {k: r for k, r in grid(first).items() if k in confirm}
        b = {k: r for k, r in grid(base).items() if k in confirm}
        missing = [k for k in confirm if k not in a or k not in b]
        name = f"{_describe(base)} (`{base}`)" if _describe(base) else f"`{base}`"
        if missing:
            lines.append(f"- against {name}: **not decided**, {joined(missing)} not run yet.")
            continue
        ga, gb = (median(r["gain"] for r in x.values()) for x in (a, b))
        floor_ok = min(r["gain"] for r in a.values()) >= bar["min_gain"]
        near = abs(ga - gb) <= bar["median_gain_within"] + 1e-12
        pairs = median(a[k]["gain"] - b[k]["gain"] for k in confirm)
        six = summary(first)["gain"]["median"] - summary(base)["gain"]["median"]
        caveat = "".join(f" {line}." for line in bench.machine_caveat(first, load(DOC), base))
        lines.append(
            f"- against {name}: every gain >= {bar['min_gain']} "
            f"({'yes' if floor_ok else 'no'}, min {signed(min(r['gain'] for r in a.values()))}); "
            f"medians {signed(ga)} and {signed(gb)}, {minus(ga - gb)} "
            f"({'within' if near else 'outside'} {bar['median_gain_within']}"
            f"{'' if near else ', higher' if ga > gb else ', lower'}; median pair "
            f"difference {minus(pairs)}): **the bar {'holds' if floor_ok and near else 'fails'}**. "
            f"On all six pairs the medians differ by {minus(six)}.{caveat}")
    return (f"Judged as registered, on the {count(len(confirm))} confirmation pairs "
            f"({joined(confirm)}):\n\n" + "\n".join(lines))


def getting_started_train() -> str:
    """Getting started's sentence on `make train`: the median wall time and held-out success of
    :data:`CURRENT`'s runs (the same grid as the README's row)."""
    s = summary(CURRENT)
    return (f"On a 2-core CPU `make train` takes about {s['wall_s']['median'] / 60:.0f} minutes on "
            f"empty caches and raises held-out success from about {s['before']['median']:.2f} to "
            f"about {s['after']['median']:.2f} (medians of {len(grid(CURRENT))} seed pairs: "
            "[The robustness distribution](results/robustness.md)).")


def readme_train_row() -> list[str]:
    """The README's `make train` row: wall time and held-out success over the bar's grid of
    :data:`CURRENT`'s runs."""
    runs, s = grid(CURRENT), summary(CURRENT)
    w, b, a = s["wall_s"], s["before"], s["after"]
    return ["`make train`",
            f"~{w['median'] / 60:.0f} min ({w['min']:.0f}-{w['max']:.0f} s over {len(runs)} seeds)",
            f"held-out success {f(b['median'])} -> {f(a['median'])} (median of {len(runs)} runs; "
            f"every run gained >= {floor_to(min(r['gain'] for r in runs.values()))})"]


def label_machines(*labels: str) -> str:
    """Which CPU kind and commit each label's runs ran on (``machine.cpu`` and ``commit`` of
    every run in the JSON): labels are comparable only within one CPU kind."""
    rows = []
    for name in labels or tuple(load(DOC)["labels"]):
        runs = (label(name) or {"runs": {}})["runs"]
        cpus = bench.cpu_kinds(runs)
        commits = sorted({r.get("commit") or "unrecorded" for r in runs.values()})
        rows.append([f"`{name}`", str(len(runs)), ", ".join(cpus),
                     ", ".join(f"`{c}`" for c in commits), _dates(runs) if runs else "—"])
    return table(["label", "runs", "CPU", "commit", "finished"], rows)
