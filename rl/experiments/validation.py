"""Checks a composed configuration before anything is started.

Every factory named by `_target_` is checked against its own signature (or, for agents,
its config dataclass): unknown keys, wrong types and out-of-range values become a
`ConfigError` naming the key and what is allowed, which the entry point prints without a
traceback.
"""

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

HYDRA_KEYS = {"_target_", "_partial_", "_convert_", "_recursive_", "_args_"}


class ConfigError(ValueError):
    """A user error in the configuration; `key` is the dotted path of the culprit."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


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


def describe(hint: Any) -> str:
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(arg) for arg in typing.get_args(hint))
    if origin is not None:
        args = ", ".join(describe(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{args}]" if args else name
    return getattr(hint, "__name__", str(hint))


def matches(value: Any, hint: Any) -> bool:
    """Whether a plain config value (from YAML or the command line) fits a type hint."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    sequence_types = (list, tuple, collections.abc.Sequence)
    if origin in sequence_types or hint in sequence_types:
        if not isinstance(value, (list, tuple)):
            return False
        args = [arg for arg in typing.get_args(hint) if arg is not Ellipsis]
        return all(matches(item, args[0]) for item in value) if args else True
    if origin in (dict, collections.abc.Mapping) or hint in (dict, collections.abc.Mapping):
        return isinstance(value, dict)
    return True  # Types a command line cannot express are left to the factory.


def integral_float(value: Any, hint: Any) -> bool:
    """A float with an integer value where an integer is expected (`1e5` on the command
    line): accepted as that integer."""
    if not (isinstance(value, float) and value.is_integer()):
        return False
    return hint is int or (typing.get_origin(hint) in (typing.Union, types.UnionType) and int in typing.get_args(hint))


def nearest_option(name: str, options: list[str]) -> str | None:
    """The option a mistyped or abbreviated key most likely meant: one whose words'
    initials spell it (lr -> learning_rate), one it begins, or the closest spelling."""
    for option in options:
        if "".join(word[0] for word in option.split("_") if word) == name:
            return option
    for option in options:
        if option.startswith(name):
            return option
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return close[0] if close else None


