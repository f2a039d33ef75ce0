"""Two FSDP2 ranks (two processes, gloo): token micro-batches with dummy passes, LoRA export, probes.

``_worker`` runs in the learner tests' one shared spawn (tests/learner/two_ranks.py), since each
process pays the torch + transformers import.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from ragen2.batch import TrainingBatch
from ragen2.learner.forward import micro_batches
from tests.learner.test_rank import _batch, _run
from tests.learner.pinned import pinned
from tests.learner.two_ranks import counting_calls

PROBE_IDS = [5, 17, 40, 3, 99, 12, 8, 230, 41, 41, 7, 300, 2, 64, 9, 10]

BASE = ("cluster.learner_world_size=2", "algorithm.lr=1e-3", "algorithm.ppo_mini_batches=2")
SCENARIOS = {
    "rows": ("algorithm.micro_batch_size=2",),
    # budget 20: in each mini-batch of 3 rows rank 0 needs two micro-batches and rank 1 has one
    # row, so rank 1 runs a dummy pass
    "tokens": ("learner.micro_batch_tokens=20",),
    # the same, each optimiser step's gradients reduce-scattered once (after its second
    # micro-batch), not after every micro-batch
    "reduce_once": ("learner.micro_batch_tokens=20", "learner.reduce_once=true"),
    # groups sharing prompts (tests/learner/test_prefix.py): the two-pass forward on both ranks
    # (FSDP gathers and reduce-scatters in step), the same update as one pass per row
    "prefix": ("algorithm.kl_coef=0.1", "algorithm.ppo_mini_batches=1"),
    "prefix_off": ("algorithm.kl_coef=0.1", "algorithm.ppo_mini_batches=1",
                   "learner.shared_prefix=false"),
    # bf16 mixed precision on the CPU (gloo gathers bf16, reduces fp32 gradients)
    "bf16": ("algorithm.micro_batch_size=2", "model.dtype=bfloat16"),
    # the MI scorer with a budget that splits rank 0's item into 2 row slices and keeps rank 1's
    # in one (3 forwards against 2): unpadded, FSDP's collectives hang both ranks
    "score_slices": ("algorithm.micro_batch_size=2", "monitor.score_tokens=8"),
}
#: the scorer's input in "score_slices": context 0 scores continuations 0-1 (lengths 5 and 2),
#: context 1 continuations 2-3 (lengths 1 and 4); one item each at chunk=2
SCORE_CONTEXTS = [list(range(5, 20)), list(range(60, 71))]
SCORE_CONTS = [[7, 8, 9, 11, 12], [10, 11], [300], [20, 21, 22, 23]]
SCORE_COLUMNS = np.array([[0], [0], [1], [1]])
if importlib.util.find_spec("peft") is not None:  # the `lora` extra
    SCENARIOS["lora"] = ("learner.micro_batch_tokens=20", "learner.lora.rank=4",
                         "learner.lora.alpha=8", "learner.activation_checkpointing=true",
                         "algorithm.kl_coef=0.1")


def _worker(rank: int, path: str, rdv, out_dir: str) -> None:
    torch.set_num_threads(1)
    import ragen2.learner.forward as rank_module

    calls: list = []
    planner = rank_module.plan_shared_prefix
    if rank == 1:  # rank 1 never finds sharing worth it: it follows rank 0 with a forced plan
        rank_module.plan_shared_prefix = lambda *a, min_saving=0.2: (
            planner(*a, min_saving=min_saving) if min_saving == -float("inf") else None)
    try:
        with counting_calls(rank_module, "shared_prefix_logits", calls):
            result = _scenarios(rank, path, rdv, calls)
    finally:  # the other jobs of the shared spawn see the module as it was
        rank_module.plan_shared_prefix = planner
    torch.save(result, f"{out_dir}/rank{rank}.pt")


def _scenarios(rank: int, path: str, rdv, calls: list) -> dict:
    from ragen2.controller import learner_settings
    from ragen2.learner.rank import LearnerRank
    from ragen2.train import load_config
    from tests.learner.test_prefix import prefix_batch

    result = {}
    for name, extra in SCENARIOS.items():
        calls.clear()
        batch = prefix_batch if name.startswith("prefix") else _batch
        cfg = load_config(pinned(*BASE, *extra))
        r = LearnerRank(cfg, path, rank, 2, threads=1, settings=learner_settings(cfg))
        rdv.setup(r)
        try:
            if name == "score_slices":  # before the update: the weights of the model file
                result["scores"] = r.score(SCORE_CONTEXTS, SCORE_CONTS, SCORE_COLUMNS, chunk=2)
            if name == "tokens":
                result["plan"] = [len(micro_batches(r.state, TrainingBatch.of(_batch()),
                                                    np.arange(k, k + 3))) for k in (0, 3)]
            if name == "lora":  # warm start: adapters train, the reference takes the merged weights
                from ragen2.learner.fsdp import full_tensor

                r.sft_step(_batch(), np.arange(6), 1e-2)
                r.finish_warm_start()
                merged = dict(r.named_weights())
                result["ref_is_merged"] = all(
                    torch.equal(full_tensor(v), merged[k]) for k, v in r.state.ref.state_dict().items()
                    if k in merged)
            gathers, reduces = [], []
            with counting_calls(torch.distributed, "all_gather_single", gathers), \
                    counting_calls(torch.distributed, "reduce_scatter_single", reduces):
                m = r.update(batch(), step=1)
            result[name] = {"metrics": m, "weights": {k: v.clone() for k, v in r.named_weights()},
                            "all_gathers": len(gathers), "reduce_scatters": len(reduces),
                            "shared_forwards": len(calls), "logprobs": r.logprobs(PROBE_IDS),
                            "run": r.run(lambda rk, x: (rk.rank, rk.world_size, x), 7)}
            if name in ("tokens", "reduce_once"):  # then a warm-start step of several micro-batches
                result[name]["sft"] = r.sft_step(_batch(), np.arange(6), 1e-2)
        finally:
            r.shutdown()
    return result


def test_two_ranks(tiny_model_path, two_rank_results):
    r0, r1 = two_rank_results["world2"]
    assert r0["plan"] == r1["plan"] == [2, 2]  # the same number of passes on both ranks
    _check_scores(tiny_model_path, r0["scores"], r1["scores"])

    for name in SCENARIOS:
        assert r0[name]["run"] == (0, 2, 7) and r1[name]["run"] == (1, 2, 7)
        assert r1[name]["logprobs"] is None and len(r0[name]["logprobs"]) == len(PROBE_IDS) - 1
        for k, v in r0[name]["weights"].items():  # every rank receives every full tensor
            torch.testing.assert_close(r1[name]["weights"][k], v, rtol=0, atol=0)

    bf16, rows = r0["bf16"], r0["rows"]  # same batch and micro-batches, bf16 compute
    assert bf16["metrics"]["actor/optimizer_steps"] == 2
    assert bf16["metrics"]["actor/grad_norm"] == pytest.approx(rows["metrics"]["actor/grad_norm"],
                                                               rel=0.05)
    assert all(v.dtype == torch.float32 for v in bf16["weights"].values())  # fp32 masters
    gap = np.abs(np.subtract(bf16["logprobs"], rows["logprobs"])).mean()
    assert 0 < gap < 0.05, gap  # bf16 rounding, not a different model

    # FSDP gathers the parameters once a block between optimiser steps (the no-grad passes, each
    # of the 2 mini-batches), each of its 5 groups (4 blocks and the root) with one all-gather,
    # not once a forward and again a backward
    for name in ("rows", "tokens", "bf16", "reduce_once"):
        assert r0[name]["all_gathers"] == r1[name]["all_gathers"] == 5 * 3, name

    # learner.reduce_once: the gradients of each of the 2 optimiser steps reduce-scattered once
    # a group, not once a micro-batch (2 a step): the same update and warm-start step
    tokens, once = r0["tokens"], r0["reduce_once"]
    assert tokens["reduce_scatters"] == r1["tokens"]["reduce_scatters"] == 5 * 2 * 2
    assert once["reduce_scatters"] == r1["reduce_once"]["reduce_scatters"] == 5 * 2
    for key in ("actor/loss", "actor/grad_norm"):
        assert once["metrics"][key] == pytest.approx(tokens["metrics"][key], rel=1e-5, abs=1e-7)
    for key in ("warm_start/loss", "warm_start/grad_norm"):
        assert once["sft"][key] == pytest.approx(tokens["sft"][key], rel=1e-5, abs=1e-7)
    for k, v in tokens["weights"].items():
        torch.testing.assert_close(once["weights"][k], v, rtol=0, atol=1e-5)

    rows, tokens = r0["rows"], r0["tokens"]
    for key in ("actor/loss", "actor/grad_norm"):
        assert tokens["metrics"][key] == pytest.approx(rows["metrics"][key], rel=1e-5, abs=1e-7)
    for k, v in rows["weights"].items():
        torch.testing.assert_close(tokens["weights"][k], v, rtol=0, atol=1e-5)

    # shared prefixes: both ranks ran the same (non-zero) number of two-pass forwards
    on, off = r0["prefix"], r0["prefix_off"]
    assert on["shared_forwards"] == r1["prefix"]["shared_forwards"] > 0
    assert off["shared_forwards"] == r1["prefix_off"]["shared_forwards"] == 0
    for key in ("actor/loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy"):
        assert on["metrics"][key] == pytest.approx(off["metrics"][key], rel=1e-5, abs=1e-7), key
    for k, v in off["weights"].items():
        torch.testing.assert_close(on["weights"][k], v, rtol=0, atol=1e-5)

    # world size 1 gives the same update as world size 2
    m1, w1 = _run(tiny_model_path, "algorithm.ppo_mini_batches=2", "algorithm.micro_batch_size=2")
    assert m1["actor/loss"] == pytest.approx(rows["metrics"]["actor/loss"], rel=1e-5, abs=1e-7)
    assert m1["actor/grad_norm"] == pytest.approx(rows["metrics"]["actor/grad_norm"], rel=1e-5)
    for k, v in w1.items():
        np.testing.assert_allclose(rows["weights"][k].numpy(), v, atol=1e-5, err_msg=k)

    # LoRA (with activation checkpointing): merged full weights under the base names, and only
    # the adapted projections moved
    if "lora" not in SCENARIOS:
        return
    from ragen2.models.loading import load_causal_lm

    base = load_causal_lm(tiny_model_path).state_dict()
    assert r0["ref_is_merged"] and r1["ref_is_merged"]
    lora = r0["lora"]["weights"]
    assert lora.keys() == rows["weights"].keys()
    changed = [k for k, v in lora.items() if not torch.equal(v, base[k])]
    assert changed and all(k.endswith("proj.weight") for k in changed)


def _check_scores(path, mine0, mine1):
    """Each rank scored its own item (rank 0 context 0, rank 1 context 1), as one sequence would."""
    from ragen2.algos import logprobs_from_logits
    from ragen2.learner.scoring import forward_count
    from ragen2.models.loading import load_causal_lm
    from ragen2.train import load_config

    # the premise: the two items need different numbers of forwards at this budget
    assert forward_count([5, 2], 8) == 3 and forward_count([1, 4], 8) == 2
    assert sorted(s for s, _, _, _ in mine0) == [0, 1] and sorted(s for s, _, _, _ in mine1) == [2, 3]
    model = load_causal_lm(path, dtype="float32").eval()
    temp = load_config([]).engine.temperature
    for s, k, value, n in mine0 + mine1:
        ctx, c = SCORE_CONTEXTS[SCORE_COLUMNS[s, k]], SCORE_CONTS[s]
        ids = torch.tensor([ctx + c])
        with torch.no_grad():
            lp = logprobs_from_logits(model(input_ids=ids).logits[:, :-1], ids[:, 1:], temp)
        assert n == len(c) and value == pytest.approx(float(lp[0, len(ctx) - 1:].sum()), abs=1e-4)
