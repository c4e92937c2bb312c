"""The structured configs (dataclass schemas) that every config group's `_target_` is checked against:
an agent's config class as Hydra's ConfigStore holds it (`<name>_agent_schema`, which its YAML extends),
a dataclass target's own fields (policies, loggers, launchers, observers), and for the factory functions
the option schemas declared here. Imports no JAX: a configuration is checked before JAX loads."""

from __future__ import annotations

import collections.abc
import dataclasses
import pkgutil
import types
import typing
from typing import Any, Callable

from omegaconf import MISSING, OmegaConf

from rl.agents.configs import schema_name


OPTIONAL_DICT = dict[str, Any] | None
GYMNASIUM_LIMITS = dict(max_episode_steps=int | None, render_mode=str | None)
GYMNASIUM = dict(name=str, kwargs=OPTIONAL_DICT, **GYMNASIUM_LIMITS)
ATARI_INTEGERS = dict.fromkeys(("noop_max", "frame_skip", "screen_size", "frame_stack"), int)
ATARI_SWITCHES = dict.fromkeys(("episodic_life", "reward_clip", "full_action_space"), bool)
# The options (and their types) of the `_target_`s that are not dataclasses, by the path conf/ names them with.
FACTORY_OPTIONS: dict[str, dict[str, Any]] = {
    "rl.environments.make_gymnasium_environment": GYMNASIUM,
    "rl.environments.make_mujoco_environment": GYMNASIUM,
    "rl.environments.make_gymnax_environment": dict(name=str, kwargs=OPTIONAL_DICT, render_mode=str | None),
    "rl.environments.make_playground_environment": dict(name=str, kwargs=OPTIONAL_DICT, render_mode=str | None),
    "rl.environments.make_dm_control_environment": dict(
        domain=str, task=str, task_kwargs=OPTIONAL_DICT, name=str | None, **GYMNASIUM_LIMITS
    ),
    "rl.environments.atari.make_atari_environment": dict(
        name=str, **ATARI_INTEGERS, repeat_action_probability=float, **ATARI_SWITCHES, **GYMNASIUM_LIMITS
    ),
    "rl.environments.masked.make_masked_environment": dict(task=str, keep=list[int], **GYMNASIUM_LIMITS),
    "rl.networks.make_q_network": dict(hidden_sizes=list[int], dueling=bool, layer_norm=bool),
    "rl.networks.make_policy_value_network": dict(
        policy_hidden_sizes=list[int], value_hidden_sizes=list[int], activation=str, initial_log_std=float
    ),
    "rl.networks.make_actor_critic_networks": dict(
        policy_hidden_sizes=list[int], critic_hidden_sizes=list[int], layer_norm=bool, critic_layer_norm=bool
    ),
    "rl.networks.conv.make_atari_cnn": dict(hidden_size=int, dueling=bool),
    "rl.networks.conv.make_impala_resnet": dict(channels=list[int], num_blocks=int, hidden_size=int, dueling=bool),
    "rl.networks.recurrent.make_recurrent_q_network": dict(
        torso=str, torso_kwargs=OPTIONAL_DICT, lstm_size=int, dueling=bool
    ),
    # AnakinLauncher checks its values itself, naming what they configure.
    "rl.anakin.AnakinLauncher": dict(
        num_seeds=int,
        steps_per_chunk=int | None,
        max_replicas_per_program=int | None,
        memory_per_device_gb=float | None,
        pbt=str | None,
        pbt_search=Callable[..., Any] | None,  # A partial (`_partial_: true`): the search reading `pbt`.
    ),
    "rl.sebulba.SebulbaLauncher": dict(
        num_seeds=int,
        actor_threads=int,
        block_length=int,
        policy_lag=int,
        actor_device=str,
        environment_threads=int | None,
        evaluation_processes=int,
    ),
}


def stored_schemas(group: str) -> dict[str, type]:
    """The schemas Hydra's ConfigStore holds as `<option>_<group>_schema` (agents), by their `_target_`;
    empty where Hydra has not started in this process (a run's saved config read back)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    suffix = f"{schema_name('', group)}.yaml"
    schemas = {}
    for name in (name for name in store.list("") if name.endswith(suffix)):
        node = store.load(name).node
        schemas[str(node.get("_target_"))] = OmegaConf.get_type(node)
    return schemas


def same_target(path: str, named: str, target: Callable[..., Any]) -> bool:
    """Whether `path` names `target`, which conf/ named `named` (by its package or its module)."""
    if path.rpartition(".")[2] != named.rpartition(".")[2]:
        return False
    try:
        return pkgutil.resolve_name(path) is target
    except (ImportError, AttributeError, ValueError):
        return False


def options_schema(group: str, path: str, target: Callable[..., Any], runtime: tuple[str, ...] = ()) -> type | None:
    """The dataclass the options of `group`'s `_target_` (`path`, imported as `target`) are checked
    against, without the `runtime` arguments the experiment passes; None for a factory from outside
    the project with no schema (its call then checks its keywords)."""
    stored = stored_schemas(group)
    schema = stored.get(path) or next((s for p, s in stored.items() if same_target(p, path, target)), None)
    if schema is None and isinstance(target, type) and dataclasses.is_dataclass(target):
        schema = target  # A dataclass's fields are its options (an instance's fields are not).
    if schema is not None:
        options = {field.name: field.type for field in dataclasses.fields(schema) if field.init}
        return checkable(schema.__name__, options, hints(schema), runtime)
    path = next((p for p in FACTORY_OPTIONS if p == path or same_target(p, path, target)), None)
    return None if path is None else checkable(path.rpartition(".")[2], FACTORY_OPTIONS[path], {}, runtime)


ABSTRACT_TYPES = {collections.abc.Sequence: list, collections.abc.Mapping: dict}


def omegaconf_type(hint: Any) -> Any:
    """A type hint as OmegaConf checks it (Any where it cannot): Sequence a list, Mapping a dict."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        hint = typing.Union[tuple(arg if arg is type(None) else omegaconf_type(arg) for arg in args)]
    elif origin in ABSTRACT_TYPES:
        hint = ABSTRACT_TYPES[origin][args]
    try:
        OmegaConf.structured(dataclasses.make_dataclass("Probe", [("value", hint, dataclasses.field(default=MISSING))]))
    except Exception:  # noqa: BLE001 - a type OmegaConf does not check.
        return Any
    return hint


def hints(schema: type) -> dict[str, Any]:
    """`schema`'s resolved type hints; none where its annotations do not resolve here (names are still checked)."""
    try:
        return typing.get_type_hints(schema)
    except Exception:  # noqa: BLE001 - an annotation naming what only a type checker imports.
        return {}


def checkable(name: str, options: dict[str, Any], resolved: dict[str, Any], runtime: tuple[str, ...]) -> type:
    """A dataclass of the `options` a configuration sets (none set at run time, none Hydra's own or
    private), typed as OmegaConf checks them (`resolved` hints first) and with no defaults: the YAML holds those."""
    fields = [
        (option, omegaconf_type(resolved.get(option, hint)), dataclasses.field(default=MISSING))
        for option, hint in options.items()
        if option not in runtime and not option.startswith("_")
    ]
    return dataclasses.make_dataclass(f"{name}Options", fields)
