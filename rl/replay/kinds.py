"""Replay kinds: what an agent's replay holds and how it is written, read and paced, one class per kind
(`Transitions`, `Sequences`, `Queue`). A builder names its kind's class and holds one made from its
config; reverb and TensorFlow load only when a table, a ratio or an iterator is made."""

from __future__ import annotations

import abc
from typing import Any, Callable, Iterator, Mapping

from rl.core import EnvironmentSpec
from rl.replay import adders


class ReplayKind(abc.ABC):
    """A table sampled uniformly or by priority at `samples_per_insert` once it holds `min_replay_size`
    items (the agent config's replay section), `batch_size * sgd_steps_per_learner_step` items a learner step."""

    def __init__(self, config: Any):
        self.config = config

    @property
    def samples_per_learner_step(self) -> int:
        """Items one `learner.step()` consumes."""
        return self.config.batch_size * self.config.sgd_steps_per_learner_step

    @property
    def ratio(self) -> Any:
        """The `ReplayRatio` (`QueueRatio`) of the table the learner samples (for single-process runs)."""
        from rl.replay.server import ReplayRatio, make_error_buffer

        config = self.config
        error_buffer = make_error_buffer(config.samples_per_insert, self.samples_per_learner_step)
        return ReplayRatio(config.samples_per_insert, config.min_replay_size, error_buffer)

    @abc.abstractmethod
    def signature(self, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> Any:
        """The reverb signature of one item."""

    def table(self, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> Any:
        from rl.replay.server import make_sequence_table

        config = self.config
        exponent = config.priority_exponent if config.prioritized else None
        signature = self.signature(environment_spec, extras_spec)
        rate_limiter = self.ratio.make_rate_limiter()
        return make_sequence_table(config.replay_table_name, signature, config.max_replay_size, rate_limiter, exponent)

    @abc.abstractmethod
    def adder(self, client: Any, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> adders.Adder:
        """The adder an actor writes its steps with."""

    @abc.abstractmethod
    def decode(self, environment_spec: EnvironmentSpec) -> Callable[[Any], Any]:
        """Turns a sampled batch into what the learner trains on."""

    def iterator(self, client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        """The learner's decoded batches of `samples_per_learner_step` items."""
        from rl.replay.server import learner_iterator

        table = self.config.replay_table_name
        batch = self.samples_per_learner_step
        return learner_iterator(client, table, batch, self.decode(environment_spec))


class Transitions(ReplayKind):
    """n-step transitions (`config.n_step`, `config.discount`), laid out by `adders.transition_codec`."""

    def signature(self, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> Any:
        return adders.transition_codec(environment_spec).signature()

    def adder(self, client: Any, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> adders.Adder:
        config = self.config
        codec = adders.transition_codec(environment_spec)
        return adders.NStepTransitionAdder(
            client, config.replay_table_name, config.n_step, config.discount, codec=codec
        )

    def decode(self, environment_spec: EnvironmentSpec) -> Callable[[Any], Any]:
        return adders.transition_codec(environment_spec).decode


class Sequences(ReplayKind):
    """`config.sequence_length` rows of one environment copy, a new item every `config.sequence_period`
    rows, each row with the agent's extras (`SequenceStep`s)."""

    def signature(self, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> Any:
        return adders.sequence_signature(environment_spec, self.config.sequence_length, extras_spec)

    def adder(self, client: Any, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> adders.Adder:
        config = self.config
        steps = adders.step_spec(environment_spec, extras_spec)
        length = config.sequence_length
        period = config.sequence_period
        return adders.SequenceAdder(client, config.replay_table_name, steps, length, period)

    def decode(self, environment_spec: EnvironmentSpec) -> Callable[[Any], Any]:
        return adders.decode_sequences


class Queue(Sequences):
    """Such sequences in a queue of `config.queue_size`, each trained on once,
    `config.sequences_per_learner_step` a learner step."""

    @property
    def samples_per_learner_step(self) -> int:
        return self.config.sequences_per_learner_step

    @property
    def ratio(self) -> Any:
        from rl.replay.server import QueueRatio

        return QueueRatio(self.samples_per_learner_step, self.config.queue_size)

    def table(self, environment_spec: EnvironmentSpec, extras_spec: Mapping[str, Any]) -> Any:
        from rl.replay.server import make_queue_table

        signature = self.signature(environment_spec, extras_spec)
        return make_queue_table(self.config.replay_table_name, self.config.queue_size, signature)
