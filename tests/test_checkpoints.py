"""Checkpoints in-process: bitwise round trips, atomic saves, damaged ones skipped, foreign
ones refused, replay tables compared, numerical faults named. (SIGTERM and resume through
the entry point: tests/test_resume.py.)"""

from __future__ import annotations

import itertools
import os
import shutil

import dm_env
import jax
import numpy as np
import pytest
from dm_env import specs

from rl import checkpointing
from rl.agents.dqn import DQNConfig
from rl.agents.dqn.builder import DQNBuilder
from rl.systems.learning import SGDLearner
from rl.checkpointing import CheckpointError, CheckpointSettings
from rl.networks import make_q_network
from rl.core import NumericalError
from rl.replay import ReplaySample
from rl.core import EnvironmentSpec, Transition

SPEC = EnvironmentSpec(
    observations=specs.Array((4,), np.float32, "observation"),
    actions=specs.DiscreteArray(2, name="action"),
    rewards=specs.Array((), np.float32),
    discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
)
BATCH = 16


def _batch(seed: int, poison: bool = False) -> ReplaySample:
    rng = np.random.default_rng(seed)
    observation = rng.normal(size=(BATCH, 4)).astype(np.float32)
    if poison:
        observation[0, 0] = np.nan
    data = Transition(
        observation,
        rng.integers(0, 2, BATCH).astype(np.int32),
        rng.normal(size=BATCH).astype(np.float32),
        np.full(BATCH, 0.99, np.float32),
        rng.normal(size=(BATCH, 4)).astype(np.float32),
    )
    return ReplaySample(np.arange(BATCH), np.full(BATCH, 1.0 / BATCH), np.full(BATCH, 100), data)


def _learner(seed: int = 0, hidden=(32, 32), batches=None, dueling=True) -> SGDLearner:
    network = make_q_network(SPEC, hidden, dueling=dueling, layer_norm=True)
    batches = batches if batches is not None else (_batch(i) for i in itertools.count())
    learning = DQNBuilder(DQNConfig(batch_size=BATCH, target_update_period=3)).make_learning(network)
    return SGDLearner(learning, jax.random.PRNGKey(seed), iter(batches))


def _leaves(tree):
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.device_get(tree))]


def _bitwise_equal(a, b) -> bool:
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return False
    return all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(_leaves(a), _leaves(b))
    )


def test_learner_state_round_trips_bit_for_bit_and_learns_on_identically(tmp_path):
    learner = _learner(seed=0, batches=[_batch(i) for i in range(12)])
    for _ in range(7):
        learner.step()
    saved = learner.save()
    path = checkpointing.save_checkpoint(str(tmp_path), 7, saved, {"actor_steps": 7})
    assert os.path.basename(path) == "step_7"

    fresh = _learner(seed=1, batches=[_batch(i) for i in range(7, 12)])  # Other initial parameters.
    assert not _bitwise_equal(fresh.save().params, saved.params)
    fresh.restore(checkpointing.restore_learner_state(path, fresh.save()))
    restored = fresh.save()
    for field in ("params", "target_params", "opt_state", "steps"):
        assert _bitwise_equal(getattr(restored, field), getattr(saved, field)), field
    assert int(restored.steps) == 7
    # The optimiser's own step count came back too (Adam's bias correction depends on it).
    assert 7 in [int(leaf) for leaf in _leaves(restored.opt_state) if leaf.ndim == 0]
    for _ in range(3):  # The same batches give the same updates: nothing was lost.
        learner.step()
        fresh.step()
    assert _bitwise_equal(fresh.save(), learner.save())


def test_saves_are_atomic_and_keep_the_newest(tmp_path):
    run = str(tmp_path)
    state = _learner().save()
    root = checkpointing.checkpoint_root(run)
    os.makedirs(os.path.join(root, "step_99.orbax-checkpoint-tmp-1234", "learner"))  # A save killed half-way.
    with pytest.raises(Exception):  # noqa: B017 - any failure; a save that fails leaves nothing behind.
        checkpointing.save_checkpoint(run, 5, {"bad": np.array([object()])}, {"actor_steps": 5})
    assert checkpointing.list_checkpoints(run) == []
    for step in (10, 20, 30):
        checkpointing.save_checkpoint(run, step, state, {"actor_steps": step}, keep=2)
    assert [os.path.basename(p) for p in checkpointing.list_checkpoints(run)] == ["step_30", "step_20"]
    assert sorted(os.listdir(root)) == ["step_20", "step_30"]  # Temporaries cleared.
    checkpointing.save_checkpoint(run, 30, state, {"actor_steps": 30, "again": True}, keep=2)  # Same step: replaced.
    assert checkpointing.read_state(os.path.join(root, "step_30"))["again"] is True
    assert sorted(os.listdir(root)) == ["step_20", "step_30"]


