"""Benchmarks: `python scripts/benchmark.py SUITE [--json OUT] [--repeats N] [--seeds S ...]
[--experiments PRESET ...] [--seconds S] [--quick]`.

Each suite prints a table and, with --json, writes its rows as a JSON list of
{suite, case, value, unit, bound, ratio}. Ratios compare figures measured in this one
invocation. Wall-clock figures on a shared machine are noisy: compare ratios, repeat.
The suites live in rl/benchmarks/; this script parses the command line and composes
experiments with Hydra (conf/), as scripts/train.py does.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __name__ == "__main__":  # Once, under jemalloc, before TensorFlow and JAX load (rl/allocator.py: why).
    from rl.allocator import reexec_with_jemalloc

    reexec_with_jemalloc()

from rl.benchmarks import SUITES, Settings, format_table, get_suite, write_json  # noqa: E402

CONF = os.path.join(ROOT, "conf")
TRAIN = os.path.join(ROOT, "scripts", "train.py")
_ABSENT = object()


def compose_config(overrides: Sequence[str]):
    """The composed config (Hydra's own node removed) and the group choices."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=list(overrides), return_hydra_config=True)
    choices = dict(config.hydra.runtime.choices)
    with open_dict(config):
        del config["hydra"]
    return config, choices


def compose_experiment(overrides: Sequence[str], run_dir: str):
    """An ExperimentConfig from overrides, through the same path as scripts/train.py."""
    from rl.experiments.make_experiment import make_experiment

    config, choices = compose_config(overrides)
    experiment, _ = make_experiment(config, run_dir, choices)
    return experiment


def has_key(key: str, overrides: Sequence[str]) -> bool:
    from omegaconf import OmegaConf

    config, _ = compose_config(overrides)
    return OmegaConf.select(config, key, default=_ABSENT) is not _ABSENT


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    suites = "\n".join(
        textwrap.fill(f"{name}: {description}", width=88, initial_indent="  ", subsequent_indent="      ")
        for name, (_, _, description) in SUITES.items()
    )
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"suites:\n{suites}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite", choices=list(SUITES), help="the suite to run (see below)")
    parser.add_argument("--json", metavar="OUT", help="write the rows to this JSON file")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per case; the value is their median")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="solve: the seeds to train")
    parser.add_argument(
        "--experiments", nargs="+", metavar="PRESET", help="actor, learner, solve, scaling: presets (conf/experiment)"
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one in-process measurement")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny budgets everywhere (checks that a suite runs; the figures mean little)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(argv)
    settings = Settings(
        repeats=args.repeats,
        seconds=min(args.seconds, 0.2) if args.quick else args.seconds,
        quick=args.quick,
        seeds=args.seeds,
        experiments=args.experiments,
        compose=compose_experiment,
        has_key=has_key,
        train_script=TRAIN,
    )
    rows = get_suite(args.suite)(settings)
    print(format_table(rows, settings.notes))
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
    # The results are out. TensorFlow's and reverb's threads (a dataset's sampler still
    # waiting) sometimes throw while the interpreter tears them down (abort, exit 134,
    # in about 1 in 7 `learner` runs): end here instead.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
