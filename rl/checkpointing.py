"""Checkpoints of a run (`checkpoints/step_<actor steps>/`, written atomically by orbax: `learner/`
leaves, `state/` JSON with digests, `files/`) and the run directory's JSON files. Starting or resuming
a run is `rl.experiments.resume`'s."""

from __future__ import annotations

import csv
import dataclasses
import functools
import glob
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
# The default checkpoint cadence of every launcher (conf/config.yaml repeats it, tests/test_checkpoints.py pins both):
# a killed run loses at most a minute (and a chunk in progress). What a checkpoint costs: docs/resume.md.
EVERY_SECONDS = 60.0
REPLICA_DIRECTORIES = "seed_*"  # Replica i of a run (seeds of launcher=anakin or sebulba) writes <run dir>/seed_<i>/.
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"


class RunWarning(UserWarning):
    """A damaged checkpoint skipped, a replay buffer not restored: one `Warning:` line."""


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged, from another experiment): one line."""


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """conf/config.yaml's `checkpoint` (true/false stand for the defaults, on or off)."""

    enabled: bool = True
    every_seconds: float = EVERY_SECONDS  # Also one at the end and on SIGINT/SIGTERM.
    keep: int = 2
    replay: bool = False  # Also the replay tables: a resumed run keeps its buffer.
    # Also one after every evaluation round, so a short run resumes from late in it; None: as the launcher
    # says (yes, but not where a compiled run's rounds come seconds apart: launcher=anakin).
    at_evaluations: bool | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.every_seconds, (int, float)) and math.isfinite(self.every_seconds)):
            raise ValueError(f"every_seconds must be a finite number, got {self.every_seconds!r}")
        require_positive(self, "every_seconds")
        require_at_least(self, 1, "keep")


def checkpoint_root(run_directory: str) -> str:
    return os.path.join(os.path.abspath(run_directory), "checkpoints")


def replay_root(run_directory: str) -> str:
    return os.path.join(checkpoint_root(run_directory), "replay")


def replay_of(path: str) -> str:
    return os.path.join(path, "files", "replay")


