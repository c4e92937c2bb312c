"""Every config option composes and validates; bad input exits cleanly before anything starts."""

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, run_train, stack_marks
from rl.local import LocalLauncher
from rl.ray import RayLauncher
from rl.experiments.make_experiment import make_experiment
from rl.experiments.validation import ConfigError
from rl.core import is_discrete
from rl.command_line import GRAMMAR_PAGE, integral_overrides, override_syntax_error

CONF = os.path.join(ROOT, "conf")
GROUPS = ["environment", "network", "policy", "logger", "agent", "launcher", "experiment"]
# Options that need a companion override to make sense on their own.
COMPANIONS = {
    ("environment", "gymnasium"): ["environment.name=Acrobot-v1"],
    # Continuous-control options compose with a continuous-action agent and environment
    # (tests/test_continuous_config.py checks that the default DQN refuses them).
    ("environment", "pendulum"): ["agent=td3"],
    ("environment", "mujoco"): ["agent=sac"],
    ("environment", "dm_control"): ["agent=d4pg"],
    ("network", "actor_critic_mlp"): ["agent=sac", "environment=pendulum"],
    ("policy", "gaussian_noise"): ["agent=td3", "environment=pendulum"],
    ("policy", "stochastic"): ["agent=sac", "environment=pendulum"],
    ("policy", "deterministic"): ["agent=d4pg", "environment=pendulum"],
    ("agent", "sac"): ["environment=pendulum"],
    ("agent", "td3"): ["environment=pendulum"],
    ("agent", "d4pg"): ["environment=pendulum"],
    # On-policy options compose with an on-policy agent (ppo acts in either action kind).
    ("network", "policy_value_mlp"): ["agent=ppo"],
    ("policy", "sample"): ["agent=ppo"],
    # The recurrent network composes with the recurrent agent (tests/test_r2d2.py checks
    # that the default DQN refuses it).
    ("network", "lstm"): ["agent=r2d2"],
    # Pixel environments and convolutional networks go together (tests/test_atari.py checks
    # the refusals either way).
    ("environment", "atari"): ["network=atari_cnn"],
    ("network", "atari_cnn"): ["environment=atari"],
    ("network", "impala_resnet"): ["environment=atari", "agent=ppo"],
    ("network", "lstm_atari_cnn"): ["environment=atari", "agent=r2d2"],
    # gymnax environments and the compiled launcher (tests/test_anakin.py); the default DQN
    # under anakin needs a whole number of SGD steps per step of its one copy.
    ("environment", "gymnax"): ["environment.name=CartPole-v1"],
    # A Playground task has no default (tests/test_playground.py); its actions are continuous.
    ("environment", "playground"): ["environment.name=CartpoleBalance", "agent=sac"],
    # Host environments and the compiled learner (tests/test_sebulba.py): budgets in whole blocks of 25 steps.
    ("launcher", "sebulba"): ["launcher.block_length=25"],
    ("launcher", "anakin"): [
        "environment=gymnax",
        "environment.name=CartPole-v1",
        "checkpoint=false",
        "agent.samples_per_insert=128",
    ],
}
# Options that are valid but not with the default (discrete-action) agent.
NEEDS_OTHER_AGENT: set[tuple[str, str]] = set()


def options(group):
    return sorted(name[:-5] for name in os.listdir(os.path.join(CONF, group)) if name.endswith(".yaml"))


def compose_config(overrides):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=False)


def build(overrides, tmp_path):
    config = compose_config(overrides)
    choices = {o.split("=")[0]: o.split("=")[1] for o in overrides if "." not in o.split("=")[0]}
    return make_experiment(config, str(tmp_path), choices)


ALL_OPTIONS = [(group, option) for group in GROUPS for option in options(group)]


def test_every_group_has_options():
    for group in GROUPS:
        assert options(group), f"conf/{group} has no options"


@pytest.mark.parametrize(
    "group,option",
    [
        pytest.param(g, o, id=f"{g}={o}", marks=stack_marks([f"{g}={o}", *COMPANIONS.get((g, o), [])]))
        for g, o in ALL_OPTIONS
    ],
)
def test_every_option_composes_and_validates(group, option, tmp_path):
    overrides = [f"{group}={option}", *COMPANIONS.get((group, option), [])]
    if (group, option) in NEEDS_OTHER_AGENT:
        with pytest.raises(ConfigError, match="continuous"):
            build(overrides, tmp_path)
        return
    experiment, launcher = build(overrides, tmp_path)
    config = compose_config(overrides)
    assert experiment.max_actor_steps == config.max_actor_steps and experiment.seed == config.seed
    expected = RayLauncher if (group, option) == ("launcher", "ray") else LocalLauncher
    if config.launcher._target_ == "rl.anakin.AnakinLauncher":
        from rl.anakin import AnakinLauncher

        expected = AnakinLauncher
    if config.launcher._target_ == "rl.sebulba.SebulbaLauncher":
        from rl.sebulba import SebulbaLauncher

        expected = SebulbaLauncher
    assert type(launcher) is expected
    # The agent built acts in the kind of action space the environment has (None: either).
    kind = "discrete" if is_discrete(experiment.environment_spec.actions) else "continuous"
    assert experiment.builder.action_kind in (kind, None)


