"""Offline plug-in MI: clustering of reasoning texts and the histogram estimator."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from ragen2.collapse import (
    ngram_signature,
    plugin_mutual_information,
    plugin_permutation_floor,
    reasoning_signatures,
)


# ------------------------------------------------------------------ signatures / clustering
def test_normalisation_ignores_case_space_punctuation_but_keeps_digits():
    texts = ["Move RIGHT  to (1,2).", "move right to 1 2", "move right to 1 3"]
    assert ngram_signature(texts[0]) == ngram_signature(texts[1]) == frozenset(
        {("move", "right", "to"), ("right", "to", "1"), ("to", "1", "2")}
    )
    # exact-signature clusters: the coordinates make the third text a different cluster
    assert reasoning_signatures(texts, threshold=1.0) == [0, 0, 1]


def test_short_and_empty_texts():
    assert ngram_signature("ok", n=3) == frozenset({("ok",)})
    assert ngram_signature("  ...  ") == frozenset()
    assert reasoning_signatures(["", "ok", "", "OK!"]) == [0, 1, 0, 1]
    assert reasoning_signatures([]) == []


A0 = "first i look at the map then i choose the shortest path to the goal"
A1 = "first i look at the map then i choose the safest path to the goal"
B0 = "the box is left of the target so i push it right twice"


def test_leader_clustering_threshold_hand_computed():
    # A0, A1: 15 words -> 13 trigrams each; the 3 trigrams around word 10 (shortest/safest)
    # differ -> shared 10, union 16 -> Jaccard 10/16 = 0.625. B0 shares nothing with A0.
    assert reasoning_signatures([A0, A1, B0], threshold=0.5) == [0, 0, 1]
    assert reasoning_signatures([A0, A1, B0], threshold=0.625) == [0, 0, 1]  # >= threshold joins
    assert reasoning_signatures([A0, A1, B0], threshold=0.7) == [0, 1, 2]
    # ids follow first appearance, whatever the order
    assert reasoning_signatures([B0, A1, A0], threshold=0.5) == [0, 1, 1]
    # bigrams: 14 each, 2 differ -> shared 12, union 16 -> 0.75
    assert reasoning_signatures([A0, A1], n=2, threshold=0.75) == [0, 0]
    assert reasoning_signatures([A0, A1], n=2, threshold=0.76) == [0, 1]


def test_k_center_clustering():
    A2 = "first i look at the map then i choose the quickest path to the goal"
    B1 = "the box is left of the target so i push it right once"
    assert reasoning_signatures([A0, B0, A1, B1, A2], num_clusters=2) == [0, 1, 0, 1, 0]
    assert reasoning_signatures([A0, B0, A1], num_clusters=1) == [0, 0, 0]
    # never more clusters than distinct signatures
    assert reasoning_signatures([A0, A0, B0], num_clusters=5) == [0, 0, 1]


# ------------------------------------------------------------------ plug-in MI
def test_hand_computed_2x2_table():
    # counts: (x0,c0)=3, (x0,c1)=1, (x1,c0)=1, (x1,c1)=3; n = 8; marginals uniform
    # I_raw = 2*(3/8) log((3/8)/(1/4)) + 2*(1/8) log((1/8)/(1/4)) = .75 log 1.5 - .25 log 2
    #       = 0.304099 - 0.173287 = 0.130812
    # Miller-Madow: + (m_x + m_c - m_xc - 1)/(2n) = (2 + 2 - 4 - 1)/16 = -1/16 -> 0.068312
    xs = [0, 0, 0, 0, 1, 1, 1, 1]
    cs = [0, 0, 0, 1, 0, 1, 1, 1]
    r = plugin_mutual_information(xs, cs)
    assert r["mi_raw"] == pytest.approx(0.130812, abs=1e-6)
    assert r["mi_raw"] == pytest.approx(0.75 * math.log(1.5) - 0.25 * math.log(2), rel=1e-12)
    assert r["mi"] == pytest.approx(0.130812 - 0.0625, abs=1e-6)
    # H(X) = log 2 = 0.693147 (+1/16 corrected) ; H(X,C) = .75*0.980829 + .25*2.079442 = 1.255482
    assert r["h_input_raw"] == pytest.approx(math.log(2), rel=1e-12)
    assert r["h_input"] == pytest.approx(math.log(2) + 1 / 16, rel=1e-12)
    assert r["h_joint_raw"] == pytest.approx(1.255482, abs=1e-6)
    assert r["h_joint"] == pytest.approx(1.255482 + 3 / 16, abs=1e-6)
    assert (r["n"], r["n_inputs"], r["n_clusters"], r["n_cells"]) == (8, 2, 2, 4)
    none = plugin_mutual_information(xs, cs, bias_correction="none")
    assert none["mi"] == none["mi_raw"] == r["mi_raw"]


def test_one_to_one_mapping_gives_log_k():
    # 5 uniform inputs, 4 rollouts each, cluster = a bijection of the input:
    # H(X) = H(C) = H(X,C) = log 5 -> I_raw = log 5 = 1.609438
    # Miller-Madow: + (5 + 5 - 5 - 1)/(2*20) = +0.1 -> 1.709438
    xs = [i for i in range(5) for _ in range(4)]
    cs = [f"cluster-{(3 * i) % 5}" for i in xs]
    r = plugin_mutual_information(xs, cs)
    assert r["mi_raw"] == pytest.approx(math.log(5), rel=1e-12)
    assert r["mi"] == pytest.approx(math.log(5) + 0.1, rel=1e-12)


def test_independent_bias_removed_by_miller_madow():
    # 5x5 independent uniform, n = 400: the plug-in bias is ~ (5-1)(5-1)/(2*400) = 0.02 nats.
    # Averaged over 20 fixed seeds, the raw estimate sits there and the corrected one near 0.
    raws, corrected = [], []
    for seed in range(20):
        rng = random.Random(seed)
        xs = [rng.randrange(5) for _ in range(400)]
        cs = [rng.randrange(5) for _ in range(400)]
        r = plugin_mutual_information(xs, cs)
        raws.append(r["mi_raw"])
        corrected.append(r["mi"])
    assert statistics.mean(raws) > 0.012
    assert abs(statistics.mean(corrected)) < 0.005
    assert min(raws) > 0  # plug-in MI is never negative


def test_template_texts_have_zero_mi():
    # Every input gets reasoning from the same few template variants, chosen by the rollout index
    # and not by the input: surface diversity, no input dependence.
    variants = [
        "let me think step by step first i consider all options then i pick the best one",
        "let me think step by step first i consider all options and then i pick the best one",
        "ok let me think step by step first i consider all options then i pick the best one",
        "let me think step by step first i consider all the options then i pick the best one",
    ]
    inputs = [i for i in range(8) for _ in range(4)]
    texts = [variants[m] for _ in range(8) for m in range(4)]
    clusters = reasoning_signatures(texts)
    assert len(set(clusters)) == 1  # the variants are near-duplicates (Jaccard >= 0.5)
    r = plugin_mutual_information(inputs, clusters)
    assert r["mi"] == 0.0 and r["mi_raw"] == 0.0
    floor = plugin_permutation_floor(inputs, clusters, num_permutations=20)
    assert floor["p_value"] == 1.0
    # exact-signature clusters: 4 clusters, but each input sees each variant once -> still 0
    exact = reasoning_signatures(texts, threshold=1.0)
    assert len(set(exact)) == 4
    assert plugin_mutual_information(inputs, exact)["mi_raw"] == pytest.approx(0.0, abs=1e-12)


def _plan(r, c, gr, gc):
    vertical = "down" if gr > r else "up"
    horizontal = "right" if gc > c else "left"
    return " ".join([vertical] * abs(gr - r) + [horizontal] * abs(gc - c))


def test_input_describing_texts_have_high_mi():
    # Reasoning that restates the input (positions) and derives the plan from it; the opener
    # varies per rollout. Within an input Jaccard >= 0.74, across inputs <= 0.43 (checked).
    openers = ["hmm", "ok", "let me see", "well then"]
    positions = [(1, 2, 5, 7), (3, 4, 0, 6), (2, 5, 7, 1), (6, 0, 3, 3),
                 (4, 7, 1, 5), (0, 3, 6, 2), (5, 1, 4, 0), (7, 6, 2, 4)]
    inputs, texts = [], []
    for i, (r, c, gr, gc) in enumerate(positions):
        for op in openers:
            inputs.append(i)
            texts.append(f"{op}, the agent is at ({r}, {c}) and the goal at ({gr}, {gc}): "
                         f"I move {_plan(r, c, gr, gc)}")
    clusters = reasoning_signatures(texts)
    assert len(set(clusters)) == 8  # openers merge, positions separate
    r = plugin_mutual_information(inputs, clusters)
    assert r["mi_raw"] == pytest.approx(math.log(8), rel=1e-12)  # 2.079442
    floor = plugin_permutation_floor(inputs, clusters, num_permutations=50, seed=0)
    assert floor["p_value"] == pytest.approx(1 / 51)
    assert floor["mi"] == r["mi"]
    assert floor["mi_floor_q95"] < 0.5 * r["mi"]
    assert floor["mi_raw_floor_mean"] < floor["mi_raw"]
    again = plugin_permutation_floor(inputs, clusters, num_permutations=50, seed=0)
    assert again == floor  # seeded: reproducible


def test_invalid_plugin_inputs():
    with pytest.raises(ValueError, match="pair up one to one, got 2 and 3"):
        plugin_mutual_information([0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="at least one"):
        plugin_mutual_information([], [])
    with pytest.raises(ValueError, match="unknown bias_correction 'mm'; allowed: miller_madow, none"):
        plugin_mutual_information([0], [0], bias_correction="mm")
    with pytest.raises(ValueError, match=r"input_ids\[1\].*not hashable"):
        plugin_mutual_information([0, [1]], [0, 1])
    with pytest.raises(ValueError, match="num_permutations"):
        plugin_permutation_floor([0, 1], [0, 1], num_permutations=0)
    with pytest.raises(ValueError, match="single str"):
        reasoning_signatures("abc")
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str"):
        reasoning_signatures(["a", 3])
    with pytest.raises(ValueError, match="n-gram length"):
        reasoning_signatures(["a"], n=0)
    with pytest.raises(ValueError, match="threshold"):
        reasoning_signatures(["a"], threshold=0.0)
    with pytest.raises(ValueError, match="num_clusters"):
        reasoning_signatures(["a"], num_clusters=0)
