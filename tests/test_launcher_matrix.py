"""The agent x launcher x observation matrix of docs/launchers.md ("Which agent runs where") against the code:
every kind of observation a cell names runs a tiny run to its end, every other is refused in one line that
names its key and says one of the doc's reasons. Compiled launchers' cells and every refusal are the same on
both stacks and run in the current part; `local` runs need the reverb stack; `ray` runs are slow."""

from __future__ import annotations

import os

import gymnasium
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import REVERB_STACK, ROOT, module_marks, read_summary, run_train
from rl.experiments.make_experiment import make_experiment
from rl.experiments.validation import ConfigError, check_launcher_stack

CONF = os.path.join(ROOT, "conf")
DOC = os.path.join(ROOT, "docs", "launchers.md")
KINDS = ("vector", "frames", "dict")
CONTINUOUS = ("sac", "td3", "d4pg")


# --------------------------------------------------------------------------- the doc's tables


def _rows(lines: list[str]) -> list[list[str]]:
    """The cells of the markdown table that starts at `lines[0]` (header first, the rule left out)."""
    table = []
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not all(set(cell) <= {"-", " "} for cell in cells):
            table.append(cells)
    return table


def _unquoted(cell: str) -> str:
    return cell.replace("`", "").strip()


def doc_tables() -> tuple[list[str], dict[str, dict[str, frozenset[str]]], list[dict[str, str]]]:
    """(launchers, {agent: {launcher: kinds that run}}, refusal rows) from the doc's section."""
    with open(DOC) as file:
        text = file.read()
    section = text.split("## Which agent runs where", 1)[1].split("\n## ", 1)[0].splitlines()
    starts = [i for i, line in enumerate(section) if line.startswith("|") and not section[i - 1].startswith("|")]
    assert len(starts) == 2, "the section holds the matrix and the refusals, two tables"
    matrix, refusals = _rows(section[starts[0] :]), _rows(section[starts[1] :])
    launchers = [_unquoted(cell) for cell in matrix[0][1:]]
    runs = {}
    for row in matrix[1:]:
        named = {kind.strip() for cell in row[1:] for kind in cell.split(",")} - {"none"}
        assert named <= set(KINDS), f"{row[0]}: unknown kinds {sorted(named - set(KINDS))}"
        runs[_unquoted(row[0])] = {
            launcher: frozenset(kind.strip() for kind in cell.split(",")) - {"none"}
            for launcher, cell in zip(launchers, row[1:])
        }
    reasons = [dict(by=row[1], key=_unquoted(row[2]), words=_unquoted(row[3])) for row in refusals[1:]]
    return launchers, runs, reasons


LAUNCHERS, RUNS, REASONS = doc_tables()
CELLS = [(agent, launcher, kind) for agent in RUNS for launcher in LAUNCHERS for kind in KINDS]


@pytest.mark.current  # Reads files: the same on both stacks.
def test_the_matrix_has_every_agent_and_launcher_the_configs_offer():
    def options(group: str) -> set[str]:
        return {name[: -len(".yaml")] for name in os.listdir(os.path.join(CONF, group)) if name.endswith(".yaml")}

    assert set(RUNS) == options("agent")
    assert set(LAUNCHERS) == options("launcher")


# --------------------------------------------------------------------------- the cells


class DictObservations(gymnasium.Env):
    """A task observing a dict of arrays (where the ball is, how fast it goes), with discrete or continuous
    actions: the `dict` kind of the matrix."""

    def __init__(self, continuous: bool = False, render_mode: str | None = None):
        box = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gymnasium.spaces.Dict(position=box, velocity=box)
        self.action_space = (
            gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gymnasium.spaces.Discrete(2)
        )

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


gymnasium.register("MatrixDict-v0", entry_point=DictObservations, max_episode_steps=50)


def environment_overrides(agent: str, launcher: str, kind: str) -> list[str]:
    """The environment of `kind` the agent's actions fit: gymnax's under anakin (the JAX ones), gymnasium's
    elsewhere; Atari's Pong for frames, whatever the agent (a continuous agent is refused there)."""
    continuous = agent in CONTINUOUS
    if kind == "vector" and launcher == "anakin":
        return ["environment=gymnax", f"environment.name={'Pendulum-v1' if continuous else 'CartPole-v1'}"]
    if kind == "vector":
        return ["environment=pendulum" if continuous else "environment=cartpole"]
    if kind == "frames":
        return ["environment=atari", "environment.max_episode_steps=100"]
    return ["environment=gymnasium", "environment.name=MatrixDict-v0", f"+environment.kwargs.continuous={continuous}"]


