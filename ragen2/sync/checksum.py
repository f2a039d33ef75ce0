"""Exact staleness check after every weight sync: checksums of a few exported tensors, both sides.

The post-sync probe (:mod:`ragen2.sync.probe`) compares logprobs, so it sees a stale engine only
when the weights moved more than the engines' numerical noise: at a pretrained recipe's lr 1e-6 a
bf16 engine that kept the old weights looks like noise. This check is exact whatever the numerics.
Each engine process reports, for a few named tensors, its dtype, its shape, its tensor-parallel
shard and :func:`tensor_checksum` of the bits it holds; the learner computes the same checksum of
its exported tensor cast to the engine's dtype and cut to the engine's shard. Any difference is a
:class:`~ragen2.sync.base.WeightSyncError` naming the tensor and the worker.

Which tensors (:func:`checksum_names`): the final norm, the first two and last two norm weights of
the blocks, and the last block's ``o_proj`` / ``down_proj`` (row-parallel: split along their
input dimension under TP). Norm weights are kept as loaded by every engine (vLLM-CPU repacks its
linear weights for oneDNN and may leave an empty ``weight``: such a tensor is reported missing and
skipped). With LoRA only the linear weights move, so the check rests on the two projections; an
engine that reports neither cannot be checked for a LoRA run (``sync/checksum_tensors`` says how
many tensors were compared).

The checksum is an integer: the tensor's raw bits as integers times fixed position weights,
summed in int64. Integer addition wraps modulo 2**64 and is associative, so the value does not
depend on the device or the reduction order, and a single changed bit changes it.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from ragen2.sync.base import WeightSyncError

#: per engine process: {name: [dtype, shape, tp rank, tp size, checksum]} of the tensors it holds
Report = dict[str, list]
_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
_MODULUS = 65521  # position weights cycle through 1..65521 (a prime: no short period)


def tensor_checksum(t: Any) -> int:
    """An exact, order-independent checksum of ``t``'s bits (any dtype, any device)."""
    import torch

    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return 0
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    bits = flat.view(getattr(torch, _INT_VIEW[flat.element_size()])).to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % _MODULUS + 1
    return int((bits * weights).sum())


def checksum_names(names: Sequence[str]) -> list[str]:
    """The few exported tensors checked after each sync, chosen from the export's ``names``."""
    norms = [n for n in names if n.endswith("norm.weight") and n != "model.norm.weight"]
    picked = ["model.norm.weight"] if "model.norm.weight" in names else []
    picked += norms[:2] + norms[-2:]
    for suffix in ("o_proj.weight", "down_proj.weight"):
        rows = [n for n in names if n.endswith(suffix)]
        picked += rows[-1:]
    return list(dict.fromkeys(picked))


def module_report(named: Iterable[tuple[str, Any]], names: Sequence[str], tp_rank: int = 0,
                  tp_size: int = 1) -> Report:
    """An engine process's :data:`Report` from its ``(name, parameter)`` pairs: every wanted
    name it holds with a non-empty tensor (vLLM-CPU empties repacked linear weights)."""
    want = set(names)
    out: Report = {}
    for name, t in named:
        if name in want and t.numel() > 0:
            out[name] = [str(t.dtype).removeprefix("torch."), list(t.shape), int(tp_rank),
                         int(tp_size), tensor_checksum(t)]
    return out


def shard_of(full: Any, shape: Sequence[int], tp_rank: int, tp_size: int) -> Any:
    """The part of ``full`` an engine shard of ``shape`` holds (tensor-parallel rank ``tp_rank``
    of ``tp_size``: split along the one dimension that is ``tp_size`` times smaller)."""
    if list(full.shape) == list(shape):
        return full
    dims = [d for d, (a, b) in enumerate(zip(full.shape, shape)) if a != b]
    if len(full.shape) != len(shape) or len(dims) != 1 or full.shape[dims[0]] != shape[dims[0]] * tp_size:
        raise WeightSyncError(f"checksum: the engine holds shape {list(shape)} (TP rank {tp_rank} "
                              f"of {tp_size}), the learner exports {list(full.shape)}")
    d, n = dims[0], shape[dims[0]]
    return full.narrow(d, tp_rank * n, n)


# ---------------------------------------------------------------------------- the two sides
# (which tensors exist, in export order, the learner says itself: ``LearnerGroup.export_names``)
def engine_reports(worker: Any, names: Sequence[str]) -> list[Report]:
    """Worker side: one :data:`Report` per engine process (vLLM: each of its workers, through
    the worker extension; HF: the engine's model)."""
    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        return list(llm.collective_rpc("ragen2_weight_checksums", args=(list(names),)))
    return [module_report(worker.engine.model.state_dict().items(), names)]


def learner_mismatches(rank: Any, reports: Sequence[Sequence[Report]]) -> list[str] | None:
    """Learner side (collective: every rank gathers the named tensors; rank 0 compares).

    ``reports[i]`` are rollout worker i's per-process reports; returns one line per tensor whose
    checksum differs (empty: every engine holds exactly the learner's weights)."""
    import torch

    names = sorted({n for per_worker in reports for rep in per_worker for n in rep})
    full = dict(rank.named_weights("cpu", None, names=names))
    if rank.rank != 0:
        return None
    bad = []
    for i, per_worker in enumerate(reports):
        for p, rep in enumerate(per_worker):
            for name, (dtype, shape, tp_rank, tp_size, engine_sum) in sorted(rep.items()):
                if name not in full:
                    bad.append(f"worker {i} process {p}: {name} is not a learner weight")
                    continue
                mine = shard_of(full[name].to(getattr(torch, dtype)), shape, tp_rank, tp_size)
                if tensor_checksum(mine) != engine_sum:
                    bad.append(f"worker {i} process {p}: {name} ({dtype} {shape}, TP rank "
                               f"{tp_rank}/{tp_size})")
    return bad


def verify_checksums(learners: Any, workers: Sequence[Any], names: Sequence[str],
                     version: int) -> dict[str, float]:
    """Compare every engine's checksums with the learner's; :class:`WeightSyncError` on any
    difference. ``sync/checksum_tensors``: the tensors compared per engine process (min)."""
    import ray

    reports = ray.get([w.run.remote(engine_reports, list(names)) for w in workers])
    bad = learners.run(learner_mismatches, reports)[0]
    if bad:
        raise WeightSyncError(
            f"weight sync checksum failed after syncing policy version {version}: "
            f"{len(bad)} tensor(s) differ between the learner's export and the engine, e.g. "
            f"{'; '.join(bad[:3])}. The engine is stale (the sync did not apply every weight) "
            "whatever the probe's logprob gap says.")
    counts = [len(rep) for per_worker in reports for rep in per_worker]
    return {"sync/checksum_tensors": float(min(counts) if counts else 0)}
