"""Turns a composed Hydra configuration into an ExperimentConfig and a launcher, checking
the run settings and the environment before any agent, network or launcher code is imported.
"""

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

from rl.experiments.compilation import enable_compilation_cache
from rl.experiments.config import ExperimentConfig
from rl.experiments.validation import (
    ConfigError,
    RunSettings,
    check_factory,
    check_network_observations,
    check_replay_settings,
    check_run_settings,
    declared,
    network_kind_error,
)
from rl.specs import is_discrete, make_environment_spec

BACKENDS = ("gymnasium", "envpool")
GROUPS = ("environment", "network", "policy", "logger", "agent", "launcher")
# Arguments the experiment passes at run time, which the YAML must not set.
RUNTIME_ARGUMENTS = {
    "environment": ("seed",),
    "network": ("environment_spec", "network_kind", "outputs_per_action"),
    "logger": ("directory", "run_name", "run_config", "run_group", "run_tags"),
    "agent": ("exploration",),
    "observers": ("label", "instance", "run_directory"),
}


def _bound(values: Any) -> str | None:
    """One bound of a spec: a single number when every dimension shares it."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return f"{flat[0]:g}" if flat.size and (flat == flat[0]).all() else None


def describe_actions(action_spec: Any) -> str:
    """`3 discrete actions`, `continuous actions of shape (6,) in [-1, 1]` (never a spec's repr)."""
    if is_discrete(action_spec):
        return f"{action_spec.num_values} discrete actions"
    shape = tuple(action_spec.shape) if isinstance(action_spec, specs.Array) else ()
    if not isinstance(action_spec, specs.BoundedArray):
        return f"continuous actions of shape {shape}"
    low, high = _bound(action_spec.minimum), _bound(action_spec.maximum)
    bounds = f"in [{low}, {high}]" if low is not None and high is not None else "with per-dimension bounds"
    return f"continuous actions of shape {shape} {bounds}"


def _user_error(key: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls a factory; what it rejects becomes a ConfigError on `key`."""
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


def preset_message(experiment: Any, agent: Any, key: str) -> str | None:
    """For an agent option that preset `experiment` (conf/experiment/<name>.yaml, whose
    `override /agent` default names its agent) set for another agent than `agent`
    (`experiment=dqn_cartpole agent=ppo`), the message that says so; None otherwise."""
    from rl.train import CONFIG_DIR

    path = os.path.join(CONFIG_DIR, "experiment", f"{experiment}.yaml")
    if not (experiment and agent and os.path.isfile(path)):
        return None
    defaults = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", [])
    presets = [
        str(entry["override /agent"]) for entry in defaults if isinstance(entry, dict) and "override /agent" in entry
    ]
    if not presets or presets[0] == agent:
        return None
    return (
        f"experiment={experiment} is a preset for agent={presets[0]}: its agent settings ({key}, ...) are "
        f"{presets[0]}'s, not {agent}'s; drop experiment= to run agent={agent} from its defaults"
    )


def resolved_container(config: DictConfig) -> dict[str, Any]:
    try:
        return OmegaConf.to_container(config, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as error:
        raise ConfigError(error.full_key, "is required; set it on the command line") from None
    except InterpolationResolutionError as error:
        raise ConfigError(error.full_key, f"cannot be resolved ({error.msg.splitlines()[0]})") from None


def environment_label(environment: Mapping[str, Any], choices: Mapping[str, Any]) -> str:
    """`environment.name` (dm_control's is `<domain>-<task>`), else the environment option."""
    return str(environment.get("name") or choices.get("environment") or "environment")


def _swept_keys(hydra_config: Any) -> set[str]:
    """The keys a multirun varies: the sweeper's `params` and the sweep overrides of the
    command line (`seed=0,1`, `agent=sac,td3`, `x=range(3)`) as the sweep directory's
    multirun.yaml recorded them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    keys = {str(key) for key in ((hydra_config.sweeper or {}).get("params") or {})}
    overrides = list(hydra_config.overrides.task or [])
    recorded = os.path.join(str(hydra_config.sweep.dir), "multirun.yaml")
    if os.path.isfile(recorded):
        sweep = OmegaConf.load(recorded)
        overrides = list(OmegaConf.select(sweep, "hydra.overrides.task", default=None) or overrides)
    parser = OverridesParser.create()
    for line in overrides:
        try:
            override = parser.parse_override(str(line))
        except Exception:  # noqa: BLE001 - an override Hydra itself accepted; skip the odd one.
            continue
        if override.is_sweep_override():
            keys.add(override.get_key_element().lstrip("+~"))
    return keys


def tracking_settings(hydra_config: Any, config: DictConfig) -> dict[str, Any]:
    """`run_group` and `run_tags` for `make_experiment`, from Hydra's config of this job
    (`HydraConfig.get()`, passed in: nothing here reads Hydra's global state).

    A multirun job's group is `<experiment or agent>-<environment>-<date>-<time>`
    (rl.loggers.wandb.default_group), leaving out whatever the sweep varies, so every job
    of the sweep shares it and two sweeps never do; a single run has none. The tags are
    the job's overrides (`seed=1`, `agent.learning_rate=0.001`).
    """
    from hydra.types import RunMode

    from rl.loggers.wandb import default_group, override_tags

    tags = override_tags(list(hydra_config.overrides.task or []))
    if hydra_config.mode != RunMode.MULTIRUN:
        return {"run_group": None, "run_tags": tags}
    swept = _swept_keys(hydra_config)
    choices = dict(hydra_config.runtime.choices or {})
    subject = []
    if choices.get("experiment") and "experiment" not in swept:
        subject.append(choices["experiment"])
    elif choices.get("agent") and not swept & {"agent", "experiment"}:
        subject.append(choices["agent"])
    if not any(key in ("environment", "experiment") or key.startswith("environment.") for key in swept):
        environment = OmegaConf.select(config, "environment", default=None)
        if environment is not None:
            try:
                subject.append(environment_label(OmegaConf.to_container(environment, resolve=True), choices))
            except Exception:  # noqa: BLE001 - an unresolvable config fails later, with its message.
                pass
    return {"run_group": default_group(str(hydra_config.sweep.dir), subject), "run_tags": tags}


def make_experiment(
    config: DictConfig,
    run_directory: str,
    choices: Mapping[str, Any] | None = None,
    run_group: str | None = None,
    run_tags: Sequence[str] = (),
) -> tuple[ExperimentConfig, Callable[[ExperimentConfig], Any]]:
    """Validates `config` and builds the experiment and its launcher (nothing started).
    `run_group` (W&B's group, unless the logger config sets its own) and `run_tags` come
    from `tracking_settings`."""
    choices = dict(choices or {})
    # The run's settings first: an agent option interpolating a bad max_actor_steps is named as max_actor_steps.
    top_level = [field.name for field in dataclasses.fields(RunSettings) if field.name in config]
    settings = check_run_settings(resolved_container(OmegaConf.masked_copy(config, top_level)))
    container = resolved_container(config)
    for group in GROUPS:
        if group not in container:
            raise ConfigError(group, "no option selected for this config group")
    # `num_envs` and `backend` configure the actors' loops, not the factory (the run's config keeps them).
    environment_options = dict(container["environment"])
    num_envs = environment_options.pop("num_envs", 1)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError("environment.num_envs", f"must be an integer >= 1 (copies per actor), got {num_envs!r}")
    backend = environment_options.pop("backend", "gymnasium")
    if backend not in BACKENDS:
        raise ConfigError("environment.backend", f"must be one of {list(BACKENDS)}, got {backend!r}")
    # The environment first: a wrong name or option is answered before the other groups'
    # code (networks, agents, launchers: JAX, TensorFlow, reverb) is even imported.
    check_factory("environment", environment_options, RUNTIME_ARGUMENTS["environment"])
    environment_factory = _instantiate("environment", environment_options, _partial_=True)
    probe = _user_error("environment.name", environment_factory, seed=settings.seed)
    environment_spec = make_environment_spec(probe)
    probe.close()
    vector_environment_factory = None
    if backend == "envpool":
        from rl.environments.envpool_vector import envpool_factory

        try:
            vector_environment_factory = envpool_factory(environment_options, environment_spec)
        except ValueError as error:
            raise ConfigError("environment.backend", str(error)) from None
    # Training-only preprocessing (Atari: clipped rewards, an episode per life): evaluators
    # play the unprocessed game, so evaluation reports the game's own score.
    evaluation_environment_factory = None
    if environment_options.get("reward_clip") or environment_options.get("episodic_life"):
        evaluation_environment_factory = _instantiate(
            "environment", {**environment_options, "reward_clip": False, "episodic_life": False}, _partial_=True
        )
    # The launcher before the groups that interpolate its settings (launcher.num_actors).
    for group in ("launcher", *(g for g in GROUPS if g not in ("environment", "launcher"))):
        try:
            check_factory(group, container[group], RUNTIME_ARGUMENTS.get(group, ()))
        except ConfigError as error:  # An agent option of another agent's preset: say whose it is.
            if group == "agent" and "unknown option" in str(error):
                message = preset_message(choices.get("experiment"), choices.get("agent"), error.key)
                if message is not None:
                    raise ConfigError("agent", message) from None
            raise
    environment_kind = "discrete" if is_discrete(environment_spec.actions) else "continuous"
    environment_name = environment_label(environment_options, choices)
    agent_name = str(choices.get("agent", container["agent"]["_target_"].split(".")[-2]))
    network_choice = str(choices.get("network", "network"))

    policy = _instantiate("policy", config.policy)
    builder = _user_error("agent", _instantiate("agent", config.agent, _partial_=True), exploration=policy)
    for key, kind in (("agent", builder.action_kind), ("policy", declared(policy, "action_kind"))):
        if kind is not None and kind != environment_kind:
            raise ConfigError(
                key,
                f"'{choices.get(key, key)}' acts in {kind} action spaces, but {environment_name} has "
                f"{describe_actions(environment_spec.actions)}; pick a {environment_kind}-action "
                f"{key} or a {kind}-action environment",
            )
    check_replay_settings(builder, settings.max_actor_steps)
    network_factory = _instantiate("network", config.network, _partial_=True)
    network_kind = declared(network_factory.func, "network_kind")
    network_kinds = declared(network_factory.func, "network_kinds")
    if network_kinds is not None:  # A torso under several heads (atari_cnn): build the agent's kind.
        network_kind = builder.network_kind if builder.network_kind in network_kinds else "/".join(network_kinds)
        if network_kind == builder.network_kind:
            network_factory = functools.partial(network_factory, network_kind=network_kind)
    if network_kind is not None and network_kind != builder.network_kind:
        raise network_kind_error(network_choice, network_kind, builder.network_kind)
    outputs = builder.network_outputs()  # The agent's output needs (rl/agents/builder.py `network_outputs`).
    if outputs:
        missing = sorted(set(outputs) - set(inspect.signature(network_factory.func).parameters))
        if missing:
            raise ConfigError(
                "network",
                f"agent={agent_name} needs a network that takes {', '.join(missing)}; network={network_choice} does not",
            )
        network_factory = functools.partial(network_factory, **outputs)
    check_network_observations(
        network_choice,
        network_factory.func,
        container["network"],
        environment_spec.observations,
        environment_name,
        builder.network_kind,
    )

    observers = []
    for name, node in (container.get("observers") or {}).items():
        key = f"observers.{name}"
        check_factory(key, node, RUNTIME_ARGUMENTS["observers"])
        observer_factory = _instantiate(key, config.observers[name])
        _user_error(key, observer_factory, label="actor", instance=0, run_directory=run_directory)  # Builds?
        observers.append(observer_factory)
    if evaluation_environment_factory is not None:  # Training records show the game's own score too.
        from rl.observers.game_score import GameScore

        observers.append(GameScore)

    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    logger_factory = _user_error(
        "logger",
        _instantiate("logger", config.logger, _partial_=True),
        directory=os.path.join(run_directory, "logs"),
        run_name=f"{environment_name}__{agent_name}__{settings.seed}__{stamp}",
        run_config=container,
        run_group=run_group,
        run_tags=list(run_tags),
    )
    launcher = _instantiate("launcher", config.launcher)
    # Before anything compiles: JAX decides once per process, at its first compilation,
    # whether the persistent cache is on, and a later setting would be ignored.
    enable_compilation_cache(settings.compilation_cache)
    experiment = ExperimentConfig(
        builder=builder,
        environment_factory=environment_factory,
        network_factory=network_factory,
        logger_factory=logger_factory,
        seed=settings.seed,
        max_actor_steps=settings.max_actor_steps,
        eval_every=settings.eval_every,
        eval_episodes=settings.eval_episodes,
        run_directory=run_directory,
        checkpoint=settings.checkpoint,
        progress=settings.progress,
        threshold=settings.threshold,
        num_envs=num_envs,
        vector_environment_factory=vector_environment_factory,
        evaluation_environment_factory=evaluation_environment_factory,
        observers=observers,
        compilation_cache=settings.compilation_cache,
        agent_name=agent_name,
        environment_name=environment_name,
        _environment_spec=environment_spec,
    )
    # What only this launcher derives or refuses (launcher=anakin: a non-JAX environment, ...).
    return launcher.fit_experiment(experiment), launcher
