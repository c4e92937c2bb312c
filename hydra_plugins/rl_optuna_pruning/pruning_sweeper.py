"""`hydra/sweeper=optuna_pruning`: Hydra's Optuna sweeper with a pruner (`hydra/sweeper/pruner=median`,
`halving`, `threshold` or `none`) and a study in a storage every job reaches (by default
`sqlite:///<sweep dir>/optuna.db`). Optuna itself is imported only when a sweep starts: Hydra imports
this module at every start, single runs included."""

from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
from omegaconf import MISSING, DictConfig


@dataclass
class PrunerConfig:
    _target_: str = MISSING


@dataclass
class MedianPrunerConfig(PrunerConfig):
    """Stops a trial whose best return so far is below the median of the completed trials' returns at
    the same actor step; the first `n_startup_trials` trials, and every trial before
    `n_warmup_steps` actor steps, run on."""

    _target_: str = "optuna.pruners.MedianPruner"
    n_startup_trials: int = 5
    n_warmup_steps: int = 0
    interval_steps: int = 1


@dataclass
class SuccessiveHalvingPrunerConfig(PrunerConfig):
    """Asynchronous successive halving: at rungs of `min_resource` x `reduction_factor`^k actor steps
    a trial goes on only when its return is within the top 1/`reduction_factor` of those that reached
    the rung (`auto`: a hundredth of the first completed trial's steps)."""

    _target_: str = "optuna.pruners.SuccessiveHalvingPruner"
    min_resource: Any = "auto"
    reduction_factor: int = 4
    min_early_stopping_rate: int = 0


@dataclass
class ThresholdPrunerConfig(PrunerConfig):
    """Stops a trial whose return falls below `lower` (or above `upper`) after `n_warmup_steps` actor steps."""

    _target_: str = "optuna.pruners.ThresholdPruner"
    lower: Optional[float] = None
    upper: Optional[float] = None
    n_warmup_steps: int = 0
    interval_steps: int = 1


@dataclass
class NopPrunerConfig(PrunerConfig):
    """Never stops a trial: every trial still reports its evaluations to the study."""

    _target_: str = "optuna.pruners.NopPruner"


@dataclass
class PruningOptunaSweeperConf(OptunaSweeperConf):
    _target_: str = "hydra_plugins.rl_optuna_pruning.pruning_sweeper.PruningOptunaSweeper"
    defaults: List[Any] = field(default_factory=lambda: [{"sampler": "tpe"}, {"pruner": "median"}])
    pruner: PrunerConfig = MISSING
    # An SQLAlchemy URL every job can reach; null: sqlite:///<sweep dir>/optuna.db.
    storage: Optional[Any] = None
    direction: Any = "maximize"  # train.py returns a return to maximise.


store = ConfigStore.instance()
store.store(group="hydra/sweeper", name="optuna_pruning", node=PruningOptunaSweeperConf, provider="rl")
for name, node in (
    ("median", MedianPrunerConfig),
    ("halving", SuccessiveHalvingPrunerConfig),
    ("threshold", ThresholdPrunerConfig),
    ("none", NopPrunerConfig),
):
    store.store(group="hydra/sweeper/pruner", name=name, node=node, provider="rl")


class PruningOptunaSweeper(Sweeper):
    """Hydra's entry point; the work is in rl/sweeps/optuna_sweeper.py (which imports Optuna)."""

    def __init__(self, pruner: Any, **settings: Any) -> None:
        from rl.sweeps.optuna_sweeper import PruningOptunaSweeperImpl

        self.sweeper = PruningOptunaSweeperImpl(pruner=pruner, **settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> None:
        return self.sweeper.sweep(arguments)
