"""launcher=ray: every node in its own Ray process. The driver places the nodes, owns the loggers
(records come through a Ray queue) and resumes nodes Ray restarted; every wait on a node is bounded."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import logging
import os
import time
import uuid
from typing import Any, ClassVar

import rl
from rl import checkpointing, compat
from rl.checks import require_at_least, require_non_negative, require_positive
from rl.experiments import lifecycle
from rl.experiments.builders import NodeBuilder
from rl.experiments.config import Experiment
from rl.experiments.launcher import RAY_HOST_PORT, Launcher, LauncherError, ray_cluster_unreachable
from rl.experiments.summary import ProgressDisplay, RunSummary


class NodeKind(enum.StrEnum):
    """What a node of the run is. A node's name is its kind, and `_<index>` for an actor or an evaluator."""

    LEARNER = "learner"
    REPLAY = "replay"
    COUNTER = "counter"
    ACTOR = "actor"
    EVALUATOR = "evaluator"


def kind_of(node: str) -> NodeKind:
    return NodeKind(node.partition("_")[0])


# The nodes whose `run` call the driver watches: each returns when its node dies (an actor's also when done).
WATCHED_KINDS = (NodeKind.REPLAY, NodeKind.LEARNER, NodeKind.ACTOR)


@dataclasses.dataclass
class RayLauncher(Launcher):
    requires: ClassVar[tuple[str, ...]] = ("reverb", "ray")

    num_actors: int = 2
    num_evaluators: int = 1
    address: str | None = None
    learner_num_cpus: float = 1.0
    learner_num_gpus: float = 0.0
    actor_num_cpus: float = 0.5
    actor_resources: dict[str, float] | None = None  # Custom Ray resources each actor needs.
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
        if self.address not in (None, "auto") and not RAY_HOST_PORT.match(self.address):
            raise ValueError(
                f"address must be null (start Ray here), 'auto' or 'ray://host:port' / 'host:port', got {self.address!r}"
            )

    def restart_limit(self, node: str) -> tuple[str, int]:
        """The setting that bounds how often Ray restarts `node` (learner, replay, or an actor or evaluator),
        and its value."""
        kind = kind_of(node)
        if kind is NodeKind.LEARNER:
            return "max_learner_restarts", self.max_learner_restarts
        if kind is NodeKind.REPLAY:
            return "max_replay_restarts", self.max_replay_restarts
        return "max_restarts", self.max_restarts

    def __call__(self, experiment: Experiment) -> RunSummary:
        import ray

        unreachable = ray_cluster_unreachable(self.address, self.connect_timeout_s)  # Fails fast.
        if unreachable is not None:
            raise LauncherError(f"launcher.address: cannot reach a Ray cluster at {self.address} ({unreachable})")
        nodes = RayNodes(self, experiment)
        started_here = not ray.is_initialized()
        if started_here:
            self._init_ray(ray)
        try:
            return lifecycle.run(lifecycle.RunContext.make(experiment), nodes, experiment.hooks)
        finally:
            if started_here:
                import psutil

                ray.shutdown()  # Its workers exit a moment later: wait for them, then kill.
                processes = [process for process in psutil.process_iter() if process.pid in nodes.node_pids.values()]
                _, alive = psutil.wait_procs(processes, timeout=self.stop_timeout_s)
                for process in alive:
                    process.kill()
                psutil.wait_procs(alive, timeout=5)

    def _init_ray(self, ray: Any) -> None:
        compat.drop_ray_token_notice()
        grow_gpu_memory = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
        # The installed `rl` package travels to every node (a remote cluster has no copy).
        runtime_env = {"env_vars": {**grow_gpu_memory, "TF_CPP_MIN_LOG_LEVEL": "2"}, "py_modules": [rl]}
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
        if self.address is not None:
            try:
                ray.init(address=self.address, runtime_env=runtime_env, **quiet)
            except (ConnectionError, RuntimeError, TimeoutError) as error:
                raise LauncherError(f"launcher.address: cannot join Ray at {self.address} ({error})") from None
            return
        num_cpus = max(os.cpu_count() or 1, int(self.learner_num_cpus + self.num_actors * self.actor_num_cpus + 0.999))
        for attempt in (1, 2):  # A busy machine can miss Ray's start-up deadline once.
            try:
                ray.init(num_cpus=num_cpus, num_gpus=None, include_dashboard=False, runtime_env=runtime_env, **quiet)
                return
            except Exception as error:  # noqa: BLE001 - Ray raises a bare Exception on a start-up timeout.
                ray.shutdown()
                if attempt == 2:
                    raise LauncherError(f"cannot start Ray on this machine ({_first_line(error)})") from None


