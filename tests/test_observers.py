"""Observers in actor and evaluator loops, evaluators as loops, several evaluators."""

from __future__ import annotations

import csv
import functools
import glob
import os

import imageio_ffmpeg
import jax
import numpy as np
import pytest
import reverb
from hydra import compose, initialize_config_dir

from conftest import ROOT, read_summary, run_train
from rl.counting import Counter
from rl.environment_loop import EnvironmentLoop
from rl.environments.factories import make_gymnasium_environment
from rl.environments.vector import VectorEnvironment
from rl.experiments.builders import build_actor, build_evaluator, build_learner
from rl.local import LocalLauncher
from rl.experiments.make_experiment import make_experiment
from rl.observers import ActionStatistics, Observer, VideoRecorder

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

TINY = ["max_actor_steps=1000", "eval_every=500", "eval_episodes=2", "agent.min_replay_size=200", "progress=false"]


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def _experiment(overrides, run_directory):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    return make_experiment(config, str(run_directory), {})


class Steps(Observer):
    """Counts the steps each copy took in its episode."""

    def observe_first(self, environment, timestep, env_ids):
        if not hasattr(self, "steps"):
            self.steps = np.zeros(environment.num_envs, np.int64)
        self.steps[env_ids] = 0

    def observe(self, environment, timestep, actions, env_ids):
        self.steps[env_ids] += 1

    def get_metrics(self, env_id):
        return {"observed_steps": int(self.steps[env_id])}


def test_action_statistics_per_copy_with_a_histogram():
    environment = VectorEnvironment([make_gymnasium_environment("CartPole-v1", seed=s) for s in (0, 1)])
    observer = ActionStatistics()
    timestep = environment.reset()
    observer.observe_first(environment, timestep, np.arange(2))
    for actions in ([0, 1], [0, 1], [1, 1]):
        observer.observe(environment, timestep, np.array(actions), np.arange(2))
    observer.observe(environment, timestep, np.array([0]), np.array([0]))  # Copy 0 alone.
    first, second = observer.get_metrics(0), observer.get_metrics(1)
    assert first == {
        "action_mean": 0.25,
        "action_std": pytest.approx(np.std([0, 0, 1, 0])),
        "action_min": 0.0,
        "action_max": 1.0,
        "action_0_fraction": 0.75,
        "action_1_fraction": 0.25,
    }
    assert second["action_mean"] == 1.0 and second["action_std"] == 0.0 and second["action_0_fraction"] == 0.0
    observer.observe_first(environment, timestep, np.array([1]))  # Copy 1 starts over; copy 0 keeps its counts.
    assert observer.get_metrics(1) == {} and observer.get_metrics(0) == first


def test_loops_get_their_own_configured_observers_and_merge_their_metrics(tmp_path):
    experiment, _ = _experiment(["observers=[action_stats]", "eval_episodes=3"], tmp_path)
    experiment.observers = [*experiment.observers, Steps]
    counter = Counter()
    server = reverb.Server(experiment.builder.make_replay_tables(experiment.environment_spec), port=None)
    learner = build_learner(experiment, jax.random.PRNGKey(0), None, counter)  # Serves its initial parameters.
    client = reverb.Client(f"localhost:{server.port}")
    actor = build_actor(experiment, jax.random.PRNGKey(1), client, learner, counter, actor_id=0)
    evaluator = build_evaluator(experiment, jax.random.PRNGKey(2), learner, counter, instance=1)
    for loop, label, instance in ((actor, "actor", 0), (evaluator, "evaluator", 1)):
        assert isinstance(loop, EnvironmentLoop)
        assert [type(o) for o in loop.observers] == [ActionStatistics, Steps]
        assert all((o.label, o.instance, o.run_directory) == (label, instance, str(tmp_path)) for o in loop.observers)
    assert not set(map(id, actor.observers)) & set(map(id, evaluator.observers))  # Each loop its own.

    (record,) = actor.run_episodes(1)
    server.stop()
    assert record["observed_steps"] == record["episode_length"] and 0.0 <= record["action_mean"] <= 1.0
    round_record = evaluator.run_evaluation(3)
    assert round_record["episodes"] == 3 and round_record["observed_steps"] == round_record["episode_length"]
    assert round_record["action_0_fraction"] + round_record["action_1_fraction"] == pytest.approx(1.0)
    assert round_record["evaluator_episodes"] == 3


