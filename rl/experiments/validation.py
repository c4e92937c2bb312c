"""Checks a composed configuration before anything starts: each `_target_` factory's
keys and types against its config dataclass or signature, as a one-line `ConfigError`."""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import importlib
import inspect
import math
import types
import typing
from typing import Any, Callable, Mapping

from dm_env import specs
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import ValidationError

HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


class ConfigError(ValueError):
    """A user error in the configuration; `key` is the dotted path of the culprit."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


def declared(target: Any, name: str) -> Any:
    """A factory's declared tag (`network_kind`, `observation_kind`, `config_class`...), or None."""
    return getattr(target, name, None)


def resolve_target(key: str, path: Any) -> Callable[..., Any]:
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}._target_", "must name a Python callable, e.g. rl.agents.dqn.make_builder")
    module_name, _, attribute = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(f"{key}._target_", f"cannot import '{path}' ({error})") from None
    if not callable(target):
        raise ConfigError(f"{key}._target_", f"'{path}' is not callable")
    return target


def nearest_option(name: str, options: list[str]) -> str | None:
    """The option a mistyped key most likely meant: one whose words' initials spell it
    (lr -> learning_rate), one it begins, or the closest spelling."""
    for option in options:
        if "".join(word[0] for word in option.split("_") if word) == name:
            return option
    for option in options:
        if option.startswith(name):
            return option
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return close[0] if close else None


def omegaconf_type(hint: Any) -> Any:
    """A factory parameter's type hint as a type OmegaConf checks (Any where it has none)."""
    if hint in (int, float, bool, str):
        return hint
    origin = typing.get_origin(hint)
    args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
    if origin in (typing.Union, types.UnionType):
        kinds = [arg for arg in args if arg is not type(None)]
        inner = omegaconf_type(kinds[0]) if len(kinds) == 1 else Any
        return typing.Optional[inner] if len(kinds) < len(args) else inner
    if origin in (list, tuple, collections.abc.Sequence):
        return typing.List[omegaconf_type(args[0]) if len(args) == 1 else Any]  # noqa: UP006 - OmegaConf's spelling.
    if origin in (dict, collections.abc.Mapping):
        return typing.Dict[str, Any]  # noqa: UP006
    return Any


