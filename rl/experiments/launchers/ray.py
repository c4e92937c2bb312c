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
from rl.experiments.config import ExperimentConfig
from rl.experiments.distributed import DistributedProgram
from rl import checkpointing
from rl.experiments.interrupts import RunInterrupted, install_stop_requests
from rl.experiments.launchers.errors import LauncherError
from rl.experiments.progress import ProgressDisplay
from rl.experiments.resume import RunCheckpointer, restore_evaluations, run_state
from rl.experiments.summary import RunSummary, close_loggers, finish_run, merge_evaluations, run_start_time

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
class RayLauncher:
    # It restores a run's checkpoint (rl/experiments/resume.py) when the experiment has one.
    supports_resume = True

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
        if self.num_actors < 1:
            raise ValueError(f"num_actors must be >= 1, got {self.num_actors}")
        if self.num_evaluators < 1:
            raise ValueError(f"num_evaluators must be >= 1, got {self.num_evaluators}")
        for name in (
            "learner_num_cpus",
            "learner_num_gpus",
            "actor_num_cpus",
            "max_restarts",
            "max_learner_restarts",
            "max_replay_restarts",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in (
            "restart_timeout_s",
            "connect_timeout_s",
            "stop_timeout_s",
            "call_timeout_s",
            "evaluation_timeout_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
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


class _SavedLearner:
    """A learner state already read from the learner node, as `RunCheckpointer.save` takes it."""

    def __init__(self, state: Any):
        self._state = state

    def save(self) -> Any:
        return self._state


class _ReplayCheckpoints:
    """The replay node's `checkpoint`, as `RunCheckpointer.save` takes a replay client."""

    def __init__(self, run: "_RayRun", replay: Any):
        self._run = run
        self._replay = replay

    def checkpoint(self) -> str:
        try:
            return self._run._get(self._replay.checkpoint.remote(), "replay", "checkpoint")
        except self._run.ray.exceptions.RayActorError as error:  # It died: wait for its restart.
            self._run._replay_died(error)
            return self._run._get(self._replay.checkpoint.remote(), "replay", "checkpoint")


def _first_line(error: BaseException) -> str:
    """One line about a Ray error: the task's own exception when there is one."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        error = cause
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


class _RayRun:
    """One distributed run, from placing the nodes to writing the summary."""

    def __init__(self, launcher: RayLauncher, experiment: ExperimentConfig):
        import ray
        from ray.util.queue import Queue

        self.ray = ray
        self.launcher = launcher
        self.experiment = experiment
        from rl.experiments.launchers import ray_nodes

        self.names = ray_nodes.node_names()
        self._head_node: str | None = None
        self.log_queue = Queue(
            maxsize=100_000,
            actor_options={"num_cpus": 0, "name": self.names["log_queue"], **self._on_head_node(hard=True)},
        )
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
        self.checkpoints = RunCheckpointer(experiment)
        restore = experiment.restore
        # The evaluation curve so far, per evaluator (a resumed run starts with the saved one).
        saved_curve = restore_evaluations(restore, experiment) if restore is not None else ([], [])
        self.histories = [(list(saved_curve[0]), list(saved_curve[1])) for _ in range(self.program.evaluators)]
        self.evaluations: list[Any] = []  # The round in flight: one call per evaluator.
        actor_steps = restore.actor_steps if restore is not None else 0
        self.next_eval = int(restore.state.get("next_eval", 0)) if restore is not None else 0
        if self.next_eval <= actor_steps:
            self.next_eval = self.program.next_evaluation(actor_steps)
        self.acting_before = float(restore.state.get("acting_time_s", 0.0)) if restore is not None else 0.0
        self.acting_start: float | None = None
        # What a restarted learner continues from: (checkpoint name, learner state, learner steps).
        self.saved: tuple[str | None, Any, int] = (None, None, 0)

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

    def _acting_time(self) -> float:
        if self.acting_start is None:
            return self.acting_before
        return self.acting_before + time.perf_counter() - self.acting_start

    def _curve(self) -> tuple[list[tuple[int, float]], list[float]]:
        """The run's evaluation curve: every evaluator's rounds, averaged."""
        returns, times = merge_evaluations(self.histories)
        return returns, times or []

    # ------------------------------------------------------------------ the run

    def run(self) -> RunSummary:
        from rl.experiments.launchers import ray_nodes

        ray, launcher, experiment = self.ray, self.launcher, self.experiment
        restore = experiment.restore
        # Passed by value: the program pickles to a few kilobytes, so Ray keeps it inline in
        # each node's creation task, where a restart finds it (an object-store reference
        # would have to outlive every restart).
        program = self.program
        start = time.perf_counter()
        exit_code = 1
        stop, restore_signal_handlers = install_stop_requests()  # SIGINT/SIGTERM: checkpoint and stop.
        try:
            replay_directory, fallback = self._replay_checkpoint_paths()
            # Nodes find the replay, the counter and the learner by name: a handle passed to
            # a node that Ray may restart would sit in the object store (and Ray warns on
            # every run). Every node starts at once; each waits for the replay address itself.
            names = self.names
            counter = ray_nodes.CounterNode.options(name=names["counter"], **self._on_head_node(hard=True)).remote(
                experiment.max_actor_steps,
                restore.counts if restore is not None else None,
                self._saved_schedule_steps(),
                experiment.session,
                launcher.max_restarts + 1,
            )
            self.counter = counter
            # Acting stops at each evaluation point until its round is played.
            self._get(counter.hold_until.remote(self.next_eval), "counter", "hold_until")
            replay = ray_nodes.ReplayNode.options(
                name=names["replay"], max_restarts=launcher.max_replay_restarts, **self._on_head_node(hard=True)
            ).remote(program, replay_directory, fallback, names["counter"])
            self.replay = replay
            learner = ray_nodes.LearnerNode.options(
                num_cpus=launcher.learner_num_cpus,
                num_gpus=launcher.learner_num_gpus,
                max_restarts=launcher.max_learner_restarts,
                # run, every actor's and evaluator's parameter requests, and the driver's calls.
                max_concurrency=launcher.num_actors + self.program.evaluators + 4,
                name=names["learner"],
                **self._on_head_node(),
            ).remote(program, names["replay"], names["counter"])
            self.learner = learner
            if restore is not None:  # Checked against the node's own state, then loaded into it.
                template = self._get(learner.save.remote(), "learner", "save")
                try:
                    state = restore.learner_state(template)
                except checkpointing.CheckpointError as error:
                    raise LauncherError(f"cannot restore the learner: {error}") from None
                self._get(learner.restore.remote(state), "learner", "restore")
                self.saved = (os.path.basename(restore.checkpoint), state, int(restore.counts.get("learner_steps", 0)))
            actor_options = {
                "num_cpus": launcher.actor_num_cpus,
                "resources": dict(launcher.actor_resources or {}),
                "max_restarts": launcher.max_restarts,
                "runtime_env": {"env_vars": {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}},
            }
            actors = [
                ray_nodes.ActorNode.options(**actor_options).remote(
                    program, i, names["replay"], names["learner"], names["counter"]
                )
                for i in range(launcher.num_actors)
            ]
            evaluators = [
                ray_nodes.EvaluatorNode.options(
                    max_restarts=launcher.max_restarts, **self._on_head_node(hard=True)
                ).remote(program, i, names["learner"], names["counter"], launcher.restart_timeout_s)
                for i in range(self.program.evaluators)
            ]
            self.evaluators = evaluators
            self.replay_checkpoints = _ReplayCheckpoints(self, replay) if replay_directory is not None else None
            self._write_node_pids(replay, counter, learner, actors, evaluators)
            self.learner_run = learner.run.remote()
            self.replay_serving = replay.serve.remote()
            actor_runs = {actor.run.remote(): i for i, actor in enumerate(actors)}
            self.acting_start = time.perf_counter()
            self.checkpoints.start()
            self._watch(actor_runs, actors, stop)
            if stop.requested:
                summary, path = self._interrupt(actor_runs, start)
                exit_code = 128 + stop.signum
                raise RunInterrupted(stop.signum, summary, path)
            acting_time = self._acting_time()
            self._check_budget(counter)
            self._ensure_learner()  # The final round needs the learner's parameters.
            self._evaluate_now(self.launcher.evaluation_timeout_s)  # The final round.
            learner_run = self.learner_run
            self.learner.stop.remote()
            ray.wait([learner_run], timeout=launcher.stop_timeout_s)
            _, state = self._save()  # The final checkpoint.
            self._drain_logs()
            summary = finish_run(experiment, state["counts"], *self._curve(), time.perf_counter() - start, acting_time)
            exit_code = 0
            return summary
        except ray.exceptions.RayError as error:
            self._failed(f"the distributed run failed: {_first_line(error)}", start)
            raise LauncherError(f"the distributed run failed: {_first_line(error)}") from None
        except LauncherError as error:
            self._failed(str(error), start)
            raise
        finally:
            restore_signal_handlers()
            try:
                self._drain_logs()
            except Exception:  # The queue dies with Ray on a failed start; logs are best effort.
                pass
            for handle in self.handles.values():
                ray.kill(handle, no_restart=True)
            for logger in self.loggers.values():
                logger.close()
            close_loggers(experiment, exit_code=exit_code)

    def _failed(self, message: str, start: float) -> None:
        """A failed run: the reason in logs/launcher.csv and a "failed" summary with the
        counts so far (when the counter still answers). The last checkpoint stays."""
        try:
            self._event(f"run failed: {message}")
            counts = self._get(self.counter.get_counts.remote(), "counter", "get_counts", timeout=5.0)
            finish_run(
                self.experiment,
                counts,
                *self._curve(),
                time.perf_counter() - start,
                self._acting_time(),
                status="failed",
            )
        except Exception:  # Best effort: the reason is raised either way.
            pass

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

    def _watch(self, actor_runs: dict[Any, int], actors: list[Any], stop: Any) -> None:
        """Until every actor is done or a stop is requested: drain logs, show progress,
        trigger evaluations, write periodic checkpoints, restart the work of actors that
        Ray restarted and restore a learner Ray restarted."""
        ray, experiment = self.ray, self.experiment
        with ProgressDisplay(experiment.max_actor_steps, enabled=experiment.progress) as progress:
            while actor_runs and not stop.requested:
                done, _ = ray.wait([self.learner_run, self.replay_serving, *actor_runs], num_returns=1, timeout=0.5)
                self._drain_logs()
                steps = self._actor_steps()
                progress.advance(steps, force=True)
                if self.evaluations:
                    eval_return = self._collect_evaluations(timeout=0)
                    if eval_return is not None:
                        progress.update(eval_return=eval_return)
                        self._get(self.counter.hold_until.remote(self.next_eval), "counter", "hold_until")
                # The count stops at the point (actors are held there), so the round's
                # evaluators report exactly its actor steps, as in a local run.
                if steps >= self.next_eval and not self.evaluations and steps < experiment.max_actor_steps:
                    self.evaluations = [e.evaluate.remote(experiment.eval_episodes) for e in self.evaluators]
                    self.next_eval = self.program.next_evaluation(steps)
                for ref in done:
                    if ref == self.learner_run:
                        self._learner_ended(ref)
                        continue
                    if ref == self.replay_serving:
                        self._replay_ended(ref)
                        continue
                    actor_id = actor_runs.pop(ref)
                    try:
                        self._get(ref, f"actor_{actor_id}", "run")
                    except ray.exceptions.RayActorError as error:  # Dead, or unavailable (its node going away).
                        self._restart(actor_id, actors[actor_id], actor_runs, error)
                    except ray.exceptions.RayTaskError as error:
                        raise LauncherError(f"actor {actor_id} failed: {_first_line(error)}") from None
                # A round in flight finishes first: the checkpoint then holds it.
                if self.checkpoints.due() and not self.evaluations and actor_runs:
                    self._save(periodic=True)

    def _actor_steps(self) -> int:
        return int(self._get(self.counter.get_counts.remote(), "counter", "get_counts").get("actor_steps", 0))

    def _collect_evaluations(self, timeout: float) -> float | None:
        """The round in flight, once every evaluator has answered (within `timeout`):
        added to the curve; returns its mean return (None: not done yet). An evaluator
        that died is waited for while Ray restarts it, then plays its part again."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            ready, _ = self.ray.wait(self.evaluations, num_returns=len(self.evaluations), timeout=remaining)
            if len(ready) < len(self.evaluations):
                return None
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
            if time.monotonic() >= deadline:
                return None
        self.evaluations = []
        for (returns, times), (steps, mean, ended) in zip(self.histories, results):
            returns.append((int(steps), float(mean)))
            times.append(float(ended))
        return float(sum(mean for _, mean, _ in results) / len(results))

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

    def _evaluate_now(self, timeout: float) -> None:
        """Waits for the round in flight, then runs one more round of every evaluator."""
        if self.evaluations and self._collect_evaluations(timeout) is None:
            raise LauncherError(f"evaluator.evaluate did not answer within {timeout:g} s")
        self.evaluations = [e.evaluate.remote(self.experiment.eval_episodes) for e in self.evaluators]
        if self._collect_evaluations(timeout) is None:
            raise LauncherError(f"evaluator.evaluate did not answer within {timeout:g} s")

    # ------------------------------------------------------------------ checkpoints

    def _save(self, periodic: bool = False) -> tuple[str | None, dict[str, Any]]:
        """A checkpoint of the learner between two steps, with the counts at that moment
        (None for the path when checkpoints are off). A learner that dies meanwhile is
        restored first. A `periodic` one is skipped (None) while the actors have not
        stepped since the last (they wait for a learner being restored, say): it would
        replace that checkpoint, which a restore may have named, under the same name."""
        try:
            snapshot = self._get(self.learner.checkpoint.remote(), "learner", "checkpoint")
        except self.ray.exceptions.RayActorError as error:
            self._learner_died(error)
            snapshot = self._get(self.learner.checkpoint.remote(), "learner", "checkpoint")
        except self.ray.exceptions.RayTaskError as error:  # A numerical fault, say.
            kept = (
                f"the last good checkpoint is {self.checkpoints.last}"
                if self.checkpoints.last
                else "no checkpoint was written"
            )
            raise LauncherError(f"the learner's checkpoint failed ({_first_line(error)}); {kept}") from None
        counts = snapshot["counts"]
        actor_steps = int(counts.get("actor_steps", 0))
        if (
            periodic
            and self.checkpoints.last is not None
            and checkpointing.step_of(self.checkpoints.last) == actor_steps
        ):
            self.checkpoints.start()  # The next try, a period from now.
            return None, {}
        schedule_steps = {int(k): int(v) for k, v in snapshot["schedule_steps"].items()}
        state = run_state(
            self.experiment,
            counts,
            actor_steps,
            self.next_eval,
            schedule_steps.get(0, 0),
            *self._curve(),
            self._acting_time(),
        )
        state["actor_schedule_steps"] = {str(k): v for k, v in sorted(schedule_steps.items())}
        path = self.checkpoints.save(_SavedLearner(snapshot["state"]), state, self.replay_checkpoints)
        if path is not None:
            self.saved = (os.path.basename(path), snapshot["state"], int(counts.get("learner_steps", 0)))
        return path, state

    def _interrupt(self, actor_runs: dict[Any, int], start: float) -> tuple[RunSummary, str | None]:
        """SIGINT/SIGTERM: the actors end their leases, the round in flight ends, then a
        checkpoint and an "interrupted" summary."""
        ray, launcher = self.ray, self.launcher
        self._get(self.counter.close.remote(), "counter", "close")
        if actor_runs:
            ray.wait(list(actor_runs), num_returns=len(actor_runs), timeout=launcher.stop_timeout_s)
        if self.evaluations and self._collect_evaluations(launcher.stop_timeout_s) is None:
            self.evaluations = []  # Not in the checkpoint: the resumed run evaluates there again.
        acting_time = self._acting_time()
        self._ensure_learner()
        path, state = self._save()
        self.learner.stop.remote()
        self._drain_logs()
        summary = finish_run(
            self.experiment,
            state["counts"],
            *self._curve(),
            time.perf_counter() - start,
            acting_time,
            status="interrupted",
        )
        return summary, path

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
        checkpoint, state, learner_steps = self.saved
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

    def _restart(self, actor_id: int, actor: Any, actor_runs: dict[Any, int], error: Exception) -> None:
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
        actor_runs[actor.run.remote()] = actor_id

    def _check_budget(self, counter: Any) -> None:
        """Records how the step budget was spent; a mismatch would be a counting bug."""
        budget = self._get(counter.budget.remote(), "counter", "budget")
        counted = int(self._get(counter.get_counts.remote(), "counter", "get_counts").get("actor_steps", 0))
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
