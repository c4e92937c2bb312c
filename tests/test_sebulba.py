"""launcher=sebulba: host environments (ale-py's vector environment, dm_env copies), the actor threads' hand-over
(parameters by version, blocks by plan), runs end to end on Atari and MuJoCo, learning, stop and resume with the
replay restored exactly, refusals. Most subjects are the same on both stacks and run once (the current part); the
learning run runs on both."""

from __future__ import annotations

import csv
import os
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, read_summary, run_train, start_train, terminate_once_written
from rl.experiments.make_experiment import make_experiment
from rl.experiments.validation import ConfigError

CONF = os.path.join(ROOT, "conf")

# SAC on gymnasium's Pendulum under launcher=sebulba, small enough for a test.
SAC_PENDULUM = ["experiment=sac_pendulum", "launcher=sebulba", "logger=csv", "progress=false"]


def compose_experiment(overrides: list[str], run_dir: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    return make_experiment(config, run_dir, {"agent": config.agent._target_.split(".")[-2]})


def rows(path: str) -> list[dict[str, str]]:
    with open(path) as file:
        return list(csv.DictReader(file))


# --------------------------------------------------------------------------- host environments


@pytest.mark.current
def test_ale_vector_ends_an_episode_at_a_lost_life_and_scores_whole_games():
    """DQN's episodic life: a lost life ends the learner's episode with discount 0 and the game plays on with
    the lives left (Breakout: four such episodes, then the game over), its score the whole game's, unclipped,
    while the learner's rewards are clipped; frames come last, uint8; the same seeds play the same game."""
    from rl.environments.atari import AleVector

    settings = dict(name="Breakout", episodic_life=True, reward_clip=True, repeat_action_probability=0.0)
    environment = AleVector([3, 4], num_threads=2, **settings)
    observation = environment.reset()
    assert observation.shape == (2, 84, 84, 4) and observation.dtype == np.uint8
    random = np.random.default_rng(0)
    lives_lost, clipped, games = np.zeros(2, int), np.zeros(2), 0
    for _ in range(1500):
        step = environment.step(random.integers(0, 4, 2))
        assert set(np.unique(step.reward)) <= {-1.0, 0.0, 1.0}
        assert np.all(step.discount[step.done] == 0.0)
        clipped += step.reward
        scores = environment.game_scores()
        game_over = ~np.isnan(scores)
        lives_lost += step.done & ~game_over
        for copy in np.flatnonzero(game_over):
            assert lives_lost[copy] == 4, lives_lost
            assert scores[copy] >= clipped[copy]  # Breakout's bricks are worth 1, 4 or 7 points.
            lives_lost[copy], clipped[copy], games = 0, 0.0, games + 1
    environment.close()
    assert games >= 2
    twin = AleVector([3, 4], num_threads=1, **settings)
    np.testing.assert_array_equal(twin.reset(), observation)
    twin.close()


@pytest.mark.current
def test_dm_env_copies_reset_within_the_step_and_tell_truncation():
    """A copy whose episode ends is reset before `step` returns: `observation` is the new episode's first,
    `final_observation` the ended one's last; the time limit is a truncation (discount 1), the episode's return
    and length come with its last step."""
    from rl.environments.factories import make_gymnasium_environment
    from rl.environments.host import DmEnvCopies

    factory = lambda seed: make_gymnasium_environment("CartPole-v1", seed, max_episode_steps=5)
    environment = DmEnvCopies.make(factory, [0, 1])
    first = environment.reset()
    for t in range(5):
        step = environment.step(np.zeros(2, np.int32))
        if t < 4:
            assert not step.done.any()
            continue
    assert step.done.all() and step.truncated.all() and np.all(step.discount == 1.0)
    assert np.all(step.episode_length == 5) and np.all(step.episode_return == 5.0)
    assert not np.array_equal(step.observation, step.final_observation)
    again = DmEnvCopies.make(factory, [0, 1])
    np.testing.assert_array_equal(again.reset(), first)  # Seeded copies.
    environment.close()
    again.close()


def test_copies_in_worker_processes_step_as_the_same_copies_in_the_thread():
    """ProcessCopies (evaluation rounds' route) answers every step exactly as DmEnvCopies with the same seeds,
    resets within the step included; `reseed` makes new copies in the same workers; a worker's error is raised
    in the caller with its traceback; `close` ends every worker."""
    import functools

    from rl.environments.factories import make_gymnasium_environment
    from rl.environments.host import DmEnvCopies
    from rl.environments.host_processes import ProcessCopies

    factory = functools.partial(make_gymnasium_environment, "CartPole-v1", max_episode_steps=7)
    seeds = [3, 4, 5]
    here, there = DmEnvCopies.make(factory, seeds), ProcessCopies(factory, seeds, processes=2)
    try:
        np.testing.assert_array_equal(there.reset(), here.reset())
        actions = np.random.default_rng(0).integers(0, 2, (20, 3)).astype(np.int32)
        for action in actions:
            for mine, theirs in zip(here.step(action), there.step(action)):
                np.testing.assert_array_equal(theirs, mine)
        there.reseed([7, 8, 9])
        np.testing.assert_array_equal(there.reset(), DmEnvCopies.make(factory, [7, 8, 9]).reset())
        with pytest.raises(RuntimeError, match="environment worker 0 failed"):
            there.step(np.array([5, 0, 0], np.int32))  # CartPole has two actions.
    finally:
        workers = list(there.workers)
        there.close()
        here.close()
    assert len(workers) == 2 and not any(worker.is_alive() for worker in workers)


# --------------------------------------------------------------------------- the hand-over


@pytest.mark.current
def test_block_j_acts_with_the_parameters_of_update_j_minus_the_lag():
    """Block j waits for version j - lag, whatever the threads' timing (a resumed run's first blocks get the
    restored version); older versions are dropped once no block can ask for them."""
    from rl.sebulba.actors import ParamsBoard

    board = ParamsBoard(version=10, params="restored", lag=1, stop=threading.Event())
    assert board.for_block(10) == board.for_block(11) == "restored"
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(board.for_block(13)))
    waiter.start()
    board.publish(11, "after 11")
    time.sleep(0.2)
    assert not got  # Block 13 needs version 12.
    board.publish(12, "after 12")
    waiter.join(timeout=5)
    assert got == ["after 12"]
    assert board.for_block(12) == "after 11" and board.latest() == "after 12"
    board.publish(13, "after 13")
    assert board.for_block(14) == "after 13" and board.for_block(13) == "after 12"


