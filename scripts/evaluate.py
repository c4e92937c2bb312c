"""Evaluates a trained run from its latest checkpoint.

    python scripts/evaluate.py run_dir=outputs/2024-05-01/12-00-00
    python scripts/evaluate.py run_dir=DIR episodes=20 video=true
    python scripts/evaluate.py run_dir=DIR seed=7 video=true video_path=/tmp/episode.mp4

Rebuilds the experiment from `<run_dir>/.hydra/config.yaml`, restores the learner from
the newest `<run_dir>/checkpoints/step_<n>/`, runs the evaluation policy (greedy for
DQN) for `episodes` episodes with the run's evaluation seed (or `seed=`) and prints the
mean and std of the return. With `video=true` it writes an MP4 of the first episode
(rgb rendering, headless) to `<run_dir>/videos/` (or `video_path`) and, when the run
logged to W&B, adds the video to that W&B run. Nothing the run saved is modified.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import sys
import warnings
from typing import Any

import dm_env

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # Headless rendering (pygame).
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

USAGE = "usage: python scripts/evaluate.py run_dir=DIR [episodes=N] [video=true] [seed=S] [video_path=FILE.mp4]"
OPTIONS = {"run_dir": None, "episodes": 10, "video": False, "seed": None, "video_path": None, "fps": None}


class EvaluationError(Exception):
    """A user error: printed as one line, exit status 1, no traceback."""


def parse_arguments(argv: list[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__)
        sys.exit(0)
    for arg in argv:
        if "=" not in arg:
            raise EvaluationError(f"expected key=value, got '{arg}'\n{USAGE}")
    try:
        given = OmegaConf.to_container(OmegaConf.from_dotlist(argv))
    except Exception as error:  # noqa: BLE001 - OmegaConf's grammar errors: show them plainly.
        raise EvaluationError(f"cannot parse arguments ({error})\n{USAGE}") from None
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise EvaluationError(f"unknown option(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}\n{USAGE}")
    options = {**OPTIONS, **given}
    if not options["run_dir"]:
        raise EvaluationError(f"run_dir is required\n{USAGE}")
    if not isinstance(options["episodes"], int) or isinstance(options["episodes"], bool) or options["episodes"] < 1:
        raise EvaluationError(f"episodes must be a positive integer, got {options['episodes']!r}")
    if not isinstance(options["video"], bool):
        raise EvaluationError(f"video must be true or false, got {options['video']!r}")
    if options["seed"] is not None and (not isinstance(options["seed"], int) or isinstance(options["seed"], bool)):
        raise EvaluationError(f"seed must be an integer, got {options['seed']!r}")
    options["run_dir"] = os.path.abspath(str(options["run_dir"]))
    return options


def locate_checkpoint(run_dir: str) -> str:
    from rl.checkpointing import latest_checkpoint

    if not os.path.isdir(run_dir):
        raise EvaluationError(f"no run directory at {run_dir}")
    if not os.path.isfile(os.path.join(run_dir, ".hydra", "config.yaml")):
        raise EvaluationError(f"{run_dir} is not a run directory (no .hydra/config.yaml)")
    checkpoint = latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if checkpoint is None:
        raise EvaluationError(
            f"no checkpoint in {run_dir}/checkpoints (runs save one at the end unless checkpoint=false)"
        )
    return checkpoint


class FrameRecorder:
    """An environment-loop observer that keeps the rendered frames of the first episode."""

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.recording = True

    def _grab(self, environment: Any) -> None:
        if self.recording:
            try:
                frame = environment.render()
            except Exception as error:  # noqa: BLE001 - e.g. a missing rendering dependency.
                raise EvaluationError(f"the environment cannot render rgb frames ({error})") from None
            if frame is not None:
                self.frames.append(frame)

    def observe_first(self, environment: Any, timestep: Any) -> None:
        self._grab(environment)

    def observe(self, environment: Any, timestep: Any, action: Any) -> None:
        # Timesteps are batched over the copies stepped; copy 0 (the one rendered) comes first.
        self._grab(environment)
        if timestep.step_type[0] == dm_env.StepType.LAST:
            self.recording = False

    def get_metrics(self) -> dict[str, Any]:
        return {}


def write_mp4(path: str, frames: list[Any], fps: int) -> str:
    import imageio_ffmpeg
    import numpy as np

    if not frames:
        raise EvaluationError("the environment rendered no frames")
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


def _render_fps(environment: Any) -> int:
    gym_environment = getattr(environment, "gymnasium_environment", None)
    metadata = getattr(gym_environment, "metadata", None) or {}
    return int(metadata.get("render_fps") or 30)


def find_wandb_run(run_dir: str) -> tuple[str, bool] | None:
    """The id of the run's W&B run and whether it was offline (None if it had none)."""
    paths = [p for p in glob.glob(os.path.join(run_dir, "wandb", "*run-*-*")) if os.path.isdir(p)]
    if not paths:
        return None
    latest = max(paths, key=lambda p: os.path.basename(p).split("-", 1)[1])
    return os.path.basename(latest).rsplit("-", 1)[1], os.path.basename(latest).startswith("offline-")


def log_video_to_wandb(run_dir: str, wandb_config: dict[str, Any], video: str, record: dict[str, Any]) -> str | None:
    found = find_wandb_run(run_dir)
    if found is None:
        return None
    run_id, offline = found
    import wandb

    mode = wandb_config.get("mode")
    if mode is None and not os.environ.get("WANDB_MODE"):
        mode = "offline" if offline else None
    if mode == "disabled":
        return None
    run = wandb.init(
        project=wandb_config.get("project"),
        entity=wandb_config.get("entity"),
        id=run_id,
        resume="allow",
        dir=run_dir,
        mode=mode,
        reinit="finish_previous",
    )
    try:
        run.log({**record, "evaluator/video": wandb.Video(video, format="mp4")})
    finally:
        run.finish()
    return run_id


