"""Benchmarks: `python scripts/benchmark.py SUITE [--json OUT] [--repeats N]
[--experiments PRESET ...] [--seconds S] [--quick]`, and
`python scripts/benchmark.py baselines [--presets PRESET ...] [--seeds N] [--out MD]
[--runs-dir DIR] [--jobs J] [--overrides KEY=VALUE ...] [--reuse] [--render] [--from-runs RUN_DIR ...]`.

Each suite prints a table and, with --json, writes its rows as a JSON list of
{suite, case, value, unit, bound, ratio}. Ratios compare figures measured in this one
invocation. Wall-clock figures on a shared machine are noisy: compare ratios, repeat.
`baselines` also stores its presets' results in a data file (docs/baselines.json), keeping
the presets it did not run, and renders from it a markdown file (docs/baselines.md) and its figure;
`--from-runs` adds rows from finished runs made elsewhere (several seeds in one program on a lent chip).
The suites live in benchmarks/; this script parses the command line and composes
experiments with Hydra (conf/), as scripts/train.py does.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from typing import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __name__ == "__main__":  # Once, under jemalloc, before TensorFlow and JAX load (rl/allocator.py: why).
    from rl.allocator import reexec_with_jemalloc

    reexec_with_jemalloc()

from benchmarks import baselines, mujoco_peers  # noqa: E402
from benchmarks.common import SUITES, Settings, format_table, get_suite, write_json  # noqa: E402

# Suites this script runs itself, beside benchmarks' SUITES: name -> --help line.
OWN_SUITES = {"baselines": baselines.suite_baselines.__doc__}

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
    """An Experiment from overrides, through the same path as scripts/train.py."""
    from rl.experiments.make_experiment import make_experiment

    config, choices = compose_config(overrides)
    experiment, _ = make_experiment(config, run_dir, choices)
    return experiment


def has_key(key: str, overrides: Sequence[str]) -> bool:
    from omegaconf import OmegaConf

    config, _ = compose_config(overrides)
    return OmegaConf.select(config, key, default=_ABSENT) is not _ABSENT


def describe_preset(preset: str, overrides: Sequence[str]) -> dict:
    """What `baselines` reports about a preset, from its composed config: its environment
    label, budget (max_actor_steps) and threshold with `overrides` applied, and which of
    `overrides` its config has (`overrides`; Hydra's own, `+`/`~` ones and group choices
    count as present) and which it lacks (`skipped`: agent.min_replay_size of an
    on-policy agent, say), and the whole composed config (`config`, unresolved, as a
    run's .hydra/config.yaml holds it)."""
    from omegaconf import OmegaConf

    base, _ = compose_config([f"experiment={preset}"])
    applied, skipped = [], []
    for override in overrides:
        key = override.split("=", 1)[0]
        present = key.startswith(("+", "~", "hydra.")) or OmegaConf.select(base, key, default=_ABSENT) is not _ABSENT
        (applied if present else skipped).append(override)
    config, choices = compose_config([f"experiment={preset}", *baselines.RUN_OVERRIDES, *applied])
    environment = config.get("environment") or {}
    name = environment.get("name") or environment.get("task")
    threshold = config.get("threshold")
    return {
        "environment": baselines.environment_label(None if name is None else str(name), choices.get("environment")),
        "budget": int(config.max_actor_steps),
        "threshold": None if threshold is None else float(threshold),
        "launcher": choices.get("launcher"),
        "overrides": applied,
        "skipped": skipped,
        "config": OmegaConf.to_container(config, resolve=False),
    }


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    described = {name: get_suite(name).__doc__ for name in SUITES} | OWN_SUITES
    suites = "\n".join(
        textwrap.fill(
            f"{name}: {' '.join(description.split())}", width=88, initial_indent="  ", subsequent_indent="      "
        )
        for name, description in described.items()
    )
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog=f"suites:\n{suites}\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("suite", choices=list(described), help="the suite to run (see below)")
    parser.add_argument("--json", metavar="OUT", help="write the rows to this JSON file")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per case; the value is their median")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help=f"baselines: N, to train seeds 0..N-1 (default {baselines.DEFAULT_NUM_SEEDS}); mujoco_peers: the same "
        f"(default {len(mujoco_peers.PeerOptions.seeds)})",
    )
    parser.add_argument(
        "--experiments",
        "--presets",
        dest="experiments",
        nargs="+",
        metavar="PRESET",
        help="actor, learner, scaling, startup, baselines: presets (conf/experiment)",
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one in-process measurement")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny budgets everywhere (checks that a suite runs; the figures mean little)",
    )
    accelerator = parser.add_argument_group("accelerator")
    accelerator.add_argument(
        "--cases", nargs="+", choices=("rejax", "width", "minatar", "cache"), help="the cases to run"
    )
    accelerator.add_argument(
        "--widths",
        type=int,
        nargs="+",
        metavar="SEEDS",
        help="seed counts for every case (accelerator, anakin); environment copies (playground)",
    )
    own = parser.add_argument_group("baselines")
    own.add_argument(
        "--out",
        metavar="MD",
        help=f"the markdown file to write (default {baselines.DEFAULT_OUT}); the figure goes beside it (<name>.png)",
    )
    own.add_argument(
        "--runs-dir",
        metavar="DIR",
        help=f"run directories go to DIR/<preset>/seed_<s> (default {baselines.DEFAULT_RUNS_DIR}); each is "
        "emptied before its run",
    )
    own.add_argument("--jobs", type=int, help=f"training processes at a time (default {baselines.DEFAULT_JOBS})")
    own.add_argument(
        "--overrides",
        nargs="+",
        metavar="KEY=VALUE",
        help="scripts/train.py overrides for every run (max_actor_steps=2000 ...); one whose key a preset's "
        "config lacks is left out of that preset's runs (and noted), one no preset has is an error",
    )
    own.add_argument(
        "--reuse",
        action="store_true",
        help="keep a run directory's finished run made by the same command line instead of training it again "
        "(to finish an interrupted benchmark)",
    )
    own.add_argument(
        "--from-runs",
        nargs="+",
        metavar="RUN_DIR",
        help="train nothing: store each finished run (its seeds: launcher.num_seeds) as its row, named "
        "'<preset> on <environment.name>' where its command names the task, and rewrite --out",
    )
    own.add_argument(
        "--render",
        action="store_true",
        help="train nothing: rewrite --out and its figure from the data file beside it (<name>.json), after "
        "editing benchmarks/baselines.yaml",
    )
    mujoco_peers.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.seconds <= 0:
        parser.error("--repeats must be >= 1 and --seconds > 0")
    own_options = {"--out": args.out, "--runs-dir": args.runs_dir, "--jobs": args.jobs, "--overrides": args.overrides}
    own_options["--seeds"] = None if args.suite == "mujoco_peers" else args.seeds  # Only these two train seeds.
    if args.suite != "mujoco_peers" and mujoco_peers.given_options(args):
        parser.error(f"{', '.join(mujoco_peers.given_options(args))}: only for the mujoco_peers suite")
    if args.suite == "mujoco_peers":
        try:
            args.peer_options = mujoco_peers.options_from(args)
        except ValueError as error:
            parser.error(f"mujoco_peers: {error}")
    if args.suite != "accelerator" and args.cases:
        parser.error("--cases: only for the accelerator suite")
    if args.suite not in ("accelerator", "anakin", "playground") and args.widths:
        parser.error("--widths: only for the accelerator, anakin and playground suites")
    if args.suite != "baselines":
        given = [option for option, value in own_options.items() if value is not None]
        given += [option for option, on in (("--reuse", args.reuse), ("--render", args.render)) if on]
        given += ["--from-runs"] if args.from_runs else []
        if given:
            parser.error(f"{', '.join(given)}: only for the baselines suite")
    elif args.render:
        given = [option for option, value in own_options.items() if value is not None and option != "--out"]
        given += [option for option, on in (("--reuse", args.reuse), ("--quick", args.quick)) if on]
        given += ["--presets"] if args.experiments else []
        given += ["--from-runs"] if args.from_runs else []
        if given:
            parser.error(f"baselines --render trains nothing: {', '.join(given)} not allowed with it")
    elif args.from_runs:
        given = [option for option, value in own_options.items() if value is not None and option != "--out"]
        given += [option for option, on in (("--reuse", args.reuse), ("--quick", args.quick)) if on]
        given += ["--presets"] if args.experiments else []
        if given:
            parser.error(f"baselines --from-runs trains nothing: {', '.join(given)} not allowed with it")
    elif args.seeds is not None and (len(args.seeds) != 1 or args.seeds[0] < 1):
        parser.error("baselines: --seeds takes one number N >= 1 (it trains seeds 0..N-1)")
    elif args.jobs is not None and args.jobs < 1:
        parser.error("baselines: --jobs must be >= 1")
    return args


