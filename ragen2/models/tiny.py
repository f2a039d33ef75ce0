"""A tiny, randomly initialised Qwen2-style causal LM with its own byte-level BPE tokenizer.

Everything the CPU test-suite and CI need to exercise the full RL loop without downloading a model:

* :func:`build_tokenizer` trains a deterministic byte-level BPE on a small corpus (any string
  round-trips byte for byte), with ChatML special tokens and the reasoning tags as single
  non-special ids;
* :func:`build_tiny_model` writes a float32 ``Qwen2ForCausalLM`` + tokenizer with
  ``save_pretrained``, so the directory loads through the ordinary Hugging Face code path
  (see :mod:`ragen2.models.loading`);
* :func:`ensure_tiny_model` caches that directory under a content hash, safely across processes.

``torch`` / ``transformers`` are imported lazily: the cache hit path of :func:`ensure_tiny_model`
touches neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ragen2.config import TinySpecConfig
from ragen2.models.cache import ensure_built

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen2ForCausalLM

# Bump whenever the on-disk output of build_tiny_model changes for the same spec + corpus.
FORMAT_VERSION = 1

PAD_TOKEN = "<|endoftext|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
EOS_TOKEN = IM_END_TOKEN
# Order matters: these get ids 0, 1, 2.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START_TOKEN, IM_END_TOKEN)
# Added (not special) tokens: one id each, kept by decode(skip_special_tokens=True).
REASONING_TOKENS: tuple[str, ...] = ("<think>", "</think>", "<answer>", "</answer>")

BYTE_ALPHABET_SIZE = 256
MIN_VOCAB_SIZE = BYTE_ALPHABET_SIZE + len(SPECIAL_TOKENS) + len(REASONING_TOKENS)

# Qwen2-style ChatML, without Qwen's implicit default system prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# Written last into a build directory; its presence (with the right key) marks a complete build.
MARKER_FILE = "ragen2_tiny.json"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass
class TinyModelSpec(TinySpecConfig):
    """Architecture of the tiny Qwen2 model. ``vocab_size`` is an upper bound on ``len(tokenizer)``.

    The architecture's fields are the config schema's (:class:`ragen2.config.TinySpecConfig`,
    ``model.tiny``); the spec adds the atomic words and owns the rules every field must meet."""

    #: words kept as single tokens wherever they stand as a word (e.g. the env's action words), so
    #: " Down" in reasoning and "Down" in an answer share one id: a tiny model learns to copy
    #: identical tokens far faster than to map one token onto another.
    atomic_words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.atomic_words = tuple(self.atomic_words)
        for w in self.atomic_words:
            if not isinstance(w, str) or not w.strip() or w != w.strip():
                raise ValueError(f"TinyModelSpec.atomic_words has {w!r}; allowed: non-empty words "
                                 "without surrounding whitespace")
        for name in (
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TinyModelSpec.{name}={value!r} is invalid; allowed: a positive int")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"TinyModelSpec.seed={self.seed!r} is invalid; allowed: an int >= 0")
        if (
            isinstance(self.rope_theta, bool)
            or not isinstance(self.rope_theta, (int, float))
            or not self.rope_theta > 0
            or self.rope_theta == float("inf")
        ):
            raise ValueError(
                f"TinyModelSpec.rope_theta={self.rope_theta!r} is invalid; allowed: a finite number > 0"
            )
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(
                f"TinyModelSpec.tie_word_embeddings={self.tie_word_embeddings!r} is invalid; "
                "allowed: True or False"
            )
        if self.vocab_size < MIN_VOCAB_SIZE + len(self.atomic_words):
            raise ValueError(
                f"TinyModelSpec.vocab_size={self.vocab_size} is invalid; allowed: >= {MIN_VOCAB_SIZE} "
                f"({BYTE_ALPHABET_SIZE} byte symbols + {len(SPECIAL_TOKENS)} special + "
                f"{len(REASONING_TOKENS)} reasoning tokens)"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"TinyModelSpec.hidden_size={self.hidden_size} is invalid; allowed: a multiple of "
                f"num_heads={self.num_heads}"
            )
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"TinyModelSpec.hidden_size={self.hidden_size} is invalid; allowed: hidden_size / "
                f"num_heads (head dim, here {self.hidden_size // self.num_heads}) must be even for RoPE"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"TinyModelSpec.num_heads={self.num_heads} is invalid; allowed: a multiple of "
                f"num_kv_heads={self.num_kv_heads}"
            )
        self.rope_theta = float(self.rope_theta)

    @classmethod
    def from_config(cls, tiny: TinySpecConfig, atomic_words: tuple[str, ...] = ()) -> "TinyModelSpec":
        """The spec of the configured architecture (``model.tiny``), with the env's action words."""
        return cls(**{f.name: getattr(tiny, f.name) for f in dataclasses.fields(TinySpecConfig)},
                   atomic_words=atomic_words)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def default_corpus() -> list[str]:
    """A small deterministic corpus (FrozenLake-like grids, agent turns, sentences) for the tokenizer."""
    grids = [
        "SFFF\nFHFH\nFFFH\nHFFG",
        "PFFF\nFHFH\nFFFH\nHFFG",
        "SFFF\nFHPH\nFFFH\nHFFG",
        "S..#\n.#.#\n...#\n#..G",
        "_ _ _ _\n_ # _ #\n_ _ _ #\n# _ _ G",
    ]
    sentences = [
        "You are a helpful agent playing FrozenLake. Reach the goal G without falling into a hole H.",
        "The player is at P. Valid actions are Left, Down, Right, Up.",
        "<think>The goal is down and to the right, so I move Down first.</think><answer>Down</answer>",
        "<think>There is a hole to my left. I should go Right.</think><answer>Right</answer>",
        "<think>I am next to the goal.</think><answer>Right</answer>",
        "Reward: 1.0. Episode finished. Success!",
        "Reward: 0.0. You fell into a hole. The episode is over.",
        "Invalid action. Please answer with one of: Left, Down, Right, Up.",
        "Sokoban: push every box onto a target. # wall, _ floor, O target, X box, P player.",
        "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { }",
    ]
    return grids + sentences + [f"Turn {i}: state\n{g}\nAction:" for i, g in enumerate(grids)]


