"""What the launchers that compile an agent's system share (launcher=anakin, launcher=sebulba): the system
class the agent names, its values that must follow the environment copies, and budgets in whole updates."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from rl.experiments.config import Experiment
from rl.experiments.validation import ConfigError

if TYPE_CHECKING:  # Imported when a system is built: the launchers' checks import no JAX.
    from rl.systems.base import System

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
