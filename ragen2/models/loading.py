"""Load tokenizers and causal LMs from a local Hugging Face directory or a hub name.

``transformers`` is imported lazily. A name that is not a local directory and cannot be loaded
(no network, no such repo, not even a valid repo id) fails with a ``FileNotFoundError`` that says
so and carries the original error on one line.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")

# A hub repo id: "name" or "namespace/name" (letters, digits, '-', '_', '.').
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")


def resolve_dtype(dtype: "str | torch.dtype") -> "torch.dtype":
    """Map ``"float32" | "bfloat16" | "float16"`` (or the matching ``torch.dtype``) to a ``torch.dtype``."""
    import torch

    table = {name: getattr(torch, name) for name in DTYPES}
    if isinstance(dtype, torch.dtype):
        if dtype in table.values():
            return dtype
    elif isinstance(dtype, str) and dtype in table:
        return table[dtype]
    raise ValueError(f"dtype={dtype!r} is not supported; allowed: {', '.join(DTYPES)}")


def load_tokenizer(path_or_name: str | os.PathLike[str], *, trust_remote_code: bool = False) -> "PreTrainedTokenizerBase":
    """``AutoTokenizer.from_pretrained`` set up for generation: a pad token (falls back to eos),
    ``padding_side="left"``."""
    from transformers import AutoTokenizer

    source, is_local = _source(path_or_name, "tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as err:
        if is_local:
            raise
        raise _not_found("tokenizer", path_or_name, err) from err

    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"tokenizer {str(path_or_name)!r} has neither a pad token nor an eos token to use as pad"
            )
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(
    path_or_name: str | os.PathLike[str],
    *,
    dtype: "str | torch.dtype" = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> "PreTrainedModel":
    """``AutoModelForCausalLM.from_pretrained`` in ``dtype``, in eval mode."""
    torch_dtype = resolve_dtype(dtype)  # validate before any loading
    from transformers import AutoModelForCausalLM

    source, is_local = _source(path_or_name, "model")
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except Exception as err:
        if is_local:
            raise
        raise _not_found("model", path_or_name, err) from err
    return model.eval()


def empty_causal_lm(
    path_or_name: str | os.PathLike[str],
    *,
    dtype: "str | torch.dtype" = "float32",
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
) -> "PreTrainedModel":
    """:func:`load_causal_lm`'s module on the meta device (``config.json`` only, no weights read),
    in eval mode; filled later from another process's copy
    (:func:`ragen2.learner.fsdp.materialise_sharded`)."""
    torch_dtype = resolve_dtype(dtype)
    from transformers import AutoConfig, AutoModelForCausalLM

    source, is_local = _source(path_or_name, "model")
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except Exception as err:
        if is_local:
            raise
        raise _not_found("model", path_or_name, err) from err
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    with meta_init():
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    return model.eval()


@contextmanager
def meta_init() -> Iterator[None]:
    """Build modules inside the block on the meta device (shapes only), leaving the CPU RNG as it
    was (initialisers do not draw on meta tensors, but a model's constructor may seed or draw)."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        yield


def _source(path_or_name: str | os.PathLike[str], what: str) -> tuple[str, bool]:
    """(what to pass to from_pretrained, whether it is an existing local directory)."""
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"path_or_name must be a str or path, got {type(path_or_name).__name__}")
    raw = os.fspath(path_or_name)
    expanded = os.path.expanduser(raw)
    if os.path.isdir(expanded):
        return expanded, True
    if not _REPO_ID.match(raw) or raw.endswith((".", "-")) or ".." in raw:
        # Looks like a filesystem path (absolute, ./x, ~/x, a/b/c, ...): it cannot be a hub repo id,
        # so fail now instead of going to the network.
        raise _not_found(
            what,
            path_or_name,
            FileNotFoundError(f"no such local directory: {expanded!r}, and not a valid hub repo id"),
        )
    return raw, False


def _not_found(what: str, path_or_name: str | os.PathLike[str], err: BaseException) -> FileNotFoundError:
    detail = " ".join(f"{type(err).__name__}: {err}".split())
    if len(detail) > 500:
        detail = detail[:497] + "..."
    return FileNotFoundError(
        f"cannot load {what} {os.fspath(path_or_name)!r}: it is neither a local directory nor reachable "
        f"on the Hugging Face Hub (original error: {detail})"
    )
