"""`WatchedClient`: a reverb client that can tell when a new server replaced its own, so an adder's
wait on the old one ends at once (apart from rl/replay/server.py, which imports the adders)."""

from __future__ import annotations

from typing import Callable

import reverb


class WatchedClient(reverb.Client):
    """A reverb client whose `replaced()` tells whether a new server replaced its own (an adder then stops waiting)."""

    def __init__(self, server_address: str, replaced: Callable[[], bool]):
        super().__init__(server_address)
        self.replaced = replaced
