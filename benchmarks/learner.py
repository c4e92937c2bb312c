"""`learner`: SGD updates/s of a learner fed by reverb, as a run builds it, against the same fed one batch."""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

from benchmarks.common import Row, Settings, SyntheticEpisodes, measure_rate, median, progress, ratio
from benchmarks.common import replay_server

EXPERIMENTS = ("dqn_cartpole", "sac_pendulum")
FUSED = 8


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
        counter = Counter(Counter(), "learner", time_delta=0.0)
        return builder.make_learner(jax.random.PRNGKey(0), networks, dataset, client, counter, logger)

    def step(learner: Any) -> int:
        learner.step()
        return sgd_steps

    def rate(learner: Any) -> float:  # Its pending updates done inside the timed span.
        return measure_rate(lambda: step(learner), settings.seconds, lambda: jax.block_until_ready(learner.save()))

    with replay_server(builder, spec) as client:
        items = builder.samples_per_learner_step * (2 if settings.quick else 10)
        SyntheticEpisodes(builder, client, spec, items=max(items, 1_000 if settings.quick else 10_000))
        dataset = builder.make_dataset_iterator(client, spec)
        try:
            learners = [make_learner(itertools.repeat(next(dataset)))] + ([make_learner(dataset)] if reverb_fed else [])
            for learner in learners:  # Warm-up: compilation, the first prefetched batches.
                for _ in range(3):
                    step(learner)
            rounds = [[rate(learner) for learner in learners] for _ in range(settings.repeats)]
        finally:
            getattr(dataset, "close", lambda: None)()  # An on-policy queue has none.
    return [median([r[k] for r in rounds]) for k in range(len(learners))]


def suite_learner(settings: Settings) -> list[Row]:
    """learner SGD updates/s of DQN (dqn_cartpole) and SAC (sac_pendulum) fed by the real dataset iterator from a
    pre-filled reverb table, against the same learner fed one fixed in-memory batch: ratio = reverb-fed / in-memory.
    Also 8 SGD steps fused per call (lax.scan) where a preset takes one: ratio = fused / one step per call."""
    rows: list[Row] = []
    for name in settings.experiments or EXPERIMENTS:
        base = [f"experiment={name}", "logger=csv", "progress=false", "checkpoint=false"]
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
