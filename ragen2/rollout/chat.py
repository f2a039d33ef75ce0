"""Chat rendering on token ids: the first prompt, and the tokens appended after each turn.

The model's own tokens are never re-tokenised: a trajectory is ``prompt ids + generated ids +
observation ids + generated ids + ...``. The observation ids close the assistant turn and open the
next one exactly as the tokenizer's chat template would, found by rendering the template around a
sentinel assistant message and taking the text after it.

That is only right for a template that renders a conversation append-only, so the template is
checked when a renderer is built (:meth:`ChatRenderer.check`) on a probe conversation of three user
turns: the text before each assistant message must not change when later turns are added, the
closing-and-reopening text between turns must be the same at every turn, and the system message
must appear once. Handled, each by a documented rule:

* a template that refuses a system role (Gemma-style), or one that moves the system message into
  the last user turn (Mistral-v0.3-style, which re-renders the first turn once a second one exists),
  gets the instructions at the top of the first user message instead (``system_in_user``);
* a generation prompt that already opens the reasoning (DeepSeek-R1-style ``<think>\\n``) is kept
  as :attr:`ChatRenderer.response_prefix`: the parser and the MI monitor read it in front of the
  generated text, the token ids stay the ones sampled;
* a template whose assistant message starts with whitespace the generation prompt lacks
  (Mistral's ``[/INST]`` then ``" " + content``) leaves that whitespace to the model.

Any other template is refused with a message naming what breaks.
"""

from __future__ import annotations

from typing import Any

FORMAT_INSTRUCTION = (
    "Think briefly, then act. Reply exactly in the form "
    "<think>your reasoning</think><answer>your action</answer>."
)
_SENTINEL = "\x00RAGEN2_SENTINEL\x00"
# the probe conversation: distinctive texts whose every occurrence can be counted
_SYSTEM, _USERS, _REPLY = "RAGEN2 SYSTEM PROBE", ("RAGEN2 USER ONE", "RAGEN2 USER TWO",
                                                  "RAGEN2 USER THREE"), "RAGEN2 REPLY"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be rendered turn by turn on token ids."""


def system_prompt(instructions: str, actions_per_turn: int = 1, action_sep: str = "||",
                  response_format: str = "tags") -> str:
    """The system message: the environment's instructions followed by the answer format (and,
    with ``actions_per_turn > 1``, how to give several actions in one answer); with
    ``response_format="plain"`` (``rollout.response_format``) the instructions alone."""
    instructions = instructions.strip()
    if response_format == "plain":
        return instructions
    fmt = FORMAT_INSTRUCTION
    if actions_per_turn > 1:
        fmt += (f" You may give up to {actions_per_turn} actions in one answer, separated by "
                f"'{action_sep}'; they are taken in order.")
    return f"{instructions}\n{fmt}" if instructions else fmt


class ChatRenderer:
    """Turns observations into token ids with the tokenizer's own chat template (checked)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template; ragen2 renders turns "
                                    "with it (set one on the tokenizer, or use a chat model)")
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id
        #: the instructions go at the top of the first user message (no usable system role)
        self.system_in_user = False
        #: text the generation prompt already opened (e.g. "<think>\n"); the response follows it
        self.response_prefix = ""
        self.check()

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Verify the template on the probe conversation, with a system role or, failing that,
        with the instructions in the first user message; raise :class:`ChatTemplateError`."""
        reasons = []
        for in_user in (False, True):
            self.system_in_user = in_user
            try:
                self.response_prefix = self._verify()
                return
            except ChatTemplateError as e:
                reasons.append(f"{'without' if in_user else 'with'} a system role: {e}")
        raise ChatTemplateError("the tokenizer's chat template cannot be rendered turn by turn "
                                "(ragen2 appends each turn's tokens to the last): "
                                + "; ".join(reasons))

    def _verify(self) -> str:
        """The response prefix, if the template passes every check in the current mode."""
        first = self._messages(_SYSTEM, _USERS[0])
        prompt = self._render(first, True)
        closed = self._render(first + [_assistant(_SENTINEL)], False)
        if _SENTINEL not in closed:
            raise ChatTemplateError("it drops the assistant's message")
        before = closed.split(_SENTINEL, 1)[0]
        if prompt.startswith(before):
            prefix = prompt[len(before):]  # what the generation prompt opens ("" or "<think>\n")
        elif before.startswith(prompt) and not before[len(prompt):].strip():
            prefix = ""  # the assistant message starts with whitespace the model writes itself
        else:
            raise ChatTemplateError(
                "its generation prompt is not the text in front of an assistant message "
                f"({_tail(prompt)!r} vs {_tail(before)!r})")
        # turn 2 and turn 3: the context so far is unchanged, and so is the text between turns
        two = first + [_assistant(_SENTINEL), _user(_USERS[1])]
        second = self._render(two, True)
        if not second.startswith(before + _SENTINEL):
            raise ChatTemplateError(
                "adding a turn re-renders the earlier ones (e.g. it moves the system message into "
                "the last user turn), so the token prefix would change turn over turn")
        three = first + [_assistant(_REPLY), _user(_USERS[1]), _assistant(_SENTINEL),
                         _user(_USERS[2])]
        third = self._render(three, True)
        if _SENTINEL not in third:
            raise ChatTemplateError("it drops the assistant's message in a later turn")
        head, tail = third.split(_SENTINEL, 1)
        if not head.startswith(before + _REPLY):
            raise ChatTemplateError("adding turns re-renders the earlier ones (a past assistant "
                                    "message is rendered differently from how it was sampled)")
        gap2 = second.split(_SENTINEL, 1)[1].replace(_USERS[1], "{obs}")
        gap3 = tail.replace(_USERS[2], "{obs}")
        if gap2 != gap3:
            raise ChatTemplateError(f"the text between turns differs by turn ({gap2!r} at turn 2, "
                                    f"{gap3!r} at turn 3)")
        if "{obs}" not in gap2:
            raise ChatTemplateError("it drops the user's message in a later turn")
        if third.count(_SYSTEM) != 1:
            raise ChatTemplateError(f"the system message appears {third.count(_SYSTEM)} times in "
                                    "three turns (once is right)")
        return prefix

    # --------------------------------------------------------------- rendering
    def _messages(self, system: str, observation: str) -> list[dict[str, str]]:
        if self.system_in_user:
            return [_user(f"{system}\n\n{observation}")]
        return [{"role": "system", "content": system}, _user(observation)]

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        except Exception as e:  # noqa: BLE001  (jinja's raise_exception, TemplateError, ...)
            raise ChatTemplateError(f"rendering raised {type(e).__name__}: {e}") from e

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def initial_prompt(self, system: str, observation: str) -> list[int]:
        """Token ids of [system, user(observation)] plus the assistant generation prompt."""
        return self._encode(self._render(self._messages(system, observation), True))

    def observation_suffix(self, observation: str, generation_ended_with_eos: bool) -> list[int]:
        """Ids appended after a generated turn: close the turn, the user message, the next prompt.

        If the engine's tokens already end with the EOS token (e.g. ``<|im_end|>``), the closing
        text it stands for is not appended again.
        """
        probe = self._messages(_SYSTEM, _USERS[0]) + [_assistant(_SENTINEL), _user(observation)]
        suffix = self._render(probe, True).split(_SENTINEL, 1)[1]
        if generation_ended_with_eos:
            eos_text = self.tokenizer.decode([self.eos_token_id])
            if suffix.startswith(eos_text):
                suffix = suffix[len(eos_text):]
        return self._encode(suffix)


def _user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def _tail(text: str, n: int = 40) -> str:
    return text[-n:]
