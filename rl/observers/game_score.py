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

    def __init__(self, label: str = "actor", instance: int = 0, run_directory: str = "."):
        super().__init__(label, instance, run_directory)
        self._ended: dict[int, float] = {}

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        last = np.asarray(timestep.step_type) == dm_env.StepType.LAST
        if not last.any():
            return
        scores = environment.game_scores(env_ids)
        for env_id, score in zip(np.asarray(env_ids)[last].tolist(), scores[last].tolist()):
            if not np.isnan(score):
                self._ended[int(env_id)] = float(score)

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        score = self._ended.pop(int(env_id), None)
        return {} if score is None else {"game_score": score}
