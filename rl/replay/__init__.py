"""Replay: reverb tables, adders that write to them, and iterators that read batches. `ReplaySample`, the batch a
learner takes, is here rather than beside reverb's server: it imports without reverb (the current stack's tests of
the learners build batches of it)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class ReplaySample(NamedTuple):
    """A batch of items: their data (a Transition of arrays) and reverb's sample info."""

    keys: np.ndarray
    probabilities: np.ndarray
    table_size: np.ndarray
    data: Any
