"""benchmarks/bf16_panel_mi.py's parts: the gap statistics against hand-computed numbers, the
comparison of two recordings of the same scorer calls, and its scorer (the learner's
``probes.score`` on one plain rank): it scores what one forward per sequence scores, a copy in
fp32 scores exactly alike, and the copy with bf16 parameters scores what a one-rank bf16 learner
(FSDP2 mixed precision) scores. No run: nothing here trains or samples."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bf16_panel_mi as bpm  # noqa: E402  (benchmarks/bf16_panel_mi.py)

CONTEXTS = [list(range(5, 30)), [9, 4, 33, 33, 12, 60, 7], list(range(70, 40, -1))]
CONTS = [[7, 8, 9], [10] * 6, [40, 2], list(range(50, 61)), [3]]
#: a subsampled plan: each sample under its owner and one other context
COLUMNS = np.array([[0, 1], [0, 2], [1, 0], [2, 1], [2, 0]])


def test_gap_stats_by_hand():
    g = bpm.gap_stats(np.array([-10.0, -20.0, -5.0, -1.0]), np.array([-10.5, -19.0, -5.0, -3.0]),
                      np.array([5, 10, 1, 4]))
    # |gap| [0.5, 1, 0, 2]; p99 by linear interpolation: 1 + 0.97 x (2 - 1)
    assert g["entries"] == 4 and g["tokens"] == 20
    assert g["seq_mean"] == pytest.approx(0.875)
    assert g["seq_p99"] == pytest.approx(1.97)
    assert g["seq_max"] == pytest.approx(2.0)
    assert g["signed_seq_mean"] == pytest.approx(-0.375)
    # per token [0.1, 0.1, 0, 0.5]; p99: 0.1 + 0.97 x 0.4
    assert g["seq_per_token_mean"] == pytest.approx(0.175)
    assert g["seq_per_token_p99"] == pytest.approx(0.488)
    assert g["seq_per_token_max"] == pytest.approx(0.5)


def test_an_empty_entry_counts_as_one_token():
    g = bpm.gap_stats(np.array([[0.0, -1.0]]), np.array([[0.5, -1.0]]), np.array([[0, 2]]))
    assert g["tokens"] == 3 and g["seq_per_token_max"] == pytest.approx(0.5)


def test_compare_calls_joins_calls_and_counts_top1_agreement():
    a = [bpm.Call("x", np.array([[-1.0, -2.0], [-3.0, -1.0]]), np.array([[1, 1], [2, 2]])),
         bpm.Call("y", np.array([[-4.0, -5.0, -6.0]]), np.array([[3, 3, 3]]))]
    b = [bpm.Call("x", np.array([[-2.5, -2.0], [-3.0, -1.0]]), np.array([[1, 1], [2, 2]])),
         bpm.Call("y", np.array([[-4.0, -5.0, -6.0]]), np.array([[3, 3, 3]]))]
    g = bpm.compare_calls(a, b)
    assert g["entries"] == 7 and g["tokens"] == 15
    assert g["seq_max"] == pytest.approx(1.5) and g["seq_mean"] == pytest.approx(1.5 / 7)
    assert g["top1_agree"] == pytest.approx(2 / 3)  # row 0 of call x: column 0 -> column 1
    with pytest.raises(ValueError, match="different things"):
        bpm.compare_calls(a, b[:1])
    with pytest.raises(ValueError, match="different things"):
        bpm.compare_calls(a, [b[0], bpm.Call("z", b[1].logp, b[1].tokens)])


def test_the_trainers_seeds_first_then_new_streams():
    fn = lambda seed, step, i: seed * 10_000 + step * 100 + i  # noqa: E731
    assert bpm.sampling_seeds(fn, 1, 5, 2, 0) == [10_500, 10_501]
    assert bpm.sampling_seeds(fn, 1, 5, 2, 2) == [10_504, 10_505]


def test_config_drift_lists_changed_leaves_only():
    saved = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": "${f}", "only_saved": 3}
    composed = {"a": 1, "b": {"c": [1, 3], "d": "x"}, "e": "y", "only_new": 4}
    assert bpm.config_drift(saved, composed) == ["b.c: [1, 2] -> [1, 3]"]


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def _one_sequence(model, context, cont, temperature):
    from ragen2.algos import logprobs_from_logits

    ids = torch.tensor([context + cont])
    with torch.no_grad():
        lp = logprobs_from_logits(model(input_ids=ids).logits[:, :-1].float(), ids[:, 1:],
                                  temperature)
    return float(lp[0, len(context) - 1:].sum())


def test_the_scorer_scores_each_column_as_one_sequence(llama, base_config):
    calls = []
    scorer = bpm.learner_scorer(base_config, llama, "float32", 0.7, calls)
    logp, tokens = scorer(CONTEXTS, CONTS, COLUMNS)
    assert logp.shape == COLUMNS.shape and len(calls) == 1
    for s, row in enumerate(COLUMNS):
        for k, j in enumerate(row):
            assert tokens[s, k] == len(CONTS[s])
            assert logp[s, k] == pytest.approx(_one_sequence(llama, CONTEXTS[j], CONTS[s], 0.7),
                                               abs=1e-4)


def test_an_fp32_copy_scores_identically_and_a_bf16_copy_casts_parameters_only(llama, base_config):
    calls: dict[str, list] = {"a": [], "b": [], "bf16": []}
    same = bpm.with_param_dtype(llama, torch.float32)
    half = bpm.with_param_dtype(llama, torch.bfloat16)
    for name, model, dtype in (("a", llama, "float32"), ("b", same, "float32"),
                               ("bf16", half, "bfloat16")):
        bpm.learner_scorer(base_config, model, dtype, 1.0, calls[name])(CONTEXTS, CONTS, COLUMNS)
    assert np.array_equal(calls["a"][0].logp, calls["b"][0].logp)
    assert bpm.compare_calls(calls["a"], calls["b"])["seq_max"] == 0.0
    # bf16 compute moves the scores, by bf16's rounding, not by a different function
    g = bpm.compare_calls(calls["a"], calls["bf16"])
    assert 0 < g["seq_per_token_max"] < 0.1, g
    assert all(p.dtype == torch.bfloat16 for p in half.parameters())
    assert all(b.dtype == torch.float32 for b in half.buffers() if b.is_floating_point())
    assert half.lm_head.weight is half.model.embed_tokens.weight  # still tied
    assert all(p.dtype == torch.float32 for p in llama.parameters())  # the original as it was


def test_the_bf16_scorer_is_a_bf16_learner_ranks(tiny_model_path):
    """One learner rank with ``model.dtype=bfloat16`` (FSDP2 mixed precision, fp32 masters)
    scores what the benchmark's bf16 copy of the same weights scores, far closer than fp32 does."""
    from ragen2.controller import learner_settings
    from ragen2.learner.build import load_lm
    from ragen2.learner.probes import assemble_scores
    from ragen2.learner.rank import LearnerRank
    from ragen2.train import load_config

    cfg = load_config(["cluster.learner_world_size=1", "model.dtype=bfloat16"])
    temperature = learner_settings(cfg).temperature
    rank = LearnerRank(cfg, tiny_model_path, 0, 1, threads=1, settings=learner_settings(cfg))
    rank.setup("127.0.0.1", 0)  # one rank: its store binds a port the OS assigns
    try:
        learner, _ = assemble_scores(COLUMNS.shape, [rank.score(CONTEXTS, CONTS, COLUMNS)])
    finally:
        rank.shutdown()
    fp32 = load_lm(cfg, tiny_model_path)
    ours = {dtype: bpm.learner_scorer(cfg, model, dtype, temperature)(CONTEXTS, CONTS, COLUMNS)[0]
            for dtype, model in (("float32", fp32),
                                 ("bfloat16", bpm.with_param_dtype(fp32, torch.bfloat16)))}
    bf16_gap = np.abs(ours["float32"] - learner).mean()
    assert bf16_gap > 0
    assert np.abs(ours["bfloat16"] - learner).max() <= 0.1 * bf16_gap, (ours, learner)
