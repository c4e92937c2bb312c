"""What the suites share: their names, rows, timing, the table, training processes."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterator, Sequence

# name -> the module (benchmarks.<module>) whose suite_<name> runs it; its docstring is the --help line. Modules
# load what they measure (JAX, reverb, Ray) lazily, so listing the suites is cheap.
SUITES = dict.fromkeys(("actor", "learner"), "in_process")
SUITES |= dict.fromkeys(("startup", "scaling", "anakin", "grid", "pruning", "pbt"), "runs")
SUITES |= {"accelerator": "accelerator", "sebulba": "sebulba", "sebulba_cpu": "sebulba", "checkpoint": "checkpoints"}
SUITES |= {"playground": "playground", "host_copies": "host_copies", "mujoco_peers": "mujoco_peers"}
ROW_KEYS = ("suite", "case", "value", "unit", "bound", "ratio")
# Smoke-test budgets (--quick) of whole runs, and those applied only where the config has the key.
QUICK = ["max_actor_steps=1000", "eval_every=500", "eval_episodes=1"]
QUICK_WHERE_PRESENT = ["agent.min_replay_size=200"]
# Every run's plumbing: nothing to resume, CSV logs (which scripts/plot.py reads); no W&B (run_logged).
RUN_OVERRIDES = ("logger=csv", "checkpoint=false", "progress=false")


def get_suite(name: str) -> Callable[[Settings], list[Row]]:
    return getattr(importlib.import_module(f"benchmarks.{SUITES[name]}"), f"suite_{name}")


@dataclasses.dataclass
class Row:
    """One figure; `bound` limits it and `ratio` compares it, both measured in the same invocation."""

    suite: str
    case: str
    value: float | None
    unit: str
    bound: float | None = None
    ratio: float | None = None

    def as_json(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)  # In ROW_KEYS' order.
        for key in ("value", "bound", "ratio"):
            row[key] = None if row[key] is None or not math.isfinite(row[key]) else round(float(row[key]), 4)
        return row


@dataclasses.dataclass
class Settings:
    """How long and often to measure and what; `compose` and `has_key` come from the script (Hydra stays there)."""

    repeats: int = 3
    seconds: float = 2.0
    quick: bool = False
    experiments: Sequence[str] | None = None
    compose: Callable[[Sequence[str], str], Any] | None = None
    has_key: Callable[[str, Sequence[str]], bool] | None = None
    train_script: str | None = None
    cases: Sequence[str] | None = None  # accelerator: which cases (None: all).
    widths: Sequence[int] | None = None  # accelerator: seed counts (None: each case's own).
    peers: Any = None  # mujoco_peers: its options (benchmarks.mujoco_peers.PeerOptions; None: the defaults).
    notes: list[str] = dataclasses.field(default_factory=list)

    def note(self, message: str) -> None:
        """A line printed under the table (a skipped case, say)."""
        self.notes.append(message)
        progress(message)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stdout holds only the table.


def measure_rate(step: Callable[[], float], seconds: float, finish: Callable[[], Any] | None = None) -> float:
    """Units/s of `step` (which returns the units it did) over about `seconds`; `finish` waits inside the span."""
    start = time.perf_counter()
    count = step()
    while time.perf_counter() < start + seconds:
        count += step()
    if finish is not None:
        finish()
    return count / (time.perf_counter() - start)


def in_turns(repeats: int, *rates: Callable[[], float]) -> list[float | None]:
    """The median of each of `rates` over `repeats` rounds taking them in turn (so load hits them alike)."""
    rounds = [[rate() for rate in rates] for _ in range(repeats)]
    return [median(column) for column in zip(*rounds)]


def median(values: Sequence[float | None]) -> float | None:
    """None counts as infinitely large (never happened); None if the median is such a value or nothing."""
    result = statistics.median([math.inf if v is None else float(v) for v in values]) if values else math.inf
    return None if math.isinf(result) else result


def ratio(value: float | None, reference: float | None) -> float | None:
    return None if value is None or not reference else value / reference


def format_table(rows: Sequence[Row], notes: Sequence[str] = ()) -> str:
    number = lambda value: "-" if value is None else f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    cells = [ROW_KEYS] + [
        (r.suite, r.case, number(r.value), r.unit, number(r.bound), "-" if r.ratio is None else f"{r.ratio:.2f}")
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(ROW_KEYS))]
    lines = [
        "  ".join(cell.rjust(widths[i]) if i in (2, 4, 5) else cell.ljust(widths[i]) for i, cell in enumerate(row))
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [f"note: {note}" for note in notes])


def write_json(path: str, rows: Sequence[Row]) -> None:
    with open(path, "w") as file:
        json.dump([row.as_json() for row in rows], file, indent=1)
        file.write("\n")


class RunFailed(RuntimeError):
    pass


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[str]:
    """A temporary directory for a run, a sweep or a cache, removed when the block ends; kept when the block
    raises, since the error names the logs in it."""
    directory = tempfile.mkdtemp(prefix=prefix)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run_logged(command: Sequence[str], log_dir: str, env: dict[str, str] | None = None) -> float:
    """Seconds `command` ran from the project root (`env` added), its output in `log_dir`/benchmark.log."""
    os.makedirs(log_dir, exist_ok=True)
    log_path = os.path.join(log_dir, "benchmark.log")
    environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    start = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run(list(command), cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        with open(log_path, errors="replace") as file:
            lines = [line.strip() for line in file if line.strip()]
        tail = f": {lines[-1]}"[:300] if lines else ""
        raise RunFailed(f"exited with status {result.returncode} (output: {log_path}){tail}")
    return time.perf_counter() - start


def train(command: Sequence[str], run_dir: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs scripts/train.py (`command`) into `run_dir`, emptied first (a run there would be resumed)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "benchmark.json"), "w") as file:
        json.dump({"command": list(command[1:])}, file, indent=1)  # Not the interpreter: a venv may move.
    run_logged(command, run_dir, env)
    try:
        with open(os.path.join(run_dir, "summary.json")) as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        raise RunFailed(f"left no readable summary.json ({error}; output: {run_dir}/benchmark.log)") from None
