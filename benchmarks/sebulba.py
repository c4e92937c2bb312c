"""`sebulba`: launcher=sebulba on whatever device JAX sees: ppo_atari's acting steps/s on Pong against ale-py's own
vector environment stepping the same copies with random actions (the ceiling; the issue asks for 70% of it), and
SAC's learner updates/s (SGD steps of every replica) with 1 and 5 seeds per program. Rates are the steady ones,
from the run's own records after its first fifth (compilation and the replay's warm-up left out)."""

from __future__ import annotations

import csv
import os
import time
from typing import Sequence

import numpy as np

from benchmarks.common import Row, Settings, in_turns, progress, ratio, scratch
from benchmarks.runs import run

ATARI_SHARE = 0.7  # The share of the ceiling ppo_atari's acting must reach.
SAC_SEEDS = (1, 5)


def ale_ceiling(game: str, copies: int, threads: int, seconds: float) -> float:
    """Steps/s of ale-py's vector environment alone: `copies` of `game` on `threads` threads, random actions,
    the preset's frame settings (what launcher=sebulba's Atari actors step)."""
    from ale_py.vector_env import AtariVectorEnv

    from rl.environments.atari import ale_rom

    environment = AtariVectorEnv(
        ale_rom(game), copies, num_threads=threads, autoreset_mode="SameStep", repeat_action_probability=0.0
    )
    actions = environment.single_action_space.n
    environment.reset(seed=np.arange(copies))
    random = np.random.default_rng(0)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        environment.step(random.integers(0, actions, copies).astype(np.int32))
        steps += copies
    rate = steps / (time.perf_counter() - start)
    environment.close()
    return rate


