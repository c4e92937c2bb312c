"""`actor` and `learner`: the real acting and learning paths timed in this process, against what bounds them."""

from __future__ import annotations

import contextlib
import functools
import itertools
import tempfile
from typing import Any, Callable, Iterator

import dm_env
import numpy as np

from benchmarks.common import RUN_OVERRIDES, Row, Settings, in_turns, measure_rate, median, progress, ratio

POOL = 256  # Random actions and observations, drawn up front and cycled through.
EPISODE_LENGTH = 200  # Of the synthetic episodes fed to adders.
ACTOR_EXPERIMENTS, LEARNER_EXPERIMENTS = ("dqn_cartpole",), ("dqn_cartpole", "sac_pendulum")
NUM_ENVS_KEY, BACKEND_KEY = "environment.num_envs", "environment.backend"
# (copies, backend) per case: envpool where the config has the key and envpool the task.
CASES = ((1, None), (8, None), (32, None), (8, "envpool"), (32, "envpool"))
FUSED = 8  # SGD steps per learner call where a preset takes one.


def random_actions(action_spec: Any, batch: int | None = None) -> list[np.ndarray]:
    """POOL random actions (each of `batch` rows when given) valid for a dm_env spec."""
    rng, shape = np.random.default_rng(0), (POOL,) if batch is None else (POOL, batch)
    if hasattr(action_spec, "num_values"):
        return list(rng.integers(0, action_spec.num_values, size=shape).astype(action_spec.dtype))
    low, high = (np.broadcast_to(bound, action_spec.shape) for bound in (action_spec.minimum, action_spec.maximum))
    return list(rng.uniform(low, high, size=shape + action_spec.shape).astype(action_spec.dtype))


def random_steps(environment: Any) -> Callable[[], int]:
    """A step of a dm_env environment, or a vector of them (`num_envs`, resets by `env_ids`), with random actions."""
    num_envs, timestep = getattr(environment, "num_envs", None), environment.reset()
    actions = itertools.cycle(random_actions(environment.action_spec(), num_envs))

    def step() -> int:
        nonlocal timestep
        ended = np.flatnonzero(np.asarray(timestep.step_type) == dm_env.StepType.LAST)
        if ended.size:
            environment.reset() if num_envs is None else environment.reset(env_ids=ended)
        timestep = environment.step(next(actions))
        return num_envs or 1

    return step


@contextlib.contextmanager
def replay_server(builder: Any, environment_spec: Any) -> Iterator[Any]:
    """A client of a server here holding the agent's transition table without a rate limit (`MinSize(1)`)."""
    import reverb

    from rl.replay.adders import transition_codec
    from rl.replay.server import make_sequence_table, make_server

    name, size = builder.config.replay_table_name, int(builder.config.max_replay_size)
    signature, unlimited = transition_codec(environment_spec).signature(), reverb.rate_limiters.MinSize(1)
    server = make_server([make_sequence_table(name, signature, size, unlimited)])
    try:
        yield reverb.Client(f"localhost:{server.port}")
    finally:
        server.stop()


class SyntheticEpisodes:
    """Random fixed-length episodes into the agent's adder, `num_envs` copies at once; made warm, `items` written."""

    def __init__(self, builder: Any, client: Any, spec: Any, num_envs: int = 1, items: int = 0):
        import tree

        rng = np.random.default_rng(0)
        draw = lambda s: rng.standard_normal((num_envs, *s.shape)).astype(s.dtype)
        self._observations = [tree.map_structure(draw, spec.observations) for _ in range(POOL)]
        self._actions = random_actions(spec.actions, num_envs)
        self.adder, self._rows, self._t, self._k = builder.make_adder(client, spec), num_envs, 0, 0
        while self._k < EPISODE_LENGTH or self.adder.num_items < items:
            self.step()
        self.finish()

    def _timestep(self, step_type: dm_env.StepType) -> dm_env.TimeStep:
        return dm_env.TimeStep(
            step_type=np.full(self._rows, step_type, dtype=np.int8),
            reward=np.ones(self._rows, np.float32),
            discount=np.full(self._rows, 0.0 if step_type == dm_env.StepType.LAST else 1.0, np.float32),
            observation=self._observations[self._k % POOL],
        )

    def step(self) -> int:
        """One step of every copy; the items the adder created."""
        before = self.adder.num_items
        if self._t == 0:
            self.adder.add_first(self._timestep(dm_env.StepType.FIRST))
        self._t, self._k = (self._t + 1) % EPISODE_LENGTH, self._k + 1
        step_type = dm_env.StepType.MID if self._t else dm_env.StepType.LAST
        self.adder.add(self._actions[self._k % POOL], self._timestep(step_type))
        return self.adder.num_items - before

    def finish(self) -> None:
        """Waits for the items in flight; the next step starts a new episode."""
        self.adder.reset()
        self._t = 0