def test_defaults_are_dqn_on_cartpole(tmp_path):
    experiment, _ = build([], tmp_path)
    assert experiment.agent_name == "dqn" and experiment.environment_name == "CartPole-v1"


def test_preset_sets_budget_and_groups(tmp_path):
    experiment, _ = build(["experiment=dqn_cartpole"], tmp_path)
    assert experiment.environment_name == "CartPole-v1"
    assert experiment.max_actor_steps == 50_000 and experiment.eval_every == 2_500
    assert experiment.num_envs == 8 and experiment.threshold == 475.0


def test_environment_name_override_reaches_the_factory(tmp_path):
    experiment, _ = build(["environment=gymnasium", "environment.name=Acrobot-v1"], tmp_path)
    assert experiment.environment_spec.actions.num_values == 3


BAD_OVERRIDES = [
    (["agent=nope"], "agent"),
    (["agent=dqn", "environment=pendulum"], "agent"),
    (["agent.learning_rate=abc"], "agent.learning_rate"),
    (["max_actor_steps=-5"], "max_actor_steps"),
    (["eval_episodes=0"], "eval_episodes"),
    (["agent.batch_size=-1"], "batch_size"),
    (["agent.lerning_rate=0.1"], "lerning_rate"),
    (["environment=gymnasium"], "environment.name"),
    (["environment=gymnasium", "environment.name=NoSuchEnv-v0"], "environment.name"),
    (["seed=abc"], "seed"),
    (["network.hidden_sizes=[a,b]"], "network.hidden_sizes"),
    (["policy.epsilon_end=2.0"], "epsilon_end"),
    (["objective=best"], "objective"),
    # Settings the deterministic mode would otherwise ignore, or could not checkpoint.
    (["launcher.deterministic=true", "environment.num_envs=4", "environment.backend=envpool"], "environment.backend"),
]


