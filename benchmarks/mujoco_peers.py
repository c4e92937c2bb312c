"""Our SAC or TD3 (experiment=sac_mujoco / td3_mujoco) beside Stable-Baselines3's, and SBX's with --peers, with
RL Baselines3 Zoo's MuJoCo settings, on one Gymnasium MuJoCo task at one budget: seed by seed, the sides in turn
(so load hits them alike), each evaluated 10 deterministic episodes every 10,000 steps; each side's final return
per seed, IQM and mean with 95% bootstrap intervals, and its wall seconds.

The peers run in venvs of their own (SB3_PYTHON, SBX_PYTHON; ../shared/peers/setup.sh and setup_sbx.sh build
them) through benchmarks/peer_sb3_run.py; their run data and ours stay in --peer-dir (a new temporary folder by
default), with mujoco_peers.json holding every evaluation and command."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

from benchmarks.common import ROOT, RUN_OVERRIDES, RunFailed, Row, Settings, progress, run_logged, train

PRESETS = {"sac": "sac_mujoco", "td3": "td3_mujoco"}
RUNNER = os.path.join(ROOT, "benchmarks", "peer_sb3_run.py")


@dataclasses.dataclass(frozen=True)
class Peer:
    """A peer library: its label, the variable naming its Python, that Python's default, the script building it."""

    label: str
    variable: str
    default_python: str
    setup: str
    module: str  # What its venv must import.


PEERS = {
    "sb3": Peer(
        "Stable-Baselines3", "SB3_PYTHON", "/tmp/peer-sb3/bin/python", "../shared/peers/setup.sh", "stable_baselines3"
    ),
    "sbx": Peer("SBX", "SBX_PYTHON", "/tmp/peer-sbx/bin/python", "../shared/peers/setup_sbx.sh", "sbx"),
}

LABELS = {"ours": "ours"} | {name: peer.label for name, peer in PEERS.items()}


@dataclasses.dataclass(frozen=True)
class PeerOptions:
    """What one invocation compares; `learning_starts` replaces both sides' learning start (smoke runs only)."""

    task: str = "Walker2d-v5"
    algo: str = "sac"
    steps: int = 100_000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    peers: tuple[str, ...] = ("sb3",)
    eval_every: int = 10_000
    eval_episodes: int = 10
    learning_starts: int | None = None
    peer_dir: str | None = None


# --quick: a run that shows the suite works end to end (the figures mean nothing).
QUICK = {"steps": 3000, "eval_every": 1000, "learning_starts": 1000, "seeds": (0,)}


class PeerMissing(RuntimeError):
    """A peer's venv is absent or lacks its library; the message is the one line telling how to build it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's options on scripts/benchmark.py's parser (--seeds N, shared with baselines, picks seeds 0..N-1)."""
    group = parser.add_argument_group("mujoco_peers")
    group.add_argument("--task", help=f"a Gymnasium MuJoCo task (default {PeerOptions.task})")
    group.add_argument("--algo", choices=tuple(PRESETS), help=f"the algorithm (default {PeerOptions.algo})")
    group.add_argument("--steps", type=int, help=f"environment steps per run (default {PeerOptions.steps:,})")
    group.add_argument(
        "--peers", nargs="+", choices=tuple(PEERS), help="the libraries beside ours (default sb3; sbx: SB3's JAX port)"
    )
    group.add_argument("--eval-every", type=int, help=f"steps between evaluations (default {PeerOptions.eval_every:,})")
    group.add_argument(
        "--learning-starts",
        type=int,
        help="both sides' learning start in steps, in place of the presets' and the zoo's (smoke runs only)",
    )
    group.add_argument("--peer-dir", metavar="DIR", help="where the runs and mujoco_peers.json go (default: a new one)")


OPTION_NAMES = ("task", "algo", "steps", "peers", "eval_every", "learning_starts", "peer_dir")


def given_options(args: argparse.Namespace) -> list[str]:
    """This suite's options given on the command line (for the other suites' refusal)."""
    return [f"--{name.replace('_', '-')}" for name in OPTION_NAMES if getattr(args, name, None) is not None]


