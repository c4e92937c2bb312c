"""environment=atari, the convolutional networks, their refusals and pixel smoke runs."""

from __future__ import annotations

import os

import dm_env
import jax
import numpy as np
import pytest

from conftest import read_summary, run_train
from test_config import build
from rl.environments.atari import make_atari_environment, make_atari_envpool
from rl.environments.backends import envpool_factory
from rl.experiments.validation import ConfigError
from rl.networks import conv
from rl.core import make_environment_spec

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb


FRAMES = (84, 84, 4)


def play(environment, steps: int, seed: int = 0, num_actions: int = 4) -> list[dm_env.TimeStep]:
    """Random actions for `steps` steps of a dm_env (restarting after a last step)."""
    rng = np.random.default_rng(seed)
    timesteps = [environment.reset()]
    for _ in range(steps):
        timesteps.append(environment.step(int(rng.integers(num_actions))))
    return timesteps


# --------------------------------------------------------------------------- environment


@pytest.fixture(scope="module")
def pong():
    environment = make_atari_environment(seed=0)
    yield environment
    environment.close()


def test_frames_are_uint8_channels_last_and_stacked_oldest_first(pong):
    spec = make_environment_spec(pong)
    assert spec.observations.shape == FRAMES and spec.observations.dtype == np.uint8
    assert spec.actions.num_values == 6  # Pong's minimal action set (full_action_space=false).
    first = pong.reset().observation
    assert first.shape == FRAMES and first.dtype == np.uint8 and first.flags["C_CONTIGUOUS"]
    assert all(np.array_equal(first[..., 0], first[..., k]) for k in range(4))  # A reset fills the stack.
    previous = first
    for _ in range(3):
        observation = pong.step(0).observation
        np.testing.assert_array_equal(observation[..., :3], previous[..., 1:])  # Shifted by one frame.
        previous = observation
    for _ in range(60):  # Pong serves after a pause: the newest frame, last, then shows play.
        observation = pong.step(0).observation
    assert not np.array_equal(observation[..., 3], first[..., 0])


def test_the_standard_preprocessing_is_configured(pong):
    wrappers = []
    environment = pong.gymnasium_environment
    while hasattr(environment, "env"):
        wrappers.append(environment)
        environment = environment.env
    preprocessing = next(w for w in wrappers if type(w).__name__ == "AtariPreprocessing")
    assert (preprocessing.noop_max, preprocessing.frame_skip, preprocessing.screen_size) == (30, 4, (84, 84))
    assert preprocessing.grayscale_obs and not preprocessing.scale_obs
    ale = environment.unwrapped.ale
    assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)  # Sticky actions, as v5.
    assert ale.getInt("frame_skip") == 1  # The preprocessing skips (and max-pools) frames itself.
    assert ale.getInt("max_num_frames_per_episode") == 108_000


def test_envpool_backend_gives_the_same_spec(pong):
    spec = make_environment_spec(pong)
    options = {"_target_": "rl.environments.atari.make_atari_environment", "name": "Pong", "noop_max": 30}
    pool = envpool_factory(options, spec)(seed=3, num_envs=2)
    theirs = pool.observation_spec()
    assert (theirs.shape, theirs.dtype) == (spec.observations.shape, spec.observations.dtype)
    assert np.all(theirs.minimum == spec.observations.minimum) and np.all(theirs.maximum == spec.observations.maximum)
    assert pool.action_spec().num_values == spec.actions.num_values
    first = pool.reset()
    assert first.observation.shape == (2, *FRAMES) and first.observation.dtype == np.uint8
    step = pool.step(np.zeros(2, np.int32))
    assert step.observation.shape == (2, *FRAMES) and step.reward.dtype == np.float32
    np.testing.assert_array_equal(step.observation[..., :3], first.observation[..., 1:])
    pool.close()


def test_reward_clipping_acts_on_both_backends():
    """Space Invaders pays 5 to 30 points a kill; clipped, every reward is its sign."""
    rewards = {}
    for clip in (False, True):
        timesteps = play(
            make_atari_environment(seed=0, name="SpaceInvaders", noop_max=0, reward_clip=clip), 200, num_actions=6
        )
        rewards[clip] = {float(t.reward) for t in timesteps if t.reward is not None}
    assert max(rewards[False]) >= 5 and rewards[True] <= {-1.0, 0.0, 1.0} and 1.0 in rewards[True]
    pool = make_atari_envpool(seed=0, num_envs=2, name="SpaceInvaders", reward_clip=True)
    pool.reset()
    seen = {float(r) for _ in range(200) for r in pool.step(np.full(2, 1, np.int32)).reward}
    assert seen <= {-1.0, 0.0, 1.0} and 1.0 in seen


