"""`hydra/launcher=anakin_grid`: trains a multirun's launcher=anakin jobs as few compiled programs as
their differences allow (rl/sweeps/grid.py); Hydra finds it here, as it finds every launcher plugin.
`hydra.launcher.engine` says where the groups train: here, on a Ray cluster or as a submitit job array."""

import dataclasses
import enum
import os
from typing import Any, Dict, Optional, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.errors import ConfigCompositionException
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

# Hydra reads the annotations below: no `from __future__` in this file.


class Engine(enum.Enum):
    local = "local"  # This process, one group after another.
    ray = "ray"  # A Ray task per group (hydra.launcher.ray.*).
    submitit = "submitit"  # A submitit job array, a task per group (hydra.launcher.submitit.*).


@dataclasses.dataclass
class RayEngineConf:
    # The cluster's address (host:port as `ray start --head` prints it, ray://host:port, or auto); null: a
    # Ray instance started here (or the cluster RAY_ADDRESS names).
    address: Optional[str] = None
    # What each group's task asks for: CPUs, GPUs, other resources (e.g. {TPU: 4}) and an accelerator type
    # (Ray's `accelerator_type`, e.g. A100; null: any).
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: Dict[str, float] = dataclasses.field(default_factory=dict)
    accelerator_type: Optional[str] = None
    # Seconds to wait for a host:port address to answer before the sweep is refused (nothing is prepared).
    connect_timeout_s: float = 10.0


@dataclasses.dataclass
class SubmititEngineConf:
    # submitit's job scripts, pickles and logs (%j: the job's id).
    folder: str = "${hydra.sweep.dir}/.submitit/%j"
    # submitit's AutoExecutor cluster: slurm, local (subprocesses on this machine) or debug (in this process);
    # null: SLURM where there is one.
    cluster: Optional[str] = None
    # Minutes a group may take (a grid job checkpoints only once it finishes: a group past it fails).
    timeout_min: int = 240
    gpus_per_node: Optional[int] = None
    cpus_per_task: Optional[int] = None
    mem_gb: Optional[float] = None
    # SLURM only: the partition (null: the cluster's default), the most groups running at once (null: no
    # limit) and any other sbatch option ({account: ..., qos: ..., constraint: ...}).
    partition: Optional[str] = None
    array_parallelism: Optional[int] = None
    additional_parameters: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class AnakinGridLauncherConf:
    _target_: str = "hydra_plugins.anakin_grid_launcher.AnakinGridLauncher"
    # CPU devices a group's replicas are sharded over (null: one per core of the machine that trains the
    # group); ignored on GPUs and TPUs.
    host_devices: Optional[int] = None
    # Where the groups train: local, ray or submitit. The driver (this process) prepares every job and forms
    # the groups either way; ray and submitit need the sweep directory on a filesystem every worker sees.
    engine: Engine = Engine.local
    ray: RayEngineConf = dataclasses.field(default_factory=RayEngineConf)
    submitit: SubmititEngineConf = dataclasses.field(default_factory=SubmititEngineConf)


ConfigStore.instance().store(group="hydra/launcher", name="anakin_grid", node=AnakinGridLauncherConf, provider="rl")


class AnakinGridLauncher(Launcher):
    def __init__(
        self,
        host_devices: Optional[int] = None,
        engine: Any = Engine.local,
        ray: Optional[Any] = None,
        submitit: Optional[Any] = None,
    ) -> None:
        from rl.sweeps.engines import make_engine

        self.host_devices = host_devices
        plain = lambda node: OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
        settings = {"ray": plain(ray) or {}, "submitit": plain(submitit) or {}}  # Hydra resolved them already.
        self.engine = make_engine(engine.value if isinstance(engine, Engine) else str(engine), settings)
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config  # The task is rl.train's, in two halves.

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from rl.sweeps.grid import launch
        from rl.anakin.launcher import set_xla_flags
        from rl.train import prepare_job

        # Before any job builds its experiment; XLA's default CPU runtime: many replicas per device.
        set_xla_flags(f"--xla_force_host_platform_device_count={self.host_devices or os.cpu_count() or 1}")
        assert self.hydra_context is not None and self.config is not None
        problem = self.engine.problem() if self.engine is not None else None
        if problem is not None:  # Before any job's directory is made.
            raise ConfigCompositionException(problem)
        return launch(
            self.hydra_context, self.config, job_overrides, initial_job_idx, prepare_job, self.engine, self.host_devices
        )
