"""Keeps an actor's copy of the learner's parameters fresh without stalling its loop."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from rl.core import VariableSource


class VariableClient:
    """Fetches variable `key` from `source` every `update_period` calls to `update`.

    With `asynchronous=True` the fetch runs on a helper thread and the new parameters are
    swapped in at a later `update`, so a slow (remote) learner never blocks the actor.
    """

    def __init__(
        self,
        source: VariableSource,
        key: str = "policy",
        update_period: int = 1,
        asynchronous: bool = False,
    ):
        self._source = source
        self._key = key
        self._update_period = max(1, int(update_period))
        self._calls = 0
        self._params: Any = None
        self._executor = (
            concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="variables") if asynchronous else None
        )
        self._pending: concurrent.futures.Future | None = None

    @property
    def params(self) -> Any:
        if self._params is None:
            self.update_and_wait()
        return self._params

    def _fetch(self) -> Any:
        return self._source.get_variables([self._key])[0]

    def update(self, wait: bool = False) -> None:
        if wait:
            self.update_and_wait()
            return
        if self._pending is not None and self._pending.done():
            self._params = self._pending.result()
            self._pending = None
        self._calls += 1
        if self._calls < self._update_period:
            return
        self._calls = 0
        if self._executor is None:
            self._params = self._fetch()
        elif self._pending is None:
            self._pending = self._executor.submit(self._fetch)

    def update_and_wait(self) -> None:
        self._params = self._fetch()
        self._calls = 0

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
