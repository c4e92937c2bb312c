"""conf/observers/video.yaml: MP4s of episodes in `<run dir>/videos/`; the episode's record
gets the file's path as `video`."""

from __future__ import annotations

import os
import warnings
from typing import Any, Sequence

import dm_env
import numpy as np

from rl.environments.rendering import RenderingError, render_fps, render_frame
from rl.observers.base import Observer


def write_mp4(path: str, frames: Sequence[Any], fps: int) -> str:
    """Writes RGB(A) frames to an H.264 MP4 at `path` (sizes padded to even numbers)."""
    import imageio_ffmpeg

    if not frames:
        raise RenderingError("the environment rendered no frames")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    first = np.asarray(frames[0])
    height, width = first.shape[0] + first.shape[0] % 2, first.shape[1] + first.shape[1] % 2  # x264 wants even sizes.
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")  # ffmpeg runs as a subprocess.
    writer = imageio_ffmpeg.write_frames(
        path, (width, height), fps=fps, codec="libx264", pix_fmt_out="yuv420p", macro_block_size=1, quality=7
    )
    writer.send(None)
    try:
        for frame in frames:
            frame = np.asarray(frame, dtype=np.uint8)[..., :3]
            padded = np.zeros((height, width, 3), dtype=np.uint8)
            padded[: frame.shape[0], : frame.shape[1]] = frame
            writer.send(np.ascontiguousarray(padded).tobytes())
    finally:
        writer.close()
    return path


class VideoRecorder(Observer):
    """Records copy 0's every `every`-th episode (an evaluator's: every `every` rounds) to
    `<run_directory>/videos/<label>_<instance>_episode_<n>.mp4`, or only the first to `path`.
    `fps` None: the environment's."""

    render = True

    def __init__(
        self,
        every: int = 5,
        fps: int | None = None,
        labels: Sequence[str] = ("evaluator",),
        path: str | None = None,
        label: str = "evaluator",
        instance: int = 0,
        run_directory: str = ".",
    ):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        super().__init__(label, instance, run_directory)
        self.labels = tuple(labels)
        self.every = every
        self.fps = fps
        self.path = path
        self.frames: list[Any] = []
        self.videos: list[str] = []  # The MP4s written, and their frame counts.
        self.video_frames: list[int] = []
        self._episodes = 0  # Episodes copy 0 has started.
        self._recording = False

    def observe_first(self, environment: Any, timestep: dm_env.TimeStep, env_ids: np.ndarray) -> None:
        if env_ids[0] != 0:  # Ids are ascending: copy 0 comes first when it is there.
            return
        self._recording = self._episodes % self.every == 0 and not (self.path and self.videos)
        self._episodes += 1
        if not self.fps:
            self.fps = render_fps(environment.environments[0])
        self.frames = [render_frame(environment)] if self._recording else []

    def observe(self, environment: Any, timestep: dm_env.TimeStep, actions: Any, env_ids: np.ndarray) -> None:
        if self._recording and env_ids[0] == 0:
            self.frames.append(render_frame(environment))

    def get_metrics(self, env_id: int) -> dict[str, Any]:
        if env_id != 0 or not self._recording:
            return {}
        self._recording = False
        path = self.path or os.path.join(
            self.run_directory, "videos", f"{self.label}_{self.instance}_episode_{self._episodes}.mp4"
        )
        self.videos.append(write_mp4(path, self.frames, self.fps or 30))
        self.video_frames.append(len(self.frames))
        self.frames = []
        return {"video": path}
