"""Quiet start of a sweep: libraries a sweeper pulls in narrate at INFO on the terminal.

The Optuna sweeper imports optuna, whose import logs alembic's `setup plugin ...` lines
(seven of them) and whose study prints `A new study created in memory ...` through its
own handler, before any job starts. `QuietLibraries` is a Hydra callback (registered in
conf/hydra/job_logging/rl.yaml): when a multirun starts it sets those loggers to
WARNING, so their warnings and errors still show. Hydra's own lines (`Launching 1 jobs`,
each job's overrides, Optuna's best parameters and value) stay.
"""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback

# Loggers whose INFO lines say nothing a researcher needs.
CHATTY_LOGGERS = ("alembic",)


class QuietLibraries(Callback):
    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        sweeper = str(config.hydra.sweeper.get("_target_", ""))
        if "optuna" in sweeper.lower():
            import optuna  # The sweeper imports it next anyway.

            optuna.logging.set_verbosity(optuna.logging.WARNING)
