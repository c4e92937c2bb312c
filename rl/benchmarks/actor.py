"""`actor`: actor steps/s through the real acting path, against what bounds it.

The experiment is composed like a training run (`environment.num_envs=N` where the
config has that key); its actor loop is built by `DistributedProgram.make_actor`: the
environment (N copies), the jitted behaviour policy on the learner's parameters, the
agent's adder writing to a reverb server in this process, the counter and the actor's
logger. The server's table has no rate limit and no learner runs, so the figure is
acting alone. Its bound, measured in the same invocation, is the smaller of the loop's
own environment stepped with random actions and the agent's adder fed synthetic episodes
of the same shape. The three are timed in rounds, back to back (actor, environment,
adder), so that the shared machine's load hits them alike; `ratio` is the median of the
rounds' steps/s / bound. A fourth row, `serial ceiling` = 1 / (1/environment + 1/adder),
is what an actor that steps the environment and then writes, with a free policy and
loop, would reach; its ratio is the actor's steps/s against it.
"""

from __future__ import annotations

import tempfile
from typing import Any

from rl.benchmarks.common import Row, Settings, measure_rate, median, progress
from rl.benchmarks.env import DmEnvStepper
from rl.benchmarks.replay import EPISODE_LENGTH, SyntheticEpisodes, replay_server

EXPERIMENTS = ("dqn_cartpole",)
NUM_ENVS = (1, 8, 32)
NUM_ENVS_KEY = "environment.num_envs"
BACKEND_KEY = "environment.backend"
# (copies, backend) per case: envpool where the config has the key and envpool the task.
CASES = ((1, None), (8, None), (32, None), (8, "envpool"), (32, "envpool"))


def _rates(experiment: Any, num_envs: int, settings: Settings) -> tuple[float, float, float, float]:
    """(actor steps/s, environment steps/s, adder items/s, ratio) of one composed
    experiment: medians over `settings.repeats` rounds, each timing the three back to back
    (so that a change in the machine's load hits them alike); the ratio is the median of
    the rounds' actor / min(environment, adder)."""
    import jax

    from rl.counting import Counter
    from rl.experiments.distributed import DistributedProgram
    from rl.loggers.base import NoOpLogger

    builder, spec = experiment.builder, experiment.environment_spec
    with replay_server(builder, spec, other_process=False) as client:
        # The learner only serves its initial parameters: it never steps.
        networks = experiment.network_factory(environment_spec=spec)
        learner = builder.make_learner(jax.random.PRNGKey(0), networks, iter(()), client, Counter(), NoOpLogger())
        program = DistributedProgram(experiment, num_actors=1)  # Its evaluators are never built.
        # The adder where a local run has it (`adder_process`: a child process beside the actor).
        loop = program.make_actor(0, client, learner, Counter(), adder_process=experiment.adder_process)
        steps_per_call = getattr(loop, "num_envs", 1)

        def act() -> int:
            loop.step()
            return steps_per_call

        def finish() -> None:
            """The adder calls the actor still holds (it makes a step's calls during the
            next policy call) are made, by an adder process too, inside the timed span."""
            loop.flush()
            sync = getattr(loop.actor.adder, "sync", None)
            if sync is not None:
                sync()

        for _ in range(50 if settings.quick else 500):  # Warm-up: compilation, first episodes.
            act()
        finish()
        stepper = DmEnvStepper(loop.environment)
        feeder = SyntheticEpisodes(builder.make_adder(client, spec), spec, num_envs)
        for _ in range(EPISODE_LENGTH):  # Warm-up: the writer's first chunks.
            feeder.step()
        feeder.finish()
        rounds = []
        for _ in range(settings.repeats):
            actor = measure_rate(act, settings.seconds, finish)
            loop.drop_episodes()  # The stepper below steps the loop's environment.
            environment = measure_rate(stepper.step, settings.seconds)
            inserts = measure_rate(feeder.step, settings.seconds, feeder.finish)
            rounds.append((actor, environment, inserts, actor / min(environment, inserts)))
        close = getattr(loop.actor.adder, "close", None)
        if close is not None:
            close()
    actor, environment, inserts, ratio = (median([r[k] for r in rounds]) for k in range(4))
    return actor, environment, inserts, ratio


def suite_actor(settings: Settings) -> list[Row]:
    from rl.experiments.validation import ConfigError

    rows: list[Row] = []
    for name in settings.experiments or EXPERIMENTS:
        base = [f"experiment={name}", "logger=csv", "progress=false", "checkpoint=false"]
        vectorised = settings.has_key(NUM_ENVS_KEY, base)
        backends = settings.has_key(BACKEND_KEY, base)
        for num_envs, backend in CASES:
            if (num_envs > 1 and not vectorised) or (backend is not None and not backends):
                key = NUM_ENVS_KEY if num_envs > 1 and not vectorised else BACKEND_KEY
                settings.note(f"actor: {name} num_envs={num_envs} {backend or ''} skipped ({key} is not in the config)")
                continue
            overrides = base + ([f"{NUM_ENVS_KEY}={num_envs}"] if vectorised else [])
            overrides += [f"{BACKEND_KEY}={backend}"] if backend is not None else []
            case = f"{name} num_envs={num_envs}" + (f" backend={backend}" if backend else "")
            with tempfile.TemporaryDirectory() as run_dir:
                try:
                    experiment = settings.compose(overrides, run_dir)
                except ConfigError as error:
                    settings.note(f"actor: {case} skipped ({error})")
                    continue
                actor, environment, inserts, ratio = _rates(experiment, num_envs, settings)
            bound = min(environment, inserts)
            serial = 1.0 / (1.0 / environment + 1.0 / inserts)
            rows += [
                Row("actor", case, actor, "steps/s", bound, ratio),
                Row("actor", f"{case}: environment alone", environment, "steps/s"),
                Row("actor", f"{case}: adder inserts", inserts, "items/s"),
                # What a loop running the two one after the other, at no other cost, reaches.
                Row("actor", f"{case}: serial ceiling", serial, "steps/s", ratio=actor / serial),
            ]
            progress(
                f"actor {case}: {actor:,.0f} steps/s; environment {environment:,.0f} steps/s, "
                f"adder {inserts:,.0f} items/s"
            )
    return rows
