"""Plots learning curves of runs and sweeps, grouped by an override, and prints final returns.

    python scripts/plot.py multirun/2024-05-01/12-00-00 --out curves.png
    python scripts/plot.py SWEEP_DIR --out lr.png --hue agent.learning_rate
    python scripts/plot.py RUN_A RUN_B SWEEP_DIR --out cmp.png --hue agent --metric actor/episode_return

Reads each run's logs/<label>.csv, .hydra/overrides.yaml and summary.json (a run copied
without .hydra/ is read from its logs and summary). A run that trained several seeds at
once (launcher=anakin launcher.num_seeds=K) counts as its K replicas, <run>/seed_<i>/,
each with the run's settings and its own seed. Runs are grouped by the value of
--hue (an override or config key, or a config group such as `agent`; several keys
separated by commas); without it, by every override that differs between runs except
the seed. A --hue key that no run has is an error that lists the keys that vary. Each
group is drawn as its mean curve over runs against actor steps, with a 95% bootstrap
band of the mean when the group has 3 runs or more (thin lines for its runs otherwise);
the legend sits outside the axes and numbers in labels have 3 significant figures. A
table of final values (mean, interquartile mean, 95% bootstrap CIs) is printed.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # Files only: no display, no interactive backend.

from rl.analysis import DEFAULT_METRIC, find_runs, final_table, format_table, group_runs, plot_curves, varying_keys  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="plot.py",
        description="Mean learning curves with 95% bootstrap bands per group, and a final-return table.",
    )
    parser.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR", help="run or multirun directories")
    parser.add_argument("--out", required=True, metavar="FIG.png", help="where to write the figure")
    parser.add_argument("--hue", default=None, help="override/config key to group runs by (default: what varies)")
    parser.add_argument(
        "--metric", default=DEFAULT_METRIC, help=f"<label>/<column> of logs/<label>.csv (default {DEFAULT_METRIC})"
    )
    parser.add_argument("--title", default=None, help="figure title")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs = find_runs(args.paths)
    except FileNotFoundError as error:
        print(f"plot.py: {error}", file=sys.stderr)
        return 1
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
    hue = args.hue
    varying = varying_keys(usable)
    if hue is None:
        hue = ",".join(varying) if varying else None
    else:
        for key in (key.strip() for key in hue.split(",")):
            if key and all(run.setting(key) is None for run in usable):
                print(
                    f"plot.py: --hue {key}: no run has this key; keys that vary between these runs: "
                    f"{', '.join(varying) if varying else 'none (try agent, environment or a config key such as agent.learning_rate)'}",
                    file=sys.stderr,
                )
                return 2
    groups = group_runs(usable, hue)
    figure = plot_curves(groups, args.metric, hue=hue, title=args.title)
    directory = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(directory, exist_ok=True)
    figure.savefig(args.out, bbox_inches="tight")  # Never cut a label, the legend or the title.
    print(format_table(final_table(groups, args.metric), hue=hue, metric=args.metric))
    print(f"{len(usable)} runs in {len(groups)} groups; figure written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
