"""Appends records to `<directory>/<label>.csv`: a new key rewrites the file, wider; one path's
loggers in a process share one open file, other processes must not write it. `learner.csv` is a
sample: the learner's `TimeFilter` keeps one record per `learner_log_interval_s`."""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
import threading
from typing import IO, Any, Callable, Sequence

from rl.loggers.base import Logger, LoggingData, to_python_scalar

_FILES: dict[str, _SharedFile] = {}  # One per path; `setdefault` is atomic.


def _read(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """The columns and rows of the file at `path`; none when there is no file."""
    if not os.path.exists(path):
        return [], []
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        return list(reader.fieldnames or []), list(reader)


def _rewrite(path: str, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Replaces the file at `path` (keeping its mode) with `columns` and `rows`, atomically."""
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
    try:
        with os.fdopen(handle, "w", newline="") as file:
            writer = csv.DictWriter(file, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        shutil.copymode(path, temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


class _SharedFile:
    """One CSV file, its columns and its lock (held for every call); closed, the next write reopens it."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self._file: IO[str] | None = None

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:  # (Re)opened: the file's own columns, if it has any.
            self.columns = _read(self.path)[0]
            self._file = open(self.path, "a", newline="")
        new = [key for key in row if key not in self.columns]
        if new and self.columns:  # Rewritten, wider.
            self.close()
            _rewrite(self.path, self.columns + new, _read(self.path)[1])
            self._file = open(self.path, "a", newline="")
        elif new:
            csv.writer(self._file).writerow(new)
        self.columns += new
        csv.writer(self._file).writerow([row.get(column, "") for column in self.columns])
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def move_rows(path: str, moved: Callable[[dict[str, str]], bool], destination: str) -> int:
    """Moves the rows of `path` for which `moved` holds to the end of `destination`; returns how many."""
    path = os.path.abspath(path)
    shared = _FILES.setdefault(path, _SharedFile(path))
    with shared.lock:
        columns, rows = _read(path)
        gone = [row for row in rows if moved(row)]
        if not gone:
            return 0
        shared.close()
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
        with open(destination, "a", newline="") as file:
            writer = csv.DictWriter(file, columns, extrasaction="ignore")
            if file.tell() == 0:
                writer.writeheader()
            writer.writerows(gone)
        _rewrite(path, columns, [row for row in rows if not moved(row)])
        return len(gone)


class CSVLogger(Logger):
    def __init__(self, directory: str, label: str, steps_key: str | None = None):
        os.makedirs(directory, exist_ok=True)
        path = os.path.abspath(os.path.join(directory, f"{label}.csv"))
        self._shared = _FILES.setdefault(path, _SharedFile(path))
        self._leading = list(dict.fromkeys((steps_key, "actor_steps"))) if steps_key else []

    def write(self, data: LoggingData) -> None:
        row = {key: to_python_scalar(value) for key, value in data.items()}
        with self._shared.lock:
            self._shared.write({**{key: row[key] for key in self._leading if key in row}, **row})

    def close(self) -> None:
        with self._shared.lock:
            self._shared.close()