def build_tokenizer(
    corpus: Iterable[str], vocab_size: int, *, model_max_length: int = 2048,
    atomic_words: Sequence[str] = (),
) -> "PreTrainedTokenizerFast":
    """Train a deterministic byte-level BPE on ``corpus``; ``len(tokenizer) <= vocab_size``.

    Ids 0-2 are the special tokens (pad ``<|endoftext|>``, ``<|im_start|>``, eos ``<|im_end|>``),
    the 256 byte symbols follow, then BPE merges, then the non-special reasoning tags.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size={vocab_size!r} is invalid; allowed: an int >= {MIN_VOCAB_SIZE}")
    texts = _as_text_list(corpus)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(REASONING_TOKENS) - len(atomic_words),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False, lstrip=False, rstrip=False) for t in REASONING_TOKENS]
        + [AddedToken(w, special=False, normalized=False, single_word=True) for w in atomic_words]
    )

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=None,
        unk_token=None,
        model_max_length=model_max_length,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def create_tiny_model(spec: TinyModelSpec, tokenizer: "PreTrainedTokenizerBase") -> "Qwen2ForCausalLM":
    """The random-initialised float32 ``Qwen2ForCausalLM`` for ``spec`` sized to ``tokenizer`` (in memory).

    Deterministic: weights come from ``torch.manual_seed(spec.seed)`` inside a forked RNG, so the
    caller's global RNG state is left untouched. ``eos``/``pad`` ids go into the model config and
    its ``generation_config``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if not isinstance(spec, TinyModelSpec):
        raise TypeError(f"spec must be a TinyModelSpec, got {type(spec).__name__}")
    pad_id = tokenizer.pad_token_id
    eos_id = tokenizer.eos_token_id
    if pad_id is None or eos_id is None:
        raise ValueError("tokenizer must define pad and eos tokens (use build_tokenizer)")
    vocab_size = len(tokenizer)
    if vocab_size > spec.vocab_size:
        raise ValueError(
            f"len(tokenizer)={vocab_size} exceeds TinyModelSpec.vocab_size={spec.vocab_size}"
        )

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=spec.tie_word_embeddings,
        use_sliding_window=False,
        attention_dropout=0.0,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        dtype="float32",
    )
    # sdpa matches eager (and itself unpadded) to ~5e-7 on left-padded batches with explicit
    # position_ids, and is faster; the saved config does not pin it, loaders may choose.
    config._attn_implementation = "sdpa"

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.float32).eval()
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    return model


def build_tiny_model(spec: TinyModelSpec, corpus: Iterable[str], out_dir: str | os.PathLike[str]) -> Path:
    """Build the tokenizer and :func:`create_tiny_model`, and ``save_pretrained`` both to ``out_dir``.

    Deterministic for a given ``spec`` + ``corpus``. Returns ``Path(out_dir)``.
    """
    if not isinstance(spec, TinyModelSpec):
        raise TypeError(f"spec must be a TinyModelSpec, got {type(spec).__name__}")
    tokenizer = build_tokenizer(corpus, spec.vocab_size, model_max_length=spec.max_position_embeddings,
                                atomic_words=spec.atomic_words)
    model = create_tiny_model(spec, tokenizer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def default_cache_root() -> Path:
    """``$RAGEN2_CACHE`` if set (and non-empty), else ``~/.cache/ragen2``."""
    env = os.environ.get("RAGEN2_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "ragen2"


def tiny_model_cache_key(spec: TinyModelSpec, corpus: Iterable[str]) -> str:
    """sha256 hex of (spec json, corpus text, FORMAT_VERSION)."""
    payload = json.dumps(
        {"format_version": FORMAT_VERSION, "spec": json.loads(spec.to_json()), "corpus": _as_text_list(corpus)},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def ensure_tiny_model(
    spec: TinyModelSpec,
    corpus_fn: Callable[[], Iterable[str]] = default_corpus,
    cache_root: str | os.PathLike[str] | None = None,
) -> Path:
    """Return ``cache_root/tiny-<key[:16]>``, building it once if needed (process- and thread-safe).

    A complete directory is returned without importing torch/transformers. Otherwise, under an
    ``fcntl.flock`` on ``cache_root/tiny-<key[:16]>.lock``, the model is built into a temporary
    directory inside ``cache_root`` and ``os.rename``-d into place (:mod:`ragen2.models.cache`).
    """
    if not isinstance(spec, TinyModelSpec):
        raise TypeError(f"spec must be a TinyModelSpec, got {type(spec).__name__}")
    corpus = _as_text_list(corpus_fn())
    key = tiny_model_cache_key(spec, corpus)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    marker = {"format_version": FORMAT_VERSION, "spec": json.loads(spec.to_json())}
    return ensure_built(root.expanduser(), f"tiny-{key[:16]}", key,
                        lambda tmp: build_tiny_model(spec, corpus, tmp),
                        marker_file=MARKER_FILE, required=_REQUIRED_FILES, marker=marker)


def _as_text_list(corpus: Iterable[str]) -> list[str]:
    if isinstance(corpus, (str, bytes)):
        raise TypeError("corpus must be an iterable of str (documents), not a single str/bytes")
    texts = list(corpus)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"corpus[{i}] is {type(t).__name__}; allowed: str")
    return texts
