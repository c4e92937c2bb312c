"""environment=playground (rl/environments/playground.py): MuJoCo Playground's DM Control Suite as compiled
copies for launcher=anakin: auto-reset, the time limit a truncation, a diverged simulation a termination,
episode statistics, the implementation chosen for the device, one-line refusals, and a short anakin run."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys

import imageio_ffmpeg
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, read_summary, run_environment, run_train, short_compiled_run
from rl import checkpointing
from rl.anakin.build import make_system
from rl.experiments.config import enable_compilation_cache
from rl.experiments.make_experiment import make_experiment
from rl.systems.base import make_chunk
from rl.environments.playground import PlaygroundError, PlaygroundToDmEnv, PlaygroundVector, check_name, choose_impl

# Playground is in the current stack's lock only (requirements-current.txt); the reverb stack lacks it.
pytestmark = pytest.mark.current

LIMIT = 5  # A short episode_length, so that tests reach the time limit in a few steps.


@pytest.fixture(scope="module", autouse=True)
def compilation_cache():
    """The persistent XLA cache runs use: the programs here are the same every time."""
    enable_compilation_cache(os.environ.get("RL_COMPILATION_CACHE", os.path.expanduser("~/.cache/rl/xla")))


@pytest.fixture(scope="module")
def cartpole() -> PlaygroundVector:
    """Three copies of CartpoleBalance whose episodes last LIMIT steps."""
    return PlaygroundVector("CartpoleBalance", 3, {"episode_length": LIMIT})


@pytest.fixture(scope="module")
def reset(cartpole: PlaygroundVector):
    return jax.jit(cartpole.reset)


@pytest.fixture(scope="module")
def step(cartpole: PlaygroundVector):
    return jax.jit(cartpole.step)


def test_impl_is_jax_where_warp_cannot_run_and_warp_is_refused_on_a_tpu():
    assert choose_impl(None, "cpu") == "jax"
    assert choose_impl(None, "tpu") == "jax"
    assert choose_impl("jax", "gpu") == "jax"
    warp_installed = importlib.util.find_spec("warp") is not None
    assert choose_impl(None, "gpu") == ("warp" if warp_installed else "jax")
    with pytest.raises(PlaygroundError, match="cannot run on a TPU"):
        choose_impl("warp", "tpu")
    with pytest.raises(PlaygroundError, match="must be one of"):
        choose_impl("cuda", "cpu")


def test_an_episode_ends_at_the_time_limit_as_a_truncation_with_its_return_and_length(reset, step):
    """Every copy runs LIMIT steps: only the last is `done`, truncated, discount 1, and carries the sum of
    the copy's rewards and the length LIMIT; the copies' next observations are new episodes' starts."""
    state = reset(jax.random.PRNGKey(0))
    rewards = np.zeros(3, np.float32)
    for t in range(LIMIT):
        before = state
        state, answer = step(state, jnp.zeros((3, 1)), jax.random.PRNGKey(t + 1))
        rewards += np.asarray(answer.reward)
        last = t == LIMIT - 1
        np.testing.assert_array_equal(np.asarray(answer.done), [last] * 3)
        np.testing.assert_array_equal(np.asarray(answer.truncated), [last] * 3)
        np.testing.assert_array_equal(np.asarray(answer.discount), [1.0] * 3)
    np.testing.assert_allclose(np.asarray(answer.episode_return), rewards, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(answer.episode_length), [LIMIT] * 3)
    # The running statistics start again, and each copy's observation is a fresh start, not the final one.
    np.testing.assert_array_equal(np.asarray(state.episode_return), [0.0] * 3)
    np.testing.assert_array_equal(np.asarray(state.episode_length), [0] * 3)
    assert not np.allclose(np.asarray(state.observation), np.asarray(answer.final_observation))
    assert not np.allclose(np.asarray(state.observation), np.asarray(before.observation))
    # The next step counts from zero again.
    _, answer = step(state, jnp.zeros((3, 1)), jax.random.PRNGKey(99))
    np.testing.assert_allclose(np.asarray(answer.episode_return), [0.0] * 3)
    assert not np.asarray(answer.done).any()


