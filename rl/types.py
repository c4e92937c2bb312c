"""Data structures that travel between actors, replay and learners."""

from __future__ import annotations

from typing import Any, NamedTuple


class Transition(NamedTuple):
    """One (possibly n-step) transition as stored in replay: `reward` is the discounted sum of
    the m <= n rewards it spans, `discount` gamma^m times the environment discounts, so the
    target is `reward + discount * value(next_observation)` (0 at a terminal step)."""

    observation: Any
    action: Any
    reward: Any
    discount: Any
    next_observation: Any
