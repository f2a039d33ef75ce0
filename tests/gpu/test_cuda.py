"""CUDA-only checks (skipped without a GPU; launch/gpu_check.sh runs them): the HF engine in bf16
on the GPU, the cuda_ipc weight sync between two processes sharing one GPU, the FSDP2 learner in
bf16 on NCCL with its memory options, and flash-attention-2 when installed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu


def test_hf_engine_bf16_on_cuda_matches_teacher_forcing(tiny_model_path):
    from ragen2.engines.base import SamplingParams
    from ragen2.engines.hf import HFEngine

    eng = HFEngine(tiny_model_path, dtype="bfloat16", device="cuda")
    prompt = eng.tokenizer.encode("<|im_start|>user\nP _ _\n_ O G<|im_end|>\n<|im_start|>assistant\n",
                                  add_special_tokens=False)
    g = eng.generate([prompt], SamplingParams(max_new_tokens=16, stop=(), seed=0))[0]
    x = torch.tensor([prompt + g.token_ids], device="cuda")
    with torch.no_grad():
        logits = eng.model(input_ids=x).logits[0, len(prompt) - 1:-1].float()
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids, device="cuda")[:, None])[:, 0]
    assert torch.allclose(torch.tensor(g.logprobs), ref.cpu(), atol=5e-2)


class _Rank:
    def __init__(self, weights):
        self.rank, self.weights = 0, weights
        self.sync_state = {}  # LearnerRank's: what a strategy keeps between its calls

    def named_weights(self, device="cuda", dtype=None):
        for k, v in self.weights.items():
            yield k, v.to(device, getattr(torch, dtype) if dtype else v.dtype)


def _engine_process(model_path, queue, done):
    """Child process: an HF engine on the same GPU loads the learner's shared buckets."""
    from ragen2.engines.hf import HFEngine
    from ragen2.sync.cuda_ipc import finish, load_shared_bucket

    worker = SimpleNamespace(engine=HFEngine(model_path, device="cuda"))
    while (shares := queue.get()) is not None:
        load_shared_bucket(worker, shares)
        done.put("ok")
    finish(worker, 7)
    sd = worker.engine.model.state_dict()
    done.put({k: float(v.double().sum()) for k, v in sd.items()})


def test_cuda_ipc_sync_loads_every_bucket_in_another_process(tiny_model_path):
    import torch.multiprocessing as mp

    from ragen2.engines.hf import HFEngine
    from ragen2.sync.cuda_ipc import share_next_bucket

    src = HFEngine(tiny_model_path, device="cuda")
    weights = {k: v + 0.01 for k, v in src.model.state_dict().items() if k not in src._tied}
    ctx = mp.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_engine_process, args=(tiny_model_path, queue, done))
    child.start()
    rank, first, n = _Rank(weights), True, 0
    while (share := share_next_bucket(rank, 256 * 1024, "float32", first)) is not None:
        first = False
        queue.put({share[0]: share})
        assert done.get(timeout=120) == "ok"  # the learner keeps the buffer until it is loaded
        n += 1
    queue.put(None)
    sums = done.get(timeout=120)
    child.join(60)
    assert n > 1
    for k, v in weights.items():
        assert sums[k] == pytest.approx(float(v.double().sum()), rel=1e-6), k


CUDA_BF16 = ("cluster.device=cuda", "cluster.backend=nccl", "model.dtype=bfloat16")


def _update(path, *overrides):
    from tests.learner.test_rank import _batch, _rank

    r = _rank(path, *CUDA_BF16, *overrides)
    try:
        return r.update(_batch(), step=1)
    finally:
        r.shutdown()


def test_fsdp2_bf16_update_on_nccl_and_its_memory_options_agree(tiny_model_path):
    """bf16 compute with fp32 master weights and reduction; activation checkpointing and CPU
    offload change memory, not the update."""
    base = _update(tiny_model_path)
    assert np.isfinite(base["actor/loss"]) and base["actor/grad_norm"] > 0
    for opt in ("learner.activation_checkpointing=true", "learner.cpu_offload=true"):
        m = _update(tiny_model_path, opt)
        for key in ("actor/loss", "actor/grad_norm"):
            assert m[key] == pytest.approx(base[key], rel=1e-2, abs=1e-4), (opt, key)


def test_flash_attention_2_matches_sdpa(tiny_model_path):
    pytest.importorskip("flash_attn", reason="flash-attn not installed")
    from tests.learner.test_rank import _rank

    ids = list(range(3, 200))
    out = {}
    for impl in ("sdpa", "flash_attention_2"):
        r = _rank(tiny_model_path, *CUDA_BF16, f"learner.attn_implementation={impl}")
        try:
            out[impl] = np.array(r.logprobs(ids))
        finally:
            r.shutdown()
    np.testing.assert_allclose(out["flash_attention_2"], out["sdpa"], atol=5e-2)
