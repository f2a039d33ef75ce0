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
    assert load_config([]).monitor.score_tokens is None  # sized to the free memory
    assert load_config(["monitor.score_tokens=512"]).monitor.score_tokens == 512


GB = 10**9
QWEN05 = dict(per_token=1_572_000, per_row=16_000_000)  # Qwen2.5-0.5B bf16, 1,024-token context


def test_slice_budget_follows_the_free_memory():
    """monitor.score_tokens=null: every row at once where they fit in the free memory less the
    engine's reserve and a margin of the card; else as many rows a slice as fit, at least one;
    2048 off CUDA; a number set in the config wins everywhere."""
    from ragen2.config import SCORE_TOKENS_CPU
    from ragen2.learner.scoring import SCORE_MARGIN, slice_budget

    rows, width = 64, 400
    row = width * QWEN05["per_token"] + QWEN05["per_row"]  # 644.8 MB a row and its context copy
    assert slice_budget(None, width, rows, **QWEN05, free=None) == SCORE_TOKENS_CPU == 2048
    assert slice_budget(512, width, rows, **QWEN05, free=None) == 512
    assert slice_budget(512, width, rows, **QWEN05, free=130 * GB, total=150 * GB) == 512
    # an H200 beside a 0.5B learner: unsliced (41.3 GB of 130 - 15 free)
    assert slice_budget(None, width, rows, **QWEN05, free=130 * GB, total=150 * GB) == 0
    # the margin and the engine's reserve count: just enough room, then a byte short
    total = 100 * GB
    room = rows * row + SCORE_MARGIN * total
    assert slice_budget(None, width, rows, **QWEN05, free=room, total=total) == 0
    assert slice_budget(None, width, rows, **QWEN05, free=room, total=total, reserve=1) == 63 * width
    # a 24 GB card with 10 GB free: 7.6 GB of room, 11 rows a slice
    tokens = slice_budget(None, width, rows, **QWEN05, free=10 * GB, total=24 * GB)
    assert tokens == 11 * width and 11 * row <= 7.6 * GB < 12 * row
    # no room at all: one continuation at a time (the least the scorer can do)
    assert slice_budget(None, width, rows, **QWEN05, free=GB, total=24 * GB) == width


