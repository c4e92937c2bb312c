"""The learner scaffold every agent's learner is built on.

An agent supplies its training state (a NamedTuple with a `steps` count of SGD steps) and
one SGD step; `SGDLearner` does the rest the same way for all of them: each `step()`
takes one replayed batch of `num_sgd_steps` minibatches and runs that many SGD steps in
one jitted `lax.scan`, each on its own slice; it counts under the learner's counter,
logs the mean metrics, serves the policy parameters, saves and restores its state, and
stops on a non-finite loss (checked inside the update, read every few steps).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from rl import core
from rl.counting import Counter
from rl.loggers.base import Logger, NoOpLogger
from rl.numerics import FiniteGuard

# (state, minibatch) -> (state, metrics, extras): metrics are averaged over the fused
# steps; extras (per item, e.g. TD errors for priorities) come back concatenated.
SGDStep = Callable[[Any, Any], tuple[Any, dict[str, jax.Array], Any]]


class SGDLearner(core.Learner[Any]):
    """Runs `sgd_step` on replayed batches; serves `policy_params(state)` as "policy".

    `prepare` maps the batch the update receives (`batch_of(sample)`) to the one the SGD
    steps slice, inside the jitted update (e.g. rescaling actions).
    """

    def __init__(
        self,
        state: NamedTuple,
        sgd_step: SGDStep,
        iterator: Iterator[Any],
        num_sgd_steps: int,
        counter: Counter | None = None,
        logger: Logger | None = None,
        prepare: Callable[[Any], Any] | None = None,
    ):
        self._state = state
        self._iterator = iterator
        self._counter = counter or Counter()
        self._logger = logger or NoOpLogger()

        def scan_step(state: Any, minibatch: Any) -> tuple[Any, tuple[Any, Any]]:
            state, metrics, extras = sgd_step(state, minibatch)
            return state, (metrics, extras)

        def update(state: Any, batch: Any) -> tuple[Any, dict[str, jax.Array], Any]:
            if prepare is not None:
                batch = prepare(batch)
            split = lambda x: jnp.reshape(x, (num_sgd_steps, -1) + x.shape[1:])
            state, (metrics, extras) = jax.lax.scan(scan_step, state, jax.tree_util.tree_map(split, batch))
            merge = lambda x: jnp.reshape(x, (-1,) + x.shape[2:])
            return state, jax.tree_util.tree_map(jnp.mean, metrics), jax.tree_util.tree_map(merge, extras)

        # A non-finite loss stops the learner: checked inside the (jitted) update.
        self._guard = FiniteGuard(learner_steps_of=lambda state: state.steps // num_sgd_steps)
        self._update = self._guard.wrap(update)

    def batch_of(self, sample: Any) -> Any:
        """What the jitted update receives of a replayed sample (its data by default)."""
        return sample.data

    def after_update(self, sample: Any, extras: Any) -> None:
        """Runs after each update, on the host (e.g. to write priorities back to replay)."""

    def policy_params(self, state: Any) -> Any:
        return state.policy_params

    @property
    def state(self) -> Any:
        return self._state

    def step(self) -> None:
        sample = next(self._iterator)
        self._state, metrics, extras = self._update(self._state, self.batch_of(sample))
        self.after_update(sample, extras)
        counts = self._counter.increment(steps=1)
        self._logger.write({**counts, **metrics})

    def get_variables(self, names: Sequence[str]) -> list[Any]:
        return [self.policy_params(self._state) for _ in names]

    def save(self) -> Any:
        return self._state

    def restore(self, state: Any) -> None:
        self._state = jax.tree_util.tree_map(jnp.asarray, type(self._state)(*state))
        self._guard.reset()

    def check_finite(self) -> None:
        """Raises `NumericalError` if an update's loss or the state is not finite (a device sync)."""
        self._guard.check(self._state)
