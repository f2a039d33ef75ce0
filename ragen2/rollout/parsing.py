"""Parsing ``<think>...</think><answer>...</answer>`` responses.

The parsers run in time linear in the response length, whatever the model wrote: each block is
found with ``str.find`` (a single regex with two lazy groups accepts the same responses but
backtracks quadratically on output like ``<think>`` + ``</think><answer></answer>x`` x 8000).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_SPACE = re.compile(r"\s*")  # nothing follows it, so it never backtracks


@dataclass(frozen=True)
class ParsedResponse:
    think: str | None
    answer: str | None

    @property
    def format_ok(self) -> bool:
        return self.answer is not None


def _block(text: str, pos: int, tag: str) -> tuple[str, int] | None:
    """``(content, end)`` of the ``<tag>`` block opening at ``pos`` (after any whitespace) and
    closed by the first ``</tag>`` after it; ``end`` is the index just past that closing tag."""
    start = _SPACE.match(text, pos).end()
    if not text.startswith(f"<{tag}>", start):
        return None
    body = start + len(tag) + 2
    close = text.find(f"</{tag}>", body)
    return None if close < 0 else (text[body:close], close + len(tag) + 3)


def parse_response(text: str, eos_text: str | None = None) -> ParsedResponse:
    """Split a response into its reasoning and its action.

    The whole response (an EOS marker at its end excepted) must be exactly one ``<think>`` block
    followed by one ``<answer>`` block, neither containing a nested tag, and the answer must not be
    empty. Otherwise both fields are ``None`` and the turn gets the format penalty. Whitespace
    before, between and after the blocks is allowed; both fields come back stripped.
    """
    if eos_text and text.endswith(eos_text):
        text = text[: -len(eos_text)]
    think = _block(text, 0, "think")
    answer = _block(text, think[1], "answer") if think else None
    if think is None or answer is None or _SPACE.match(text, answer[1]).end() != len(text):
        return ParsedResponse(None, None)
    if any(t in think[0] or t in answer[0] for t in _TAGS) or not answer[0].strip():
        return ParsedResponse(None, None)
    return ParsedResponse(think[0].strip(), answer[0].strip())


def parse_plain(text: str, eos_text: str | None = None) -> ParsedResponse:
    """``rollout.response_format=plain``: the whole reply (an EOS marker at its end excepted,
    stripped) is the action and the reasoning; an empty reply is a format error."""
    if eos_text and text.endswith(eos_text):
        text = text[: -len(eos_text)]
    body = text.strip() or None
    return ParsedResponse(body, body)


def leading_think(text: str) -> str | None:
    """The reasoning of a response that opens with a closed ``<think>`` block, even when the rest
    does not parse (the MI monitor and the saved rollouts look at reasoning, not at the format)."""
    think = _block(text, 0, "think")
    if think is None or "<think>" in think[0]:
        return None
    return think[0].strip()


def think_token_span(decode: Callable[[int], str], n: int, prefix: str = "") -> tuple[int, int] | None:
    """Token indices ``[a, b)`` of the reasoning in the first ``<think>...</think>`` of ``n``
    generated tokens, where ``decode(k)`` is the text of the first ``k`` (``prefix``: text the
    generation prompt already opened, e.g. ``"<think>\\n"``).

    ``a`` is the fewest tokens whose text holds the whole opening tag, ``b`` the most whose text ends
    where the closing tag starts, so ``[a, b)`` are exactly sampled ids (a token that straddles a
    tag stays outside). None when there is no closed block or it holds no whole token.
    """
    full = prefix + decode(n)
    start = full.find("<think>")
    end = full.find("</think>", start + len("<think>")) if start >= 0 else -1
    if end < 0:
        return None
    length = lambda k: len(prefix) + len(decode(k))  # noqa: E731  (nondecreasing in k)
    a = _fewest(lambda k: length(k) >= start + len("<think>"), n)
    b = _fewest(lambda k: length(k) > end, n) - 1
    return (a, b) if b > a else None


def _fewest(pred: Callable[[int], bool], n: int) -> int:
    """The smallest k in [0, n] with ``pred(k)`` (monotone, ``pred(n)`` true): binary search."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