def diverged(state, copies: list[int]):
    """`state` with the simulation of `copies` made NaN (what MJX gives when a simulation blows up)."""
    data = state.env_state.data
    mask = np.zeros(data.qpos.shape[0], bool)
    mask[copies] = True
    qpos = jnp.where(jnp.asarray(mask)[:, None], jnp.nan, data.qpos)
    return state._replace(env_state=state.env_state.replace(data=data.replace(qpos=qpos)))


def test_a_diverged_simulation_terminates_even_on_the_last_allowed_step(reset, step):
    """Copy 0 goes NaN mid-episode and copy 1 on the last allowed step: both terminate (discount 0, not
    truncated: termination wins at the limit); copy 2 reaches the limit (a truncation). NaNs read as zeros."""
    state = reset(jax.random.PRNGKey(1))
    for t in range(LIMIT - 2):
        state, _ = step(state, jnp.zeros((3, 1)), jax.random.PRNGKey(t))
    state, answer = step(diverged(state, [0]), jnp.zeros((3, 1)), jax.random.PRNGKey(10))
    np.testing.assert_array_equal(np.asarray(answer.done), [True, False, False])
    np.testing.assert_array_equal(np.asarray(answer.discount), [0.0, 1.0, 1.0])
    assert np.isfinite(np.asarray(answer.final_observation)).all() and np.isfinite(np.asarray(answer.reward)).all()
    assert np.isfinite(np.asarray(state.observation)).all()
    state, answer = step(diverged(state, [1]), jnp.zeros((3, 1)), jax.random.PRNGKey(11))
    np.testing.assert_array_equal(np.asarray(answer.done), [False, True, True])
    np.testing.assert_array_equal(np.asarray(answer.truncated), [False, False, True])
    np.testing.assert_array_equal(np.asarray(answer.discount), [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(np.asarray(answer.episode_length), [0, LIMIT, LIMIT])


def test_action_repeat_divides_the_episode_into_agent_steps():
    """episode_length counts control steps: with action_repeat 2, 6 of them are 3 agent steps."""
    vector = PlaygroundVector("CartpoleBalance", 1, {"episode_length": 6, "action_repeat": 2})
    assert vector.max_steps_in_episode == 3


def test_the_dm_env_adapter_truncates_at_the_limit():
    environment = PlaygroundToDmEnv("CartpoleBalance", seed=3, kwargs={"episode_length": 3})
    assert environment.observation_spec().shape == (5,)
    assert environment.action_spec().shape == (1,)
    timestep = environment.reset()
    steps = 0
    while not timestep.last():
        timestep = environment.step(np.zeros(1, np.float32))
        steps += 1
    assert steps == 3 and timestep.discount == 1.0  # A truncation.
    assert environment.step(np.zeros(1, np.float32)).first()


def test_unknown_names_and_settings_are_refused_in_one_line():
    with pytest.raises(PlaygroundError, match=r"did you mean one of \['CheetahRun'\]") as error:
        check_name("CheetahRn")
    assert "\n" not in str(error.value)
    with pytest.raises(PlaygroundError, match=r"has no settings \['bogus'\]"):
        PlaygroundVector("CheetahRun", 1, {"bogus": 1})


def test_an_environment_whose_assets_are_missing_is_refused_rather_than_fetched():
    """Playground's locomotion environments clone MuJoCo Menagerie with git on first use: refused when absent."""
    from mujoco_playground._src import mjx_env

    if mjx_env.MENAGERIE_PATH.exists():
        pytest.skip(f"MuJoCo Menagerie is installed at {mjx_env.MENAGERIE_PATH}")
    with pytest.raises(PlaygroundError, match="needs MuJoCo Menagerie's models") as error:
        check_name("Go1JoystickFlatTerrain")
    assert "\n" not in str(error.value)
    assert not mjx_env.MENAGERIE_PATH.exists()


# Two copies of CartpoleBalance with 50-step episodes.
CARTPOLE = [
    "environment=playground",
    "environment.name=CartpoleBalance",
    "environment.num_envs=2",
    "environment.kwargs.episode_length=50",
]
# A small PPO under launcher=anakin: 16 steps of each copy per update, 1 epoch of 2 minibatches.
SMALL_PPO = [
    "agent=ppo",
    "launcher=anakin",
    "network=policy_value_mlp",
    "policy=sample",
    *CARTPOLE,
    "agent.unroll_length=16",
    "agent.batch_size=2",
    "agent.num_epochs=1",
    "agent.num_minibatches=2",
    *short_compiled_run(128, 64),
]


def test_a_short_anakin_ppo_run_compiles_steps_and_writes_its_summary_and_checkpoint(tmp_path):
    """Its checkpoint holds MJX's physics state, empty arrays included (no contacts in a cartpole)."""
    run_dir = tmp_path / "run"
    result = run_train([*SMALL_PPO, "checkpoint.enabled=true", f"hydra.run.dir={run_dir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(run_dir))
    assert summary["status"] == "finished" and summary["launcher"] == "anakin"
    assert summary["environment"] == "CartpoleBalance" and summary["actor_steps"] == 128
    # Evaluation episodes end at the 50-step limit; CartpoleBalance pays at most 1 a step.
    assert 0.0 < summary["final_eval_return"] <= 50.0
    assert os.path.exists(run_dir / "logs")
    assert [os.path.basename(path) for path in checkpointing.list_checkpoints(str(run_dir))] == ["step_128"]
    # scripts/evaluate.py replays that checkpoint and films an episode (MuJoCo's renderer, headless).
    evaluate = [sys.executable, os.path.join(ROOT, "scripts", "evaluate.py"), f"run_dir={run_dir}", "episodes=1"]
    evaluated = subprocess.run(
        [*evaluate, "video=true"], cwd=ROOT, capture_output=True, text=True, timeout=600, env=run_environment()
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (video,) = glob.glob(str(run_dir / "videos" / "*.mp4"))
    frames, _ = imageio_ffmpeg.count_frames_and_secs(video)
    assert frames == 51 and "video of one episode" in evaluated.stdout  # The first frame and 50 steps.


def test_an_unknown_name_exits_2_with_one_line(tmp_path):
    result = run_train([*SMALL_PPO, "environment.name=WalkerWalks", f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if "WalkerWalks" in line]
    assert len(lines) == 1 and "did you mean" in lines[0] and "WalkerWalk" in lines[0]


@pytest.mark.parametrize("agent", ["sac", "td3", "d4pg"])
def test_the_off_policy_systems_trace_with_it_vmapped_over_seeds(tmp_path, agent):
    """SAC, TD3 and D4PG (their gymnax presets' settings on CartpoleBalance): one chunk of every replica of a
    2-seed vmap traces, and the steps it answers have the copies' shapes. A trace, not a compile: compiling
    MJX under the off-policy updates takes minutes on a CPU (the short PPO run above compiles and runs)."""
    overrides = [f"experiment={agent}_gymnax_pendulum", *CARTPOLE, "agent.batch_size=8", "agent.min_replay_size=8"]
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, _ = make_experiment(config, str(tmp_path / "run"), {"agent": agent})
    system = make_system(experiment)

    def one_chunk(key: jax.Array) -> dict:
        _, metrics = make_chunk(system, 1)(system.init(key))
        return metrics

    metrics = jax.eval_shape(jax.vmap(one_chunk), jax.random.split(jax.random.PRNGKey(0), 2))
    assert metrics["episode_return"].shape == (2,)
    assert system.environment.observation_spec.shape == (5,) and system.environment.num_envs == 2


# experiment=ppo_playground (Playground's PPO settings) made small for this CPU: 32 copies unrolled 4 times for 30
# steps an update (Brax's several unrolls per batch), 4 epochs of 4 minibatches, CartpoleBalance cut to 200 steps.
SMALL_PRESET = [
    "experiment=ppo_playground",
    "environment.name=CartpoleBalance",
    "+environment.kwargs.episode_length=200",
    "environment.num_envs=32",
    "agent.batch_size=128",
    "agent.num_minibatches=4",
    "agent.num_epochs=4",
    "max_actor_steps=61440",
    "eval_every=15360",
    "eval_episodes=8",
    "logger=csv",
    "progress=false",
    "checkpoint.enabled=false",
]


def test_the_ppo_preset_learns_to_balance_within_a_small_budget(tmp_path):
    """Seed 0, 61,440 steps (16 updates): from the untrained policy's return at step 0 to >= 180 of the 200 an
    episode can pay (seeds 0-2 ended at 186-196 when this was written)."""
    run_dir = tmp_path / "run"
    result = run_train([*SMALL_PRESET, f"hydra.run.dir={run_dir}"], timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(run_dir))
    steps = [step for step, _ in summary["eval_returns"]]
    returns = [value for _, value in summary["eval_returns"]]
    assert steps == [0, 15360, 30720, 46080, 61440]
    assert returns[-1] >= 180.0 and returns[-1] - returns[0] >= 30.0, returns


def test_the_sac_preset_takes_brax_s_update_shape_and_traces(tmp_path):
    """experiment=sac_playground at its own sizes (traced, not compiled): 128 copies an update, 8 SGD steps of 512
    transitions each, the critics alone layer-normalised, the temperature aiming at -0.5 per action dimension."""
    from rl.agents.sac.builder import target_entropy

    overrides = ["experiment=sac_playground", "environment.name=CartpoleBalance"]
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, _ = make_experiment(config, str(tmp_path / "run"), {"agent": "sac"})
    system = make_system(experiment)
    assert system.environment.num_envs == 128 and system.sgd_steps == 8
    assert target_entropy(experiment.builder.config, 6) == -3.0  # CheetahRun's and WalkerWalk's 6 actuators.
    networks = experiment.network_factory(environment_spec=experiment.environment_spec)
    critic = jax.eval_shape(networks.critic_network(num_critics=2).init, jax.random.PRNGKey(0))
    policy = jax.eval_shape(networks.policy_network(stochastic=True).init, jax.random.PRNGKey(0))
    assert any("layer_norm" in name for name in critic) and not any("layer_norm" in name for name in policy)

    def one_chunk(key: jax.Array) -> dict:
        _, metrics = make_chunk(system, 1)(system.init(key))
        return metrics

    assert jax.eval_shape(one_chunk, jax.random.PRNGKey(0))["episode_return"].shape == ()


def test_the_brax_peer_script_restores_device_put_replicated_as_brax_uses_it(monkeypatch):
    """benchmarks/brax_ppo_playground.py puts back what JAX 0.10 removed and Brax 0.14.2's trainers call: one copy of
    every leaf per device, stacked on a leading axis."""
    from benchmarks.brax_ppo_playground import restore_device_put_replicated

    monkeypatch.setattr(jax, "device_put_replicated", None, raising=False)  # Undone: as it was after the test.
    monkeypatch.delattr(jax, "device_put_replicated")
    restore_device_put_replicated()
    replicated = jax.device_put_replicated({"w": jnp.arange(3.0)}, jax.devices()[:1])
    assert replicated["w"].shape == (1, 3) and replicated["w"].tolist() == [[0.0, 1.0, 2.0]]


def test_the_ppo_preset_runs_brax_s_schedule(tmp_path):
    """experiment=ppo_playground as composed (nothing compiled): 983,040 steps an update (2,048 copies unrolled 16
    times for 30 steps), a round every 10 updates and 90 updates in all, as Brax's trainer runs Playground's 60 M."""
    from rl.experiments.compiled import steps_per_update

    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(config_name="config", overrides=["experiment=ppo_playground"])
    experiment, launcher = make_experiment(config, str(tmp_path / "run"), {"agent": "ppo"})
    assert steps_per_update(experiment) == 983_040 == 2048 * 16 * 30
    assert experiment.eval_every == 10 * 983_040 and experiment.max_actor_steps == 90 * 983_040
    assert launcher.check_experiment(experiment) == 10  # Updates a chunk: nothing was rounded.
