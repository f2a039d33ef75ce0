"""The MI contrast among inputs that differ in one coordinate (ragen2.collapse.contrast): hand
computed cases, synthetic policies that write only the row or both coordinates, the batch's and
the later-turn panel's measurement, the env hook and the runner's record."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragen2.collapse.contrast import (contrast_counts, contrast_rows, contrast_samples,
                                     measure_contrast, score_rows, state_key)
from ragen2.collapse.mi import mutual_information
from ragen2.collapse.monitor import MIMonitor
from ragen2.collapse.panel_turns import (PREFIX, TurnPanel, TurnPanelPrompt, contrast_siblings,
                                         reachable_openings, script_opening)
from ragen2.collapse.withhold import scope_of, withhold
from ragen2.glossary import describe
from ragen2.rollout.envs import env_factory
from ragen2.rollout.trajectory import Trajectory
from tests.text_env_stub import PlainTextEnv


def lse_mean(vals):
    vals = np.asarray(vals, dtype=float)
    return float(np.log(np.exp(vals).mean()))


# ----------------------------------------------------------------------------- hand computed
def test_hand_computed_hits_chance_and_conditional_mi():
    """Map m: 0 = (1,1), 1 = (1,2), 2 = (2,1), 4 = (2,2); 3 = (1,1) on another map n."""
    states = [state_key("m", {"row": 1, "col": 1}), state_key("m", {"row": 1, "col": 2}),
              state_key("m", {"row": 2, "col": 1}), state_key("n", {"row": 1, "col": 1}),
              state_key("m", {"row": 2, "col": 2})]
    logp = np.array([[-1.0, -2, -1, 0, -9],  # own 0: col vs 1 wins; row vs 2 ties
                     [-1.0, -2, -5, -5, -3],  # own 1: col vs 0 loses; row vs 4 wins
                     [-4.0, -4, -1, -4, -1],  # own 2: col vs 4 ties; row vs 0 wins
                     [0.0, 0, 0, -1, 0]])  # own 3: alone on its map, in no contrast
    owner = [0, 1, 2, 3]
    cols = np.tile(np.arange(5), (4, 1))
    got = contrast_samples(logp, cols, owner, states)
    assert got["col"].hit.tolist() == [1.0, 0.0, 0.5]
    assert got["row"].hit.tolist() == [0.5, 1.0, 1.0]
    assert got["col"].chance.tolist() == [0.5] * 3 and got["row"].prompt.tolist() == [0, 1, 2]
    assert got["col"].pmi == pytest.approx([-1 - lse_mean([-1, -2]), -2 - lse_mean([-2, -1]),
                                            -1 - lse_mean([-1, -1])])
    assert got["row"].pmi == pytest.approx([0.0, -2 - lse_mean([-2, -3]), -1 - lse_mean([-1, -4])])
    assert got["row"].bound == pytest.approx([math.log(2)] * 3)
    assert contrast_counts(owner, states) == {"col": (3, 3), "row": (3, 3)}
    # rows: own first, then the inputs of its map equal on all but at most one coordinate
    assert contrast_rows(owner, states) == [[0, 1, 2], [1, 0, 4], [2, 0, 4], [3]]


def test_equivalent_inputs_merge_and_candidates_of_one_value_are_one_class():
    """0 and 2 are the same state (another history); 1 and 3 the same other column."""
    states = [state_key("m", {"row": 1, "col": 1}), state_key("m", {"row": 1, "col": 2}),
              state_key("m", {"row": 1, "col": 1}), state_key("m", {"row": 1, "col": 2}),
              None]
    logp = np.array([[-3.0, -2, -1, -2.5, 0]])
    got = contrast_samples(logp, np.array([[0, 1, 2, 3, 4]]), [0], states)
    assert set(got) == {"col", "row"} and len(got["row"].hit) == 0  # no other row
    col = got["col"]
    assert col.hit.tolist() == [1.0]  # own class max(-3, -1) = -1 beats max(-2, -2.5)
    assert col.chance.tolist() == [0.5]  # one candidate value
    assert col.pmi[0] == pytest.approx(-3 - lse_mean([-3, -1, -2, -2.5]))
    assert col.bound[0] == pytest.approx(math.log(4 / 2))


def test_padding_duplicates_and_bad_input():
    states = [state_key("m", {"c": 1}), state_key("m", {"c": 2})]
    logp = np.array([[-1.0, -2.0, -math.inf], [-1.0, -1.0, -1.0]])
    cols = np.array([[0, 1, -1], [1, 0, 1]])  # padding; input 1 listed twice
    got = contrast_samples(logp, cols, [0, 1], states)["c"]
    assert got.hit.tolist() == [1.0, 0.5] and got.chance.tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="own input 1 must be scored"):
        contrast_samples(np.array([[-1.0, -2.0]]), np.array([[0, 0]]), [1], states)
    with pytest.raises(ValueError, match="NaN"):
        contrast_samples(np.array([[-1.0, math.nan]]), np.array([[0, 1]]), [0], states)


# ----------------------------------------------------------------------------- synthetic policies
SIZE = 8
P_RIGHT = 0.9  # the policy writes the true value with this probability, else another at random


def _grid_states(size=SIZE, stratum="map"):
    cells = [(r, c) for r in range(1, size + 1) for c in range(1, size + 1)]
    return cells, [state_key(stratum, {"row": r, "col": c}) for r, c in cells]


def _written(value, rng, size=SIZE):
    if rng.random() < P_RIGHT:
        return value
    return int(rng.choice([v for v in range(1, size + 1) if v != value]))


def _log_p(written, value, size=SIZE):
    return math.log(P_RIGHT) if written == value else math.log((1 - P_RIGHT) / (size - 1))


def synthetic_policy(writes, samples=4, seed=0):
    """64 inputs (one 8x8 map), ``samples`` reasonings each. The reasoning writes the row (and,
    with ``writes == "both"``, the column), each right with probability 0.9; ℓ[s, j] = log p(z_s |
    x_j) is the exact likelihood: it depends on the row of x_j only for the row-only policy."""
    rng = np.random.default_rng(seed)
    cells, states = _grid_states()
    owner = np.repeat(np.arange(len(cells)), samples)
    logp = np.empty((len(owner), len(cells)))
    for s, o in enumerate(owner):
        r_hat = _written(cells[o][0], rng)
        c_hat = _written(cells[o][1], rng) if writes == "both" else None
        for j, (r, c) in enumerate(cells):
            logp[s, j] = _log_p(r_hat, r) + (_log_p(c_hat, c) if c_hat is not None else 0.0)
    return cells, states, owner, logp


def retrieval_among_random_inputs(logp, owner, n=8, draws=200, seed=1):
    """retrieval@1 among ``n`` inputs drawn at random (as a batch's later turns: 8), averaged."""
    rng = np.random.default_rng(seed)
    accs = []
    for _ in range(draws):
        chosen = rng.choice(logp.shape[1], size=n, replace=False)
        rows = np.flatnonzero(np.isin(owner, chosen))
        local = {int(j): i for i, j in enumerate(chosen)}
        m = mutual_information(logp[np.ix_(rows, chosen)], np.array([local[int(o)] for o in owner[rows]]))
        accs.append(m["retrieval_acc@1"])
    return float(np.mean(accs))


def _contrast(states, owner, logp, min_samples=16):
    contexts = [[j] for j in range(len(states))]
    conts = [[s] for s in range(len(owner))]

    def scorer(ctx, cont, columns):
        return logp[np.array([c[0] for c in cont])[:, None], columns], np.ones(columns.shape)

    return measure_contrast(contexts, conts, owner, states, scorer, "x/", min_samples=min_samples)


def test_a_policy_that_writes_only_the_row_is_at_chance_on_the_column_yet_retrieves():
    cells, states, owner, logp = synthetic_policy("row")
    retrieval = retrieval_among_random_inputs(logp, owner)
    assert retrieval > 0.5  # among 8 random inputs the row alone picks the input out (chance 1/8)
    m = _contrast(states, owner, logp)
    # the column: every candidate (same row, another column) scores as the own input: all tie
    assert m["x/contrast/col/chance@1"] == pytest.approx(1 / 8)
    assert m["x/contrast/col/acc@1"] == pytest.approx(1 / 8, abs=1e-12)
    assert m["x/contrast/col/mi"] == pytest.approx(0.0, abs=1e-12)
    assert m["x/contrast/col/mi_bound"] == pytest.approx(math.log(8))
    assert m["x/contrast/col/acc@1_lo"] == pytest.approx(1 / 8) == m["x/contrast/col/acc@1_hi"]
    # the row: the own row wins whenever it was written right
    assert m["x/contrast/row/acc@1"] > 0.8 and m["x/contrast/row/mi"] > 1.0
    assert m["x/contrast/col/n_samples"] == m["x/contrast/row/n_samples"] == 256
    assert m["x/contrast/col/n_prompts"] == 64


def test_a_policy_that_writes_both_stays_high_on_both():
    cells, states, owner, logp = synthetic_policy("both")
    assert retrieval_among_random_inputs(logp, owner) > 0.75
    m = _contrast(states, owner, logp)
    for c in ("row", "col"):
        assert m[f"x/contrast/{c}/acc@1"] > 0.8 > 1 / 8 == pytest.approx(m[f"x/contrast/{c}/chance@1"])
        assert m[f"x/contrast/{c}/acc@1_lo"] > 0.7
        assert m[f"x/contrast/{c}/mi"] > 1.0


def test_measure_contrast_scores_only_the_rows_it_needs_and_obeys_the_minimum():
    _, states, owner, logp = synthetic_policy("both", samples=1)
    calls = []
    contexts, conts = [[j] for j in range(64)], [[s] for s in range(64)]

    def scorer(ctx, cont, columns):
        calls.append(columns.shape)
        return logp[np.array([c[0] for c in cont])[:, None], columns], np.ones(columns.shape)

    m = measure_contrast(contexts, conts, owner, states, scorer, "x/", min_samples=16)
    # own + 7 others in its row + 7 in its column: one call for the single width 15
    assert calls == [(64, 15)] and m["x/contrast/col/n_samples"] == 64
    calls.clear()
    few = measure_contrast(contexts, conts, owner, states, scorer, "x/", min_samples=65)
    assert calls == [] and few == {"x/contrast/col/n_samples": 64.0,
                                   "x/contrast/col/n_prompts": 64.0,
                                   "x/contrast/row/n_samples": 64.0,
                                   "x/contrast/row/n_prompts": 64.0}
    assert measure_contrast(contexts, conts, owner, None, scorer, "x/") == {}  # no coordinates
    # score_rows: rows of one input stay unscored, widths are scored apart
    lp, cols = score_rows(scorer, contexts, conts, [[0, 1], [1], [2, 3, 4]])
    assert calls[-2:] == [(1, 2), (1, 3)]
    assert cols.tolist() == [[0, 1, -1], [-1, -1, -1], [2, 3, 4]]
    assert lp[1].tolist() == [-math.inf] * 3


# ----------------------------------------------------------------------------- the batch
def _turn_traj(group, row, col, cont):
    """One turn whose context is (map, row, col) and whose reasoning is ``cont``."""
    t = Trajectory(env_seed=group, group_id=group, policy_version=0, env_name="lake")
    t.append([group, row, col, 60], 0)
    t.first_prompt_len = 4
    t.append([*cont, 62], 1, [-1.0] * (len(cont) + 1))
    t.think_spans = [(4, 4 + len(cont))]
    t.think_span = t.think_spans[0]
    t.observations.append(f"{group} {row} {col}")
    t.coordinates = [{"row": row, "col": col}]
    return t


def _batch(writes):
    """4 maps x 8 cells (rows 1-2, columns 1-4); the reasoning names the map and the row (and
    the column): ℓ = -1 per item it gets right, -6 per item it gets wrong."""
    trajs = [_turn_traj(g, r, c, [g, 100 + r] + ([200 + c] if writes == "both" else []))
             for g in range(4) for r in (1, 2) for c in (1, 2, 3, 4)]

    def scorer(contexts, conts, columns):
        logp = np.empty(columns.shape)
        for s, row in enumerate(columns):
            for k, j in enumerate(row):
                g, r, c, _ = contexts[j]
                want = [g, 100 + r] + ([200 + c] if writes == "both" else [])
                logp[s, k] = sum(-1.0 if a == b else -6.0 for a, b in zip(conts[s], want))
        return logp, np.ones(columns.shape)

    return trajs, scorer


def test_the_batch_later_turns_contrast_among_turns_of_the_same_map():
    trajs, scorer = _batch("row")
    m = MIMonitor(every=1, min_samples=16, permutations=5, action_mi=False).measure(
        trajs, scorer, 1).metrics
    p = "collapse/turns/"
    assert m[p + "retrieval_acc@1"] > 0.4 > 2 * m[p + "retrieval_chance@1"]  # 8 inputs scored
    assert m[p + "contrast/col/acc@1"] == pytest.approx(0.25) == m[p + "contrast/col/chance@1"]
    assert m[p + "contrast/row/acc@1"] == 1.0 and m[p + "contrast/row/chance@1"] == 0.5
    assert m[p + "contrast/col/n_samples"] == 32 and m[p + "contrast/col/mi"] == pytest.approx(0.0)
    trajs, scorer = _batch("both")
    m = MIMonitor(every=1, min_samples=16, permutations=5, action_mi=False).measure(
        trajs, scorer, 1).metrics
    assert m[p + "contrast/col/acc@1"] == 1.0 == m[p + "contrast/row/acc@1"]
    assert m[p + "contrast/col/mi"] == pytest.approx(m[p + "contrast/col/mi_bound"], abs=0.03)
    # envs without the hook: no contrast keys
    for t in trajs:
        t.coordinates = None
    m = MIMonitor(every=1, min_samples=16, permutations=5, action_mi=False).measure(
        trajs, scorer, 1).metrics
    assert not any("contrast" in k for k in m)


# ----------------------------------------------------------------------------- the panel
FROZENLAKE = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0,
                                                 "random_start_goal": False})


