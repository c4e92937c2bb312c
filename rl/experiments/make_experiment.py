"""Turns a composed Hydra configuration into an Experiment and a launcher, checking everything
(run settings, each `_target_`'s keys and types, the environment first) as a one-line `ConfigError`."""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import functools
import importlib.util
import inspect
import math
import os
import pkgutil
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from dm_env import specs
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigTypeError, InterpolationResolutionError, MissingMandatoryValue, ValidationError

from rl.experiments.config import Experiment, enable_compilation_cache
from rl.core import is_discrete, make_environment_spec
from rl.experiments.schemas import options_schema

HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


class ConfigError(ValueError):
    """A user error in the configuration; `key` is the dotted path of the culprit."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def nearest_option(name: str, options: list[str]) -> str | None:
    """The option a mistyped key most likely meant: by initials (lr -> learning_rate), prefix or spelling."""
    for option in options:
        if "".join(word[0] for word in option.split("_") if word) == name:
            return option
    for option in options:
        if option.startswith(name):
            return option
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return close[0] if close else None


def check_values(key: str, schema: type, values: Mapping[str, Any]) -> DictConfig:
    """`values` merged onto the dataclass `schema` by OmegaConf, which checks their types; a key that
    is no field of it is refused, naming the option it most likely meant."""
    names = [field.name for field in dataclasses.fields(schema)]
    for name in values:
        if name not in names:
            nearest = nearest_option(name, names)
            hint = f"did you mean {key}.{nearest}? " if nearest else ""
            raise ConfigError(f"{key}.{name}", f"unknown option; {hint}allowed: {', '.join(names)}")
    config, hints = OmegaConf.structured(schema), {field.name: field.type for field in dataclasses.fields(schema)}
    for name, value in values.items():  # One at a time: OmegaConf names no key for a list given for a dict.
        try:
            config = OmegaConf.merge(config, {name: value})
        except (ValidationError, ConfigTypeError) as error:
            message = str(error.msg).splitlines()[0]
            if "could not be converted" not in message:  # OmegaConf's other messages name its node classes.
                hint = hints.get(name, Any)
                expected = str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__
                message = f"expected {expected}, got {value!r}"
            name = str(error.full_key) or name
            raise ConfigError(f"{key}.{name}" if key else name, message) from None
    return config


def check_factory(key: str, node: Any, runtime_arguments: tuple[str, ...] = ()) -> Callable[..., Any]:
    """The `_target_` of `key`'s option, imported, with its options checked against its schema
    (rl/experiments/schemas.py); what the experiment passes at run time is refused."""
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise ConfigError(key, "no option with a _target_ selected for this config group (see conf/)")
    try:
        target = pkgutil.resolve_name(node["_target_"])
    except (ImportError, AttributeError, ValueError, TypeError) as error:
        raise ConfigError(f"{key}._target_", f"cannot import {node['_target_']!r} ({error})") from None
    if not callable(target):
        raise ConfigError(f"{key}._target_", f"{node['_target_']!r} is not callable")
    values = {name: value for name, value in node.items() if name not in HYDRA_KEYS}
    for name in values:
        if name in runtime_arguments:
            raise ConfigError(f"{key}.{name}", "is set by the experiment and cannot be configured")
    schema = options_schema(key.partition(".")[0], node["_target_"], target, runtime_arguments)
    if schema is not None:
        check_values(key, schema, values)
    return target


@dataclasses.dataclass
class RunSettings:
    seed: int
    max_actor_steps: int
    eval_every: int
    eval_episodes: int
    checkpoint: Any  # true / false or a mapping: a CheckpointSettings.
    progress: bool
    threshold: float | None
    compilation_cache: str | None
    resume: str | None = None
    objective: str = "final_eval_return"


def check_checkpoint_settings(value: Any) -> Any:
    from rl.checkpointing import CheckpointSettings

    if isinstance(value, bool):
        return CheckpointSettings(enabled=value)
    if not isinstance(value, Mapping):
        fields = ", ".join(field.name for field in dataclasses.fields(CheckpointSettings))
        raise ConfigError("checkpoint", f"expected true, false or a mapping of {fields}, got {value!r}")
    check_values("checkpoint", CheckpointSettings, value)
    try:
        return CheckpointSettings(**value)
    except ValueError as error:  # "<field> must be ..., got <value>" (rl/checks.py).
        name, _, message = str(error).partition(" ")
        raise ConfigError(f"checkpoint.{name}", message) from None


def check_replay_settings(builder: Any, max_actor_steps: int) -> None:
    """Refuses a replay ratio too small for the learner to ever sample one batch within the run."""
    config = vars(builder.config)
    minimum, ratio = config.get("min_replay_size"), config.get("samples_per_insert")
    batch = builder.samples_per_learner_step
    if minimum is None or ratio is None or not batch or max_actor_steps <= minimum:
        return
    if (max_actor_steps - minimum) * ratio < batch:
        raise ConfigError(
            "agent.samples_per_insert",
            f"{ratio} samples per insert never add up to one learner batch of {batch} items within the run "
            f"({max_actor_steps - minimum} inserts after agent.min_replay_size={minimum}): the learner could never "
            "sample; raise samples_per_insert or lower the batch size",
        )


def check_run_settings(config: Mapping[str, Any]) -> RunSettings:
    values = {field.name: config[field.name] for field in dataclasses.fields(RunSettings) if field.name in config}
    try:
        settings = OmegaConf.to_object(check_values("", RunSettings, values))
    except MissingMandatoryValue as error:
        raise ConfigError(error.full_key, "is missing from the configuration") from None
    settings.checkpoint = check_checkpoint_settings(settings.checkpoint)
    for name in ("max_actor_steps", "eval_every", "eval_episodes"):
        if values[name] <= 0:
            raise ConfigError(name, f"must be a positive integer, got {values[name]}")
    if not 0 <= settings.seed < 2**32:
        raise ConfigError("seed", f"must be in [0, 2**32), got {settings.seed}")
    from rl.experiments.summary import OBJECTIVES

    if settings.objective not in OBJECTIVES:
        raise ConfigError("objective", f"must be one of {', '.join(OBJECTIVES)}, got {settings.objective!r}")
    if settings.threshold is not None and not math.isfinite(settings.threshold):
        raise ConfigError("threshold", f"must be a finite number or null, got {settings.threshold}")
    return settings


# Pixel networks by the network kind an agent needs.
PIXEL_NETWORKS = {
    "q_values": "network=atari_cnn or network=impala_resnet",
    "policy_value": "network=atari_cnn or network=impala_resnet",
    "recurrent_q": "network=lstm_atari_cnn (network=lstm with network.torso=rl.networks.conv.nature_torso)",
}


def network_kinds(factory: Callable[..., Any], needed: str) -> list[str]:
    """The kinds of network `factory` builds (a `NetworkFactory` declares them; a torso under several heads,
    atari_cnn, is told the agent's); a factory from outside the project is taken to build what the agent needs."""
    from rl.networks.base import NetworkFactory  # Here: the environment is checked before JAX is imported.

    return list(factory.network_kinds) if isinstance(factory, NetworkFactory) else [needed]


def observation_kind(factory: Callable[..., Any], options: Mapping[str, Any]) -> str:
    """What `factory` reads, "pixels" or "vector": its own declaration, else its torso's (`network.torso`)."""
    from rl.networks.base import NetworkFactory

    reads = factory.observation_kind if isinstance(factory, NetworkFactory) else None
    if reads is None and isinstance(options.get("torso"), str):
        from rl.networks.recurrent import resolve_torso

        try:
            torso = resolve_torso(options["torso"])
        except ValueError:
            torso = None  # The factory reports a bad torso itself.
        reads = torso.observation_kind if isinstance(torso, NetworkFactory) else None
    return reads or "vector"


def action_kind(policy: Any) -> str | None:
    """The action space a policy acts in, "discrete" or "continuous"; None: either (or not declared)."""
    from rl.policies import Head

    return policy.action_kind if isinstance(policy, Head) else None


def check_network_kind(kinds: Sequence[str], choice: str, needed: str) -> None:
    """Refuses a network of another kind than the agent needs."""
    if needed in kinds:
        return
    message = f"'{choice}' builds {'/'.join(kinds)} networks, but the agent needs {needed} networks"
    if "recurrent_q" in (*kinds, needed):
        message += (
            "; recurrent Q-networks (network=lstm, or network=lstm_atari_cnn for Atari frames: an LSTM core carrying "
            "a state from step to step) are for recurrent agents only (agent=r2d2), and recurrent agents need them"
        )
    raise ConfigError("network", message)


def check_observations(reads: str, observation_spec: Any, choice: str, needed: str, environment: str) -> None:
    """Refuses a convolutional network on vector observations or an MLP on uint8 [height, width,
    channels] frames (nested observations are left to the network)."""
    if not isinstance(observation_spec, specs.Array):
        return
    shape = tuple(observation_spec.shape)
    observations = "pixels" if len(shape) == 3 and str(observation_spec.dtype) == "uint8" else "vector"
    if reads == observations:
        return
    if reads == "pixels":
        message = (
            f"'{choice}' is a convolutional network for uint8 [height, width, channels] frames, but {environment} "
            f"has vector observations of shape {shape}; use an MLP network (mlp, policy_value_mlp, lstm, ...) or a "
            "pixel environment (environment=atari)"
        )
    else:
        pixel_network = PIXEL_NETWORKS.get(needed)
        hint = f"use {pixel_network}" if pixel_network else "this agent has no pixel network; pick a vector environment"
        message = (
            f"'{choice}' reads vector observations, but {environment} has pixel frames of shape {shape} "
            f"(uint8 [height, width, channels]); {hint}"
        )
    raise ConfigError("network", message)


def agent_network(
    network_factory: functools.partial,
    choice: str,
    options: Mapping[str, Any],
    builder: Any,
    agent_name: str,
    environment: BuiltEnvironment,
) -> Callable[..., Any]:
    """`network_factory` given what the agent needs (a head's kind, outputs per action); refuses a network
    of another kind, without an output the agent needs, or that cannot read the observations."""
    target, needed = network_factory.func, builder.network_kind
    kinds = network_kinds(target, needed)
    check_network_kind(kinds, choice, needed)
    outputs = builder.network_outputs()
    missing = sorted(set(outputs) - set(inspect.signature(target).parameters))
    if missing:
        raise ConfigError(
            "network", f"agent={agent_name} needs a network that takes {', '.join(missing)}; network={choice} does not"
        )
    if len(kinds) > 1:
        outputs = {**outputs, "network_kind": needed}
    reads = observation_kind(target, options)
    check_observations(reads, environment.spec.observations, choice, needed, environment.name)
    return functools.partial(network_factory, **outputs)


def check_launcher_stack(launcher: Any, choice: str | None) -> None:
    """Refuses a launcher that needs a module this Python lacks (dm-reverb or Ray, on the current stack), naming
    the stack that has it: before a run starts (a configuration is composed and checked without it)."""
    from rl.experiments.launcher import REVERB_STACK_MODULES, Launcher

    requires = launcher.requires if isinstance(launcher, Launcher) else ()  # Any callable can launch.
    missing = [module for module in requires if importlib.util.find_spec(module) is None]
    if missing:
        names = " and ".join(REVERB_STACK_MODULES.get(module, module) for module in missing)
        here = "the current stack (.venv-current)" if os.path.basename(sys.prefix) == ".venv-current" else sys.prefix
        raise ConfigError(
            "launcher",
            f"{choice or type(launcher).__name__} needs {names}, which {here} lacks: use the reverb stack "
            "(.venv, requirements.txt) or launcher=anakin",
        )


BACKENDS = ("gymnasium", "envpool")
# Arguments the experiment passes at run time, which the YAML must not set.
RUNTIME_ARGUMENTS = {
    "environment": ("seed",),
    "network": ("environment_spec", "network_kind", "outputs_per_action"),
    "logger": ("directory", "run_name", "run_config", "run_group", "run_tags"),
    "agent": ("exploration",),
    "observers": ("label", "instance", "run_directory"),
}


def describe_actions(action_spec: Any) -> str:
    """`3 discrete actions`, `continuous actions of shape (6,) in [-1, 1]`."""
    if is_discrete(action_spec):
        return f"{action_spec.num_values} discrete actions"
    shape = tuple(action_spec.shape) if isinstance(action_spec, specs.Array) else ()
    if not isinstance(action_spec, specs.BoundedArray):
        return f"continuous actions of shape {shape}"
    low, high = (np.unique(np.asarray(bound, np.float64)) for bound in (action_spec.minimum, action_spec.maximum))
    bounds = f"in [{low[0]:g}, {high[0]:g}]" if low.size == high.size == 1 else "with per-dimension bounds"
    return f"continuous actions of shape {shape} {bounds}"


def _user_error(key: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except (TypeError, ValueError, InstantiationException) as error:
        cause = error
        while cause.__cause__ is not None:  # Hydra wraps factory errors: show the root cause.
            cause = cause.__cause__
        if isinstance(cause, ConfigError):  # The factory named the key itself.
            raise cause from None
        raise ConfigError(key, str(cause)) from None


def _instantiate(key: str, node: DictConfig, **kwargs: Any) -> Any:
    return _user_error(key, instantiate, node, _convert_="all", **kwargs)


def resolved_container(config: DictConfig) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as error:
        raise ConfigError(error.full_key, "is required; set it on the command line") from None
    except InterpolationResolutionError as error:
        raise ConfigError(error.full_key, f"cannot be resolved ({error.msg.splitlines()[0]})") from None


def environment_label(environment: Mapping[str, Any], choices: Mapping[str, Any]) -> str:
    """`environment.name`, else the environment option."""
    return str(environment.get("name") or choices.get("environment") or "environment")


def tracking_settings(hydra_config: Any, config: DictConfig) -> dict[str, Any]:
    """`run_group`, `run_tags` and `job_number` for `make_experiment`. A multirun's group names the
    sweep (without what it varies), its tags are what it varies (the sweeper's `params` and the sweep
    overrides multirun.yaml recorded), its job number ends the run's name; a single run has no group
    and is tagged with its overrides."""
    import hashlib

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    from rl.loggers.wandb import default_group, override_tags

    overrides = list(hydra_config.overrides.task or [])
    if hydra_config.mode != RunMode.MULTIRUN:
        return {"run_group": None, "run_tags": override_tags(overrides), "job_number": None}
    swept = {str(key) for key in ((hydra_config.sweeper or {}).get("params") or {})}
    sweep_dir = os.path.abspath(str(hydra_config.sweep.dir))
    recorded = os.path.join(sweep_dir, "multirun.yaml")
    stamp = ""
    sweep_overrides = overrides
    if os.path.isfile(recorded):
        stamp = os.stat(recorded).st_mtime_ns
        sweep_overrides = OmegaConf.select(OmegaConf.load(recorded), "hydra.overrides.task", default=None) or overrides
    parser = OverridesParser.create()
    for line in sweep_overrides:
        try:
            override = parser.parse_override(str(line))
        except Exception:  # noqa: BLE001 - an override Hydra itself accepted; skip the odd one.
            continue
        if override.is_sweep_override():
            swept.add(override.get_key_element().lstrip("+~"))
    choices = dict(hydra_config.runtime.choices or {})
    subject = []
    if choices.get("experiment") and "experiment" not in swept:
        subject.append(choices["experiment"])
    elif choices.get("agent") and not swept & {"agent", "experiment"}:
        subject.append(choices["agent"])
    if not any(key in ("environment", "experiment") or key.startswith("environment.") for key in swept):
        name = OmegaConf.select(config, "environment.name", default=None, throw_on_resolution_failure=False)
        subject.append(environment_label({"name": name}, choices))
    # This sweep's own id: its directory and when Hydra wrote the directory's multirun.yaml.
    sweep_id = hashlib.sha1(f"{sweep_dir}:{stamp}".encode()).hexdigest()[:6]
    return {
        "run_group": default_group(str(hydra_config.sweep.dir), subject, sweep_id),
        "run_tags": override_tags(overrides, swept),
        "job_number": hydra_config.job.get("num"),
    }


@dataclasses.dataclass
class BuiltEnvironment:
    """The environment group built: its factories, its spec (from one probe copy), its label and the
    actors' loop settings (`num_envs`, `backend`), which configure the loops, not the factory."""

    factory: Callable[..., Any]
    spec: Any
    name: str
    num_envs: int
    vector_factory: Callable[..., Any] | None = None
    evaluation_factory: Callable[..., Any] | None = None


def loop_settings(options: dict[str, Any]) -> tuple[int, str]:
    """`num_envs` and `backend` taken out of the environment's options, checked."""
    num_envs = options.pop("num_envs", 1)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError("environment.num_envs", f"must be an integer >= 1 (copies per actor), got {num_envs!r}")
    backend = options.pop("backend", "gymnasium")
    if backend not in BACKENDS:
        raise ConfigError("environment.backend", f"must be one of {list(BACKENDS)}, got {backend!r}")
    return num_envs, backend


def build_environment(options: Mapping[str, Any], seed: int, choices: Mapping[str, Any]) -> BuiltEnvironment:
    """The environment, checked and probed before the other groups' code (JAX, TensorFlow) is imported."""
    options = dict(options or {})
    num_envs, backend = loop_settings(options)
    check_factory("environment", options, RUNTIME_ARGUMENTS["environment"])
    factory = _instantiate("environment", options, _partial_=True)
    probe = _user_error("environment.name", factory, seed=seed)
    environment = BuiltEnvironment(factory, make_environment_spec(probe), environment_label(options, choices), num_envs)
    probe.close()
    if backend == "envpool":
        from rl.environments.backends import envpool_factory

        try:
            environment.vector_factory = envpool_factory(options, environment.spec)
        except ValueError as error:
            raise ConfigError("environment.backend", str(error)) from None
    # Evaluators play without training-only preprocessing (Atari): the game's own score.
    if options.get("reward_clip") or options.get("episodic_life"):
        evaluation_options = {**options, "reward_clip": False, "episodic_life": False}
        environment.evaluation_factory = _instantiate("environment", evaluation_options, _partial_=True)
    return environment


def build_agent(config: DictConfig, choices: Mapping[str, Any], environment: BuiltEnvironment) -> Any:
    """The agent's builder with its behaviour policy; refuses either where it cannot act in the
    environment's action space."""
    policy = _instantiate("policy", config.policy)
    builder = _user_error("agent", _instantiate("agent", config.agent, _partial_=True), exploration=policy)
    actions = environment.spec.actions
    environment_kind = "discrete" if is_discrete(actions) else "continuous"
    for key, kind in (("agent", builder.action_kind), ("policy", action_kind(policy))):
        if kind is not None and kind != environment_kind:
            raise ConfigError(
                key,
                f"'{choices.get(key, key)}' acts in {kind} action spaces, but {environment.name} has "
                f"{describe_actions(actions)}; pick a {environment_kind}-action {key} or a {kind}-action environment",
            )
    return builder


def build_observers(
    config: DictConfig, nodes: Mapping[str, Any], run_directory: str, game_score: bool
) -> list[Callable[..., Any]]:
    """The observers' factories (`nodes`: their options, resolved), each built once to check it; with
    `game_score`, training records show the game's own score too (the evaluators' environment differs)."""
    observers = []
    for name, node in nodes.items():
        key = f"observers.{name}"
        check_factory(key, node, RUNTIME_ARGUMENTS["observers"])
        observer_factory = _instantiate(key, config.observers[name])
        _user_error(key, observer_factory, label="actor", instance=0, run_directory=run_directory)
        observers.append(observer_factory)
    if game_score:
        from rl.observers import GameScore

        observers.append(GameScore)
    return observers


def build_logger(config: DictConfig, run_config: dict[str, Any], run_directory: str, **tracking: Any) -> Any:
    """The logger factory, writing under `<run_directory>/logs`; `tracking`: its run name, group and tags."""
    node = _instantiate("logger", config.logger, _partial_=True)
    return _user_error("logger", node, directory=os.path.join(run_directory, "logs"), run_config=run_config, **tracking)


def stamped_run_name(environment: str, agent: str, seed: int, job_number: int | None) -> str:
    """A run's name (its W&B run's): what it trains, its seed, when it was built and its number in a sweep."""
    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    return f"{environment}__{agent}__{seed}__{stamp}" + (f"__{job_number}" if job_number is not None else "")


def make_experiment(
    config: DictConfig,
    run_directory: str,
    choices: Mapping[str, Any] | None = None,
    run_group: str | None = None,
    run_tags: Sequence[str] = (),
    job_number: int | None = None,
    run_name: str | None = None,
) -> tuple[Experiment, Callable[[Experiment], Any]]:
    """Validates `config` and builds the experiment and its launcher (nothing started). `run_name`: the name
    an earlier build of the same run gave it (a grid's worker rebuilds a job: its W&B run keeps the name)."""
    choices = dict(choices or {})
    # The run's settings first: an agent option interpolating a bad max_actor_steps is named as max_actor_steps.
    top_level = OmegaConf.masked_copy(config, [field.name for field in dataclasses.fields(RunSettings)])
    settings = check_run_settings(resolved_container(top_level))
    container = resolved_container(config)
    environment = build_environment(container.get("environment"), settings.seed, choices)
    # The launcher before the groups that interpolate its settings (launcher.num_actors).
    for group in ("launcher", "network", "policy", "logger", "agent"):
        check_factory(group, container.get(group), RUNTIME_ARGUMENTS.get(group, ()))
    launcher = _instantiate("launcher", config.launcher)  # Its own checks before the policy's copy of them.
    agent_name = str(choices.get("agent", container["agent"]["_target_"].split(".")[-2]))
    builder = build_agent(config, choices, environment)
    check_replay_settings(builder, settings.max_actor_steps)
    network = _instantiate("network", config.network, _partial_=True)
    choice = str(choices.get("network", "network"))
    network_factory = agent_network(network, choice, container["network"], builder, agent_name, environment)
    observers = build_observers(
        config, container.get("observers") or {}, run_directory, environment.evaluation_factory is not None
    )
    run_name = run_name or stamped_run_name(environment.name, agent_name, settings.seed, job_number)
    logger_factory = build_logger(
        config,
        {**container, "choices": {k: v for k, v in choices.items() if not k.startswith("hydra/")}},
        run_directory,
        run_name=run_name,
        run_group=run_group,
        run_tags=list(run_tags),
    )
    # Before anything compiles: JAX decides at its first compilation whether the cache is on.
    enable_compilation_cache(settings.compilation_cache)
    experiment = Experiment(
        builder=builder,
        environment_factory=environment.factory,
        network_factory=network_factory,
        logger_factory=logger_factory,
        run_directory=run_directory,
        num_envs=environment.num_envs,
        vector_environment_factory=environment.vector_factory,
        evaluation_environment_factory=environment.evaluation_factory,
        observers=observers,
        agent_name=agent_name,
        environment_name=environment.name,
        _environment_spec=environment.spec,
        composed_config=container,
        **{name: value for name, value in vars(settings).items() if name not in ("resume", "objective")},
    )
    return launcher.fit_experiment(experiment), launcher
