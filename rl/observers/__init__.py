"""Observers: watch an environment loop and add metrics to its episode records
(conf/observers/ names them for the command line: `observers=[action_stats,video]`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from typing import Any, ClassVar, Sequence

import dm_env
import numpy as np

from rl.core import is_discrete
from rl.environments.factories import render_fps
from rl.environments.rendering import render_frame

ACTION_STATISTICS = {"mean": np.mean, "std": np.std, "min": np.min, "max": np.max}
MP4 = dict(codec="libx264", pix_fmt_out="yuv420p", macro_block_size=1, quality=7)  # imageio_ffmpeg's: H.264.


@dataclasses.dataclass(eq=False)
class Observer:
    """Watches a loop's `VectorEnvironment` copies `env_ids`; one per loop (`label`). `labels`: the
    loops it runs in (None: all); `render`: environments made with `render_mode="rgb_array"`."""

    label: str = "actor"
    instance: int = 0
    run_directory: str = "."
    labels: ClassVar[Sequence[str] | None] = None
    render: ClassVar[bool] = False

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        """The first timesteps of new episodes in copies `env_ids`."""

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        """The actions taken in copies `env_ids` and the timesteps they led to."""

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        """Metrics of the episode copy `env_id` has just ended."""
        return {}


@dataclasses.dataclass(eq=False)
class ActionStatistics(Observer):
    """conf/observers/action_stats.yaml: per episode, `action_mean`, `_std`, `_min` and `_max` over
    every action component taken; discrete actions also `action_<a>_fraction`."""

    _actions: dict[int, list[np.ndarray]] = dataclasses.field(default_factory=dict, init=False)

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        spec = environment.action_spec()
        self._num_values = spec.num_values if is_discrete(spec) else None
        self._actions.update({int(env_id): [] for env_id in env_ids})

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        for env_id, values in zip(env_ids, np.asarray(actions, np.float64).reshape(len(env_ids), -1)):
            self._actions[int(env_id)].append(values)

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        if not self._actions.get(env_id):
            return {}
        values = np.concatenate(self._actions[env_id])
        metrics = {f"action_{name}": float(reduce(values)) for name, reduce in ACTION_STATISTICS.items()}
        if self._num_values is not None:
            fractions = np.bincount(values.astype(np.int64), minlength=self._num_values) / values.size
            metrics.update({f"action_{action}_fraction": float(share) for action, share in enumerate(fractions)})
        return metrics


class GameScore(Observer):
    """`game_score`, the unclipped score, in the record of an Atari episode that ended a whole game
    (`reward_clip` and `episodic_life` make `episode_return` a clipped return of one life)."""

    labels = ("actor",)

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        self._environment = environment

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        score = float(self._environment.game_scores([env_id])[0])
        return {} if np.isnan(score) else {"game_score": score}


@dataclasses.dataclass(eq=False)
class VideoRecorder(Observer):
    """conf/observers/video.yaml: MP4s of copy 0's every `every`-th episode in `<run_directory>/videos/`
    (or only the first, to `path`), their paths as the records' `video`. `fps` None: the environment's."""

    render = True
    label: str = "evaluator"
    every: int = 5
    fps: int | None = None
    labels: Sequence[str] = ("evaluator",)
    path: str | None = None
    frames: list[Any] = dataclasses.field(default_factory=list, init=False, repr=False)
    videos: list[str] = dataclasses.field(default_factory=list, init=False)
    video_frames: list[int] = dataclasses.field(default_factory=list, init=False)
    _episodes: int = dataclasses.field(default=0, init=False)

    def __post_init__(self):
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        self.labels = tuple(self.labels)
        # pygame's frames (classic control) need no display; without this, SDL reports a missing one.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        if env_ids[0] != 0:  # Ids are ascending.
            return
        recording = self._episodes % self.every == 0 and not (self.path and self.videos)
        self._episodes += 1
        if not self.fps:
            self.fps = render_fps(environment.environments[0])
        self.frames = [render_frame(environment)] if recording else []  # Frames while recording.

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        if self.frames and env_ids[0] == 0:
            self.frames.append(render_frame(environment))

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        """Writes the recorded frames to an H.264 MP4 (sizes padded to even numbers, as x264 wants)."""
        if env_id != 0 or not self.frames:
            return {}
        import imageio_ffmpeg

        name = f"{self.label}_{self.instance}_episode_{self._episodes}.mp4"
        path = self.path or os.path.join(self.run_directory, "videos", name)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        height, width = (size + size % 2 for size in np.shape(self.frames[0])[:2])
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")  # ffmpeg runs as a subprocess.
        writer = imageio_ffmpeg.write_frames(path, (width, height), fps=self.fps or 30, **MP4)
        with contextlib.closing(writer):
            writer.send(None)
            for frame in self.frames:
                frame = np.asarray(frame, dtype=np.uint8)[..., :3]
                padding = ((0, height - frame.shape[0]), (0, width - frame.shape[1]), (0, 0))
                writer.send(np.pad(frame, padding).tobytes())
        self.videos.append(path)
        self.video_frames.append(len(self.frames))
        self.frames = []
        return {"video": path}
