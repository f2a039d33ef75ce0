"""The episode loop's token bookkeeping, with a scripted engine standing in for the model."""

from __future__ import annotations

import pytest

from ragen2.engines.base import Generation
from ragen2.rollout.chat import ChatRenderer
from ragen2.rollout.envs import env_factory
from ragen2.rollout.runner import FORMAT_ERROR_NOTE, EngineTurnPolicy, EpisodeSpec, run_episodes
from ragen2.engines.base import SamplingParams

PENALTY = -0.1


class ScriptedEngine:
    """Returns a fixed response per turn, tokenised *character by character* (a tokenisation the
    tokenizer itself would never produce), so any decode/re-encode of model output shows up."""

    def __init__(self, tokenizer, responses, version=7, eos_last=False):
        self.tok, self.responses, self.policy_version = tokenizer, responses, version
        self.eos_last = eos_last
        self.turn = 0
        self.prompts = []

    def generate(self, prompts, params):
        text = self.responses[self.turn]
        self.turn += 1
        self.prompts.append([list(p) for p in prompts])
        out = []
        for _ in prompts:
            ids = [i for ch in text for i in self.tok.encode(ch, add_special_tokens=False)]
            reason = "stop"
            if self.eos_last:
                ids.append(self.tok.eos_token_id)
                reason = "eos"
            lps = [-0.5 - 0.01 * k for k in range(len(ids))]
            out.append(Generation(ids, lps, reason, self.policy_version, ""))
        return out

    def load_weights(self, state_dict, version):  # pragma: no cover - not used
        self.policy_version = version


def _spans(mask):
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


RESPONSES = [
    "<think>I am at row 1.</think><answer>Jump</answer>",     # parsed, invalid action
    "<think>¿ünïcode✓ 🧊</think> no answer tag here",            # unparsable
    "<think>try left</think><answer>Left</answer>",            # valid move
]


def run(tokenizer, responses=RESPONSES, max_turns=3, eos_last=False, n=1):
    engine = ScriptedEngine(tokenizer, responses, eos_last=eos_last)
    policy = EngineTurnPolicy(engine, SamplingParams())
    factory = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0})
    make = lambda name: factory()  # noqa: E731
    specs = [EpisodeSpec(env_seed=5, group_id=0) for _ in range(n)]
    trajs = run_episodes(specs, make, ChatRenderer(tokenizer), policy, max_turns=max_turns,
                         format_penalty=PENALTY, max_context_tokens=4096, max_new_tokens=64)
    return engine, trajs


@pytest.fixture(params=["tiny", "smollm2"])
def tok(request):
    """The tiny model's tokenizer and SmolLM2's real 49k-piece BPE."""
    return request.getfixturevalue(f"{request.param}_tokenizer")


def test_loss_mask_decodes_exactly_the_model_outputs(tok):
    engine, (traj,) = run(tok)
    assert traj.num_turns == 3
    spans = _spans(traj.loss_mask)
    assert len(spans) == 3
    for (a, b), text in zip(spans, RESPONSES):
        ids = traj.input_ids[a:b]
        expected = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
        assert ids == expected  # the engine's own ids, not a re-tokenisation
        assert tok.decode(ids, skip_special_tokens=False).encode() == text.encode()
        assert traj.logprobs[a:b] == pytest.approx([-0.5 - 0.01 * k for k in range(b - a)])
    # everything else is prompt/observation with zero logprob
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.loss_mask) if not m)
    assert [e for e in traj.turn_ends] == [b - 1 for _, b in spans]
    # each turn's prompt is exactly the trajectory so far (append-only bookkeeping)
    for turn, (a, _) in enumerate(spans):
        assert engine.prompts[turn][0] == traj.input_ids[:a]


def test_rewards_penalties_and_observations(tok):
    """Every action is several BPE pieces here (the engine is scripted character by character):
    they parse, and Left reaches the env as a move while Jump is refused by it."""
    _, (traj,) = run(tok)
    assert traj.num_invalid_actions == 1 and traj.num_format_errors == 1
    assert traj.turn_rewards[:2] == pytest.approx([PENALTY, PENALTY])
    assert traj.truncated and traj.policy_version == 7
    assert traj.first_think == "I am at row 1."
    # every turn's reasoning span, as sampled (the MI monitor's later turns)
    assert len(traj.think_spans) == 3 and traj.think_spans[0] == traj.think_span
    a, b = traj.think_spans[2]
    assert tok.decode(traj.input_ids[a:b], skip_special_tokens=False) == "try left"
    text = tok.decode(traj.input_ids, skip_special_tokens=False)
    assert "Invalid action 'Jump'" in text
    assert FORMAT_ERROR_NOTE in text
    assert traj.reward == pytest.approx(sum(traj.turn_rewards))