def test_score_budget_on_a_rank_with_fake_free_memory(llama, monkeypatch):
    """probes.score_budget: the model's config gives the bytes a token and a row; a CPU rank
    keeps 2048; a set monitor.score_tokens is used as is; the engine's reserve shrinks the room;
    the slices it picks score what one forward per sequence does."""
    from types import SimpleNamespace

    import ragen2.learner.scoring as scoring
    from ragen2.cluster.shapes import shape_from_config_json
    from ragen2.learner.probes import score_budget

    def rank(score_tokens=None, reserve=0):
        return SimpleNamespace(cfg=SimpleNamespace(monitor=SimpleNamespace(score_tokens=score_tokens),
                                                   model=SimpleNamespace(dtype="float32")),
                               device="cpu", model=llama, world_size=1,
                               settings=SimpleNamespace(score_reserve_bytes=reserve))

    assert score_budget(rank(), 25, 11, 6) == 2048  # the CPU
    assert score_budget(rank(score_tokens=7), 25, 11, 6) == 7
    shape = shape_from_config_json(llama.config.to_dict())
    per_token, per_row = shape.scorer_bytes_per_token(4), shape.scorer_bytes_per_row(4, 25)
    need = 6 * (11 * per_token + per_row)
    total = 10**6
    monkeypatch.setattr(scoring, "device_memory", lambda device: (need + total // 10, total))
    assert score_budget(rank(), 25, 11, 6) == 0  # it all fits: unsliced
    sliced = score_budget(rank(reserve=need // 2), 25, 11, 6)
    assert sliced == 3 * 11  # half the room: 3 of the 6 rows a slice
    want = [_reference(llama, CONTEXT, c, 1.0) for c in CONTS]
    with torch.no_grad():
        lp, n = scoring.score_continuations(llama, CONTEXT, CONTS, token_budget=sliced)
    assert lp.tolist() == pytest.approx(want, abs=1e-4)


def test_assemble_scores_places_each_entry_and_refuses_a_gap():
    from ragen2.learner.probes import assemble_scores

    logp, tokens = assemble_scores((2, 2), [[(0, 0, -1.5, 3), (1, 1, -0.25, 1)],
                                            [(0, 1, -2.0, 4), (1, 0, -7.0, 2)]])
    assert logp.tolist() == [[-1.5, -2.0], [-7.0, -0.25]]
    assert tokens.tolist() == [[3, 4], [2, 1]]
    with pytest.raises(RuntimeError, match="unscored"):
        assemble_scores((2, 2), [[(0, 0, -1.5, 3), (1, 1, -0.25, 1)]])


ITEMS = [(CONTEXT, CONTS), (list(range(60, 67)), [[1, 2, 3, 4], [5], []]), ([11], [[12, 13]]),
         (list(range(20, 48)), []), (list(range(30, 41)), [list(range(70, 79)), [9, 9]])]


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("budget", [1, 9, 30, 64, 10_000])
def test_batched_items_score_what_one_sequence_at_a_time_scores(llama, budget, shared,
                                                                 monkeypatch):
    """Contexts of different lengths packed several to a forward (padded on the right), their
    continuations sharing forwards, on copies of their own contexts' caches or (``shared``, the
    CPU's cascade) on the caches themselves: every score is the full sequence's, and every
    forward's padded tokens stay within the budget (one row at least)."""
    import ragen2.learner.scoring as scoring
    from ragen2.learner import cascade

    shapes = []
    real, real_rows = llama.forward, cascade.rows_logits

    def recording(*args, input_ids=None, **kwargs):
        shapes.append(tuple(input_ids.shape))
        return real(*args, input_ids=input_ids, **kwargs)

    def recording_rows(model, cache, ids, *args):
        shapes.append(tuple(ids.shape))
        return real_rows(model, cache, ids, *args)

    monkeypatch.setattr(llama, "forward", recording)
    monkeypatch.setattr(cascade, "rows_logits", recording_rows)
    monkeypatch.setattr(cascade, "applies", lambda *a: shared)
    with torch.no_grad():
        out = scoring.score_batched(llama, ITEMS, token_budget=budget, temperature=0.7)
    monkeypatch.undo()  # the reference's forwards are not the scorer's
    assert len(out) == len(ITEMS)
    for (ctx, conts), (lp, n) in zip(ITEMS, out):
        assert n.tolist() == [len(c) for c in conts] and lp.dtype == torch.float32
        for got, cont in zip(lp.tolist(), conts):
            assert got == pytest.approx(_reference(llama, ctx, cont, 0.7), abs=1e-4)
    longest = max(len(c) for c, _ in ITEMS)
    assert all(b * t <= max(budget, longest) for b, t in shapes), shapes
    if budget == 10_000:  # one forward of the five contexts, one of all 12 continuations
        assert shapes == [(5, longest), (12, 10)]


def test_batched_scores_refuse_what_they_cannot_score(llama):
    import ragen2.learner.scoring as scoring

    with pytest.raises(ValueError, match="token_budget=0"):
        scoring.score_batched(llama, ITEMS, token_budget=0)
    with pytest.raises(ValueError, match="non-empty context"):
        scoring.score_batched(llama, [([], [[1]])], token_budget=8)
    assert scoring.score_batched(llama, [], token_budget=8) == []


def test_packs_by_hand():
    from ragen2.learner.scoring import _packs

    sizes = {0: 3, 1: 3, 2: 4, 3: 9}
    assert _packs([0, 1, 2, 3], sizes.get, 10) == [[0, 1], [2], [3]]
    assert _packs([0, 1, 2, 3], sizes.get, 12) == [[0, 1, 2], [3]]
    assert _packs([3, 0], sizes.get, 5) == [[3], [0]]  # wider than the budget: alone
    assert _packs([0, 1], lambda i: 0, 1) == [[0], [1]]  # an empty row counts one token
    assert _packs([], sizes.get, 10) == []
    assert _packs([0, 1, 2], sizes.get, 100, most=2) == [[0, 1], [2]]