# Each agent's network, tiny: for vector (and dict) observations, and for frames.
NETWORKS = {
    "dqn": (["network.hidden_sizes=[16]"], ["network=atari_cnn", "network.hidden_size=16"]),
    "pqn": (["network.hidden_sizes=[16]"], ["network=atari_cnn", "network.hidden_size=16"]),
    "ppo": (
        ["network.policy_hidden_sizes=[16]", "network.value_hidden_sizes=[16]"],
        ["network=atari_cnn", "network.hidden_size=16"],
    ),
    "impala": (
        ["network.policy_hidden_sizes=[16]", "network.value_hidden_sizes=[16]"],
        ["network=atari_cnn", "network.hidden_size=16"],
    ),
    "r2d2": (
        ["network.torso_kwargs.hidden_sizes=[16]", "network.lstm_size=16"],
        ["network=lstm_atari_cnn", "network.torso_kwargs.hidden_size=16", "network.lstm_size=16"],
    ),
    **{agent: (["network.policy_hidden_sizes=[16]", "network.critic_hidden_sizes=[16]"], []) for agent in CONTINUOUS},
}

# Each agent's learning, tiny: a few small updates within the budget.
REPLAY = ["agent.batch_size=16", "agent.min_replay_size=64", "agent.samples_per_insert=0.5"]
ROLLOUTS = ["agent.unroll_length=16", "agent.batch_size=2", "agent.num_epochs=1", "agent.num_minibatches=1"]
LEARNING = {
    "dqn": REPLAY,
    "sac": [*REPLAY, "policy.warmup_steps=64"],
    "td3": [*REPLAY, "policy.warmup_steps=64"],
    "d4pg": REPLAY,
    "ppo": ROLLOUTS,
    "pqn": ROLLOUTS,
    "impala": ["agent.unroll_length=16", "agent.batch_size=2"],
    "r2d2": ["agent.batch_size=4", "agent.min_replay_size=8", "agent.burn_in_length=2", "agent.trace_length=8"],
}

BUDGET = 256
PLUMBING = [
    f"max_actor_steps={BUDGET}",
    f"eval_every={BUDGET}",
    "eval_episodes=1",
    "logger=csv",
    "progress=false",
    "checkpoint.enabled=false",
]


def cell_overrides(agent: str, launcher: str, kind: str) -> list[str]:
    network = NETWORKS[agent][kind == "frames"]
    return [f"agent={agent}", f"launcher={launcher}", *environment_overrides(agent, launcher, kind), *network]


def tiny_run(agent: str, launcher: str, kind: str) -> list[str]:
    return [*cell_overrides(agent, launcher, kind), *LEARNING[agent], *PLUMBING]