@pytest.mark.current
def test_the_plan_lets_threads_take_only_the_blocks_allowed_and_a_hold_keeps_those_begun():
    from rl.sebulba.actors import BlockPlan, Stopped

    stop = threading.Event()
    plan = BlockPlan(blocks=0, stop=stop)
    plan.allow(2)
    plan.begin(0, 0)
    plan.begin(0, 1)
    plan.begin(1, 0)
    assert plan.hold(taken=1) == 2  # Thread 0 began block 1: both threads step it before the run pauses.
    stop.set()
    with pytest.raises(Stopped):
        plan.begin(1, 2)


@pytest.mark.current
def test_the_minibatch_gather_takes_frames_and_32_bit_leaves_exactly():
    """PPO's and PQN's minibatches: uint8 frames gathered on their own, 32-bit and bool leaves as packed rows,
    each exactly `leaf[order]`."""
    from rl.agents.on_policy import row_gatherer

    key = jax.random.PRNGKey(0)
    tree = {
        "frames": jax.random.randint(key, (12, 6, 6, 4), 0, 256).astype(jnp.uint8),
        "value": jax.random.normal(key, (12,)),
        "action": jnp.arange(12, dtype=jnp.int32),
        "mask": jnp.arange(12) % 3 == 0,
    }
    order = jnp.array([[5, 0, 11], [2, 2, 7]])
    gathered = row_gatherer(tree)(order)
    for name, leaf in tree.items():
        assert gathered[name].dtype == leaf.dtype
        np.testing.assert_array_equal(gathered[name], leaf[order])


# --------------------------------------------------------------------------- runs