def run_baselines(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The baselines suite; exit status 1 when a run failed (the report still lists it)."""
    if args.render:
        out = args.out or os.path.join(ROOT, baselines.DEFAULT_OUT)
        try:
            baselines.render_report(out)
        except (OSError, ValueError, KeyError) as error:
            print(f"baselines --render: {error!r}", file=sys.stderr)
            return 2
        print(f"baselines: rewrote {out} and its figure from {baselines.data_path(out)}")
        return 0
    if args.from_runs:
        out = args.out or os.path.join(ROOT, baselines.DEFAULT_OUT)
        command = shlex.join(["python", "scripts/benchmark.py", *argv])
        try:
            results = baselines.import_runs(args.from_runs, out, command)
        except (OSError, ValueError, KeyError) as error:
            print(f"baselines --from-runs: {error}", file=sys.stderr)
            return 2
        print(f"baselines: stored {', '.join(result.preset for result in results)} in {baselines.data_path(out)}")
        return 0
    options = baselines.BaselinesOptions(
        train_script=TRAIN,
        describe=describe_preset,
        presets=args.experiments or baselines.DEFAULT_PRESETS,
        seeds=tuple(range(args.seeds[0] if args.seeds else baselines.DEFAULT_NUM_SEEDS)),
        out=args.out or os.path.join(ROOT, baselines.DEFAULT_OUT),
        runs_dir=args.runs_dir or os.path.join(ROOT, baselines.DEFAULT_RUNS_DIR),
        overrides=args.overrides or (),
        jobs=args.jobs or baselines.DEFAULT_JOBS,
        quick=args.quick,
        reuse=args.reuse,
        command=shlex.join(["python", "scripts/benchmark.py", *argv]),
    )
    try:
        rows, notes, results = baselines.suite_baselines(options)
    except ValueError as error:
        print(f"baselines: {error}", file=sys.stderr)
        return 2
    print(format_table(rows, notes))
    if args.json:
        write_json(args.json, rows)
    return 1 if any(result.failures for result in results) else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_arguments(argv)
    if args.suite in OWN_SUITES:
        return run_baselines(args, argv)
    settings = Settings(
        repeats=args.repeats,
        seconds=min(args.seconds, 0.2) if args.quick else args.seconds,
        quick=args.quick,
        experiments=args.experiments,
        compose=compose_experiment,
        has_key=has_key,
        train_script=TRAIN,
        cases=args.cases,
        widths=args.widths,
        peers=getattr(args, "peer_options", None),
    )
    rows = get_suite(args.suite)(settings)
    print(format_table(rows, settings.notes))
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    status = main()
    # The results are out. TensorFlow's and reverb's threads (a dataset's sampler still
    # waiting) sometimes throw while the interpreter tears them down (abort, exit 134,
    # in about 1 in 7 `learner` runs): end here instead.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
