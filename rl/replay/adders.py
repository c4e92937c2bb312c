"""Adders turn an actor's stream of timesteps into replay items."""

from __future__ import annotations

import abc
import collections
from typing import Any

import dm_env
import numpy as np
import reverb
import tree

from rl.types import Transition


class Adder(abc.ABC):
    @abc.abstractmethod
    def add_first(self, timestep: dm_env.TimeStep) -> None:
        """Starts an episode."""

    @abc.abstractmethod
    def add(self, action: Any, next_timestep: dm_env.TimeStep) -> None:
        """Records one step of the current episode."""

    @property
    @abc.abstractmethod
    def num_items(self) -> int:
        """Items created so far: the inserts a rate limiter counts."""

    def reset(self, timeout_ms: int | None = None) -> None:
        """Drops partial state and waits for pending items (episode end or shutdown)."""


def n_step_return(rewards: list[float], discounts: list[float], gamma: float) -> tuple[float, float]:
    """Discounted return over the given steps and the bootstrap factor after them.

    `discounts[k]` is the environment discount received with `rewards[k]`; a 0 stops
    both the sum and the bootstrap.
    """
    total, factor = 0.0, 1.0
    for reward, discount in zip(rewards, discounts):
        total += factor * reward
        factor *= gamma * discount
    return total, factor


class NStepTransitionAdder(Adder):
    """Writes (s_t, a_t, R_t^(n), gamma^m * prod(d), s_{t+m}) items, m <= n.

    Each transition is appended as one step and inserted as one item; at an episode end
    the shorter transitions of the last n-1 steps are written too, so every visited state
    is a sample.
    """

    def __init__(
        self,
        client: reverb.Client,
        table: str,
        n_step: int,
        discount: float,
        priority: float = 1.0,
        max_pending_items: int = 32,
        timeout_ms: int = 120_000,
    ):
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        self._writer = client.trajectory_writer(num_keep_alive_refs=1)
        self._table = table
        self._n_step = n_step
        self._gamma = discount
        self._priority = priority
        self._max_pending_items = max_pending_items
        self._timeout_ms = timeout_ms
        self._buffer: collections.deque = collections.deque()
        self._observation: Any = None
        self._num_items = 0

    @property
    def num_items(self) -> int:
        return self._num_items

    def add_first(self, timestep: dm_env.TimeStep) -> None:
        self._buffer.clear()
        self._observation = timestep.observation

    def add(self, action: Any, next_timestep: dm_env.TimeStep) -> None:
        self._buffer.append(
            (self._observation, action, float(next_timestep.reward), float(next_timestep.discount))
        )
        self._observation = next_timestep.observation
        if len(self._buffer) == self._n_step:
            self._write_oldest(next_timestep.observation)
        if next_timestep.last():
            while self._buffer:
                self._write_oldest(next_timestep.observation)
            self._writer.end_episode(clear_buffers=True, timeout_ms=self._timeout_ms)
        elif self._num_items % self._max_pending_items == 0:
            # Bounds the items in flight so the writer neither warns nor hoards memory.
            self._writer.flush(block_until_num_items=self._max_pending_items, timeout_ms=self._timeout_ms)

    def _write_oldest(self, next_observation: Any) -> None:
        observation, action, _, _ = self._buffer[0]
        rewards = [step[2] for step in self._buffer]
        discounts = [step[3] for step in self._buffer]
        reward, discount = n_step_return(rewards, discounts, self._gamma)
        self._buffer.popleft()
        transition = Transition(
            observation=observation,
            action=action,
            reward=np.float32(reward),
            discount=np.float32(discount),
            next_observation=next_observation,
        )
        self._writer.append(transition)
        self._writer.create_item(
            self._table,
            self._priority,
            tree.map_structure(lambda column: column[-1], self._writer.history),
        )
        self._num_items += 1

    def reset(self, timeout_ms: int | None = None) -> None:
        self._buffer.clear()
        self._writer.end_episode(clear_buffers=True, timeout_ms=timeout_ms or self._timeout_ms)

    def close(self) -> None:
        self._writer.close()
