"""An agent's learning as pure functions, and the learner that runs them on replay.

An agent supplies a `Learning`: `init(key)` makes its training state (a NamedTuple with
`steps`, the SGD steps taken), `sgd_step(state, batch)` is one SGD step on a `Batch`, and
`policy_params(state)` is what its policies act with. `SGDLearner` (local and Ray runs)
and launcher=anakin jit these same functions.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl import core
from rl.counting import Counter
from rl.loggers.base import Logger, NoOpLogger
from rl.numerics import FiniteGuard

# Added to every written priority, so an item whose TD errors are all 0 can still be sampled.
PRIORITY_FLOOR = 1e-6


class Batch(NamedTuple):
    """A replayed minibatch: the items' data and their importance weights (1 for uniform
    sampling; agents normalise them within their minibatch, `normalized_weights`)."""

    data: Any
    importance_weights: Any

    @classmethod
    def uniform(cls, data: Any) -> "Batch":
        size = jax.tree_util.tree_leaves(data)[0].shape[0]
        return cls(data, jnp.ones((size,), jnp.float32))


def importance_weights(probabilities: jax.Array, table_size: jax.Array, exponent: float) -> jax.Array:
    """w_i = (N * P(i)) ** -exponent: corrects the bias of sampling item i with probability
    P(i) from N items (prioritized replay) instead of uniformly."""
    return (1.0 / (table_size.astype(jnp.float32) * probabilities.astype(jnp.float32))) ** exponent


def normalized_weights(weights: jax.Array) -> jax.Array:
    """Importance weights divided by the minibatch's largest, so no weight exceeds 1."""
    return weights / jnp.max(weights)


# (state, batch) -> (state, metrics, extras): metrics are averaged over the fused steps;
# extras (per item, e.g. TD errors for priorities, or None) come back concatenated.
SGDStep = Callable[[Any, Batch], tuple[Any, dict[str, jax.Array], Any]]


class Learning(NamedTuple):
    """An agent's learning (module docstring); `update` is one learner step."""

    init: Callable[[jax.Array], Any]
    sgd_step: SGDStep
    policy_params: Callable[[Any], Any]
    # SGD steps fused into one learner step, each on its slice of the learner's batch.
    sgd_steps_per_learner_step: int = 1
    # The replay table whose sampled items get the SGD steps' extras as new priorities.
    priority_table: str | None = None
    # beta of the batches' importance weights (None: sampled uniformly, every weight 1).
    importance_sampling_exponent: float | None = None

    def learner_steps(self, state: Any) -> jax.Array:
        return state.steps // self.sgd_steps_per_learner_step

    def update(self, state: Any, batch: Batch) -> tuple[Any, dict[str, jax.Array], Any]:
        """`sgd_steps_per_learner_step` SGD steps in one `lax.scan`, each on its slice."""
        steps = self.sgd_steps_per_learner_step

        def scan_step(state: Any, minibatch: Batch) -> tuple[Any, tuple[Any, Any]]:
            state, metrics, extras = self.sgd_step(state, minibatch)
            return state, (metrics, extras)

        split = lambda x: jnp.reshape(x, (steps, -1) + x.shape[1:])
        state, (metrics, extras) = jax.lax.scan(scan_step, state, jax.tree_util.tree_map(split, batch))
        merge = lambda x: jnp.reshape(x, (-1,) + x.shape[2:])
        return state, jax.tree_util.tree_map(jnp.mean, metrics), jax.tree_util.tree_map(merge, extras)


class SGDLearner(core.Learner[Any]):
    """Runs an agent's `Learning` on replayed batches: writes the steps' extras back to
    replay as priorities (`priority_table`), counts, logs the mean metrics, serves the
    policy parameters as "policy", and stops on a non-finite loss (checked inside the
    jitted update, read every few steps)."""

    def __init__(
        self,
        learning: Learning,
        random_key: jax.Array,
        iterator: Any,
        replay_client: Any = None,
        counter: Counter | None = None,
        logger: Logger | None = None,
    ):
        self._learning = learning
        self._state = learning.init(random_key)
        self._iterator = iterator
        self._client = replay_client
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()
        self._guard = FiniteGuard(learner_steps_of=learning.learner_steps)
        self._update = self._guard.wrap(learning.update)
        exponent = learning.importance_sampling_exponent
        self._weights = None if exponent is None else jax.jit(lambda p, n: importance_weights(p, n, exponent))

    @property
    def state(self) -> Any:
        return self._state

    def step(self) -> None:
        sample = next(self._iterator)
        if self._weights is None:
            weights = np.ones(np.shape(sample.probabilities), np.float32)
        else:
            weights = self._weights(sample.probabilities, sample.table_size)
        batch = Batch(sample.data, weights)
        self._state, metrics, extras = self._update(self._state, batch)
        table = self._learning.priority_table
        if table is not None and self._client is not None:
            values = np.asarray(extras, dtype=np.float64) + PRIORITY_FLOOR
            self._client.mutate_priorities(table, updates=dict(zip(np.asarray(sample.keys).tolist(), values.tolist())))
        counts = self._counter.increment(steps=1)
        self._logger.write({**counts, **metrics})

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        return [self._learning.policy_params(self._state) for _ in names]

    def save(self) -> Any:
        return self._state

    def restore(self, state: Any) -> None:
        self._state = jax.tree_util.tree_map(jnp.asarray, type(self._state)(*state))
        self._guard.reset()

    def check_finite(self) -> None:  # Raises `NumericalError` (a device sync).
        self._guard.check(self._state)