def test_contrast_siblings_differ_from_their_panel_prompt_in_one_coordinate():
    holes = env_factory("ragen2/FrozenLake-v0", {"size": 4, "random_start_goal": False})
    envs = {}

    def env_of(name):
        return envs.setdefault(name, holes())

    prompts = []
    for seed in range(40):  # maps with holes: the first 6 openings that do not end in one
        opening = script_opening(env_of("fl"), seed, 2, 0.5)
        if opening is not None and len(prompts) < 6 and opening[1] not in {p.observation for p in prompts}:
            prompts.append(TurnPanelPrompt("fl", seed, opening[1], opening[0]))
    with_coords, siblings = contrast_siblings(prompts, env_of, 2, 0.5, sets=3)
    bases = sorted({q.base for q in siblings})
    assert len(bases) == 3 and siblings
    assert [p.coordinates is not None for p in with_coords] == [i in bases for i in range(6)]
    observations = [p.observation for p in prompts] + [q.observation for q in siblings]
    assert len(set(observations)) == len(observations)
    for q in siblings:
        base = dict(with_coords[q.base].coordinates)
        mine = dict(q.coordinates)
        assert q.seed == prompts[q.base].seed and len(q.prefix) == 2 and mine.keys() == base.keys()
        assert sum(mine[n] != base[n] for n in base) == 1
        # its opening replayed reaches its state
        env = holes()
        env.reset(seed=q.seed)
        for r in q.prefix:
            obs, *_ = env.step(r.split("<answer>")[1].split("</answer>")[0])
        assert obs == q.observation and env.unwrapped.state_coordinates() == mine
    per = {}
    for q in siblings:
        per.setdefault((q.base, *(n for n, v in q.coordinates if v != dict(
            with_coords[q.base].coordinates)[n])), []).append(q)
    assert all(len(v) <= 2 for v in per.values())
    # the reachable states of a 2-move opening from the top-left corner of an empty lake
    cells = {(c["row"], c["col"]) for _, _, c in reachable_openings(FROZENLAKE(), 0, 2)}
    assert cells == {(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (3, 1)}


def _panel_traj(group, key, cont):
    """Turn 1 (after a 1-turn opening) whose context is ``[9, key]`` and reasoning ``cont``."""
    t = Trajectory(env_seed=0, group_id=group, policy_version=0)
    t.append([9, 1, 8, *key, 60, *cont, 62], 1)
    t.think_spans = [(1, 2), (4 + len(key), 4 + len(key) + len(cont))]
    return t


def test_the_panel_scores_its_contrast_sets_apart_and_keeps_its_own_metrics():
    """Two panel prompts of seed 0 and 1; prompt 0 has siblings (same row, columns 2 and 3; same
    column, row 2). The reasoning writes the row only."""
    coords = {0: (1, 1), 1: (3, 3), 2: (1, 2), 3: (1, 3), 4: (2, 1)}
    prompts = [TurnPanelPrompt("fl", 0, "o0", ("x",), (("col", 1), ("row", 1))),
               TurnPanelPrompt("fl", 1, "o1", ("x",))]
    siblings = [TurnPanelPrompt("fl", 0, f"o{g}", ("x",), (("col", coords[g][1]),
                                                            ("row", coords[g][0])), base=0)
                for g in (2, 3, 4)]
    trajs = [_panel_traj(g, list(coords[g]), [100 + coords[g][0]]) for g in range(5)
             for _ in range(4)]
    calls = []

    def scorer(contexts, conts, columns):
        calls.append(columns.shape)
        logp = np.array([[-1.0 if conts[s][0] == 100 + contexts[j][3] else -6.0 for j in row]
                         for s, row in enumerate(columns)])
        return logp, np.ones(columns.shape)

    panel = TurnPanel(prompts, 4, 50, 10, 0, min_samples=8, siblings=siblings)
    assert len(panel.specs()) == 20 and sorted(panel.prefixes()) == [0, 1, 2, 3, 4]
    m = panel.measure(trajs, scorer, 5).metrics
    alone = TurnPanel(prompts, 4, 50, 10, 0, min_samples=8).measure(trajs[:8], scorer, 5).metrics
    assert {k: v for k, v in m.items() if "contrast" not in k} == alone  # its own metrics stay
    assert m[PREFIX + "contrast/col/acc@1"] == pytest.approx(1 / 3)  # prompts 0, 2, 3 tie
    assert m[PREFIX + "contrast/col/chance@1"] == pytest.approx(1 / 3)
    assert m[PREFIX + "contrast/col/n_samples"] == 12  # prompt 0 and its two column siblings
    assert m[PREFIX + "contrast/row/n_samples"] == 8 and m[PREFIX + "contrast/row/acc@1"] == 1.0
    # scored within the set, one call per row width: sibling (2,1) under itself and prompt 0;
    # the column siblings under themselves, each other and prompt 0; prompt 0 under all four
    assert calls[:3] == [(4, 2), (8, 3), (4, 4)]
    with pytest.raises(ValueError, match="contrast sibling"):
        TurnPanel(prompts, 4, 50, 10, 0, siblings=[TurnPanelPrompt("fl", 0, "o9", ("x",))])


# ----------------------------------------------------------------------------- envs, runner, keys
def test_the_grid_envs_report_their_coordinates():
    from ragen2_envs import FrozenLakeTextEnv, SokobanTextEnv

    lake = FrozenLakeTextEnv(size=4, hole_prob=0.0, random_start_goal=False)
    with pytest.raises(RuntimeError, match="before reset"):
        lake.state_coordinates()
    lake.reset(seed=0)
    assert lake.state_coordinates() == {"row": 1, "col": 1}
    lake.step("Right")
    assert lake.state_coordinates() == {"row": 1, "col": 2}
    room = SokobanTextEnv(size=7)
    room.reset(seed=0, options={"level": ["#######", "#_____#", "#_PB__#", "#__T__#", "#_B_T_#",
                                          "#_____#", "#######"]})
    assert room.state_coordinates() == {"row": 3, "col": 3, "boxes": "3,4;5,3"}


def test_the_runner_records_the_coordinates_per_turn_before_the_action(tiny_tokenizer):
    from ragen2.engines.base import Generation
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.runner import EpisodeSpec, run_episodes

    class Scripted:
        policy_version = 0

        def __init__(self, responses):
            self.responses = responses

        def act(self, episodes, turn):
            ids = list(tiny_tokenizer.encode(self.responses[turn], add_special_tokens=False))
            return [Generation(ids, [0.0] * len(ids), "stop", 0, self.responses[turn])
                    for _ in episodes]

    def run(make, responses):
        return run_episodes([EpisodeSpec(5, 0)], lambda name: make(), ChatRenderer(tiny_tokenizer),
                            Scripted(responses), max_turns=len(responses), format_penalty=-0.1,
                            max_context_tokens=4096, max_new_tokens=64)

    responses = ["<think>a</think><answer>Right</answer>", "no tags",
                 "<think>b</think><answer>Down</answer>"]
    (t,) = run(FROZENLAKE, responses)
    assert t.coordinates == [{"row": 1, "col": 1}, {"row": 1, "col": 2}, {"row": 1, "col": 2}]

    class Bad(PlainTextEnv):
        def state_coordinates(self):
            return {"a/b": 1}

    (t,) = run(Bad, responses)
    assert t.env_error.startswith("ValueError in state_coordinates(): Bad.state_coordinates() "
                                  "returned {'a/b': 1}")


def test_contrast_keys_have_glossary_entries_and_obey_the_minimum():
    for p in ("collapse/turns/contrast/col/", "collapse/panel/turns/contrast/boxes/"):
        for f in ("acc@1", "chance@1", "acc@1_lo", "acc@1_hi", "mi", "mi_bound", "n_samples",
                  "n_prompts"):
            assert describe(p + f) is not None, p + f
        assert scope_of(p + "acc@1") == p and scope_of(p + "n_samples") is None
    row = {"collapse/turns/contrast/col/n_samples": 3.0, "collapse/turns/contrast/col/acc@1": 0.5,
           "collapse/turns/contrast/row/n_samples": 30.0, "collapse/turns/contrast/row/acc@1": 0.9}
    assert withhold(row, 16) == {k: v for k, v in row.items() if k != "collapse/turns/contrast/col/acc@1"}
