"""The game's own score in training records, where training preprocesses it away.

Atari training clips rewards and ends an episode at each lost life (`environment.reward_clip`,
`episodic_life`), so an actor's `episode_return` is a clipped return of one life. The
environment sums the unclipped rewards of each whole game (rl/environments/atari.py); this
observer puts that total, `game_score`, into the record of the episode that ended the game.
make_experiment adds it to the actors of every run with that preprocessing; evaluators play
unprocessed games, so their `episode_return` is the game score already.
"""

from __future__ import annotations

from typing import Any

import dm_env
import numpy as np

from rl.observers.base import Observer


class GameScore(Observer):
    """`game_score`: in the record of an episode whose last step ended a whole game, the
    game's unclipped score; records of episodes that ended only a life have none."""

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
