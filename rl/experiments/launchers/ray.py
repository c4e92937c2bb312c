"""conf/launcher/ray.yaml: every node of the experiment in its own Ray process.

The driver (this process) starts or joins Ray, places the nodes, owns the loggers
(nodes send their records through a Ray queue) and watches the run: it restarts the
work of actors Ray has restarted, stops everything when the step budget is spent or the
learner fails, writes the checkpoint and summary.json, and shuts down what it started.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import time
import types
from typing import Any

import rl
from rl.experiments.config import ExperimentConfig
from rl.experiments.distributed import DistributedProgram
from rl.experiments.launchers.errors import LauncherError
from rl.experiments.progress import ProgressDisplay
from rl.experiments.resume import RunCheckpointer, run_state
from rl.experiments.summary import RunSummary, close_loggers, finish_run, merge_evaluations, run_start_time

_HOST_PORT = re.compile(r"^(ray://)?(?P<host>[^:/\s]+):(?P<port>\d+)$")
# Environment of every node: no GPU pre-allocation fights, no TensorFlow chatter.
NODE_ENVIRONMENT = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


@dataclasses.dataclass
class RayLauncher:
    num_actors: int = 2
    num_evaluators: int = 1
    address: str | None = None
    learner_num_cpus: float = 1.0
    learner_num_gpus: float = 0.0
    actor_num_cpus: float = 0.5
    max_restarts: int = 3
    restart_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    stop_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.num_actors < 1:
            raise ValueError(f"num_actors must be >= 1, got {self.num_actors}")
        if self.num_evaluators < 1:
            raise ValueError(f"num_evaluators must be >= 1, got {self.num_evaluators}")
        for name in ("learner_num_cpus", "learner_num_gpus", "actor_num_cpus", "max_restarts"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.address not in (None, "auto") and not _HOST_PORT.match(self.address):
            raise ValueError(
                f"address must be null (start Ray here), 'auto' or 'ray://host:port' / 'host:port', got {self.address!r}"
            )

    def __call__(self, experiment: ExperimentConfig) -> RunSummary:
        import ray

        self._check_reachable()
        started_here = not ray.is_initialized()
        if started_here:
            self._init_ray(ray)
        run = None
        try:
            run = _RayRun(self, experiment)
            return run.run()
        finally:
            if started_here:
                ray.shutdown()
                if run is not None:
                    _wait_for_exit(run.node_pids.values(), self.stop_timeout_s)

    def _check_reachable(self) -> None:
        """Fails fast (no hang) when a given cluster address does not answer."""
        match = _HOST_PORT.match(self.address or "")
        if match is None:
            return
        host, port = match.group("host"), int(match.group("port"))
        try:
            with socket.create_connection((host, port), timeout=self.connect_timeout_s):
                pass
        except OSError as error:
            raise LauncherError(f"launcher.address: cannot reach a Ray cluster at {self.address} ({error})") from None

    def _init_ray(self, ray: Any) -> None:
        # The installed `rl` package travels to every node (a remote cluster has no copy).
        runtime_env: dict[str, Any] = {"env_vars": dict(NODE_ENVIRONMENT), "py_modules": [rl]}
        if self.address is None:
            # A local instance sized to this machine, but large enough for the nodes asked for.
            needed = self.learner_num_cpus + self.num_actors * self.actor_num_cpus
            ray.init(
                num_cpus=max(os.cpu_count() or 1, int(needed + 0.999)),
                num_gpus=None,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env=runtime_env,
            )
            return
        try:
            ray.init(address=self.address, log_to_driver=False, runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, TimeoutError) as error:
            raise LauncherError(f"launcher.address: cannot join Ray at {self.address} ({error})") from None


class _RayRun:
    """One distributed run, from placing the nodes to writing the summary."""

    def __init__(self, launcher: RayLauncher, experiment: ExperimentConfig):
        import ray
        from ray.util.queue import Queue

        self.ray = ray
        self.launcher = launcher
        self.experiment = experiment
        self.log_queue = Queue(maxsize=100_000, actor_options={"num_cpus": 0})
        from rl.experiments.launchers.ray_nodes import QueueLoggerFactory

        remote_experiment = dataclasses.replace(
            experiment, logger_factory=QueueLoggerFactory(self.log_queue, run_start_time(experiment))
        )
        self.program = DistributedProgram(remote_experiment, launcher.num_actors, launcher.num_evaluators)
        self.loggers: dict[tuple, Any] = {}
        self.restarts = [0] * launcher.num_actors
        self.handles: dict[str, Any] = {}
        self.node_pids: dict[str, int] = {}

    def _log(self, key: tuple, row: dict) -> None:
        if key not in self.loggers:
            label, steps_key, instance = key
            self.loggers[key] = self.experiment.logger_factory(label, steps_key, instance)
        self.loggers[key].write(row)

    def _drain_logs(self) -> None:
        while not self.log_queue.empty():
            for key, row in self.log_queue.get_nowait_batch(self.log_queue.qsize()):
                self._log(key, row)

    def _event(self, message: str) -> None:
        """A launcher event (restart, failure) for the terminal and logs/launcher.csv."""
        self._log(("launcher", None, None), {"event": message, "time": time.time()})

    def run(self) -> RunSummary:
        from rl.experiments.launchers import ray_nodes

        ray, launcher, experiment = self.ray, self.launcher, self.experiment
        # One copy in the object store, kept alive by this driver so Ray can restart actors.
        program = self.program_ref = ray.put(self.program)
        start = time.perf_counter()
        exit_code = 1
        try:
            replay = ray_nodes.ReplayNode.remote(program)
            counter = ray_nodes.CounterNode.remote(experiment.max_actor_steps)
            replay_address = ray.get(replay.address.remote())
            learner = ray_nodes.LearnerNode.options(
                num_cpus=launcher.learner_num_cpus, num_gpus=launcher.learner_num_gpus
            ).remote(program, replay_address, counter)
            actor_options = {
                "num_cpus": launcher.actor_num_cpus,
                "max_restarts": launcher.max_restarts,
                "runtime_env": {"env_vars": {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}},
            }
            actors = [
                ray_nodes.ActorNode.options(**actor_options).remote(program, i, replay_address, learner, counter)
                for i in range(launcher.num_actors)
            ]
            evaluators = [
                ray_nodes.EvaluatorNode.remote(program, i, learner, counter) for i in range(self.program.evaluators)
            ]
            self._write_node_pids(replay, counter, learner, actors, evaluators)
            learner_run = learner.run.remote()
            actor_runs = {actor.run.remote(): i for i, actor in enumerate(actors)}
            acting_start = time.perf_counter()
            self._watch(learner_run, actor_runs, actors, evaluators, counter)
            acting_time = time.perf_counter() - acting_start
            self._check_budget(counter)
            ray.get([e.evaluate.remote(experiment.eval_episodes) for e in evaluators])  # The final round.
            returns, eval_times = merge_evaluations(  # Every evaluator's rounds, averaged.
                [(ray.get(e.returns.remote()), ray.get(e.times.remote())) for e in evaluators]
            )
            learner.stop.remote()
            ray.wait([learner_run], timeout=launcher.stop_timeout_s)
            ray.get(learner.flush_counts.remote())
            learner_state = ray.get(learner.save.remote())
            counts = ray.get(counter.get_counts.remote())
            self._drain_logs()
            steps = int(counts.get("actor_steps", 0))
            state = run_state(experiment, counts, steps, steps, steps, returns, eval_times or [], acting_time)
            RunCheckpointer(experiment).save(types.SimpleNamespace(save=lambda: learner_state), state)
            summary = finish_run(experiment, counts, returns, eval_times, time.perf_counter() - start, acting_time)
            exit_code = 0
            return summary
        except ray.exceptions.RayError as error:
            raise LauncherError(f"the distributed run failed: {error}") from None
        finally:
            try:
                self._drain_logs()
            except Exception:  # The queue dies with Ray on a failed start; logs are best effort.
                pass
            for handle in self.handles.values():
                ray.kill(handle, no_restart=True)
            for logger in self.loggers.values():
                logger.close()
            close_loggers(experiment, exit_code=exit_code)

    def _watch(
        self, learner_run: Any, actor_runs: dict[Any, int], actors: list[Any], evaluators: list[Any], counter: Any
    ) -> None:
        """Until every actor is done: drain logs, show progress, trigger evaluations and
        restart the work of actors that Ray restarted."""
        ray, experiment = self.ray, self.experiment
        next_eval, evaluations = self.program.next_evaluation(0), []
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            while actor_runs:
                done, _ = ray.wait([learner_run, *actor_runs], num_returns=1, timeout=0.5)
                self._drain_logs()
                steps = int(ray.get(counter.get_counts.remote()).get("actor_steps", 0))
                progress.advance(steps, force=True)
                if evaluations and len(ray.wait(evaluations, num_returns=len(evaluations), timeout=0)[0]) == len(
                    evaluations
                ):
                    progress.update(eval_return=ray.get(evaluations[0]))
                    evaluations = []
                if steps >= next_eval and not evaluations and steps < experiment.max_actor_steps:
                    evaluations = [e.evaluate.remote(experiment.eval_episodes) for e in evaluators]
                    next_eval = self.program.next_evaluation(steps)
                for ref in done:
                    if ref == learner_run:
                        try:
                            ray.get(ref)
                            raise LauncherError("the learner stopped before the actors finished")
                        except ray.exceptions.RayError as error:
                            raise LauncherError(f"the learner failed: {error}") from None
                    actor_id = actor_runs.pop(ref)
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError as error:
                        self._restart(actor_id, actors[actor_id], actor_runs, error)

    def _restart(self, actor_id: int, actor: Any, actor_runs: dict[Any, int], error: Exception) -> None:
        """Counts the death, waits until Ray has rebuilt the actor, then resumes its work."""
        self.restarts[actor_id] += 1
        if self.restarts[actor_id] > self.launcher.max_restarts:
            raise LauncherError(
                f"actor {actor_id} died more than launcher.max_restarts={self.launcher.max_restarts} times: {error}"
            )
        deadline = time.monotonic() + self.launcher.restart_timeout_s
        while True:
            try:
                pid = self.ray.get(actor.pid.remote())
                break
            except self.ray.exceptions.ActorUnavailableError:  # Still being rebuilt.
                if time.monotonic() > deadline:
                    raise LauncherError(f"actor {actor_id} did not come back within launcher.restart_timeout_s") from None
                time.sleep(0.5)
        self._record_pid(f"actor_{actor_id}", pid)
        start = self.ray.get(actor.start_info.remote())
        restarts = f"{self.restarts[actor_id]}/{self.launcher.max_restarts}"
        self._event(
            f"actor {actor_id} died; restarted by Ray as pid {pid} ({restarts}):"
            f" restart {start['restart']} with a fresh key, schedules resumed at step {start['steps']},"
            f" {start['reclaimed']} leased steps returned to the budget"
        )
        actor_runs[actor.run.remote()] = actor_id

    def _check_budget(self, counter: Any) -> None:
        """Records how the step budget was spent; a mismatch would be a counting bug."""
        budget = self.ray.get(counter.budget.remote())
        counted = int(self.ray.get(counter.get_counts.remote()).get("actor_steps", 0))
        message = (
            f"step budget: {counted} actor steps counted of {self.experiment.max_actor_steps};"
            f" per actor {budget['counted']}; restarts {budget['restarts']}"
        )
        if counted != self.experiment.max_actor_steps or budget["unleased"] or any(budget["outstanding"].values()):
            message += f"; MISMATCH: unleased {budget['unleased']}, leased but uncounted {budget['outstanding']}"
        self._event(message)

    def _write_node_pids(self, replay: Any, counter: Any, learner: Any, actors: list, evaluators: list) -> None:
        """logs/nodes.json: which process hosts which node, for operators (and tests)."""
        handles = self.handles
        handles.update({"replay": replay, "counter": counter, "learner": learner})
        handles.update({f"actor_{i}": a for i, a in enumerate(actors)})
        handles.update({f"evaluator_{i}": e for i, e in enumerate(evaluators)})
        for name, pid in zip(handles, self.ray.get([h.pid.remote() for h in handles.values()])):
            self._record_pid(name, pid)

    def _record_pid(self, name: str, pid: int) -> None:
        self.node_pids[name] = pid
        directory = os.path.join(self.experiment.run_directory, "logs")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "nodes.json"), "w") as file:
            json.dump(self.node_pids, file, indent=2)


def _wait_for_exit(pids: Any, timeout_s: float) -> None:
    """Waits for node processes to end after shutdown, killing any that linger."""
    import psutil

    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    for process in alive:
        process.kill()
    psutil.wait_procs(alive, timeout=5)