def test_episodic_life_ends_an_episode_per_life_and_plays_on():
    environment = make_atari_environment(seed=0, name="Breakout", episodic_life=True)
    ale = environment.gymnasium_environment.unwrapped.ale
    rng = np.random.default_rng(0)
    for lives_left in (4, 3):
        timestep = environment.reset()
        while not timestep.last():
            timestep = environment.step(int(rng.integers(4)))
        assert timestep.discount == 0.0 and ale.lives() == lives_left  # A life lost: terminal.
    environment.reset()
    assert ale.lives() == 3  # The game went on rather than restarting with 5 lives.

    def first_episode_length(episodic: bool) -> int:
        pool = make_atari_envpool(seed=0, num_envs=1, name="Breakout", episodic_life=episodic)
        pool.reset()
        for step in range(1, 5_000):
            if pool.step(np.array([step % 4], np.int32)).step_type[0] == dm_env.StepType.LAST:
                return step
        return 5_000

    assert first_episode_length(True) < first_episode_length(False)


def test_evaluators_play_whole_unclipped_games_while_training_clips(tmp_path):
    """Audit: with reward_clip and episodic_life (the Pong presets) the evaluator used to
    report clipped, per-life returns. Training keeps both; evaluation plays the game."""
    from rl.experiments.builders import make_environment

    experiment, _ = build(
        [
            "environment=atari",
            "environment.name=Breakout",
            "environment.reward_clip=true",
            "environment.episodic_life=true",
            "network=atari_cnn",
        ],
        tmp_path,
    )
    key = jax.random.PRNGKey(0)

    def play(evaluation: bool) -> tuple[set[float], int, int]:
        """Rewards seen, and the ALE's lives when the first episode ended (and at the start)."""
        environment = make_environment(experiment, key, 1, [], evaluation=evaluation).environments[0]
        ale = environment.gymnasium_environment.unwrapped.ale
        timestep, rewards, rng = environment.reset(), set(), np.random.default_rng(0)
        start = ale.lives()
        for _ in range(20_000):
            timestep = environment.step(int(rng.integers(4)))
            rewards.add(float(timestep.reward))
            if timestep.last():
                break
        return rewards, start, ale.lives()

    training_rewards, start, lives = play(evaluation=False)
    assert training_rewards <= {0.0, 1.0} and lives == start - 1  # Clipped; one life per episode.
    _, start, lives = play(evaluation=True)
    assert lives == 0 and start == 5  # A whole game.
    assert experiment.evaluation_environment_factory.keywords["reward_clip"] is False
    from rl.observers import GameScore

    assert GameScore in experiment.observers  # Training records carry the game's score too.


def test_an_unknown_game_names_close_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"environment.name: ALE has no game 'Pongg'.*'Pong'"):
        build(["environment=atari", "network=atari_cnn", "environment.name=Pongg"], tmp_path)
    experiment, _ = build(["environment=atari", "network=atari_cnn", "environment.name=ALE/Breakout-v5"], tmp_path)
    assert experiment.environment_spec.actions.num_values == 4


# --------------------------------------------------------------------------- networks


def atari_spec():
    from dm_env import specs

    from rl.core import EnvironmentSpec

    return EnvironmentSpec(
        observations=specs.BoundedArray(FRAMES, np.uint8, 0, 255, "observation"),
        actions=specs.DiscreteArray(6, name="action"),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )


def frames(batch: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (batch, *FRAMES), dtype=np.uint8)


def count(params) -> int:
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))


def test_nature_torso_has_the_papers_layers_and_parameter_count():
    network = conv.make_atari_cnn(atari_spec())
    params = network.init(jax.random.PRNGKey(0))
    shapes = sorted((name, tuple(leaf["w"].shape)) for name, leaf in params.items())
    assert shapes == [
        ("conv2_d", (8, 8, 4, 32)),
        ("conv2_d_1", (4, 4, 32, 64)),
        ("conv2_d_2", (3, 3, 64, 64)),
        ("linear", (7 * 7 * 64, 512)),
        ("q_head", (512, 6)),
    ]
    torso = 8 * 8 * 4 * 32 + 32 + 4 * 4 * 32 * 64 + 64 + 3 * 3 * 64 * 64 + 64 + 3136 * 512 + 512
    assert torso == 1_684_128 and count(params) == torso + 512 * 6 + 6
    assert network.apply(params, frames()).shape == (3, 6)


