"""`startup`, `scaling`, `anakin`, `grid`, `pruning`: whole scripts/train.py processes, as a researcher starts them."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any, Sequence

import yaml

from benchmarks.common import QUICK_WHERE_PRESENT, RUN_OVERRIDES, Row, Settings, median, progress, ratio
from benchmarks.common import run_logged, scratch, train

SCALING_ACTORS = (1, 2, 4)
ANAKIN_PRESETS = {"ppo": "ppo_gymnax_cartpole", "dqn": "dqn_gymnax_cartpole", "pqn": "pqn_gymnax_cartpole"}
ANAKIN_QUICK = ["max_actor_steps=4096", "eval_every=2048", "eval_episodes=1"]  # Whole chunks of either preset.
# A run that is nearly all start-up: imports, building, compiling, one short evaluation.
STARTUP_RUN = ["max_actor_steps=500", "eval_every=500", "eval_episodes=1"]
N_TRIALS, QUICK_TRIALS = 20, 4
PRUNERS = ("none", "median")  # Each repeat searches without pruning first.
# A tiny search that still prunes: the first trial completes, then the median judges every evaluation.
PRUNING_QUICK = ["max_actor_steps=2000", "eval_every=500", "eval_episodes=2", "agent.min_replay_size=200"]
QUICK_MEDIAN = ["hydra.sweeper.pruner.n_startup_trials=1"]
TARGET_RATIO = 0.7  # Issue 22: at most 0.7 of the unpruned search's wall-clock, a best trial at least as good.


def run(
    settings: Settings, overrides: Sequence[str], env: dict[str, str] | None = None, run_dir: str | None = None
) -> dict[str, Any]:
    """The summary of scripts/train.py with `overrides` in `run_dir` (None: a temporary one, removed unless the
    run fails)."""
    progress(f"running {' '.join(overrides)}")
    if run_dir is None:
        with scratch("benchmark-") as directory:
            return run(settings, overrides, env, directory)
    command = [sys.executable, settings.train_script, *overrides, *RUN_OVERRIDES, f"hydra.run.dir={run_dir}"]
    return train(command, run_dir, env)


def suite_scaling(settings: Settings) -> list[Row]:
    """total actor steps/s of launcher=ray with 1, 2 and 4 actors (experiment dqn_cartpole unless --experiments;
    summary.json's acting phase). ratio: relative to 1 actor. Flat on 2 cores; a bigger machine shows the slope."""
    rows: list[Row] = []
    steps = 1_000 if settings.quick else 10_000
    for name in settings.experiments or ("dqn_cartpole",):
        reference = None
        for actors in SCALING_ACTORS:
            overrides = [f"experiment={name}", "launcher=ray", f"launcher.num_actors={actors}"]
            overrides += [f"max_actor_steps={steps}", f"eval_every={steps}", "eval_episodes=1"]
            overrides += QUICK_WHERE_PRESENT if settings.quick else []
            value = median([run(settings, overrides).get("actor_steps_per_second") for _ in range(settings.repeats)])
            reference = value if reference is None else reference
            case = f"{name} launcher=ray num_actors={actors}"
            rows.append(Row("scaling", case, value, "steps/s", ratio=ratio(value, reference) if actors > 1 else None))
            progress(f"scaling {case}: {value} actor steps/s")
    return rows


def suite_startup(settings: Settings) -> list[Row]:
    """seconds of a whole 500-step scripts/train.py process (experiment dqn_cartpole unless --experiments), mostly
    start-up, with reverb loading only the TensorFlow modules it uses (rl/lazy_tensorflow.py) against TensorFlow's
    full import (RL_LAZY_TENSORFLOW=0), alternating, median of --repeats; ratio = lazy / full."""
    rows: list[Row] = []
    for name in settings.experiments or ("dqn_cartpole",):
        present = [o for o in QUICK_WHERE_PRESENT if settings.has_key(o.split("=")[0], [f"experiment={name}"])]
        overrides = [f"experiment={name}", *STARTUP_RUN, *present]  # On-policy agents keep no replay.
        seconds: dict[str, list[float]] = {"1": [], "0": []}
        for _ in range(settings.repeats):
            for mode in seconds:  # Alternating.
                start = time.perf_counter()
                run(settings, overrides, env={"RL_LAZY_TENSORFLOW": mode})
                seconds[mode].append(time.perf_counter() - start)
        lazy, full = median(seconds["1"]), median(seconds["0"])
        case = f"{name} 500-step process"
        rows.append(Row("startup", f"{case}, TensorFlow's full import", full, "s"))
        rows.append(Row("startup", f"{case}, reverb's TensorFlow modules only", lazy, "s", full, ratio(lazy, full)))
        progress(f"startup {name}: {lazy:.2f} s against {full:.2f} s with TensorFlow's full import")
    return rows


def suite_anakin(settings: Settings) -> list[Row]:
    """whole launcher=anakin runs (one compiled JAX program) of PPO, DQN and PQN on gymnax CartPole with 1 and 8
    seeds (--widths replaces them), from summary.json: steps/s of all replicas after compilation, compile
    seconds, seconds from the run's start to an evaluation at 475 (median over the replicas that reached it),
    and the widest run's seconds against as many single-seed runs' (bound; ratio = value / bound)."""
    settings.note(f"anakin: XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r} (empty: the launcher's choice)")
    rows: list[Row] = []
    widths = tuple(settings.widths or (1, 8))
    for agent, preset in ANAKIN_PRESETS.items():
        whole: dict[int, float] = {}  # Seconds of the whole run, compilation and evaluations included.
        for seeds in widths:
            overrides = [f"experiment={preset}", f"launcher.num_seeds={seeds}"]
            summary = run(settings, overrides + (ANAKIN_QUICK if settings.quick else []))
            whole[seeds] = summary["wall_time_s"]
            rows += anakin_rows(settings, f"{agent} CartPole {seeds} seed{'s' if seeds > 1 else ''}", summary)
        widest = max(widths)
        case, runs = f"{agent} {widest} seeds vs {widest} runs: whole run", widest * whole[min(widths)]
        rows.append(Row("anakin", case, whole[widest], "s", runs, ratio(whole[widest], runs)))
    return rows


def anakin_rows(settings: Settings, case: str, summary: dict[str, Any]) -> list[Row]:
    """One run's rows: steps/s after compilation, compile seconds, seconds to the threshold (where a replica
    reached it; the notes count them)."""
    rate = summary.get("total_actor_steps_per_second") or summary.get("actor_steps_per_second")
    replicas = summary.get("replicas") or [summary]
    reached = [replica["time_to_threshold_s"] for replica in replicas if replica["time_to_threshold_s"] is not None]
    settings.note(f"{case}: {len(reached)}/{len(replicas)} replicas reached {summary['threshold']}")
    progress(f"anakin {case}: {rate} steps/s, compiled in {summary.get('compile_time_s')} s")
    rows = [
        Row("anakin", f"{case}: steps/s after compile", rate, "steps/s"),
        Row("anakin", f"{case}: compile", summary.get("compile_time_s"), "s"),
    ]
    return rows + ([Row("anakin", f"{case}: s to threshold", statistics.median(reached), "s")] if reached else [])


GRID_VALUES = {"agent.learning_rate": "1e-4,3e-4,1e-3", "agent.entropy_cost": "0.0,0.01", "seed": "0,1,2"}
GRID = ["experiment=ppo_gymnax_cartpole", *(f"{key}={values}" for key, values in GRID_VALUES.items())]
# Rejax's CartPole PPO settings in our terms (as ../shared/peers/anakin_side_by_side.sh sets them).
REJAX_SETTINGS = "environment.num_envs=5 agent.unroll_length=100 agent.batch_size=5 agent.num_epochs=5".split()
REJAX_SETTINGS += "agent.num_minibatches=5 agent.learning_rate=7.5e-4 agent.final_learning_rate_fraction=1.0".split()
REJAX_SETTINGS += "agent.max_gradient_norm=0.5 agent.entropy_cost=0.01 agent.value_cost=0.5".split()
REJAX_SETTINGS += ["max_actor_steps=100000", "eval_every=10000", "agent.decay_actor_steps=100000"]
REJAX = (  # ../shared/peers/setup_jax.sh makes the venv; REJAX_PYTHON and REJAX_SCRIPT point elsewhere.
    os.environ.get("REJAX_PYTHON", "/tmp/peer-jax/bin/python"),
    os.environ.get("REJAX_SCRIPT", "../shared/peers/rejax_bench.py"),
)


def suite_grid(settings: Settings) -> list[Row]:
    """seconds of the 18-job sweep GRID under hydra/launcher=anakin_grid against joblib with n_jobs=2 (bound), and
    with Rejax's settings against Rejax's own vmapped grid (bound; where REJAX runs), each sweep with an empty XLA
    cache; ratio = value / bound."""

    def sweep(*overrides: str) -> float:
        quick = ANAKIN_QUICK if settings.quick else []
        command = [sys.executable, settings.train_script, "-m", *GRID, *overrides, *quick, *RUN_OVERRIDES]
        with scratch("benchmark-grid-") as sweep_dir, scratch("xla-cache-") as cache:  # Cold, as a new grid's.
            seconds = run_logged([*command, f"hydra.sweep.dir={sweep_dir}", f"compilation_cache={cache}"], sweep_dir)
        progress(f"grid {' '.join(overrides)}: {seconds:.1f} s")
        return seconds

    grid, joblib = sweep("hydra/launcher=anakin_grid"), sweep("hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    rows = [Row("grid", "18 jobs: anakin_grid vs joblib n_jobs=2", grid, "s", joblib, ratio(grid, joblib))]
    if not all(os.path.isfile(path) for path in REJAX) or settings.quick:
        settings.note(f"grid: no Rejax row (needs {' and '.join(REJAX)}, without --quick)")
        return rows
    ours = sweep("hydra/launcher=anakin_grid", *REJAX_SETTINGS)
    lrs, ents = GRID_VALUES["agent.learning_rate"], GRID_VALUES["agent.entropy_cost"]
    rejax_command = [*REJAX, "--algo", "ppo", "--lr", lrs, "--ent", ents, "--seeds", "3", "--out", "/dev/null"]
    with scratch("rejax-") as log_dir:
        rejax = run_logged(rejax_command, log_dir)
    return rows + [Row("grid", "18 jobs, Rejax's settings: anakin_grid vs Rejax", ours, "s", rejax, ratio(ours, rejax))]


def search(settings: Settings, preset: str, pruner: str, n_trials: int, sweep: str) -> dict[str, Any]:
    """Wall-clock seconds and optimization_results.yaml of one `scripts/train.py -m` search into `sweep`."""
    command = [sys.executable, settings.train_script, "-m", f"experiment={preset}", "hydra/sweeper=dqn_optuna"]
    command += [f"hydra/sweeper/pruner={pruner}", f"hydra.sweeper.n_trials={n_trials}", "logger=csv"]
    if settings.quick:
        command += PRUNING_QUICK + (QUICK_MEDIAN if pruner == "median" else [])
    command += ["progress=false", f"hydra.sweep.dir={sweep}"]
    progress(f"searching: {' '.join(command[2:])}")
    seconds = run_logged(command, sweep)
    with open(os.path.join(sweep, "optimization_results.yaml")) as file:
        return {"seconds": seconds, **yaml.safe_load(file)}


def suite_pruning(settings: Settings) -> list[Row]:
    """wall-clock of a 20-trial Optuna search (hydra/sweeper=dqn_optuna, experiment dqn_cartpole unless
    --experiments) with hydra/sweeper/pruner=median and with none, and each one's best value. ratio: to the
    search without pruning (bound: 0.7 of its time). One search of each per --repeats (use --repeats 1:
    a search is long); --quick: 4 trials of 2,000 steps."""
    rows: list[Row] = []
    n_trials = QUICK_TRIALS if settings.quick else N_TRIALS
    for preset in settings.experiments or ("dqn_cartpole",):
        runs = [(pruner, repeat) for repeat in range(settings.repeats) for pruner in PRUNERS]  # Alternating.
        with scratch("benchmark-pruning-") as root:
            found = [(p, search(settings, preset, p, n_trials, os.path.join(root, f"{p}_{r}"))) for p, r in runs]
        seconds, best, case = {}, {}, f"{preset} {n_trials} trials pruner="
        for pruner in PRUNERS:
            searches = [result for p, result in found if p == pruner]
            seconds[pruner] = statistics.median(r["seconds"] for r in searches)
            best[pruner] = statistics.median(r.get("best_value", float("nan")) for r in searches)
            pruned = sorted(r["trials"]["pruned"] for r in searches)
            settings.note(f"{case}{pruner}: trials pruned {pruned} of {n_trials} (per search)")
        bound, time_ratio = TARGET_RATIO * seconds["none"], ratio(seconds["median"], seconds["none"])
        value_ratio = ratio(best["median"], best["none"])
        rows += [
            Row("pruning", f"{case}none: wall-clock", seconds["none"], "s"),
            Row("pruning", f"{case}none: best value", best["none"], "return"),
            Row("pruning", f"{case}median: wall-clock", seconds["median"], "s", bound, time_ratio),
            Row("pruning", f"{case}median: best value", best["median"], "return", ratio=value_ratio),
        ]
    return rows


PBT_PRESET = "ppo_gymnax_cartpole"
PBT_POPULATION = 16
# Ranges wide enough that many starting points fail alone: the exchanges have something to fix.
PBT_SEARCH = ["agent.learning_rate=tag(log, interval(1e-6, 1e-1))", "agent.entropy_cost=interval(0.0, 0.2)"]


def suite_pbt(settings: Settings) -> list[Row]:
    """hydra/sweeper=pbt over 16 PPO members (ppo_gymnax_cartpole, learning rates 1e-6..1e-1 log-uniform,
    entropy costs 0..0.2) against the same members never exchanging (hydra.sweeper.interval=max_actor_steps:
    the same starting values and compute): the members' mean and best final return and members at >= 475
    (bound: without exchanges; ratio = PBT / bound), and seconds (the exchanges' cost)."""
    preset = (settings.experiments or [PBT_PRESET])[0]
    quick = ANAKIN_QUICK if settings.quick else []

    def population(*overrides: str) -> tuple[dict[str, Any], float]:
        command = [sys.executable, settings.train_script, "-m", "hydra/sweeper=pbt", f"experiment={preset}"]
        command += [f"hydra.sweeper.population={PBT_POPULATION}", *PBT_SEARCH, *overrides, *quick, *RUN_OVERRIDES]
        with scratch("benchmark-pbt-") as sweep:
            seconds = run_logged([*command, f"hydra.sweep.dir={sweep}"], sweep)
            with open(os.path.join(sweep, "0", "summary.json")) as file:
                summary = json.load(file)
        progress(f"pbt {' '.join(overrides) or 'exchanging'}: {seconds:.1f} s, final {summary['final_eval_return']}")
        return summary, seconds

    exchanging, seconds = population()
    budget = exchanging["actor_steps"]
    alone, alone_seconds = population(f"hydra.sweeper.interval={budget}")
    finals = lambda summary: [replica["final_eval_return"] for replica in summary["replicas"]]
    solved = lambda summary: sum(value >= summary["threshold"] for value in finals(summary))
    rows = []
    for case, value, bound, unit in (
        ("mean final return", statistics.mean(finals(exchanging)), statistics.mean(finals(alone)), "return"),
        ("best final return", max(finals(exchanging)), max(finals(alone)), "return"),
        (f"members at >= threshold, of {PBT_POPULATION}", solved(exchanging), solved(alone), "members"),
        ("seconds", seconds, alone_seconds, "s"),
    ):
        rows.append(Row("pbt", f"{preset}: {case}, PBT vs no exchange", value, unit, bound, ratio(value, bound)))
    schedule = exchanging["pbt"]["schedule"]
    settings.note(f"pbt: best member {exchanging['pbt']['best_member']}, {len(schedule) - 1} exchanges in its schedule")
    return rows
