"""Every use of another library's private names, in one place, with the versions each was written and
tested for (tests/test_compat.py fails on any other installed version, so an upgrade is checked here first).
Nothing is imported until a function is called: this module sits below every layer."""

from __future__ import annotations

import sys
from typing import Any

# The distribution versions each private use below was written for.
TESTED = {
    "dm-reverb": ("0.14.0",),  # TrajectoryWriter._writer, the TableInfo protobuf's oneofs.
    "jax": ("0.4.34", "0.10.2"),  # jax._src.xla_bridge.backends_are_initialized.
    "ray": ("2.60.0",),  # The logger ray._private.authentication.authentication_token_setup.
}


def native_trajectory_writer(writer: Any) -> Any:
    """reverb's C++ writer behind a `reverb.TrajectoryWriter`: its `Append` and `CreateItem` skip the Python
    wrapper's validation of every call, which costs more than the insert on small items."""
    return writer._writer


def table_distributions(info: Any) -> tuple[str, str]:
    """(sampler, remover) of a reverb table's `TableInfo`: the names of its protobuf options' set oneofs
    ("uniform", "prioritized", "fifo", ...)."""
    return info.sampler_options.WhichOneof("distribution"), info.remover_options.WhichOneof("distribution")


def jax_backends_started() -> bool:
    """Whether a JAX backend has started (XLA reads XLA_FLAGS once, then); False when JAX is not imported or
    cannot say. JAX has no public equivalent."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:
        return False
    return bool(backends_are_initialized())


RAY_TOKEN_LOGGER = "ray._private.authentication.authentication_token_setup"


def drop_ray_token_notice() -> None:
    """Drops Ray's notice that token authentication is enabled (a line at every start, nothing to act on);
    its warning that authentication is off still shows. Ray names the logger after its private module."""
    import logging

    notice = "Token authentication is enabled"
    logging.getLogger(RAY_TOKEN_LOGGER).addFilter(lambda record: not record.getMessage().startswith(notice))
