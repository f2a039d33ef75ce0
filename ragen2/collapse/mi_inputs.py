"""The checks of the MI estimators' inputs: the (S samples, N prompts) score matrix, the
own-prompt index vector, the retrieval ks and the z-score's eps, and prompt keys as dense ids;
each raises ``ValueError`` with the offending entry named (:mod:`ragen2.collapse.mi`)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

def as_score_matrix(x, name: str) -> Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 2:
        raise ValueError(f"{name} must be a 2-D (S samples, N prompts) tensor, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor of log-likelihoods, got dtype {x.dtype}")
    if x.shape[0] < 1:
        raise ValueError(f"{name} needs at least one sample (row), got shape {tuple(x.shape)}")
    if x.shape[1] < 2:
        raise ValueError(
            f"{name} needs at least 2 prompts (columns) for mutual information, got {x.shape[1]}"
        )
    x = x.detach().to(torch.float64)
    if torch.isnan(x).any():
        raise ValueError(f"{name} contains NaN at (sample, prompt) {first_where(torch.isnan(x))}")
    if torch.isposinf(x).any():
        raise ValueError(
            f"{name} contains +inf at (sample, prompt) {first_where(torch.isposinf(x))}; "
            "allowed: finite values, or -inf for a prompt under which a sample is impossible"
        )
    return x


def first_where(mask: Tensor) -> list[tuple[int, ...]]:
    idx = mask.nonzero()[:5]
    return [tuple(int(v) for v in row) for row in idx]


def as_index_vector(x, name: str, length: int, upper: int, upper_name: str) -> Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of prompt indices, got shape {tuple(x.shape)}")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer prompt indices (torch.long), got dtype {x.dtype}")
    if x.shape[0] != length:
        raise ValueError(f"{name} has {x.shape[0]} entries but there are {length} samples (rows)")
    x = x.long()
    bad = (x < 0) | (x >= upper)
    if bad.any():
        s = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name}[{s}] = {int(x[s])} is out of range; allowed: 0 <= {name} < {upper_name} = {upper}"
        )
    return x


def check_ks(ks) -> tuple[int, ...]:
    if isinstance(ks, int):
        ks = (ks,)
    ks = tuple(ks)
    if not ks:
        raise ValueError("ks must name at least one k for retrieval_acc@k, e.g. ks=(1,)")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"every k in ks must be an integer >= 1, got {k!r}")
    return ks


def check_eps(eps: float) -> float:
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite float >= 0, got {eps!r}")
    return float(eps)


def dense_ids(values: Sequence[Hashable], name: str, hint: str = "") -> Tensor:
    """(len(values),) long: equal values -> equal id, ids in order of first appearance.

    ``name`` and ``hint`` word the error for an unhashable value (``name[i] = v is not hashable``).
    """
    seen: dict = {}
    out = []
    for i, v in enumerate(values):
        try:
            out.append(seen.setdefault(v, len(seen)))
        except TypeError:
            raise ValueError(f"{name}[{i}] = {v!r} is not hashable{hint}") from None
    return torch.tensor(out, dtype=torch.long)


def key_ids(prompt_keys: Sequence[Hashable], n: int | None) -> Tensor:
    """:func:`dense_ids` of ``prompt_keys``, checked to name ``n`` prompts when ``n`` is given."""
    keys = list(prompt_keys)
    if n is not None and len(keys) != n:
        raise ValueError(f"prompt_keys has {len(keys)} entries but logp has {n} prompts (columns)")
    return dense_ids(keys, "prompt_keys", "; use e.g. the prompt text or env seed")


def check_matched_finite(scores: Tensor, own: Tensor, name: str, where: str) -> None:
    matched = scores.gather(1, own[:, None]).squeeze(1)
    bad = ~torch.isfinite(matched)
    if bad.any():
        rows = [int(s) for s in bad.nonzero()[:5, 0]]
        raise ValueError(
            f"{name} is -inf at {where} for sample(s) {rows}: a reasoning sample must have a finite "
            "log-likelihood under its own prompt (it was generated from it); -inf is only allowed "
            "for other prompts"
        )