def evaluate(options: dict[str, Any]) -> dict[str, Any]:
    run_dir = options["run_dir"]
    checkpoint = locate_checkpoint(run_dir)

    import numpy as np
    from omegaconf import OmegaConf

    from rl.checkpointing import CheckpointError, read_state, restore_learner_state
    from rl.counting import Counter
    from rl.environment_loop import EnvironmentLoop
    from rl.experiments.distributed import DistributedProgram
    from rl.experiments.make_experiment import make_experiment
    from rl.experiments.validation import ConfigError
    from rl.loggers.base import NoOpLogger

    config = OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml"))
    hydra_path = os.path.join(run_dir, ".hydra", "hydra.yaml")
    choices = {}
    if os.path.exists(hydra_path):
        choices = OmegaConf.to_container(OmegaConf.load(hydra_path)).get("hydra", {}).get("runtime", {}).get("choices", {})
    wandb_config = OmegaConf.to_container(config.logger).get("wandb") or {}
    # Evaluation writes nothing into the run: no log sinks, no checkpoint, no progress bar.
    OmegaConf.set_struct(config, False)
    config.logger = {"_target_": "rl.loggers.DefaultLoggerFactory", "terminal": False, "csv": False, "wandb": None}
    config.progress = False
    config.checkpoint = False
    if options["seed"] is not None:
        config.seed = options["seed"]
    try:
        experiment, _ = make_experiment(config, run_dir, choices)
    except ConfigError as error:
        raise EvaluationError(f"the run's config no longer builds an experiment: {error}") from None
    if options["video"]:
        factory = experiment.environment_factory
        experiment = dataclasses.replace(experiment, environment_factory=functools.partial(factory, render_mode="rgb_array"))

    # The learner only serves the restored parameters: it is never stepped, so it needs no replay.
    program = DistributedProgram(experiment, num_actors=1, num_evaluators=1)
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    learner = experiment.builder.make_learner(program.keys.learner, networks, iter(()), None, Counter(), NoOpLogger())
    try:
        saved = read_state(checkpoint)
        learner.restore(restore_learner_state(checkpoint, learner.save()))
    except CheckpointError as error:  # A damaged or foreign checkpoint: say so plainly.
        raise EvaluationError(f"cannot use checkpoint {checkpoint} ({error})") from None
    counts = {key: int(np.asarray(value)) for key, value in (saved.get("counts") or {}).items()}

    try:
        evaluator = program.make_evaluator(0, learner, Counter())
    except TypeError as error:
        if not options["video"]:
            raise
        raise EvaluationError(f"this environment cannot be made with render_mode='rgb_array' ({error})") from None
    recorder = FrameRecorder() if options["video"] else None
    loop = EnvironmentLoop(
        evaluator.loop.environment,
        evaluator.loop.actor,
        evaluator.loop.counter,
        observers=[recorder] if recorder else (),
        should_update=False,
    )
    loop.actor.update(wait=True)
    records = loop.run_episodes(options["episodes"])
    returns = np.array([record["episode_return"] for record in records], dtype=np.float64)
    result = {
        "run_dir": run_dir,
        "checkpoint": checkpoint,
        "seed": experiment.seed,
        "episodes": int(returns.size),
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "max_return": float(returns.max()),
        "mean_length": float(np.mean([record["episode_length"] for record in records])),
        "returns": returns.tolist(),
        "actor_steps": counts.get("actor_steps"),
        "video": None,
        "wandb_run": None,
    }
    if recorder is not None:
        path = options["video_path"] or os.path.join(
            run_dir, "videos", f"evaluation_{os.path.basename(checkpoint)}_seed{experiment.seed}.mp4"
        )
        fps = int(options["fps"] or _render_fps(evaluator.loop.environment))
        result["video"] = write_mp4(path, recorder.frames, fps)
        result["video_frames"] = len(recorder.frames)
        if wandb_config:
            record = {"evaluator/restored_episode_return": result["mean_return"]}
            if counts.get("actor_steps") is not None:
                record["actor_steps"] = counts["actor_steps"]
            result["wandb_run"] = log_video_to_wandb(run_dir, wandb_config, result["video"], record)
    evaluator.loop.environment.close()
    return result


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_arguments(sys.argv[1:] if argv is None else argv)
        result = evaluate(options)
    except EvaluationError as error:
        print(f"evaluate.py: {error}", file=sys.stderr)
        return 1
    print(f"checkpoint {result['checkpoint']} (actor steps {result['actor_steps']}), seed {result['seed']}")
    print(
        f"mean return {result['mean_return']:.2f} ± {result['std_return']:.2f} (std) over {result['episodes']} episodes "
        f"[min {result['min_return']:.1f}, max {result['max_return']:.1f}], mean length {result['mean_length']:.1f}"
    )
    print("episode returns: " + ", ".join(f"{value:g}" for value in result["returns"]))
    summary = os.path.join(options["run_dir"], "summary.json")
    if os.path.exists(summary):
        import json

        with open(summary) as file:
            final = json.load(file).get("final_eval_return")
        if final is not None:
            print(f"the run's final evaluation return was {final:.2f}")
    if result["video"]:
        print(f"video of one episode ({result['video_frames']} frames): {result['video']}")
    if result["wandb_run"]:
        print(f"video logged to W&B run {result['wandb_run']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
