"""`anakin`: steps/s of whole compiled runs (launcher=anakin) for PPO and DQN on gymnax
CartPole with 1 and 8 seeds, against raw gymnax steps/s as the bound.

Each training case composes its preset (ppo_gymnax_cartpole, dqn_gymnax_cartpole),
compiles the programs exactly as the launcher does (rl/anakin/driver.py) and runs
chunks: `compile` is the seconds to initialise and compile (the persistent XLA cache is
on, as in a run: a second invocation finds the programs there), `steps/s` counts every
replica's environment steps per second of chunk time, and `incl. compile` divides the
preset's whole budget by compile time plus the budget's time at that rate. Replicas
are spread over the devices as the launcher spreads them (rl/anakin/devices.py). bound: raw
gymnax steps/s of the same number of copies (a compiled scan of random actions);
ratio = value / bound. The `8 seeds vs 8 runs` rows compare the time of one 8-seed run
of the whole budget with 8 single-seed runs (compile included), both from figures
measured here. As in a run, XLA's CPU runtime is the one launcher=anakin picks
(rl/anakin/startup.py: `--xla_cpu_use_thunk_runtime=false` unless XLA_FLAGS is set); a
note says which.
"""

from __future__ import annotations

import tempfile
import time

import jax

from rl.benchmarks.common import Row, Settings, median, progress, ratio

PRESETS = {"ppo": "ppo_gymnax_cartpole", "dqn": "dqn_gymnax_cartpole"}
SEEDS = (1, 8)


def raw_gymnax_rate(num_envs: int, settings: Settings, steps: int = 2000) -> float:
    """gymnax CartPole-v1 steps/s of `num_envs` copies (all counted) with random actions,
    `steps` batched steps per compiled scan."""
    from rl.environments.gymnax_vector import GymnaxVector

    vector = GymnaxVector("CartPole-v1", num_envs)

    def run(state, key):
        def one(state, key):
            action_key, step_key = jax.random.split(key)
            action = jax.random.randint(action_key, (num_envs,), 0, 2)
            return vector.step(state, action, step_key)[0], None

        return jax.lax.scan(one, state, jax.random.split(key, steps))[0]

    run = jax.jit(run)
    state = vector.reset(jax.random.PRNGKey(0))
    jax.block_until_ready(run(state, jax.random.PRNGKey(1)))
    rates = []
    for k in range(settings.repeats):
        start = time.perf_counter()
        state = jax.block_until_ready(run(state, jax.random.PRNGKey(k)))
        rates.append(steps * num_envs / (time.perf_counter() - start))
    return median(rates)


def training_figures(agent: str, num_seeds: int, settings: Settings) -> dict[str, float]:
    """compile_s, steps_per_second (all replicas) and the budget of one replica."""
    from rl.anakin.checks import check_experiment
    from rl.anakin.devices import replica_sharding
    from rl.anakin.driver import compile_programs
    from rl.anakin.replicas import replica_keys
    from rl.anakin.systems import make_system

    overrides = [f"experiment={PRESETS[agent]}", "logger=csv", "progress=false"]
    with tempfile.TemporaryDirectory() as run_dir:
        experiment = settings.compose(overrides, run_dir)
        steps_per_chunk = check_experiment(experiment, None)
        system, evaluation = make_system(experiment)
        compiled, state = compile_programs(
            system, evaluation, replica_keys(0, num_seeds), steps_per_chunk, replica_sharding(num_seeds)
        )
        chunk_steps = steps_per_chunk * system.steps_per_update * num_seeds
        chunks = max(
            1,
            min(experiment.max_actor_steps // (steps_per_chunk * system.steps_per_update), 2 if settings.quick else 3),
        )
        rates = []
        for _ in range(settings.repeats):
            start = time.perf_counter()
            for _ in range(chunks):
                state, metrics = compiled.chunk(state)
            jax.block_until_ready(metrics)
            rates.append(chunk_steps * chunks / (time.perf_counter() - start))
    return {
        "compile_s": compiled.compile_time_s,
        "steps_per_second": median(rates),
        "budget": experiment.max_actor_steps,
        "num_envs": experiment.num_envs,
    }


def suite_anakin(settings: Settings) -> list[Row]:
    import os

    from rl.anakin.startup import prefer_fast_cpu_runtime

    prefer_fast_cpu_runtime()  # As AnakinLauncher does, before JAX starts its backends.
    settings.note(f"anakin: XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    rows: list[Row] = []
    bounds: dict[int, float] = {}
    for agent in PRESETS:
        whole: dict[int, float] = {}
        for num_seeds in SEEDS:
            progress(f"anakin: {agent}, {num_seeds} seed(s)")
            figures = training_figures(agent, num_seeds, settings)
            copies = figures["num_envs"] * num_seeds
            if copies not in bounds:
                bounds[copies] = raw_gymnax_rate(copies, settings)
            bound = bounds[copies]
            rate = figures["steps_per_second"]
            total = figures["budget"] * num_seeds
            whole[num_seeds] = figures["compile_s"] + total / rate
            case = f"{agent} CartPole {num_seeds} seed{'s' if num_seeds > 1 else ''}"
            rows.append(Row("anakin", f"{case}: steps/s after compile", rate, "steps/s", bound, ratio(rate, bound)))
            including = total / whole[num_seeds]
            rows.append(
                Row("anakin", f"{case}: steps/s incl. compile", including, "steps/s", bound, ratio(including, bound))
            )
            rows.append(Row("anakin", f"{case}: compile", figures["compile_s"], "s"))
        if 1 in whole and 8 in whole:
            eight_runs = 8 * whole[1]
            rows.append(
                Row(
                    "anakin",
                    f"{agent} 8 seeds vs 8 runs: whole budget",
                    whole[8],
                    "s",
                    eight_runs,
                    ratio(whole[8], eight_runs),
                )
            )
    for copies, bound in sorted(bounds.items()):
        rows.append(Row("anakin", f"raw gymnax CartPole, {copies} copies", bound, "steps/s"))
    return rows
