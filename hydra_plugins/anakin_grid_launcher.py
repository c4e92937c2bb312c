"""`hydra/launcher=anakin_grid`: trains a multirun's launcher=anakin jobs as few compiled programs as
their differences allow (rl/anakin/grid.py); Hydra finds it here, as it finds every launcher plugin."""

import dataclasses
import os
from typing import Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclasses.dataclass
class AnakinGridLauncherConf:
    _target_: str = "hydra_plugins.anakin_grid_launcher.AnakinGridLauncher"
    # CPU devices a group's replicas are sharded over (null: one per core); ignored on GPUs and TPUs.
    host_devices: Optional[int] = None  # Hydra reads the annotation: no `from __future__` here.


ConfigStore.instance().store(group="hydra/launcher", name="anakin_grid", node=AnakinGridLauncherConf, provider="rl")


class AnakinGridLauncher(Launcher):
    def __init__(self, host_devices: int | None = None) -> None:
        self.host_devices = host_devices or os.cpu_count() or 1
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config  # The task is rl.train's, in two halves.

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rl.anakin.grid import launch
        from rl.anakin.launcher import set_xla_flags
        from rl.train import prepare_job

        # Before any job builds its experiment; XLA's default CPU runtime: many replicas per device.
        set_xla_flags(f"--xla_force_host_platform_device_count={self.host_devices}")
        assert self.hydra_context is not None and self.config is not None
        return launch(self.hydra_context, self.config, job_overrides, initial_job_idx, prepare_job)
