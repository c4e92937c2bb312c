"""Turns a composed Hydra configuration into an Experiment and a launcher, checking everything
(run settings, each `_target_`'s keys and types, the environment first) as a one-line `ConfigError`."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from dm_env import specs
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from rl.experiments.config import Experiment, enable_compilation_cache
from rl.core import is_discrete, make_environment_spec
from rl.experiments.validation import (
    ConfigError,
    RunSettings,
    action_kind,
    check_factory,
    check_network_kind,
    check_observations,
    check_replay_settings,
    check_run_settings,
    network_kinds,
    observation_kind,
)


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
    target = network_factory.func
    needed = builder.network_kind
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
    check_nested_observations(target, environment.spec.observations, choice, environment.name)
    reads = observation_kind(target, options)
    check_observations(reads, environment.spec.observations, choice, needed, environment.name)
    return functools.partial(network_factory, **outputs)


def check_nested_observations(
    factory: Callable[..., Any], observation_spec: Any, choice: str, environment: str
) -> None:
    """Refuses nested observations (a dict or tuple of arrays) for the project's networks, each of which reads one
    array: one line naming the network, instead of a traceback from inside it. A factory from outside the project
    is taken to read what it is given."""
    from rl.networks.base import NetworkFactory

    if isinstance(observation_spec, specs.Array) or not isinstance(factory, NetworkFactory):
        return
    if isinstance(observation_spec, Mapping):
        observed = f"a dict of arrays ({', '.join(sorted(map(str, observation_spec)))})"
    else:
        observed = "a tuple of arrays"
    raise ConfigError(
        "network",
        f"'{choice}' reads one observation array, but {environment} observes {observed}; no network here reads "
        "nested observations: flatten them in the environment, or name a network factory of your own that reads them",
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
