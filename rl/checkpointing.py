"""Checkpoints of a run, written by orbax's `CheckpointManager` (atomic: complete or
absent; the newest `keep` kept), with reverb's checkpoint of the replay tables moved inside.

`<run dir>/checkpoints/step_<actor steps>/`: `learner/` (orbax PyTree: the learner state's
leaves in tree order), `state/` (orbax JSON: counts, schedules, history, clocks, the learner
state's structure and digest, the sha256 of every file under files/), `files/replay/`
(reverb's checkpoint, checkpoint.replay=true), `files/tables.json` (those tables' settings),
`files/process.pkl` (a deterministic run's in-process state). `checkpoints/replay/`: reverb's
checkpointer root, whose checkpoints move into their step.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
import pickle
import re
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from rl.checks import require_at_least, require_positive

FORMAT = 3
REPLAY = "replay"
PROCESS = "process.pkl"
TABLES = "tables.json"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"


class RunWarning(UserWarning):
    """A damaged checkpoint skipped, a replay buffer not restored: one `Warning:` line."""


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged, from another experiment): one line."""


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """conf/config.yaml's `checkpoint` (true/false stand for the defaults, on or off)."""

    enabled: bool = True  # Write checkpoints at all (a resume still reads existing ones).
    every_seconds: float = 300.0  # Also one at the start, the end and on SIGINT/SIGTERM.
    keep: int = 2  # The newest `keep` are kept, older ones deleted.
    replay: bool = False  # Also the replay tables: a resumed run keeps its buffer.

    def __post_init__(self) -> None:
        if not (isinstance(self.every_seconds, (int, float)) and math.isfinite(self.every_seconds)):
            raise ValueError(f"every_seconds must be a finite number, got {self.every_seconds!r}")
        require_positive(self, "every_seconds")
        require_at_least(self, 1, "keep")


def checkpoint_root(run_directory: str) -> str:
    return os.path.join(os.path.abspath(run_directory), "checkpoints")


def replay_root(run_directory: str) -> str:
    return os.path.join(checkpoint_root(run_directory), REPLAY)


def step_of(path: str) -> int | None:
    match = re.match(r"^step_(\d+)$", os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def list_checkpoints(run_directory: str) -> list[str]:
    """Every `step_*` directory of a run, newest (most actor steps) first."""
    root = checkpoint_root(run_directory)
    steps = [(step, name) for name in _names(root) if (step := step_of(name)) is not None]
    return [os.path.join(root, name) for _, name in sorted(steps, reverse=True)]


def _names(directory: str) -> list[str]:
    return os.listdir(directory) if os.path.isdir(directory) else []


def log_files(run_directory: str) -> list[str]:
    directory = os.path.join(run_directory, "logs")
    return sorted(os.path.join(directory, n) for n in _names(directory) if n.endswith(".csv"))


def _has_rows(path: str) -> bool:
    with open(path, newline="") as file:
        reader = csv.reader(file)
        return next(reader, None) is not None and next(reader, None) is not None  # A header and a row.


def holds_a_run(run_directory: str) -> bool:
    """Whether `run_directory` holds an earlier run (run.json, summary.json, a checkpoint or log rows)."""
    return (
        any(os.path.isfile(os.path.join(run_directory, name)) for name in (RUN_FILE, SUMMARY_FILE))
        or bool(list_checkpoints(run_directory))
        or any(_has_rows(path) for path in log_files(run_directory))
    )


def state_digest(leaves: Sequence[Any]) -> str:
    """sha256 over the leaves' dtypes, shapes and bytes: equal digests, bitwise-equal states."""
    digest = hashlib.sha256()
    for leaf in leaves:
        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _leaf_key(index: int) -> str:
    return f"{index:06d}"


def _orbax() -> Any:
    import orbax.checkpoint as ocp  # Imported lazily: it is slow to import.
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # Orbax narrates every save at INFO.
    return ocp


@functools.cache
def _files_save() -> Any:
    """The `files` item's save args: directories moved into, small files written in the step's temporary directory."""
    ocp = _orbax()

    class FilesHandler(ocp.CheckpointHandler):
        def save(self, directory: Any, args: Any) -> None:
            for name, source in args.moves.items():
                os.rename(source, os.path.join(os.fspath(directory), name))
            for name, data in args.writes.items():
                with open(os.path.join(os.fspath(directory), name), "wb") as file:
                    file.write(data)

        def restore(self, directory: Any, args: Any = None) -> str:
            return os.fspath(directory)

    @ocp.args.register_with_handler(FilesHandler, for_save=True, for_restore=True)
    @dataclasses.dataclass
    class FilesSave(ocp.args.CheckpointArgs):
        moves: dict = dataclasses.field(default_factory=dict)
        writes: dict = dataclasses.field(default_factory=dict)

    return FilesSave


def _file_digests(directory: str, prefix: str) -> dict[str, str]:
    digests = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as file:
                digest = hashlib.file_digest(file, "sha256").hexdigest()
            digests[os.path.join(prefix, os.path.relpath(os.path.join(root, name), directory))] = digest
    return digests


def save_checkpoint(
    run_directory: str,
    step: int,
    learner_state: Any,
    state: Mapping[str, Any],
    keep: int | None = None,
    replay_checkpoint: str | None = None,
    process_state: Any = None,
    tables: Mapping[str, Any] | None = None,
) -> str:
    """Writes `checkpoints/step_<step>` atomically (a step saved again replaces it; the newest
    `keep` remain) and returns its path. `state`: JSON-able; `replay_checkpoint`: a directory
    reverb's checkpointer just wrote, moved inside with `tables` (`describe_tables`)."""
    import jax

    ocp = _orbax()
    step = int(step)
    leaves, treedef = jax.tree_util.tree_flatten(learner_state)
    leaves = [np.asarray(leaf) for leaf in jax.device_get(leaves)]
    structure = {
        "tree": str(treedef),
        "shapes": [list(leaf.shape) for leaf in leaves],
        "dtypes": [str(leaf.dtype) for leaf in leaves],
        "digest": state_digest(leaves),
    }
    writes: dict[str, bytes] = {}
    moves = {}
    if process_state is not None:
        writes[PROCESS] = pickle.dumps(process_state, protocol=pickle.HIGHEST_PROTOCOL)
    if replay_checkpoint is not None:
        writes[TABLES] = json.dumps(tables or {}, indent=1).encode()
        moves[REPLAY] = replay_checkpoint
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in writes.items()}
    for name, source in moves.items():
        digests.update(_file_digests(source, name))
    items = {
        "state": ocp.args.JsonSave({**state, "format": FORMAT, "step": step, "learner": structure, "files": digests}),
        "files": _files_save()(moves=moves, writes=writes),
    }
    if leaves:
        items["learner"] = ocp.args.StandardSave({_leaf_key(i): leaf for i, leaf in enumerate(leaves)})
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        step_prefix="step",
        enable_async_checkpointing=False,
        create=True,
        cleanup_tmp_directories=True,
    )
    with ocp.CheckpointManager(checkpoint_root(run_directory), options=options) as manager:
        if step in manager.all_steps():
            manager.delete(step)
        manager.save(step, args=ocp.args.Composite(**items), force=True)
        manager.wait_until_finished()
    return os.path.join(checkpoint_root(run_directory), f"step_{step}")


