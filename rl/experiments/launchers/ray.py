"""conf/launcher/ray.yaml: every node of the experiment in its own Ray process.

The driver (this process) starts or joins Ray, places the nodes, owns the loggers
(nodes send their records through a Ray queue) and watches the run: it restarts the
work of actors Ray has restarted, restores a learner Ray has restarted from the last
checkpoint, stops everything when the step budget is spent, writes checkpoints (every
`checkpoint.every_seconds`, at the end, and on SIGINT/SIGTERM) and summary.json, and
shuts down what it started. The same command on the same run directory resumes a run
(rl/experiments/resume.py). Every wait on a node is bounded: an answer that does not
come is a `LauncherError` naming the node and the call.
"""

from __future__ import annotations

import dataclasses
import logging
import json
import os
import re
import socket
import time
from typing import Any

import rl
from rl import checkpointing
from rl.checks import require_at_least, require_non_negative, require_positive
from rl.experiments import lifecycle
from rl.experiments.config import ExperimentConfig
from rl.experiments.builders import DistributedProgram
from rl.experiments.launchers.base import Launcher, LauncherError
from rl.experiments.progress import ProgressDisplay
from rl.experiments.summary import RunSummary, run_start_time

_HOST_PORT = re.compile(r"^(ray://)?(?P<host>[^:/\s]+):(?P<port>\d+)$")
# Environment of every node: no GPU pre-allocation fights, no TensorFlow chatter.
# Ray announces on every start that token authentication is on (its default for a local
# instance, documented in the README's security section). That notice is dropped; the
# warning that authentication is off still shows.
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def _drop_token_auth_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Token authentication is enabled")


NODE_ENVIRONMENT = {
    "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


@dataclasses.dataclass
class RayLauncher(Launcher):
    num_actors: int = 2
    num_evaluators: int = 1
    address: str | None = None
    learner_num_cpus: float = 1.0
    learner_num_gpus: float = 0.0
    actor_num_cpus: float = 0.5
    # Custom Ray resources each actor needs ({"actor_host": 1}): actors go only to nodes
    # started with them (`ray start --resources='{"actor_host": 8}'`).
    actor_resources: dict[str, float] | None = None
    max_restarts: int = 3
    max_learner_restarts: int = 3
    max_replay_restarts: int = 3
    restart_timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    stop_timeout_s: float = 10.0
    call_timeout_s: float = 120.0
    evaluation_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        require_at_least(self, 1, "num_actors", "num_evaluators")
        resources = ("learner_num_cpus", "learner_num_gpus", "actor_num_cpus")
        require_non_negative(self, *resources, "max_restarts", "max_learner_restarts", "max_replay_restarts")
        timeouts = ("restart_timeout_s", "connect_timeout_s", "stop_timeout_s", "call_timeout_s")
        require_positive(self, *timeouts, "evaluation_timeout_s")
        for name, amount in (self.actor_resources or {}).items():
            if not (isinstance(amount, (int, float)) and amount > 0):
                raise ValueError(f"actor_resources.{name} must be a number > 0, got {amount!r}")
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
        nodes = None
        try:
            nodes = RayNodes(self, experiment)
            return lifecycle.run(experiment, nodes)
        finally:
            if started_here:
                ray.shutdown()
                if nodes is not None:
                    _wait_for_exit(nodes.node_pids.values(), self.stop_timeout_s)

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
        logging.getLogger(TOKEN_AUTH_LOGGER).addFilter(_drop_token_auth_notice)
        # The installed `rl` package travels to every node (a remote cluster has no copy).
        runtime_env: dict[str, Any] = {"env_vars": dict(NODE_ENVIRONMENT), "py_modules": [rl]}
        if self.address is None:
            # A local instance sized to this machine, but large enough for the nodes asked for.
            needed = self.learner_num_cpus + self.num_actors * self.actor_num_cpus
            for attempt in (1, 2):  # A busy machine can miss Ray's start-up deadline once.
                try:
                    ray.init(
                        num_cpus=max(os.cpu_count() or 1, int(needed + 0.999)),
                        num_gpus=None,
                        include_dashboard=False,
                        log_to_driver=False,
                        logging_level=logging.WARNING,  # Not Ray's INFO lines on every run.
                        runtime_env=runtime_env,
                    )
                    return
                except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception on a start-up timeout.
                    ray.shutdown()
                    if attempt == 2:
                        raise LauncherError(f"cannot start Ray on this machine ({_first_line(error)})") from None
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING, runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, TimeoutError) as error:
            raise LauncherError(f"launcher.address: cannot join Ray at {self.address} ({error})") from None