@pytest.mark.current
@pytest.mark.parametrize("overrides,key", BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES])
def test_bad_override_exits_with_a_clear_message(overrides, key, tmp_path):
    result = run_train([*overrides, f"hydra.run.dir={tmp_path}"], timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert key in output, output
    assert "Traceback" not in output, output
    assert len(output.strip().splitlines()) < 25, output
    assert not os.path.exists(tmp_path / "summary.json")
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.current
def test_a_list_for_a_mapping_option_names_its_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^logger\.wandb: expected Optional\[dict\[str, Any\]\], got \[1\]"):
        build(["logger.wandb=[1]"], tmp_path)


@pytest.mark.current
def test_an_integer_valued_float_is_accepted_as_the_integer(tmp_path):
    """`max_actor_steps=1e5` on the command line is 100000, as is an agent's integer option
    (and what interpolates it: DQN's learning-rate decay follows max_actor_steps)."""
    overrides = ["experiment=dqn_cartpole", "max_actor_steps=1e5", "agent.target_update_period=2.5e2"]
    assert integral_overrides([*overrides, "agent.learning_rate=1e-3,2.0", "hydra.run.dir=1e5"]) == [
        "experiment=dqn_cartpole",
        "max_actor_steps=100000",
        "agent.target_update_period=250",
        "agent.learning_rate=1e-3,2",  # A float option reads 2 as 2.0.
        "hydra.run.dir=1e5",
    ]
    experiment, _ = build(integral_overrides(overrides), tmp_path)
    assert experiment.max_actor_steps == 100_000 and type(experiment.max_actor_steps) is int
    config = experiment.builder.config
    assert config.target_update_period == 250 and type(config.target_update_period) is int
    assert config.learning_rate_decay_actor_steps == 100_000
    assert config.learning_rate == 1e-3 and type(config.learning_rate) is float
    result = run_train(["max_actor_steps=1000.5", f"hydra.run.dir={tmp_path}"], timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "Invalid configuration: max_actor_steps: expected int, got 1000.5"
    ]


@pytest.mark.current
def test_an_unknown_key_names_the_option_it_most_likely_meant(tmp_path):
    from rl.experiments.validation import nearest_option

    options = ["learning_rate", "batch_size", "target_update_period"]
    assert [nearest_option(name, options) for name in ("lr", "lerning_rate", "batch", "tup", "zzz")] == [
        "learning_rate",
        "learning_rate",
        "batch_size",
        "target_update_period",
        None,
    ]
    result = run_train(["agent.lr=1e-3", f"hydra.run.dir={tmp_path}"], timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "Invalid configuration: agent.lr: unknown option; did you mean agent.learning_rate?"
    ]
    assert not os.path.exists(tmp_path / "logs")


@pytest.mark.current
def test_a_misspelt_preset_names_the_one_it_most_likely_meant(tmp_path):
    result = run_train(["experiment=ppo_gymax_cartpole", f"hydra.run.dir={tmp_path / 'run'}"], timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "Invalid configuration: experiment=ppo_gymax_cartpole: no such option of the config group experiment; "
        "did you mean experiment=ppo_gymnax_cartpole?"
    ]
    assert not os.path.exists(tmp_path / "run")


SWEEP_SYNTAX_ERRORS = [
    ("agent.learning_rate=1e-3,,2e-3", "cannot read '1e-3,,2e-3': an empty item in a comma list"),
    ("agent.learning_rate=range(1,", "cannot read 'range(1,': '(' is never closed"),
    ("agent.learning_rate=choice(1e-3", "cannot read 'choice(1e-3': '(' is never closed"),
]


@pytest.mark.current
@pytest.mark.parametrize("override,reason", SWEEP_SYNTAX_ERRORS, ids=[o for o, _ in SWEEP_SYNTAX_ERRORS])
def test_a_sweep_syntax_error_names_its_key_in_one_line(override, reason, tmp_path):
    """Hydra's parser says `no viable alternative at input ...` or dumps its grammar's tokens, without the key."""
    result = run_train(["-m", override, f"hydra.sweep.dir={tmp_path / 'sweep'}"], timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"Invalid configuration: agent.learning_rate: {reason} (the override grammar: {GRAMMAR_PAGE})"
    ]
    assert not os.path.exists(tmp_path / "sweep")


@pytest.mark.current
def test_an_override_the_grammar_cannot_read_is_explained_by_its_key():
    """The reasons a researcher can act on come first; what Hydra's parser said, less its token list, last."""
    grammar = "extraneous input ')' expecting {<EOF>, ':', BRACKET_OPEN, BRACE_OPEN, FLOAT, INT}"
    reasons = {
        "seed=1,": "seed: cannot read '1,': an empty item in a comma list",
        "seed=,1": "seed: cannot read ',1': an empty item in a comma list",
        "seed=choice(1,)": "seed: cannot read 'choice(1,)': an empty item in a comma list",
        "seed=1)": "seed: cannot read '1)': ')' closes nothing",
        "seed=[1,2)": "seed: cannot read '[1,2)': ')' closes '['",
        "seed='1": "seed: cannot read \"'1\": the quote ' is never closed",
        "seed='(',1": None,  # A bracket inside quotes is a character, and the list is whole.
        "+seed=${x": "seed: cannot read '${x': '{' is never closed",
    }
    for override, reason in reasons.items():
        line = override_syntax_error(override, grammar)
        if reason is None:
            assert line.startswith("seed: cannot read \"'(',1\": unexpected ')' ("), line
        else:
            assert line == f"{reason} (the override grammar: {GRAMMAR_PAGE})"
    assert override_syntax_error("seed", "missing EQUAL at '<EOF>'") == "seed: no value; an override is key=value"
    assert override_syntax_error("agent.learning rate=1", "") == (
        "'agent.learning rate': a key holds no spaces; an override is key=value"
    )


@pytest.mark.current
def test_a_preset_with_another_agent_says_whose_preset_it_is(tmp_path):
    result = run_train(["experiment=dqn_cartpole", "agent=ppo", f"hydra.run.dir={tmp_path}"], timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("Invalid configuration: agent: experiment=dqn_cartpole is a preset for agent=dqn")


@pytest.mark.current
def test_a_refused_command_leaves_no_new_directory(tmp_path):
    """Hydra makes the run directory (outputs/<date>/<time>) before the config is checked: a refused command
    takes it back, and everything it made, while a directory the command line named and that existed stays."""
    environment = {**os.environ, "WANDB_MODE": "offline"}
    command = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), "agent.batch_size=-1"]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "batch_size must be > 0" in result.stderr, result.stderr[-2000:]
    assert os.listdir(tmp_path) == []
    named = tmp_path / "named"
    named.mkdir()
    result = subprocess.run([*command, f"hydra.run.dir={named}"], cwd=tmp_path, env=environment, capture_output=True)
    assert result.returncode == 2 and os.listdir(named) == []
