"""Model construction and loading: a tiny offline Qwen2 for tests/CI, and HF loading helpers.

Importing this package does not import torch or transformers; they load on first use.
"""

from ragen2.models.loading import DTYPES, load_causal_lm, load_tokenizer, resolve_dtype
from ragen2.models.tiny import (
    CHAT_TEMPLATE,
    FORMAT_VERSION,
    REASONING_TOKENS,
    SPECIAL_TOKENS,
    TinyModelSpec,
    build_tiny_model,
    build_tokenizer,
    create_tiny_model,
    default_cache_root,
    default_corpus,
    ensure_tiny_model,
    tiny_model_cache_key,
)

__all__ = [
    "CHAT_TEMPLATE",
    "DTYPES",
    "FORMAT_VERSION",
    "REASONING_TOKENS",
    "SPECIAL_TOKENS",
    "TinyModelSpec",
    "build_tiny_model",
    "build_tokenizer",
    "create_tiny_model",
    "default_cache_root",
    "default_corpus",
    "ensure_tiny_model",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_dtype",
    "tiny_model_cache_key",
]
