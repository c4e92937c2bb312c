"""Checkpoints of a run: the learner's state (orbax), the run's bookkeeping and, optionally,
the replay tables (reverb's checkpointer).

Layout under `<run dir>/checkpoints/`:

    step_<actor steps>/
        learner/         orbax PyTree: the learner state's leaves, in tree order
        state.json       counts, schedules, evaluation history, clocks, and the learner
                         state's structure (tree, shapes, dtypes) and content digest
        replay/          reverb's checkpoint of the tables (checkpoint.replay=true only)
        process.pkl      a deterministic run's in-process state (launcher.deterministic=true
                         only: replay, environments, actor and evaluators), for an exact resume
        MANIFEST.json    size and sha256 of every other file, written last
    replay/              reverb's checkpointer root: a table checkpoint is written here,
                         then moved into the step directory it belongs to

A checkpoint is assembled in a hidden temporary directory and renamed into place, so a
`step_*` directory is complete or absent: a run killed mid-save leaves only a temporary
directory, which is ignored (and cleared by the next save). A checkpoint whose files no
longer match its manifest is damaged: `find_latest` skips it, with a warning, for the
previous one. Saving keeps the newest `keep` checkpoints.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import math
import os
import pickle
import re
import shutil
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

FORMAT = 2


class RunWarning(UserWarning):
    """Something about a run directory the user should know (a damaged checkpoint skipped,
    a replay buffer not restored): the entry point prints it as one `Warning:` line."""


CHECKPOINTS = "checkpoints"
MANIFEST = "MANIFEST.json"
STATE = "state.json"
LEARNER = "learner"
REPLAY = "replay"
PROCESS = "process.pkl"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TEMPORARY_PREFIX = ".tmp-"


class CheckpointError(Exception):
    """A checkpoint that cannot be used (missing, damaged, from another experiment): one line."""


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """conf/config.yaml's `checkpoint` (true/false stand for the defaults, on or off)."""

    # Write checkpoints at all (a resume still reads existing ones).
    enabled: bool = True
    # Seconds between periodic checkpoints; one is also written when the run starts, at
    # its end and when it is stopped (SIGINT/SIGTERM).
    every_seconds: float = 300.0
    # Checkpoints kept: the newest `keep`, older ones are deleted.
    keep: int = 2
    # Also checkpoint the replay tables (reverb's checkpointer), so a resumed run keeps
    # its replay buffer instead of refilling it.
    replay: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.every_seconds, (int, float)) and math.isfinite(self.every_seconds)):
            raise ValueError(f"every_seconds must be a finite number, got {self.every_seconds!r}")
        if self.every_seconds <= 0:
            raise ValueError(f"every_seconds must be > 0, got {self.every_seconds}")
        if self.keep < 1:
            raise ValueError(f"keep must be >= 1, got {self.keep}")


# --------------------------------------------------------------------------- paths


def checkpoint_root(run_directory: str) -> str:
    return os.path.join(os.path.abspath(run_directory), CHECKPOINTS)


def replay_root(run_directory: str) -> str:
    """Reverb's checkpointer root: `<run dir>/checkpoints/replay`."""
    return os.path.join(checkpoint_root(run_directory), REPLAY)


def step_of(path: str) -> int | None:
    match = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    return int(match.group(1)) if match else None


def list_checkpoints(run_directory: str) -> list[str]:
    """Every `step_*` directory of a run, newest (most actor steps) first."""
    root = checkpoint_root(run_directory)
    if not os.path.isdir(root):
        return []
    steps = [(step, name) for name in os.listdir(root) if (step := step_of(name)) is not None]
    return [os.path.join(root, name) for _, name in sorted(steps, reverse=True)]


RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"


def log_files(run_directory: str) -> list[str]:
    directory = os.path.join(run_directory, "logs")
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".csv"))


def _has_log_rows(run_directory: str) -> bool:
    for path in log_files(run_directory):
        with open(path, newline="") as file:
            reader = csv.reader(file)
            if next(reader, None) is not None and next(reader, None) is not None:
                return True
    return False


def holds_a_run(run_directory: str) -> bool:
    """Whether `run_directory` holds an earlier run of this project (its run.json,
    summary.json, a checkpoint or log rows)."""
    return (
        os.path.isfile(os.path.join(run_directory, RUN_FILE))
        or os.path.isfile(os.path.join(run_directory, SUMMARY_FILE))
        or bool(list_checkpoints(run_directory))
        or _has_log_rows(run_directory)
    )


