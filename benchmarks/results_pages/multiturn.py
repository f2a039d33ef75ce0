"""The multi-turn candidates measured for SmolLM2-135M-Instruct (issue 46, item 1), from
``benchmarks/results/smollm2_multiturn_tasks.json`` (``benchmarks/smollm2_multiturn_tasks.py``):
results/real-models.md."""

from __future__ import annotations

from .data import f, joined, load, pct, table

DOC = "benchmarks/results/smollm2_multiturn_tasks.json"
PROTOCOL = "T=0.5 k=1"
#: the issue's window for zero-shot held-out success: a reward spread for GRPO, room to learn
WINDOW = (0.10, 0.60)
#: how the page names each env
ENV_NAMES = {"ragen2/Math-v0": "Math", "ragen2/FrozenLake-v0": "FrozenLake",
             "ragen2/Countdown-v0": "Countdown"}


def results() -> dict[str, dict]:
    """Each candidate's measurement, in the order the benchmark ran them."""
    return load(DOC)["results"][PROTOCOL]


def describe(cand: dict) -> str:
    """``Countdown, 2 numbers in 1..10, 3 attempts: a wrong equation is told its value``, from the
    candidate's env kwargs (its note where the env is none of the three)."""
    kw, env = cand["kwargs"], ENV_NAMES.get(cand["env_id"], cand["env_id"])
    if env == "Math":
        told = "only that it was wrong" if kw.get("feedback") == "retry" else "too high / too low"
        return (f"Math, operands 1..{kw['max_operand']}, {kw['max_attempts']} attempts: a wrong "
                f"answer is told {told}")
    if env == "FrozenLake":
        return (f"FrozenLake {kw['size']}x{kw['size']}, random start and goal, holes p = "
                f"{kw['hole_prob']:g}, at most {kw['max_steps']} moves: the {kw['read']} move "
                "word of a reply is the move")
    if env == "Countdown":
        return (f"Countdown, {kw['num_count']} numbers in 1..{kw['max_number']}, "
                f"{kw['max_attempts']} attempts: a wrong equation is told its value")
    return f"{env}, {cand['max_turns']} turns: {cand['note']}"


def every_turn(r: dict) -> float:
    """The share of episodes that used every turn (``rollout.max_turns``)."""
    return r["turns"].get(str(r["candidate"]["max_turns"]), 0) / r["episodes"]


def later_successes(r: dict) -> int:
    """Successes that came after the first turn."""
    return sum(n for turn, n in r["success_by_turns"].items() if int(turn) > 1)


def successes(r: dict) -> int:
    return sum(r["success_by_turns"].values())


def in_window(r: dict) -> bool:
    return WINDOW[0] <= r["success"] <= WINDOW[1]


def _problems(r: dict) -> str:
    """``53 of 55 (0.35)``: distinct problems played, of the held-out part where the env enumerates
    its space, and the held-out fraction of the split."""
    sizes, frac = r.get("split_sizes"), f"({r['heldout_fraction']:g})"
    return (f"{r['distinct_problems']} of {sizes['heldout']:,} {frac}" if sizes
            else f"{r['distinct_problems']}, not enumerated {frac}")


def smollm2_multiturn_tasks() -> str:
    """One row per candidate; a sentence naming those inside the window, with what their
    episodes did with the later turns."""
    doc, res = load(DOC), results()
    settings = doc["settings"][PROTOCOL]
    rows = []
    for name, r in res.items():
        lo, hi = r["success_ci95"]
        rows.append([f"`{name}`", describe(r["candidate"]),
                     f"{f(r['success'])} [{lo:.2f}, {hi:.2f}]", f"{r['mean_turns']:.2f}",
                     pct(every_turn(r)), f"{later_successes(r)} of {successes(r)}",
                     f"{r['invalid_action_rate']:.2f}", _problems(r)])
    head = ["candidate", "task", "held-out success (95% Wilson)", "mean turns",
            "episodes using every turn", "successes after turn 1", "invalid-action rate",
            "distinct held-out problems (held-out fraction)"]
    inside = [n for n, r in res.items() if in_window(r)]
    below = [n for n, r in res.items() if r["success"] < WINDOW[0]]
    window = f"{pct(WINDOW[0]).removesuffix('%')}-{pct(WINDOW[1])}"
    if inside:
        named = joined([f"`{n}` ({f(res[n]['success'])})" for n in inside])
        said = (f"Inside the issue's {window} window (held-out success, the point estimate): "
                f"{named}. Of their episodes "
                f"{' / '.join(pct(every_turn(res[n])) for n in inside)} used every turn, and "
                f"{' / '.join(f'{later_successes(res[n])} of {successes(res[n])}' for n in inside)}"
                " of their successes came after the first turn.")
    else:
        said = f"No candidate is inside the issue's {window} window."
    if below:
        said += f" Below it: {joined([f'`{n}`' for n in below])}."
    return table(head, rows) + f"""

{said}

Each candidate played {settings['n']} held-out episodes, drawn from its problem split's held-out
part (distinct problems where that part has as many, else with repeats), one sample each, at
temperature {PROTOCOL.split()[0].removeprefix('T=')} (`engine.eval_temperature`), plain replies of
at most {settings['max_new_tokens']} new tokens, episodes of at most
{settings['max_context_tokens']:,} tokens, `engine={settings['engine']}`,
`model.dtype={settings['dtype']}`. A turn's action is invalid when the env finds none in the reply
(no number, no move word, no equation over the given numbers)."""


def _clean(reply: str) -> str:
    return reply.replace("<|im_end|>", "").strip()


def repeated_after_feedback(name: str) -> tuple[dict, int] | None:
    """(a saved episode of candidate ``name`` that was told its answer was wrong and replied the
    same again, the turn of the first repeat), or None when no saved episode did."""
    for ex in results()[name]["examples"]:
        turns = ex["turns"]
        for i in range(1, len(turns)):
            if turns[i]["observation"].startswith("Incorrect") and \
                    _clean(turns[i]["reply"]) == _clean(turns[i - 1]["reply"]):
                return ex, i
    return None


def smollm2_multiturn_example(name: str) -> str:
    """A saved held-out episode of ``name`` that repeats a wrong answer after the env's
    feedback, quoted turn by turn (a sentence saying none did otherwise)."""
    found = repeated_after_feedback(name)
    if found is None:
        return (f"None of the {len(results()[name]['examples'])} saved held-out episodes of "
                f"`{name}` repeats a wrong answer after the env's feedback.")
    ex, first = found
    turns = ex["turns"]
    problem = turns[0]["observation"].splitlines()[0]
    same = sum(_clean(t["reply"]) == _clean(turns[0]["reply"]) for t in turns)
    feedback = turns[first]["observation"].split(" Attempts left")[0].splitlines()[0]
    reply = " ".join(_clean(turns[first - 1]["reply"]).split())
    return (f"A saved held-out episode of `{name}`: to \"{problem}\" the model replied "
            f"\"{reply}\"; told \"{feedback}\", it replied the same again ({same} of its "
            f"{len(turns)} replies were that one){'' if ex['success'] else ', and failed'}.")
