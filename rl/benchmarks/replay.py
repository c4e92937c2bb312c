"""`replay`: what reverb lets an actor insert and a learner sample, in items per second.

Inserts go through the agent's own adder (`builder.make_adder`: single n-step
transitions, one item per environment step) fed synthetic episodes shaped like the
environment's; samples come through the learner's own dataset iterator
(`builder.make_dataset_iterator`) from a pre-filled table. The table is the agent's
transition table with a `MinSize(1)` rate limiter, so neither side waits for the other:
these are upper bounds, not a replay ratio. Each is measured with the server in this
process (as in `launcher=local`) and in another process (as in `launcher=ray`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import tempfile
from typing import Any, Iterator

import dm_env
import numpy as np
import tree

from rl.benchmarks.common import Row, Settings, measure_rate, median, progress, ratio
from rl.benchmarks.env import random_actions

EXPERIMENT = "dqn_cartpole"
BATCH_SIZES = (128, 256)
EPISODE_LENGTH = 200
# Observations and actions drawn up front and cycled through.
POOL = 64
SERVER_START_TIMEOUT_S = 120.0


def table_settings(builder: Any, environment_spec: Any) -> tuple[str, Any, int]:
    """The agent's transition table: name, environment spec (signature) and size."""
    return builder.config.replay_table_name, environment_spec, int(builder.config.max_replay_size)


def no_limit_table(name: str, environment_spec: Any, max_size: int) -> Any:
    """A transition table sampled without limits (`MinSize(1)`)."""
    import reverb

    from rl.replay.tables import make_transition_table

    return make_transition_table(name, environment_spec, max_size, reverb.rate_limiters.MinSize(1))


def _serve(table: tuple[str, Any, int], connection: Any) -> None:
    """Runs in a child process: a server with the no-limit table until told to stop."""
    from rl.replay.server import make_server

    server = make_server([no_limit_table(*table)])
    connection.send(server.port)
    connection.recv()
    server.stop()


@contextlib.contextmanager
def replay_server(builder: Any, environment_spec: Any, other_process: bool) -> Iterator[Any]:
    """A reverb client to a server holding the agent's table without a rate limit, in
    this process or in a spawned one."""
    import reverb

    from rl.replay.server import make_server

    table = table_settings(builder, environment_spec)
    if not other_process:
        server = make_server([no_limit_table(*table)])
        try:
            yield reverb.Client(f"localhost:{server.port}")
        finally:
            server.stop()
        return
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=_serve, args=(table, there), daemon=True)
    process.start()
    try:
        if not here.poll(SERVER_START_TIMEOUT_S):
            raise RuntimeError(f"the replay server process did not start within {SERVER_START_TIMEOUT_S} s")
        yield reverb.Client(f"localhost:{here.recv()}")
    finally:
        with contextlib.suppress(OSError):
            here.send("stop")
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()


class SyntheticEpisodes:
    """Feeds an adder fixed-length episodes of random observations and actions, batched
    over `num_envs` copies that step together (the adders' interface)."""

    def __init__(self, adder: Any, environment_spec: Any, num_envs: int = 1, seed: int = 0):
        self.adder = adder
        self._rows = num_envs
        rng = np.random.default_rng(seed)

        def draw(spec: Any) -> np.ndarray:
            return rng.standard_normal((num_envs, *spec.shape)).astype(spec.dtype)

        self._observations = [tree.map_structure(draw, environment_spec.observations) for _ in range(POOL)]
        self._actions = random_actions(environment_spec.actions, POOL, num_envs, seed)
        self._t = 0
        self._k = 0

    def _timestep(self, step_type: dm_env.StepType) -> dm_env.TimeStep:
        last = step_type == dm_env.StepType.LAST
        return dm_env.TimeStep(
            step_type=np.full(self._rows, step_type, dtype=np.int8),
            reward=np.ones(self._rows, np.float32),
            discount=np.full(self._rows, 0.0 if last else 1.0, np.float32),
            observation=self._observations[self._k % POOL],
        )

    def step(self) -> int:
        """One environment step (of every copy); returns the items the adder created."""
        before = self.adder.num_items
        if self._t == 0:
            self.adder.add_first(self._timestep(dm_env.StepType.FIRST))
        self._t += 1
        self._k += 1
        step_type = dm_env.StepType.LAST if self._t == EPISODE_LENGTH else dm_env.StepType.MID
        self.adder.add(self._actions[self._k % POOL], self._timestep(step_type))
        if step_type == dm_env.StepType.LAST:
            self._t = 0
        return self.adder.num_items - before

    def finish(self) -> None:
        """Waits for the items in flight; the next step starts a new episode."""
        self.adder.reset()
        self._t = 0


def insert_rate(builder: Any, client: Any, environment_spec: Any, settings: Settings, num_envs: int = 1) -> float:
    """Items/s the agent's adder writes, median over `settings.repeats`."""
    feeder = SyntheticEpisodes(builder.make_adder(client, environment_spec), environment_spec, num_envs)
    for _ in range(EPISODE_LENGTH):  # Warm-up: the writer's first chunks.
        feeder.step()
    feeder.finish()
    return median([measure_rate(feeder.step, settings.seconds, feeder.finish) for _ in range(settings.repeats)])


def fill(builder: Any, client: Any, environment_spec: Any, items: int) -> None:
    """Writes at least `items` items through the agent's adder."""
    feeder = SyntheticEpisodes(builder.make_adder(client, environment_spec), environment_spec)
    while feeder.adder.num_items < items:
        feeder.step()
    feeder.finish()


def sample_rate(builder: Any, client: Any, environment_spec: Any, settings: Settings) -> float:
    """Transitions/s out of the learner's dataset iterator, median over `settings.repeats`."""
    iterator = builder.make_dataset_iterator(client, environment_spec)
    batch = builder.samples_per_learner_step

    def step() -> int:
        next(iterator)
        return batch

    try:
        for _ in range(5):  # Warm-up: the dataset's pipeline and first requests.
            step()
        return median([measure_rate(step, settings.seconds) for _ in range(settings.repeats)])
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def suite_replay(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    in_process: dict[str, float | None] = {}
    for other_process in (False, True):
        where = "another process" if other_process else "in-process"
        with tempfile.TemporaryDirectory() as run_dir:
            for k, batch in enumerate(BATCH_SIZES):
                experiment = settings.compose(
                    [
                        f"experiment={EXPERIMENT}",
                        f"agent.batch_size={batch}",
                        "agent.sgd_steps_per_learner_step=1",
                        "logger=csv",
                    ],
                    run_dir,
                )
                builder, spec = experiment.builder, experiment.environment_spec
                with replay_server(builder, spec, other_process) as client:
                    cases: list[tuple[str, float | None, str]] = []
                    if k == 0:
                        n_step = builder.config.n_step
                        value = insert_rate(builder, client, spec, settings)
                        cases.append((f"insert {n_step}-step transitions, adder ({where})", value, "items/s"))
                    items = 2_000 if settings.quick else 50_000
                    fill(builder, client, spec, max(items, 4 * batch))
                    value = sample_rate(builder, client, spec, settings)
                    cases.append((f"sample batch {batch}, dataset iterator ({where})", value, "transitions/s"))
                for case, value, unit in cases:
                    kind = case.replace(f" ({where})", "")
                    if other_process:
                        row = Row("replay", case, value, unit, ratio=ratio(value, in_process.get(kind)))
                    else:
                        in_process[kind] = value
                        row = Row("replay", case, value, unit)
                    rows.append(row)
                    progress(f"replay {case}: {value:,.0f} {unit}")
    return rows