def test_eos_is_not_duplicated(tiny_tokenizer):
    _, (traj,) = run(tiny_tokenizer, eos_last=True, max_turns=2)
    text = tiny_tokenizer.decode(traj.input_ids, skip_special_tokens=False)
    assert "<|im_end|><|im_end|>" not in text
    assert text.count("<|im_start|>assistant") == 2


def test_group_shares_the_env_seed(tiny_tokenizer):
    _, trajs = run(tiny_tokenizer, n=3)
    first = [t.input_ids[:t.first_prompt_len] for t in trajs]
    assert first[0] == first[1] == first[2]


def test_unknown_env_id_names_the_key():
    from ragen2.rollout.envs import EnvSpecError, make_env

    with pytest.raises(EnvSpecError, match="env.id='ragen2/Nope-v0'"):
        make_env("ragen2/Nope-v0")
    with pytest.raises(EnvSpecError, match="size"):
        make_env("ragen2/FrozenLake-v0", {"size": 1})


class _TextEnv:
    """A minimal text env for fault tests; ``fail`` decides what goes wrong and when."""

    def __init__(self, fail=None, barrier=None):
        self.fail, self.barrier, self.steps = fail, barrier, 0
        self.unwrapped = self

    def reset(self, seed=None, options=None):
        self.steps = 0
        if self.fail == "reset":
            raise RuntimeError("reset exploded")
        return f"start {seed}", {}

    def step(self, action):
        self.steps += 1
        if self.barrier is not None:
            self.barrier.wait(timeout=20)  # only passes if all episodes step at the same time
        if self.fail == "step":
            raise ValueError("step exploded")
        if self.fail == "obs":
            return 42, 0.0, False, False, {}
        return f"moved {action}", 1.0, self.steps >= 2, False, {"success": self.steps >= 2}

    def close(self):
        pass


def _run_text_envs(tokenizer, envs_by_name, specs, executor=None, stats=None, pools=None):
    engine = ScriptedEngine(tokenizer, ["<think>go</think><answer>Left</answer>"] * 3)
    made = []

    def make(name):
        made.append(name)
        return envs_by_name[name]()

    trajs = run_episodes(specs, make, ChatRenderer(tokenizer), EngineTurnPolicy(engine, SamplingParams()),
                         max_turns=3, format_penalty=PENALTY, max_context_tokens=4096,
                         max_new_tokens=64, envs=pools, executor=executor, stats=stats)
    return trajs, made


@pytest.mark.parametrize("fail,message", [("step", "ValueError: step exploded"),
                                          ("reset", "RuntimeError: reset exploded"),
                                          ("obs", "TypeError: the env returned a int observation")])
def test_an_env_failure_ends_only_that_episode(tiny_tokenizer, fail, message):
    specs = [EpisodeSpec(1, 0, "ok"), EpisodeSpec(1, 0, "bad"), EpisodeSpec(2, 1, "ok")]
    pools = {}
    trajs, made = _run_text_envs(tiny_tokenizer, {"ok": _TextEnv, "bad": lambda: _TextEnv(fail)},
                                 specs, pools=pools)
    ok1, bad, ok2 = trajs
    assert bad.env_error.startswith(message) and not bad.success
    assert bad.env_name == "bad" and ok1.env_name == "ok"
    for t in (ok1, ok2):  # the healthy episodes ran to their end (2 steps, success)
        assert t.env_error is None and t.success and t.num_turns == 2 and t.turn_rewards == [1.0, 1.0]
    # the failed instance was replaced in the pool; healthy ones are kept for reuse
    assert made == ["ok", "bad", "ok", "bad"] and len(pools["bad"]) == 1 and len(pools["ok"]) == 2