def _first_line(error: BaseException) -> str:
    """One line about a Ray error: the task's own exception when there is one."""
    from ray.exceptions import RayTaskError

    if isinstance(error, RayTaskError) and isinstance(error.cause, BaseException):
        error = error.cause
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _title(node: str) -> str:
    return {"learner": "the learner", "replay": "the replay node"}.get(node, node.replace("_", " "))


def restored_counts(restore: Any) -> tuple[dict, dict, dict]:
    """(counts, each actor's steps, each actor's episodes) at the restore point (a local run's are actor 0's)."""
    if restore is None:
        return {}, {}, {}
    steps = restore.state.get("actor_schedule_steps", {0: restore.state.get("actor_schedule_step", 0)})
    return restore.counts, steps, restore.state.get("actor_episodes", {})


class RayNodes(lifecycle.Nodes):
    """The nodes of one run, placed by Ray and watched from this process."""

    def __init__(self, launcher: RayLauncher, experiment: Experiment):
        import ray

        from rl.ray import nodes as ray_nodes

        self.ray = ray
        self.launcher = launcher
        token = uuid.uuid4().hex[:12]  # Nodes find each other by names unique to the run.
        self.names = {n: f"rl-{n}-{token}".replace("_", "-") for n in ("replay", "counter", "learner", "log_queue")}
        factory = ray_nodes.QueueLoggerFactory(self.names["log_queue"], experiment.logger_factory.start_time)
        # The driver runs the lifecycle and its hooks: the nodes get neither.
        remote_experiment = dataclasses.replace(experiment, logger_factory=factory, hooks=())
        self.program = NodeBuilder(remote_experiment, launcher.num_actors, launcher.num_evaluators)
        self.loggers: dict[tuple, Any] = {}
        self.deaths: dict[str, int] = {}
        self.node_pids: dict[str, int] = {}
        self.handles: dict[str, Any] = {}
        self.log_queue = None
        # What a restarted learner continues from: (checkpoint name, learner state, learner steps).
        self.saved_learner: tuple[str | None, Any, int] = (None, None, 0)

    def _get(self, refs: Any, node: str, call: str, timeout: float | None = None) -> Any:
        timeout = self.launcher.call_timeout_s if timeout is None else timeout
        try:
            return self.ray.get(refs, timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise LauncherError(f"{node}.{call} did not answer within {timeout:g} s") from None

    def _log(self, key: tuple, row: dict) -> None:
        if key not in self.loggers:
            self.loggers[key] = self.context.experiment.logger_factory(*key)
        self.loggers[key].write(row)

    def _drain_logs(self) -> None:
        queue = self.log_queue.actor
        while size := self._get(queue.qsize.remote(), "log queue", "qsize"):
            for key, row in self._get(queue.get_nowait_batch.remote(size), "log queue", "get_nowait_batch"):
                self._log(key, row)

    def _event(self, message: str) -> None:
        self._log(("launcher", None, None), {"event": message, "time": time.time()})

    def start(self, context: lifecycle.RunContext) -> None:
        from ray.util.queue import Queue
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rl.ray import nodes as ray_nodes

        super().start(context)
        launcher = self.launcher
        experiment = context.experiment
        names = self.names
        restore = context.restore
        # Nodes holding no CPU go to the head node, the learner near it, actors where their resources are.
        alive = [node for node in self.ray.nodes() if node.get("Alive")]
        heads = [node["NodeID"] for node in alive if "node:__internal_head__" in node.get("Resources", {})]
        head = {"scheduling_strategy": NodeAffinitySchedulingStrategy(heads[0], soft=False)} if heads else {}
        near_head = {"scheduling_strategy": NodeAffinitySchedulingStrategy(heads[0], soft=True)} if heads else {}
        self.log_queue = Queue(maxsize=100_000, actor_options={"num_cpus": 0, "name": names["log_queue"], **head})
        counter = ray_nodes.CounterNode.options(name=names["counter"], **head)
        self.counter = counter.remote(experiment.max_actor_steps, *restored_counts(restore))
        self._get(self.counter.hold_until.remote(self.context.record.next_eval), "counter", "hold_until")
        # The program goes by value in each node's creation task, where a restart finds it.
        program = self.program
        replay = ray_nodes.ReplayNode.options(name=names["replay"], max_restarts=launcher.max_replay_restarts, **head)
        self.replay = replay.remote(program, *self.context.checkpoints.replay_paths(restore), names["counter"])
        self.learner = ray_nodes.LearnerNode.options(
            num_cpus=launcher.learner_num_cpus,
            num_gpus=launcher.learner_num_gpus,
            max_restarts=launcher.max_learner_restarts,
            # run, every actor's and evaluator's parameter requests, and the driver's calls.
            max_concurrency=launcher.num_actors + program.evaluators + 4,
            name=names["learner"],
            **near_head,
        ).remote(program, names["replay"], names["counter"])
        if restore is not None:  # Checked against the node's own state, then loaded into it.
            template = self._get(self.learner.save.remote(), "learner", "save")
            try:
                state = restore.learner_state(template)
            except checkpointing.CheckpointError as error:
                raise LauncherError(f"cannot restore the learner: {error}") from None
            self._get(self.learner.restore.remote(state), "learner", "restore")
            self.saved(restore.checkpoint, lifecycle.Snapshot(restore.state["actor_steps"], restore.counts, state))
        actor = ray_nodes.ActorNode.options(
            num_cpus=launcher.actor_num_cpus,
            resources=dict(launcher.actor_resources or {}),
            max_restarts=launcher.max_restarts,
            runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""}},
        )
        key_offset = experiment.session * (launcher.max_restarts + 1)  # No session replays another's keys.
        nodes = (names["replay"], names["learner"], names["counter"], key_offset)
        self.handles = {"replay": self.replay, "counter": self.counter, "learner": self.learner}
        self.handles |= {f"actor_{i}": actor.remote(program, i, *nodes) for i in range(launcher.num_actors)}
        evaluator = ray_nodes.EvaluatorNode.options(max_restarts=launcher.max_restarts, **head)
        nodes = (names["learner"], names["counter"], launcher.restart_timeout_s)
        self.evaluators = [evaluator.remote(program, i, *nodes) for i in range(program.evaluators)]
        self.handles |= {f"evaluator_{i}": handle for i, handle in enumerate(self.evaluators)}
        pids = self._get([handle.pid.remote() for handle in self.handles.values()], "every node", "pid")
        self._record_pids(dict(zip(self.handles, pids)))
        watched = [node for node in self.handles if kind_of(node) in WATCHED_KINDS]
        self.runs = {node: self.handles[node].run.remote() for node in watched}

    def act(self, until: int, pause: Any, progress: ProgressDisplay) -> int:
        """Watches the actors until the count reaches `until` (held there) or, at the budget, all are done."""
        final = until >= self.context.experiment.max_actor_steps
        self._get(self.counter.hold_until.remote(until), "counter", "hold_until")
        steps = self._actor_steps()
        while any(kind_of(node) is NodeKind.ACTOR for node in self.runs) and (final or steps < until):
            done, _ = self.ray.wait(list(self.runs.values()), num_returns=1, timeout=0.5)
            self._drain_logs()
            steps = self._actor_steps()
            progress.advance(steps, force=True)
            for node in [node for node, ref in self.runs.items() if ref in done]:
                self._ended(node)
            if pause():
                break
        return self._actor_steps()

    def _actor_steps(self) -> int:
        return int(self._get(self.counter.get_counts.remote(), "counter", "get_counts").get("actor_steps", 0))

    def evaluate(self) -> tuple[int, float, float]:
        timeout = self.launcher.evaluation_timeout_s
        # One call per evaluator, asked again of one Ray has rebuilt.
        self.evaluations = [e.evaluate.remote(self.context.experiment.eval_episodes) for e in self.evaluators]
        deadline = time.monotonic() + timeout
        results = []
        while len(results) < len(self.evaluations):
            remaining = max(0.0, deadline - time.monotonic())
            ready, _ = self.ray.wait(self.evaluations, num_returns=len(self.evaluations), timeout=remaining)
            if len(ready) < len(self.evaluations):
                raise LauncherError(f"evaluator.evaluate did not answer within {timeout:g} s")
            results = []
            for instance, ref in enumerate(self.evaluations):
                try:
                    results.append(self._get(ref, f"evaluator_{instance}", "evaluate"))
                except self.ray.exceptions.RayActorError as error:
                    self._died(f"evaluator_{instance}", error)
                except self.ray.exceptions.RayError as error:
                    raise LauncherError(f"an evaluator failed: {_first_line(error)}") from None
        self.evaluations = []
        steps, means, ended = zip(*results)
        return max(map(int, steps)), float(sum(means) / len(means)), max(ended)

    def end_acting(self, interrupted: bool) -> None:
        """Interrupted: the actors end their leases; finished: the budget is checked."""
        if interrupted:
            self._get(self.counter.close.remote(), "counter", "close")
            if runs := [ref for node, ref in self.runs.items() if kind_of(node) is NodeKind.ACTOR]:
                self.ray.wait(runs, num_returns=len(runs), timeout=self.launcher.stop_timeout_s)
        else:
            budget = self._get(self.counter.state.remote(), "counter", "state")
            counted = self._actor_steps()
            wanted = self.context.experiment.max_actor_steps
            message = (
                f"step budget: {counted} actor steps counted of {wanted};"
                f" per actor {budget['counted']}; restarts {budget['restarts']}"
            )
            if counted != wanted or budget["unleased"] or any(budget["outstanding"].values()):
                message += f"; MISMATCH: unleased {budget['unleased']}, leased but uncounted {budget['outstanding']}"
            self._event(message)
        if self.ray.wait([self.runs["learner"]], timeout=0)[0]:
            self._ended("learner")

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        try:
            taken = self._get_or_revive(self.learner.checkpoint, "learner")
        except self.ray.exceptions.RayTaskError as error:  # A numerical fault, say.
            message = f"the learner's checkpoint failed ({_first_line(error)}); {self.context.checkpoints.kept()}"
            raise LauncherError(message) from None
        counts = taken["counts"]
        schedule_steps = taken["schedule_steps"]
        snapshot = lifecycle.Snapshot(int(counts.get("actor_steps", 0)), counts, taken["state"])
        snapshot.state["actor_schedule_step"] = schedule_steps.get(0, 0)
        snapshot.state["actor_schedule_steps"] = {str(k): v for k, v in sorted(schedule_steps.items())}
        snapshot.state["actor_episodes"] = {str(k): v for k, v in sorted(taken["episodes"].items())}
        if checkpoint and self.context.checkpoints.saves_replay:
            snapshot.replay = lambda: self._get_or_revive(self.replay.checkpoint, "replay")
        return snapshot

    def saved(self, path: str, snapshot: lifecycle.Snapshot) -> None:
        learner_steps = int(snapshot.counts.get("learner_steps", 0))
        self.saved_learner = (os.path.basename(path), snapshot.learner_state, learner_steps)

    def end_learning(self) -> None:
        """The learner stops stepping (or waits on a batch that cannot come): its next snapshot is its last."""
        limit = self.launcher.stop_timeout_s
        with contextlib.suppress(self.ray.exceptions.RayError):  # A dead learner: the snapshot revives it.
            self._get(self.learner.stop.remote(limit), "learner", "stop", timeout=limit + self.launcher.call_timeout_s)

    def counts(self) -> dict[str, Any]:
        return self._get(self.counter.get_counts.remote(), "counter", "get_counts", timeout=5.0)

    def failure(self, error: Exception) -> str | None:
        ray_error = isinstance(error, self.ray.exceptions.RayError)
        message = f"the distributed run failed: {_first_line(error)}" if ray_error else super().failure(error)
        if message is not None:
            with contextlib.suppress(Exception):  # The reason in logs/launcher.csv, if the queue still answers.
                self._event(f"run failed: {message}")
        return message

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        """summary.json gains each actor's steps and episodes (logs/actor.csv holds actor 0's episodes only)."""
        self._close_node_loggers()  # Before the run's own loggers (its W&B run) close.
        with contextlib.suppress(Exception):  # A counter lost with Ray on a failed run: the summary stays as written.
            taken = self._get(self.counter.snapshot.remote(), "counter", "snapshot", timeout=5.0)
            steps = taken["schedule_steps"]
            episodes = taken["episodes"]
            actors = {str(a): {"actor_steps": int(steps.get(a, 0)), "episodes": int(episodes.get(a, 0))} for a in steps}
            path = os.path.join(self.context.experiment.run_directory, "summary.json")
            checkpointing.write_json(path, checkpointing.read_json(path) | {"actors": actors})
        return summary

    def _close_node_loggers(self) -> None:
        if self.log_queue is not None:
            with contextlib.suppress(Exception):  # The queue dies with Ray on a failed start: best effort.
                self._drain_logs()
        for logger in self.loggers.values():
            logger.close()
        self.loggers = {}

    def close(self) -> None:
        self._close_node_loggers()
        for handle in self.handles.values():
            self.ray.kill(handle, no_restart=True)

    def _call_when_back(self, method: Any, node: str) -> Any:
        """`method.remote()` of a node Ray is restarting, asked until restart_timeout_s."""
        exceptions = self.ray.exceptions
        timeout = self.launcher.restart_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            try:
                with contextlib.suppress(exceptions.ActorUnavailableError, exceptions.GetTimeoutError):  # Rebuilding.
                    return self.ray.get(method.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except exceptions.RayActorError as error:
                raise LauncherError(f"{_title(node)} died and Ray did not restart it ({_first_line(error)})") from None
            if time.monotonic() > deadline:
                raise LauncherError(f"{_title(node)} did not come back within launcher.restart_timeout_s={timeout:g} s")
            time.sleep(0.5)

    def _get_or_revive(self, method: Any, node: str) -> Any:
        try:
            return self._get(method.remote(), node, "checkpoint")
        except self.ray.exceptions.RayActorError as error:
            self._died(node, error)
            return self._get(method.remote(), node, "checkpoint")

    def _ended(self, node: str) -> None:
        """A node's `run` returned: done (an actor), died or failed."""
        try:
            self._get(self.runs[node], node, "run")
        except self.ray.exceptions.RayActorError as error:  # Dead, or unavailable (its node going away).
            return self._died(node, error)
        except self.ray.exceptions.RayTaskError as error:
            raise LauncherError(f"{_title(node)} failed: {_first_line(error)}") from None
        if kind_of(node) is not NodeKind.ACTOR:
            raise LauncherError(f"{_title(node)} stopped before the actors finished")
        del self.runs[node]

    def _died(self, node: str, error: Exception) -> None:
        handle = self.handles[node]
        setting, limit = self.launcher.restart_limit(node)
        self.deaths[node] = self.deaths.get(node, 0) + 1
        if self.deaths[node] > limit:
            raise LauncherError(
                f"{_title(node)} died more than launcher.{setting}={limit} times ({_first_line(error)})"
            )
        pid = self._call_when_back(handle.pid, node)
        self._record_pids({node: pid})
        revived = f"{node.replace('_', ' ')} died; restarted by Ray as pid {pid} ({self.deaths[node]}/{limit})"
        kind = kind_of(node)
        if kind is NodeKind.LEARNER:
            self._event(f"{revived}: {self._restore_learner()}")
        elif kind is NodeKind.REPLAY:  # Its clients reconnect by themselves.
            start = self._call_when_back(handle.start_info, node)
            origin = (
                f"restored from {os.path.relpath(start['restored'], self.context.experiment.run_directory)}"
                if start["restored"]
                else "with empty tables (no replay checkpoint: checkpoint.replay=false, or none yet)"
            )
            self._event(f"{revived} at {start['address']}, {origin}, holding {start['items']} items")
        elif kind is NodeKind.ACTOR:
            start = self._call_when_back(handle.start_info, node)
            self._event(
                f"{revived}: restart {start['restart']} with a fresh key, schedules resumed at step {start['steps']},"
                f" {start['reclaimed']} leased steps returned to the budget"
            )
        else:  # An evaluator: its round is asked for again.
            self._event(f"{revived}: it plays its round again")
            instance = int(node.partition("_")[2])
            self.evaluations[instance] = handle.evaluate.remote(self.context.experiment.eval_episodes)
            return
        self.runs[node] = handle.run.remote()

    def _restore_learner(self) -> str:
        """The last checkpoint into the rebuilt learner; its later log rows go to logs/superseded/."""
        from rl.loggers.csv import move_rows

        checkpoint, state, learner_steps = self.saved_learner
        reported = self._get(self.counter.set_learner_steps.remote(learner_steps), "counter", "set_learner_steps")
        digest = self._get(self.learner.restore.remote(state), "learner", "restore")
        origin = f"checkpoint {checkpoint}" if checkpoint is not None else "its initial state (no checkpoint yet)"
        self._drain_logs()  # The dead learner's last records, before they are sorted out.
        logs = os.path.join(self.context.experiment.run_directory, "logs")
        destination = os.path.join(logs, "superseded", f"learner.restart{self.deaths['learner']}.csv")
        lost = lambda row: (row.get("learner_steps") or "").isdigit() and int(row["learner_steps"]) > learner_steps
        superseded = move_rows(os.path.join(logs, "learner.csv"), lost, destination)
        # The dead learner sent its counts every half second: `reported` may miss its last steps.
        return (
            f"restored from {origin} (state sha256 {digest[:12]}) at {learner_steps} learner steps;"
            f" it had reported {reported}, so {reported - learner_steps} learner steps were lost"
            f" ({superseded} of its log rows past them moved to logs/superseded/)"
        )

    def _record_pids(self, pids: dict[str, int]) -> None:
        """logs/nodes.json: which process hosts which node."""
        self.node_pids.update(pids)
        directory = os.path.join(self.context.experiment.run_directory, "logs")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "nodes.json"), "w") as file:
            json.dump(self.node_pids, file, indent=2)
