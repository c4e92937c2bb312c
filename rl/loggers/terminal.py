"""Prints records on one line each, through rich's shared console.

Sharing rich's console with the progress bar keeps the bar pinned below the log lines.
"""

from __future__ import annotations

import rich

from rl.loggers.base import Logger, LoggingData, to_python_scalar


def _format(value: object) -> str:
    value = to_python_scalar(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class TerminalLogger(Logger):
    def __init__(self, label: str):
        self._label = label

    def write(self, data: LoggingData) -> None:
        fields = " | ".join(f"{key} = {_format(value)}" for key, value in sorted(data.items()))
        rich.get_console().print(f"[bold]\\[{self._label}][/bold] {fields}", highlight=False, markup=True)