def test_env_steps_run_concurrently(tiny_tokenizer):
    """Four episodes whose step() waits on one barrier: only concurrent steps can pass it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    barrier = threading.Barrier(4)
    specs = [EpisodeSpec(s, s, "sync") for s in range(4)]
    stats = {}
    with ThreadPoolExecutor(4) as pool:
        trajs, _ = _run_text_envs(tiny_tokenizer, {"sync": lambda: _TextEnv(barrier=barrier)},
                                  specs, executor=pool, stats=stats)
    assert [t.env_error for t in trajs] == [None] * 4
    assert all(t.success for t in trajs)
    assert set(stats) == {"env_s", "generate_s"} and stats["env_s"] > 0


def test_serial_steps_would_break_the_barrier(tiny_tokenizer):
    """The same episodes without an executor: the barrier cannot fill (the test above can fail)."""
    import threading

    barrier = threading.Barrier(2)
    specs = [EpisodeSpec(s, s, "sync") for s in range(2)]
    barrier_env = lambda: _TextEnv(barrier=barrier)  # noqa: E731
    barrier.wait = lambda timeout=None, _w=barrier.wait: _w(timeout=0.2)
    trajs, _ = _run_text_envs(tiny_tokenizer, {"sync": barrier_env}, specs)
    assert all(t.env_error and t.env_error.startswith("BrokenBarrierError") for t in trajs)


def test_format_penalty_per_env_name(tiny_tokenizer):
    """A mixture charges each env its own format penalty (Sokoban's must exceed a move's cost)."""
    engine = ScriptedEngine(tiny_tokenizer, ["no tags at all"] * 2)
    specs = [EpisodeSpec(1, 0, "a"), EpisodeSpec(1, 1, "b")]
    trajs = run_episodes(specs, lambda name: _TextEnv(), ChatRenderer(tiny_tokenizer),
                         EngineTurnPolicy(engine, SamplingParams()), max_turns=2,
                         format_penalty={"a": -0.1, "b": -1.0}, max_context_tokens=4096,
                         max_new_tokens=64)
    assert trajs[0].turn_rewards == [-0.1, -0.1] and trajs[1].turn_rewards == [-1.0, -1.0]


def _run_with_budget(tokenizer, budget, max_new_tokens=64):
    engine = ScriptedEngine(tokenizer, RESPONSES)
    factory = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0})
    (traj,) = run_episodes([EpisodeSpec(env_seed=5, group_id=0)], lambda name: factory(),
                           ChatRenderer(tokenizer), EngineTurnPolicy(engine, SamplingParams()),
                           max_turns=3, format_penalty=PENALTY, max_context_tokens=budget,
                           max_new_tokens=max_new_tokens)
    return traj


def test_the_observation_counts_against_the_context_budget(tiny_tokenizer):
    """Turn 2 runs only if (context after turn 1) + (the observation's ids) + max_new_tokens fits."""
    full = _run_with_budget(tiny_tokenizer, 4096)
    (_, end1), (start2, _) = _spans(full.loss_mask)[:2]
    fits = start2 + 64  # the second turn's prompt is the trajectory up to start2
    assert start2 - end1 > 1  # the observation is several tokens
    assert _run_with_budget(tiny_tokenizer, fits).num_turns == 2  # turn 3 no longer fits
    cut = _run_with_budget(tiny_tokenizer, fits - 1)
    assert cut.num_turns == 1 and cut.truncated
    assert len(cut.input_ids) == end1  # nothing appended after the last generated turn


def test_a_first_prompt_over_the_budget_is_refused(tiny_tokenizer):
    with pytest.raises(ValueError, match=r"first prompt is \d+ tokens.*max_new_tokens=64.*"
                                         r"rollout.max_context_tokens=100"):
        _run_with_budget(tiny_tokenizer, 100)


def test_the_first_turns_reasoning_span_is_the_sampled_ids(tiny_tokenizer):
    """The engine tokenised its reply character by character (no tokenizer would): the span the
    MI monitor scores is those ids, between the sampled tags."""
    _, (traj,) = run(tiny_tokenizer)
    a, b = traj.think_span
    reasoning = "I am at row 1."
    assert traj.input_ids[a:b] == [i for ch in reasoning
                                   for i in tiny_tokenizer.encode(ch, add_special_tokens=False)]
    assert traj.loss_mask[a:b] == [1] * (b - a)


def test_no_two_sampling_requests_of_a_step_share_a_seed(tiny_tokenizer):
    """8 episodes x 3 turns on each of 2 workers: every request's seed differs. With the old
    ``turn seed = base * 1009 + turn`` and ``request i = seed + i``, episode i at turn t + 1
    reused episode i + 1's stream from turn t (7 of 8 requests of every later turn)."""
    from ragen2.seeding import request_seed, sampling_seed

    class SeedRecorder(ScriptedEngine):
        def generate(self, prompts, params):
            self.seeds.extend(request_seed(params.seed, i) for i in range(len(prompts)))
            return super().generate(prompts, params)

    def step_seeds(step):
        seeds = []
        for worker in range(2):
            engine = SeedRecorder(tiny_tokenizer, RESPONSES)
            engine.seeds = []
            policy = EngineTurnPolicy(engine, SamplingParams(seed=sampling_seed(0, step, worker)))
            factory = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0})
            specs = [EpisodeSpec(env_seed=5 + i, group_id=i // 4) for i in range(8)]
            run_episodes(specs, lambda name: factory(), ChatRenderer(tiny_tokenizer), policy,
                         max_turns=3, format_penalty=PENALTY, max_context_tokens=4096,
                         max_new_tokens=64)
            seeds += engine.seeds
        return seeds

    seeds = step_seeds(1)
    assert len(seeds) == 2 * 8 * 3 and len(set(seeds)) == len(seeds)
    assert step_seeds(1) == seeds  # a resumed step samples with the same seeds
    assert not set(step_seeds(2)) & set(seeds)
    old = [(7 * 1009 + turn) + i for turn in range(3) for i in range(8)]
    assert len(set(old)) < len(old)  # what it replaces


def test_several_actions_per_turn_are_stepped_in_order(tiny_tokenizer):
    """RAGEN's multi-action answers: "Right || Down" moves twice (row 1, col 1 -> row 2, col 2);
    with one action per turn the same answer is one invalid action."""
    def play(actions_per_turn):
        engine = ScriptedEngine(tiny_tokenizer, ["<think>go</think><answer>Right || Down</answer>"])
        factory = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0})
        (traj,) = run_episodes([EpisodeSpec(env_seed=5, group_id=0)], lambda name: factory(),
                               ChatRenderer(tiny_tokenizer), EngineTurnPolicy(engine, SamplingParams()),
                               max_turns=1, format_penalty=PENALTY, max_context_tokens=4096,
                               max_new_tokens=64, actions_per_turn=actions_per_turn)
        return traj

    two = play(2)
    assert "row 2, column 2" in two.observations[1] and two.num_invalid_actions == 0
    assert two.turn_rewards == [pytest.approx(two.env_return)]  # both steps' rewards, no penalty
    assert "up to 2 actions in one answer, separated by '||'" in tiny_tokenizer.decode(
        two.input_ids[:two.first_prompt_len])
    one = play(1)
    assert one.num_invalid_actions == 1 and "row 1, column 1" in one.observations[1]
    assert one.turn_rewards[0] == pytest.approx(one.env_return + PENALTY)


