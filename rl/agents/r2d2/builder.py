"""Builds R2D2's prioritized sequence table, sequence adder, recurrent actor, learner and
policies.

Replay holds items of `burn_in_length + trace_length` rows, one every `sequence_period`
rows of each environment copy (rl/replay/sequences.py's `SequenceAdder`), each row
carrying the LSTM state the actor acted from, as the extras `{"core_state": ...}`. The
replay ratio (`samples_per_insert`, `min_replay_size`) counts those items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import jax

from rl.agents.actors import RecurrentPolicy
from rl.agents.builder import TransitionReplayBuilder, sequence_iterator
from rl.agents.r2d2.config import R2D2Config
from rl.networks.recurrent import RecurrentNetwork, lstm_state_spec
from rl.policies import EpsilonGreedy, Greedy
from rl.specs import EnvironmentSpec

if TYPE_CHECKING:
    pass


class R2D2Builder(TransitionReplayBuilder):
    action_kind = "discrete"
    action_dtype = "int32"
    network_kind = "recurrent_q"

    def __init__(self, config: R2D2Config, exploration: Any = None):
        super().__init__(config, exploration if exploration is not None else EpsilonGreedy())

    def extras_spec(self) -> dict[str, Any]:
        """What each stored row carries besides the step: the core state acted from."""
        if self.config.core_state_size is None:
            raise ValueError("agent.core_state_size (the LSTM's units) must be set: r2d2 needs network=lstm")
        return {"core_state": lstm_state_spec(self.config.core_state_size)}

    def make_replay_tables(self, environment_spec: EnvironmentSpec) -> list[Any]:
        from rl.replay.sequences import sequence_signature
        from rl.replay.tables import make_sequence_table

        signature = sequence_signature(environment_spec, self.config.sequence_length, self.extras_spec())
        return [
            make_sequence_table(
                self.config.replay_table_name,
                signature,
                max_size=self.config.max_replay_size,
                rate_limiter=self.replay_ratio.make_rate_limiter(),
                priority_exponent=self.config.priority_exponent,
            )
        ]

    def make_adder(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Any:
        from rl.replay.sequences import SequenceAdder, step_spec

        return SequenceAdder(
            replay_client,
            self.config.replay_table_name,
            step_spec(environment_spec, self.extras_spec()),
            sequence_length=self.config.sequence_length,
            period=self.config.sequence_period,
        )

    def make_dataset_iterator(self, replay_client: Any, environment_spec: EnvironmentSpec) -> Iterator[Any]:
        del environment_spec
        return sequence_iterator(replay_client, self.config.replay_table_name, self.samples_per_learner_step)

    def _check_network(self, networks: Any) -> None:
        if not isinstance(networks, RecurrentNetwork):
            raise ValueError(f"r2d2 needs a recurrent Q-network (network=lstm), got {type(networks).__name__}")
        expected = self.extras_spec()["core_state"]
        if {k: s.shape for k, s in networks.state_spec.items()} != {k: s.shape for k, s in expected.items()}:
            raise ValueError(
                f"the network's core state { ({k: s.shape for k, s in networks.state_spec.items()}) } differs from the "
                f"one replay stores (agent.core_state_size={self.config.core_state_size})"
            )

    def _policy(self, networks: RecurrentNetwork, head: Any) -> RecurrentPolicy:
        self._check_network(networks)

        def step(params: Any, key: jax.Array, observations: Any, state: Any, actor_step: jax.Array):
            q_values, next_state = networks.apply(params, observations, state)
            return head(q_values, key, actor_step), next_state

        exploration = getattr(head, "exploration_metrics", None)
        return RecurrentPolicy(step=step, initial_state=networks.initial_state, exploration=exploration)

    def make_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, evaluation: bool
    ) -> RecurrentPolicy:
        """Greedy (evaluation) or the policy group's exploration on the recurrent Q-values."""
        del environment_spec
        return self._policy(networks, Greedy() if evaluation else self.exploration)

    def make_actor_policy(
        self, networks: RecurrentNetwork, environment_spec: EnvironmentSpec, actor_id: int
    ) -> RecurrentPolicy:
        """Actor `actor_id`'s behaviour policy: with several actors (launcher=ray) each acts
        epsilon-greedily with its own fixed Ape-X epsilon (`R2D2Config.actor_epsilon_of`)."""
        epsilon = self.config.actor_epsilon_of(actor_id)
        if epsilon is None:
            return self.make_policy(networks, environment_spec, evaluation=False)
        return self._policy(networks, EpsilonGreedy(epsilon_start=epsilon, epsilon_end=epsilon))

    def actor_class(self) -> type:
        """Actors carry the LSTM state from step to step (and store it with each row)."""
        from rl.agents.actors import RecurrentActor

        return RecurrentActor

    def make_learning(self, networks: RecurrentNetwork) -> Any:
        from rl.agents.r2d2.learning import make_learning  # rlax (and TensorFlow): loaded when the learner is built.

        self._check_network(networks)
        return make_learning(networks, self.config)
