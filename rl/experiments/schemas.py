"""The structured configs (dataclass schemas) that every config group's `_target_` is checked against:
an agent's config class as Hydra's ConfigStore holds it (`schema/agent/<name>`, which its YAML extends),
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


@dataclasses.dataclass
class GymnasiumOptions:
    """conf/environment/gymnasium.yaml (cartpole, pendulum) and mujoco.yaml."""

    name: str
    max_episode_steps: int | None
    kwargs: dict[str, Any] | None
    render_mode: str | None


@dataclasses.dataclass
class GymnaxOptions:
    """conf/environment/gymnax.yaml."""

    name: str
    kwargs: dict[str, Any] | None


@dataclasses.dataclass
class DmControlOptions:
    """conf/environment/dm_control.yaml."""

    domain: str
    task: str
    max_episode_steps: int | None
    task_kwargs: dict[str, Any] | None
    name: str | None
    render_mode: str | None


@dataclasses.dataclass
class AtariOptions:
    """conf/environment/atari.yaml."""

    name: str
    noop_max: int
    frame_skip: int
    screen_size: int
    frame_stack: int
    repeat_action_probability: float
    episodic_life: bool
    reward_clip: bool
    full_action_space: bool
    max_episode_steps: int | None
    render_mode: str | None


@dataclasses.dataclass
class MaskedOptions:
    """conf/environment/cartpole_masked.yaml."""

    task: str
    keep: list[int]
    max_episode_steps: int | None
    render_mode: str | None


@dataclasses.dataclass
class QNetworkOptions:
    """conf/network/mlp.yaml and dueling_mlp.yaml."""

    hidden_sizes: list[int]
    dueling: bool
    layer_norm: bool


@dataclasses.dataclass
class PolicyValueOptions:
    """conf/network/policy_value_mlp.yaml."""

    policy_hidden_sizes: list[int]
    value_hidden_sizes: list[int]
    activation: str
    initial_log_std: float


@dataclasses.dataclass
class ActorCriticOptions:
    """conf/network/actor_critic_mlp.yaml."""

    policy_hidden_sizes: list[int]
    critic_hidden_sizes: list[int]
    layer_norm: bool


@dataclasses.dataclass
class AtariCnnOptions:
    """conf/network/atari_cnn.yaml."""

    hidden_size: int
    dueling: bool


@dataclasses.dataclass
class ImpalaResnetOptions:
    """conf/network/impala_resnet.yaml."""

    channels: list[int]
    num_blocks: int
    hidden_size: int
    dueling: bool


@dataclasses.dataclass
class RecurrentQOptions:
    """conf/network/lstm.yaml and lstm_atari_cnn.yaml."""

    torso: str
    torso_kwargs: dict[str, Any] | None
    lstm_size: int
    dueling: bool


@dataclasses.dataclass
class AnakinOptions:
    """conf/launcher/anakin.yaml (AnakinLauncher checks its values itself)."""

    num_seeds: int
    steps_per_chunk: int | None


# The option schemas of the `_target_`s that are not dataclasses, by the path conf/ names them with.
FACTORY_OPTIONS: dict[str, type] = {
    "rl.environments.make_gymnasium_environment": GymnasiumOptions,
    "rl.environments.make_mujoco_environment": GymnasiumOptions,
    "rl.environments.make_gymnax_environment": GymnaxOptions,
    "rl.environments.make_dm_control_environment": DmControlOptions,
    "rl.environments.atari.make_atari_environment": AtariOptions,
    "rl.environments.masked.make_masked_environment": MaskedOptions,
    "rl.networks.make_q_network": QNetworkOptions,
    "rl.networks.make_policy_value_network": PolicyValueOptions,
    "rl.networks.make_actor_critic_networks": ActorCriticOptions,
    "rl.networks.conv.make_atari_cnn": AtariCnnOptions,
    "rl.networks.conv.make_impala_resnet": ImpalaResnetOptions,
    "rl.networks.recurrent.make_recurrent_q_network": RecurrentQOptions,
    "rl.anakin.AnakinLauncher": AnakinOptions,
}


def stored_schemas(group: str) -> dict[str, type]:
    """The schemas Hydra's ConfigStore holds under `schema/<group>` (agents), by their `_target_`;
    empty where Hydra has not started in this process (a run's saved config read back)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    try:
        names = store.list(f"schema/{group}")
    except OSError:  # ConfigStore answers a group it does not hold so.
        return {}
    schemas = {}
    for name in names:
        node = store.load(f"schema/{group}/{name}").node
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
    declared = {**FACTORY_OPTIONS, **stored_schemas(group)}
    schema = declared.get(path) or next((s for p, s in declared.items() if same_target(p, path, target)), None)
    if schema is None and dataclasses.is_dataclass(target):
        schema = target
    return None if schema is None else checkable(schema, runtime)


ABSTRACT_TYPES = {collections.abc.Sequence: list, collections.abc.Mapping: dict}


def omegaconf_type(hint: Any) -> Any:
    """A type hint as OmegaConf checks it (Any where it cannot): Sequence a list, Mapping a dict."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        hint = typing.Union[tuple(arg if arg is type(None) else omegaconf_type(arg) for arg in args)]
    elif origin in ABSTRACT_TYPES:
        hint = ABSTRACT_TYPES[origin][args]
    try:
        OmegaConf.structured(dataclasses.make_dataclass("Probe", [("value", hint, dataclasses.field(default=MISSING))]))
    except Exception:  # noqa: BLE001 - a type OmegaConf does not check.
        return Any
    return hint


def checkable(schema: type, runtime: tuple[str, ...]) -> type:
    """`schema`'s fields that a configuration sets (none set at run time, none Hydra's own, none
    computed), typed as OmegaConf checks them and with no defaults: the YAML holds those."""
    try:
        hints = typing.get_type_hints(schema)
    except Exception:  # noqa: BLE001 - annotations that do not resolve here: names are still checked.
        hints = {}
    fields = [
        (field.name, omegaconf_type(hints.get(field.name, Any)), dataclasses.field(default=MISSING))
        for field in dataclasses.fields(schema)
        if field.init and field.name not in runtime and not field.name.startswith("_")
    ]
    return dataclasses.make_dataclass(f"{schema.__name__}Options", fields)