def damage(path: str) -> str | None:
    """Why the checkpoint at `path` cannot be used (None: its learner state and files match their digests)."""
    try:
        state = read_state(path)
        present = _file_digests(os.path.join(path, "files"), "")
        for relative, digest in sorted(state.get("files", {}).items()):
            if relative not in present:
                return f"missing file files/{relative}"
            if present[relative] != digest:
                return f"files/{relative} does not match its checksum"
        if state_digest(_restore_leaves(path, state["learner"])) != state["learner"]["digest"]:
            return "its learner state does not match its checksum"
    except CheckpointError as error:
        return str(error)
    return None


def find_latest(run_directory: str, warn: bool = True) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest undamaged checkpoint and the damaged ones skipped (path, reason); (None, [])
    when the run has none, a `CheckpointError` when every one is damaged."""
    skipped: list[tuple[str, str]] = []
    for path in list_checkpoints(run_directory):
        reason = damage(path)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
        if warn:
            warnings.warn(f"checkpoint {path} is damaged ({reason}); trying the previous one", RunWarning, stacklevel=2)
    if skipped:
        reasons = "; ".join(f"{os.path.basename(p)}: {r}" for p, r in skipped)
        raise CheckpointError(f"no usable checkpoint in {checkpoint_root(run_directory)} ({reasons})")
    return None, []


def read_state(path: str) -> dict[str, Any]:
    """A checkpoint's state item (counts, schedules, curve, the learner's structure)."""
    ocp = _orbax()
    try:
        state = ocp.Checkpointer(ocp.JsonCheckpointHandler()).restore(os.path.join(path, "state"))
    except Exception as error:  # noqa: BLE001 - orbax's errors for a missing or broken item vary.
        raise CheckpointError(f"cannot read the state of {path} ({type(error).__name__})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or "learner" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of format {FORMAT}")
    return state


def replay_of(path: str) -> str:
    return os.path.join(path, "files", REPLAY)


def read_process_state(path: str) -> Any:
    """A checkpoint's deterministic process state, or None (verified by `find_latest` before any resume)."""
    file_path = os.path.join(path, "files", PROCESS)
    if not os.path.isfile(file_path):
        return None
    with open(file_path, "rb") as file:
        return pickle.load(file)


