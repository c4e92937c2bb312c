"""Evaluates a trained run from its newest checkpoint (what scripts/evaluate.py runs).

    python scripts/evaluate.py run_dir=outputs/2024-05-01/12-00-00
    python scripts/evaluate.py run_dir=DIR episodes=20 video=true
    python scripts/evaluate.py run_dir=DIR seed=7 video=true video_path=/tmp/episode.mp4
    python scripts/evaluate.py run_dir=DIR replica=1   # one replica of a launcher=anakin or sebulba run (default: all)

Runs the run's evaluation policy (its newest undamaged checkpoint) for `episodes` episodes with
the run's evaluation seed (or `seed=`) and prints the return's mean and std. `video=true` writes
an MP4 of the first episode to `<run_dir>/videos/` (or `video_path`) and adds it to the run's
online W&B run. A launcher=anakin or sebulba run's checkpoint holds every replica: each (or `replica`) is
evaluated in turn, the video made of the first. Nothing the run saved is modified.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from typing import Any

USAGE = (
    "usage: python scripts/evaluate.py run_dir=DIR [episodes=N] [video=true] [seed=S] [video_path=FILE.mp4] [replica=I]"
)
OPTIONS = {
    "run_dir": None,
    "episodes": 10,
    "video": False,
    "seed": None,
    "video_path": None,
    "fps": None,
    "replica": None,
}


class EvaluationError(Exception):
    """A user error: one line, exit status 1."""


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
    episodes = options["episodes"]
    video = options["video"]
    seed = options["seed"]
    replica = options["replica"]
    for valid, message in (
        (type(episodes) is int and episodes >= 1, f"episodes must be a positive integer, got {episodes!r}"),
        (isinstance(video, bool), f"video must be true or false, got {video!r}"),
        (seed is None or type(seed) is int, f"seed must be an integer, got {seed!r}"),
        (
            replica is None or (type(replica) is int and replica >= 0),
            f"replica must be an integer >= 0, got {replica!r}",
        ),
    ):
        if not valid:
            raise EvaluationError(message)
    options["run_dir"] = os.path.abspath(str(options["run_dir"]))
    return options


def locate_checkpoint(run_dir: str) -> str:
    from rl.checkpointing import CheckpointError, find_latest

    if not os.path.isdir(run_dir):
        raise EvaluationError(f"no run directory at {run_dir}")
    if not os.path.isfile(os.path.join(run_dir, ".hydra", "config.yaml")):
        raise EvaluationError(f"{run_dir} is not a run directory (no .hydra/config.yaml)")
    try:  # The newest undamaged checkpoint, as a resume would pick.
        checkpoint, skipped = find_latest(run_dir, warn=False)
    except CheckpointError as error:
        raise EvaluationError(str(error)) from None
    for path, reason in skipped:
        print(f"Warning: checkpoint {path} is damaged ({reason}); evaluating an older one", file=sys.stderr)
    if checkpoint is None:
        raise EvaluationError(f"no checkpoint in {run_dir}/checkpoints: {why_no_checkpoint(run_dir)}")
    return checkpoint


def why_no_checkpoint(run_dir: str) -> str:
    """Why a run directory holds no checkpoint, from what the run itself wrote (its config, refusal and
    summary): a run writes one at its end, a grid job once it finishes, unless its checkpoints were off."""
    from omegaconf import OmegaConf

    from rl.checkpointing import read_json
    from rl.sweeps.jobs import REFUSED_FILE

    refused = os.path.join(run_dir, REFUSED_FILE)
    if os.path.isfile(refused):
        with open(refused) as file:
            return f"the job was refused before it trained ({file.read().strip()})"
    config = OmegaConf.to_container(OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml"))) or {}
    settings = config.get("checkpoint", True) if isinstance(config, dict) else True
    if settings is False or (isinstance(settings, dict) and settings.get("enabled") is False):
        return "the run ran with its checkpoints off (checkpoint=false)"
    summary = read_json(os.path.join(run_dir, "summary.json"))
    status = summary.get("status")
    if status == "pruned":
        return "its search pruned the run, and a pruned trial keeps none"
    if status == "failed":
        return f"the run failed before writing one ({summary.get('failure') or 'see its train.log'})"
    if "grid" in summary:  # Written by hydra/launcher=anakin_grid, which checkpoints a job when it finishes.
        if status == "finished":
            return "this finished grid job kept none (sweeps from before grid jobs kept their final state wrote none)"
        return f"a grid job keeps its final state once it finishes; this one ended {status}"
    return "the run stopped (or is still running) before its first checkpoint"


def restored_experiment(run_dir: str, seed: int | None) -> tuple[Any, Any, dict[str, Any]]:
    """The run's experiment, writing nothing into the run, its launcher and its W&B settings."""
    from omegaconf import OmegaConf

    from rl.checkpointing import CheckpointError
    from rl.experiments.make_experiment import make_experiment
    from rl.experiments.saved_config import read_saved_config
    from rl.experiments.validation import ConfigError

    try:  # Its classes named where they live now (a run written before one moved names it as it was).
        config = read_saved_config(run_dir)
    except CheckpointError as error:
        raise EvaluationError(str(error)) from None
    if config is None:
        raise EvaluationError(f"{run_dir} is not a run directory (its .hydra/config.yaml holds no mapping)")
    hydra_path = os.path.join(run_dir, ".hydra", "hydra.yaml")
    hydra = OmegaConf.to_container(OmegaConf.load(hydra_path)) if os.path.exists(hydra_path) else {}
    choices = hydra.get("hydra", {}).get("runtime", {}).get("choices", {})
    wandb_config = OmegaConf.to_container(config.logger).get("wandb") or {}
    config.logger = {"_target_": "rl.loggers.DefaultLoggerFactory", "terminal": False, "csv": False, "wandb": None}
    config.observers = {}
    config.progress = False
    config.checkpoint = False
    if seed is not None:
        config.seed = seed
    try:
        experiment, launcher = make_experiment(config, run_dir, choices)
    except ConfigError as error:
        raise EvaluationError(f"the run's config no longer builds an experiment: {error}") from None
    return experiment, launcher, wandb_config


