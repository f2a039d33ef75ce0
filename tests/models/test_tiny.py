"""Tests for ragen2.models: the tiny offline Qwen2 + BPE tokenizer, its cache, and HF loading."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ragen2.models import (
    REASONING_TOKENS,
    TinyModelSpec,
    build_tiny_model,
    build_tokenizer,
    create_tiny_model,
    default_cache_root,
    ensure_tiny_model,
    load_causal_lm,
    load_tokenizer,
    tiny_model_cache_key,
)
from ragen2.models import tiny as tiny_mod

CORPUS = [
    "SFFF\nFHFH\nFFFH\nHFFG",
    "PFFF\nFHFH\nFFFH\nHFFG",
    "SFFF\nFPFH\nFFFH\nHFFG",
    "You are on a frozen lake. Reach the goal G and avoid the holes H.",
    "Valid actions: Left, Down, Right, Up.",
    "<think>The goal is below me, so I go down.</think><answer>Down</answer>",
    "<think>A hole is on the left.</think><answer>Right</answer>",
    "Reward: 1.0. Success! The episode is over.",
    "The quick brown fox jumps over the lazy dog.",
] * 3

# Small but non-default spec: exercises GQA (4 heads / 2 kv heads) and keeps builds fast.
SPEC = TinyModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128, vocab_size=400)

HOSTILE = [
    "",
    " ",
    "\t\n  ",
    "\n\n\n",
    "  leading and trailing  ",
    "héllo wörld",
    "emoji 🎉🧊👩‍👩‍👧 done",
    "中文混合English文本。",
    "日本語とにほんご",
    "\u200b zero width \u00a0 nbsp \r\n crlf",
    "<think>",
    "</answer>",
    "<think>I am</think><answer>Down</answer>",
    " <think> spaced </think> ",
    "<thinking> is not a tag </think",
    "<|im_end|> not special when encoded raw? <|im_start|>",
    "SFFF\nFHFH\nFFFH\nHFFG",
    "\\x00 \x00 \x7f \ufffd",
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(SPEC, CORPUS, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, SPEC.vocab_size, model_max_length=SPEC.max_position_embeddings)


@pytest.fixture(scope="module")
def loaded_tok(model_dir):
    return load_tokenizer(model_dir)


@pytest.fixture(scope="module")
def loaded_model(model_dir):
    return load_causal_lm(model_dir)


# --------------------------------------------------------------------------- tokenizer


@pytest.mark.parametrize("text", HOSTILE)
def test_round_trip_hostile_strings(tok, loaded_tok, text):
    for t in (tok, loaded_tok):
        ids = t.encode(text, add_special_tokens=False)
        assert t.decode(ids) == text
        assert all(0 <= i < len(t) for i in ids)


def test_round_trip_all_bytes(tok):
    text = bytes(range(256)).decode("latin-1") + "".join(chr(c) for c in range(0x2000, 0x2100))
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_reasoning_tags_are_single_non_special_ids(tok, loaded_tok):
    for t in (tok, loaded_tok):
        tag_ids = {}
        for tag in REASONING_TOKENS:
            ids = t.encode(tag, add_special_tokens=False)
            assert len(ids) == 1, (tag, ids)
            tag_ids[tag] = ids[0]
        assert len(set(tag_ids.values())) == len(REASONING_TOKENS)
        glued = "<think>I am</think><answer>Down</answer>"
        ids = t.encode(glued, add_special_tokens=False)
        assert [i for i in ids if i in tag_ids.values()] == [tag_ids[x] for x in REASONING_TOKENS]
        assert ids[0] == tag_ids["<think>"] and ids[-1] == tag_ids["</answer>"]
        # Not special: skip_special_tokens keeps them, but drops the ChatML specials.
        text = "<|im_start|>assistant\n" + glued + "<|im_end|>"
        dec = t.decode(t.encode(text, add_special_tokens=False), skip_special_tokens=True)
        assert dec == "assistant\n" + glued


def test_special_tokens_and_padding(tok, loaded_tok):
    for t in (tok, loaded_tok):
        assert t.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        assert (t.pad_token, t.pad_token_id) == ("<|endoftext|>", 0)
        assert (t.eos_token, t.eos_token_id) == ("<|im_end|>", 2)
        assert t.bos_token is None
        assert t.padding_side == "left"
        assert t.model_max_length == SPEC.max_position_embeddings
        assert len(t) <= SPEC.vocab_size
        assert t.encode("hi", add_special_tokens=True) == t.encode("hi", add_special_tokens=False)
        batch = t(["a", "a longer text"], padding=True)
        assert batch["attention_mask"][0][0] == 0 and batch["input_ids"][0][0] == 0  # left-padded
    assert tok.get_vocab() == loaded_tok.get_vocab()


def test_chat_template_exact(tok, loaded_tok):
    messages = [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "SFFF\nFHFH\nWhat next?"},
    ]
    expected = (
        "<|im_start|>system\nYou play FrozenLake.<|im_end|>\n"
        "<|im_start|>user\nSFFF\nFHFH\nWhat next?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    for t in (tok, loaded_tok):
        assert t.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
        assert t.apply_chat_template(messages, tokenize=False) == expected[: -len("<|im_start|>assistant\n")]
        ids = t.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert list(ids) == t.encode(expected, add_special_tokens=False)
        assert ids.count(1) == 3 and ids.count(2) == 2


def test_build_tokenizer_rejects_bad_input():
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(CORPUS, 100)
    with pytest.raises(TypeError, match="corpus"):
        build_tokenizer("a single string", 400)


# --------------------------------------------------------------------------- model build


def _tensors(path: Path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_build_is_deterministic(model_dir, tmp_path, tok):
    import torch

    again = build_tiny_model(SPEC, iter(CORPUS), tmp_path / "again")  # a generator corpus works too
    a, b = _tensors(model_dir), _tensors(again)
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        assert a[k].dtype == torch.float32
        assert torch.equal(a[k], b[k]), k
    assert load_tokenizer(again).get_vocab() == tok.get_vocab()
    assert json.loads((again / "config.json").read_text()) == json.loads((model_dir / "config.json").read_text())

    # ...and the seed really matters (so the check above can fail).
    other = build_tiny_model(TinyModelSpec(**{**SPEC.__dict__, "seed": 1}), CORPUS, tmp_path / "seed1")
    c = _tensors(other)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_build_does_not_disturb_global_rng(tmp_path, tok):
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    create_tiny_model(SPEC, tok)
    assert torch.equal(torch.rand(3), expected)


def test_saved_config_and_generation_config(model_dir, loaded_model):
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == "qwen2"
    assert cfg["vocab_size"] == len(load_tokenizer(model_dir))
    assert (cfg["pad_token_id"], cfg["eos_token_id"]) == (0, 2)
    assert cfg["tie_word_embeddings"] is True
    gen = loaded_model.generation_config
    assert (gen.eos_token_id, gen.pad_token_id) == (2, 0)
    assert loaded_model.config.num_key_value_heads == SPEC.num_kv_heads


def test_loaded_model_matches_original(tok, loaded_model):
    import torch

    original = create_tiny_model(SPEC, tok)
    assert sum(p.numel() for p in loaded_model.parameters()) == sum(p.numel() for p in original.parameters())
    assert next(loaded_model.parameters()).dtype == torch.float32
    assert not loaded_model.training
    ids = torch.tensor([tok.encode("<think>I go</think><answer>Down</answer>\nSFFF", add_special_tokens=False)])
    with torch.no_grad():
        a = original(input_ids=ids).logits
        b = loaded_model(input_ids=ids).logits
    assert a.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(a).all()
    assert torch.equal(a, b)
    # Tied embeddings survive the save/load round trip.
    assert loaded_model.lm_head.weight.data_ptr() == loaded_model.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("attn", [None, "sdpa", "eager"])
def test_left_padded_batch_matches_unpadded(model_dir, loaded_tok, loaded_model, attn):
    import torch

    model = loaded_model if attn is None else load_causal_lm(model_dir, attn_implementation=attn)
    texts = [
        "<think>short</think>",
        "SFFF\nFHFH\nFFFH\nHFFG <think>a much longer sequence with more tokens</think><answer>Up</answer>",
        "Valid actions: Left, Down.",
    ]
    batch = loaded_tok(texts, padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert (mask == 0).any(dim=1).sum() >= 2  # the batch really is padded, on the left
    assert (mask[:, -1] == 1).all()
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        batch_lp = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits.log_softmax(-1)
        for i, text in enumerate(texts):
            single = torch.tensor([loaded_tok.encode(text, add_special_tokens=False)])
            n = single.shape[1]
            assert n >= 3
            single_lp = model(input_ids=single).logits.log_softmax(-1)[0]
            tgt = single[0, 1:, None]
            lp_single = single_lp[:-1].gather(-1, tgt).squeeze(-1)
            lp_batch = batch_lp[i, -n:][:-1].gather(-1, tgt).squeeze(-1)
            assert torch.isfinite(lp_batch).all()
            assert (lp_single - lp_batch).abs().max().item() < 1e-5


# --------------------------------------------------------------------------- spec validation


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_layers": -1}, "num_layers"),
        ({"num_heads": 2.0}, "num_heads"),
        ({"intermediate_size": True}, "intermediate_size"),
        ({"hidden_size": 130}, "hidden_size"),  # not divisible by 4 heads
        ({"num_kv_heads": 3}, "num_heads"),  # 4 heads not divisible by 3 kv heads
        ({"vocab_size": 200}, "vocab_size"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"rope_theta": -1.0}, "rope_theta"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_spec_raises_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"TinyModelSpec\.{field}=") as info:
        TinyModelSpec(**kwargs)
    assert "allowed" in str(info.value)
    assert repr(next(iter(kwargs.values()))) in str(info.value) or str(next(iter(kwargs.values()))) in str(info.value)


def test_default_spec_values():
    s = TinyModelSpec()
    assert (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads, s.intermediate_size) == (128, 4, 4, 2, 512)
    assert (s.vocab_size, s.max_position_embeddings, s.rope_theta, s.tie_word_embeddings, s.seed) == (
        1024,
        2048,
        10000.0,
        True,
        0,
    )


# --------------------------------------------------------------------------- cache


def _snapshot(path: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in path.iterdir()}


def test_ensure_tiny_model_caches(tmp_path, monkeypatch):
    calls = []

    def corpus_fn():
        calls.append(1)
        return list(CORPUS)

    first = ensure_tiny_model(SPEC, corpus_fn, tmp_path)
    key = tiny_model_cache_key(SPEC, CORPUS)
    assert first == tmp_path / f"tiny-{key[:16]}"
    assert (first / "model.safetensors").is_file() and (first / "tokenizer.json").is_file()
    assert json.loads((first / tiny_mod.MARKER_FILE).read_text())["key"] == key
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # temp build dir was renamed away
    before = _snapshot(first)

    def boom(*a, **k):
        raise AssertionError("cache hit must not rebuild")

    monkeypatch.setattr(tiny_mod, "build_tiny_model", boom)
    second = ensure_tiny_model(SPEC, corpus_fn, tmp_path)
    assert second == first
    assert _snapshot(second) == before
    assert len(calls) == 2

    # A different corpus or spec is a different cache entry.
    assert tiny_model_cache_key(SPEC, CORPUS + ["x"]) != key
    assert tiny_model_cache_key(TinyModelSpec(**{**SPEC.__dict__, "seed": 5}), CORPUS) != key


def test_ensure_tiny_model_rebuilds_incomplete_dir(tmp_path):
    key = tiny_model_cache_key(SPEC, CORPUS)
    broken = tmp_path / f"tiny-{key[:16]}"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # half-written, no marker
    stale = tmp_path / f".tiny-{key[:16]}.tmp-dead"
    stale.mkdir()
    out = ensure_tiny_model(SPEC, lambda: CORPUS, tmp_path)
    assert out == broken and (out / tiny_mod.MARKER_FILE).is_file()
    assert not stale.exists()
    assert load_tokenizer(out).eos_token == "<|im_end|>"


def test_ensure_tiny_model_concurrent_callers_build_once(tmp_path, monkeypatch):
    real_build = tiny_mod.build_tiny_model
    builds = []

    def counting_build(*args, **kwargs):
        builds.append(1)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(tiny_mod, "build_tiny_model", counting_build)
    results, errors = [], []
    barrier = threading.Barrier(4)

    def worker():
        try:
            barrier.wait()
            results.append(ensure_tiny_model(SPEC, lambda: CORPUS, tmp_path))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(results) == 4 and len(set(results)) == 1
    assert len(builds) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [results[0].name]


def test_cache_hit_imports_nothing_heavy(tmp_path):
    ensure_tiny_model(SPEC, lambda: CORPUS, tmp_path)
    corpus_file = tmp_path / "corpus.json"
    corpus_file.write_text(json.dumps(CORPUS))
    code = (
        "import json, sys\n"
        "import ragen2  # whatever the package root imports is not ours to police\n"
        "before = set(sys.modules)\n"
        "from ragen2.models import TinyModelSpec, ensure_tiny_model\n"
        f"spec = TinyModelSpec(**json.loads({json.dumps(json.dumps(SPEC.__dict__))}))\n"
        f"corpus = json.loads(open({str(corpus_file)!r}).read())\n"
        f"print(ensure_tiny_model(spec, lambda: corpus, {str(tmp_path)!r}))\n"
        "heavy = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in HEAVY)\n"
        "assert not heavy, heavy\n"
    ).replace("HEAVY", repr(("torch", "transformers", "tokenizers")))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ensure_tiny_model(SPEC, lambda: CORPUS, tmp_path))


def test_default_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("RAGEN2_CACHE", str(tmp_path / "c"))
    assert default_cache_root() == tmp_path / "c"
    monkeypatch.delenv("RAGEN2_CACHE")
    assert default_cache_root() == Path.home() / ".cache" / "ragen2"


# --------------------------------------------------------------------------- loading errors


def test_missing_local_path_raises_clear_error(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    for fn in (load_causal_lm, load_tokenizer):
        with pytest.raises(FileNotFoundError, match="neither a local directory nor reachable") as info:
            fn(missing)
        msg = str(info.value)
        assert str(missing) in msg and "\n" not in msg and "original error" in msg


def test_unreachable_hub_name_wraps_error_on_one_line(monkeypatch):
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'\nCheck your internet connection.")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", offline)
    for fn in (load_tokenizer, load_causal_lm):
        with pytest.raises(FileNotFoundError) as info:
            fn("some-org/some-model")
        msg = str(info.value)
        assert "neither a local directory nor reachable on the Hugging Face Hub" in msg
        assert "OSError: We couldn't connect" in msg and "Check your internet connection." in msg
        assert "\n" not in msg
        assert isinstance(info.value.__cause__, OSError)


def test_broken_local_dir_keeps_original_error(tmp_path):
    with pytest.raises(Exception) as info:
        load_causal_lm(tmp_path)  # exists, but holds no model
    assert "neither a local directory" not in str(info.value)


def test_bad_dtype_names_allowed(model_dir):
    with pytest.raises(ValueError, match="float32, bfloat16, float16"):
        load_causal_lm(model_dir, dtype="float64")


def test_load_in_bfloat16(model_dir):
    import torch

    m = load_causal_lm(model_dir, dtype="bfloat16")
    assert next(m.parameters()).dtype == torch.bfloat16


def test_tokenizer_pad_falls_back_to_eos(model_dir, monkeypatch):
    import transformers

    real = transformers.AutoTokenizer.from_pretrained

    def without_pad(*args, **kwargs):
        t = real(*args, **kwargs)
        t.pad_token = None
        t.padding_side = "right"
        return t

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", without_pad)
    t = load_tokenizer(model_dir)
    assert t.pad_token == t.eos_token == "<|im_end|>"
    assert t.pad_token_id == 2
    assert t.padding_side == "left"


def test_package_import_is_light():
    code = (
        "import sys, ragen2\n"
        "before = set(sys.modules)\n"
        "import ragen2.models\n"
        "heavy = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('torch', 'transformers'))\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