def test_sac_learns_pendulum_under_sebulba(tmp_path):
    """Seed 0, 12,000 steps (measured: -139 at the end, from about -1,200 untrained); the run's programs, its
    threads and its host environments on whichever stack runs the test."""
    result = run_train([*SAC_PENDULUM, "max_actor_steps=12000", "eval_every=4000", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(tmp_path))
    assert summary["status"] == "finished" and summary["actor_steps"] == 12000
    assert summary["final_eval_return"] > -400, summary["eval_returns"]
    assert summary["launcher"] == "sebulba"
    spent = summary["time_s"]
    assert {"actors_environment_s", "actors_policy_s", "learner_waiting_s", "learner_updating_s"} <= set(spent)
    step = summary["actor_step_ms"]  # One thread's step after its first two blocks, by part.
    assert set(step) == {"environment", "policy", "waiting", "handoff"}
    assert all(value >= 0 for value in step.values()) and step["environment"] > 0 and step["policy"] > 0


ATARI_TINY = [
    "experiment=ppo_atari",
    "max_actor_steps=512",
    "eval_every=512",
    "eval_episodes=1",
    "environment.max_episode_steps=200",
    "environment.num_envs=2",
    "launcher.actor_threads=2",
    "agent.unroll_length=32",
    "agent.num_epochs=1",
    "agent.num_minibatches=1",
    "logger=csv",
    "progress=false",
]


@pytest.mark.current
def test_a_small_ppo_plays_pong_end_to_end(tmp_path):
    """ppo_atari on Pong, two threads of two copies: four updates of 128 steps, an evaluation game, the
    records, the checkpoint, and scripts/evaluate.py on it."""
    result = run_train([*ATARI_TINY, f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(tmp_path))
    assert summary["status"] == "finished" and summary["actor_steps"] == 512 and summary["learner_steps"] == 4
    assert summary["actor_threads"] == 2 and [s for s, _ in summary["eval_returns"]] == [0, 512]
    learner = rows(os.path.join(tmp_path, "logs", "learner.csv"))
    assert [int(row["actor_steps"]) for row in learner] == [128, 256, 384, 512]
    assert all(np.isfinite(float(row["loss"])) for row in learner)
    evaluation = _evaluate(str(tmp_path))
    assert evaluation.returncode == 0, evaluation.stderr[-2000:]
    assert "replica 0 (seed 0): mean return" in evaluation.stdout


def _evaluate(run_dir: str, *options: str):
    import subprocess
    import sys

    command = [
        sys.executable,
        os.path.join(ROOT, "scripts", "evaluate.py"),
        f"run_dir={run_dir}",
        "episodes=1",
        *options,
    ]
    environment = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)


@pytest.mark.current
def test_sac_on_halfcheetah_with_two_seeds_writes_a_run_per_seed(tmp_path):
    """Two replicas of SAC on HalfCheetah-v5 in one program, a copy of each in each of two threads, evaluation
    rounds stepped by worker processes: each replica writes its own directory and summary; the run's summary
    holds both."""
    overrides = [
        "experiment=sac_mujoco",
        "launcher.num_seeds=2",
        "launcher.actor_threads=2",
        "launcher.block_length=16",
        "max_actor_steps=1024",
        "eval_every=512",
        "eval_episodes=1",
        "environment.max_episode_steps=100",
        "agent.min_replay_size=256",
        "policy.warmup_steps=256",
        "launcher.evaluation_processes=2",  # Evaluation rounds in worker processes.
        "logger=csv",
        "progress=false",
        f"hydra.run.dir={tmp_path}",
    ]
    result = run_train(overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(tmp_path))
    assert summary["num_seeds"] == 2 and [r["seed"] for r in summary["replicas"]] == [0, 1]
    spent = summary["time_s"]  # Rounds played on their thread, and the final one waited for.
    assert spent["evaluation_playing_s"] > 0 and spent["evaluation_waited_s"] > 0
    for index in range(2):
        replica = read_summary(os.path.join(tmp_path, f"seed_{index}"))
        assert replica["actor_steps"] == 1024 and replica["status"] == "finished"
        # Updates of 16 steps of 2 copies: 32 SGD steps each once 256 steps are in, from the 8th of 32 on.
        assert replica["learner_steps"] == 25 * 32
        assert len(rows(os.path.join(tmp_path, f"seed_{index}", "logs", "evaluator.csv"))) == 3  # 0 and two.
    assert "Evaluation returns of each of the 2 replicas" in result.stdout


def _checkpointed_buffer(run_dir: str, steps: int):
    """The replay of every replica in the run's checkpoint at `steps` (restored as a resume would)."""
    from omegaconf import OmegaConf

    from rl.checkpointing import restore_learner_state

    config = OmegaConf.load(os.path.join(run_dir, ".hydra", "config.yaml"))
    experiment, launcher = make_experiment(config, run_dir, {"agent": "sac"})
    template = launcher.checkpoint_template(experiment)
    state = restore_learner_state(os.path.join(run_dir, "checkpoints", f"step_{steps}"), template)
    return state.buffer.experience


@pytest.mark.current
def test_a_stopped_run_resumes_with_its_replay_restored_exactly(tmp_path):
    """SIGTERM mid-run: exit 143 and a checkpoint; the same command resumes from it and finishes, its learner
    rows continuing without a gap or a repeat, and the replay the resumed run kept holds the stopped run's
    steps unchanged (learner and replay are restored exactly; the environments start new episodes)."""
    arguments = [
        *SAC_PENDULUM,
        "max_actor_steps=8192",
        "eval_every=1024",
        "checkpoint.keep=10",
        f"hydra.run.dir={tmp_path}",
    ]
    process = start_train(arguments)
    stderr = terminate_once_written(process, os.path.join(tmp_path, "logs", "evaluator.csv"), rows=3)
    assert process.returncode == 143, stderr[-2000:]
    stopped = read_summary(str(tmp_path))
    assert stopped["status"] == "interrupted" and 2048 <= stopped["actor_steps"] < 8192
    stopped_at = stopped["actor_steps"]

    resumed = run_train(arguments)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = read_summary(str(tmp_path))
    assert summary["status"] == "finished" and summary["actor_steps"] == 8192
    steps = [int(row["actor_steps"]) for row in rows(os.path.join(tmp_path, "logs", "learner.csv"))]
    assert steps == sorted(set(steps)) and steps[-1] == 8192
    assert [s for s, _ in summary["eval_returns"]] == list(range(0, 8193, 1024))

    before, after = _checkpointed_buffer(str(tmp_path), stopped_at), _checkpointed_buffer(str(tmp_path), 8192)
    kept = stopped_at  # One copy: the stopped run's steps are the first `stopped_at` rows of its time axis.
    for old, new in zip(jax.tree_util.tree_leaves(before), jax.tree_util.tree_leaves(after)):
        np.testing.assert_array_equal(np.asarray(old)[:, :, :kept], np.asarray(new)[:, :, :kept])
    assert not np.array_equal(np.asarray(before.observation)[:, :, kept:], np.asarray(after.observation)[:, :, kept:])


def _launch_as_train_does(run_dir: str, overrides: list[str]):
    """compose, prepare_run, apply_plan, launch: rl/train.py's steps, in this process."""
    from rl.experiments.resume import apply_plan, prepare_run

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, launcher = make_experiment(config, run_dir, {"agent": "sac"})
    plan = prepare_run(experiment, config, run_dir, learner_template=launcher.checkpoint_template)
    return launcher(apply_plan(plan, experiment))


@pytest.mark.current
def test_a_stop_while_a_round_plays_keeps_the_round_and_resumes_after_it(tmp_path, monkeypatch):
    """Evaluation rounds play on their own thread beside acting. A stop requested while the round at 1,024
    plays (the round goes on only once the run has seen the stop) lets that round end: its rows are written at
    1,024 and the checkpoint's curve holds it. The same command resumes after it, never playing it again, and
    its curve and evaluator rows hold every round once."""
    import signal

    from rl.experiments.signals import RunInterrupted
    from rl.sebulba.nodes import SebulbaNodes

    play = SebulbaNodes.play_round
    played: list[int] = []

    def stop_while_playing(self, steps, params):
        played.append(steps)
        if steps == 1024:
            os.kill(os.getpid(), signal.SIGTERM)
            while self.context.stop.signum is None:  # The run has seen the stop before the round plays.
                time.sleep(0.01)
        return play(self, steps, params)

    monkeypatch.setattr(SebulbaNodes, "play_round", stop_while_playing)
    run_dir = str(tmp_path)
    overrides = [
        *SAC_PENDULUM,
        "max_actor_steps=4096",
        "eval_every=1024",
        "eval_episodes=2",
        "agent.min_replay_size=256",
        f"hydra.run.dir={run_dir}",
    ]
    with pytest.raises(RunInterrupted):
        _launch_as_train_does(run_dir, overrides)
    stopped = read_summary(run_dir)
    evaluated = lambda: [int(row["actor_steps"]) for row in rows(os.path.join(run_dir, "logs", "evaluator.csv"))]
    assert stopped["status"] == "interrupted" and stopped["actor_steps"] >= 1024
    assert played == [0, 1024] and evaluated() == [0, 1024]
    assert [steps for steps, _ in stopped["eval_returns"]] == [0, 1024]

    played.clear()
    monkeypatch.setattr(
        SebulbaNodes, "play_round", lambda self, steps, params: played.append(steps) or play(self, steps, params)
    )
    summary = _launch_as_train_does(run_dir, overrides)
    assert summary.status == "finished" and played == [2048, 3072, 4096]  # The last in the run's own thread.
    assert evaluated() == [0, 1024, 2048, 3072, 4096]
    assert [steps for steps, _ in read_summary(run_dir)["eval_returns"]] == [0, 1024, 2048, 3072, 4096]


# --------------------------------------------------------------------------- refusals


@pytest.mark.current
@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["agent=r2d2", "environment=cartpole_masked"], "agent", "launcher=sebulba does not compile agent=r2d2"),
        (["experiment=ppo_gymnax_cartpole"], "launcher", "use launcher=anakin"),
        (["experiment=sac_pendulum", "observers=[action_stats]"], "observers", "launcher=sebulba runs no observers"),
        (["experiment=sac_pendulum", "launcher.num_seeds=0"], "launcher.num_seeds", "must be an integer >= 1"),
        (["experiment=sac_pendulum", "launcher.policy_lag=-1"], "launcher.policy_lag", "must be an integer >= 0"),
        (["experiment=sac_pendulum", "launcher.actor_device=gpu"], "launcher.actor_device", "must be one of"),
    ],
)
def test_refusals_name_the_key(tmp_path, overrides, key, words):
    with pytest.raises(ConfigError) as caught:
        compose_experiment([*overrides, "launcher=sebulba"], str(tmp_path))
    assert caught.value.key == key
    assert words in str(caught.value)


