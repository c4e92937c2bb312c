"""`actor`: actor steps/s through the real acting path (no learner, no rate limit), against what bounds it."""

from __future__ import annotations

import functools
import tempfile
from typing import Any, Callable

from benchmarks.common import RandomSteps, Row, Settings, SyntheticEpisodes, in_turns, measure_rate, median
from benchmarks.common import progress, replay_server

EXPERIMENTS = ("dqn_cartpole",)
NUM_ENVS_KEY, BACKEND_KEY = "environment.num_envs", "environment.backend"
# (copies, backend) per case: envpool where the config has the key and envpool the task.
CASES = ((1, None), (8, None), (32, None), (8, "envpool"), (32, "envpool"))


def actor_rates(experiment: Any, num_envs: int, settings: Settings) -> tuple[float, ...]:
    """Medians of (actor, environment, adder, actor / min(the two)) over rounds timing the three back to back."""
    import jax

    from rl.counting import Counter
    from rl.experiments.builders import DistributedProgram
    from rl.loggers.base import NoOpLogger

    builder, spec = experiment.builder, experiment.environment_spec
    with replay_server(builder, spec) as client:
        networks = experiment.network_factory(environment_spec=spec)  # The learner only serves its parameters.
        learner = builder.make_learner(jax.random.PRNGKey(0), networks, iter(()), client, Counter(), NoOpLogger())
        loop = DistributedProgram(experiment, num_actors=1).make_actor(0, client, learner, Counter())
        steps_per_call = getattr(loop, "num_envs", 1)

        def act() -> int:
            loop.step()
            return steps_per_call

        for _ in range(50 if settings.quick else 500):  # Warm-up: compilation, first episodes.
            act()
        loop.flush()  # The adder calls the actor still holds; inside the timed span below too.
        environment, episodes = RandomSteps(loop.environment), SyntheticEpisodes(builder, client, spec, num_envs)
        rounds = []
        for _ in range(settings.repeats):
            rates = [measure_rate(act, settings.seconds, loop.flush)]
            loop.drop_episodes()  # Its environment is stepped next.
            rates.append(measure_rate(environment.step, settings.seconds))
            rates.append(measure_rate(episodes.step, settings.seconds, episodes.finish))
            rounds.append((*rates, rates[0] / min(rates[1:])))
        loop.actor.adder.close()
    return tuple(median([r[k] for r in rounds]) for k in range(4))


def insert_paths(settings: Settings) -> list[float | None]:
    """Items/s writing one 4-column step and one item referencing it through `item_inserter` (reverb's C++ writer:
    what the adders use) and through reverb 0.14's public TrajectoryWriter calls, in turns, flushing every 32."""
    import numpy as np
    import reverb

    from rl.replay.adders import item_inserter
    from rl.replay.server import make_server

    table = reverb.Table(
        "t", reverb.selectors.Uniform(), reverb.selectors.Fifo(), 100_000, reverb.rate_limiters.MinSize(1)
    )
    server = make_server([table])
    columns = [np.zeros(4, np.float32), np.int32(0), np.float32(0.0), np.float32(1.0)]
    try:
        writer = reverb.Client(f"localhost:{server.port}").trajectory_writer(num_keep_alive_refs=1)
        native = item_inserter(writer)

        def public() -> None:
            writer.append(columns)
            writer.create_item("t", 1.0, [column[-1] for column in writer.history])

        def write(insert: Callable[[], None]) -> int:
            for _ in range(32):
                insert()
            writer.flush()
            return 32

        rates = [lambda: native("t", 1.0, columns), public]
        rates = [
            functools.partial(measure_rate, functools.partial(write, insert), settings.seconds) for insert in rates
        ]
        medians = in_turns(settings.repeats, *rates)
        writer.close()
    finally:
        server.stop()
    return medians


def suite_actor(settings: Settings) -> list[Row]:
    """actor steps/s through the real EnvironmentLoop + jitted policy + adder into a reverb server, for
    environment.num_envs 1, 8 and 32 and the envpool backend (experiment dqn_cartpole unless --experiments; dqn_pong
    for Atari). bound: min(the loop's environment alone, the adder's inserts), both measured here; ratio = value /
    bound."""
    from rl.experiments.make_experiment import ConfigError

    rows: list[Row] = []
    for name in settings.experiments or EXPERIMENTS:
        base = [f"experiment={name}", "logger=csv", "progress=false", "checkpoint=false"]
        vectorised, backends = (settings.has_key(key, base) for key in (NUM_ENVS_KEY, BACKEND_KEY))
        for num_envs, backend in CASES:
            if (num_envs > 1 and not vectorised) or (backend and not backends):
                key = NUM_ENVS_KEY if num_envs > 1 and not vectorised else BACKEND_KEY
                settings.note(f"actor: {name} num_envs={num_envs} {backend or ''} skipped ({key} is not in the config)")
                continue
            overrides = base + ([f"{NUM_ENVS_KEY}={num_envs}"] if vectorised else [])
            overrides += [f"{BACKEND_KEY}={backend}"] if backend else []
            case = f"{name} num_envs={num_envs}" + (f" backend={backend}" if backend else "")
            with tempfile.TemporaryDirectory() as run_dir:
                try:
                    experiment = settings.compose(overrides, run_dir)
                except ConfigError as error:
                    settings.note(f"actor: {case} skipped ({error})")
                    continue
                actor, environment, inserts, ratio = actor_rates(experiment, num_envs, settings)
            serial = 1.0 / (1.0 / environment + 1.0 / inserts)  # Stepping, then writing, at no other cost.
            rows += [
                Row("actor", case, actor, "steps/s", min(environment, inserts), ratio),
                Row("actor", f"{case}: environment alone", environment, "steps/s"),
                Row("actor", f"{case}: adder inserts", inserts, "items/s"),
                Row("actor", f"{case}: serial ceiling", serial, "steps/s", ratio=actor / serial),
            ]
            progress(f"actor {case}: {actor:,.0f} steps/s, environment {environment:,.0f}, adder {inserts:,.0f}/s")
    native, public = insert_paths(settings)  # What rl/replay/adders.py item_inserter's private call buys.
    rows += [
        Row("actor", "insert path: reverb's C++ writer (item_inserter)", native, "items/s", public, native / public),
        Row("actor", "insert path: reverb's public TrajectoryWriter", public, "items/s"),
    ]
    progress(f"actor insert paths: {native:,.0f} items/s through the C++ writer, {public:,.0f} through the public API")
    return rows
