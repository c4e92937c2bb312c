"""What every suite shares: result rows, settings, a timing loop, the table and JSON."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import time
from typing import Any, Callable, Sequence

# Keys of a JSON row, in order.
ROW_KEYS = ("suite", "case", "value", "unit", "bound", "ratio")


@dataclasses.dataclass
class Row:
    """One measured figure. `bound` is what limits it (measured in the same invocation)
    and `ratio` the value relative to it or to the case it is compared with."""

    suite: str
    case: str
    value: float | None
    unit: str
    bound: float | None = None
    ratio: float | None = None

    def as_json(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:
            if x is None or (isinstance(x, float) and not math.isfinite(x)):
                return None
            return round(float(x), 4)

        return {
            "suite": self.suite,
            "case": self.case,
            "value": clean(self.value),
            "unit": self.unit,
            "bound": clean(self.bound),
            "ratio": clean(self.ratio),
        }


@dataclasses.dataclass
class Settings:
    """How long and how often to measure, and what to run.

    `seconds` is the length of one in-process measurement; `repeats` how many
    measurements a case takes (the value is their median). `quick` shrinks every budget
    (a smoke test of the suite, not a measurement). `compose(overrides, run_dir)` makes
    an `ExperimentConfig` from Hydra overrides and `has_key(key, overrides)` says whether
    the composed config has a key; the command line provides both, since Hydra's global
    state stays out of `rl/`. `train_script` is scripts/train.py for the suites that run
    whole trainings.
    """

    repeats: int = 3
    seconds: float = 2.0
    quick: bool = False
    seeds: Sequence[int] = (0, 1, 2)
    experiments: Sequence[str] | None = None
    compose: Callable[[Sequence[str], str], Any] | None = None
    has_key: Callable[[str, Sequence[str]], bool] | None = None
    train_script: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds}")

    def note(self, message: str) -> None:
        """A line printed under the table (a skipped case, say)."""
        self.notes.append(message)
        progress(message)


def progress(message: str) -> None:
    """Progress on stderr, so stdout holds only the table."""
    print(message, file=sys.stderr, flush=True)


def measure_rate(step: Callable[[], float], seconds: float, finish: Callable[[], Any] | None = None) -> float:
    """Calls `step` (which returns how many units it did) for about `seconds`; returns
    units per second. `finish` runs inside the timed span (to wait for asynchronous work,
    e.g. JAX's dispatch)."""
    count = 0.0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        count += step()
        if time.perf_counter() >= deadline:
            break
    if finish is not None:
        finish()
    return count / (time.perf_counter() - start)


def median(values: Sequence[float | None]) -> float | None:
    """The median, where None (never happened) counts as infinitely large; None if the
    median itself is such a value or there is nothing."""
    if not values:
        return None
    result = statistics.median([math.inf if v is None else float(v) for v in values])
    return None if math.isinf(result) else result


def ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


def _format(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_table(rows: Sequence[Row], notes: Sequence[str] = ()) -> str:
    header = ("suite", "case", "value", "unit", "bound", "ratio")
    cells = [header] + [
        (r.suite, r.case, _format(r.value), r.unit, _format(r.bound), "-" if r.ratio is None else f"{r.ratio:.2f}")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    right = {2, 4, 5}
    lines = []
    for k, row in enumerate(cells):
        lines.append(
            "  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i]) for i, cell in enumerate(row))
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.extend(f"note: {note}" for note in notes)
    return "\n".join(lines)


def write_json(path: str, rows: Sequence[Row]) -> None:
    with open(path, "w") as file:
        json.dump([row.as_json() for row in rows], file, indent=1)
        file.write("\n")
