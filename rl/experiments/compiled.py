"""What the launchers that compile an agent's system share (launcher=anakin, launcher=sebulba): the system
class the agent names, its values that must follow the environment copies, and budgets in whole updates."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any

from rl.environments.factories import jax_family
from rl.experiments.config import Experiment
from rl.experiments.validation import ConfigError

if TYPE_CHECKING:  # Imported when a system is built: the launchers' checks import no JAX.
    import jax

    from rl.systems.base import System, SystemInputs

log = logging.getLogger(__name__)


def system_class(experiment: Experiment, launcher: str) -> type[System]:
    """The compiled system the experiment's agent names; a ConfigError when it names none."""
    system = experiment.builder.compiled_system
    if system is None:
        raise ConfigError(
            "agent",
            f"launcher={launcher} does not compile agent={experiment.agent_name} (its builder names no "
            "`compiled_system`); use launcher=local or launcher=ray for it",
        )
    return system


def derive_settings(experiment: Experiment, launcher: str, copies: int, block_length: int = 1) -> Experiment:
    """The experiment with the agent's values its system derives from a replica's environment `copies` and
    the `block_length` steps of each one update learns from, each said once in the log."""
    builder = experiment.builder
    config = builder.config
    for change in system_class(experiment, launcher).derived(config, copies, block_length):
        log.warning(
            "launcher=%s: agent.%s=%s set to %s: %s", launcher, change.key, change.typed, change.value, change.why
        )
        try:
            config = dataclasses.replace(config, **{change.key: change.value})
        except ValueError as error:
            raise ConfigError(
                f"agent.{change.key}", f"follows environment.num_envs under launcher={launcher}: {error}"
            ) from None
    if config is builder.config:
        return experiment
    return dataclasses.replace(experiment, builder=type(builder)(config, exploration=builder.exploration))


def rounded(launcher: str, key: str, value: int, step: int, why: str) -> int:
    """`value` rounded to a whole number of `step`s (at least one), warned of once in the log when it changes."""
    if value % step == 0:
        return value
    result = max(step, round(value / step) * step)
    log.warning("launcher=%s: %s=%d rounded to %d, %s", launcher, key, value, result, why)
    return result


def evaluation_interval(launcher: str, value: int, step: int, why: str) -> int:
    """`eval_every` rounded up to a whole number of `step`s, said in the log (not a warning: a schedule the run
    derives, like its batch). Upward, so that a budget holding a whole number of the asked intervals ends with
    one round, its final one, rather than a round one update before it as well."""
    if value % step == 0:
        return value
    result = -(-value // step) * step
    log.info("launcher=%s: eval_every=%d rounded up to %d, %s", launcher, value, result, why)
    return result


def steps_per_update(
    experiment: Experiment, launcher: str = "anakin", block_length: int | None = None, copies: int = 0
) -> int:
    """A replica's environment steps (all its copies) one learner update consumes: the system's own count where
    it steps its environments itself (launcher=anakin), else one block of `block_length` steps of each of the
    host's `copies` (launcher=sebulba)."""
    if block_length is not None:
        return block_length * copies
    return system_class(experiment, launcher).steps_per_update(experiment.builder.config, experiment.num_envs)


def replica_keys(seed: int, num_seeds: int) -> jax.Array:
    """Replica i's key is seed + i's, as if it ran alone with that seed."""
    import jax

    return jax.numpy.stack([jax.random.PRNGKey(seed + index) for index in range(num_seeds)])


def gymnax_inputs(experiment: Experiment) -> SystemInputs:
    """The run a system compiles with its environment (launcher=anakin): the gymnax factory, bound to its name
    and kwargs (launcher=anakin's check_experiment refuses any other)."""
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


def make_system(
    experiment: Experiment, values: dict[str, Any] | None = None, inputs: SystemInputs | None = None
) -> System:
    """The experiment's system (one replica's: `values`, see `replica_builder`) on `inputs` (None: its own
    gymnax copies, launcher=anakin's; host blocks have launcher=sebulba's)."""
    builder = replica_builder(experiment.builder, values) if values else experiment.builder
    spec = experiment.environment_spec
    agent = builder.compiled_agent(experiment.network_factory(environment_spec=spec), spec)
    launcher = "anakin" if inputs is None else "sebulba"
    return system_class(experiment, launcher)(agent, inputs or gymnax_inputs(experiment))
