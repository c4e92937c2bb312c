"""Spreading the replicas of an anakin run over the JAX devices.

The replicas of a run are independent, stacked on a leading axis and vmapped. With more
than one device, that axis is sharded over a one-dimensional mesh (`jax.sharding`): the
compiled chunk, initialisation and evaluation are the same programs, partitioned by
XLA so each device runs its share of the replicas. The state keeps its (replicas, ...)
layout, so records, summaries and checkpoints do not depend on the devices. The number
of devices used is the largest that divides `num_seeds` (at most all of them); with one
device (or one replica) nothing is sharded.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "replicas"


def devices_for(num_seeds: int, devices: list[Any] | None = None) -> list[Any]:
    """The devices the replicas go to: the first d of them, d the largest count that
    divides `num_seeds`."""
    devices = list(devices if devices is not None else jax.devices())
    count = max(d for d in range(1, min(len(devices), num_seeds) + 1) if num_seeds % d == 0)
    return devices[:count]


def replica_sharding(num_seeds: int, devices: list[Any] | None = None) -> NamedSharding | None:
    """The sharding of a (num_seeds, ...) array over the replicas' devices; None when
    one device holds them all."""
    chosen = devices_for(num_seeds, devices)
    if len(chosen) == 1:
        return None
    return NamedSharding(Mesh(chosen, (AXIS,)), PartitionSpec(AXIS))


def place(tree: Any, sharding: NamedSharding | None) -> Any:
    """`tree` (leading axis: replicas) on the replicas' devices."""
    if sharding is None:
        return tree
    return jax.device_put(tree, sharding)