def actor_rates(experiment: Any, num_envs: int, settings: Settings) -> tuple[float, ...]:
    """Medians of (actor, environment, adder, actor / min(the two)) over rounds timing the three back to back."""
    import jax

    from rl.counting import Counter
    from rl.experiments.builders import NodeBuilder, build_learner

    builder, spec = experiment.builder, experiment.environment_spec
    with replay_server(builder, spec) as client:
        learner = build_learner(experiment, jax.random.PRNGKey(0), None, Counter())  # It only serves parameters.
        loop = NodeBuilder(experiment, num_actors=1).make_actor(0, client, learner, Counter())
        steps_per_call = getattr(loop, "num_envs", 1)

        def act() -> int:
            loop.step()
            return steps_per_call

        for _ in range(50 if settings.quick else 500):  # Warm-up: compilation, first episodes.
            act()
        loop.flush()  # The adder calls the actor still holds; inside the timed span below too.
        environment_step, episodes = random_steps(loop.environment), SyntheticEpisodes(builder, client, spec, num_envs)
        rounds = []
        for _ in range(settings.repeats):
            rates = [measure_rate(act, settings.seconds, loop.flush)]
            loop.drop_episodes()  # Its environment is stepped next.
            rates.append(measure_rate(environment_step, settings.seconds))
            rates.append(measure_rate(episodes.step, settings.seconds, episodes.finish))
            rounds.append((*rates, rates[0] / min(rates[1:])))
        loop.actor.adder.close()
    return tuple(median([r[k] for r in rounds]) for k in range(4))


def insert_paths(settings: Settings) -> list[float | None]:
    """Items/s writing one 4-column step and one item referencing it through `item_inserter` (reverb's C++ writer:
    what the adders use) and through reverb 0.14's public TrajectoryWriter calls, in turns, flushing every 32."""
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

        def rate(insert: Callable[[], None]) -> float:
            def write() -> int:
                for _ in range(32):
                    insert()
                writer.flush()
                return 32

            return measure_rate(write, settings.seconds)

        medians = in_turns(settings.repeats, lambda: rate(lambda: native("t", 1.0, columns)), lambda: rate(public))
        writer.close()
    finally:
        server.stop()
    return medians


def suite_actor(settings: Settings) -> list[Row]:
    """actor steps/s through the real EnvironmentLoop + jitted policy + adder into a reverb server, for
    environment.num_envs 1, 8 and 32 and the envpool backend (experiment dqn_cartpole unless --experiments; dqn_pong
    for Atari). bound: min(the loop's environment alone, the adder's inserts), both measured here; ratio = value /
    bound."""
    from rl.experiments.validation import ConfigError

    rows: list[Row] = []
    for name in settings.experiments or ACTOR_EXPERIMENTS:
        base = [f"experiment={name}", *RUN_OVERRIDES]
        vectorised, backends = (settings.has_key(key, base) for key in (NUM_ENVS_KEY, BACKEND_KEY))
        for num_envs, backend in CASES:
            case = f"{name} num_envs={num_envs}" + (f" backend={backend}" if backend else "")
            missing = (
                NUM_ENVS_KEY if num_envs > 1 and not vectorised else BACKEND_KEY if backend and not backends else ""
            )
            if missing:
                settings.note(f"actor: {case} skipped ({missing} is not in the config)")
                continue
            overrides = base + ([f"{NUM_ENVS_KEY}={num_envs}"] if vectorised else [])
            overrides += [f"{BACKEND_KEY}={backend}"] if backend else []
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


