"""Scripted opening turns: replay fixed responses, then hand the episode to the real policy.

The probe panel's later-turn measurement (:mod:`ragen2.collapse.panel_turns`) needs the policy's
reasoning at a *fixed* mid-episode state: every panel prompt is an env seed plus the text of its
first k responses (the env's expert, some moves replaced by seeded random ones), chosen once per
run. :class:`ScriptedPrefixPolicy` replays those k responses, tokenised like warm-start
demonstrations (:class:`ragen2.rollout.runner.DemonstrationPolicy`), so the context in front of
turn k is the same token sequence at every measurement, and asks the wrapped policy (the engine)
for turn k onwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ragen2.engines.base import Generation
from ragen2.rollout.runner import EpisodeState, TurnPolicy


class ScriptedPrefixPolicy:
    """``prefixes[group_id]`` = the response texts of that group's first turns; later turns (and
    groups without a prefix) go to ``inner``. ``response_prefix``: what the chat template's
    generation prompt already opened (``ChatRenderer.response_prefix``), cut from the front of a
    scripted response so the recorded turn reads the same as a sampled one."""

    def __init__(self, inner: TurnPolicy, tokenizer: Any, prefixes: Mapping[int, Sequence[str]],
                 response_prefix: str = "") -> None:
        self.inner, self.tokenizer = inner, tokenizer
        self.prefixes = {int(g): list(p) for g, p in prefixes.items()}
        self.response_prefix = response_prefix

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def scripted(self, text: str) -> Generation:
        if self.response_prefix and text.startswith(self.response_prefix):
            text = text[len(self.response_prefix):]
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        return Generation(ids, [0.0] * len(ids), "stop", self.policy_version, text)

    def act(self, episodes: Sequence[EpisodeState], turn: int) -> list[Generation]:
        out: list[Generation | None] = [None] * len(episodes)
        live = []
        for i, ep in enumerate(episodes):
            prefix = self.prefixes.get(ep.traj.group_id, [])
            if turn < len(prefix):
                out[i] = self.scripted(prefix[turn])
            else:
                live.append(i)
        if live:
            for i, g in zip(live, self.inner.act([episodes[i] for i in live], turn)):
                out[i] = g
        return out  # type: ignore[return-value]
