"""Appends records to `<directory>/<label>.csv`; no key is ever dropped.

The columns are the keys seen so far, in order of first appearance; given a `steps_key`
(the node's own step count: `learner_steps` for the learner, `actor_steps` for actors and
evaluators), that key and then `actor_steps`, the x-axis every node shares, lead each
record, so a new file's first columns are the steps. A record with a key
the file has no column for widens the file: it is rewritten (to a temporary file, then
renamed over the old one) with the new header and empty cells for the earlier rows. Keys
settle after the first few records, so rewrites are rare. A record without some column
leaves that cell empty.

Every `CSVLogger` of one path in a process shares one open file and one column list, so
several writers of a label (the actors of a Ray run, whose records the driver writes)
neither lose keys nor interleave partial lines. An existing file is appended to with its
own header (a resumed run), widened like any other when new keys arrive. Writers in
different processes must not share a file.

A file holds every record its logger is given, but not every node gives it every record:
`learner.csv` is a sample of the learner's steps. The learner writes one record per
learner step (its metrics averaged over the SGD steps that step ran), and `build_learner`
wraps its logger in a `TimeFilter` that passes the first record and then the first one
at least `learner_log_interval_s` seconds (1 s) after the last passed; the records in
between are dropped, not averaged. With `launcher.deterministic=true` a `StepFilter`
passes the first record in each window of `eval_every // 10` actor steps instead;
launcher=anakin writes one record per chunk (the chunk's means).
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
import threading
from typing import IO, Any, Callable

from rl.loggers.base import Logger, LoggingData, to_python_scalar


class _SharedFile:
    """One CSV file and its columns; every method is called with `lock` held."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.users = 0
        self.columns: list[str] | None = None
        self._file: IO[str] | None = None
        self._writer: Any = None

    def _open(self) -> None:
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with open(self.path, newline="") as existing:
                self.columns = next(csv.reader(existing), None) or None
        self._file = open(self.path, "a", newline="")
        self._writer = csv.writer(self._file)

    def write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            self._open()
        if self.columns is None:
            self.columns = list(row)
            self._writer.writerow(self.columns)
        new = [key for key in row if key not in self.columns]
        if new:
            self._widen(new)
        self._writer.writerow([row.get(column, "") for column in self.columns])

    def _widen(self, new: list[str]) -> None:
        """Rewrites the file with `new` appended to the header (atomic rename)."""
        assert self._file is not None and self.columns is not None
        self._file.close()
        columns = self.columns + new
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(self.path)}.", dir=os.path.dirname(self.path))
        try:
            with open(self.path, newline="") as source, os.fdopen(handle, "w", newline="") as target:
                reader, writer = csv.reader(source), csv.writer(target)
                next(reader, None)  # The old header.
                writer.writerow(columns)
                for cells in reader:
                    writer.writerow(cells + [""] * (len(columns) - len(cells)))
            shutil.copymode(self.path, temporary)
            os.replace(temporary, self.path)
            self.columns = columns
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
            self._file = open(self.path, "a", newline="")
            self._writer = csv.writer(self._file)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file, self._writer = None, None
        self.columns = None


_FILES: dict[str, _SharedFile] = {}
_FILES_LOCK = threading.Lock()


def _acquire(path: str) -> _SharedFile:
    with _FILES_LOCK:
        shared = _FILES.setdefault(path, _SharedFile(path))
        shared.users += 1
        return shared


def move_rows(path: str, moved: Callable[[dict[str, str]], bool], destination: str) -> int:
    """Moves the rows of the CSV file at `path` for which `moved` holds to the end of
    `destination` (made with the same header when new); returns how many moved.

    The file is replaced atomically. Loggers of `path` in this process wait meanwhile and
    then append after the rows kept (their file is opened again on their next write).
    Rows of a fault or a resume that the run went back past are kept this way, out of
    the curves.
    """
    with _FILES_LOCK:
        shared = _FILES.get(path)
    lock = shared.lock if shared is not None else threading.Lock()
    with lock:
        if not os.path.exists(path):
            return 0
        with open(path, newline="") as file:
            reader = csv.DictReader(file)
            columns = list(reader.fieldnames or [])
            rows = list(reader)
        gone = [row for row in rows if moved(row)]
        if not gone:
            return 0
        if shared is not None:
            shared.close()  # Opened again, after the rows kept, by the next write.
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
        with open(destination, "a", newline="") as file:
            writer = csv.DictWriter(file, columns, extrasaction="ignore")
            if file.tell() == 0:
                writer.writeheader()
            writer.writerows(gone)
        handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
        with os.fdopen(handle, "w", newline="") as file:
            writer = csv.DictWriter(file, columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(row for row in rows if not moved(row))
        shutil.copymode(path, temporary)
        os.replace(temporary, path)
        return len(gone)


STEP_KEY = "actor_steps"


def leading_steps(row: dict[str, Any], steps_key: str | None) -> dict[str, Any]:
    """`row` with `steps_key` first and `actor_steps` next (those present), the rest in
    order; `steps_key` None leaves the row as it is."""
    if steps_key is None:
        return row
    leading = [key for key in dict.fromkeys((steps_key, STEP_KEY)) if key in row]
    return {**{key: row[key] for key in leading}, **row}


class CSVLogger(Logger):
    def __init__(self, directory: str, label: str, flush_every: int = 1, steps_key: str | None = None):
        os.makedirs(directory, exist_ok=True)
        self.steps_key = steps_key
        self.path = os.path.abspath(os.path.join(directory, f"{label}.csv"))
        self._shared: _SharedFile | None = _acquire(self.path)
        self._flush_every = flush_every
        self._rows = 0

    def write(self, data: LoggingData) -> None:
        row = leading_steps({key: to_python_scalar(value) for key, value in data.items()}, self.steps_key)
        if self._shared is None:  # Written to after close: open the file again.
            self._shared = _acquire(self.path)
        shared = self._shared
        with shared.lock:
            shared.write(row)
            self._rows += 1
            if self._rows % self._flush_every == 0:
                shared.flush()

    def close(self) -> None:
        """Flushes; the file is closed when its last logger closes. Idempotent."""
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with _FILES_LOCK, shared.lock:
            shared.users -= 1
            if shared.users == 0:
                shared.close()
                if _FILES.get(self.path) is shared:
                    del _FILES[self.path]
            else:
                shared.flush()
