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
With a record of this machine and stack the comparison is exact. Without one, the last bits
decide which episodes end within the budget, so only what float arithmetic cannot change is
compared (`invariants()`: the files, their columns, the rows keyed by evaluation rounds and, in
compiled runs, learner steps, the statuses, the summaries' keys), the run must repeat itself
exactly, and the exact comparison is reported skipped in one line (`unrecorded()`). Setting
`RL_GOLDEN_MACHINE` to any text names the processor in place of this one's, so that the golden
tests run as they would on a machine without records (tests/test_golden.py does, for two runs).

A change that alters results updates the records on purpose, in its own commit that says
why; this stores the records of the machine and stack it runs on (and keeps the others):

    python tests/golden_runs.py                  # every golden run (the reverb stack)
    python tests/golden_runs.py dqn sac          # some of them
    .venv-current/bin/python tests/golden_runs.py anakin_ppo_two_seeds anakin_dqn anakin_pqn sebulba_sac sebulba_ppo
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

# Set to any text, it stands for this machine's processor in `machine()`: the golden tests then find no record
# of this machine and compare as on an unknown one (`python tests/golden_runs.py` refuses to store under it).
FORCED_MACHINE = "RL_GOLDEN_MACHINE"

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
    processor model and its vector instruction sets (or `RL_GOLDEN_MACHINE`, where set)."""
    forced = os.environ.get(FORCED_MACHINE)
    if forced:
        return hashlib.sha256(forced.encode()).hexdigest()[:12], forced
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


# The columns that key the rows of a log whose rows float arithmetic cannot add or remove, by the log's file name.
# An evaluation round comes every `eval_every` actor steps on every machine. The learner steps a compiled run
# (COMPILED) has taken are a fixed function of its actor steps; under launcher.deterministic=true the learner
# steps when the replay holds a batch, and sequence and trajectory adders write at episode ends, so when it
# first steps, and how many steps each logged row has seen, follow where episodes end: its learner rows are not
# compared, nor its evaluation rounds' learner steps. Actor rows come one per finished episode (or per rollout
# in which one ended): never compared.
ROUND_KEYS = {"evaluator.csv": ("actor_steps", "evaluator_id")}
COMPILED_ROUND_KEYS = {
    "evaluator.csv": ("actor_steps", "evaluator_id", "learner_steps"),
    "learner.csv": ("actor_steps", "learner_steps"),
}


def invariants(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """What float arithmetic cannot change in golden run `name`'s `record`, so what a machine without a record
    of its own must still reproduce: the files (logs, summaries, checkpoints), each log's columns, the keys
    of the rows `ROUND_KEYS` names (evaluation rounds; in compiled runs learner steps too), each summary's
    status and keys. Never a count of per-episode rows, a float, or a count that follows one."""
    keys = COMPILED_ROUND_KEYS if name in COMPILED else ROUND_KEYS
    logs = record["logs"]
    return {
        "files": sorted([*logs, *record["summaries"]]),
        "checkpoints": sorted(path for path, digest in record["learner_digests"].items() if digest is not None),
        "columns": {path: sorted(set().union(*rows)) for path, rows in logs.items()},
        "rows": {
            path: [[row.get(column) for column in keys[os.path.basename(path)]] for row in rows]
            for path, rows in logs.items()
            if os.path.basename(path) in keys
        },
        "statuses": {path: summary.get("status") for path, summary in record["summaries"].items()},
        "summary_keys": {path: sorted(summary) for path, summary in record["summaries"].items()},
    }


def store_command(name: str) -> str:
    """The command that stores golden run `name`'s record for this machine and stack (this interpreter's)."""
    python = sys.executable
    inside = os.path.commonpath([os.path.abspath(python), ROOT]) == ROOT
    return f"{os.path.relpath(python, ROOT) if inside else 'python'} tests/golden_runs.py {name}"


def unrecorded(name: str) -> str:
    """The one line that says golden run `name` has no record of this machine and stack, so its exact
    comparison is skipped, naming the processor, the stack and the command that stores one."""
    _, description, versions = record_key()
    return (
        f"golden run {name}: exact comparison skipped, no record of this processor and stack ({description}; "
        f"{versions}); only what float arithmetic cannot change is compared; `{store_command(name)}` stores one"
    )


def path_of(name: str) -> str:
    return os.path.join(GOLDEN, f"{name}.json")


def load(name: str) -> dict[str, Any]:
    """{"command": [...], "records": {key: record with its "machine" and "stack" descriptions}}."""
    with open(path_of(name)) as file:
        return json.load(file)


def main(names: list[str]) -> None:
    if os.environ.get(FORCED_MACHINE):
        sys.exit(f"{FORCED_MACHINE} is set: records are stored for this machine's own processor; unset it")
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
