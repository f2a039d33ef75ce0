"""Chat rendering on token ids: the first prompt, and the tokens appended after each turn.

The model's own tokens are never re-tokenised: a trajectory is ``prompt ids + generated ids +
observation ids + generated ids + ...``. The observation ids close the assistant turn and open the
next one exactly as the tokenizer's chat template would, found by rendering the template around a
sentinel assistant message and taking the text after it.
"""

from __future__ import annotations

from typing import Any

FORMAT_INSTRUCTION = (
    "Think briefly, then act. Reply exactly in the form "
    "<think>your reasoning</think><answer>your action</answer>."
)
_SENTINEL = "\x00RAGEN2_SENTINEL\x00"


def system_prompt(instructions: str) -> str:
    """The system message: the environment's instructions followed by the answer format."""
    instructions = instructions.strip()
    return f"{instructions}\n{FORMAT_INSTRUCTION}" if instructions else FORMAT_INSTRUCTION


class ChatRenderer:
    """Turns observations into token ids with the tokenizer's own chat template."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat_template; ragen2 renders turns with it")
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        probe = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                 {"role": "assistant", "content": _SENTINEL}]
        closed = self._render(probe, add_generation_prompt=False)
        if _SENTINEL not in closed:
            raise ValueError("the chat template drops assistant content; cannot render turns")
        self._turn_close = closed.split(_SENTINEL, 1)[1]
        self._probe = probe

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def initial_prompt(self, system: str, observation: str) -> list[int]:
        """Token ids of [system, user(observation)] plus the assistant generation prompt."""
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": observation}]
        return self._encode(self._render(msgs, add_generation_prompt=True))

    def observation_suffix(self, observation: str, generation_ended_with_eos: bool) -> list[int]:
        """Ids appended after a generated turn: close the turn, the user message, the next prompt.

        If the engine's tokens already end with the EOS token (e.g. ``<|im_end|>``), the closing
        text it stands for is not appended again.
        """
        full = self._render(self._probe + [{"role": "user", "content": observation}],
                            add_generation_prompt=True)
        suffix = full.split(_SENTINEL, 1)[1]
        if generation_ended_with_eos:
            eos_text = self.tokenizer.decode([self.eos_token_id])
            if suffix.startswith(eos_text):
                suffix = suffix[len(eos_text):]
        return self._encode(suffix)
