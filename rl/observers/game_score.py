"""The game's own score in Atari actors' records, whose `episode_return` `reward_clip` and
`episodic_life` make a clipped return of one life (make_experiment adds it to those actors)."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

from rl.observers.base import Observer


class GameScore(Observer):
    """`game_score`, the unclipped score, in the record of an episode that ended a whole game."""

    labels = ("actor",)

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        self._environment = environment

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        # Asked right after the step that ended the episode: the copy's last step is that one.
        score = float(self._environment.game_scores([env_id])[0])
        return {} if np.isnan(score) else {"game_score": score}