def log_video_to_wandb(run_dir: str, wandb_config: dict[str, Any], video: str, record: dict[str, Any]) -> str:
    """Adds the video to the run's (newest) W&B run, resumed; says why not when it cannot."""
    paths = [os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "wandb", "*run-*-*")) if os.path.isdir(p)]
    if not paths:
        return "the run has no W&B run: the video was not logged to W&B"
    latest = max(paths, key=lambda name: name.split("-", 1)[1])
    run_id = latest.rsplit("-", 1)[1]
    offline = latest.startswith("offline-")
    mode = wandb_config.get("mode") or os.environ.get("WANDB_MODE")
    if mode == "disabled":
        return "W&B is disabled: the video was not logged to W&B"
    if offline or mode in ("offline", "dryrun"):  # A second offline run with its id would clash when synced.
        return (
            f"W&B run {run_id} is offline: the video was not added to it (`wandb sync` the run, then "
            "evaluate again online to add it)"
        )
    import wandb

    where = {"project": wandb_config.get("project"), "entity": wandb_config.get("entity"), "id": run_id, "dir": run_dir}
    with wandb.init(**where, resume="must", mode="online", reinit="finish_previous") as run:
        run.log({**record, "evaluator/video": wandb.Video(video, format="mp4")})
    return f"video logged to W&B run {run_id}"


def learner_states(
    checkpoint: str, experiment: Any, learner: Any, launcher: Any, replica: int | None
) -> list[tuple[str, Any]]:
    """(label, learner state) of what `checkpoint` holds: the learner's, or each replica's (`replica`: one)
    of a launcher=anakin or sebulba run, whose checkpoint holds every replica's learner state."""
    import jax

    from rl.checkpointing import CheckpointError, restore_learner_state

    try:
        stacked = launcher.replica_learners(experiment, checkpoint)
        if stacked is None:
            if replica not in (None, 0):
                raise EvaluationError(
                    f"replica={replica}: the run has one learner (replicas are launcher=anakin's and sebulba's)"
                )
            return [("", restore_learner_state(checkpoint, learner.save()))]
    except CheckpointError as error:
        raise EvaluationError(f"cannot use checkpoint {checkpoint} ({error})") from None
    count = launcher.num_seeds
    if replica is not None and replica >= count:
        raise EvaluationError(f"replica={replica}: the run has {count} replica(s), 0 to {count - 1}")
    chosen = range(count) if replica is None else [replica]
    label = lambda index: f"replica {index} (seed {experiment.seed + index}): "
    row = lambda index: jax.tree_util.tree_map(lambda leaf: leaf[index], stacked)
    return [(label(index), row(index)) for index in chosen]


