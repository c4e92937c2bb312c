"""The replay server, without the `/tmp/tmpXXXXXXXX` directory reverb's default checkpointer
leaves: it checkpoints only with the checkpointer a run passes, else writes nothing."""

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
    `checkpointer` (None: not at all)."""
    return reverb.Server(list(tables), port=port, checkpointer=checkpointer or NoCheckpointer())


class WatchedClient(reverb.Client):
    """A reverb client whose `replaced()` (the owner's probe) tells whether a new server
    replaced its own on the same address: an adder then stops waiting for its items."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self.replaced = replaced