def steady_rate(path: str, key: str) -> float | None:
    """`key` per second of wall time over a log's rows after its first fifth (None: too few rows)."""
    with open(path) as file:
        rows = [(float(row[key]), float(row["wall_time_s"])) for row in csv.DictReader(file) if row.get(key)]
    if len(rows) < 3:
        return None
    first, last = rows[len(rows) // 5], rows[-1]
    return (last[0] - first[0]) / (last[1] - first[1]) if last[1] > first[1] else None


def logs_of(run_dir: str, seeds: int) -> str:
    return os.path.join(run_dir, "seed_0" if seeds > 1 else "", "logs")


# ppo_atari's layout here: 3 seeds in one program, each with 2 actor threads of 4 copies (24 copies in all).
ATARI_SEEDS, ATARI_THREADS, ATARI_COPIES = 3, 2, 4
POLICY_LAGS = (1, 0)


def atari_run(
    settings: Settings, game: str, lag: int, rounds: int = 1, episodes: int = 1
) -> tuple[float | None, float | None, dict]:
    """(every seed's acting steps/s, milliseconds per policy call, the summary) of ppo_atari with `lag`, evaluating
    `episodes` games a seed in `rounds` rounds after the untrained one (the last at the end)."""
    budget = 2_048 if settings.quick else 204_800
    quick = ["agent.unroll_length=16", "agent.num_epochs=1", "agent.num_minibatches=1"] if settings.quick else []
    overrides = [
        "experiment=ppo_atari",
        *quick,
        f"environment.name={game}",
        f"launcher.num_seeds={ATARI_SEEDS}",
        f"launcher.actor_threads={ATARI_THREADS}",
        f"environment.num_envs={ATARI_COPIES}",
        f"launcher.policy_lag={lag}",
        f"max_actor_steps={budget}",
        f"eval_every={budget // rounds}",
        f"eval_episodes={episodes}",
        "environment.max_episode_steps=2000",  # Evaluation games stay short.
    ]
    with scratch("sebulba-") as run_dir:
        summary = run(settings, overrides, run_dir=run_dir)
        acting = steady_rate(os.path.join(logs_of(run_dir, ATARI_SEEDS), "learner.csv"), "actor_steps")
    calls = summary["actor_steps"] / ATARI_COPIES  # Each call: a thread's copies of every seed, one step.
    per_call = 1e3 * summary["time_s"]["actors_policy_s"] / calls
    return (None if acting is None else acting * ATARI_SEEDS), per_call, summary


def round_trip_rows(settings: Settings, game: str) -> list[Row]:
    """ppo_atari's policy call (its seeds x one thread's copies of `game`'s frames, the outputs copied back) on
    the learner's device: the median milliseconds of calls from one thread, and from two threads at once with
    the calls a second they make together (what bounds a thread that alternates its environment and the chip)."""
    import concurrent.futures

    import jax

    from rl.experiments.compiled import make_system, replica_keys
    from rl.sebulba.programs import host_inputs, initial_state, make_programs, policy_params
    from rl.sebulba.settings import SebulbaSettings, block_length, copies_per_replica

    layout = SebulbaSettings(num_seeds=ATARI_SEEDS, actor_threads=ATARI_THREADS)
    overrides = ["experiment=ppo_atari", f"environment.name={game}", f"environment.num_envs={ATARI_COPIES}"]
    with scratch("sebulba-") as run_dir:
        experiment = settings.compose(overrides, run_dir)
    system = make_system(experiment, inputs=host_inputs(experiment, layout))
    length = block_length(experiment, layout)
    programs = make_programs(system, length, length * copies_per_replica(experiment, layout))
    device = jax.devices()[0]
    keys = replica_keys(0, ATARI_SEEDS)
    params = jax.device_put(policy_params(system, initial_state(system, keys, device)), device)
    spec = experiment.environment_spec.observations
    frames = np.zeros((ATARI_SEEDS, ATARI_COPIES, *spec.shape), spec.dtype)
    arguments = (params, jax.device_put(keys, device), jax.device_put(np.int32(0), device))
    calls = 20 if settings.quick else 300

    def call_times() -> list[float]:
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            np.asarray(programs.act(*arguments, jax.device_put(frames, device))[0])
            seconds.append(time.perf_counter() - started)
        return seconds

    call_times()  # Compiles.
    alone = float(np.median(call_times()))
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        threads = [pool.submit(call_times) for _ in range(2)]
        together = [seconds for thread in threads for seconds in thread.result()]
    elapsed = time.perf_counter() - started
    kind = device.device_kind
    return [
        Row("sebulba", f"ppo_atari policy call on {kind}, one thread", 1e3 * alone, "ms"),
        Row("sebulba", f"ppo_atari policy call on {kind}, two threads at once", 1e3 * float(np.median(together)), "ms"),
        Row("sebulba", f"ppo_atari policy calls on {kind}, two threads at once", len(together) / elapsed, "calls/s"),
    ]


def atari_rows(settings: Settings, game: str) -> list[Row]:
    """ppo_atari's acting against ale-py alone stepping as many copies; a policy call's milliseconds with the
    actors one update behind the learner (acting and learning overlap) and with none (a call never waits for an
    update in flight but a block's first): their difference is the wait behind the learner's program."""
    rows: list[Row] = []
    copies, threads = ATARI_SEEDS * ATARI_THREADS * ATARI_COPIES, os.cpu_count() or 1
    progress(f"ale-py alone: {copies} copies of {game} on {threads} threads")
    ceiling = ale_ceiling(game, copies, threads, settings.seconds * 5)
    rows.append(Row("sebulba", f"ale-py alone, {copies} copies of {game}, random actions", ceiling, "steps/s"))
    for lag in POLICY_LAGS:
        acting, per_call, summary = atari_run(settings, game, lag)
        settings.note(f"ppo_atari {game}, policy_lag={lag} on {summary.get('device')}: time {summary.get('time_s')}")
        case = f"ppo_atari acting on {game}, {ATARI_SEEDS} seeds, policy_lag={lag}"
        bound = ATARI_SHARE * ceiling
        rows.append(Row("sebulba", case, acting, "steps/s", bound=bound, ratio=ratio(acting, ceiling)))
        rows.append(Row("sebulba", f"ppo_atari policy call, policy_lag={lag}", per_call, "ms"))
    return rows


# Evaluation beside acting: ppo_atari's rounds (this many games a seed, this many rounds) against the untrained and
# final rounds only; the bound: acting at least 0.9x and evaluation under 10% of the run's time.
EVALUATION_EPISODES, EVALUATION_ROUNDS, EVALUATION_RATIO = 10, 4, 0.9


def atari_evaluation_rows(settings: Settings, game: str) -> list[Row]:
    """ppo_atari's acting with evaluation rounds beside it against without (the untrained and final rounds only),
    and the share of the run's wall time its learner's thread waited for evaluation."""
    off, _, _ = atari_run(settings, game, lag=1, rounds=1, episodes=EVALUATION_EPISODES)
    on, _, summary = atari_run(settings, game, lag=1, rounds=EVALUATION_ROUNDS, episodes=EVALUATION_EPISODES)
    waited = summary.get("time_s", {}).get("evaluation_waited_s")
    share = None if waited is None or not summary.get("wall_time_s") else waited / summary["wall_time_s"]
    case = f"ppo_atari acting on {game}, {EVALUATION_ROUNDS} rounds of {EVALUATION_EPISODES} games beside it"
    return [
        Row("sebulba", f"ppo_atari acting on {game}, the untrained and final rounds only", off, "steps/s"),
        Row(
            "sebulba", case, on, "steps/s", bound=None if off is None else EVALUATION_RATIO * off, ratio=ratio(on, off)
        ),
        Row("sebulba", f"ppo_atari on {game}: evaluation's share of the run's time", share, "fraction", bound=0.1),
    ]


def sac_rows(settings: Settings, task: str, seeds_list: Sequence[int]) -> list[Row]:
    rows, single = [], None
    budget = 8_192 if settings.quick else 60_000
    for seeds in seeds_list:
        overrides = [
            "experiment=sac_mujoco",
            f"environment.name={task}",
            f"launcher.num_seeds={seeds}",
            f"max_actor_steps={budget}",
            f"eval_every={budget}",
            "eval_episodes=1",
            "agent.min_replay_size=2048",
            "policy.warmup_steps=2048",
        ]
        with scratch("sebulba-") as run_dir:
            summary = run(settings, overrides, run_dir=run_dir)
            updates = steady_rate(os.path.join(logs_of(run_dir, seeds), "learner.csv"), "learner_steps")
        updates = None if updates is None else updates * seeds
        single = updates if seeds == 1 else single
        settings.note(
            f"sac_mujoco {task}, {seeds} seed(s) on {summary.get('device')}: time spent {summary.get('time_s')}"
        )
        case = f"sac_mujoco {task} learner, {seeds} seed(s) per program"
        rows.append(Row("sebulba", case, updates, "SGD steps/s", ratio=ratio(updates, single)))
    return rows


def suite_sebulba(settings: Settings) -> list[Row]:
    """launcher=sebulba: ppo_atari's policy call on the learner's device (milliseconds from one thread and from
    two at once, calls/s); ppo_atari's acting steps/s on Pong (3 seeds, 24 copies) against ale-py alone with random
    actions (bound: 70% of it) and its policy call's milliseconds, with the actors one update behind the learner
    and with none; its acting with evaluation rounds beside it against without (bound: 0.9x) and evaluation's share
    of the run's time (bound: 10%); SAC's learner SGD steps/s with 1 and 5 seeds per program (ratio: to 1 seed).
    --quick: tiny budgets."""
    games = [name for name in settings.experiments or () if not name.endswith("-v5")] or ["Pong"]
    tasks = [name for name in settings.experiments or () if name.endswith("-v5")] or ["HalfCheetah-v5"]
    rows: list[Row] = []
    for game in games:
        rows += round_trip_rows(settings, game)
        rows += atari_rows(settings, game)
        rows += atari_evaluation_rows(settings, game)
    for task in tasks:
        rows += sac_rows(settings, task, SAC_SEEDS)
    return rows


# SBX (the JAX port of Stable-Baselines3) and its learning-phase speed script: ../shared/peers/setup_sbx.sh makes the
# venv; SBX_PYTHON and SBX_SCRIPT point elsewhere.
SBX = (
    os.environ.get("SBX_PYTHON", "/tmp/peer-sbx/bin/python"),
    os.environ.get("SBX_SCRIPT", "../shared/peers/sac_speed.py"),
)
LEARNING_START, LEARNING_END = 5_000, 15_000


def learning_rate(path: str) -> float | None:
    """Actor steps/s between the learning start and the last record of a log."""
    with open(path) as file:
        rows = [(int(row["actor_steps"]), float(row["wall_time_s"])) for row in csv.DictReader(file)]
    started = [row for row in rows if row[0] >= LEARNING_START]
    if len(started) < 2 or started[-1][1] <= started[0][1]:
        return None
    return (started[-1][0] - started[0][0]) / (started[-1][1] - started[0][1])


def ours_learning(settings: Settings, task: str, launcher: str) -> float | None:
    overrides = [
        "experiment=sac_mujoco",
        f"environment.name={task}",
        f"launcher={launcher}",
        f"max_actor_steps={LEARNING_END}",
        f"eval_every={LEARNING_END}",
        "eval_episodes=1",
        f"agent.min_replay_size={LEARNING_START}",
        f"policy.warmup_steps={LEARNING_START}",
    ]
    with scratch("sebulba-") as run_dir:
        run(settings, overrides, run_dir=run_dir)
        return learning_rate(os.path.join(run_dir, "logs", "actor.csv"))


def sbx_learning(task: str) -> float | None:
    import json
    import subprocess

    if not all(os.path.isfile(path) for path in SBX):
        return None
    command = [*SBX, "--lib", "sbx", "--env", task, "--starts", str(LEARNING_START), "--steps", str(LEARNING_END)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(result.stdout.strip().splitlines()[-1])["learning_steps_per_s"])


def suite_sebulba_cpu(settings: Settings) -> list[Row]:
    """SAC on HalfCheetah-v5 (sac_mujoco's settings), steps/s between its learning start (5,000) and 15,000 steps:
    launcher=sebulba, launcher=local (the reverb stack) and SBX (the JAX port of SB3, where SBX names it), taken in
    turns; ratio: to SBX. Meant for a CPU: the learner and the actor share its cores."""
    import importlib.util

    task = next(iter(settings.experiments or ()), "HalfCheetah-v5")
    cases = {"sebulba": lambda: ours_learning(settings, task, "sebulba")}
    if importlib.util.find_spec("reverb") is not None:
        cases["local"] = lambda: ours_learning(settings, task, "local")
    else:
        settings.note("sebulba_cpu: no launcher=local row (run the suite from the reverb stack's .venv)")
    if all(os.path.isfile(path) for path in SBX):
        cases["SBX"] = lambda: sbx_learning(task)
    else:
        settings.note(f"sebulba_cpu: no SBX row (needs {' and '.join(SBX)})")
    values = dict(zip(cases, in_turns(settings.repeats, *cases.values())))
    reference = values.get("SBX")
    return [
        Row("sebulba_cpu", f"SAC {task} learning phase, {name}", value, "steps/s", ratio=ratio(value, reference))
        for name, value in values.items()
    ]
