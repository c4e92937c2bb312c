"""Package attributes loaded on first use.

An agent package exports its config and `make_builder` eagerly: configuration checks read
them before anything runs. Its learner and losses pull in JAX, optax and haiku (and for
some agents rlax, and through it TensorFlow); they load when first used, so a
configuration error or `--cfg` answers fast.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_attributes(package: str, attributes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` (PEP 562) that imports `package.<attributes[name]>` and
    returns its `name` the first time the package's `name` is read."""

    def __getattr__(name: str) -> Any:
        if name not in attributes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{attributes[name]}"), name)

    return __getattr__
