"""Replay: reverb tables, adders that write to them, and iterators that read batches. `ReplaySample`, what a
learner takes, is here: code without reverb (the current stack) builds batches of it too."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class ReplaySample(NamedTuple):
    """A batch of items: their data (a Transition of arrays) and reverb's sample info."""

    keys: np.ndarray
    probabilities: np.ndarray
    table_size: np.ndarray
    data: Any
