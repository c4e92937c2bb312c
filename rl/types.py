"""Data structures that travel between actors, replay and learners."""

from __future__ import annotations

from typing import Any, NamedTuple


class Transition(NamedTuple):
    """One (possibly n-step) transition as stored in replay.

    `reward` is the discounted sum of the m <= n rewards the transition spans and
    `discount` the whole bootstrap factor gamma^m times the environment discounts, so a
    learner's target is simply `reward + discount * value(next_observation)` and a
    terminal step (environment discount 0) removes the bootstrap.
    """

    observation: Any
    action: Any
    reward: Any
    discount: Any
    next_observation: Any
