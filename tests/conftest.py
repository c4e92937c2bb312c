"""Shared helpers: running the real entry point and reading what it wrote."""

from __future__ import annotations

import ast
import functools
import glob
import importlib.util
import json
import os
import struct
import subprocess
import sys
from typing import Any, Iterator

import pytest
from _pytest.mark.expression import Expression

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "scripts", "train.py")


# A small compiled PQN on gymnax CartPole: 4 copies x 16 steps an update, an evaluation round every 128 steps (two
# updates). Tests add their budget, seeds, logger and checkpoint settings.
SMALL_PQN = [
    "experiment=pqn_gymnax_cartpole",
    "environment.num_envs=4",
    "agent.batch_size=4",
    "agent.unroll_length=16",
    "agent.num_epochs=1",
    "agent.num_minibatches=2",
    "network.hidden_sizes=[32]",
    "eval_every=128",
    "eval_episodes=2",
]


def short_compiled_run(max_actor_steps: int, eval_every: int) -> list[str]:
    """A short compiled run's plumbing: its budget, a round of 2 episodes every `eval_every` steps, CSV logs
    only, no progress bar, no checkpoint."""
    return [
        f"max_actor_steps={max_actor_steps}",
        f"eval_every={eval_every}",
        "eval_episodes=2",
        "logger=csv",
        "progress=false",
        "checkpoint.enabled=false",
    ]


def run_environment() -> dict[str, str]:
    """The environment of a script a test runs: W&B offline and quiet, TensorFlow's C++ logs quiet."""
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


def run_train(
    overrides: list[str], timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs scripts/train.py in a fresh process, as a researcher would."""
    environment = run_environment()
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, TRAIN, *overrides],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_train(overrides: list[str]) -> subprocess.Popen:
    """scripts/train.py started in a fresh process (unbuffered, its output piped), for a test to watch or signal."""
    return subprocess.Popen(
        [sys.executable, TRAIN, *overrides],
        cwd=ROOT,
        env={**run_environment(), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def terminate_once_written(process: subprocess.Popen, log: str, rows: int, timeout: float = 300) -> str:
    """SIGTERM to a scripts/train.py `process` once its CSV `log` holds `rows` rows (the process held still
    meanwhile, so the signal lands before its budget ends); its stderr once it has exited."""
    import csv
    import signal
    import time

    deadline = time.monotonic() + timeout

    def written() -> int:
        if not os.path.exists(log):
            return 0
        with open(log) as file:
            return len(list(csv.DictReader(file)))

    while written() < rows:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGSTOP)
    process.send_signal(signal.SIGTERM)
    process.send_signal(signal.SIGCONT)
    _, stderr = process.communicate(timeout=timeout)
    return stderr


def read_summary(run_dir: str) -> dict[str, Any]:
    with open(os.path.join(run_dir, "summary.json")) as file:
        return json.load(file)


# W&B's run files (`run-*.wandb`) are a LevelDB-style log: a 7-byte file header, then records in 32 KiB blocks, each
# record a 7-byte header (crc32c, length, kind) and a piece of a protobuf `Record`; a block's last bytes, too few for
# a header, are padding. The pieces of one record: one FULL, or FIRST, MIDDLE..., LAST.
_WANDB_BLOCK, _WANDB_HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def wandb_records(path: str) -> Iterator[Any]:
    """The protobuf records of a W&B run file, in order. Read here rather than by wandb's internal reader
    (`wandb.sdk.internal.datastore`), which wandb 0.31 no longer ships; checksums are not verified."""
    from wandb.proto import wandb_internal_pb2

    with open(path, "rb") as file:
        data = file.read()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    position, pieces = _WANDB_HEADER, b""
    while position + _WANDB_HEADER <= len(data):
        left = _WANDB_BLOCK - position % _WANDB_BLOCK
        if left < _WANDB_HEADER:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + _WANDB_HEADER])
        piece = data[position + _WANDB_HEADER : position + _WANDB_HEADER + length]
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST) or len(piece) < length:
            break  # Zeros past the last record, or a record still being written.
        position += _WANDB_HEADER + length
        pieces = piece if kind in (_FULL, _FIRST) else pieces + piece
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            yield record


def read_wandb_offline_run(run_dir: str) -> dict[str, Any]:
    """Parses the records of the one offline wandb run under `run_dir`."""
    paths = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    assert len(paths) == 1, f"expected one offline run in {run_dir}, found {paths}"
    run: dict[str, Any] = {"config": {}, "history": [], "exit_code": None, "name": None, "group": None, "tags": []}
    for record in wandb_records(paths[0]):
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


# Whether this Python has the reverb stack (requirements.txt) rather than the current one (requirements-current.txt).
REVERB_STACK = importlib.util.find_spec("reverb") is not None

# Environment options whose libraries (MuJoCo, dm_control, the ALE) only the reverb stack installs.
REVERB_STACK_ENVIRONMENTS = ("atari", "mujoco", "dm_control")
# Environment options whose libraries only the current stack installs (MuJoCo Playground: docs/stacks.md).
CURRENT_STACK_ENVIRONMENTS = ("playground",)


def environment_option(overrides: list[str]) -> str | None:
    """The environment option a command line picks: its `environment=`, else its experiment preset's."""
    chosen = dict(o.split("=", 1) for o in overrides if o.startswith(("environment=", "experiment=")))
    if "environment" in chosen or "experiment" not in chosen:
        return chosen.get("environment")
    import yaml

    with open(os.path.join(ROOT, "conf", "experiment", f"{chosen['experiment']}.yaml")) as file:
        defaults = yaml.safe_load(file).get("defaults", [])
    return next((entry["override /environment"] for entry in defaults if "override /environment" in entry), None)


def stack_marks(overrides: list[str]) -> tuple[pytest.MarkDecorator, ...]:
    """`reverb` (`current`) for a command line whose environment only the reverb (current) stack has, for
    `pytest.param(marks=...)`."""
    option = environment_option(overrides)
    if option in REVERB_STACK_ENVIRONMENTS:
        return (pytest.mark.reverb,)
    if option in CURRENT_STACK_ENVIRONMENTS:
        return (pytest.mark.current,)
    return ()


@pytest.fixture
def run_dir(tmp_path) -> str:
    return str(tmp_path / "run")


@functools.cache
def module_marks(path: str) -> frozenset[str]:
    """The marks a test module puts on all its tests (`pytestmark = pytest.mark.X` or a list of them), read
    from its source without importing it."""
    with open(path) as file:
        tree = ast.parse(file.read(), path)
    marks = set()
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in statement.targets):
            for node in ast.walk(statement.value):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "mark"
                ):
                    marks.add(node.attr)
    return frozenset(marks)