def options_schema(target: Callable[..., Any]) -> tuple[type, bool]:
    """The dataclass an option is checked against (an agent's `make_builder.config_class`,
    else one made from the factory's signature), and whether it takes other keywords too."""
    config_class = declared(target, "config_class")
    if config_class is not None:
        return config_class, False
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # Unresolvable annotations: check names only.
        hints = {}
    parameters = inspect.signature(target).parameters.values()
    fields = [
        (p.name, omegaconf_type(hints.get(p.name, Any)), dataclasses.field(default=MISSING))
        for p in parameters
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    schema = dataclasses.make_dataclass("FactoryOptions", fields)
    return schema, any(p.kind == p.VAR_KEYWORD for p in parameters)


def check_values(key: str, schema: type, values: Mapping[str, Any]) -> None:
    """OmegaConf's type check of `values` against `schema`, as a ConfigError on the key."""
    try:
        OmegaConf.merge(OmegaConf.structured(schema), dict(values))
    except ValidationError as error:
        message = str(error.msg).splitlines()[0]
        if "could not be converted" not in message:  # OmegaConf's other messages name its node classes.
            hint = {field.name: field.type for field in dataclasses.fields(schema)}.get(str(error.full_key), Any)
            expected = str(hint).replace("typing.", "") if not isinstance(hint, type) else hint.__name__
            message = f"expected {expected}, got {values.get(str(error.full_key))!r}"
        raise ConfigError(f"{key}.{error.full_key}" if key else str(error.full_key), message) from None


def check_factory(key: str, node: Any, runtime_arguments: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Checks one `_target_` node's keys and value types; returns the resolved target."""
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise ConfigError(key, "must be a config group option with a _target_ (see conf/)")
    target = resolve_target(key, node["_target_"])
    schema, accepts_any = options_schema(target)
    names = [field.name for field in dataclasses.fields(schema) if field.name not in runtime_arguments]
    values = {}
    for name, value in node.items():
        if name in HYDRA_KEYS:
            continue
        if name in runtime_arguments:
            raise ConfigError(f"{key}.{name}", "is set by the experiment and cannot be configured")
        if name in names:
            values[name] = value
        elif not accepts_any:
            nearest = nearest_option(name, names)
            hint = f"did you mean {key}.{nearest}? " if nearest else ""
            raise ConfigError(
                f"{key}.{name}", f"unknown option for {node['_target_']}; {hint}allowed: {', '.join(names)}"
            )
    check_values(key, schema, values)
    return target


@dataclasses.dataclass
class RunSettings:
    """The top-level keys of conf/config.yaml."""

    seed: int
    max_actor_steps: int
    eval_every: int
    eval_episodes: int
    checkpoint: Any  # true / false or {enabled, every_seconds, keep, replay}: a CheckpointSettings.
    progress: bool
    threshold: float | None  # The evaluation return that solves the task (None: none).
    compilation_cache: str | None  # Where compiled XLA programs are cached (None: no cache).
    resume: str | None = None  # The run directory to resume (None: Hydra's run directory).


CHECKPOINT_KEYS = ("enabled", "every_seconds", "keep", "replay")


def check_checkpoint_settings(value: Any) -> Any:
    """`checkpoint`: true/false or a mapping of CheckpointSettings fields."""
    from rl.checkpointing import CheckpointSettings

    if isinstance(value, bool):
        return CheckpointSettings(enabled=value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            "checkpoint", f"expected true, false or a mapping of {', '.join(CHECKPOINT_KEYS)}, got {value!r}"
        )
    for key in value:
        if key not in CHECKPOINT_KEYS:
            raise ConfigError(f"checkpoint.{key}", f"unknown option; allowed: {', '.join(CHECKPOINT_KEYS)}")
    check_values("checkpoint", CheckpointSettings, value)
    if "every_seconds" in value and not (math.isfinite(value["every_seconds"]) and value["every_seconds"] > 0):
        raise ConfigError(
            "checkpoint.every_seconds", f"must be a positive number of seconds, got {value['every_seconds']}"
        )
    if "keep" in value and value["keep"] < 1:
        raise ConfigError("checkpoint.keep", f"must be >= 1 (checkpoints kept), got {value['keep']}")
    return CheckpointSettings(**{key: value[key] for key in CHECKPOINT_KEYS if key in value})


def check_replay_settings(builder: Any, max_actor_steps: int) -> None:
    """Refuses replay settings whose rate limiter could never let the learner sample."""
    config = vars(builder.config)
    minimum, maximum = config.get("min_replay_size"), config.get("max_replay_size")
    ratio = config.get("samples_per_insert")
    if minimum is None or maximum is None:
        return
    if minimum > maximum:
        raise ConfigError(
            "agent.min_replay_size",
            f"is {minimum} but the table holds at most agent.max_replay_size={maximum} items, so the learner "
            "could never sample; make min_replay_size <= max_replay_size",
        )
    batch = builder.samples_per_learner_step
    if ratio is not None and batch and max_actor_steps > minimum and (max_actor_steps - minimum) * ratio < batch:
        raise ConfigError(
            "agent.samples_per_insert",
            f"{ratio} samples per insert never add up to one learner batch of {batch} items within the run "
            f"({max_actor_steps - minimum} inserts after agent.min_replay_size={minimum}): the learner could never "
            "sample; raise samples_per_insert or lower the batch size",
        )


def check_run_settings(config: Mapping[str, Any]) -> RunSettings:
    fields = dataclasses.fields(RunSettings)
    for field in fields:
        if field.name not in config and field.default is dataclasses.MISSING:
            raise ConfigError(field.name, "is missing from the configuration")
    values = {field.name: config[field.name] for field in fields if field.name in config}
    check_values("", RunSettings, values)
    settings = RunSettings(**values)
    settings.checkpoint = check_checkpoint_settings(settings.checkpoint)
    for name in ("max_actor_steps", "eval_every", "eval_episodes"):
        if values[name] <= 0:
            raise ConfigError(name, f"must be a positive integer, got {values[name]}")
    if not 0 <= settings.seed < 2**32:
        raise ConfigError("seed", f"must be in [0, 2**32), got {settings.seed}")
    if settings.threshold is not None:
        if not math.isfinite(settings.threshold):
            raise ConfigError("threshold", f"must be a finite number or null, got {settings.threshold}")
        settings.threshold = float(settings.threshold)
    return settings


def network_kind_error(network: str, network_kind: str, agent_network_kind: str) -> ConfigError:
    """Network option `network` builds `network_kind` networks where the agent needs
    `agent_network_kind` ones; recurrent Q-networks say which agents they are for."""
    message = f"'{network}' builds {network_kind} networks, but the agent needs {agent_network_kind} networks"
    if "recurrent_q" in (network_kind, agent_network_kind):
        message += (
            "; recurrent Q-networks (network=lstm, or network=lstm_atari_cnn for Atari frames: an LSTM core carrying "
            "a state from step to step) are for recurrent agents only (agent=r2d2), and recurrent agents need them"
        )
    return ConfigError("network", message)


# Pixel networks by the network kind an agent needs.
PIXEL_NETWORKS = {
    "q_values": "network=atari_cnn or network=impala_resnet",
    "policy_value": "network=atari_cnn or network=impala_resnet",
    "recurrent_q": "network=lstm_atari_cnn (network=lstm with network.torso=rl.networks.conv.nature_torso)",
}


def check_network_observations(
    network: str,
    target: Callable[..., Any],
    options: Mapping[str, Any],
    observation_spec: Any,
    environment: str,
    agent_network_kind: str,
) -> None:
    """Refuses a network that cannot read the environment's observations: a convolutional
    torso (its factory's or, network=lstm, its torso's `observation_kind`) on vectors, an MLP
    on uint8 [height, width, channels] frames. Nested observations are left to the network."""
    if not isinstance(observation_spec, specs.Array):
        return
    shape = tuple(observation_spec.shape)
    observations = "pixels" if len(shape) == 3 and str(observation_spec.dtype) == "uint8" else "vector"
    reads = declared(target, "observation_kind")
    if reads is None and isinstance(options.get("torso"), str):
        from rl.networks.recurrent import resolve_torso

        try:
            reads = declared(resolve_torso(options["torso"]), "observation_kind")
        except ValueError:
            pass  # The factory reports a bad torso itself.
    reads = reads or "vector"
    if reads == observations:
        return
    if reads == "pixels":
        message = (
            f"'{network}' is a convolutional network for uint8 [height, width, channels] frames, but {environment} "
            f"has vector observations of shape {shape}; use an MLP network (mlp, policy_value_mlp, lstm, ...) or a "
            "pixel environment (environment=atari)"
        )
    else:
        pixel_network = PIXEL_NETWORKS.get(agent_network_kind)
        hint = f"use {pixel_network}" if pixel_network else "this agent has no pixel network; pick a vector environment"
        message = (
            f"'{network}' reads vector observations, but {environment} has pixel frames of shape {shape} "
            f"(uint8 [height, width, channels]); {hint}"
        )
    raise ConfigError("network", message)