def options_from(args: argparse.Namespace) -> PeerOptions:
    """The options of scripts/benchmark.py's arguments (--quick: QUICK's where none given); ValueError: bad ones."""
    values: dict[str, Any] = dict(QUICK) if args.quick else {}
    values |= {name: getattr(args, name) for name in OPTION_NAMES if getattr(args, name, None) is not None}
    if args.seeds is not None:
        if len(args.seeds) != 1 or args.seeds[0] < 1:
            raise ValueError("--seeds takes one number N >= 1 (seeds 0..N-1)")
        values["seeds"] = tuple(range(args.seeds[0]))
    if args.experiments:
        raise ValueError("--experiments: not for mujoco_peers (--algo sac runs sac_mujoco, --algo td3 td3_mujoco)")
    options = PeerOptions(**{**values, "peers": tuple(dict.fromkeys(values.get("peers", PeerOptions.peers)))})
    if min(options.steps, options.eval_every) < 1 or (options.learning_starts or 0) < 0:
        raise ValueError("--steps and --eval-every must be >= 1, --learning-starts >= 0")
    from benchmarks.peer_sb3_run import zoo_settings

    zoo_settings(options.algo, options.task)  # A task the zoo has no settings for is refused before anything runs.
    return options


def peer_python(name: str) -> str:
    peer = PEERS[name]
    return os.environ.get(peer.variable) or peer.default_python


def check_peer(name: str) -> str:
    """The peer's Python, checked to import its library and MuJoCo; PeerMissing (one line) if not."""
    peer, python = PEERS[name], peer_python(name)
    how = f"build it with `bash {peer.setup}` (a few minutes, once) or name its Python in {peer.variable}"
    if not os.access(python, os.X_OK):
        raise PeerMissing(f"mujoco_peers: no {peer.label} venv at {python}: {how}")
    check = subprocess.run([python, "-c", f"import {peer.module}, mujoco, gymnasium"], capture_output=True, text=True)
    if check.returncode != 0:
        raise PeerMissing(f"mujoco_peers: {python} cannot import {peer.module}, mujoco and gymnasium: {how}")
    return python


def our_command(options: PeerOptions, seed: int, run_dir: str, train_script: str) -> list[str]:
    """scripts/train.py's command for our side of one seed."""
    command = [sys.executable, train_script, f"experiment={PRESETS[options.algo]}", f"environment.name={options.task}"]
    command += [f"max_actor_steps={options.steps}", f"eval_every={options.eval_every}"]
    command += [f"eval_episodes={options.eval_episodes}", f"seed={seed}", *RUN_OVERRIDES]
    if options.learning_starts is not None:
        command += [
            f"agent.min_replay_size={options.learning_starts}",
            f"policy.warmup_steps={options.learning_starts}",
        ]
    return command + [f"hydra.run.dir={run_dir}"]


def peer_command(options: PeerOptions, name: str, python: str, seed: int, out: str) -> list[str]:
    """The peer runner's command for one seed."""
    command = [python, RUNNER, "--lib", name, "--algo", options.algo, "--task", options.task]
    command += ["--steps", str(options.steps), "--seed", str(seed), "--eval-every", str(options.eval_every)]
    command += ["--eval-episodes", str(options.eval_episodes), "--out", out]
    if options.learning_starts is not None:
        command += ["--learning-starts", str(options.learning_starts)]
    return command


def our_evaluations(run_dir: str) -> list[dict[str, float]]:
    """Our run's evaluation rounds (logs/evaluator.csv), in step order, as the runner writes its own."""
    with open(os.path.join(run_dir, "logs", "evaluator.csv")) as file:
        rows = list(csv.DictReader(file))
    points = [{"steps": int(row["actor_steps"]), "return": float(row["episode_return"])} for row in rows]
    if not points:
        raise RunFailed(f"{run_dir}: no evaluation in logs/evaluator.csv")
    return sorted(points, key=lambda point: point["steps"])


def side_summary(finals: Sequence[tuple[int, float]], walls: Sequence[float]) -> dict[str, Any]:
    """One side's figures: per-seed final returns (seed order), rliable's IQM and mean with 95% intervals, wall s."""
    from rl.analysis.aggregates import summarize

    ordered = sorted(finals)
    stats = summarize([value for _, value in ordered])
    return {
        "seeds": [seed for seed, _ in ordered],
        "final_returns": [value for _, value in ordered],
        **{key: stats[key] for key in ("iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high")},
        "wall_seconds": list(walls),
        "wall_seconds_total": float(sum(walls)),
    }


