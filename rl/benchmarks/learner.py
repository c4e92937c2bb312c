"""`learner`: SGD updates/s of a learner fed by reverb, against the same learner fed from
memory.

The reverb-fed learner is built as a run builds it (`build_learner`'s recipe: the agent's
dataset iterator, prefetching included, reading a table pre-filled through the agent's
adder, here with no rate limit; the learner's logger and counter). The in-memory one is the same agent's learner, with the same logger
and counter, fed one batch from that table over and over, so its rate is the update's own
(the bound for replay-fed training). `ratio` = reverb-fed / in-memory. For presets doing
one SGD step per learner step, the same batch of 8 steps fused in one call (lax.scan) is
measured in memory too: `ratio` = fused / one step per call.
"""

from __future__ import annotations

import itertools
import tempfile
from typing import Any, Iterator

from rl.benchmarks.common import Row, Settings, measure_rate, median, progress, ratio
from rl.benchmarks.replay import fill, replay_server

EXPERIMENTS = ("dqn_cartpole", "sac_pendulum")
FUSED = 8


def _close(iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _alternating_rates(learners: list[Any], sgd_steps: int, settings: Settings) -> list[float | None]:
    """Median SGD updates/s of each learner's `step()`, measured in turns (A, B, A, B, ...)
    so that a change in the machine's load hits every learner alike."""
    import jax

    def stepper(learner: Any) -> Any:
        def step() -> int:
            learner.step()
            return sgd_steps

        return step

    def waiter(learner: Any) -> Any:
        return lambda: jax.block_until_ready(learner.save())

    for learner in learners:  # Warm-up: compilation, the first prefetched batches.
        for _ in range(3):
            learner.step()
        waiter(learner)()
    rounds = [
        [measure_rate(stepper(learner), settings.seconds, waiter(learner)) for learner in learners]
        for _ in range(settings.repeats)
    ]
    return [median([round_[k] for round_ in rounds]) for k in range(len(learners))]


def _learner_rates(experiment: Any, settings: Settings, reverb_fed: bool = True) -> tuple[float | None, float | None]:
    """(in-memory, reverb-fed) updates/s of the experiment's learner (reverb-fed None
    when not asked for)."""
    import jax

    from rl.counting import Counter
    from rl.loggers.aggregators import TimeFilter

    builder, spec = experiment.builder, experiment.environment_spec
    sgd_steps = int(getattr(builder.config, "sgd_steps_per_learner_step", 1))

    def make_learner(dataset: Iterator[Any]) -> Any:
        """The learner `build_learner` makes, on `dataset`."""
        logger = TimeFilter(experiment.logger_factory("learner", "learner_steps"), experiment.learner_log_interval_s)
        networks = experiment.network_factory(environment_spec=spec)
        counter = Counter(Counter(), "learner", time_delta=0.0)
        return builder.make_learner(jax.random.PRNGKey(0), networks, dataset, client, counter, logger)

    with replay_server(builder, spec, other_process=False) as client:
        items = builder.samples_per_learner_step * (2 if settings.quick else 10)
        fill(builder, client, spec, max(items, 1_000 if settings.quick else 10_000))
        dataset = builder.make_dataset_iterator(client, spec)
        batch = next(dataset)
        _close(dataset)
        learners = [make_learner(itertools.repeat(batch))]
        dataset = builder.make_dataset_iterator(client, spec) if reverb_fed else None
        try:
            if dataset is not None:
                learners.append(make_learner(dataset))
            rates = _alternating_rates(learners, sgd_steps, settings)
        finally:
            _close(dataset)
    return rates[0], (rates[1] if reverb_fed else None)


def suite_learner(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    for name in settings.experiments or EXPERIMENTS:
        base = [f"experiment={name}", "logger=csv", "progress=false", "checkpoint=false"]
        with tempfile.TemporaryDirectory() as run_dir:
            experiment = settings.compose(base, run_dir)
            in_memory, fed = _learner_rates(experiment, settings)
            rows += [
                Row("learner", f"{name} in-memory batch", in_memory, "updates/s"),
                Row("learner", f"{name} reverb-fed", fed, "updates/s", in_memory, ratio(fed, in_memory)),
            ]
            progress(f"learner {name}: in-memory {in_memory:,.0f} updates/s, reverb-fed {fed:,.0f} updates/s")
            if getattr(experiment.builder.config, "sgd_steps_per_learner_step", None) == 1:
                fused_experiment = settings.compose(base + [f"agent.sgd_steps_per_learner_step={FUSED}"], run_dir)
                fused, _ = _learner_rates(fused_experiment, settings, reverb_fed=False)
                rows.append(
                    Row(
                        "learner",
                        f"{name} in-memory, {FUSED} SGD steps fused per call",
                        fused,
                        "updates/s",
                        in_memory,
                        ratio(fused, in_memory),
                    )
                )
                progress(f"learner {name}: {FUSED} fused {fused:,.0f} updates/s")
    return rows
