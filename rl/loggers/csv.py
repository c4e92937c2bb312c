"""Appends records to `<directory>/<label>.csv`; columns are fixed by the first record."""

from __future__ import annotations

import csv
import os
from typing import IO

from rl.loggers.base import Logger, LoggingData, to_python_scalar


class CSVLogger(Logger):
    def __init__(self, directory: str, label: str, flush_every: int = 1):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, f"{label}.csv")
        self._file: IO[str] | None = None
        self._writer: csv.DictWriter | None = None
        self._flush_every = flush_every
        self._rows = 0

    def write(self, data: LoggingData) -> None:
        row = {key: to_python_scalar(value) for key, value in data.items()}
        if self._writer is None:
            appending = os.path.exists(self.path) and os.path.getsize(self.path) > 0
            fieldnames = list(row)
            if appending:  # Keep the columns an earlier writer (another actor) chose.
                with open(self.path, newline="") as existing:
                    fieldnames = next(csv.reader(existing))
            self._file = open(self.path, "a", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=fieldnames, extrasaction="ignore")
            if not appending:
                self._writer.writeheader()
        self._writer.writerow(row)
        self._rows += 1
        if self._rows % self._flush_every == 0:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file, self._writer = None, None
