"""The checks that turn a mistake in a composed configuration into a one-line `ConfigError` naming its key:
run settings, each `_target_`'s options against its schema, a network against the agent and the
observations, a launcher against the installed stack (rl/experiments/make_experiment.py calls them in order)."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
import pkgutil
import sys
from typing import Any, Callable, Mapping, Sequence

from dm_env import specs
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigTypeError, MissingMandatoryValue, OmegaConfBaseException, ValidationError

from rl.experiments.schemas import options_schema

HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


# The lines OmegaConf appends to its messages (where the node sits, its classes): not the user's words.
OMEGACONF_CONTEXT = ("full_key:", "object_type=", "reference_type=")


def one_line(message: str) -> str:
    """`message` on one line, without the context lines OmegaConf appends to its errors."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return "; ".join(line for line in lines if not line.startswith(OMEGACONF_CONTEXT))


class ConfigError(ValueError):
    """A user error in the configuration, one line; `key` is the dotted path of the culprit."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {one_line(message)}")
        self.key = key


def type_phrase(hint: Any) -> str:
    """A declared type as the user reads it: `int`, `float | None`, `Optional[dict[str, Any]]`."""
    if isinstance(hint, str):  # An annotation under `from __future__ import annotations`.
        return hint
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def declared_type(owner: Any, name: Any) -> Any:
    """The declared type of field `name` of the dataclass `owner`; None where there is none."""
    if not (isinstance(owner, type) and dataclasses.is_dataclass(owner)):
        return None
    return next((field.type for field in dataclasses.fields(owner) if field.name == name), None)


def shown(value: Any) -> str:
    """A value as the command line writes it: null for None, strings quoted."""
    return "null" if value is None else repr(value)


def type_refusal(error: OmegaConfBaseException, hint: Any = None, given: Any = None) -> str:
    """OmegaConf's refusal of a value for a typed field as one phrase, `expected int, got 'abc'`, whichever
    key it is: its own message names node classes and runs over three lines. `hint`: the field's type, and
    `given` the value, where the error does not say (a value refused as a whole: a list for a mapping)."""
    expected = declared_type(error.object_type, error.key) or hint
    if expected is None:
        return one_line(str(error.msg))
    return f"expected {type_phrase(expected)}, got {shown(given if error.value is None else error.value)}"


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
    config = OmegaConf.structured(schema)
    for name, value in values.items():  # One at a time: OmegaConf names no key for a list given for a dict.
        try:
            config = OmegaConf.merge(config, {name: value})
        except (ValidationError, ConfigTypeError) as error:
            message = type_refusal(error, declared_type(schema, name), value)
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
    minimum = config.get("min_replay_size")
    ratio = config.get("samples_per_insert")
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
PIXEL_NETWORKS = {  # By NetworkKind's values (this module loads before JAX).
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
    from rl.networks.base import NetworkKind

    if NetworkKind.RECURRENT_Q in (*kinds, needed):
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
