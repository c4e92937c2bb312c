"""Plots learning curves of runs and sweeps grouped by an override, and compares the groups with
rliable's aggregates.

    python scripts/plot.py multirun/2024-05-01/12-00-00 --out curves.png
    python scripts/plot.py SWEEP_DIR --out lr.png --hue agent.learning_rate
    python scripts/plot.py RUN_A RUN_B SWEEP_DIR --out cmp.png --hue agent --metric actor/episode_return
    python scripts/plot.py SWEEP_A SWEEP_B --aggregate figures/ [--score last_evals_mean] [--reps 50000]

Reads each run's logs/<label>.csv, .hydra/ and summary.json (a run copied without .hydra/ is
read from its logs and summary). A run that trained several seeds at once (launcher=anakin
launcher.num_seeds=K) counts as its K replicas, <run>/seed_<i>/. Runs are grouped by --hue (an
override or config key, a config group such as `agent`, or `dir`, the directory given; several
keys separated by commas); without it, by every override that differs between runs except the
seed, and by directory where two sweep directories would otherwise share a group.

--out FIG.png: each group's mean curve against actor steps, with a 95% bootstrap band when the
group has 3 runs or more, and a table of final values (mean, IQM, 95% bootstrap CIs).

--aggregate DIR: each run's score (--score, summary.json's final_eval_return by default)
normalised per environment (0: a random policy's return, 1: the solved return; the built-in
ranges, or --score-range [ENV=]LOW,HIGH), then per group rliable's IQM, mean and optimality gap
with 95% stratified-bootstrap intervals (DIR/aggregates.png), performance profiles
(DIR/profiles.png) and the probability that a run of one group outscores one of another
(DIR/improvement.png), with tables. Environments are the tasks: groups leave them out and must
cover the same ones.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # Files only: no display, no interactive backend.

from rl.analysis import (  # noqa: E402
    DEFAULT_METRIC,
    DEFAULT_REPS,
    SCORES,
    ScoreError,
    compare,
    default_keys,
    final_table,
    find_runs,
    format_comparison,
    format_table,
    group_runs,
    parse_score_range,
    plot_curves,
    save_figures,
    score_ranges,
    varying_keys,
)
from rl.analysis.runs import DIRECTORY_KEY, hue_keys  # noqa: E402

TASK_KEYS = ("environment",)  # What --aggregate compares groups across, never groups by.


def _score_range(text: str) -> tuple[str | None, float, float]:
    try:
        return parse_score_range(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Mean learning curves per group with 95% bootstrap bands and a final-value table "
        "(--out); rliable's aggregates, performance profiles and probabilities of improvement (--aggregate).",
    )
    parser.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="run or multirun directories")
    parser.add_argument("--out", metavar="FIG.png", help="write the learning curves here")
    parser.add_argument(
        "--aggregate", metavar="DIR", help="write aggregates.png, profiles.png and improvement.png here"
    )
    parser.add_argument(
        "--hue", default=None, help="override/config key(s) to group runs by, or dir (default: what varies)"
    )
    parser.add_argument(
        "--metric", default=DEFAULT_METRIC, help=f"<label>/<column> of logs/<label>.csv (default {DEFAULT_METRIC})"
    )
    parser.add_argument(
        "--score",
        default="final_eval_return",
        choices=SCORES,
        help="--aggregate's score per run, from summary.json (objective: the one each run's config named)",
    )
    parser.add_argument(
        "--score-range",
        action="append",
        default=[],
        type=_score_range,
        metavar="[ENV=]LOW,HIGH",
        help="returns normalised to 0 and 1 (a random policy's, a solved task's); without ENV= for every "
        "environment; repeatable",
    )
    parser.add_argument(
        "--reps", type=_positive, default=DEFAULT_REPS, help=f"bootstrap resamples (default {DEFAULT_REPS})"
    )
    parser.add_argument("--title", default=None, help="title of the curves' figure")
    args = parser.parse_args(argv)
    if not args.out and not args.aggregate:
        parser.error("give --out FIG.png (curves), --aggregate DIR (rliable's aggregates), or both")
    return args


def _check_hue(hue: str | None, runs: list) -> str | None:
    """An error line when a --hue key is on no run, else None."""
    varying = varying_keys(runs)
    for key in hue_keys(hue) or []:
        if key != DIRECTORY_KEY and all(run.setting(key) is None for run in runs):
            known = (
                ", ".join(varying)
                if varying
                else "none (try agent, environment or a config key such as agent.learning_rate)"
            )
            return f"--hue {key}: no run has this key; keys that vary between these runs: {known}"
    return None


def _curves(args: argparse.Namespace, runs: list) -> int:
    usable = []
    for run in runs:
        try:
            run.curve(args.metric)
        except (FileNotFoundError, KeyError) as error:
            print(f"plot.py: skipping {run.path}: {error}", file=sys.stderr)
            continue
        usable.append(run)
    if not usable:
        print(f"plot.py: no runs with {args.metric} under {', '.join(args.paths)}", file=sys.stderr)
        return 1
    hue = args.hue if args.hue is not None else ",".join(default_keys(usable)) or None
    groups = group_runs(usable, hue)
    figure = plot_curves(groups, args.metric, hue=hue, title=args.title, reps=args.reps)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    figure.savefig(args.out, bbox_inches="tight")  # Never cut a label, the legend or the title.
    print(format_table(final_table(groups, args.metric, args.reps), hue=hue, metric=args.metric))
    print(f"{len(usable)} runs in {len(groups)} groups; figure written to {args.out}")
    return 0


def _aggregates(args: argparse.Namespace, runs: list) -> int:
    hue = args.hue if args.hue is not None else ",".join(default_keys(runs, exclude=TASK_KEYS)) or None
    groups = group_runs(runs, hue)
    try:
        comparison = compare(groups, args.score, score_ranges(args.score_range), args.reps)
    except ScoreError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 2
    for note in comparison.scores.notes:
        print(f"plot.py: {note}", file=sys.stderr)
    paths = save_figures(comparison, args.aggregate)
    print(format_comparison(comparison, hue=hue))
    runs_used = sum(matrix.size for matrix in comparison.scores.matrices.values())
    print(f"{runs_used} runs in {len(groups)} groups; figures written to {', '.join(paths)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = find_runs(args.paths)
    except FileNotFoundError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 1
    if not runs:
        print(f"plot.py: no runs under {', '.join(args.paths)}", file=sys.stderr)
        return 1
    problem = _check_hue(args.hue, runs)
    if problem:
        print(f"plot.py: {problem}", file=sys.stderr)
        return 2
    status = _curves(args, runs) if args.out else 0
    if args.aggregate and status == 0:
        if args.out:
            print()
        status = _aggregates(args, runs)
    return status


if __name__ == "__main__":
    sys.exit(main())
