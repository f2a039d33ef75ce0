"""Online MI estimator against hand-computed values (arithmetic in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from ragen2.collapse import (
    EMA,
    choose_negatives,
    mutual_information,
    mutual_information_subsampled,
    permutation_null,
)


def L(rows):
    """Matrix of log-likelihoods from a matrix of likelihoods p(z_s | x_j)."""
    return torch.tensor([[math.log(v) for v in r] for r in rows], dtype=torch.float64)


# ------------------------------------------------------------------ hand-computed 2x2 and 3x3
def test_2x2_hand_computed():
    # p(z_0|x) = [.6, .2] (owner 0), p(z_1|x) = [.1, .5] (owner 1)
    # matched = [log .6, log .5]; marginal = [log .4, log .3]  (means of the rows)
    # pmi = [log 1.5, log(5/3)] = [0.405465, 0.510826]; mi = 0.458145
    # h_cond = (0.510826 + 0.693147)/2 = 0.601986; h_marginal = (0.916291 + 1.203973)/2 = 1.060132
    # std(marginal) (population) = log(.4/.3)/2 = 0.143841; mi_z = 0.458145 / 0.143841 = 3.185081
    r = mutual_information(L([[0.6, 0.2], [0.1, 0.5]]), torch.tensor([0, 1]), eps=0.0)
    assert r["mi"] == pytest.approx(0.458145, abs=1e-6)
    assert r["mi"] == pytest.approx((math.log(1.5) + math.log(5 / 3)) / 2, rel=1e-12)
    assert r["h_cond"] == pytest.approx(0.601986, abs=1e-6)
    assert r["h_marginal"] == pytest.approx(1.060132, abs=1e-6)
    assert r["mi"] == pytest.approx(r["h_marginal"] - r["h_cond"], abs=1e-15)
    assert r["marginal_std"] == pytest.approx(math.log(4 / 3) / 2, rel=1e-12)
    assert r["mi_z"] == pytest.approx(3.185081, abs=1e-6)
    assert r["retrieval_acc@1"] == 1.0 and r["retrieval_chance@1"] == 0.5
    assert r["log_n"] == pytest.approx(math.log(2)) and r["mi_bound"] == pytest.approx(math.log(2))
    assert (r["n_samples"], r["n_prompts"]) == (2, 2)


M3 = [[0.5, 0.25, 0.25],  # owner 0: strictly best             -> @1 hit
      [0.4, 0.2, 0.3],    # owner 1: ranks 3rd                  -> @1 miss, @2 miss, @3 hit
      [0.1, 0.3, 0.3]]    # owner 2: tied with column 1 at .3   -> @1 = 1/2, @2 = 1


def test_3x3_hand_computed_with_a_tie():
    # marginals: log(1/3), log(.3), log(.7/3)
    # pmi: log(.5*3) = 0.405465, log(.2/.3) = -0.405465, log(.3*3/.7) = log(9/7) = 0.251314
    # mi = 0.251314 / 3 = 0.083771
    # h_cond = (0.693147 + 1.609438 + 1.203973)/3 = 1.168853
    # h_marginal = (1.098612 + 1.203973 + 1.455287)/3 = 1.252624
    # marginal deviations from -1.252624: .154012, .048651, -.202663 -> var .067159/3 = .022386
    # std .1496206 -> mi_z = .0837715/.1496206 = 0.559893
    # retrieval (ties broken uniformly at random, computed exactly):
    #   @1 = (1 + 0 + 1/2)/3 = 0.5 ; @2 = (1 + 0 + 1)/3 = 2/3 ; @3 = 1
    r = mutual_information(L(M3), torch.tensor([0, 1, 2]), ks=(1, 2, 3), eps=0.0)
    assert r["mi"] == pytest.approx(0.083771, abs=1e-6)
    assert r["mi"] == pytest.approx(math.log(9 / 7) / 3, rel=1e-12)
    assert r["h_cond"] == pytest.approx(1.168853, abs=1e-6)
    assert r["h_marginal"] == pytest.approx(1.252624, abs=1e-6)
    assert r["mi_z"] == pytest.approx(0.559893, abs=1e-6)
    assert r["retrieval_acc@1"] == pytest.approx(0.5, abs=1e-15)
    assert r["retrieval_acc@2"] == pytest.approx(2 / 3, abs=1e-15)
    assert r["retrieval_acc@3"] == 1.0
    assert [r[f"retrieval_chance@{k}"] for k in (1, 2, 3)] == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_eps_enters_mi_z():
    r0 = mutual_information(L(M3), torch.tensor([0, 1, 2]), eps=0.0)
    r1 = mutual_information(L(M3), torch.tensor([0, 1, 2]), eps=0.1)
    # same numerator, denominator .1496206 + .1 -> 0.0837715 / 0.2496206 = 0.335595
    assert r1["mi_z"] == pytest.approx(0.335595, abs=1e-6)
    assert r1["mi"] == r0["mi"]


def test_tie_with_several_prompts_counts_fractionally():
    # owner 0 scores .2; one prompt (.5) above it, two prompts tie (.2, .2), one below (.1):
    # g = 1, t = 2 -> owner's rank uniform on {2, 3, 4}
    # @1 = clamp(1-1, 0, 3)/3 = 0 ; @2 = 1/3 ; @3 = 2/3 ; @4 = 1 ; @5 = 1
    row = [0.2, 0.5, 0.2, 0.2, 0.1]
    r = mutual_information(L([row]), torch.tensor([0]), ks=(1, 2, 3, 4, 5))
    assert [r[f"retrieval_acc@{k}"] for k in (1, 2, 3, 4, 5)] == pytest.approx(
        [0.0, 1 / 3, 2 / 3, 1.0, 1.0], abs=1e-15
    )


def test_identical_prompts_count_as_equivalent():
    # prompts 0 and 2 are the same prompt ("a"); 1 is different ("b").
    rows = [[0.3, 0.2, 0.5],   # owner 0: col 2 (= same prompt) beats it; class a = .5 > .2 -> hit
            [0.4, 0.35, 0.1],  # owner 1: class a = .4 > .35 -> miss
            [0.6, 0.1, 0.2]]   # owner 2: col 0 (= same prompt) is best; class a = .6 -> hit
    owner = torch.tensor([0, 1, 2])
    plain = mutual_information(L(rows), owner, ks=(1, 2))
    keyed = mutual_information(L(rows), owner, prompt_keys=["a", "b", "a"], ks=(1, 2))
    # without keys every owner is beaten at k=1: 0 ; at k=2 all are in the top 2: 1
    assert plain["retrieval_acc@1"] == 0.0 and plain["retrieval_acc@2"] == 1.0
    assert keyed["retrieval_acc@1"] == pytest.approx(2 / 3, abs=1e-15)
    assert keyed["retrieval_acc@2"] == 1.0  # only 2 distinct prompts
    # chance with 2 distinct prompts: 1/2 at k=1
    assert keyed["retrieval_chance@1"] == 0.5 and plain["retrieval_chance@1"] == pytest.approx(1 / 3)
    # mi/h are over all N columns (the empirical input distribution includes duplicates)
    assert keyed["mi"] == plain["mi"] and keyed["h_cond"] == plain["h_cond"]
    # mi_bound = mean(log(3/2), log 3, log(3/2)) = (0.405465*2 + 1.098612)/3 = 0.636514
    assert keyed["mi_bound"] == pytest.approx(0.636514, abs=1e-6)
    assert plain["mi_bound"] == pytest.approx(math.log(3))


def test_distinct_prompt_keys_change_nothing():
    g = torch.Generator().manual_seed(0)
    logp = -5 * torch.rand(7, 4, generator=g, dtype=torch.float64)
    owner = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    a = mutual_information(logp, owner, ks=(1, 2))
    b = mutual_information(logp, owner, prompt_keys=[10, 11, 12, 13], ks=(1, 2))
    assert a == b


# ------------------------------------------------------------------ collapsed vs input-dependent
def test_collapsed_identical_columns_mi_zero_retrieval_at_chance():
    # every row constant: z_s is equally likely under every prompt (input-blind reasoning)
    c = torch.tensor([-3.0, -7.5, -1.25, -9.0, -4.0, -2.0], dtype=torch.float64)
    logp = c[:, None].expand(6, 3).contiguous()
    r = mutual_information(logp, torch.tensor([0, 1, 2, 0, 1, 2]), ks=(1, 2))
    assert r["mi"] == pytest.approx(0.0, abs=1e-12)
    assert r["mi_z"] == pytest.approx(0.0, abs=1e-9)
    # h_cond = h_marginal = -mean(c) = 26.75/6 = 4.458333: high within-input entropy, zero MI
    assert r["h_cond"] == pytest.approx(4.458333, abs=1e-6)
    assert r["h_marginal"] == pytest.approx(r["h_cond"], abs=1e-12)
    assert r["retrieval_acc@1"] == pytest.approx(1 / 3, abs=1e-15)  # exactly chance k/N
    assert r["retrieval_acc@2"] == pytest.approx(2 / 3, abs=1e-15)


def _diag(n_prompts=4, per_prompt=2, off=-10.0):
    owner = torch.arange(n_prompts).repeat_interleave(per_prompt)
    logp = torch.full((n_prompts * per_prompt, n_prompts), off, dtype=torch.float64)
    logp[torch.arange(len(owner)), owner] = 0.0
    return logp, owner


def test_diagonal_dominant_mi_near_log_n():
    # matched = 0, marginal = log(1 + 3 e^-10) - log 4  ->  mi = log 4 - log(1 + 3e^-10)
    #   = 1.386294 - 0.000136 = 1.386158
    logp, owner = _diag()
    r = mutual_information(logp, owner)
    assert r["mi"] == pytest.approx(math.log(4) - math.log1p(3 * math.exp(-10)), rel=1e-12)
    assert r["mi"] == pytest.approx(1.386158, abs=1e-6)
    assert r["mi"] <= r["log_n"]
    assert r["retrieval_acc@1"] == 1.0


# ------------------------------------------------------------------ subsampled negatives
def test_subsampled_hand_computed_k2():
    # rows of M3, scored only on cols [[0,2],[1,0],[2,1]] (owner first)
    # s0: .5 vs .25 -> marginal log .375, pmi log(4/3) = 0.287682, hit
    # s1: .2 vs .4  -> marginal log .3,   pmi log(2/3) = -0.405465, miss
    # s2: .3 vs .3  -> marginal log .3,   pmi 0, tie -> 1/2
    # mi = (0.287682 - 0.405465)/3 = -0.039261 ; h_marginal = (0.980829 + 2*1.203973)/3 = 1.129592
    full = L(M3)
    cols = torch.tensor([[0, 2], [1, 0], [2, 1]])
    r = mutual_information_subsampled(full.gather(1, cols), cols)
    assert r["mi"] == pytest.approx(-0.039261, abs=1e-6)
    assert r["h_cond"] == pytest.approx(1.168853, abs=1e-6)
    assert r["h_marginal"] == pytest.approx(1.129592, abs=1e-6)
    assert r["retrieval_acc@1"] == pytest.approx(0.5, abs=1e-15)
    assert r["log_n"] == pytest.approx(math.log(2)) and r["n_prompts"] == 2


def test_subsampled_with_all_prompts_equals_full_exactly():
    g = torch.Generator().manual_seed(3)
    S, N = 12, 5
    logp = -20 * torch.rand(S, N, generator=g, dtype=torch.float64)
    logp[2, 4] = logp[2, 1]  # a tie, to exercise the tie rule too
    owner = torch.randint(0, N, (S,), generator=g)
    cols = choose_negatives(owner, N, max_negatives=100, generator=g)
    assert cols.shape == (S, N)
    sub = logp.gather(1, cols)
    for keys in (None, ["p", "q", "p", "r", "s"]):
        full_r = mutual_information(logp, owner, prompt_keys=keys, ks=(1, 2, 3))
        sub_r = mutual_information_subsampled(sub, cols, prompt_keys=keys, ks=(1, 2, 3))
        assert sub_r == full_r  # bit-for-bit


def test_choose_negatives_structure():
    g = torch.Generator().manual_seed(0)
    owner = torch.tensor([0, 3, 3, 1, 5, 2])
    cols = choose_negatives(owner, 6, 3, generator=g)
    assert cols.shape == (6, 4) and cols.dtype == torch.long
    assert torch.equal(cols[:, 0], owner)
    for row in cols.tolist():
        assert len(set(row)) == 4 and all(0 <= c < 6 for c in row)
    # uniform over the other prompts: over many draws every other prompt shows up, owner never repeats
    seen = torch.zeros(6)
    for _ in range(200):
        c = choose_negatives(torch.tensor([2]), 6, 1, generator=g)
        assert c[0, 0] == 2 and c[0, 1] != 2
        seen[c[0, 1]] += 1
    assert seen[2] == 0 and (seen[[0, 1, 3, 4, 5]] > 20).all()  # ~40 each
    # reproducible with the same seed
    a = choose_negatives(owner, 6, 3, generator=torch.Generator().manual_seed(7))
    b = choose_negatives(owner, 6, 3, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


# ------------------------------------------------------------------ permutation null
def test_permutation_null_diagonal_is_significant():
    logp, owner = _diag(n_prompts=8, per_prompt=2)
    r = permutation_null(logp, owner, num_permutations=200, generator=torch.Generator().manual_seed(0))
    # a shuffle keeps all 16 pairings only with prob (2!)^8/16! ~ 1e-11: no null reaches observed
    assert r["p_value"] == pytest.approx(1 / 201)
    assert r["mi"] == pytest.approx(mutual_information(logp, owner)["mi"], abs=1e-15)
    # null: ~1/8 of samples keep a matching prompt -> mi_null ~ log 8 - 10 * 7/8 ~ -6.7
    assert r["mi_null"] < -4 and r["mi_null_std"] > 0


def test_permutation_null_identical_columns_p_is_one():
    c = torch.linspace(-9, -1, 10, dtype=torch.float64)
    logp = c[:, None].expand(10, 5).contiguous()
    r = permutation_null(logp, torch.arange(10) % 5, num_permutations=30,
                         generator=torch.Generator().manual_seed(1))
    assert r["p_value"] == 1.0
    # every shuffle reproduces the observed value (only rounding differs in the mean/std)
    assert r["mi_null"] == pytest.approx(r["mi"], abs=1e-12)
    assert r["mi_null_std"] == pytest.approx(0.0, abs=1e-12)


def test_permutation_null_preserves_how_many_samples_each_prompt_owns():
    # logp[s, j] = -j depends on the column only, so mean_s logp[s, owner'[s]] is the same for
    # every owner' with the same counts per prompt (integers: exact). A uniform random re-draw of
    # owners would change it.
    logp = -torch.arange(4, dtype=torch.float64).expand(9, 4).contiguous()
    owner = torch.tensor([0, 0, 0, 0, 0, 1, 2, 3, 3])
    r = permutation_null(logp, owner, num_permutations=50, generator=torch.Generator().manual_seed(2))
    assert r["p_value"] == 1.0
    assert r["mi_null_std"] == pytest.approx(0.0, abs=1e-12)
    assert r["mi_null"] == pytest.approx(r["mi"], abs=1e-12)


# ------------------------------------------------------------------ EMA
def test_ema_hand_computed_and_state_dict():
    e = EMA(decay=0.5)
    assert e.value is None
    assert e.update(1.0) == 1.0          # first value initialises
    assert e.update(3.0) == 2.0          # .5*1 + .5*3
    assert e.update(0.0) == 1.0          # .5*2 + .5*0
    f = EMA(decay=0.9)
    f.load_state_dict(e.state_dict())
    assert (f.decay, f.value, f.count) == (0.5, 1.0, 3)
    assert f.update(5.0) == 3.0
    with pytest.raises(ValueError, match="decay"):
        EMA(decay=1.0)
    with pytest.raises(ValueError, match="finite"):
        e.update(float("nan"))
    with pytest.raises(ValueError, match="missing"):
        f.load_state_dict({"decay": 0.5})


# ------------------------------------------------------------------ invalid inputs
GOOD = L([[0.6, 0.2], [0.1, 0.5]])


@pytest.mark.parametrize(
    "logp, owner, kwargs, match",
    [
        (GOOD[0], torch.tensor([0]), {}, r"2-D"),
        (GOOD[:, :1], torch.tensor([0, 0]), {}, r"at least 2 prompts"),
        (GOOD[:0], torch.tensor([], dtype=torch.long), {}, r"at least one sample"),
        (torch.tensor([[1, 2], [3, 4]]), torch.tensor([0, 1]), {}, r"floating-point"),
        (GOOD, torch.tensor([0, 1, 1]), {}, r"owner has 3 entries but there are 2 samples"),
        (GOOD, torch.tensor([0, 2]), {}, r"owner\[1\] = 2 is out of range.*< N = 2"),
        (GOOD, torch.tensor([0.0, 1.0]), {}, r"integer"),
        (GOOD.clone().fill_(float("nan")), torch.tensor([0, 1]), {}, r"NaN"),
        (torch.tensor([[0.0, float("inf")], [0.0, 0.0]]), torch.tensor([0, 1]), {}, r"\+inf"),
        (torch.tensor([[float("-inf"), 0.0], [0.0, 0.0]]), torch.tensor([0, 1]), {}, r"own prompt"),
        (torch.full((2, 2), float("-inf")), torch.tensor([0, 1]), {}, r"own prompt"),
        (GOOD, torch.tensor([0, 1]), {"prompt_keys": ["a"]}, r"prompt_keys has 1 entries"),
        (GOOD, torch.tensor([0, 1]), {"prompt_keys": [["a"], ["b"]]}, r"not hashable"),
        (GOOD, torch.tensor([0, 1]), {"ks": (0,)}, r"k in ks"),
        (GOOD, torch.tensor([0, 1]), {"eps": -1.0}, r"eps"),
    ],
)
def test_invalid_inputs(logp, owner, kwargs, match):
    with pytest.raises(ValueError, match=match):
        mutual_information(logp, owner, **kwargs)


def test_neg_inf_off_owner_is_allowed_but_not_in_permutation_null():
    logp = torch.tensor([[0.0, float("-inf")], [-1.0, -0.5]], dtype=torch.float64)
    r = mutual_information(logp, torch.tensor([0, 1]))
    # s0: marginal log(1/2) -> pmi log 2 ; s1: marginal log((e^-1 + e^-.5)/2)
    s1 = -0.5 - math.log((math.exp(-1) + math.exp(-0.5)) / 2)
    assert r["mi"] == pytest.approx((math.log(2) + s1) / 2, rel=1e-12)
    with pytest.raises(ValueError, match="finite"):
        permutation_null(logp, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="num_permutations"):
        permutation_null(GOOD, torch.tensor([0, 1]), num_permutations=0)


def test_invalid_subsampled_and_negatives():
    cols = torch.tensor([[0, 1], [1, 1]])
    with pytest.raises(ValueError, match="more than once"):
        mutual_information_subsampled(GOOD, cols)
    with pytest.raises(ValueError, match="shape of logp_sub"):
        mutual_information_subsampled(GOOD, torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="prompt_keys has only 2"):
        mutual_information_subsampled(GOOD, torch.tensor([[0, 2], [1, 0]]), prompt_keys=["a", "b"])
    with pytest.raises(ValueError, match="max_negatives"):
        choose_negatives(torch.tensor([0, 1]), 3, 0)
    with pytest.raises(ValueError, match="n_prompts"):
        choose_negatives(torch.tensor([0]), 1, 1)
    with pytest.raises(ValueError, match=r"owner\[0\] = 4 is out of range"):
        choose_negatives(torch.tensor([4]), 3, 1)