# --------------------------------------------------------------------------- learner state


def _leaves_and_structure(state: Any) -> tuple[list[np.ndarray], dict[str, Any]]:
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(state)
    host = [np.asarray(leaf) for leaf in jax.device_get(leaves)]
    structure = {
        "tree": str(treedef),
        "shapes": [list(leaf.shape) for leaf in host],
        "dtypes": [str(leaf.dtype) for leaf in host],
        "digest": state_digest(host),
    }
    return host, structure


def state_digest(leaves: Sequence[Any]) -> str:
    """sha256 over the leaves' dtypes, shapes and bytes: equal digests, bitwise-equal states."""
    digest = hashlib.sha256()
    for leaf in leaves:
        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _orbax():
    import orbax.checkpoint as ocp  # Imported lazily: it is slow to import.
    from absl import logging

    logging.set_verbosity(logging.WARNING)  # Orbax narrates every save at INFO.
    return ocp.PyTreeCheckpointer()


def _leaf_key(index: int) -> str:
    return f"{index:06d}"


# --------------------------------------------------------------------------- files


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(directory: str) -> list[str]:
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            found.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(found)


def _write_json(path: str, value: Any) -> None:
    with open(path, "w") as file:
        json.dump(value, file, indent=1, allow_nan=True)
        file.flush()
        os.fsync(file.fileno())


def _fsync_directory(path: str) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _clear_temporaries(root: str) -> None:
    """Removes what an interrupted save left behind (only this module's temporary names)."""
    for name in os.listdir(root):
        if name.startswith(_TEMPORARY_PREFIX):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# --------------------------------------------------------------------------- save