def test_observers_reach_the_logs_and_video_is_recorded_during_training(run_dir):
    """observers=[action_stats,video]: action statistics in actor.csv and evaluator.csv,
    one CartPole MP4 per evaluation round."""
    result = run_train([*TINY, "observers=[action_stats,video]", "observers.video.every=1", f"hydra.run.dir={run_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    actor_rows = _rows(os.path.join(run_dir, "logs", "actor.csv"))
    evaluator_rows = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    for rows in (actor_rows, evaluator_rows):
        assert rows and all(0.0 <= float(row["action_mean"]) <= 1.0 for row in rows)
        assert all(
            float(row["action_0_fraction"]) + float(row["action_1_fraction"]) == pytest.approx(1.0) for row in rows
        )
    assert "video" not in actor_rows[0]  # The recorder runs in evaluators only.
    videos = sorted(glob.glob(os.path.join(run_dir, "videos", "*.mp4")))
    rounds = [f"evaluator_0_episode_{index}.mp4" for index in (1, 2, 3)]  # At 0 (untrained), 500 and 1000.
    assert [os.path.basename(v) for v in videos] == rounds
    assert [row["video"] for row in evaluator_rows] == videos
    frames, _ = imageio_ffmpeg.count_frames_and_secs(videos[-1])
    assert 1 < frames <= 501  # A CartPole episode: its first frame and one per step.
    assert read_summary(run_dir)["actor_steps"] == 1000


def test_two_evaluator_factories_log_rows_by_instance_and_the_summary_averages_them(tmp_path):
    experiment, _ = _experiment(TINY, tmp_path)
    default = functools.partial(build_evaluator, experiment)
    experiment.evaluator_factories = [default, default]
    summary = LocalLauncher()(experiment)
    rows = _rows(os.path.join(tmp_path, "logs", "evaluator.csv"))
    by_instance = {i: [row for row in rows if row["evaluator_id"] == i] for i in ("0", "1")}
    assert [int(row["actor_steps"]) for row in by_instance["0"]] == [0, 500, 1000]
    assert [int(row["actor_steps"]) for row in by_instance["1"]] == [0, 500, 1000]
    means = [
        (float(a["episode_return"]) + float(b["episode_return"])) / 2
        for a, b in zip(by_instance["0"], by_instance["1"])
    ]
    assert [value for _, value in summary.eval_returns] == pytest.approx(means)
    # Each instance has its own key: their environments are seeded differently.
    assert [row["episode_return"] for row in by_instance["0"]] != [row["episode_return"] for row in by_instance["1"]]


def test_video_recorder_every_nth_episode_of_copy_0(tmp_path):
    environment = VectorEnvironment(
        [make_gymnasium_environment("CartPole-v1", seed=s, render_mode="rgb_array") for s in (0, 1)]
    )
    recorder = VideoRecorder(every=2, run_directory=str(tmp_path), label="evaluator", instance=3)
    videos = []
    for _ in range(4):
        timestep = environment.reset()
        recorder.observe_first(environment, timestep, np.arange(2))
        for _ in range(5):
            recorder.observe(environment, environment.step(np.array([0, 1])), np.array([0, 1]), np.arange(2))
        assert recorder.get_metrics(1) == {}
        videos.append(recorder.get_metrics(0).get("video"))
    paths = [os.path.join(tmp_path, "videos", f"evaluator_3_episode_{n}.mp4") for n in (1, 3)]
    assert videos == [paths[0], None, paths[1], None]
    assert imageio_ffmpeg.count_frames_and_secs(paths[0])[0] == 6  # The first frame and five steps.
    environment.close()
