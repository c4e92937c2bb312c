"""An experiment's compiled system: the system class its agent names, built on the experiment's gymnax
environment, with a grid replica's values set on copies of the agent's config and exploration."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rl.environments.factories import jax_family
from rl.experiments.compiled import system_class
from rl.experiments.config import Experiment

if TYPE_CHECKING:  # Imported when a system is built: the launcher's checks import no JAX.
    from rl.systems.base import System, SystemInputs


@dataclasses.dataclass(frozen=True)
class MemoryLimits:
    """`max_replicas_per_program` (None: as many as fit) and the memory a program may hold on each device in
    GiB (`per_device_gb`; None: MARGIN of the device's free memory)."""

    max_replicas_per_program: int | None = None
    per_device_gb: float | None = None


def steps_per_update(experiment: Experiment) -> int:
    """Environment steps (all copies) one learner update consumes."""
    return system_class(experiment, "anakin").steps_per_update(experiment.builder.config, experiment.num_envs)


def system_inputs(experiment: Experiment) -> SystemInputs:
    """The run a system compiles; the environment factory is the gymnax one, bound to its name and kwargs
    (launcher=anakin's check_experiment refuses any other)."""
    from rl.systems.base import SystemInputs

    factory = experiment.environment_factory
    options = factory.keywords if isinstance(factory, functools.partial) else {}
    return SystemInputs(
        name=options["name"],
        kwargs=options.get("kwargs"),
        num_envs=experiment.num_envs,
        eval_episodes=experiment.eval_episodes,
        max_actor_steps=experiment.max_actor_steps,
        spec=experiment.environment_spec,
        family=jax_family(factory),
    )


def replica_builder(builder: Any, values: dict[str, Any]) -> Any:
    """The builder with one replica's `values` ("agent.<field>": its config's, "policy.<field>": its
    exploration's; traced scalars) on replaced copies: the agent's maths then reads them like any constant."""
    fields: dict[str, dict[str, Any]] = {"agent": {}, "policy": {}}
    for key, value in values.items():
        group, name = key.split(".", 1)
        fields[group][name] = value
    config = dataclasses.replace(builder.config, **fields["agent"])
    exploration = dataclasses.replace(builder.exploration, **fields["policy"])
    return type(builder)(config, exploration=exploration)


def make_system(experiment: Experiment, values: dict[str, Any] | None = None) -> System:
    """The experiment's system (one replica's: `values`, see `replica_builder`) on `num_envs` gymnax
    copies; its `evaluation_environment` has `eval_episodes` copies."""
    builder = replica_builder(experiment.builder, values) if values else experiment.builder
    spec = experiment.environment_spec
    agent = builder.compiled_agent(experiment.network_factory(environment_spec=spec), spec)
    return system_class(experiment, "anakin")(agent, system_inputs(experiment))


def value_of(experiment: Any, key: str) -> Any:
    """A batchable key's value in a built experiment (None when the builder's dataclass has no such field)."""
    group, name = key.split(".", 1)
    part = experiment.builder.config if group == "agent" else experiment.builder.exploration
    fields = {field.name for field in dataclasses.fields(part)}
    return vars(part)[name] if name in fields else None  # A swept key, checked against the dataclass's fields.


def untraceable(experiment: Any, keys: Sequence[str]) -> str | None:
    """Why one replica's system cannot take `keys` as traced values (None: it can), from a trace only."""
    import jax

    from rl.systems.base import make_chunk

    def step(values: dict[str, jax.Array]) -> Any:
        system = make_system(experiment, values)
        return make_chunk(system, 1)(system.init(jax.random.PRNGKey(0)))

    try:
        jax.eval_shape(step, {key: np.float32(value_of(experiment, key)) for key in keys})
    except Exception as error:  # noqa: BLE001 - whatever the trace hits, the keys then split the group.
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None
