"""Shared helpers: running the real entry point and reading what it wrote."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "train.py")


def run_train(
    overrides: list[str], timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs scripts/train.py in a fresh process, as a researcher would."""
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, TRAIN, *overrides],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_summary(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, "summary.json")) as file:
        return json.load(file)


def read_wandb_offline_run(run_dir: str) -> dict[str, Any]:
    """Parses the records of the one offline wandb run under `run_dir`."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    paths = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(paths) == 1, f"expected one offline run in {run_dir}, found {paths}"
    store = datastore.DataStore()
    store.open_for_scan(paths[0])
    run: dict[str, Any] = {"config": {}, "history": [], "exit_code": None, "name": None, "group": None, "tags": []}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run["name"], run["group"], run["tags"] = (
                record.run.display_name,
                record.run.run_group,
                list(record.run.tags),
            )
            run["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            run["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            run["history"].append(
                {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            )
        elif kind == "exit":
            run["exit_code"] = record.exit.exit_code
    return run


@pytest.fixture
def run_dir(tmp_path) -> str:
    return str(tmp_path / "run")


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture (a run that several tests read)."""
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return False
    return any(d.scope in ("module", "package") for ds in definitions.name2fixturedefs.values() for d in ds)


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's own hook reads the group marks.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-xdist groups (a group runs on one worker, one test after another):

    * tests that start Ray share one group, since a machine runs one local Ray instance
      at a time. They are the longest chain of the suite, so they are handed out first
      while the other worker takes everything else;
    * the tests of a module that read one module-scoped fixture (a run they all inspect)
      form a group per module, so the fixture's run happens once, not once per worker.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.path.name == "test_ray.py" or item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))

    def order(item: pytest.Item) -> tuple[bool, int]:
        is_ray = any(m.args == ("ray",) for m in item.iter_markers("xdist_group"))
        stem = item.path.stem
        return not is_ray, LONG_MODULES.index(stem) if stem in LONG_MODULES else len(LONG_MODULES)

    items.sort(key=order)


# Modules with the longest tests (learning runs, full runs in subprocesses), longest
# first: handed out right after the Ray group, so that the suite does not end with one
# worker running a long test while the other has nothing left.
LONG_MODULES = [
    "test_reproducibility",
    "test_continuous_learning",
    "test_train",
    "test_golden",
    "test_ppo",
    "test_resume",
    "test_sweeps",
    "test_evaluate",
    "test_anakin",
    "test_notebooks",
    "test_tracking",
]
