"""Plots learning curves of runs and sweeps grouped by an override (--out) and compares the groups with rliable
(--aggregate): `python scripts/plot.py SWEEP_DIR --out lr.png --aggregate figures/ [--hue agent.learning_rate]`.
Every option: --help; what each figure and table shows: docs/plots.md."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # Files only: no display, no interactive backend.

from rl import analysis  # noqa: E402
from rl.analysis import aggregates, population  # noqa: E402


def score_range(text: str) -> tuple[str, tuple[float, float]]:
    """`ENV=LOW,HIGH` -> (ENV, (LOW, HIGH)), LOW below HIGH; ValueError (argparse's one line) otherwise."""
    task, _, numbers = text.partition("=")
    low, high = (float(number) for number in numbers.split(","))
    if not low < high:
        raise ValueError(text)
    return task, (low, high)


BESIDE_OUT = ""  # --aggregate given without a DIR: the figures go where --out's does.


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="plot.py", description="Learning curves and rliable's aggregates per group.")
    parser.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="run or multirun directories")
    parser.add_argument("--out", metavar="FIG.png", help="write the learning curves here")
    parser.add_argument(
        "--aggregate",
        metavar="DIR",
        nargs="?",
        const=BESIDE_OUT,
        help="write rliable's figures here (no DIR: beside --out's figure)",
    )
    parser.add_argument("--hue", help="keys to group runs by, comma-separated, or dir (default: what varies)")
    parser.add_argument("--metric", default=analysis.DEFAULT_METRIC, help="<label>/<column> of logs/<label>.csv")
    parser.add_argument("--score", default="final_eval_return", choices=analysis.SCORES, help="--aggregate's score")
    parser.add_argument(
        "--score-range", action="append", default=[], type=score_range, help="ENV=LOW,HIGH: the returns scored 0 and 1"
    )
    parser.add_argument(
        "--reps", type=int, default=aggregates.DEFAULT_REPS, help="bootstrap resamples (default %(default)s)"
    )
    parser.add_argument("--title", help="title of the curves' figure")
    args = parser.parse_args(argv)
    if args.aggregate == BESIDE_OUT:
        if not args.out:
            parser.error("--aggregate without a DIR writes beside --out's figure: give --out FIG.png, or a DIR")
        args.aggregate = os.path.dirname(os.path.abspath(args.out))
    if not args.out and not args.aggregate:
        parser.error("give --out FIG.png (curves), --aggregate DIR (rliable's aggregates), or both")
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    return args


def save(figure: Any, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, bbox_inches="tight")  # Never cut a label, the legend or the title.


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = analysis.find_runs(args.paths)
    except FileNotFoundError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 1
    if args.out:
        usable = []
        for run in runs:
            try:
                run.curve(args.metric)
            except (FileNotFoundError, KeyError) as error:
                print(f"plot.py: skipping {run.path}: {error}", file=sys.stderr)
                continue
            usable.append(run)
        runs = usable
    if not runs:
        print(f"plot.py: no runs under {', '.join(args.paths)}", file=sys.stderr)
        return 1
    varying = analysis.varying_keys(runs)
    for key in (args.hue or "").split(","):
        if key.strip() not in ("", "dir") and all(run.setting(key.strip()) is None for run in runs):
            known = ", ".join(varying) or "none (try agent, environment or a config key such as agent.learning_rate)"
            print(f"plot.py: --hue {key}: no run has this key; keys that vary: {known}", file=sys.stderr)
            return 2
    members = None if args.hue else population.read_population(runs)  # One PBT population: every member drawn.
    if args.out and members:
        figure = population.plot_population(members, args.metric, args.title)
        save(figure, args.out)
        print(population.format_population(members, args.metric))
        print(f"{len(members)} members of one population; figure written to {args.out}")
    elif args.out:
        hue = args.hue or ",".join(varying) or None
        groups = analysis.group_runs(runs, hue)
        save(analysis.plot_curves(groups, args.metric, hue, args.title, args.reps), args.out)
        print(analysis.format_table(analysis.final_table(groups, args.metric, args.reps), hue, args.metric))
        print(f"{len(runs)} runs in {len(groups)} groups; figure written to {args.out}")
    if args.aggregate:
        hue = args.hue or ",".join(analysis.varying_keys(runs, exclude=("environment",))) or None
        groups = analysis.group_runs(runs, hue)  # Environments are rliable's tasks, never groups.
        ranges = aggregates.SCORE_RANGES | dict(args.score_range)  # --score-range adds or replaces environments.
        try:
            comparison = aggregates.compare(groups, args.score, ranges, args.reps)
        except aggregates.ScoreError as error:
            print(f"plot.py: {error}", file=sys.stderr)
            return 2
        for note in comparison.notes:
            print(f"plot.py: {note}", file=sys.stderr)
        paths = aggregates.save_figures(comparison, args.aggregate)
        print(("\n" if args.out else "") + aggregates.format_comparison(comparison, hue))
        used = sum(matrix.size for matrix in comparison.scores.values())
        print(f"{used} runs in {len(groups)} groups; figures written to {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
