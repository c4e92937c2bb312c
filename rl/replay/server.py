"""The replay server, without the empty directory reverb's default checkpointer leaves.

`reverb.Server(tables, port)` with no checkpointer makes reverb's `TempDirCheckpointer`,
which creates a `/tmp/tmpXXXXXXXX` directory that nothing removes: every run would leave
one behind. A run that checkpoints its replay passes its own checkpointer (under the run
directory); every other server gets `NoCheckpointer` and writes nothing to disk.
"""

from __future__ import annotations

from typing import Callable, Sequence

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
    """A reverb server of `tables` on `port` (None: a free one), checkpointing with
    `checkpointer`, or not at all when it is None (rather than in a temporary directory)."""
    return reverb.Server(list(tables), port=port, checkpointer=checkpointer or NoCheckpointer())


class WatchedClient(reverb.Client):
    """A reverb client that can tell whether its server was replaced by a new one on the
    same address (`replaced()`, a probe the owner supplies). A writer's wait for items
    the old server never confirmed cannot end well; `adders.bounded_write` asks between
    slices of a wait and gives up at once."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self._replaced = replaced

    def replaced(self) -> bool:
        return self._replaced()