def check_learner_structure(path: str, template: Any) -> dict[str, Any]:
    """Raises a `CheckpointError` unless the checkpoint's learner state has the structure,
    shapes and dtypes of `template` (a fresh learner's state); returns the saved structure."""
    import jax

    saved = read_state(path)["learner"]
    leaves, treedef = jax.tree_util.tree_flatten(template)
    where = f"checkpoint {path} was written by a different learner"
    if saved["tree"] != str(treedef) or len(saved["shapes"]) != len(leaves):
        raise CheckpointError(
            f"{where} (another agent or network: its state has {len(saved['shapes'])} arrays, this config's "
            f"learner {len(leaves)}, or they are arranged differently)"
        )
    for index, (saved_shape, saved_dtype, leaf) in enumerate(zip(saved["shapes"], saved["dtypes"], leaves)):
        shape, dtype = list(np.shape(leaf)), str(np.dtype(leaf.dtype))
        if saved_shape != shape or saved_dtype != dtype:
            raise CheckpointError(
                f"{where} (array {index} is {saved_dtype}{tuple(saved_shape)} there, {dtype}{tuple(shape)} in this "
                "config's learner: another network shape)"
            )
    return saved


def _restore_leaves(path: str, saved: Mapping[str, Any]) -> list[np.ndarray]:
    if not saved["shapes"]:
        return []
    import jax

    ocp = _orbax()
    target = {
        _leaf_key(i): jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
        for i, (shape, dtype) in enumerate(zip(saved["shapes"], saved["dtypes"]))
    }
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        restored = checkpointer.restore(os.path.join(path, "learner"), args=ocp.args.StandardRestore(target))
        leaves = [np.asarray(restored[key]) for key in target]
    except Exception as error:  # noqa: BLE001 - orbax/tensorstore errors vary: say it plainly.
        raise CheckpointError(f"cannot read the learner state in {path} ({type(error).__name__})") from None
    return [leaf.astype(dtype, copy=False) for leaf, dtype in zip(leaves, saved["dtypes"])]


def restore_learner_state(path: str, template: Any) -> Any:
    """The learner state saved at `path` in `template`'s structure, bit for bit (its digest is checked)."""
    import jax

    saved = check_learner_structure(path, template)
    leaves = _restore_leaves(path, saved)
    if state_digest(leaves) != saved["digest"]:
        raise CheckpointError(f"the learner state in {path} does not match the digest it was saved with")
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(template), leaves)


def describe_tables(tables: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """`reverb.Table`s' configuration as plain values, comparable across a checkpoint and a config."""
    described = {}
    for table in tables:
        info = table.info
        limiter = info.rate_limiter_info
        described[info.name] = {
            "name": info.name,
            "max_size": int(info.max_size),
            "max_times_sampled": int(info.max_times_sampled),
            "sampler": str(info.sampler_options).strip().replace("\n", ", "),
            "remover": str(info.remover_options).strip().replace("\n", ", "),
            "rate_limiter": {
                "samples_per_insert": float(limiter.samples_per_insert),
                "min_diff": float(limiter.min_diff),
                "max_diff": float(limiter.max_diff),
                "min_size_to_sample": int(limiter.min_size_to_sample),
            },
            "signature": str(info.signature),
        }
    return described


def flatten_mapping(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {"a.b": leaf} (an empty mapping is a leaf)."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten_mapping(item, f"{prefix}{key}."))
        return flat or {prefix[:-1]: {}}
    return {prefix[:-1]: value}


def check_replay_tables(checkpoint: str, tables: Sequence[Any]) -> None:
    """Raises a `CheckpointError` naming every difference between the tables a checkpoint's
    replay was saved with and `tables` (reverb 0.14 would silently keep the checkpoint's)."""
    path = os.path.join(checkpoint, "files", TABLES)
    try:
        with open(path) as file:
            saved = json.load(file)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read the replay checkpoint's tables in {path} ({error})") from None
    current = describe_tables(tables)
    differences = []
    for name in sorted(set(saved) | set(current)):
        if name not in current:
            differences.append(f"the checkpoint has a table '{name}' that this config does not build")
        elif name not in saved:
            differences.append(f"this config builds a table '{name}' that the checkpoint lacks")
        else:
            before = flatten_mapping(saved[name])
            for key, now in flatten_mapping(current[name]).items():
                if before.get(key) != now:
                    differences.append(f"table '{name}' {key}: {before.get(key)} in the checkpoint, {now} now")
    if differences:
        raise CheckpointError(
            "the replay checkpoint does not match this config's replay table ("
            + "; ".join(differences)
            + "): resume with the run's own settings, or set checkpoint.replay=false to start with an empty buffer"
        )