def test_split_actions():
    from ragen2.rollout.runner import split_actions

    assert split_actions("Up || Left", 1, "||") == ["Up || Left"]
    assert split_actions(" Up ||Left|| Down ", 2, "||") == ["Up", "Left"]
    assert split_actions("Up ||  || Left", 5, "||") == ["Up", "Left"]
    assert split_actions(" || ", 3, "||") == [" || "]  # nothing but separators: the env judges it


def test_plain_response_format_sends_the_whole_reply_and_marks_it_as_reasoning(tiny_tokenizer):
    """rollout.response_format=plain: no format instruction, no parsing; the reply (its EOS
    aside) is the env's action and the MI monitor's reasoning span."""
    from ragen2.rollout.chat import FORMAT_INSTRUCTION

    engine = ScriptedEngine(tiny_tokenizer, ["1 + 2 = 3"], eos_last=True)
    factory = env_factory("ragen2/Math-v0", {"difficulty": 1, "max_operand": 1, "read": "last",
                                             "max_attempts": 1})  # 1 + 1 or 1 - 1
    (traj,) = run_episodes([EpisodeSpec(3, 0)], lambda name: factory(), ChatRenderer(tiny_tokenizer),
                           EngineTurnPolicy(engine, SamplingParams()), max_turns=1,
                           format_penalty=-0.1, max_context_tokens=4096, max_new_tokens=64,
                           response_format="plain")
    prompt = tiny_tokenizer.decode(traj.input_ids[:traj.first_prompt_len])
    assert FORMAT_INSTRUCTION.split()[0] not in prompt and "<think>" not in prompt
    assert traj.num_format_errors == 0 and traj.first_think == "1 + 2 = 3"
    a, b = traj.think_span
    assert tiny_tokenizer.decode(traj.input_ids[a:b]).replace(" ", "") == "1+2=3"
    assert b == len(traj.input_ids) - 1  # the EOS stays outside
    # the env read the last number, 3: wrong for 1 + 1 (2) and 1 - 1 (0), a valid answer
    assert traj.env_return == 0.0 and traj.turn_rewards == [0.0]