def save_checkpoint(
    run_directory: str,
    step: int,
    learner_state: Any,
    state: Mapping[str, Any],
    keep: int | None = None,
    replay_checkpoint: str | None = None,
    process_state: Any = None,
) -> str:
    """Writes `<run dir>/checkpoints/step_<step>` atomically and returns its path.

    `learner_state` is the learner's pytree; `state` a JSON-able dict of everything else
    (counts, schedules, evaluation history); `replay_checkpoint`, a directory reverb's
    checkpointer just wrote, is moved inside; `process_state` (picklable) is what else a
    deterministic run needs to continue exactly. With `keep`, only the newest `keep`
    checkpoints remain afterwards.
    """
    root = checkpoint_root(run_directory)
    os.makedirs(root, exist_ok=True)
    _clear_temporaries(root)
    name = f"step_{int(step)}"
    temporary = os.path.join(root, f"{_TEMPORARY_PREFIX}{name}-{os.getpid()}")
    os.makedirs(temporary)
    try:
        leaves, structure = _leaves_and_structure(learner_state)
        if leaves:
            _orbax().save(
                os.path.join(temporary, LEARNER), {"leaves": {_leaf_key(i): leaf for i, leaf in enumerate(leaves)}}
            )
        if replay_checkpoint is not None:
            os.rename(replay_checkpoint, os.path.join(temporary, REPLAY))
        if process_state is not None:
            with open(os.path.join(temporary, PROCESS), "wb") as file:
                pickle.dump(process_state, file, protocol=pickle.HIGHEST_PROTOCOL)
        _write_json(
            os.path.join(temporary, STATE), {**state, "format": FORMAT, "step": int(step), "learner": structure}
        )
        manifest = {
            path: [os.path.getsize(os.path.join(temporary, path)), _sha256(os.path.join(temporary, path))]
            for path in _files(temporary)
        }
        _write_json(os.path.join(temporary, MANIFEST), manifest)
        _fsync_directory(temporary)
        final = os.path.join(root, name)
        replaced = None
        if os.path.exists(final):  # The same actor step saved twice (a stop right after a save).
            replaced = os.path.join(root, f"{_TEMPORARY_PREFIX}replaced-{name}-{os.getpid()}")
            os.rename(final, replaced)
        os.rename(temporary, final)
        _fsync_directory(root)
        if replaced is not None:
            shutil.rmtree(replaced, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    if keep is not None:
        for old in list_checkpoints(run_directory)[keep:]:
            shutil.rmtree(old, ignore_errors=True)
    return final


# --------------------------------------------------------------------------- verify and restore


def damage(path: str) -> str | None:
    """Why the checkpoint at `path` cannot be used (None when its files match its manifest)."""
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.isfile(manifest_path):
        return f"no {MANIFEST} (not a complete checkpoint of this format)"
    try:
        with open(manifest_path) as file:
            manifest = json.load(file)
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except (OSError, ValueError) as error:
        return f"unreadable {MANIFEST} ({error})"
    present = set(_files(path)) - {MANIFEST}
    missing = sorted(set(manifest) - present)
    if missing:
        return f"missing file {missing[0]}"
    extra = sorted(present - set(manifest))
    if extra:
        return f"unexpected file {extra[0]}"
    for relative, (size, digest) in sorted(manifest.items()):
        full = os.path.join(path, relative)
        if os.path.getsize(full) != size:
            return f"{relative} has {os.path.getsize(full)} bytes, {size} were written"
        if _sha256(full) != digest:
            return f"{relative} does not match its checksum"
    try:
        read_state(path)
    except CheckpointError as error:
        return str(error)
    return None


def find_latest(run_directory: str, warn: bool = True) -> tuple[str | None, list[tuple[str, str]]]:
    """The newest undamaged checkpoint of a run and the damaged ones skipped on the way
    (path, reason), newest first. (None, []) when the run has no checkpoint; a
    `CheckpointError` when it has some but every one is damaged."""
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
    try:
        with open(os.path.join(path, STATE)) as file:
            state = json.load(file)
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {os.path.join(path, STATE)} ({error})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT or "learner" not in state:
        raise CheckpointError(f"{path} is not a checkpoint of format {FORMAT}")
    return state


def read_process_state(path: str) -> Any:
    """A checkpoint's deterministic process state (None: it has none). The file is the
    run's own, verified against the manifest by `find_latest` before any resume."""
    file_path = os.path.join(path, PROCESS)
    if not os.path.isfile(file_path):
        return None
    with open(file_path, "rb") as file:
        return pickle.load(file)


def check_learner_structure(path: str, template: Any) -> None:
    """Raises a `CheckpointError` unless the checkpoint's learner state has the structure,
    shapes and dtypes of `template` (the state a freshly built learner has)."""
    import jax

    saved = read_state(path)["learner"]
    leaves, treedef = jax.tree_util.tree_flatten(template)
    shapes = [list(np.shape(leaf)) for leaf in leaves]
    dtypes = [str(np.dtype(leaf.dtype)) if hasattr(leaf, "dtype") else str(np.asarray(leaf).dtype) for leaf in leaves]
    where = f"checkpoint {path} was written by a different learner"
    if saved["tree"] != str(treedef) or len(saved["shapes"]) != len(shapes):
        raise CheckpointError(
            f"{where} (another agent or network: its state has {len(saved['shapes'])} arrays, this config's "
            f"learner {len(shapes)}, or they are arranged differently)"
        )
    for index, (saved_shape, shape, saved_dtype, dtype) in enumerate(
        zip(saved["shapes"], shapes, saved["dtypes"], dtypes)
    ):
        if saved_shape != shape or saved_dtype != dtype:
            raise CheckpointError(
                f"{where} (array {index} is {saved_dtype}{tuple(saved_shape)} there, {dtype}{tuple(shape)} in this "
                "config's learner: another network shape)"
            )


def restore_learner_state(path: str, template: Any) -> Any:
    """The learner state saved at `path`, in `template`'s structure (numpy leaves, bit for
    bit as saved: the content digest is checked)."""
    import jax

    check_learner_structure(path, template)
    saved = read_state(path)["learner"]
    _, treedef = jax.tree_util.tree_flatten(template)
    count = len(saved["shapes"])
    leaves: list[np.ndarray] = []
    if count:
        try:
            restored = _orbax().restore(os.path.join(path, LEARNER))
            leaves = [np.asarray(restored["leaves"][_leaf_key(i)]) for i in range(count)]
        except Exception as error:  # noqa: BLE001 - orbax/tensorstore errors vary: say it plainly.
            raise CheckpointError(
                f"cannot read the learner state in {path} ({type(error).__name__}: {error})"
            ) from None
    leaves = [leaf.astype(dtype, copy=False) for leaf, dtype in zip(leaves, saved["dtypes"])]
    if state_digest(leaves) != saved["digest"]:
        raise CheckpointError(f"the learner state in {path} does not match the digest it was saved with")
    return jax.tree_util.tree_unflatten(treedef, leaves)


# --------------------------------------------------------------------------- replay tables


def describe_table(
    name: str, max_size: int, max_times_sampled: int, sampler: Any, remover: Any, rate_limiter: Any, signature: Any
) -> dict[str, Any]:
    """A table's configuration as plain values, comparable across a checkpoint and a config."""
    return {
        "name": name,
        "max_size": int(max_size),
        "max_times_sampled": int(max_times_sampled),
        "sampler": str(sampler).strip().replace("\n", ", "),
        "remover": str(remover).strip().replace("\n", ", "),
        "rate_limiter": {
            "samples_per_insert": float(rate_limiter.samples_per_insert),
            "min_diff": float(rate_limiter.min_diff),
            "max_diff": float(rate_limiter.max_diff),
            "min_size_to_sample": int(rate_limiter.min_size_to_sample),
        },
        "signature": str(signature),
    }


def describe_tables(tables: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The configuration of `reverb.Table`s, as the current config builds them."""
    described = {}
    for table in tables:
        info = table.info
        described[info.name] = describe_table(
            info.name,
            info.max_size,
            info.max_times_sampled,
            info.sampler_options,
            info.remover_options,
            info.rate_limiter_info,
            info.signature,
        )
    return described


def _tfrecords(path: str) -> list[bytes]:
    """The records of a (zlib-compressed or plain) TFRecord file."""
    import struct
    import zlib

    with open(path, "rb") as file:
        data = file.read()
    try:
        data = zlib.decompress(data)
    except zlib.error:
        pass
    records, offset = [], 0
    while offset < len(data):
        if offset + 12 > len(data):
            raise ValueError("truncated record header")
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12
        if offset + length + 4 > len(data):
            raise ValueError("truncated record")
        records.append(data[offset : offset + length])
        offset += length + 4
    return records


def read_replay_tables(replay_checkpoint: str) -> dict[str, dict[str, Any]]:
    """The configuration of the tables in a reverb checkpoint directory."""
    from reverb.cc.checkpointing import checkpoint_pb2
    from tensorflow.python.saved_model import nested_structure_coder

    path = os.path.join(replay_checkpoint, "tables.tfrecord")
    try:
        records = _tfrecords(path)
        tables = [checkpoint_pb2.PriorityTableCheckpoint.FromString(record) for record in records]
    except (OSError, ValueError, Exception) as error:  # noqa: BLE001 - a protobuf DecodeError included.
        raise CheckpointError(f"cannot read the replay checkpoint's tables in {path} ({error})") from None
    described = {}
    for table in tables:
        signature = nested_structure_coder.decode_proto(table.signature) if table.HasField("signature") else None
        described[table.table_name] = describe_table(
            table.table_name,
            table.max_size,
            table.max_times_sampled,
            table.sampler,
            table.remover,
            table.rate_limiter,
            signature,
        )
    return described


def table_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """How a checkpoint's tables differ from the ones the current config builds."""
    differences = []
    for name in sorted(set(saved) | set(current)):
        if name not in current:
            differences.append(f"the checkpoint has a table '{name}' that this config does not build")
            continue
        if name not in saved:
            differences.append(f"this config builds a table '{name}' that the checkpoint lacks")
            continue
        for key in current[name]:
            before, now = saved[name][key], current[name][key]
            if isinstance(now, dict):
                for sub in now:
                    if before[sub] != now[sub]:
                        differences.append(
                            f"table '{name}' {key}.{sub}: {before[sub]} in the checkpoint, {now[sub]} now"
                        )
            elif before != now:
                differences.append(f"table '{name}' {key}: {before} in the checkpoint, {now} now")
    return differences


def check_replay_tables(replay_checkpoint: str, tables: Sequence[Any]) -> None:
    """Raises a `CheckpointError` naming every difference between a reverb checkpoint's
    tables and `tables` (reverb 0.14 would silently keep the checkpoint's settings)."""
    differences = table_differences(read_replay_tables(replay_checkpoint), describe_tables(tables))
    if differences:
        raise CheckpointError(
            "the replay checkpoint does not match this config's replay table ("
            + "; ".join(differences)
            + "): resume with the run's own settings, or set checkpoint.replay=false to start with an empty buffer"
        )
