"""The compiled side of a sebulba run: the replicas' learner update on blocks of host steps (one program for
every replica, vmapped), the behaviour and evaluation policies the host threads call, and the replicas'
initial states. Replica i's rows are its own: its key, its learner, its replay, its environments' steps."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl.experiments.config import Experiment
from rl.sebulba.settings import SebulbaSettings, block_length, copies_per_replica
from rl.systems.base import System, SystemInputs, Trajectory


@dataclasses.dataclass(frozen=True)
class Programs:
    """`learn(state, blocks, ends) -> (state, metrics, policy params)`: one update of every replica on one
    block from each actor thread (each (replicas, T, copies, ...)), joined along the copies.
    `act(params, keys, step, observations) -> (words, step + 1)` and `evaluate(params, keys, step, observations)
    -> actions`: a policy of every replica on (replicas, copies, ...) observations at an actor thread's `step`
    (its blocks' steps, counted on the device: only the observations travel to it), replica i's key at that step
    folded from its row of `keys`. `act`'s (actions, extras) come back as one array of 32-bit words (one transfer
    from the device, not one per leaf): `unpacking` reads them."""

    learn: Callable[..., tuple[Any, dict[str, jax.Array], Any]]
    act: Callable[..., tuple[jax.Array, jax.Array]]
    evaluate: Callable[..., jax.Array]
    behaviour: Callable[..., tuple[jax.Array, Any]]

    def unpacking(self, *arguments: Any) -> Callable[[np.ndarray], tuple[np.ndarray, Any]]:
        """The host's reading of `act(*arguments)`'s words: (actions, extras) as numpy arrays."""
        leaves, treedef = jax.tree_util.tree_flatten(jax.eval_shape(self.behaviour, *arguments))
        widths = [int(np.prod(leaf.shape[2:], dtype=int)) for leaf in leaves]
        ends = np.cumsum(widths)[:-1]

        def unpack(words: np.ndarray) -> tuple[np.ndarray, Any]:
            parts = np.split(words, ends, axis=-1)
            arrays = [part.view(np.dtype(leaf.dtype)).reshape(leaf.shape) for part, leaf in zip(parts, leaves)]
            return jax.tree_util.tree_unflatten(treedef, arrays)

        return unpack


def packed_words(outputs: Any) -> jax.Array:
    """Every leaf of `outputs` (replicas, copies, ...; 32 bits a value) side by side as uint32 words."""
    leaves = jax.tree_util.tree_leaves(outputs)
    flat = [jnp.reshape(leaf, leaf.shape[:2] + (-1,)) for leaf in leaves]
    return jnp.concatenate([jax.lax.bitcast_convert_type(leaf, jnp.uint32) for leaf in flat], axis=-1)


def fastest_device(act: Callable[..., Any], arguments: Any, devices: list[Any], calls: int = 20) -> tuple[Any, dict]:
    """The device of `devices` where `act(*arguments)` (placed there) answers soonest, its outputs copied to the
    host as an actor copies them: the median of `calls` calls after a first (compiling) one; with those medians
    in seconds, by device kind."""
    times: dict[str, float] = {}
    for device in devices:
        placed = jax.device_put(arguments, device)
        jax.device_get(act(*placed))
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            jax.device_get(act(*placed))
            seconds.append(time.perf_counter() - started)
        times[device.device_kind] = float(np.median(seconds))
    fastest = min(devices, key=lambda device: times[device.device_kind])
    return fastest, times


def make_programs(system: System, block_length: int, steps_per_block: int, donate: bool = False) -> Programs:
    """`system`'s programs, jitted; each runs where its state or parameters are placed. The schedules' clock at
    an actor thread's step t is its replica's steps then: `steps_per_block` per block of `block_length` steps.
    `donate`: the learner updates its state in place (not on a CPU, where XLA cannot)."""

    def learn(state: Any, blocks: tuple[Trajectory, ...], ends: tuple[Any, ...]) -> Any:
        """`ends`: each block's (last observation, truncated final observations or None), (replicas, copies, ...)."""
        block = jax.tree_util.tree_map(lambda *parts: jnp.concatenate(parts, axis=2), *blocks)
        last_observation, truncated = jax.tree_util.tree_map(lambda *parts: jnp.concatenate(parts, axis=1), *ends)
        if truncated is not None:
            block = block._replace(step=block.step._replace(final_observation=truncated))
        state, metrics = jax.vmap(system.learn_block)(state, block, last_observation)
        learners = jax.vmap(system.learner_of)(state)
        metrics["learner_steps"] = jax.vmap(system.learning.learner_steps)(learners)
        return state, metrics, jax.vmap(system.learning.policy_params)(learners)

    per_step = steps_per_block // block_length

    def behaviour(params: Any, keys: jax.Array, step: jax.Array, observations: jax.Array) -> Any:
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)
        clock = (step // block_length) * steps_per_block + (step % block_length) * per_step
        return jax.vmap(system.behaviour_policy, in_axes=(0, 0, 0, None))(params, keys, observations, clock)

    def act(params: Any, keys: jax.Array, step: jax.Array, observations: jax.Array) -> tuple[jax.Array, jax.Array]:
        return packed_words(behaviour(params, keys, step, observations)), step + 1

    def evaluate(params: Any, keys: jax.Array, step: jax.Array, observations: jax.Array) -> jax.Array:
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)
        return jax.vmap(system.evaluation_policy, in_axes=(0, 0, 0, None))(params, keys, observations, step)[0]

    return Programs(
        learn=jax.jit(learn, donate_argnums=0 if donate else ()),
        act=jax.jit(act),
        evaluate=jax.jit(evaluate),
        behaviour=behaviour,
    )


def host_inputs(experiment: Experiment, settings: SebulbaSettings) -> SystemInputs:
    """What a replica's system learns from: host blocks of `block_length` steps of its copies."""
    return SystemInputs(
        name=None,
        kwargs=None,
        num_envs=copies_per_replica(experiment, settings),
        eval_episodes=experiment.eval_episodes,
        max_actor_steps=experiment.max_actor_steps,
        spec=experiment.environment_spec,
        block_length=block_length(experiment, settings),
    )


def initial_state(system: System, keys: jax.Array, device: Any) -> Any:
    """Every replica's learner state (`init_learner`), made on the host's CPU one replica after another (an
    accelerator compiles initialisers slowly; batched LAPACK calls can wait on each other on the CPU), then
    placed on `device`."""
    host = jax.devices("cpu")[0]
    with jax.default_device(host):
        state = jax.jit(lambda keys: jax.lax.map(system.init_learner, keys))(jax.device_put(keys, host))
    return jax.device_put(state, device)


def policy_params(system: System, state: Any) -> Any:
    """Every replica's policy parameters in `state` (what actors act with)."""
    return jax.jit(jax.vmap(lambda replica: system.learning.policy_params(system.learner_of(replica))))(state)