def test_a_state_with_empty_arrays_round_trips(tmp_path):
    """MJX's physics state holds empty arrays (a model without contacts has no contact rows), which orbax
    refuses to write: they are kept in the structure and made again on restore."""
    run = str(tmp_path)
    state = {"empty": np.zeros((3, 0), np.float32), "full": np.arange(4, dtype=np.int32), "none": np.zeros(0, np.int8)}
    path = checkpointing.save_checkpoint(run, 7, state, {"actor_steps": 7})
    restored = checkpointing.restore_learner_state(path, state)
    for key in state:
        assert restored[key].shape == state[key].shape and restored[key].dtype == state[key].dtype
    np.testing.assert_array_equal(restored["full"], state["full"])
    only_empty = {"empty": np.zeros((0,), np.float32)}
    path = checkpointing.save_checkpoint(run, 8, only_empty, {"actor_steps": 8})
    assert checkpointing.restore_learner_state(path, only_empty)["empty"].shape == (0,)


def _corrupt(path: str) -> None:
    """Flips one byte in the middle of every file of a checkpoint's learner state (however orbax spreads the
    arrays over its files, the ones restored are damaged)."""
    for target in [os.path.join(r, n) for r, _, names in os.walk(os.path.join(path, "learner")) for n in names]:
        if os.path.getsize(target):
            with open(target, "r+b") as file:
                file.seek(os.path.getsize(target) // 2)
                byte = file.read(1)
                file.seek(-1, os.SEEK_CUR)
                file.write(bytes([byte[0] ^ 0xFF]))


def _copy(run: str, name: str) -> str:
    """A copy of the run directory `run` beside it: a checkpoint damaged after it was read in this process is damaged
    in a copy, never read, so no reader's cache can hide it."""
    return shutil.copytree(run, os.path.join(os.path.dirname(run), name))


def test_a_damaged_checkpoint_is_skipped_for_the_previous_one(tmp_path):
    run = str(tmp_path / "run")
    state = _learner().save()
    checkpointing.save_checkpoint(run, 10, state, {"actor_steps": 10})
    newer = checkpointing.save_checkpoint(run, 20, state, {"actor_steps": 20})
    assert checkpointing.find_latest(run) == (newer, [])
    run = _copy(run, "damaged")
    older, newer = (os.path.join(checkpointing.checkpoint_root(run), f"step_{s}") for s in (10, 20))
    _corrupt(newer)
    with pytest.warns(UserWarning, match="step_20 is damaged"):
        found, skipped = checkpointing.find_latest(run)
    assert found == older and [p for p, _ in skipped] == [newer] and "learner state" in skipped[0][1]
    shutil.rmtree(os.path.join(older, "state"))
    with pytest.raises(CheckpointError, match=r"no usable checkpoint .*step_20: .*step_10: cannot read the state"):
        checkpointing.find_latest(run, warn=False)
    assert checkpointing.find_latest(str(tmp_path / "elsewhere")) == (None, [])


@pytest.mark.current  # The same on both stacks: the current part runs it.
@pytest.mark.parametrize(
    "config, written, why",
    [
        ("checkpoint: false\n", {}, "the run ran with its checkpoints off (checkpoint=false)"),
        ("checkpoint: {enabled: false}\n", {}, "the run ran with its checkpoints off"),
        ("seed: 0\n", {"refused.txt": "Invalid configuration: x: no\n"}, "refused before it trained (Invalid"),
        ("seed: 0\n", {"summary.json": '{"status": "pruned"}'}, "its search pruned the run"),
        ("seed: 0\n", {"summary.json": '{"status": "failed", "failure": "numerical fault: nan"}'}, "(numerical fault"),
        ("seed: 0\n", {"summary.json": '{"status": "interrupted", "grid": {}}'}, "ended interrupted"),
        ("seed: 0\n", {}, "the run stopped (or is still running) before its first checkpoint"),
    ],
)
def test_evaluation_says_why_a_run_has_no_checkpoint_from_what_the_run_wrote(tmp_path, config, written, why):
    from rl.evaluation import EvaluationError, locate_checkpoint

    os.makedirs(tmp_path / ".hydra")
    (tmp_path / ".hydra" / "config.yaml").write_text(config)
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(EvaluationError, match=r"^no checkpoint in .*/checkpoints: ") as error:
        locate_checkpoint(str(tmp_path))
    assert why in str(error.value) and "\n" not in str(error.value)


def test_evaluation_picks_the_checkpoint_a_resume_would(tmp_path, capsys):
    from rl.evaluation import EvaluationError, locate_checkpoint

    run = str(tmp_path / "run")
    os.makedirs(os.path.join(run, ".hydra"))
    open(os.path.join(run, ".hydra", "config.yaml"), "w").close()
    with pytest.raises(EvaluationError, match="no checkpoint in"):
        locate_checkpoint(run)
    state = _learner().save()
    checkpointing.save_checkpoint(run, 10, state, {"actor_steps": 10})
    newer = checkpointing.save_checkpoint(run, 20, state, {"actor_steps": 20})
    assert locate_checkpoint(run) == newer
    damaged, both = _copy(run, "damaged"), _copy(run, "both")
    older, newer = (os.path.join(checkpointing.checkpoint_root(damaged), f"step_{s}") for s in (10, 20))
    _corrupt(newer)
    assert locate_checkpoint(damaged) == older
    assert f"Warning: checkpoint {newer} is damaged" in capsys.readouterr().err
    for step in (10, 20):
        _corrupt(os.path.join(checkpointing.checkpoint_root(both), f"step_{step}"))
    with pytest.raises(EvaluationError, match="no usable checkpoint"):
        locate_checkpoint(both)


def test_a_checkpoint_of_another_network_or_agent_is_refused(tmp_path):
    path = checkpointing.save_checkpoint(str(tmp_path), 1, _learner(hidden=(32, 32)).save(), {"actor_steps": 1})
    checkpointing.check_learner_structure(path, _learner(seed=3, hidden=(32, 32)).save())
    with pytest.raises(
        CheckpointError,
        match=r"array 0 is float32\(32,\) there, float32\(16,\) in this config's learner: another network shape",
    ):
        checkpointing.check_learner_structure(path, _learner(hidden=(16, 32)).save())
    with pytest.raises(CheckpointError, match="another agent or network"):
        checkpointing.check_learner_structure(path, _learner(dueling=False).save())


@pytest.mark.reverb
def test_replay_checkpoint_tables_are_compared_with_the_config(tmp_path):
    import reverb

    from rl.agents.dqn.builder import DQNBuilder
    from rl.replay.adders import NStepTransitionAdder
    from rl.replay.adders import transition_codec

    def tables(**settings):
        config = DQNConfig(**{"batch_size": BATCH, "min_replay_size": 10, "max_replay_size": 1000, **settings})
        return DQNBuilder(config).make_replay_tables(SPEC)

    checkpointer = reverb.checkpointers.DefaultCheckpointer(checkpointing.replay_root(str(tmp_path)))
    server = reverb.Server(tables(), port=None, checkpointer=checkpointer)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        adder = NStepTransitionAdder(client, "priority_table", n_step=1, discount=0.9, codec=transition_codec(SPEC))
        step = lambda kind, i: dm_env.TimeStep(  # noqa: E731 - one copy's batched timestep.
            np.array([kind], np.int8),
            np.array([1.0], np.float32),
            np.array([1.0], np.float32),
            np.full((1, 4), i, np.float32),
        )
        adder.add_first(step(dm_env.StepType.FIRST, 0))
        for i in range(1, 13):
            adder.add(np.array([i % 2], np.int32), step(dm_env.StepType.LAST if i == 12 else dm_env.StepType.MID, i))
        adder.reset()
        replay = client.checkpoint()
    finally:
        server.stop()
    # The tables' configuration is written beside them when the checkpoint is saved.
    described = checkpointing.describe_tables(tables())
    path = checkpointing.save_checkpoint(str(tmp_path), 12, {}, {"actor_steps": 12}, 2, replay, tables=described)
    assert os.path.isfile(os.path.join(checkpointing.replay_of(path), "items.tfrecord"))
    checkpointing.check_replay_tables(path, tables())  # The run's own settings: accepted.
    with pytest.raises(CheckpointError, match=r"max_size: 1000 in the checkpoint, 500 now"):
        checkpointing.check_replay_tables(path, tables(max_replay_size=500))
    with pytest.raises(CheckpointError, match=r"rate_limiter.samples_per_insert: 64.0 in the checkpoint, 8.0 now"):
        checkpointing.check_replay_tables(path, tables(samples_per_insert=8.0))
    with pytest.raises(CheckpointError, match="sampler"):
        checkpointing.check_replay_tables(path, tables(prioritized=True))


def test_a_non_finite_loss_or_parameter_is_named_with_its_step():
    batches = itertools.chain([_batch(i) for i in range(3)], (_batch(i, poison=True) for i in itertools.count(3)))
    learner = _learner(batches=batches)
    with pytest.raises(NumericalError, match=r"^learner step 4: td_error is not finite \(nan\)$"):
        for _ in range(200):  # Read every 100 updates: the fault is found at the 100th.
            learner.step()
    healthy = _learner()
    healthy.step()
    state = healthy.save()
    broken = state._replace(params=jax.tree_util.tree_map(lambda x: x * np.nan, state.params))
    healthy.restore(broken)
    with pytest.raises(NumericalError, match=r"learner step 1: params \(parameters/optimiser state\) is not finite"):
        healthy.check_finite()


@pytest.mark.current  # The composed config, the same on both stacks: the current part checks it.
def composed_checkpoint_settings(preset: str) -> CheckpointSettings:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rl.experiments.validation import check_checkpoint_settings

    conf = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        config = compose(config_name="config", overrides=[f"experiment={preset}"])
    return check_checkpoint_settings(OmegaConf.to_container(config.checkpoint))


@pytest.mark.parametrize("preset", ["ppo_gymnax_cartpole", "dqn_gymnax_cartpole", "ppo_atari", "dqn_cartpole"])
def test_every_launcher_checkpoints_at_least_once_a_minute_by_default(preset):
    """The default cadence is rl.checkpointing.EVERY_SECONDS, 60 s, so a killed run loses at most a minute:
    conf/config.yaml says the same, and presets of launcher=anakin, sebulba and local keep it."""
    assert checkpointing.EVERY_SECONDS == 60
    assert CheckpointSettings().every_seconds == checkpointing.EVERY_SECONDS
    assert composed_checkpoint_settings(preset) == CheckpointSettings()


@pytest.mark.parametrize("preset", ["sac_mujoco", "td3_mujoco"])
def test_presets_whose_checkpoints_hold_a_large_replay_write_them_every_five_minutes(preset):
    """The MuJoCo presets keep every replica's replay in their checkpoints (seconds to write): every 5 minutes
    and not after each evaluation round."""
    settings = composed_checkpoint_settings(preset)
    assert settings == CheckpointSettings(every_seconds=300, at_evaluations=False)


def test_checkpoint_settings_are_validated():
    from rl.experiments.validation import ConfigError, check_checkpoint_settings

    assert check_checkpoint_settings(True) == CheckpointSettings()
    assert check_checkpoint_settings(False) == CheckpointSettings(enabled=False)
    assert check_checkpoint_settings({"every_seconds": 10, "keep": 3, "replay": True}) == CheckpointSettings(
        True, 10, 3, True
    )
    for value, key in (
        ({"keep": 0}, "checkpoint.keep"),
        ({"every_seconds": -1}, "checkpoint.every_seconds"),
        ({"evry_seconds": 1}, "checkpoint.evry_seconds"),
        ({"replay": "maybe"}, "checkpoint.replay"),  # (OmegaConf reads yes/no as booleans.)
        ("often", "checkpoint"),
    ):
        with pytest.raises(ConfigError) as error:
            check_checkpoint_settings(value)
        assert error.value.key == key


def test_a_structure_is_compared_without_the_memory_addresses_some_nodes_print():
    """MJX's state holds objects that print as `<... object at 0x7f...>`: another process, the same structure."""
    here = "CustomNode(Contact[(<Wrapper object at 0x7f40c2c48580>,)], [*])"
    there = "CustomNode(Contact[(<Wrapper object at 0x7f11aa000010>,)], [*])"
    assert checkpointing.tree_signature(here) == checkpointing.tree_signature(there)
    assert checkpointing.tree_signature(here) != checkpointing.tree_signature(here.replace("[*]", "[*, *]"))
