"""Golden runs: short deterministic runs whose full records are stored in tests/golden/.

Each run is a `scripts/train.py` command in the deterministic mode (`launcher.deterministic=
true`, or `launcher=anakin`, a compiled program that is deterministic by construction). Its
record is every row of every `logs/*.csv` and every `summary.json` under the run directory,
without the wall-clock fields (seconds and rates), and the digest of the learner state in
each run's newest checkpoint (sha256 over its arrays, `rl.checkpointing.state_digest`).
tests/test_golden.py compares a fresh run with the stored record exactly.

XLA's CPU code differs between processor models (vector widths, fused multiply-adds), and
between versions of JAX (and of the libraries that build the computation), so the same run's
last float bits differ from machine to machine and from stack to stack: a record is stored per
machine and stack (`record_key()`: the processor model and the instruction sets XLA can use,
`machine()`, with the versions of `NUMERIC_PACKAGES`, `stack()`). The reverb stack
(requirements.txt, .venv) runs every golden run; the current stack (requirements-current.txt,
.venv-current) the compiled ones (`COMPILED`), whose records it keeps beside the reverb stack's.
With a record of this machine and stack the comparison is exact; without one, a fresh run must
equal some other record, or else run identically twice with the same files, rows and columns as
the stored records (tests/test_golden.py).

A change that alters results updates the records on purpose, in its own commit that says
why; this stores the records of the machine and stack it runs on (and keeps the others):

    python tests/golden_runs.py                  # every golden run (the reverb stack)
    python tests/golden_runs.py dqn sac          # some of them
    .venv-current/bin/python tests/golden_runs.py anakin_ppo_two_seeds anakin_dqn anakin_pqn   # the current stack's
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "golden")
TRAIN = os.path.join(ROOT, "scripts", "train.py")

SHORT = ["progress=false", "logger=csv", "eval_episodes=2"]
DETERMINISTIC = ["launcher.deterministic=true", *SHORT]

# name -> the command's overrides: one or more per agent, a few thousand steps each.
RUNS: dict[str, list[str]] = {
    "dqn": [
        "experiment=dqn_cartpole",
        "max_actor_steps=3000",
        "eval_every=1000",
        "agent.min_replay_size=500",
        "seed=1",
        *DETERMINISTIC,
    ],
    "sac": [
        "experiment=sac_pendulum",
        "max_actor_steps=2000",
        "eval_every=1000",
        "agent.min_replay_size=500",
        "seed=1",
        *DETERMINISTIC,
    ],
    "td3": [
        "experiment=td3_pendulum",
        "max_actor_steps=2000",
        "eval_every=1000",
        "agent.min_replay_size=500",
        "seed=1",
        *DETERMINISTIC,
    ],
    "d4pg": [
        "experiment=d4pg_pendulum",
        "max_actor_steps=2000",
        "eval_every=1000",
        "agent.min_replay_size=500",
        "seed=1",
        *DETERMINISTIC,
    ],
    "ppo": ["experiment=ppo_cartpole", "max_actor_steps=4000", "eval_every=2000", "seed=1", *DETERMINISTIC],
    "impala": ["experiment=impala_cartpole", "max_actor_steps=4000", "eval_every=2000", "seed=1", *DETERMINISTIC],
    "r2d2": ["experiment=r2d2_cartpole", "max_actor_steps=3000", "eval_every=1500", "seed=1", *DETERMINISTIC],
    "anakin_ppo_two_seeds": [
        "experiment=ppo_gymnax_cartpole",
        "max_actor_steps=16384",
        "eval_every=8192",
        "launcher.num_seeds=2",
        "seed=1",
        *SHORT,
    ],
    "anakin_dqn": ["experiment=dqn_gymnax_cartpole", "max_actor_steps=4096", "eval_every=2048", "seed=1", *SHORT],
    "anakin_pqn": ["experiment=pqn_gymnax_cartpole", "max_actor_steps=16384", "eval_every=8192", "seed=1", *SHORT],
    "sebulba_sac": [
        "experiment=sac_pendulum",
        "launcher=sebulba",
        "max_actor_steps=2048",
        "eval_every=1024",
        "agent.min_replay_size=512",
        "seed=1",
        *SHORT,
    ],
    "sebulba_ppo": [
        "experiment=ppo_cartpole",
        "launcher=sebulba",
        "launcher.num_seeds=2",
        "launcher.actor_threads=2",
        "environment.num_envs=2",
        "max_actor_steps=4096",
        "eval_every=2048",
        "seed=1",
        *SHORT,
    ],
}


# The golden runs whose learner is compiled (launcher=anakin, sebulba): they need no reverb, so both stacks run them.
COMPILED = ("anakin_ppo_two_seeds", "anakin_dqn", "anakin_pqn", "sebulba_sac", "sebulba_ppo")

# Packages whose versions decide a run's last float bits, with the machine: records are kept per stack too.
NUMERIC_PACKAGES = (
    "jax",
    "jaxlib",
    "numpy",
    "dm-haiku",
    "optax",
    "chex",
    "rlax",
    "distrax",
    "tensorflow-probability",
    "tfp-nightly",
    "gymnax",
    "flashbax",
    "gymnasium",
)


def is_wall_clock(key: str) -> bool:
    """Fields that measure time or speed, or name the device: they differ between runs or machines."""
    return key.endswith(("_s", "_ms")) or "per_second" in key or key == "device"


def comparable(value: Any, run_directory: str) -> Any:
    """`value` without its wall-clock fields, at any depth, and with paths inside the run
    directory made relative to it (every run of a test has its own directory)."""
    if isinstance(value, dict):
        return {k: comparable(v, run_directory) for k, v in value.items() if not is_wall_clock(k)}
    if isinstance(value, list):
        return [comparable(v, run_directory) for v in value]
    if isinstance(value, str) and value.startswith(run_directory):
        return os.path.relpath(value, run_directory)
    return value


def _csv_rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return [{k: v for k, v in row.items() if not is_wall_clock(k)} for row in csv.DictReader(file)]


def _newest_digest(run_directory: str) -> str | None:
    from rl import checkpointing

    checkpoints = checkpointing.list_checkpoints(run_directory)
    return checkpointing.read_state(checkpoints[0])["learner"]["digest"] if checkpoints else None


def record(run_directory: str) -> dict[str, Any]:
    """Everything a run wrote that does not depend on timing, keyed by relative path."""
    result: dict[str, Any] = {"logs": {}, "summaries": {}, "learner_digests": {}}
    for path in sorted(glob.glob(os.path.join(run_directory, "**", "logs", "*.csv"), recursive=True)):
        result["logs"][os.path.relpath(path, run_directory)] = _csv_rows(path)
    for path in sorted(glob.glob(os.path.join(run_directory, "**", "summary.json"), recursive=True)):
        with open(path) as file:
            summary = json.load(file)
        relative = os.path.relpath(path, run_directory)
        result["summaries"][relative] = comparable(summary, os.path.abspath(run_directory))
        result["learner_digests"][relative] = _newest_digest(os.path.dirname(path))
    return result


def run(name: str, run_directory: str, timeout: float = 900) -> dict[str, Any]:
    """Runs golden run `name` into `run_directory` and returns its record."""
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, TRAIN, *RUNS[name], f"hydra.run.dir={run_directory}"]
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"golden run {name} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return record(run_directory)


def machine() -> tuple[str, str]:
    """(key, description) of what XLA's CPU code depends on here: the architecture, the
    processor model and its vector instruction sets."""
    model, flags = platform.processor(), set()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as file:
            for line in file:
                name, _, value = line.partition(":")
                if name.strip() == "model name":
                    model = value.strip()
                elif name.strip() == "flags":
                    flags = set(value.split())
    vector = sorted(flag for flag in flags if flag.startswith(("avx", "fma", "f16c", "amx", "sse4")))
    description = f"{platform.machine()} {model}: {' '.join(vector)}"
    return hashlib.sha256(description.encode()).hexdigest()[:12], description


def stack() -> str:
    """The versions of the `NUMERIC_PACKAGES` installed here ("jax 0.4.34, jaxlib 0.4.34, ...")."""
    from importlib import metadata

    versions = []
    for package in NUMERIC_PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(versions)


def key_of(machine_description: str, stack_description: str) -> str:
    return hashlib.sha256(f"{machine_description}\n{stack_description}".encode()).hexdigest()[:12]


def record_key() -> tuple[str, str, str]:
    """(key, machine, stack) of the records this machine and stack make."""
    description, versions = machine()[1], stack()
    return key_of(description, versions), description, versions


def path_of(name: str) -> str:
    return os.path.join(GOLDEN, f"{name}.json")


def load(name: str) -> dict[str, Any]:
    """{"command": [...], "records": {key: record with its "machine" and "stack" descriptions}}."""
    with open(path_of(name)) as file:
        return json.load(file)


def main(names: list[str]) -> None:
    os.makedirs(GOLDEN, exist_ok=True)
    key, description, versions = record_key()
    for name in names or list(RUNS):
        stored = load(name) if os.path.exists(path_of(name)) else {"records": {}}
        if stored.get("command") != RUNS[name]:
            stored["records"] = {}  # Another command's records compare with nothing.
        with tempfile.TemporaryDirectory() as directory:
            fresh = run(name, os.path.join(directory, "run"))
            stored["records"][key] = {"machine": description, "stack": versions, **fresh}
        stored["command"] = RUNS[name]
        with open(path_of(name), "w") as file:
            json.dump(stored, file, indent=1, sort_keys=True)
            file.write("\n")
        print(f"{name}: {path_of(name)} ({description}; {versions})")


if __name__ == "__main__":
    main(sys.argv[1:])
