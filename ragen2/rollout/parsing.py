"""Parsing ``<think>...</think><answer>...</answer>`` responses."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RESPONSE = re.compile(r"^\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*$", re.DOTALL)
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_THINK = re.compile(r"^\s*<think>(.*?)</think>", re.DOTALL)


@dataclass(frozen=True)
class ParsedResponse:
    think: str | None
    answer: str | None

    @property
    def format_ok(self) -> bool:
        return self.answer is not None


def parse_response(text: str, eos_text: str | None = None) -> ParsedResponse:
    """Split a response into its reasoning and its action.

    The whole response (an EOS marker at its end excepted) must be exactly one ``<think>`` block
    followed by one ``<answer>`` block, neither containing a nested tag, and the answer must not be
    empty. Otherwise both fields are ``None`` and the turn gets the format penalty.
    """
    if eos_text and text.endswith(eos_text):
        text = text[: -len(eos_text)]
    m = _RESPONSE.match(text)
    if m is None:
        return ParsedResponse(None, None)
    think, answer = m.group(1), m.group(2).strip()
    if not answer or any(t in think or t in answer for t in _TAGS):
        return ParsedResponse(None, None)
    return ParsedResponse(think.strip(), answer)


def leading_think(text: str) -> str | None:
    """The reasoning of a response that opens with a closed ``<think>`` block, even when the rest
    does not parse (the MI monitor and the saved rollouts look at reasoning, not at the format)."""
    m = _THINK.match(text)
    if m is None or "<think>" in m.group(1):
        return None
    return m.group(1).strip()