def compose_experiment(overrides: list[str], run_dir: str):
    """The experiment and launcher as scripts/train.py makes them, its stack check included."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    chosen = dict(override.split("=", 1) for override in overrides if "." not in override.split("=", 1)[0])
    choices = {group: chosen[group] for group in ("agent", "launcher", "environment", "network") if group in chosen}
    experiment, launcher = make_experiment(config, run_dir, choices)
    check_launcher_stack(launcher, choices["launcher"])
    return experiment, launcher


def runs_here(agent: str, launcher: str, kind: str) -> bool:
    """Whether the doc says the cell runs on this stack (local and ray only where dm-reverb is)."""
    return kind in RUNS[agent][launcher] and (REVERB_STACK or launcher not in ("local", "ray"))


# Claimed cells another test of the default suite already runs (here they run under -m slow).
COVERED = {
    ("dqn", "local", "frames"): "tests/test_atari.py::test_a_short_dqn_pong_run_trains_through_replay",
    ("ppo", "local", "vector"): "tests/test_ppo.py::test_ppo_solves_cartpole",
    ("pqn", "local", "vector"): "tests/test_pqn.py::test_its_defaults_run_under_launcher_local_through_a_queue",
    ("impala", "local", "vector"): "tests/test_impala.py::test_impala_smoke_run_through_actor_replay_and_learner",
    ("r2d2", "local", "vector"): "tests/test_r2d2.py::test_r2d2_runs_end_to_end_and_trains",
    **{
        (agent, "local", "vector"): "tests/test_continuous_smoke.py::test_builds_acts_and_learns"
        for agent in CONTINUOUS
    },
    **{
        (agent, "anakin", "vector"): "tests/test_anakin.py::test_an_agents_own_defaults_run_under_anakin"
        for agent in ("dqn", "ppo", "pqn", "impala", *CONTINUOUS)
    },
    ("sac", "sebulba", "vector"): "tests/test_sebulba.py::test_sac_learns_pendulum_under_sebulba",
    ("ppo", "sebulba", "frames"): "tests/test_sebulba.py::test_a_small_ppo_plays_pong_end_to_end",
    ("dqn", "sebulba", "frames"): "tests/test_launcher_matrix.py::"
    "test_dqn_pong_under_sebulba_runs_to_its_end_with_uint8_frames_in_replay",
    ("sac", "ray", "vector"): "tests/test_ray.py::test_sac_runs_under_ray_with_action_statistics",
}
# Claimed cells that run under -m slow only, for their cost on 2 CPU cores (compiling the Nature CNN and its
# updates; 20-75 s each, measured on a loaded machine): the sequence agents' and PQN's frames. Every ray cell too.
COSTLY = {
    ("ppo", "local", "frames"),
    ("pqn", "local", "frames"),
    ("impala", "local", "frames"),
    ("r2d2", "local", "frames"),
    ("pqn", "sebulba", "frames"),
}

# Claimed compiled cells under -m slow only because a default cell runs the same compiled system on the same kind
# of observations with an agent of the same action space (a sebulba run compiles for 10-15 s on 2 loaded cores).
SAME_SYSTEM = {
    ("td3", "sebulba", "vector"): ("sac", "sebulba", "vector"),
    ("d4pg", "sebulba", "vector"): ("sac", "sebulba", "vector"),
    ("pqn", "sebulba", "vector"): ("ppo", "sebulba", "vector"),
}


def _marks(agent: str, launcher: str, kind: str) -> tuple[pytest.MarkDecorator, ...]:
    """A claimed cell's run: compiled ones in the current part, local ones in the reverb part, ray ones one at a
    time; slow where another test runs it already, where it is costly, where a default cell runs its system, and
    under ray."""
    cell = (agent, launcher, kind)
    stack = pytest.mark.reverb if launcher in ("local", "ray") else pytest.mark.current
    slow = (pytest.mark.slow,) if cell in COVERED or cell in COSTLY or cell in SAME_SYSTEM or launcher == "ray" else ()
    return (stack, *slow, *((pytest.mark.ray,) if launcher == "ray" else ()))


@pytest.mark.current  # Reads files: the same on both stacks.
def test_a_cell_that_stands_in_for_another_runs_by_default():
    """Each cell SAME_SYSTEM names runs in the default suite: here, or in the test COVERED names."""
    for cell, stand_in in SAME_SYSTEM.items():
        assert stand_in[1] == cell[1] and stand_in[2] == cell[2], (cell, stand_in)
        assert stand_in in COVERED or not (stand_in in COSTLY or stand_in in SAME_SYSTEM), stand_in
        assert (stand_in[0] in CONTINUOUS) == (cell[0] in CONTINUOUS), (cell, stand_in)


@pytest.mark.current  # Reads files: the same on both stacks.
def test_the_tests_that_cover_cells_exist_in_the_default_suite():
    """Each test COVERED names is a function of its file, neither it nor its module marked slow (its cell runs
    there by default)."""
    import ast

    for where in set(COVERED.values()):
        path, name = where.split("::")
        with open(os.path.join(ROOT, path)) as file:
            tree = ast.parse(file.read())
        functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert name in functions, where
        marks = {ast.unparse(decorator) for decorator in functions[name].decorator_list}
        assert "pytest.mark.slow" not in marks and "slow" not in module_marks(os.path.join(ROOT, path)), where


# Cells checked for a refusal: the kinds a cell leaves out, and every local and ray cell (refused on the current stack).
REFUSED = [cell for cell in CELLS if cell[2] not in RUNS[cell[0]][cell[1]] or cell[1] in ("local", "ray")]
CLAIMED = [cell for cell in CELLS if cell[2] in RUNS[cell[0]][cell[1]]]


@pytest.mark.current
@pytest.mark.parametrize("agent, launcher, kind", [pytest.param(*cell, id="-".join(cell)) for cell in REFUSED])
def test_a_pair_that_does_not_run_a_kind_refuses_it_in_one_line(tmp_path, agent, launcher, kind):
    """A kind the doc's cell leaves out (on the current stack, every local and ray cell) is a `ConfigError`
    before anything starts: one line, its key and words one of the doc's refusal rows, a row that names
    this launcher."""
    if runs_here(agent, launcher, kind):
        pytest.skip("runs on this stack")
    with pytest.raises(ConfigError) as caught:
        compose_experiment(cell_overrides(agent, launcher, kind), str(tmp_path))
    error = caught.value
    message = str(error)
    assert "\n" not in message, message
    rows = [row for row in REASONS if row["key"] == error.key and row["words"] in message]
    assert rows, f"no refusal row in docs/launchers.md says: {message}"
    assert any(row["by"] == "every launcher" or f"`{launcher}`" in row["by"] for row in rows), (rows, launcher)


def _replay_observations(run_dir: str, experiment, launcher):
    """The observations of every replica's replay in the run's last checkpoint, restored as a resume would."""
    from rl import checkpointing

    latest, _ = checkpointing.find_latest(run_dir, warn=False)
    state = checkpointing.restore_learner_state(latest, launcher.checkpoint_template(experiment))
    return state.buffer.experience.observation


@pytest.mark.parametrize(
    "agent, launcher, kind", [pytest.param(*cell, marks=_marks(*cell), id="-".join(cell)) for cell in CLAIMED]
)
def test_a_pair_runs_each_kind_it_claims_to_its_end(tmp_path, agent, launcher, kind):
    """A tiny run of the cell: the budget spent, the learner trained, the evaluations recorded."""
    overrides = tiny_run(agent, launcher, kind)
    if launcher == "ray":
        result = run_train([*overrides, "launcher.num_actors=1", f"hydra.run.dir={tmp_path}"])
        assert result.returncode == 0, result.stderr[-3000:]
        summary = read_summary(str(tmp_path))
    else:
        experiment, launch = compose_experiment(overrides, str(tmp_path))
        summary = vars(launch(experiment))
    assert summary["status"] == "finished" and summary["actor_steps"] >= BUDGET and summary["learner_steps"] > 0, (
        summary
    )
    evaluations = summary["eval_returns"]  # The untrained round at 0, the last at the end of the budget.
    assert evaluations[0][0] == 0 and evaluations[-1][0] == summary["actor_steps"], evaluations
    assert all(np.isfinite(value) for _, value in evaluations), evaluations


@pytest.mark.current
def test_dqn_pong_under_sebulba_runs_to_its_end_with_uint8_frames_in_replay(tmp_path):
    """experiment=dqn_pong launcher=sebulba (issue 58): once past its first evaluation it learns, and the replay
    on the device holds the frames as the environment gives them, uint8: a quarter of float32's memory."""
    overrides = [
        "experiment=dqn_pong",
        "launcher=sebulba",
        "max_actor_steps=512",
        "eval_every=256",
        "eval_episodes=1",
        "environment.num_envs=2",
        "environment.max_episode_steps=100",
        "launcher.block_length=32",
        "network.hidden_size=16",
        "agent.min_replay_size=128",
        "agent.samples_per_insert=0.5",  # 64 steps an update, one SGD step of 32.
        "logger=csv",
        "progress=false",
    ]
    result = run_train([*overrides, f"hydra.run.dir={tmp_path}"])
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_summary(str(tmp_path))
    assert summary["status"] == "finished" and summary["actor_steps"] == 512
    assert summary["learner_steps"] == 7  # One SGD step an update from the second (128 steps in) to the eighth.
    assert [steps for steps, _ in summary["eval_returns"]] == [0, 256, 512]
    experiment, launcher = compose_experiment(overrides, str(tmp_path))
    observation = _replay_observations(str(tmp_path), experiment, launcher)
    assert observation.dtype == np.uint8 and observation.shape[-3:] == (84, 84, 4)
    assert np.asarray(observation).any()  # The frames themselves, not an empty buffer.