@pytest.mark.reverb  # envpool is installed on the reverb stack only.
def test_envpool_is_refused_with_the_route_sebulba_takes(tmp_path):
    with pytest.raises(ConfigError) as caught:
        compose_experiment(
            ["experiment=sac_pendulum", "environment.backend=envpool", "launcher=sebulba"], str(tmp_path)
        )
    assert caught.value.key == "environment.backend"
    assert "set environment.backend=gymnasium" in str(caught.value)


@pytest.mark.current
def test_an_off_policy_ratio_follows_the_block_and_a_rollout_batch_the_copies(tmp_path, caplog):
    """SAC's samples_per_insert becomes whole SGD steps per block; PPO's batch is one rollout of each copy of
    a replica (num_envs x actor_threads); budgets round to whole updates; each said once in the log."""
    import logging

    with caplog.at_level(logging.WARNING, logger="rl.experiments.compiled"):
        experiment, _ = compose_experiment(
            [*SAC_PENDULUM, "agent.samples_per_insert=100", "launcher.block_length=8"], str(tmp_path / "sac")
        )
    assert experiment.builder.config.samples_per_insert == 96.0  # 8 steps x 100 / 128 = 6.25 SGD steps: 6.
    said = [record.getMessage().split(" ")[1] for record in caplog.records]
    assert said == ["agent.samples_per_insert=100.0"], said
    experiment, _ = compose_experiment(
        ["experiment=ppo_cartpole", "launcher=sebulba", "launcher.actor_threads=2", "max_actor_steps=10000"],
        str(tmp_path / "ppo"),
    )
    assert experiment.builder.config.batch_size == 16 and experiment.max_actor_steps == 10240


