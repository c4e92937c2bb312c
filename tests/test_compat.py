"""rl/compat.py: each private use works on the versions it names, and no other version is installed."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from conftest import ROOT
from rl import compat


def test_each_installed_version_is_one_the_private_uses_were_written_for():
    """dm-reverb is the reverb stack's only; JAX is in both."""
    installed = {}
    for distribution in compat.TESTED:
        try:
            installed[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    assert "jax" in installed
    for distribution, version in installed.items():
        assert version in compat.TESTED[distribution], (
            f"{distribution} {version}: check rl/compat.py's uses of its private names, then add the version"
        )


def test_jax_says_whether_a_backend_has_started():
    script = (
        "import jax; from rl import compat; before = compat.jax_backends_started(); jax.numpy.zeros(1); "
        "print(before, compat.jax_backends_started())"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stderr[-2000:]


@pytest.mark.reverb
def test_reverbs_native_writer_and_table_options_are_reached():
    import reverb

    tables = [
        reverb.Table.queue("queue", 10),
        reverb.Table(
            "prioritized",
            reverb.selectors.Prioritized(0.6),
            reverb.selectors.Fifo(),
            10,
            reverb.rate_limiters.MinSize(1),
        ),
    ]
    server = reverb.Server(tables)
    try:
        client = reverb.Client(f"localhost:{server.port}")
        info = client.server_info()
        assert compat.table_distributions(info["queue"]) == ("fifo", "fifo")
        assert compat.table_distributions(info["prioritized"]) == ("prioritized", "fifo")
        with client.trajectory_writer(num_keep_alive_refs=1) as writer:
            native = compat.native_trajectory_writer(writer)
            references = native.Append([1.0])
            native.CreateItem("queue", 1.0, [[reference] for reference in references], [True])
            writer.flush()
        assert client.server_info()["queue"].current_size == 1
    finally:
        server.stop()


@pytest.mark.reverb
def test_rays_token_notice_is_dropped_from_the_logger_its_module_logs_to():
    """The logger compat names is the one Ray's token module logs to; the notice goes, its other lines stay."""
    import importlib
    import logging

    module = importlib.import_module(compat.RAY_TOKEN_LOGGER)
    assert module.logger.name == compat.RAY_TOKEN_LOGGER
    kept: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: kept.append(record.getMessage())
    module.logger.addHandler(handler)
    try:
        compat.drop_ray_token_notice()
        module.logger.warning("Token authentication is enabled for this Ray cluster. Set ...")
        module.logger.warning("Token authentication is disabled")
    finally:
        module.logger.removeHandler(handler)
    assert kept == ["Token authentication is disabled"]
