"""The smallest text env the rollout runner accepts, for tests of optional env hooks: subclasses
add the hook under test (``ground``, ``state_coordinates``, ...)."""

from __future__ import annotations


class PlainTextEnv:
    """Observation "start", then "next" with reward 0 forever; no optional hook."""

    def __init__(self):
        self.unwrapped = self

    def reset(self, seed=None, options=None):
        return "start", {}

    def step(self, action):
        return "next", 0.0, False, False, {}