def play(program: Any, learner: Any, episodes: int, video: bool) -> tuple[list[dict[str, Any]], Any]:
    """`episodes` episodes of the evaluation policy with `learner`'s parameters: (records, the loop)."""
    from rl.counting import Counter
    from rl.environments.specs import RenderingError

    try:
        loop = program.make_evaluator(0, learner, Counter())
    except TypeError as error:
        if not video:
            raise
        raise EvaluationError(f"this environment cannot be made with render_mode='rgb_array' ({error})") from None
    except RenderingError as error:
        raise EvaluationError(str(error)) from None
    try:
        loop.actor.update(wait=True)
        return loop.run_episodes(episodes), loop
    except RenderingError as error:
        raise EvaluationError(str(error)) from None
    finally:
        loop.environment.close()


def describe_returns(label: str, records: list[dict[str, Any]]) -> str:
    import numpy as np

    returns = np.array([record["episode_return"] for record in records], dtype=np.float64)
    return (
        f"{label}mean return {returns.mean():.2f} ± {returns.std():.2f} (std) over {returns.size} episodes [min "
        f"{returns.min():.1f}, max {returns.max():.1f}], mean length {np.mean([r['episode_length'] for r in records]):.1f}"
        f"\n{label}episode returns: " + ", ".join(f"{value:g}" for value in returns.tolist())
    )


def evaluate(options: dict[str, Any]) -> None:
    """Runs the evaluation `options` describe and prints its returns (and where its video went)."""
    run_dir = options["run_dir"]
    checkpoint = locate_checkpoint(run_dir)

    from rl.checkpointing import read_json, read_state
    from rl.counting import Counter
    from rl.experiments.builders import NodeBuilder
    from rl.observers import VideoRecorder

    experiment, launcher, wandb_config = restored_experiment(run_dir, options["seed"])
    video_path = options["video_path"] or os.path.join(
        run_dir, "videos", f"evaluation_{os.path.basename(checkpoint)}_seed{experiment.seed}.mp4"
    )
    program = NodeBuilder(experiment)
    learner = program.make_learner(None, Counter())  # Never stepped.
    states = learner_states(checkpoint, experiment, learner, launcher, options["replica"])
    actor_steps = read_state(checkpoint).get("counts", {}).get("actor_steps")
    print(f"checkpoint {checkpoint} (actor steps {actor_steps}), seed {experiment.seed}")
    recorder = None
    means = []
    for index, (label, state) in enumerate(states):
        video = options["video"] and index == 0  # One video: the first evaluated.
        experiment.observers = [functools.partial(VideoRecorder, every=1, fps=options["fps"], path=video_path)] * video
        learner.restore(state)
        records, loop = play(program, learner, options["episodes"], video)
        means.append(sum(record["episode_return"] for record in records) / len(records))
        print(describe_returns(label, records))
        recorder = recorder or next((o for o in loop.observers if isinstance(o, VideoRecorder)), None)
    final = read_json(os.path.join(run_dir, "summary.json")).get("final_eval_return")
    if final is not None:
        print(f"the run's final evaluation return was {final:.2f}")
    if recorder is not None and recorder.videos:
        print(f"video of one episode ({recorder.video_frames[0]} frames): {recorder.videos[0]}")
        if wandb_config:
            record = {"evaluator/restored_episode_return": float(means[0])}
            if actor_steps is not None:
                record["actor_steps"] = int(actor_steps)
            print(log_video_to_wandb(run_dir, wandb_config, recorder.videos[0], record))


def cli() -> None:
    """The command line: one line on stderr and exit status 1 for a user error."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # Headless rendering (pygame).
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        evaluate(parse_arguments(sys.argv[1:]))
    except EvaluationError as error:
        print(f"evaluate.py: {error}", file=sys.stderr)
        sys.exit(1)