def learner_rates(experiment: Any, settings: Settings, reverb_fed: bool = True) -> list[float | None]:
    """Updates/s of the learner fed one in-memory batch (and by reverb), measured in turns: load hits both alike."""
    import jax

    from rl.counting import Counter
    from rl.loggers.base import TimeFilter

    builder, spec = experiment.builder, experiment.environment_spec
    sgd_steps = int(getattr(builder.config, "sgd_steps_per_learner_step", 1))

    def make_learner(dataset: Any) -> Any:  # As build_learner makes it.
        logger = TimeFilter(experiment.logger_factory("learner", "learner_steps"), experiment.learner_log_interval_s)
        networks = experiment.network_factory(environment_spec=spec)
        counter = Counter(Counter(), "learner")
        return builder.make_learner(jax.random.PRNGKey(0), networks, dataset, client, counter, logger)

    def rate(learner: Any) -> float:  # Its pending updates done inside the timed span.
        def step() -> int:
            learner.step()
            return sgd_steps

        return measure_rate(step, settings.seconds, lambda: jax.block_until_ready(learner.save()))

    with replay_server(builder, spec) as client:
        items = builder.samples_per_learner_step * (2 if settings.quick else 10)
        SyntheticEpisodes(builder, client, spec, items=max(items, 1_000 if settings.quick else 10_000))
        dataset = builder.make_dataset_iterator(client, spec)
        try:
            learners = [make_learner(itertools.repeat(next(dataset)))] + ([make_learner(dataset)] if reverb_fed else [])
            for learner in learners:  # Warm-up: compilation, the first prefetched batches.
                for _ in range(3):
                    learner.step()
            return in_turns(settings.repeats, *[functools.partial(rate, learner) for learner in learners])
        finally:
            getattr(dataset, "close", lambda: None)()  # An on-policy queue has none.


def suite_learner(settings: Settings) -> list[Row]:
    """learner SGD updates/s of DQN (dqn_cartpole) and SAC (sac_pendulum) fed by the real dataset iterator from a
    pre-filled reverb table, against the same learner fed one fixed in-memory batch: ratio = reverb-fed / in-memory.
    Also 8 SGD steps fused per call (lax.scan) where a preset takes one: ratio = fused / one step per call."""
    rows: list[Row] = []
    for name in settings.experiments or LEARNER_EXPERIMENTS:
        base = [f"experiment={name}", *RUN_OVERRIDES]
        with tempfile.TemporaryDirectory() as run_dir:
            experiment = settings.compose(base, run_dir)
            in_memory, fed = learner_rates(experiment, settings)
            rows += [
                Row("learner", f"{name} in-memory batch", in_memory, "updates/s"),
                Row("learner", f"{name} reverb-fed", fed, "updates/s", in_memory, ratio(fed, in_memory)),
            ]
            progress(f"learner {name}: in-memory {in_memory:,.0f} updates/s, reverb-fed {fed:,.0f} updates/s")
            if getattr(experiment.builder.config, "sgd_steps_per_learner_step", None) == 1:
                fused_experiment = settings.compose(base + [f"agent.sgd_steps_per_learner_step={FUSED}"], run_dir)
                [fused] = learner_rates(fused_experiment, settings, reverb_fed=False)
                case = f"{name} in-memory, {FUSED} SGD steps fused per call"
                rows.append(Row("learner", case, fused, "updates/s", in_memory, ratio(fused, in_memory)))
                progress(f"learner {name}: {FUSED} fused {fused:,.0f} updates/s")
    return rows
