"""Text an environment produces, for training the tiny model's tokenizer offline."""

from __future__ import annotations

from ragen2.rollout.chat import FORMAT_INSTRUCTION, system_prompt
from ragen2.rollout.envs import make_env
from ragen2.rollout.runner import FORMAT_ERROR_NOTE, env_instructions


def env_corpus(env_id: str, kwargs: dict, episodes: int = 64, max_turns: int = 8) -> list[str]:
    """Instructions, observations and expert responses from a few episodes of the env.

    Envs without a ``demonstration()`` hook contribute their instructions and first observations.
    """
    env = make_env(env_id, kwargs)
    texts = [FORMAT_INSTRUCTION, FORMAT_ERROR_NOTE]
    for seed in range(episodes):
        obs, info = env.reset(seed=10_000_019 + seed)
        if seed == 0:
            texts.append(system_prompt(env_instructions(env, info)))
        texts.append(obs)
        demo = getattr(env.unwrapped, "demonstration", None)
        for _ in range(max_turns if demo else 0):
            think, action = demo()
            texts.append(f"<think>{think}</think><answer>{action}</answer>")
            obs, _, term, trunc, _ = env.step(action)
            texts.append(obs)
            if term or trunc:
                break
        for a in list(getattr(env.unwrapped, "valid_actions", []) or [])[:8]:
            texts.append(f"<answer>{a}</answer>")
    env.close()
    return texts


def env_action_words(env_id: str, kwargs: dict) -> tuple[str, ...]:
    """The env's ``valid_actions`` that are single words (kept atomic by the tiny tokenizer)."""
    env = make_env(env_id, kwargs)
    words = tuple(a for a in getattr(env.unwrapped, "valid_actions", ()) or ()
                  if isinstance(a, str) and a.strip() and len(a.split()) == 1 and a == a.strip())
    env.close()
    return words
