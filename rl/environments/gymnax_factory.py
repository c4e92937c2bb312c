"""The `_target_` of conf/environment/gymnax.yaml, kept free of JAX imports so that
configuration checks stay fast; the adapter (and JAX, gymnax) load when an environment
is made."""

from __future__ import annotations

from typing import Any

import dm_env


def make_gymnax_environment(name: str, seed: int, kwargs: dict[str, Any] | None = None) -> dm_env.Environment:
    """gymnax environment `name` (CartPole-v1, Pendulum-v1, Breakout-MinAtar, ...) as a
    float32 dm_env seeded with `seed`; `kwargs` go to `gymnax.make`."""
    from rl.environments.gymnax_adapter import GymnaxToDmEnv

    return GymnaxToDmEnv(name, seed, kwargs)


# launcher=anakin builds this environment inside its compiled program
# (rl/environments/gymnax_vector.py) from the factory's `name` and `kwargs`.
make_gymnax_environment.jax_native = True


def is_jax_native(environment_factory: Any) -> bool:
    """Whether an experiment's environment factory (a functools.partial of a `_target_`)
    names an environment that can be compiled into a JAX program."""
    return bool(getattr(getattr(environment_factory, "func", environment_factory), "jax_native", False))