def _signature_schema(target: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    """Parameter names with their type hints, and whether extra keywords are accepted."""
    config_class = getattr(target, "config_class", None)
    if config_class is not None and dataclasses.is_dataclass(config_class):
        hints = typing.get_type_hints(config_class)
        schema = {f.name: hints.get(f.name, Any) for f in dataclasses.fields(config_class)}
        return schema, False
    function = target.__init__ if inspect.isclass(target) else target
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # Unresolvable annotations: check names only.
        hints = {}
    parameters = inspect.signature(target).parameters.values()
    schema = {p.name: hints.get(p.name, Any) for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    accepts_any = any(p.kind == p.VAR_KEYWORD for p in parameters)
    return schema, accepts_any


def check_factory(
    key: str, node: Any, runtime_arguments: tuple[str, ...] = (), config_node: Any = None
) -> Callable[..., Any]:
    """Checks one `_target_` node's keys and value types; returns the resolved target. An
    integer-valued float for an integer (`integral_float`) becomes that integer, in `node`
    and in `config_node` (the config the factory is instantiated from)."""
    if not isinstance(node, Mapping) or "_target_" not in node:
        raise ConfigError(key, "must be a config group option with a _target_ (see conf/)")
    target = resolve_target(key, node["_target_"])
    schema, accepts_any = _signature_schema(target)
    for name, value in node.items():
        if name in HYDRA_KEYS:
            continue
        if name in runtime_arguments:
            raise ConfigError(f"{key}.{name}", "is set by the experiment and cannot be configured")
        if name not in schema:
            if accepts_any:
                continue
            options = [n for n in schema if n not in runtime_arguments]
            nearest = nearest_option(name, options)
            hint = f"did you mean {key}.{nearest}? " if nearest else ""
            raise ConfigError(
                f"{key}.{name}", f"unknown option for {node['_target_']}; {hint}allowed: {', '.join(options)}"
            )
        if integral_float(value, schema[name]):
            value = node[name] = int(value)
            if config_node is not None:
                config_node[name] = value
        if not matches(value, schema[name]):
            raise ConfigError(
                f"{key}.{name}", f"expected {describe(schema[name])}, got {value!r} ({type(value).__name__})"
            )
    return target


@dataclasses.dataclass
class RunSettings:
    """The top-level keys of conf/config.yaml."""

    seed: int
    max_actor_steps: int
    eval_every: int
    eval_episodes: int
    # true / false (the defaults, on or off) or {enabled, every_seconds, keep, replay};
    # checked into a CheckpointSettings.
    checkpoint: Any
    progress: bool
    # The evaluation return that counts as solving the task; None: the task has none.
    threshold: float | None
    # Where compiled XLA programs are cached across runs; None: no cache.
    compilation_cache: str | None
    # The run directory to resume (None: the run directory is Hydra's).
    resume: str | None = None


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
    hints = typing.get_type_hints(CheckpointSettings)
    for key, item in value.items():
        if key not in CHECKPOINT_KEYS:
            raise ConfigError(f"checkpoint.{key}", f"unknown option; allowed: {', '.join(CHECKPOINT_KEYS)}")
        if not matches(item, hints[key]):
            raise ConfigError(
                f"checkpoint.{key}", f"expected {describe(hints[key])}, got {item!r} ({type(item).__name__})"
            )
    if "every_seconds" in value and not (math.isfinite(value["every_seconds"]) and value["every_seconds"] > 0):
        raise ConfigError(
            "checkpoint.every_seconds", f"must be a positive number of seconds, got {value['every_seconds']}"
        )
    if "keep" in value and value["keep"] < 1:
        raise ConfigError("checkpoint.keep", f"must be >= 1 (checkpoints kept), got {value['keep']}")
    return CheckpointSettings(**{key: value[key] for key in CHECKPOINT_KEYS if key in value})


def check_replay_settings(builder: Any, max_actor_steps: int) -> None:
    """Refuses replay settings whose rate limiter could never let the learner sample."""
    config = getattr(builder, "config", None)
    minimum = getattr(config, "min_replay_size", None)
    maximum = getattr(config, "max_replay_size", None)
    ratio = getattr(config, "samples_per_insert", None)
    if minimum is None or maximum is None:
        return
    if minimum > maximum:
        raise ConfigError(
            "agent.min_replay_size",
            f"is {minimum} but the table holds at most agent.max_replay_size={maximum} items, so the learner "
            "could never sample; make min_replay_size <= max_replay_size",
        )
    batch = getattr(builder, "samples_per_learner_step", None)
    if ratio is not None and batch and max_actor_steps > minimum and (max_actor_steps - minimum) * ratio < batch:
        raise ConfigError(
            "agent.samples_per_insert",
            f"{ratio} samples per insert never add up to one learner batch of {batch} items within the run "
            f"({max_actor_steps - minimum} inserts after agent.min_replay_size={minimum}): the learner could never "
            "sample; raise samples_per_insert or lower the batch size",
        )


def check_run_settings(config: Mapping[str, Any]) -> RunSettings:
    values = {}
    hints = typing.get_type_hints(RunSettings)
    for field in dataclasses.fields(RunSettings):
        if field.name not in config:
            if field.default is not dataclasses.MISSING:
                continue
            raise ConfigError(field.name, "is missing from the configuration")
        value = config[field.name]
        if integral_float(value, hints[field.name]):
            value = int(value)
        if not matches(value, hints[field.name]):
            raise ConfigError(
                field.name, f"expected {describe(hints[field.name])}, got {value!r} ({type(value).__name__})"
            )
        values[field.name] = value
    settings = RunSettings(**values)
    settings.checkpoint = check_checkpoint_settings(settings.checkpoint)
    for name in ("max_actor_steps", "eval_every", "eval_episodes"):
        if getattr(settings, name) <= 0:
            raise ConfigError(name, f"must be a positive integer, got {getattr(settings, name)}")
    if not 0 <= settings.seed < 2**32:
        raise ConfigError("seed", f"must be in [0, 2**32), got {settings.seed}")
    if settings.threshold is not None:
        if not math.isfinite(settings.threshold):
            raise ConfigError("threshold", f"must be a finite number or null, got {settings.threshold}")
        settings.threshold = float(settings.threshold)
    return settings


# Said beside the kinds' names when a network and an agent disagree on the network kind.
NETWORK_KIND_HINTS = {
    "recurrent_q": (
        "recurrent Q-networks (network=lstm, or network=lstm_atari_cnn for Atari frames: an LSTM core carrying "
        "a state from step to step) are for "
        "recurrent agents only (agent=r2d2), and recurrent agents need them"
    ),
}


def network_kind_error(network: str, network_kind: str, agent_network_kind: str) -> ConfigError:
    """The error for network option `network` building `network_kind` networks where the
    agent needs `agent_network_kind` ones, with a hint where a kind has one."""
    message = f"'{network}' builds {network_kind} networks, but the agent needs {agent_network_kind} networks"
    hints = [
        NETWORK_KIND_HINTS[kind]
        for kind in dict.fromkeys((network_kind, agent_network_kind))
        if kind in NETWORK_KIND_HINTS
    ]
    return ConfigError("network", "; ".join([message, *hints]))


def observation_kind(observation_spec: Any) -> str | None:
    """`pixels` for uint8 [height, width, channels] frames, `vector` for any other single
    array, None for nested observations (left to the network)."""
    shape, dtype = getattr(observation_spec, "shape", None), getattr(observation_spec, "dtype", None)
    if shape is None or dtype is None:
        return None
    return "pixels" if len(shape) == 3 and str(dtype) == "uint8" else "vector"


def network_reads(target: Callable[..., Any], options: Mapping[str, Any]) -> str:
    """What a network option reads: its factory's `observation_kind`, else (network=lstm)
    its torso's, else `vector` (the MLPs, which flatten whatever they are given)."""
    kind = getattr(target, "observation_kind", None)
    if kind is None and isinstance(options.get("torso"), str):
        from rl.networks.recurrent import resolve_torso

        try:
            kind = getattr(resolve_torso(options["torso"]), "observation_kind", None)
        except ValueError:
            kind = None  # The factory reports a bad torso itself.
    return kind or "vector"


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
    torso on vectors, an MLP on pixel frames."""
    observations = observation_kind(observation_spec)
    reads = network_reads(target, options)
    if observations is None or reads == observations:
        return
    shape = tuple(observation_spec.shape)
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
