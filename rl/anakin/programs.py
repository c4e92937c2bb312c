"""The compiled side of an anakin run: the replicas' keys, their layout over the devices (padded, sharded),
their initial states (on the host) and the programs of a chunk and an evaluation round, compiled once and kept
in the persistent cache under what they were made from."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rl.anakin.groups import devices_count
from rl.environments.gymnax_vector import GymnaxVector
from rl.experiments.config import Experiment
from rl.program_cache import compile_program
from rl.systems.base import System, evaluate, make_chunk


def describe_devices() -> str:
    """The devices a program runs on, as "<count> x <kind>" ("1 x TPU v5 lite", "1 x cpu")."""
    devices = jax.devices()
    return f"{len(devices)} x {devices[0].device_kind}"


def padded_count(num_replicas: int) -> int:
    """The replicas a program holds: `num_replicas` rounded up to a multiple of the devices, so that every
    device holds as many (the padding repeats the last replica; its results are dropped). One replica, or
    one device: `num_replicas`."""
    devices = devices_count()
    return num_replicas if num_replicas == 1 else -(-num_replicas // devices) * devices


def replica_sharding(num_replicas: int) -> NamedSharding | None:
    """(num_replicas, ...) arrays split over every device (`num_replicas` a multiple of their count, as
    `padded_count` makes it); None for one device or one replica."""
    devices = jax.devices()
    if len(devices) == 1 or num_replicas == 1:
        return None
    if num_replicas % len(devices):
        raise ValueError(f"{num_replicas} replicas do not split over {len(devices)} devices: pad them (padded_count)")
    return NamedSharding(Mesh(devices, ("replicas",)), PartitionSpec("replicas"))


def padded(rows: Any, count: int) -> Any:
    """Every leaf of `rows` (replicas first) with its last row repeated up to `count` rows."""
    pad = lambda leaf: np.concatenate([np.asarray(leaf), np.repeat(np.asarray(leaf)[-1:], count - len(leaf), 0)])
    return jax.tree_util.tree_map(pad, rows)


# jaxlib 0.4.34 crashes running a CPU program compiled from an export with LAPACK calls (orthogonal
# initialisers) once it is read back from the persistent cache; 0.10 runs it.
HOST_INIT_EXPORTS = tuple(int(part) for part in jax.__version__.split(".")[:2]) >= (0, 5)


@dataclasses.dataclass(frozen=True)
class ProgramCache:
    """Where the traced programs are kept (the persistent compilation cache's directory; None: nowhere) and
    `context`, all they were made from that their arguments do not show (rl.program_cache)."""

    directory: str | None = None
    context: str = ""

    def compile(self, function: Callable[..., Any], args: tuple[Any, ...], name: str, sharding: Any = None) -> Any:
        return compile_program(
            function, args, name=name, context=self.context, directory=self.directory, sharding=sharding
        )


def initial_states(
    init: Callable[[jax.Array, Any], Any],
    keys: jax.Array,
    values: dict[str, jax.Array],
    cache: ProgramCache = ProgramCache(),
) -> Any:
    """Every replica's `init(key, values)`, computed on the host's CPU, one replica after another. On the host:
    an accelerator's compile of the initialisers (orthogonal ones factorise) costs it more than the run they
    start. One at a time: jaxlib 0.10's CPU LAPACK kernels split a batch of matrices over XLA's intra-op threads
    and wait for the parts on one of those threads, so a few batched calls at once (vmapped replicas,
    independent layers) can each hold a thread and wait on the others' queued parts forever; a call that holds
    one matrix runs inline."""
    host = jax.devices("cpu")[0]
    with jax.default_device(host):
        arguments = jax.device_put((keys, values), host)
        kept = cache if HOST_INIT_EXPORTS else ProgramCache()
        return kept.compile(mapped(init), arguments, "init")(*arguments)


def mapped(init: Callable[[jax.Array, Any], Any]) -> Callable[[jax.Array, Any], Any]:
    """`init` mapped over the replicas (`lax.map`), not vmapped."""
    return lambda keys, values: jax.lax.map(lambda key_values: init(*key_values), (keys, values))


def initial_states_program(init: Callable[[jax.Array, Any], Any]) -> Any:
    """`initial_states`' program, jitted."""
    return jax.jit(mapped(init))


def compile_programs(
    make_system: Callable[[dict[str, jax.Array]], System],
    evaluation_environment: GymnaxVector,
    keys: jax.Array,
    steps_per_chunk: int,
    sharding: Any = None,
    hyperparameters: dict[str, jax.Array] | None = None,
    cache: ProgramCache = ProgramCache(),
    state: Any = None,
) -> tuple[Any, Any, Any]:
    """(chunk, evaluation round, initial state) of `len(keys)` replicas, vmapped, sharded, compiled.
    `make_system(values)`: one replica's system, given its row of `hyperparameters` (traced); `state`:
    their initial state where the caller has it (None: computed here)."""
    if state is None:
        init = lambda key, values: make_system(values).init(key)
        state = initial_states(init, keys, hyperparameters or {}, cache)
    keys, values, state = jax.device_put((keys, hyperparameters or {}, state), sharding or jax.devices()[0])
    chunk = lambda state, values: make_chunk(make_system(values), steps_per_chunk)(state)
    chunk = cache.compile(jax.vmap(chunk), (state, values), "chunk", sharding)

    def evaluation_round(state: Any, key: jax.Array, values: dict[str, jax.Array]) -> Any:
        system = make_system(values)
        return evaluate(evaluation_environment, system.evaluation_policy, system.evaluation_params(state), key)

    evaluation = cache.compile(jax.vmap(evaluation_round), (state, keys, values), "evaluation", sharding)
    return chunk, evaluation, jax.block_until_ready(state)


def program_cache(experiment: Experiment, steps_per_chunk: int) -> ProgramCache:
    """The run's programs keyed by its composed config but what only its inputs or host side read."""
    if experiment.compilation_cache is None or experiment.composed_config is None:
        return ProgramCache()
    kept = {key: value for key, value in experiment.composed_config.items() if key not in HOST_SIDE_KEYS}
    context = json.dumps({"config": kept, "steps_per_chunk": steps_per_chunk}, sort_keys=True, default=repr)
    return ProgramCache(os.path.abspath(os.path.expanduser(experiment.compilation_cache)), context)


# Config keys the compiled programs never read: the seed is an input (the replicas' keys), the rest host side.
HOST_SIDE_KEYS = ("seed", "logger", "resume", "progress", "checkpoint", "compilation_cache", "objective", "threshold")


MEMBER_KEEPS = "key"  # A learner state's field (at any depth) under this name stays the member's own.


def inherit(state: Any, parents: np.ndarray) -> Any:
    """`state` (replicas first; a system's state with a `learner`) whose learner rows come from `parents`,
    but for leaves under a field named MEMBER_KEEPS: each member's randomness stays its own."""

    def take(path: Sequence[Any], leaf: Any) -> Any:
        named = any(isinstance(entry, jax.tree_util.GetAttrKey) and entry.name == MEMBER_KEEPS for entry in path)
        return leaf if named else leaf[parents]

    return state._replace(learner=jax.tree_util.tree_map_with_path(take, state.learner))
