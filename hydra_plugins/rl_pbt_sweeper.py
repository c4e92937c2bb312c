"""`hydra/sweeper=pbt`: population-based training as one launcher=anakin run whose replicas are the
population (rl/sweeps/pbt.py). The sweeper turns its `params` (Hydra's sweep syntax) and rules into a
settings file in the sweep directory, launches the one run that trains the population, and writes the
sweep's summary.json: the best member, its values and its schedule of hyperparameters."""

import dataclasses
import json
import os
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.errors import ConfigCompositionException
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

SETTINGS_FILE = "pbt.yaml"
SEARCHED = ("agent.", "policy.")  # What a member's values can set.


def hyperparameter(override: Any) -> Any:
    """The Hyperparameter a parsed sweep override describes; refused, naming its key, otherwise."""
    from rl.sweeps.pbt import Hyperparameter

    sweep, key = override.value(), override.get_key_element()
    if override.is_interval_sweep():
        return Hyperparameter(low=float(sweep.start), high=float(sweep.end), log="log" in sweep.tags)
    if override.is_choice_sweep():
        return Hyperparameter(choices=tuple(float(value) for value in sweep.list))
    raise ConfigCompositionException(
        f"hydra/sweeper=pbt: {key}: use interval(a, b), tag(log, interval(a, b)) or choice(...)"
    )


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
        """Launches the population's run; returns its JobReturn (a list of one)."""
        from rl.sweeps.pbt import PbtSettings

        assert self.config is not None
        parse = OverridesParser.create().parse_overrides
        given = parse(arguments)
        searched = parse([f"{key}={text}" for key, text in self.params.items()])
        searched += [o for o in given if o.is_sweep_override() and o.get_key_element().startswith(SEARCHED)]
        others = [o for o in given if o not in searched]
        refusal = self.refusal(searched, others)
        if refusal:
            raise ConfigCompositionException(f"hydra/sweeper=pbt: {refusal}")
        space = {o.get_key_element(): hyperparameter(o) for o in searched}
        settings = PbtSettings(space=space, **{**self.rules, "factors": tuple(self.rules["factors"])})
        problem = settings.problem(self.population)
        if problem:
            raise ConfigCompositionException(f"hydra/sweeper=pbt: {problem}")
        sweep_directory = os.path.abspath(str(self.config.hydra.sweep.dir))
        os.makedirs(sweep_directory, exist_ok=True)
        path = os.path.join(sweep_directory, SETTINGS_FILE)
        settings.write(path)
        overrides = [*(o.input_line for o in others), f"launcher.num_seeds={self.population}", f"launcher.pbt={path}"]
        returns = self.launcher.launch([overrides], initial_job_idx=0)
        result = returns[0]
        run_directory = result.hydra_cfg.hydra.runtime.output_dir if result.hydra_cfg is not None else None
        write_sweep_summary(sweep_directory, run_directory)
        return returns

    def refusal(self, searched: List[Any], others: List[Any]) -> Optional[str]:
        """Why this sweep cannot run (None: it can): the run must be launcher=anakin, other overrides single."""
        assert self.config is not None
        if not str(self.config.launcher.get("_target_", "")).endswith("AnakinLauncher"):
            return "trains a launcher=anakin run's replicas as the population; add launcher=anakin"
        if not searched:
            return "searches nothing: give a range, e.g. 'agent.learning_rate=tag(log, interval(1e-4, 1e-2))'"
        swept = [o.input_line for o in others if o.is_sweep_override()]
        if swept:
            return f"searches agent.* and policy.* ranges only; other overrides take one value: {', '.join(swept)}"
        return None


def write_sweep_summary(sweep_directory: str, run_directory: Optional[str]) -> None:
    """`<sweep>/summary.json`: the population run's directory, status and PBT result (its best member)."""
    summary: Dict[str, Any] = {"run_directory": run_directory, "status": "not started"}
    path = os.path.join(run_directory or "", "summary.json")
    if run_directory and os.path.exists(path):
        with open(path) as file:
            run = json.load(file)
        summary |= {"status": run.get("status"), "pbt": run.get("pbt"), "population": run.get("num_seeds")}
        best = (run.get("pbt") or {}).get("best_member")
        if best is not None:
            summary["best_run_directory"] = os.path.join(run_directory, f"seed_{best}")
    with open(os.path.join(sweep_directory, "summary.json"), "w") as file:
        json.dump(summary, file, indent=2)
