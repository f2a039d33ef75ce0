"""The MI scorer in token-budget slices: the same numbers as one forward per sequence, and never a
(batch, width, vocabulary) block of logits beyond the budget (a tiny random Llama, no files)."""

from __future__ import annotations

import pytest
import torch

from ragen2.algos import logprobs_from_logits


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


CONTEXT = list(range(5, 30))
CONTS = [[7, 8, 9], [10] * 6, [], [40, 2], list(range(50, 61)), [3]]


def _reference(model, context, cont, temperature):
    if not cont:
        return 0.0
    ids = torch.tensor([context + cont])
    with torch.no_grad():
        lp = logprobs_from_logits(model(input_ids=ids).logits[:, :-1], ids[:, 1:], temperature)
    return float(lp[0, len(context) - 1:].sum())


@pytest.mark.parametrize("budget", [0, 1, 11, 24, 1000])
def test_slices_score_what_one_sequence_at_a_time_scores(llama, budget, monkeypatch):
    """Every budget gives the full-sequence logprobs; the logits of a slice never exceed the
    budget's tokens (one row at least), whatever the batch."""
    import ragen2.learner.scoring as scoring

    seen = []
    real = scoring.logprobs_from_logits

    def recording(logits, labels, temperature=1.0):
        seen.append(tuple(logits.shape))
        return real(logits, labels, temperature)

    monkeypatch.setattr(scoring, "logprobs_from_logits", recording)
    with torch.no_grad():
        lp, n = scoring.score_continuations(llama, CONTEXT, CONTS, temperature=0.7,
                                            token_budget=budget)
    assert n.tolist() == [len(c) for c in CONTS]
    for got, cont in zip(lp.tolist(), CONTS):
        assert got == pytest.approx(_reference(llama, CONTEXT, cont, 0.7), abs=1e-4)
    width = max(len(c) for c in CONTS)
    if budget == 0:  # everything at once: (B, width - 1, V), the last token predicts nothing
        assert seen == [(len(CONTS), width - 1, 97)]
    else:  # rows x their width within the budget (a row wider than it goes alone)
        assert all(b * (t + 1) <= max(budget, width) for b, t, _ in seen), seen
    if budget == 11:  # one row a slice; one-token and empty rows need no forward
        assert [b for b, _, _ in seen] == [1] * 4


@pytest.mark.parametrize("budget", [0, 1, 11, 24, 1000])
def test_forward_count_is_the_forwards_the_scorer_runs_and_padding_changes_no_score(llama, budget):
    """Under FSDP every forward is collective, so ranks pad to the same count: forward_count
    must be exactly what score_continuations runs, and the padded forwards change nothing."""
    from ragen2.learner.scoring import forward_count, score_continuations

    calls = []
    hook = llama.register_forward_hook(lambda *a: calls.append(1))
    try:
        with torch.no_grad():
            lp, _ = score_continuations(llama, CONTEXT, CONTS, token_budget=budget)
            ran = len(calls)
            padded, _ = score_continuations(llama, CONTEXT, CONTS, token_budget=budget,
                                            forwards=ran + 3)
    finally:
        hook.remove()
    assert ran == forward_count([len(c) for c in CONTS], budget)
    assert len(calls) - ran == ran + 3
    assert torch.equal(padded, lp)
    with pytest.raises(ValueError, match=f"forwards=1 is below the {ran} forwards"):
        score_continuations(llama, CONTEXT, CONTS, token_budget=budget, forwards=1)


def test_forward_count_by_hand():
    from ragen2.learner.scoring import forward_count

    # width 5, budget 10: 2 rows a slice -> [3, 1] and [5, 0]: the context + 2 slices
    assert forward_count([3, 1, 5, 0], 10) == 3
    assert forward_count([3, 1, 5, 0], 0) == 2  # one slice
    assert forward_count([1, 0], 10) == 1  # first tokens come from the context's forward
    assert forward_count([], 10) == 0
    assert forward_count([5, 2], 8) == 3 and forward_count([1, 4], 8) == 2  # 1 row / 2 rows


def test_score_tokens_is_validated():
    from ragen2.train import load_config

    with pytest.raises(ValueError, match="monitor.score_tokens"):
        load_config(["monitor.score_tokens=0"])