def step_of(path: str) -> int | None:
    match = re.match(r"^step_(\d+)$", os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def list_checkpoints(run_directory: str) -> list[str]:
    """Every `step_*` directory of a run, newest (most actor steps) first."""
    paths = glob.glob(os.path.join(glob.escape(checkpoint_root(run_directory)), "step_*"))
    return sorted((path for path in paths if step_of(path) is not None), key=step_of, reverse=True)


def log_files(run_directory: str) -> list[str]:
    """The run's CSV logs and its replicas' (`seed_<i>/logs/`, rl.experiments.replicas): what a restart sets aside."""
    root = glob.escape(run_directory)
    own = glob.glob(os.path.join(root, "logs", "*.csv"))
    replicas = glob.glob(os.path.join(root, REPLICA_DIRECTORIES, "logs", "*.csv"))
    return sorted(own + replicas)


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


def _orbax() -> Any:
    import orbax.checkpoint as ocp
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # Orbax narrates every save at INFO.
    return ocp


@functools.cache
def _files_save() -> Any:
    """The `files` item's save args: directories moved in, small files written."""
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
        moves: dict
        writes: dict

    return FilesSave


def _file_digests(directory: str, prefix: str = "") -> dict[str, str]:
    digests = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as file:
                digest = hashlib.file_digest(file, "sha256").hexdigest()
            digests[os.path.join(prefix, os.path.relpath(os.path.join(root, name), directory))] = digest
    return digests


def tree_signature(treedef: Any) -> str:
    """A pytree structure as text, without the memory addresses some nodes print (MJX's state holds objects whose
    repr is `<... object at 0x7f...>`): the same structure reads the same in every process."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", str(treedef))


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
    """Writes `checkpoints/step_<step>` atomically (replacing one of that step) and returns its path;
    `replay_checkpoint` (reverb's directory) is moved inside with `tables`."""
    import jax

    ocp = _orbax()
    step = int(step)
    leaves, treedef = jax.tree_util.tree_flatten(learner_state)
    leaves = [np.asarray(leaf) for leaf in jax.device_get(leaves)]
    structure = {
        "tree": tree_signature(treedef),
        "shapes": [list(leaf.shape) for leaf in leaves],
        "dtypes": [str(leaf.dtype) for leaf in leaves],
        "digest": state_digest(leaves),
    }
    writes = {}
    moves = {}
    if process_state is not None:
        writes["process.pkl"] = pickle.dumps(process_state, protocol=pickle.HIGHEST_PROTOCOL)
    if replay_checkpoint is not None:
        writes["tables.json"] = json.dumps(tables or {}, indent=1).encode()
        moves["replay"] = replay_checkpoint
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in writes.items()}
    for name, source in moves.items():
        digests.update(_file_digests(source, name))
    items = {
        "state": ocp.args.JsonSave({**state, "format": FORMAT, "step": step, "learner": structure, "files": digests}),
        "files": _files_save()(moves=moves, writes=writes),
    }
    # Orbax writes no empty array (MJX's state has some: a model without contacts); restoring makes them.
    stored = {f"{i:06d}": leaf for i, leaf in enumerate(leaves) if leaf.size}
    if stored:
        items["learner"] = ocp.args.StandardSave(stored)
    options = ocp.CheckpointManagerOptions(
        max_to_keep=keep, step_prefix="step", enable_async_checkpointing=False, cleanup_tmp_directories=True
    )
    with ocp.CheckpointManager(checkpoint_root(run_directory), options=options) as manager:
        if step in manager.all_steps():
            manager.delete(step)
        manager.save(step, args=ocp.args.Composite(**items), force=True)
    return os.path.join(checkpoint_root(run_directory), f"step_{step}")


def find_latest(run_directory: str, warn: bool = True) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest checkpoint whose learner state and files match their digests, and the damaged ones
    skipped (path, reason); (None, []) when the run has none, a `CheckpointError` when every one is damaged."""
    skipped: list[tuple[str, str]] = []
    for path in list_checkpoints(run_directory):
        try:
            state = read_state(path)
            present = _file_digests(os.path.join(path, "files"))
            for relative, digest in sorted(state.get("files", {}).items()):
                if relative not in present:
                    raise CheckpointError(f"missing file files/{relative}")
                if present[relative] != digest:
                    raise CheckpointError(f"files/{relative} does not match its checksum")
            _restore_leaves(path, state["learner"])
        except CheckpointError as error:
            skipped.append((path, str(error)))
            continue
        for damaged, reason in skipped if warn else ():
            warnings.warn(
                f"checkpoint {damaged} is damaged ({reason}); using the previous one", RunWarning, stacklevel=2
            )
        return path, skipped
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


def read_process_state(path: str) -> Any:
    """A checkpoint's deterministic process state, or None."""
    file_path = os.path.join(path, "files", "process.pkl")
    if not os.path.isfile(file_path):
        return None
    with open(file_path, "rb") as file:
        return pickle.load(file)


def check_learner_structure(path: str, template: Any) -> dict[str, Any]:
    """Raises a `CheckpointError` unless the saved learner state has `template`'s structure,
    shapes and dtypes; returns the saved structure."""
    import jax

    saved = read_state(path)["learner"]
    leaves, treedef = jax.tree_util.tree_flatten(template)
    where = f"checkpoint {path} was written by a different learner"
    if tree_signature(saved["tree"]) != tree_signature(treedef) or len(saved["shapes"]) != len(leaves):
        raise CheckpointError(
            f"{where} (another agent or network: its state has {len(saved['shapes'])} arrays, this config's "
            f"learner {len(leaves)}, or they are arranged differently)"
        )
    for index, (saved_shape, saved_dtype, leaf) in enumerate(zip(saved["shapes"], saved["dtypes"], leaves)):
        shape = list(np.shape(leaf))
        dtype = str(np.dtype(leaf.dtype))
        if saved_shape != shape or saved_dtype != dtype:
            raise CheckpointError(
                f"{where} (array {index} is {saved_dtype}{tuple(saved_shape)} there, {dtype}{tuple(shape)} in this "
                "config's learner: another network shape)"
            )
    return saved


def _restore_leaves(path: str, saved: Mapping[str, Any]) -> list[np.ndarray]:
    """The learner state's leaves saved at `path`, checked against their digest."""
    import jax

    ocp = _orbax()
    shapes = {
        f"{i:06d}": jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
        for i, (shape, dtype) in enumerate(zip(saved["shapes"], saved["dtypes"]))
    }
    target = {key: shape for key, shape in shapes.items() if np.prod(shape.shape, dtype=int) > 0}
    try:
        checkpointer = ocp.Checkpointer(ocp.StandardCheckpointHandler())
        restored = target and checkpointer.restore(os.path.join(path, "learner"), args=ocp.args.StandardRestore(target))
        leaves = [
            np.asarray(restored[key]).astype(shape.dtype, copy=False)
            if key in target
            else np.zeros(shape.shape, shape.dtype)
            for key, shape in shapes.items()
        ]
    except Exception as error:  # noqa: BLE001 - orbax/tensorstore errors vary: say it plainly.
        raise CheckpointError(f"cannot read the learner state in {path} ({type(error).__name__})") from None
    if state_digest(leaves) != saved["digest"]:
        raise CheckpointError("its learner state does not match its checksum")
    return leaves


def restore_learner_state(path: str, template: Any) -> Any:
    """The learner state saved at `path` in `template`'s structure, bit for bit (its digest is checked)."""
    import jax

    leaves = _restore_leaves(path, check_learner_structure(path, template))
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
    """Raises a `CheckpointError` naming every difference between the checkpoint's tables and
    `tables` (reverb would silently keep the checkpoint's)."""
    path = os.path.join(checkpoint, "files", "tables.json")
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
            differences += [
                f"table '{name}' {key}: {before.get(key)} in the checkpoint, {now} now"
                for key, now in flatten_mapping(current[name]).items()
                if before.get(key) != now
            ]
    if differences:
        raise CheckpointError(
            "the replay checkpoint does not match this config's replay table ("
            + "; ".join(differences)
            + "): resume with the run's own settings, or set checkpoint.replay=false to start with an empty buffer"
        )


def write_json(path: str, value: Any) -> None:
    """Writes a JSON file whole, then renames it into place: a reader never sees half a file."""
    with open(f"{path}.tmp", "w") as file:
        json.dump(value, file, indent=2)
    os.replace(f"{path}.tmp", path)


def read_json(path: str) -> dict[str, Any]:
    """A JSON file's object, or {} when it is missing, unreadable or not an object."""
    try:
        with open(path) as file:
            value = json.load(file)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
