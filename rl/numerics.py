"""Stops a learner whose losses or parameters stop being finite, without a device sync per
step: the jitted update records the first non-finite step on the device, the host reads
it every `check_every` updates, and the whole state is checked before every checkpoint.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

# Updates between two reads of the device-side record (one small device-to-host copy).
CHECK_EVERY = 100


class NumericalError(RuntimeError):
    """The learner produced a non-finite loss or parameter; names the step and the term."""

    def __init__(self, step: int | None, term: str, value: str):
        where = f"learner step {step}" if step is not None else "the learner"
        super().__init__(f"{where}: {term} is not finite ({value})")
        self.step, self.term, self.value = step, term, value


def _metric_names(metrics: Any) -> list[str]:
    if isinstance(metrics, dict):
        names = [str(key) for key in metrics]
    else:
        names = [f"metric {i}" for i in range(len(jax.tree_util.tree_leaves(metrics)))]

    # Losses first (then errors, gradients last): when several terms break at once, the
    # one closest to the loss is the one to name.
    def rank(name: str) -> int:
        return 0 if "loss" in name else 1 if "error" in name else 3 if "grad" in name else 2

    return sorted(names, key=rank)


def _state_terms(state: Any) -> list[tuple[str, Any]]:
    """(name, subtree) per field of a NamedTuple state; the whole state otherwise."""
    fields = getattr(state, "_fields", None)
    if fields:
        return [(f"{field} (parameters/optimiser state)", getattr(state, field)) for field in fields]
    return [("the learner state", state)]


def _all_finite(tree: Any) -> jax.Array:
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.inexact)]
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


class FiniteGuard:
    """Wraps a learner's jitted update `(state, ...) -> (state, metrics, ...)`.

    `learner_steps_of(state)` gives the learner step a state is at (for the message);
    by default the number of updates this guard has run.
    """

    def __init__(self, check_every: int = CHECK_EVERY, learner_steps_of: Callable[[Any], Any] | None = None):
        self.check_every = int(check_every)
        self._steps_of = learner_steps_of
        self._names: list[str] = []
        # (first bad learner step or -1, index of the term in _names, its value)
        self._record = (jnp.asarray(-1, jnp.int32), jnp.asarray(-1, jnp.int32), jnp.asarray(0.0, jnp.float32))
        self._calls = 0
        self._check_state = jax.jit(self._state_record)

    def wrap(self, update: Callable[..., Any]) -> Callable[..., Any]:
        """The update with the check fused in; it raises `NumericalError` when a read
        (every `check_every` calls) finds a non-finite step."""

        def guarded(record: Any, count: jax.Array, *args: Any) -> Any:
            outputs = update(*args)
            state, metrics = outputs[0], outputs[1]
            names = _metric_names(metrics)
            self._names = names
            values = metrics if isinstance(metrics, dict) else dict(zip(names, jax.tree_util.tree_leaves(metrics)))
            flat = jnp.stack([jnp.mean(jnp.asarray(values[name], jnp.float32)) for name in names])
            finite = jnp.isfinite(flat)
            step = count + 1 if self._steps_of is None else jnp.asarray(self._steps_of(state), jnp.int32)
            first, term, value = record
            fresh = (first < 0) & ~jnp.all(finite)
            bad = jnp.argmin(finite)  # The first non-finite term, losses first.
            record = (
                jnp.where(fresh, step, first).astype(jnp.int32),
                jnp.where(fresh, bad, term).astype(jnp.int32),
                jnp.where(fresh, flat[bad], value).astype(jnp.float32),
            )
            return outputs, record

        jitted = jax.jit(guarded)

        def call(*args: Any) -> Any:
            outputs, self._record = jitted(self._record, jnp.asarray(self._calls, jnp.int32), *args)
            self._calls += 1
            if self._calls % self.check_every == 0:
                self.check()
            return outputs

        return call

    def check(self, state: Any = None) -> None:
        """Raises `NumericalError` if an update since the last reset was not finite, or
        (given `state`) if any of its floating-point arrays is not."""
        first, term, value = (int(x) if i < 2 else float(x) for i, x in enumerate(jax.device_get(self._record)))
        if first >= 0:
            name = self._names[term] if 0 <= term < len(self._names) else "a metric"
            raise NumericalError(first, name, str(np.float32(value)))
        if state is not None:
            terms = _state_terms(state)
            finite = np.asarray(jax.device_get(self._check_state([tree for _, tree in terms])))
            if not finite.all():
                step = None if self._steps_of is None else int(np.asarray(jax.device_get(self._steps_of(state))))
                raise NumericalError(step, terms[int(np.argmin(finite))][0], "nan or inf")

    @staticmethod
    def _state_record(trees: list[Any]) -> jax.Array:
        return jnp.stack([_all_finite(tree) for tree in trees])

    def reset(self) -> None:
        """Forgets earlier faults (a learner restored from a checkpoint)."""
        self._record = (jnp.asarray(-1, jnp.int32), jnp.asarray(-1, jnp.int32), jnp.asarray(0.0, jnp.float32))
