"""The replay server, without the `/tmp/tmpXXXXXXXX` directory that reverb's default
checkpointer (`TempDirCheckpointer`) leaves behind: a server checkpoints only with the
checkpointer a run passes (under its run directory), else writes nothing to disk."""

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
    """A reverb client whose `replaced()` (a probe the owner supplies) tells whether its
    server was replaced by a new one on the same address; an adder's bounded wait then
    stops waiting for items the old server never confirmed."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self.replaced = replaced