def left_out_by_marks(path: Any, config: pytest.Config) -> bool:
    """Whether `-m` leaves out every test of the module at `path` by the marks the module puts on all of them."""
    expression = config.option.markexpr
    if not expression or path.suffix != ".py" or not path.name.startswith("test_"):
        return False
    marks = module_marks(str(path))
    return bool(marks) and not Expression.compile(expression).evaluate(lambda name, **_: name in marks)


def pytest_ignore_collect(collection_path: Any, config: pytest.Config) -> bool | None:
    """A module whose own marks `-m` leaves out is not imported at all: the modules marked `reverb` import
    reverb, TensorFlow or Ray, which the current stack lacks (`-m "not reverb"` there). A test that needs
    them in any other module must be marked `reverb` itself, or it fails there."""
    return True if left_out_by_marks(collection_path, config) else None


def pytest_report_header(config: pytest.Config) -> str | None:
    modules = sorted(
        path.name for path in (config.rootpath / "tests").glob("test_*.py") if left_out_by_marks(path, config)
    )
    return (
        f"modules left out by -m {config.option.markexpr!r} (not imported): {', '.join(modules)}" if modules else None
    )


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture (a run that several tests read)."""
    definitions = getattr(item, "_fixtureinfo", None)
    if definitions is None:
        return False
    return any(d.scope in ("module", "package") for ds in definitions.name2fixturedefs.values() for d in ds)


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's own hook reads the group marks.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuses a test marked both `reverb` and `current` (each part leaves out one of them, so it would run in
    neither), then sets pytest-xdist groups (a group runs on one worker, one test after another):

    * tests that start Ray share one group, since a machine runs one local Ray instance
      at a time. They are the longest chain of the suite, so they are handed out first
      while the other worker takes everything else;
    * the tests of a module that read one module-scoped fixture (a run they all inspect)
      form a group per module, so the fixture's run happens once, not once per worker.
    """
    in_neither = [
        item.nodeid for item in items if item.get_closest_marker("reverb") and item.get_closest_marker("current")
    ]
    if in_neither:
        raise pytest.UsageError(f"marked both reverb and current, so run by neither part: {', '.join(in_neither)}")
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
