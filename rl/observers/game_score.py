"""The game's own score in Atari training records: with `reward_clip` and `episodic_life`
an actor's `episode_return` is a clipped return of one life, so make_experiment adds this
observer to those actors (evaluators play unprocessed games)."""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

from rl.observers.base import Observer


class GameScore(Observer):
    """`game_score`, the unclipped score (rl/environments/atari.py), in the record of an
    episode whose last step ended a whole game; episodes that ended only a life have none."""

    labels = ("actor",)

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        self._environment = environment

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        # Asked right after the step that ended the episode: the copy's last step is that one.
        score = float(self._environment.game_scores([env_id])[0])
        return {} if np.isnan(score) else {"game_score": score}