@pytest.mark.parametrize("make", [conv.make_atari_cnn, conv.make_impala_resnet], ids=["atari_cnn", "impala_resnet"])
def test_networks_scale_uint8_frames_and_build_every_head(make):
    spec = atari_spec()
    q_network = make(spec, network_kind="q_values")
    params = q_network.init(jax.random.PRNGKey(1))
    apply = jax.jit(q_network.apply)  # One compiled program per input dtype, not hundreds of eager ops.
    pixels = frames()
    q_values = apply(params, pixels)
    assert q_values.shape == (3, 6) and q_values.dtype == np.float32
    # uint8 in [0, 255] reads as the same frames given in [0, 1].
    np.testing.assert_allclose(apply(params, pixels.astype(np.float32) / 255.0), q_values, rtol=1e-5, atol=1e-5)
    dueling = make(spec, dueling=True)
    dueling_params = dueling.init(jax.random.PRNGKey(0))
    assert {"value_head", "advantage_head"} <= set(dueling_params)
    policy_value = make(spec, network_kind="policy_value")
    logits, value = jax.jit(policy_value.apply)(policy_value.init(jax.random.PRNGKey(0)), pixels)
    assert logits.shape == (3, 6) and value.shape == (3,)
    assert np.abs(logits).max() < 0.5  # Small policy head: a near-uniform start.


def test_impala_torso_shapes():
    params = conv.make_impala_resnet(atari_spec()).init(jax.random.PRNGKey(0))
    assert params["linear"]["w"].shape == (11 * 11 * 32, 256)  # 84 -> 42 -> 21 -> 11.
    assert {name for name in params if "block" in name} == {
        f"stage_{s}_block_{b}_{k}" for s in range(3) for b in range(2) for k in range(2)
    }