def rows_and_lines(summaries: dict[str, dict[str, Any]]) -> tuple[list[Row], list[str]]:
    """The suite's rows (each side's per-seed returns, IQM and mean with their intervals, wall seconds: its ratio
    is against ours) and the markdown table docs/mujoco.md shows (benchmarks/side_by_side_returns.py's)."""
    from benchmarks.side_by_side_returns import table

    rows: list[Row] = []
    ours_wall = summaries["ours"]["wall_seconds_total"] if "ours" in summaries else None
    for side, summary in summaries.items():
        for seed, value in zip(summary["seeds"], summary["final_returns"]):
            rows.append(Row("mujoco_peers", f"{side} seed {seed}", value, "return"))
        for name in ("iqm", "mean"):
            case = f"{side} {'IQM' if name == 'iqm' else name}"
            rows.append(Row("mujoco_peers", case, summary[name], "return"))
            rows.append(Row("mujoco_peers", f"{case} 95% low", summary[f"{name}_low"], "return"))
            rows.append(Row("mujoco_peers", f"{case} 95% high", summary[f"{name}_high"], "return"))
        wall = summary["wall_seconds_total"]
        rows.append(Row("mujoco_peers", f"{side} wall", wall, "s", ratio=wall / ours_wall if ours_wall else None))
    columns = {LABELS.get(side, side): list(zip(s["seeds"], s["final_returns"])) for side, s in summaries.items()}
    lines = table(columns)
    lines += [
        f"wall seconds, {LABELS.get(side, side)}, per seed: " + ", ".join(f"{wall:.0f}" for wall in s["wall_seconds"])
        for side, s in summaries.items()
    ]
    return rows, lines


def suite_mujoco_peers(settings: Settings) -> list[Row]:
    """SAC or TD3 on a MuJoCo task (--task, --algo, --steps, --seeds N, --peers sb3 sbx): ours (sac_mujoco,
    td3_mujoco) beside Stable-Baselines3's (and SBX's) with RL Baselines3 Zoo's settings, seed by seed in turn;
    final returns, IQM and mean with 95% intervals, wall seconds."""
    options = settings.peers or PeerOptions(**(QUICK if settings.quick else {}))
    try:
        pythons = {name: check_peer(name) for name in options.peers}
    except PeerMissing as error:
        raise SystemExit(str(error)) from None
    peer_dir = options.peer_dir or tempfile.mkdtemp(prefix="mujoco_peers_")
    os.makedirs(peer_dir, exist_ok=True)
    progress(
        f"mujoco_peers: {options.algo} on {options.task}, {options.steps:,} steps, seeds {options.seeds}: {peer_dir}"
    )
    sides = ["ours", *options.peers]
    finals: dict[str, list[tuple[int, float]]] = {side: [] for side in sides}
    walls: dict[str, list[float]] = {side: [] for side in sides}
    runs: list[dict[str, Any]] = []
    for seed in options.seeds:
        for side in sides:
            run_dir = os.path.join(peer_dir, f"{side}_seed{seed}")
            try:
                if side == "ours":
                    command = our_command(options, seed, run_dir, settings.train_script or "scripts/train.py")
                    start = time.perf_counter()
                    train(command, run_dir)
                    wall = time.perf_counter() - start
                    evaluations = our_evaluations(run_dir)
                else:
                    out = os.path.join(run_dir, "result.json")
                    command = peer_command(options, side, pythons[side], seed, out)
                    wall = run_logged(command, run_dir)
                    with open(out) as file:
                        evaluations = json.load(file)["evaluations"]
            except (RunFailed, OSError, ValueError, KeyError) as error:
                raise SystemExit(f"mujoco_peers: {side}, seed {seed}: {error}") from None
            final = evaluations[-1]
            progress(
                f"mujoco_peers: {side} seed {seed}: {final['return']:.1f} at {final['steps']:,} steps, {wall:.0f} s"
            )
            finals[side].append((seed, float(final["return"])))
            walls[side].append(wall)
            runs.append({"side": side, "seed": seed, "command": command[1:], "wall_seconds": wall})
            runs[-1]["evaluations"] = evaluations
    summaries = {side: side_summary(finals[side], walls[side]) for side in sides}
    rows, lines = rows_and_lines(summaries)
    report = {"options": dataclasses.asdict(options), "sides": summaries, "table": lines, "runs": runs}
    with open(os.path.join(peer_dir, "mujoco_peers.json"), "w") as file:
        json.dump(report, file, indent=1)
        file.write("\n")
    for line in lines + [f"run data and every evaluation: {peer_dir}/mujoco_peers.json"]:
        settings.note(line)
    return rows