@pytest.mark.current
def test_a_budget_of_whole_intervals_ends_with_one_round(tmp_path, caplog):
    """eval_every is rounded up to whole updates (32 steps here), said in the log, not warned of: a budget of two
    asked intervals (20,000 = 2 x 10,000) evaluates at 10,016 and at its end, not also at 19,968 one update
    before it."""
    import logging

    from rl.experiments.lifecycle import next_evaluation

    with caplog.at_level(logging.INFO, logger="rl.experiments.compiled"):
        experiment, _ = compose_experiment([*SAC_PENDULUM, "max_actor_steps=20000", "eval_every=10000"], str(tmp_path))
    assert experiment.eval_every == 10016 and experiment.max_actor_steps == 20000
    rounds, steps = [], 0
    while steps < experiment.max_actor_steps:
        steps = next_evaluation(experiment, steps)
        rounds.append(steps)
    assert rounds == [10016, 20000]
    said = [(record.levelname, record.getMessage()) for record in caplog.records if "eval_every" in record.getMessage()]
    assert said == [
        ("INFO", "launcher=sebulba: eval_every=10000 rounded up to 10016, whole updates of 32 environment steps")
    ]


@pytest.mark.current
def test_the_fastest_device_is_timed_on_the_call_itself():
    """launcher.actor_device=auto's choice: each device's median of the policy call (placed there), after a first
    call that compiles; here the one CPU."""
    from rl.sebulba.programs import fastest_device

    cpu = jax.devices("cpu")[0]
    calls = []
    act = jax.jit(lambda params, observations: params * observations.sum())
    device, seconds = fastest_device(lambda *a: calls.append(1) or act(*a), (np.float32(2), np.ones(3)), [cpu], calls=5)
    assert device == cpu and list(seconds) == [cpu.device_kind] and seconds[cpu.device_kind] > 0
    assert len(calls) == 6  # The compiling call, then the five timed.


