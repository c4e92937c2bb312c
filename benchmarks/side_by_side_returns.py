"""Our runs beside Stable-Baselines3's at one budget: each seed's evaluation return at `--steps` actor steps
and rliable's IQM and mean over seeds, as a markdown table (docs/mujoco.md was made with it).

    python -m benchmarks.side_by_side_returns --steps 100000 --ours RUN_DIR ... --sb3 SB3_JSON ...

A run directory is ours (`logs/evaluator.csv`); a JSON file is `../shared/peers/sb3_bench.py --out`'s. Both
evaluate 10 episodes with the deterministic policy at every `eval_every` / `--eval-freq` steps."""

from __future__ import annotations

import argparse
import csv
import json
import os
from typing import Sequence

from rl.analysis.aggregates import summarize


def our_return(run_directory: str, steps: int) -> tuple[int, float]:
    """(seed, the evaluation return at `steps` actor steps) of one of our runs."""
    with open(os.path.join(run_directory, "summary.json")) as file:
        seed = int(json.load(file)["seed"])
    with open(os.path.join(run_directory, "logs", "evaluator.csv")) as file:
        rows = [row for row in csv.DictReader(file) if int(row["actor_steps"]) == steps]
    if not rows:
        raise ValueError(f"{run_directory}: no evaluation at {steps} actor steps")
    return seed, float(rows[-1]["episode_return"])


def sb3_return(path: str, steps: int) -> tuple[int, float]:
    """(seed, the evaluation return at `steps` timesteps) of one sb3_bench.py run (its callback's, not the
    second evaluation it makes after training)."""
    with open(path) as file:
        data = json.load(file)
    points = [point for point in data["evals"] if int(point["steps"]) == steps]
    if not points:
        raise ValueError(f"{path}: no evaluation at {steps} steps")
    return int(data["result"]["seed"]), float(points[-1]["mean"])


def table(columns: dict[str, list[tuple[int, float]]]) -> list[str]:
    """Markdown lines: one row per implementation, its per-seed returns (seed order), IQM and mean with 95% CIs."""
    lines = ["| implementation | seeds | per seed | IQM [95% CI] | mean [95% CI] |", "| --- | --- | --- | --- | --- |"]
    for name, results in columns.items():
        results = sorted(results)
        stats = summarize([value for _, value in results])
        seeds = ", ".join(str(seed) for seed, _ in results)
        values = ", ".join(f"{value:.1f}" for _, value in results)
        iqm = f"{stats['iqm']:.1f} [{stats['iqm_low']:.1f}, {stats['iqm_high']:.1f}]"
        mean = f"{stats['mean']:.1f} [{stats['mean_low']:.1f}, {stats['mean_high']:.1f}]"
        lines.append(f"| {name} | {seeds} | {values} | {iqm} | {mean} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--ours", nargs="+", required=True, help="our run directories")
    parser.add_argument("--sb3", nargs="+", required=True, help="sb3_bench.py --out files")
    args = parser.parse_args(argv)
    columns = {
        "ours": [our_return(path, args.steps) for path in args.ours],
        "Stable-Baselines3": [sb3_return(path, args.steps) for path in args.sb3],
    }
    print("\n".join(table(columns)))


if __name__ == "__main__":
    main()
