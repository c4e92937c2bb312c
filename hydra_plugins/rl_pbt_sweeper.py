"""`hydra/sweeper=pbt`: population-based training as one launcher=anakin run whose replicas are the
population (rl/sweeps/pbt.py). Registers the sweeper and its settings; the work (the settings file from its
`params` and rules, the population's run, the sweep's summary.json) is rl/sweeps/pbt_sweep.py's."""

import dataclasses
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclasses.dataclass
class PbtSweeperConf:
    _target_: str = "hydra_plugins.rl_pbt_sweeper.PbtSweeper"
    # Members (launcher.num_seeds of the run): member i trains with seed + i.
    population: int = 8
    # "agent.<field>" or "policy.<field>" (floats) -> where it starts, in Hydra's sweep syntax:
    # interval(a, b), tag(log, interval(a, b)) or choice(a, b, ...). The command line's sweeps of such
    # keys join them: 'agent.learning_rate=tag(log, interval(1e-4, 1e-2))'.
    params: Dict[str, str] = dataclasses.field(default_factory=dict)
    # Actor steps between exchanges, a multiple of eval_every; null: after every evaluation round.
    interval: Optional[int] = None
    # Truncation selection: the bottom `fraction` of the members take a top `fraction` member's learner state.
    fraction: float = 0.25
    # Exploring: each value resampled with `resample_probability`, else multiplied by one of `factors`.
    factors: List[float] = dataclasses.field(default_factory=lambda: [0.8, 1.2])
    resample_probability: float = 0.25
    # Seeds the initial values and every exchange's draws.
    seed: int = 0


ConfigStore.instance().store(group="hydra/sweeper", name="pbt", node=PbtSweeperConf, provider="rl")


class PbtSweeper(Sweeper):
    def __init__(self, population: int, params: Dict[str, str], **rules: Any) -> None:
        self.population, self.params, self.rules = population, dict(params or {}), rules
        self.config: Optional[DictConfig] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: List[str]) -> Any:
        """Launches the population's run (rl/sweeps/pbt_sweep.py); returns its JobReturn (a list of one)."""
        from rl.sweeps.pbt_sweep import run_population

        assert self.config is not None
        target = str(self.config.launcher.get("_target_", ""))
        sweep_dir = str(self.config.hydra.sweep.dir)
        return run_population(self.launcher, sweep_dir, target, self.population, self.params, self.rules, arguments)