@pytest.mark.current
def test_a_sebulba_run_is_a_wandb_run_with_its_curves(tmp_path):
    """logger=wandb (offline): the composed config is the run's config, its learner, actor and evaluator records
    its history, and it ends with exit code 0."""
    from conftest import read_wandb_offline_run

    overrides = [*SAC_PENDULUM, "logger=wandb", "max_actor_steps=2048", "eval_every=1024"]
    result = run_train([*overrides, "agent.min_replay_size=512", f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    run = read_wandb_offline_run(str(tmp_path))
    assert run["config"]["launcher"]["_target_"] == "rl.sebulba.SebulbaLauncher" and run["exit_code"] == 0
    evaluations = [row for row in run["history"] if "evaluator/episode_return" in row]
    assert [row["actor_steps"] for row in evaluations] == [0, 1024, 2048]
    assert any("learner/critic_loss" in row for row in run["history"])


@pytest.mark.current
def test_a_host_rollout_with_each_copys_truncated_observation_learns_as_the_whole_rollout_does(tmp_path):
    """On-policy host blocks carry each copy's last truncated observation (N, ...) instead of every step's next
    one (T, N, ...): the update bootstraps the truncated rows from the same values, so it is the anakin system's
    update on the whole rollout."""
    from rl.environments.gymnax_vector import EnvStep
    from rl.experiments.compiled import make_system
    from rl.sebulba.programs import host_inputs
    from rl.sebulba.settings import SebulbaSettings
    from rl.systems.base import Trajectory

    experiment, _ = compose_experiment(["experiment=ppo_cartpole", "launcher=sebulba"], str(tmp_path))
    system = make_system(experiment, inputs=host_inputs(experiment, SebulbaSettings()))
    T, N = experiment.builder.config.unroll_length, experiment.num_envs
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    observation = jax.random.normal(keys[0], (T, N, 4))
    finals = jax.random.normal(keys[1], (T, N, 4))
    truncated = jnp.zeros((T, N), bool).at[jnp.array([3, 17, 30]), jnp.array([0, 2, 5])].set(True)
    terminated = jnp.zeros((T, N), bool).at[jnp.array([9, 9]), jnp.array([1, 2])].set(True)
    done = truncated | terminated
    step = EnvStep(
        observation=None,
        reward=jax.random.uniform(keys[2], (T, N)),
        discount=1.0 - terminated.astype(jnp.float32),
        done=done,
        truncated=truncated,
        final_observation=finals,
        episode_return=None,
        episode_length=None,
    )
    actions = jax.random.randint(keys[3], (T, N), 0, 2)
    rollout = Trajectory(observation, actions, {"log_prob": jnp.full((T, N), -0.69)}, step)
    per_copy = jnp.zeros((N, 4)).at[jnp.array([0, 2, 5])].set(finals[jnp.array([3, 17, 30]), jnp.array([0, 2, 5])])
    block = rollout._replace(step=step._replace(final_observation=per_copy))
    learner = system.init_learner(jax.random.PRNGKey(0))
    last = jax.random.normal(keys[0], (N, 4))
    whole, whole_metrics = jax.jit(system.learn)(learner, rollout, last)
    host, host_metrics = jax.jit(system.learn_block)(learner, block, last)
    for a, b in zip(jax.tree_util.tree_leaves(whole), jax.tree_util.tree_leaves(host)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(whole_metrics["loss"], host_metrics["loss"], rtol=1e-5)