def _first_line(error: BaseException) -> str:
    """One line about a Ray error: the task's own exception when there is one."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


class RayNodes(lifecycle.Nodes):
    """The nodes of one distributed run, placed by Ray and watched from this process."""

    def __init__(self, launcher: RayLauncher, experiment: ExperimentConfig):
        import ray

        from rl.experiments.launchers import ray_nodes

        self.ray = ray
        self.launcher = launcher
        self.experiment = experiment
        self.names = ray_nodes.node_names()
        self._head_node: str | None = None
        remote_experiment = dataclasses.replace(
            experiment, logger_factory=ray_nodes.QueueLoggerFactory(self.names["log_queue"], run_start_time(experiment))
        )
        self.program = DistributedProgram(remote_experiment, launcher.num_actors, launcher.num_evaluators)
        self.loggers: dict[tuple, Any] = {}
        self.restarts = [0] * launcher.num_actors
        self.learner_restarts = 0
        self.replay_restarts = 0
        self.evaluator_restarts = [0] * self.program.evaluators
        self.handles: dict[str, Any] = {}
        self.node_pids: dict[str, int] = {}
        self.log_queue = None
        self.actor_runs: dict[Any, int] = {}
        self.evaluations: list[Any] = []  # The round in flight: one call per evaluator.
        self.held_at = -1
        # What a restarted learner continues from: (checkpoint name, learner state, learner steps).
        self.saved_learner: tuple[str | None, Any, int] = (None, None, 0)

    # ------------------------------------------------------------------ plumbing

    def _get(self, refs: Any, node: str, call: str, timeout: float | None = None) -> Any:
        """`ray.get` with a bound: an answer that does not come names the node and the call."""
        timeout = self.launcher.call_timeout_s if timeout is None else timeout
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise LauncherError(f"{node}.{call} did not answer within {timeout:g} s") from None

    def _log(self, key: tuple, row: dict) -> None:
        if key not in self.loggers:
            label, steps_key, instance = key
            self.loggers[key] = self.experiment.logger_factory(label, steps_key, instance)
        self.loggers[key].write(row)

    def _drain_logs(self) -> None:
        queue = self.log_queue.actor
        while size := self._get(queue.qsize.remote(), "log queue", "qsize"):
            for key, row in self._get(queue.get_nowait_batch.remote(size), "log queue", "get_nowait_batch"):
                self._log(key, row)

    def _event(self, message: str) -> None:
        """A launcher event (restart, failure) for the terminal and logs/launcher.csv."""
        self._log(("launcher", None, None), {"event": message, "time": time.time()})

    # ------------------------------------------------------------------ the run

    def start(self) -> None:
        from ray.util.queue import Queue

        from rl.experiments.launchers import ray_nodes

        launcher, experiment, names = self.launcher, self.experiment, self.names
        restore = experiment.restore
        self.log_queue = Queue(
            maxsize=100_000, actor_options={"num_cpus": 0, "name": names["log_queue"], **self._on_head_node(hard=True)}
        )
        # Passed by value: the program pickles to a few kilobytes, so Ray keeps it inline in
        # each node's creation task, where a restart finds it (an object-store reference
        # would have to outlive every restart).
        program = self.program
        replay_directory, fallback = self._replay_checkpoint_paths()
        self.replay_directory = replay_directory
        # Nodes find the replay, the counter and the learner by name: a handle passed to
        # a node that Ray may restart would sit in the object store (and Ray warns on
        # every run). Every node starts at once; each waits for the replay address itself.
        self.counter = ray_nodes.CounterNode.options(name=names["counter"], **self._on_head_node(hard=True)).remote(
            experiment.max_actor_steps,
            restore.counts if restore is not None else None,
            self._saved_schedule_steps(),
            experiment.session,
            launcher.max_restarts + 1,
        )
        self._hold_until(self.record.next_eval)  # Acting stops at each evaluation point until its round is played.
        self.replay = ray_nodes.ReplayNode.options(
            name=names["replay"], max_restarts=launcher.max_replay_restarts, **self._on_head_node(hard=True)
        ).remote(program, replay_directory, fallback, names["counter"])
        self.learner = ray_nodes.LearnerNode.options(
            num_cpus=launcher.learner_num_cpus,
            num_gpus=launcher.learner_num_gpus,
            max_restarts=launcher.max_learner_restarts,
            # run, every actor's and evaluator's parameter requests, and the driver's calls.
            max_concurrency=launcher.num_actors + self.program.evaluators + 4,
            name=names["learner"],
            **self._on_head_node(),
        ).remote(program, names["replay"], names["counter"])
        if restore is not None:  # Checked against the node's own state, then loaded into it.
            template = self._get(self.learner.save.remote(), "learner", "save")
            try:
                state = restore.learner_state(template)
            except checkpointing.CheckpointError as error:
                raise LauncherError(f"cannot restore the learner: {error}") from None
            self._get(self.learner.restore.remote(state), "learner", "restore")
            learner_steps = int(restore.counts.get("learner_steps", 0))
            self.saved_learner = (os.path.basename(restore.checkpoint), state, learner_steps)
        actor_options = {
            "num_cpus": launcher.actor_num_cpus,
            "resources": dict(launcher.actor_resources or {}),
            "max_restarts": launcher.max_restarts,
            "runtime_env": {"env_vars": {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}},
        }
        self.actors = [
            ray_nodes.ActorNode.options(**actor_options).remote(
                program, i, names["replay"], names["learner"], names["counter"]
            )
            for i in range(launcher.num_actors)
        ]
        self.evaluators = [
            ray_nodes.EvaluatorNode.options(max_restarts=launcher.max_restarts, **self._on_head_node(hard=True)).remote(
                program, i, names["learner"], names["counter"], launcher.restart_timeout_s
            )
            for i in range(self.program.evaluators)
        ]
        self._write_node_pids()
        self.learner_run = self.learner.run.remote()
        self.replay_serving = self.replay.serve.remote()
        self.actor_runs = {actor.run.remote(): i for i, actor in enumerate(self.actors)}

    def _hold_until(self, step: int) -> None:
        if step != self.held_at:
            self._get(self.counter.hold_until.remote(step), "counter", "hold_until")
            self.held_at = step

    def act(self, until: int, pause: Any, progress: ProgressDisplay) -> int:
        """Watches the actors until the count reaches `until` (they are held there) or, at
        the budget, every actor is done: drains logs, shows progress, restarts the work of
        actors Ray has restarted and restores a learner or replay node Ray has restarted."""
        ray, final = self.ray, until >= self.experiment.max_actor_steps
        self._hold_until(until)
        steps = self._actor_steps()
        while self.actor_runs and (final or steps < until):
            done, _ = ray.wait([self.learner_run, self.replay_serving, *self.actor_runs], num_returns=1, timeout=0.5)
            self._drain_logs()
            steps = self._actor_steps()
            progress.advance(steps, force=True)
            for ref in done:
                if ref == self.learner_run:
                    self._learner_ended(ref)
                elif ref == self.replay_serving:
                    self._replay_ended(ref)
                else:
                    self._actor_ended(ref)
            if pause():
                break
        return self._actor_steps()

    def _actor_ended(self, ref: Any) -> None:
        actor_id = self.actor_runs.pop(ref)
        try:
            self._get(ref, f"actor_{actor_id}", "run")
        except self.ray.exceptions.RayActorError as error:  # Dead, or unavailable (its node going away).
            self._restart(actor_id, self.actors[actor_id], error)
        except self.ray.exceptions.RayTaskError as error:
            raise LauncherError(f"actor {actor_id} failed: {_first_line(error)}") from None

    def _actor_steps(self) -> int:
        return int(self._get(self.counter.get_counts.remote(), "counter", "get_counts").get("actor_steps", 0))

    def evaluate(self) -> tuple[int, float, float]:
        """A round of every evaluator (the count stops at the point, actors held there, so
        they report exactly its actor steps, as in a local run)."""
        timeout = self.launcher.evaluation_timeout_s
        self.evaluations = [e.evaluate.remote(self.experiment.eval_episodes) for e in self.evaluators]
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            ready, _ = self.ray.wait(self.evaluations, num_returns=len(self.evaluations), timeout=remaining)
            if len(ready) < len(self.evaluations):
                raise LauncherError(f"evaluator.evaluate did not answer within {timeout:g} s")
            results, died = [], False
            for instance, ref in enumerate(self.evaluations):
                try:
                    results.append(self._get(ref, f"evaluator_{instance}", "evaluate"))
                except self.ray.exceptions.RayActorError as error:
                    self._evaluator_died(instance, error)
                    died = True
                except self.ray.exceptions.RayError as error:
                    raise LauncherError(f"an evaluator failed: {_first_line(error)}") from None
            if not died:
                break
        self.evaluations = []
        steps = max(int(steps) for steps, _, _ in results)
        return steps, float(sum(mean for _, mean, _ in results) / len(results)), max(ended for _, _, ended in results)

    def _evaluator_died(self, instance: int, error: Exception) -> None:
        """Counts the death, waits until Ray has rebuilt the evaluator, then asks it for
        its part of the round again."""
        self.evaluator_restarts[instance] += 1
        limit = self.launcher.max_restarts
        if self.evaluator_restarts[instance] > limit:
            raise LauncherError(
                f"evaluator {instance} died more than launcher.max_restarts={limit} times ({_first_line(error)})"
            )
        evaluator = self.evaluators[instance]
        pid = self._wait_until_back(evaluator, f"evaluator {instance}")
        self._record_pid(f"evaluator_{instance}", pid)
        self._event(
            f"evaluator {instance} died; restarted by Ray as pid {pid} ({self.evaluator_restarts[instance]}/{limit}):"
            " it plays its round again"
        )
        self.evaluations[instance] = evaluator.evaluate.remote(self.experiment.eval_episodes)

    def end_acting(self, interrupted: bool) -> None:
        """Interrupted: the actors end their leases. Finished: the budget is checked. Either
        way a learner that died unnoticed is restored first."""
        if interrupted:
            self._get(self.counter.close.remote(), "counter", "close")
            if self.actor_runs:
                runs = list(self.actor_runs)
                self.ray.wait(runs, num_returns=len(runs), timeout=self.launcher.stop_timeout_s)
        else:
            self._check_budget()
        self._ensure_learner()

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        """The learner's state between two steps, with the counts at that moment; a learner
        that dies meanwhile is restored first."""
        try:
            taken = self._get(self.learner.checkpoint.remote(), "learner", "checkpoint")
        except self.ray.exceptions.RayActorError as error:
            self._learner_died(error)
            taken = self._get(self.learner.checkpoint.remote(), "learner", "checkpoint")
        except self.ray.exceptions.RayTaskError as error:  # A numerical fault, say.
            message = f"the learner's checkpoint failed ({_first_line(error)}); {self.checkpoints.kept()}"
            raise LauncherError(message) from None
        counts = taken["counts"]
        schedule_steps = {int(k): int(v) for k, v in taken["schedule_steps"].items()}
        snapshot = lifecycle.Snapshot(int(counts.get("actor_steps", 0)), counts, taken["state"])
        snapshot.state["actor_schedule_step"] = schedule_steps.get(0, 0)
        snapshot.state["actor_schedule_steps"] = {str(k): v for k, v in sorted(schedule_steps.items())}
        if checkpoint and self.checkpoints.saves_replay and self.replay_directory is not None:
            snapshot.replay = self._replay_checkpoint
        return snapshot

    def _replay_checkpoint(self) -> str:
        try:
            return self._get(self.replay.checkpoint.remote(), "replay", "checkpoint")
        except self.ray.exceptions.RayActorError as error:  # It died: wait for its restart.
            self._replay_died(error)
            return self._get(self.replay.checkpoint.remote(), "replay", "checkpoint")

    def saved(self, path: str, snapshot: lifecycle.Snapshot) -> None:
        learner_steps = int(snapshot.counts.get("learner_steps", 0))
        self.saved_learner = (os.path.basename(path), snapshot.learner_state, learner_steps)

    def end_learning(self) -> None:
        learner_run = self.learner_run
        self.learner.stop.remote()
        self.ray.wait([learner_run], timeout=self.launcher.stop_timeout_s)

    def counts(self) -> dict[str, Any]:
        return self._get(self.counter.get_counts.remote(), "counter", "get_counts", timeout=5.0)

    def failure(self, error: Exception) -> str | None:
        if isinstance(error, self.ray.exceptions.RayError):
            message = f"the distributed run failed: {_first_line(error)}"
        else:
            message = super().failure(error)
        if message is not None:
            try:  # The reason in logs/launcher.csv, when the log queue still answers.
                self._event(f"run failed: {message}")
            except Exception:  # noqa: BLE001 - best effort: the reason is raised either way.
                pass
        return message

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        self._close_node_loggers()  # Before the run's own loggers (its W&B run) close.
        return summary

    def _close_node_loggers(self) -> None:
        try:
            if self.log_queue is not None:
                self._drain_logs()
        except Exception:  # noqa: BLE001 - the queue dies with Ray on a failed start; logs are best effort.
            pass
        for logger in self.loggers.values():
            logger.close()
        self.loggers = {}

    def close(self) -> None:
        self._close_node_loggers()
        for handle in self.handles.values():
            self.ray.kill(handle, no_restart=True)

    def _replay_checkpoint_paths(self) -> tuple[str | None, str | None]:
        """Where the replay node checkpoints its tables, and the checkpoint it starts from
        (`checkpoint.replay=true`; the replay node shares this machine's file system)."""
        settings, restore = self.checkpoints.settings, self.experiment.restore
        restore_replay = restore is not None and restore.restore_replay
        if not (settings.replay and (settings.enabled or restore_replay)):
            return None, None
        directory = checkpointing.replay_root(self.experiment.run_directory)
        return directory, (restore.replay_checkpoint if restore_replay else None)

    def _on_head_node(self, hard: bool = False) -> dict[str, Any]:
        """Ray options that place a node on the head node: `hard` for the nodes that hold
        no CPU while they run (replay, counter, log queue, evaluators: Ray places such
        actors anywhere under a soft preference), softly for the learner (one asking for
        GPUs the head lacks goes to a node that has them). Actors go wherever their
        resources are (`actor_resources`)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._head_node is None:
            heads = [
                node["NodeID"]
                for node in self.ray.nodes()
                if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {})
            ]
            self._head_node = heads[0] if heads else ""
        if not self._head_node:
            return {}
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=self._head_node, soft=not hard)}

    def _saved_schedule_steps(self) -> dict[int, int]:
        """Each actor's schedule step in the checkpoint resumed from (a local run's is actor 0's)."""
        restore = self.experiment.restore
        if restore is None:
            return {}
        steps = restore.state.get("actor_schedule_steps")
        if steps is None:
            return {0: int(restore.state.get("actor_schedule_step", 0))}
        return {int(actor_id): int(count) for actor_id, count in steps.items()}

    # ------------------------------------------------------------------ faults

    def _wait_until_back(self, handle: Any, name: str) -> int:
        """The pid of a node Ray is restarting, once it answers (within restart_timeout_s)."""
        return self._call_when_back(handle, name, "pid")

    def _call_when_back(self, handle: Any, name: str, method: str, *args: Any) -> Any:
        """`handle.method(*args)` on a node Ray is restarting, asked again while the node
        is unavailable (its process or machine going away, its new one starting) until
        restart_timeout_s has passed."""
        exceptions = self.ray.exceptions
        timeout = self.launcher.restart_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            try:
                call = getattr(handle, method).remote(*args)
                return self.ray.get(call, timeout=max(0.1, deadline - time.monotonic()))
            except exceptions.ActorUnavailableError:  # Still being rebuilt.
                pass
            except exceptions.GetTimeoutError:
                pass
            except exceptions.RayActorError as error:
                raise LauncherError(f"{name} died and Ray did not restart it ({_first_line(error)})") from None
            if time.monotonic() > deadline:
                raise LauncherError(f"{name} did not come back within launcher.restart_timeout_s={timeout:g} s")
            time.sleep(0.5)

    def _learner_ended(self, ref: Any) -> None:
        """The learner's run ended during acting: a fault (restore it) or a failure."""
        try:
            self._get(ref, "learner", "run")
        except self.ray.exceptions.RayActorError as error:
            self._learner_died(error)
            return
        except self.ray.exceptions.RayTaskError as error:
            raise LauncherError(f"the learner failed: {_first_line(error)}") from None
        raise LauncherError("the learner stopped before the actors finished")

    def _ensure_learner(self) -> None:
        """Restores the learner first if it died and nothing has noticed yet."""
        ready, _ = self.ray.wait([self.learner_run], timeout=0)
        if ready:
            try:
                self._get(self.learner_run, "learner", "run")
            except self.ray.exceptions.RayActorError as error:
                self._learner_died(error)
            except self.ray.exceptions.RayTaskError as error:
                raise LauncherError(f"the learner failed: {_first_line(error)}") from None

    def _learner_died(self, error: Exception) -> None:
        """Counts the death, waits until Ray has rebuilt the learner, sets it to the last
        checkpoint (its state and learner steps) and starts it again."""
        self.learner_restarts += 1
        limit = self.launcher.max_learner_restarts
        if self.learner_restarts > limit:
            raise LauncherError(
                f"the learner died more than launcher.max_learner_restarts={limit} times ({_first_line(error)})"
            )
        pid = self._wait_until_back(self.learner, "learner")
        self._record_pid("learner", pid)
        checkpoint, state, learner_steps = self.saved_learner
        reported = self._get(self.counter.set_learner_steps.remote(learner_steps), "counter", "set_learner_steps")
        digest = self._get(self.learner.restore.remote(state), "learner", "restore")
        origin = f"checkpoint {checkpoint}" if checkpoint is not None else "its initial state (no checkpoint yet)"
        superseded = self._supersede_learner_rows(learner_steps)
        # The dead learner sent its counts every half second: `reported` may miss its last steps.
        self._event(
            f"learner died; restarted by Ray as pid {pid} ({self.learner_restarts}/{limit}):"
            f" restored from {origin} (state sha256 {digest[:12]}) at {learner_steps} learner steps;"
            f" it had reported {reported}, so {reported - learner_steps} learner steps were lost"
            f" ({superseded} of its log rows past them moved to logs/superseded/)"
        )
        self.learner_run = self.learner.run.remote()

    def _replay_ended(self, ref: Any) -> None:
        """The replay node's watch returned during acting: a fault (it is restarting) or a bug."""
        try:
            self._get(ref, "replay", "serve")
        except self.ray.exceptions.RayActorError as error:
            self._replay_died(error)
            return
        raise LauncherError("the replay node stopped serving before the actors finished")

    def _replay_died(self, error: Exception) -> None:
        """Counts the death and waits until Ray has rebuilt the replay node on its address
        (restored from the newest replay checkpoint, or empty); writers and the learner's
        dataset reconnect to it by themselves."""
        self.replay_restarts += 1
        limit = self.launcher.max_replay_restarts
        if self.replay_restarts > limit:
            raise LauncherError(
                f"the replay node died more than launcher.max_replay_restarts={limit} times ({_first_line(error)})"
            )
        start = self._call_when_back(self.replay, "the replay node", "start_info")
        pid = start["pid"]
        self._record_pid("replay", pid)
        origin = (
            f"restored from {os.path.relpath(start['restored'], self.experiment.run_directory)}"
            if start["restored"]
            else "with empty tables (no replay checkpoint: checkpoint.replay=false, or none yet)"
        )
        self._event(
            f"replay died; restarted by Ray as pid {pid} ({self.replay_restarts}/{limit}) at {start['address']},"
            f" {origin}, holding {start['items']} items"
        )
        self.replay_serving = self.replay.serve.remote()

    def _supersede_learner_rows(self, learner_steps: int) -> int:
        """Moves the dead learner's records past the restored `learner_steps` out of
        logs/learner.csv (to logs/superseded/), so the restored learner's steps, which
        count from there again, make one curve. Returns how many rows moved."""
        from rl.loggers.csv import move_rows

        self._drain_logs()  # The dead learner's last records, before they are sorted out.
        logs = os.path.join(self.experiment.run_directory, "logs")
        destination = os.path.join(logs, "superseded", f"learner.restart{self.learner_restarts}.csv")

        def lost(row: dict[str, str]) -> bool:
            return (row.get("learner_steps") or "").isdigit() and int(row["learner_steps"]) > learner_steps

        return move_rows(os.path.join(logs, "learner.csv"), lost, destination)

    def _restart(self, actor_id: int, actor: Any, error: Exception) -> None:
        """Counts the death, waits until Ray has rebuilt the actor, then resumes its work."""
        self.restarts[actor_id] += 1
        if self.restarts[actor_id] > self.launcher.max_restarts:
            raise LauncherError(
                f"actor {actor_id} died more than launcher.max_restarts={self.launcher.max_restarts} times"
                f" ({_first_line(error)})"
            )
        pid = self._wait_until_back(actor, f"actor {actor_id}")
        self._record_pid(f"actor_{actor_id}", pid)
        start = self._call_when_back(actor, f"actor {actor_id}", "start_info")
        restarts = f"{self.restarts[actor_id]}/{self.launcher.max_restarts}"
        self._event(
            f"actor {actor_id} died; restarted by Ray as pid {pid} ({restarts}):"
            f" restart {start['restart']} with a fresh key, schedules resumed at step {start['steps']},"
            f" {start['reclaimed']} leased steps returned to the budget"
        )
        self.actor_runs[actor.run.remote()] = actor_id

    def _check_budget(self) -> None:
        """Records how the step budget was spent; a mismatch would be a counting bug."""
        counter = self.counter
        budget = self._get(counter.budget.remote(), "counter", "budget")
        counted = int(self._get(counter.get_counts.remote(), "counter", "get_counts").get("actor_steps", 0))
        message = (
            f"step budget: {counted} actor steps counted of {self.experiment.max_actor_steps};"
            f" per actor {budget['counted']}; restarts {budget['restarts']}"
        )
        if counted != self.experiment.max_actor_steps or budget["unleased"] or any(budget["outstanding"].values()):
            message += f"; MISMATCH: unleased {budget['unleased']}, leased but uncounted {budget['outstanding']}"
        self._event(message)

    def _write_node_pids(self) -> None:
        """logs/nodes.json: which process hosts which node, for operators (and tests)."""
        handles = self.handles
        handles.update({"replay": self.replay, "counter": self.counter, "learner": self.learner})
        handles.update({f"actor_{i}": a for i, a in enumerate(self.actors)})
        handles.update({f"evaluator_{i}": e for i, e in enumerate(self.evaluators)})
        pids = self._get([h.pid.remote() for h in handles.values()], "every node", "pid")
        for name, pid in zip(handles, pids):
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
