"""Keeps an actor's copy of the learner's parameters fresh: a remote source fetches in the
background itself (`RemoteVariableSource`), so the client only decides how often to ask."""

from __future__ import annotations

from typing import Any

from rl.core import VariableSource


class VariableClient:
    """Fetches variable `key` from `source` every `update_period` calls to `update`."""

    def __init__(self, source: VariableSource, key: str = "policy", update_period: int = 1):
        self._source = source
        self._key = key
        self._update_period = max(1, int(update_period))
        self._calls = 0
        self._params: Any = None

    @property
    def params(self) -> Any:
        if self._params is None:
            self.update_and_wait()
        return self._params

    def update(self, wait: bool = False) -> None:
        self._calls += 1
        if wait or self._calls >= self._update_period:
            self.update_and_wait()

    def get_state(self) -> dict[str, Any]:
        """The parameters held and the calls since they were fetched (a restored client fetches when this one would)."""
        return {"params": self._params, "calls": self._calls}

    def set_state(self, state: dict[str, Any]) -> None:
        self._params = state["params"]
        self._calls = int(state["calls"])

    def update_and_wait(self) -> None:
        self._params = self._source.get_variables([self._key])[0]
        self._calls = 0
