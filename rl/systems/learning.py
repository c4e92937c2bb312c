"""An agent's learning: the pure functions every launcher jits (`Learning`: init, the SGD step, the policy's
parameters) and `SGDLearner`, which runs them on replayed batches (launcher=local and ray). The compiled
systems run a `Learning` themselves (rl/systems/base.py)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from rl import core
from rl.core import Batch, NumericalError
from rl.counting import Counter
from rl.loggers.base import Logger, NoOpLogger

# Added to every written priority, so an item whose TD errors are all 0 can still be sampled.
PRIORITY_FLOOR = 1e-6
# Learner steps between two reads of the device-side record of non-finite metrics.
CHECK_EVERY = 100
# That record before any fault: (first non-finite learner step or -1, index of its term, its value).
NO_FAULT = (np.int32(-1), np.int32(-1), np.float32(0.0))


def importance_weights(probabilities: jax.Array, table_size: jax.Array, exponent: float) -> jax.Array:
    """w_i = (N * P(i)) ** -exponent: corrects prioritized sampling's bias."""
    return (1.0 / (table_size.astype(jnp.float32) * probabilities.astype(jnp.float32))) ** exponent


def normalized_weights(weights: jax.Array) -> jax.Array:
    """Importance weights divided by the minibatch's largest, so none exceeds 1."""
    return weights / jnp.max(weights)


class Learning(NamedTuple):
    """An agent's learning, jitted alike by `SGDLearner` and launcher=anakin: `init(key)` makes
    its state (a NamedTuple with `steps`, the SGD steps taken); `sgd_step(state, batch)` returns
    (state, metrics, per-item extras such as TD errors, or None)."""

    init: Callable[[jax.Array], Any]
    sgd_step: Callable[[Any, Batch], tuple[Any, dict[str, jax.Array], Any]]
    policy_params: Callable[[Any], Any]
    # SGD steps fused into one learner step, each on its slice of the learner's batch.
    sgd_steps_per_learner_step: int = 1
    # The table whose sampled items get the extras as new priorities.
    priority_table: str | None = None
    # beta of the importance weights (None: sampled uniformly, every weight 1).
    importance_sampling_exponent: float | None = None
    # The metrics closest to the loss, closest first: of several not finite at once, the first of these is
    # named (the others follow in the order `sgd_step` returns them).
    loss_terms: tuple[str, ...] = ()

    def learner_steps(self, state: Any) -> jax.Array:
        return state.steps // self.sgd_steps_per_learner_step

    def update(self, state: Any, batch: Batch) -> tuple[Any, dict[str, jax.Array], Any]:
        """`sgd_steps_per_learner_step` SGD steps in one `lax.scan` (mean metrics, concatenated extras)."""
        steps = self.sgd_steps_per_learner_step

        def scan_step(state: Any, minibatch: Batch) -> tuple[Any, tuple[Any, Any]]:
            state, metrics, extras = self.sgd_step(state, minibatch)
            return state, (metrics, extras)

        split = lambda x: jnp.reshape(x, (steps, -1) + x.shape[1:])
        state, (metrics, extras) = jax.lax.scan(scan_step, state, jax.tree_util.tree_map(split, batch))
        merge = lambda x: jnp.reshape(x, (-1,) + x.shape[2:])
        return state, jax.tree_util.tree_map(jnp.mean, metrics), jax.tree_util.tree_map(merge, extras)


class SGDLearner(core.Learner[Any]):
    """Runs a `Learning` on replayed batches: writes priorities, logs the mean metrics, serves
    "policy". A non-finite metric, recorded inside the jitted update, raises `NumericalError`
    when read (every CHECK_EVERY steps, and in `check_finite`)."""

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
        self._update = jax.jit(self._guarded_update)
        finite = lambda fields: jnp.stack([jnp.isfinite(ravel_pytree(field)[0]).all() for field in fields])
        self._state_finite = jax.jit(finite)
        self._names: list[str] = []
        self._record = NO_FAULT
        self._calls = 0
        exponent = learning.importance_sampling_exponent
        self._weights = None if exponent is None else jax.jit(lambda p, n: importance_weights(p, n, exponent))

    def _guarded_update(self, record: Any, state: Any, batch: Batch) -> Any:
        outputs = self._learning.update(state, batch)
        metrics = outputs[1]
        # Of several terms breaking at once, the one the learning declares closest to the loss is named.
        first = [name for name in self._learning.loss_terms if name in metrics]
        self._names = names = first + [str(name) for name in metrics if name not in first]
        flat = jnp.stack([jnp.mean(jnp.asarray(metrics[name], jnp.float32)) for name in names])
        finite = jnp.isfinite(flat)
        step = jnp.asarray(self._learning.learner_steps(outputs[0]), jnp.int32)
        fresh = (record[0] < 0) & ~jnp.all(finite)
        bad = jnp.argmin(finite)  # The first non-finite term.
        return outputs, tuple(jnp.where(fresh, new, old) for new, old in zip((step, bad, flat[bad]), record))

    @property
    def state(self) -> Any:
        return self._state

    def step(self) -> None:
        sample = next(self._iterator)
        if self._weights is None:
            weights = np.ones(np.shape(sample.probabilities), np.float32)
        else:
            weights = self._weights(sample.probabilities, sample.table_size)
        (self._state, metrics, extras), self._record = self._update(
            self._record, self._state, Batch(sample.data, weights)
        )
        self._calls += 1
        if self._calls % CHECK_EVERY == 0:
            self._check_record()
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
        self._record = NO_FAULT  # Earlier faults are forgotten.

    def _check_record(self) -> None:
        first, term, value = jax.device_get(self._record)
        if first >= 0:
            raise NumericalError(
                f"learner step {int(first)}: {self._names[int(term)]} is not finite ({np.float32(value)})"
            )

    def check_finite(self) -> None:
        """Raises `NumericalError` if an update was not finite, or any float of the state is not (a device sync)."""
        self._check_record()
        finite = np.asarray(jax.device_get(self._state_finite(list(self._state))))
        if not finite.all():
            step = int(np.asarray(jax.device_get(self._learning.learner_steps(self._state))))
            term = f"{self._state._fields[int(np.argmin(finite))]} (parameters/optimiser state)"
            raise NumericalError(f"learner step {step}: {term} is not finite (nan or inf)")
