"""The replay server (checkpointing only with the checkpointer a run passes, so no temporary
directory is left), its watched client, and queue tables for on-policy agents (imports reverb)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import reverb


class NoCheckpointer(reverb.checkpointers.CheckpointerBase):
    """A server without checkpoints: nothing on disk, and `Client.checkpoint()` fails."""

    def internal_checkpointer(self) -> None:
        return None  # The C++ server's "no checkpointer".


def make_server(
    tables: Sequence[reverb.Table],
    port: int | None = None,
    checkpointer: reverb.checkpointers.CheckpointerBase | None = None,
) -> reverb.Server:
    """A reverb server of `tables` on `port` (None: a free one), checkpointing with `checkpointer`, if any."""
    return reverb.Server(list(tables), port=port, checkpointer=checkpointer or NoCheckpointer())


class WatchedClient(reverb.Client):
    """A reverb client whose `replaced()` tells whether a new server replaced its own (an adder then stops waiting)."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self.replaced = replaced


@dataclasses.dataclass(frozen=True)
class QueueRatio:
    """A one-process learner's stepping rule for a queue: a batch as soon as a whole one is unconsumed."""

    batch_size: int
    max_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_size < self.batch_size:
            raise ValueError(
                f"the queue holds at most {self.max_size} items, fewer than one batch of {self.batch_size}: "
                "the learner could never sample"
            )

    def can_sample(self, inserts: int, samples: int) -> bool:
        """Whether a learner that has consumed `samples` items may take the next batch."""
        return inserts - samples >= self.batch_size


def make_queue_table(name: str, max_size: int, signature: Any) -> reverb.Table:
    """A FIFO queue of at most `max_size` items, each sampled once: inserts wait while it is full."""
    return reverb.Table.queue(name=name, max_size=int(max_size), signature=signature)
