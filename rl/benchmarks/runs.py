"""`solve`, `scaling` and `startup`: whole training runs of scripts/train.py, read from
summary.json or timed from outside.

Each run is a fresh process, exactly as a researcher starts one, in a temporary run
directory; W&B is disabled and the progress bar off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

from rl.benchmarks.common import Row, Settings, median, progress, ratio

SOLVE_EXPERIMENTS = ("dqn_cartpole",)
SCALING_EXPERIMENTS = ("dqn_cartpole",)
SCALING_ACTORS = (1, 2, 4)
SCALING_STEPS = 10_000
STARTUP_EXPERIMENTS = ("dqn_cartpole",)
# A run that is nearly all start-up: imports, building, compiling, one short evaluation.
STARTUP_RUN = ["max_actor_steps=500", "eval_every=500", "eval_episodes=1", "checkpoint=false", "logger=csv"]
# Smoke-test budgets (--quick): enough for a couple of evaluations, not for learning.
QUICK = ["max_actor_steps=1000", "eval_every=500", "eval_episodes=1"]
# Applied only where the experiment's config has the key (on-policy agents keep no replay).
QUICK_WHERE_PRESENT = ["agent.min_replay_size=200"]
# summary.json key, unit, whether it is compared with the threshold.
SOLVE_METRICS = (
    ("time_to_threshold_s", "s"),
    ("steps_to_threshold", "actor steps"),
    ("wall_time_s", "s"),
    ("final_eval_return", "return"),
)


class RunFailed(RuntimeError):
    pass


def train(
    train_script: str, overrides: Sequence[str], timeout_s: float | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Runs scripts/train.py with `overrides` (and `env` added to the environment) in a
    temporary run directory; its summary."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [
            sys.executable,
            train_script,
            *overrides,
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ]
        environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
        progress(f"running {' '.join(overrides)}")
        result = subprocess.run(
            command,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(train_script))),
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        if result.returncode != 0:
            raise RunFailed(f"{' '.join(overrides)} exited with {result.returncode}:\n{result.stderr[-3000:]}")
        with open(os.path.join(run_dir, "summary.json")) as file:
            return json.load(file)


def _present(overrides: Sequence[str], experiment: str, settings: Settings) -> list[str]:
    """Those of `overrides` whose key the experiment's config has."""
    return [o for o in overrides if settings.has_key(o.split("=")[0], [f"experiment={experiment}"])]


def suite_solve(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    for name in settings.experiments or SOLVE_EXPERIMENTS:
        summaries = []
        quick: list[str] = []
        if settings.quick:
            quick = [*QUICK, *_present(QUICK_WHERE_PRESENT, name, settings)]
        for seed in settings.seeds:
            overrides = [f"experiment={name}", f"seed={seed}", "logger=csv", *quick]
            summary = train(settings.train_script, overrides)
            summaries.append(summary)
            threshold = summary.get("threshold")
            for key, unit in SOLVE_METRICS:
                bound = threshold if key == "final_eval_return" else None
                rows.append(Row("solve", f"{name} seed={seed} {key}", summary.get(key), unit, bound))
            progress(
                f"solve {name} seed={seed}: threshold {threshold} reached after {summary.get('time_to_threshold_s')} s "
                f"/ {summary.get('steps_to_threshold')} steps; run {summary['wall_time_s']} s; "
                f"final return {summary['final_eval_return']}"
            )
        if summaries[0].get("threshold") is None:
            settings.note(f"solve: {name} names no threshold; time and steps to threshold are empty")
        for key, unit in SOLVE_METRICS:
            values = [summary.get(key) for summary in summaries]
            if key == "final_eval_return":  # A lower return is the worse one: None is not +inf here.
                value = median([v for v in values if v is not None])
            else:
                value = median(values)
            bound = summaries[0].get("threshold") if key == "final_eval_return" else None
            rows.append(Row("solve", f"{name} median {key}", value, unit, bound))
    return rows


def suite_scaling(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    steps = 1_000 if settings.quick else SCALING_STEPS
    for name in settings.experiments or SCALING_EXPERIMENTS:
        reference = None
        for actors in SCALING_ACTORS:
            rates = []
            for _ in range(settings.repeats):
                summary = train(
                    settings.train_script,
                    [
                        f"experiment={name}",
                        "launcher=ray",
                        f"launcher.num_actors={actors}",
                        f"max_actor_steps={steps}",
                        f"eval_every={steps}",
                        "eval_episodes=1",
                        "checkpoint=false",
                        "logger=csv",
                        *(["agent.min_replay_size=200"] if settings.quick else []),
                    ],
                )
                rates.append(summary.get("actor_steps_per_second"))
            value = median(rates)
            reference = value if reference is None else reference
            case = f"{name} launcher=ray num_actors={actors}"
            rows.append(Row("scaling", case, value, "steps/s", ratio=ratio(value, reference) if actors > 1 else None))
            progress(f"scaling {case}: {value} actor steps/s")
    return rows


def suite_startup(settings: Settings) -> list[Row]:
    """Seconds of a whole 500-step process (start-up dominates it) with reverb loading only
    the TensorFlow modules it uses (rl/lazy_tensorflow.py), against the same run with
    TensorFlow's full import (`RL_LAZY_TENSORFLOW=0`), alternating; ratio = lazy / full."""
    rows: list[Row] = []
    for name in settings.experiments or STARTUP_EXPERIMENTS:
        overrides = [f"experiment={name}", *STARTUP_RUN, *_present(QUICK_WHERE_PRESENT, name, settings)]
        seconds: dict[str, list[float]] = {"1": [], "0": []}
        for _ in range(settings.repeats):
            for mode in seconds:
                start = time.perf_counter()
                train(settings.train_script, overrides, env={"RL_LAZY_TENSORFLOW": mode})
                seconds[mode].append(time.perf_counter() - start)
        lazy, full = median(seconds["1"]), median(seconds["0"])
        rows.append(Row("startup", f"{name} 500-step process, TensorFlow's full import", full, "s"))
        rows.append(
            Row(
                "startup",
                f"{name} 500-step process, reverb's TensorFlow modules only",
                lazy,
                "s",
                bound=full,
                ratio=ratio(lazy, full),
            )
        )
        progress(f"startup {name}: {lazy:.2f} s against {full:.2f} s with TensorFlow's full import")
    return rows