def test_lstm_takes_a_convolutional_torso():
    from rl.networks.recurrent import make_recurrent_q_network

    network = make_recurrent_q_network(
        atari_spec(), torso="rl.networks.conv.nature_torso", torso_kwargs={"hidden_size": 64}, lstm_size=32
    )
    params = network.init(jax.random.PRNGKey(0))
    q_values, state = jax.jit(network.apply)(params, frames(2), network.initial_state(2))
    assert q_values.shape == (2, 6) and state["hidden"].shape == (2, 32)
    unrolled, _ = jax.jit(network.unroll)(params, np.stack([frames(2, 0), frames(2, 1)]), network.initial_state(2))
    np.testing.assert_allclose(unrolled[0], q_values, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- configuration

REFUSALS = [
    (["network=atari_cnn"], r"'atari_cnn' is a convolutional network .* CartPole-v1 has vector observations"),
    (["agent=ppo", "network=impala_resnet"], r"'impala_resnet' is a convolutional network"),
    (
        ["environment=atari", "network=mlp"],
        r"'mlp' reads vector observations, but Pong has pixel frames.*network=atari_cnn",
    ),
    (["environment=atari", "agent=ppo", "network=policy_value_mlp"], r"'policy_value_mlp' reads vector observations"),
    (["environment=atari", "agent=r2d2", "network=lstm"], r"'lstm' reads vector observations.*network=lstm_atari_cnn"),
    (["agent=r2d2", "network=lstm_atari_cnn"], r"'lstm_atari_cnn' is a convolutional network"),
    (
        ["environment=atari", "agent=r2d2", "network=atari_cnn"],
        r"builds q_values/policy_value networks.*lstm_atari_cnn",
    ),
]


@pytest.mark.parametrize("overrides,message", REFUSALS, ids=[" ".join(o) for o, _ in REFUSALS])
def test_a_network_that_cannot_read_the_observations_is_refused(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message) as error:
        build(overrides, tmp_path)
    assert error.value.key == "network"


def test_every_agent_gets_its_head_from_one_network_option(tmp_path):
    for agent, network, kind in (
        ("dqn", "atari_cnn", "q_values"),
        ("ppo", "atari_cnn", "policy_value"),
        ("impala", "impala_resnet", "policy_value"),
    ):
        experiment, _ = build([f"agent={agent}", "environment=atari", f"network={network}"], tmp_path)
        assert experiment.network_factory.keywords["network_kind"] == kind
    with pytest.raises(ConfigError, match="network.network_kind: is set by the experiment"):
        build(["environment=atari", "network=atari_cnn", "+network.network_kind=policy_value"], tmp_path)


def test_the_refusal_exits_2_with_one_line(tmp_path):
    result = run_train(["environment=atari", f"hydra.run.dir={tmp_path}"], timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Invalid configuration: network: 'dueling_mlp' reads vector observations, but Pong"), last
    assert "Traceback" not in result.stderr and not os.path.exists(tmp_path / "logs")


def test_replay_stores_frames_as_uint8(tmp_path):
    """Every agent's table keeps observations uint8: no float32 copy of the frames."""
    import tensorflow as tf

    for agent, network in (
        ("dqn", "atari_cnn"),
        ("ppo", "atari_cnn"),
        ("impala", "atari_cnn"),
        ("r2d2", "lstm_atari_cnn"),
    ):
        experiment, _ = build([f"agent={agent}", "environment=atari", f"network={network}"], tmp_path)
        (table,) = experiment.builder.make_replay_tables(experiment.environment_spec)
        frames_columns = [s for s in tf.nest.flatten(table.info.signature) if s.shape[-3:] == FRAMES]
        assert frames_columns and all(s.dtype == tf.uint8 for s in frames_columns), (agent, table.info.signature)


# --------------------------------------------------------------------------- smoke runs

FRAME_BYTES = 84 * 84 * 4  # One uint8 frame stack.
# Short Pong runs through actor, replay and learner: episodes cut at 100 steps (so they
# end, and the one evaluation episode is short), replay and batches a few items, small
# layers. The presets' own networks and sizes run in the slow 5,000-step versions.
SHORT = ["max_actor_steps=300", "eval_every=300", "eval_episodes=1", "environment.max_episode_steps=100"]
SMOKE = {
    "dqn": [
        "experiment=dqn_pong", "network.hidden_size=32", "environment.num_envs=1",
        "agent.min_replay_size=50", "agent.max_replay_size=100", "agent.batch_size=8", "agent.samples_per_insert=0.5",
    ],
    "ppo": [
        "experiment=ppo_pong", "network.hidden_size=32", "environment.num_envs=2",
        "agent.unroll_length=16", "agent.batch_size=2", "agent.num_minibatches=1", "agent.num_epochs=1",
    ],
    "impala": [
        "experiment=impala_pong", "network.channels=[8,8]", "network.num_blocks=1", "network.hidden_size=32",
        "environment.num_envs=2", "agent.unroll_length=8", "agent.batch_size=2",
    ],
    "r2d2": [
        "experiment=r2d2_pong", "network.torso_kwargs.hidden_size=32", "network.lstm_size=32", "environment.num_envs=1",
        "agent.burn_in_length=4", "agent.trace_length=8", "agent.sequence_period=4", "agent.n_step=2",
        "agent.batch_size=4", "agent.min_replay_size=8", "agent.max_replay_size=40", "agent.samples_per_insert=0.5",
    ],
}  # fmt: skip


def replay_bound(agent: str, config: dict) -> int:
    """The most bytes the table can hold at its configured size with uint8 frames:
    items * frame stacks per item * FRAME_BYTES (DQN items keep two, sequences one a row),
    plus 10% for the other columns and reverb's bookkeeping."""
    agent_config = config["agent"]
    if agent == "dqn":
        stacks = agent_config["max_replay_size"] * 2
    elif agent == "r2d2":
        stacks = agent_config["max_replay_size"] * (agent_config["burn_in_length"] + agent_config["trace_length"])
    else:  # A queue of 2 * batch_size sequences of unroll_length + 1 rows.
        stacks = 2 * agent_config["batch_size"] * (agent_config["unroll_length"] + 1)
    return int(stacks * FRAME_BYTES * 1.1)


def pong_run(run_dir, agent: str, *overrides: str, base: list[str] | None = None) -> dict:
    """Runs the agent's Pong preset with `overrides`, checkpointing the replay table at the
    end; returns the summary with `replay_bytes` (the final checkpoint's table on disk:
    reverb keeps chunks compressed, so this is what the table holds) and `replay_bound`
    (`replay_bound` for the run's config) added. A queue the learner emptied is small."""
    import glob

    import yaml

    arguments = [
        *(SMOKE[agent] if base is None else base),
        *overrides,
        "checkpoint.replay=true",
        "progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    result = run_train(arguments, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(run_dir))
    from rl import checkpointing

    newest = checkpointing.list_checkpoints(str(run_dir))[0]  # The end of the run.
    files = glob.glob(os.path.join(checkpointing.replay_of(newest), "**"), recursive=True)
    summary["replay_bytes"] = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
    with open(os.path.join(run_dir, ".hydra", "config.yaml")) as file:
        summary["replay_bound"] = replay_bound(agent, yaml.safe_load(file))
    return summary


def check_smoke_run(summary: dict, agent: str, steps: int) -> None:
    assert summary["status"] == "finished" and summary["agent"] == agent and summary["environment"] == "Pong"
    assert summary["actor_steps"] == steps and summary["learner_steps"] > 0
    assert 0 < summary["replay_bytes"] <= summary["replay_bound"], summary


def test_a_short_dqn_pong_run_trains_through_replay(tmp_path):
    """300 steps: the actor writes uint8 frames to the table, the learner trains on them,
    the run finishes, and the table stays within its configured size. The other agents'
    short runs cost as much each (start-up, compilation, emulators): they run under -m slow."""
    check_smoke_run(pong_run(tmp_path, "dqn", *SHORT), "dqn", 300)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["ppo", "impala", "r2d2"])
def test_a_short_pong_run_trains_through_replay(agent, tmp_path):
    """The same for the sequence agents: PPO and IMPALA through their queue (policy and
    value heads on one torso), R2D2 through prioritized sequences (the CNN under an LSTM)."""
    check_smoke_run(pong_run(tmp_path, agent, *SHORT), agent, 300)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "ppo", "impala", "r2d2"])
