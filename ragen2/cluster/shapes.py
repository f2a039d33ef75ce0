"""The shape of a dense decoder, read without loading or downloading it (for the memory estimate).

:func:`model_shape` reads ``config.json`` of a local ``model.path`` or, for a hub name, from the
Hugging Face cache (never a download); else it falls back on :data:`KNOWN_SHAPES` (the presets'
models, by hub name or by the last part of a local path such as
``/shared/models/Qwen2.5-3B-Instruct``), and for the models ragen2 builds on ``model.tiny``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ragen2.config import Config


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a dense decoder (the names of HF's config.json)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = True
    head_dim: Optional[int] = None
    attention_bias: bool = False  # Qwen2's q/k/v biases
    name: str = ""

    @property
    def d(self) -> int:
        return self.head_dim or self.hidden_size // self.num_heads

    def params(self) -> int:
        """Parameters: embeddings (+ untied head), per layer attention + SwiGLU MLP + 2 norms."""
        h, kv = self.hidden_size, self.num_kv_heads * self.d
        q = self.num_heads * self.d
        attn = h * (q + 2 * kv) + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        layer = attn + 3 * h * self.intermediate_size + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + head + self.num_layers * layer + h

    def critic_params(self) -> int:
        """The value model: the backbone (no untied output head) plus a scalar head."""
        head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.params() - head + self.hidden_size + 1

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.d * dtype_bytes

    def activation_bytes_per_token_layer(self) -> int:
        """The CPU host estimate's ``a`` (:mod:`ragen2.cluster.host_memory`): bf16 bytes a block
        keeps for its backward, counted before the GPU measured them (the GPU estimate counts
        :meth:`saved_bytes_per_token_layer`, ~17% more for Qwen2-0.5B)."""
        h = self.hidden_size
        return 2 * (6 * h + 2 * self.num_kv_heads * self.d + 4 * self.intermediate_size)

    def saved_bytes_per_token_layer(self, compute_bytes: int = 2) -> int:
        """Bytes a Llama/Qwen block keeps per token for its backward, as transformers' modules
        save them under autograd (``b = compute_bytes``, ``q = heads x d``):

        * each of its two RMSNorms: the fp32 input it upcasts to (``4 H``), its output in the
          compute dtype that the projections after it save (``b H``) and the fp32 ``rstd`` (4);
        * attention: q after RoPE, k and v repeated to every head (``repeat_kv``, taken whenever
          a mask is passed), sdpa's output and o_proj's contiguous input, ``5 b q``; sdpa's fp32
          log-sum-exp (4 a head; no ``T^2`` term with sdpa or flash attention);
        * the SwiGLU: gate, silu(gate), up and their product, ``4 b I``.

        Qwen2-0.5B in bf16: 58,688 bytes; an H200 measured 57,800 (the slope of three update peaks:
        ``benchmarks/results/gpu/2026-12-04_memory.json``).
        """
        h, b, q = self.hidden_size, compute_bytes, self.num_heads * self.d
        norms = 2 * ((4 + b) * h + 4)
        attention = 5 * b * q + 4 * self.num_heads
        return norms + attention + 4 * b * self.intermediate_size

    def scorer_bytes_per_token(self, compute_bytes: int) -> int:
        """Peak bytes of the MI scorer per padded continuation token (no autograd, so nothing is
        kept but the cache): the keys and values the context's cache takes on for it (``2 L kv d
        b``), the widest moment of a block's forward (the SwiGLU's three ``I``-wide tensors beside
        the residual and the norm's output: ``b (3 I + 2 H)``) and the logits with their fp32
        upcast and log-softmax (``V (b + 8)``; the two moments do not overlap, so the sum is a
        little high). :func:`ragen2.cluster.memory.scorer_slice_bytes` adds up a slice."""
        b, h = compute_bytes, self.hidden_size
        return (self.kv_bytes_per_token(b) + b * (3 * self.intermediate_size + 2 * h)
                + self.vocab_size * (b + 8))

    def scorer_bytes_per_row(self, compute_bytes: int, context: int) -> int:
        """Per scored row: its copy of the context's cache, and that context's keys and values
        repeated to every head for the layer that attends (``repeat_kv``)."""
        q = self.num_heads * self.d
        return context * (self.kv_bytes_per_token(compute_bytes) + 2 * compute_bytes * q)


def _qwen(name, h, layers, heads, kv, inter, vocab=151_936, tied=True) -> ModelShape:
    return ModelShape(h, layers, heads, kv, inter, vocab, tied, attention_bias=True, name=name)


# config.json of the models the presets use (and their neighbours), for when it is not on disk
KNOWN_SHAPES: dict[str, ModelShape] = {s.name: s for s in (
    _qwen("Qwen/Qwen2.5-0.5B-Instruct", 896, 24, 14, 2, 4864),
    _qwen("Qwen/Qwen2.5-1.5B-Instruct", 1536, 28, 12, 2, 8960),
    _qwen("Qwen/Qwen2.5-3B-Instruct", 2048, 36, 16, 2, 11008),
    _qwen("Qwen/Qwen2.5-7B-Instruct", 3584, 28, 28, 4, 18944, vocab=152_064, tied=False),
    ModelShape(576, 30, 9, 3, 1536, 49_152, True, name="HuggingFaceTB/SmolLM2-135M-Instruct"),
)}
for _n in list(KNOWN_SHAPES):  # the base models share the instruct models' shapes
    KNOWN_SHAPES[_n.removesuffix("-Instruct")] = KNOWN_SHAPES[_n]


def shape_from_config_json(cfg_json: dict, name: str = "") -> ModelShape:
    text = cfg_json.get("text_config", cfg_json)  # multimodal wrappers keep the LM's config there
    return ModelShape(
        hidden_size=int(text["hidden_size"]), num_layers=int(text["num_hidden_layers"]),
        num_heads=int(text["num_attention_heads"]),
        num_kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
        intermediate_size=int(text["intermediate_size"]), vocab_size=int(text["vocab_size"]),
        tie_word_embeddings=bool(cfg_json.get("tie_word_embeddings", True)),
        head_dim=text.get("head_dim"),
        attention_bias=bool(text.get("attention_bias", text.get("model_type") == "qwen2")),
        name=name)


def model_shape(cfg: Config) -> Optional[ModelShape]:
    """The shape of ``cfg.model`` without loading or downloading it; None when unknown."""
    m = cfg.model
    if m.path:
        local = Path(os.path.expanduser(m.path)) / "config.json"
        found: Optional[str] = str(local) if local.is_file() else None
        if found is None and not os.path.isabs(m.path) and m.path.count("/") == 1:
            try:
                from huggingface_hub import try_to_load_from_cache

                hit = try_to_load_from_cache(m.path, "config.json")
                found = hit if isinstance(hit, str) else None
            except Exception:  # noqa: BLE001  (no hub library, a bad name: fall back)
                found = None
        if found:
            try:
                return shape_from_config_json(json.loads(Path(found).read_text()), m.path)
            except (OSError, ValueError, KeyError):
                pass
        known = KNOWN_SHAPES.get(m.path.rstrip("/"))
        if known is None:  # a local copy not on this machine, named as downloaded (hf download
            base = os.path.basename(m.path.rstrip("/"))  # Qwen/Qwen2.5-3B-Instruct --local-dir
            known = next((s for n, s in KNOWN_SHAPES.items() if n.split("/")[-1] == base), None)
        return known
    if m.name == "tiny":
        t = m.tiny
        return ModelShape(t.hidden_size, t.num_layers, t.num_heads, t.num_kv_heads,
                          t.intermediate_size, t.vocab_size, t.tie_word_embeddings,
                          attention_bias=True, name="tiny")
    if m.name == "smollm2":
        return KNOWN_SHAPES["HuggingFaceTB/SmolLM2-135M-Instruct"]
    return None
