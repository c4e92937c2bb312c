"""Replicas in groups that fit the device's memory. A run's replicas are one program when they fit; when
they do not, one program holds a group of them and the groups take turns on the device, chunk after
chunk, their training state kept on the host in between. Every replica trains as it would in one program, to
float rounding: a program's shape (its replicas per device) orders XLA's sums, so groups of another size round
otherwise, and only groups of one replica compute what a single-seed run does bit for bit (docs/anakin.md,
"What a replica computes"). Evaluations, records and checkpoints see all of them at once."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, TypeVar

import jax
import numpy as np

T = TypeVar("T")
MARGIN = 0.9  # Of the device's free memory, what a program may plan to hold.
MEMORY_ERRORS = ("RESOURCE_EXHAUSTED", "Ran out of memory", "out of memory")


def devices_count() -> int:
    return len(jax.devices())


def free_memory_per_device() -> int:
    """Bytes a program may hold on each device: an accelerator's free memory, or the host's available
    memory shared by its CPU devices."""
    stats = jax.devices()[0].memory_stats()
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return host_available_memory() // devices_count()


def host_available_memory() -> int:
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def program_memory(program: Any) -> int:
    """Bytes one device holds while `program` (jax's compiled program, or `rl.program_cache`'s loaded one)
    runs: its arguments, results and temporaries, less the buffers results reuse."""
    stats = program.memory_analysis()
    used = stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
    return int(used - stats.alias_size_in_bytes)


def is_memory_error(error: BaseException) -> bool:
    return any(text in str(error) for text in MEMORY_ERRORS)


def fitting_size(replicas: int, bytes_per_replica: float, budget: float, devices: int) -> int:
    """The most replicas per program, a multiple of `devices` and at least `devices`, whose memory fits
    `budget` bytes per device (each device holds a `devices`th of them), and no more than `replicas`."""
    per_device = int(budget // max(bytes_per_replica, 1.0))
    return max(devices, min(replicas, per_device * devices))


def smaller(size: int, devices: int) -> int:
    """Half of `size`, a multiple of `devices` and at least `devices`."""
    return max(devices, size // 2 // devices * devices)


def fitting_programs(
    compile_at: Callable[[int], T], everyone: int, devices: int, estimate: Callable[[T, int], int]
) -> T:
    """`compile_at(size)`'s programs for the most replicas per program that fit: all of them (`everyone`)
    where they do; else the size `estimate(programs, size)` reads from their memory analysis. A compiler
    that refuses a size (an accelerator's, out of memory) gets one replica per device to measure, and a
    size the estimate puts at or above a refused one is halved until one compiles."""
    size = everyone
    refused = None
    try:
        made = compile_at(size)
    except Exception as error:
        if not is_memory_error(error) or size <= devices:
            raise
        refused = size
        size = devices
        made = compile_at(size)  # A probe.
    wanted = estimate(made, size)
    if refused is not None and wanted >= refused:
        wanted = smaller(refused, devices)
    while wanted != size:
        try:
            return compile_at(wanted)
        except Exception as error:
            if not is_memory_error(error) or wanted <= devices:
                raise
            size = wanted
            wanted = smaller(wanted, devices)
    return made


@dataclasses.dataclass(frozen=True)
class ReplicaGroups:
    """`count` replicas (a multiple of `size`) trained `size` at a time, each group placed by `sharding`."""

    count: int
    size: int
    sharding: Any = None

    @property
    def split(self) -> bool:
        return self.size < self.count

    def run(self, program: Callable[..., Any], *rows: Any) -> Any:
        """`program(*rows)` over every replica: at once where one program holds them all (results stay on
        the device), else group by group, each group's rows put on the device and its results fetched."""
        if not self.split:
            return program(*rows)
        parts = []
        for start in range(0, self.count, self.size):
            part = jax.tree_util.tree_map(lambda leaf, start=start: leaf[start : start + self.size], rows)
            parts.append(jax.device_get(program(*jax.device_put(part, self.sharding))))
        return jax.tree_util.tree_map(lambda *leaves: np.concatenate(leaves), *parts)

    def describe(self, replicas: int) -> str:
        """How `replicas` are laid out, where it is not one program of exactly them."""
        padding = f", padded to {self.count}" if self.count > replicas else ""
        if self.split:
            return f"{replicas} replicas in {self.count // self.size} groups of {self.size} per program{padding}"
        return f"{replicas} replicas padded to {self.count}, the devices' multiple"