def test_5000_pong_steps_with_the_presets_networks(agent, tmp_path):
    """Issue 12: each agent runs 5,000 Atari Pong steps through actor, replay and learner
    with its preset's network, the replay table within its configured size. IMPALA takes
    the Nature torso here: the learner trains on every step, and the residual torso's
    gradient would make this run most of an hour on 2 cores."""
    network = {"dqn": ["network.hidden_size=512"], "ppo": ["network.hidden_size=512"],
               "r2d2": ["network.torso_kwargs.hidden_size=512", "network.lstm_size=512"]}.get(agent, [])  # fmt: skip
    base = SMOKE[agent]
    if agent == "impala":
        base = [
            "experiment=impala_pong",
            "network=atari_cnn",
            "environment.num_envs=2",
            "agent.unroll_length=8",
            "agent.batch_size=2",
        ]
    summary = pong_run(
        tmp_path, agent, "max_actor_steps=5000", "eval_every=5000", "eval_episodes=1", *network, base=base
    )
    check_smoke_run(summary, agent, 5000)


def _play_one_game(environment, observer, seed: int = 0) -> list[dict]:
    """Random actions in copy 0 of `environment` (a vector) until a whole game is over;
    each episode's clipped return, with what the observer adds to its record."""
    rng = np.random.default_rng(seed)
    records, episode_return = [], 0.0
    timestep = environment.reset()
    observer.observe_first(environment, timestep, np.arange(1))
    for _ in range(50_000):
        actions = np.array([rng.integers(4)], np.int32)
        timestep = environment.step(actions)
        observer.observe(environment, timestep, actions, np.arange(1))
        episode_return += float(timestep.reward[0])
        if timestep.step_type[0] == dm_env.StepType.LAST:
            records.append({"episode_return": episode_return, **observer.get_metrics(0)})
            if "game_score" in records[-1]:
                return records
            episode_return = 0.0
            observer.observe_first(environment, environment.reset(np.arange(1)), np.arange(1))
    raise AssertionError("no game ended")


@pytest.mark.parametrize("backend", ["gymnasium", "envpool"])
def test_training_records_carry_the_game_score_of_each_whole_game(backend):
    """Audit: with clipped rewards and an episode per life, training records showed only
    clipped per-life returns. The record of the episode that ends a game carries the
    game's own score: the unclipped sum over its lives (SpaceInvaders scores 5 to 200 a hit)."""
    from rl.environments.vector import VectorEnvironment
    from rl.observers import GameScore

    def make(reward_clip: bool):
        if backend == "envpool":
            return make_atari_envpool(
                seed=3, num_envs=1, name="SpaceInvaders", episodic_life=True, reward_clip=reward_clip
            )
        return VectorEnvironment(
            [make_atari_environment(seed=3, name="SpaceInvaders", episodic_life=True, reward_clip=reward_clip)]
        )

    clipped = _play_one_game(make(reward_clip=True), GameScore())
    unclipped = _play_one_game(make(reward_clip=False), GameScore())  # The same game: same seed, same actions.
    # One record per life (a copy reset after a lost life plays on), the last with the score.
    assert len(clipped) == len(unclipped) == 3 and all("game_score" not in r for r in clipped[:-1])
    assert clipped[-1]["game_score"] == sum(r["episode_return"] for r in unclipped) == unclipped[-1]["game_score"]
    assert 0 < sum(r["episode_return"] for r in clipped) < clipped[-1]["game_score"]  # Clipped: one point a hit.
