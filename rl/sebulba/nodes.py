"""The nodes of a sebulba run: actor threads stepping host environments, the learner's update on each round
of blocks in this thread, evaluation rounds on the host with the evaluation policy. A checkpoint holds every
replica's learner state with its replay (on the device), so a resumed run learns on from where it stopped;
its environments start new episodes."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import sys
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl.environments.host import HostVector
from rl.experiments import lifecycle
from rl.experiments.compiled import make_system, replica_keys, steps_per_update
from rl.experiments.config import enable_compilation_cache
from rl.experiments.replica_plan import ReplicaPlan
from rl.experiments.replicas import Replicas, add_summary_fields
from rl.experiments.summary import ProgressDisplay, RunSummary
from rl.loggers.base import TRANSCRIPT
from rl.sebulba.actors import POLL_S, ActorThread, BlockPlan, Handoff, ParamsBoard, Stopped, ThreadTimes
from rl.sebulba.environments import EvaluationEnvironments, training_environments
from rl.sebulba.settings import SebulbaSettings, block_length, copies_per_replica
from rl.sebulba.programs import (
    fastest_device,
    initial_state,
    host_inputs,
    make_programs,
    policy_params,
)
from rl.systems.base import TRAINED

log = logging.getLogger(__name__)

# Python's GIL switch interval while actor threads run: a thread back from a C++ step (ALE, MuJoCo, the device)
# waits up to this long for the GIL another thread holds (5 ms by default: ale-py's steps then ran ~8x slower
# beside a busy Python thread here).
SWITCH_INTERVAL_S = 0.0002

# Learner records per evaluation interval, at most (and one before each pause).
LEARNER_RECORDS_PER_EVALUATION = 20


def evaluation_round(
    environments: HostVector,
    evaluate: Callable[..., Any],
    params: Any,
    keys: jax.Array,
    replicas: int,
    stop: threading.Event | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every copy plays until its first episode ends: (returns, lengths), each (replicas, copies). A `stop` set
    drops the round (`Stopped`)."""
    by_replica = lambda array: np.reshape(array, (replicas, -1) + array.shape[1:])
    observation = environments.reset()
    finished = np.zeros(environments.num_envs, bool)
    returns = np.zeros(environments.num_envs, np.float64)
    lengths = np.zeros(environments.num_envs, np.float64)
    step = 0
    while not finished.all():
        if stop is not None and stop.is_set():
            raise Stopped
        actions = np.asarray(evaluate(params, keys, np.int32(step), by_replica(observation)))
        answer = environments.step(np.reshape(actions, (-1,) + actions.shape[2:]))
        ended = answer.done & ~finished
        returns[ended] = answer.episode_return[ended]
        lengths[ended] = answer.episode_length[ended]
        finished |= answer.done
        observation = answer.observation
        step += 1
    return by_replica(returns), by_replica(lengths)


@dataclasses.dataclass
class Update:
    """A learner update dispatched: its metrics (on the device), the blocks it took, the actor steps after it,
    the steps/s so far, and whether its learner record is written."""

    metrics: Any
    handoffs: list[Handoff]
    steps: int
    rate: float
    learner_record: bool


@dataclasses.dataclass
class LearnerTimes:
    """Seconds the learner's thread waited for the actors' blocks, and for its updates on the device."""

    waiting_s: float = 0.0
    updating_s: float = 0.0


@dataclasses.dataclass
class EvaluationTimes:
    """Seconds the evaluation rounds played (on their thread, or the final one in the learner's) and seconds the
    learner's thread waited for them (the final round, and rounds begun before a checkpoint): the share of the
    run evaluation took from acting."""

    playing_s: float = 0.0
    waited_s: float = 0.0


class SebulbaNodes(lifecycle.Nodes):
    """`num_seeds` replicas: actor threads step their copies block by block; each update takes one block from
    every thread (the learner's program, all replicas at once) and publishes the parameters the next blocks
    act with. Evaluation rounds run on a thread of their own, with the parameters and counts of their step,
    while the actors and the learner go on, and write their rows as they end; a checkpoint waits for the rounds
    begun (a consistent cut)."""

    evaluates_beside_acting = True
    checkpoint_at_evaluations = False  # A checkpoint at each round would wait for it: on the clock instead.

    def __init__(self, settings: SebulbaSettings):
        self.settings = settings
        self.threads: list[ActorThread] = []
        self.evaluation_environments: EvaluationEnvironments | None = None
        self.evaluator = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sebulba-evaluation")
        self.rounds: list[concurrent.futures.Future] = []  # Each (actor steps, mean return, epoch time) to come.
        self.evaluation_times = EvaluationTimes()
        self.replicas: Replicas | None = None  # The replicas' records, opened with the run.
        self.halt = threading.Event()
        self.learner_times = LearnerTimes()
        self.state: Any = None

    def start(self, context: lifecycle.RunContext) -> None:
        super().start(context)
        experiment = context.experiment
        settings = self.settings
        restore = experiment.restore
        replicas = settings.num_seeds
        enable_compilation_cache(experiment.compilation_cache)
        self.replicas = Replicas(ReplicaPlan(replicas), context)
        self.system = make_system(experiment, inputs=host_inputs(experiment, settings))
        length = block_length(experiment, settings)
        self.per_update = steps_per_update(experiment, "sebulba", length, copies_per_replica(experiment, settings))
        donate = jax.devices()[0].platform != "cpu"
        self.programs = make_programs(self.system, length, self.per_update, donate)
        self.learner_device = jax.devices()[0]
        keys = jax.vmap(lambda key: jax.random.split(key, 3))(replica_keys(experiment.seed, replicas))
        learner_keys, actor_keys, evaluation_keys = jnp.moveaxis(keys, 1, 0)  # Each (replicas, 2).
        started = time.perf_counter()
        self.state = initial_state(self.system, learner_keys, self.learner_device)
        self.taken = self.context.record.steps // self.per_update
        if restore is not None:
            self.state = jax.device_put(restore.learner_state(self.state), self.learner_device)
            self.replicas.restore(restore.state["sebulba"], restore.counts)
        self.actor_device = self.choose_actor_device(actor_keys)
        self.device = f"{self.learner_device.device_kind} (actors on {self.actor_device.device_kind})"
        self.evaluation_keys = jax.device_put(evaluation_keys, self.actor_device)
        params = jax.device_put(policy_params(self.system, self.state), self.actor_device)
        self.board = ParamsBoard(self.taken, params, settings.policy_lag, self.halt)
        self.plan = BlockPlan(self.taken, self.halt)
        self.start_time_s = time.perf_counter() - started
        self.evaluation_environments = EvaluationEnvironments(
            experiment, replicas, settings.environment_threads, settings.evaluation_processes
        )
        self.switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        for index in range(settings.actor_threads):
            self.threads.append(self.actor_thread(index, actor_keys))
            self.threads[-1].start()
        self.replicas.open_loggers()
        # Learner records per evaluation interval, at most: counted in updates, so the rows do not depend on timing.
        self.learner_record_every = max(1, experiment.eval_every // self.per_update // LEARNER_RECORDS_PER_EVALUATION)
        self.recent_returns = np.full(replicas, np.nan)

    def choose_actor_device(self, keys: jax.Array) -> Any:
        """`launcher.actor_device`; auto: whichever of the learner's device and the host's CPU answers one call of
        the policy (every seed's copies of a thread) sooner, said in the log (the same device without an
        accelerator)."""
        setting = self.settings.actor_device
        cpu = jax.devices("cpu")[0]
        if setting == "cpu":
            return cpu
        if setting == "learner" or self.learner_device == cpu:
            return self.learner_device
        spec = self.context.experiment.environment_spec.observations
        observations = np.zeros((self.settings.num_seeds, self.context.experiment.num_envs, *spec.shape), spec.dtype)
        arguments = (policy_params(self.system, self.state), keys, np.int32(0), observations)
        device, seconds = fastest_device(self.programs.act, arguments, [self.learner_device, cpu])
        timed = ", ".join(f"{kind} {value * 1e3:.2f} ms" for kind, value in seconds.items())
        log.info("launcher=sebulba: the policy acts on %s (one call: %s)", device.device_kind, timed)
        return device

    def actor_thread(self, index: int, actor_keys: jax.Array) -> ActorThread:
        """Thread `index` with its copies of every replica and its keys (new in each session of the run)."""
        experiment = self.context.experiment
        settings = self.settings
        environments = training_environments(
            experiment, settings.num_seeds, experiment.num_envs, index, settings.environment_threads
        )
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))
        keys = jax.device_put(fold(fold(actor_keys, index), experiment.session), self.actor_device)
        return ActorThread(
            index,
            environments,
            self.programs,
            keys,
            self.board,
            self.plan,
            num_replicas=settings.num_seeds,
            block_length=block_length(experiment, settings),
            first_block=self.taken,
            next_observations=self.system.stores_next_observations,
            device=self.learner_device,
            stop=self.halt,
        )

    def take(self, thread: ActorThread) -> Handoff:
        """The thread's next block; its failure raised here."""
        while True:
            try:
                return thread.handoffs.get(timeout=POLL_S)
            except queue.Empty:
                if thread.error is not None:
                    raise thread.error from None
                if not thread.is_alive():
                    raise RuntimeError(f"actor thread {thread.index} ended without a block") from None

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        """Updates on one block of every thread at a time up to `until` actor steps, or until `pause()`: then
        the blocks the threads have begun are taken first, so nothing is left in flight; but a stop ends the run
        after the update in flight, leaving the blocks begun (their steps uncounted). An update's records are
        written once the next one is dispatched (its metrics are then ready, or nearly)."""
        self.plan.allow(until // self.per_update)
        pending: Update | None = None
        rate_start = time.perf_counter()
        rate_blocks = 0
        while self.taken < self.plan.allowed and not self.replicas.all_ended:
            if pause():
                self.plan.hold(self.taken)
                if self.taken >= self.plan.allowed or self.stopping():  # A stop leaves the blocks begun untaken.
                    break
            waited = time.perf_counter()
            handoffs = [self.take(thread) for thread in self.threads]
            dispatched = time.perf_counter()
            self.learner_times.waiting_s += dispatched - waited
            blocks = tuple(handoff.block for handoff in handoffs)
            ends = tuple(handoff.ends for handoff in handoffs)
            self.state, metrics, params = self.programs.learn(self.state, blocks, ends)
            self.taken += 1
            self.board.publish(self.taken, jax.device_put(params, self.actor_device))
            if pending is not None:
                self.write_records(pending)
            rate_blocks += 1
            rate = rate_blocks * self.per_update / max(time.perf_counter() - rate_start, 1e-9)
            due = self.taken % self.learner_record_every == 0
            pending = Update(metrics, handoffs, self.taken * self.per_update, rate, due)
            self.learner_times.updating_s += time.perf_counter() - dispatched
            self.context.record.steps = self.taken * self.per_update
            if not np.isnan(self.recent_returns).all():
                progress.update(episode_return=float(np.nanmean(self.recent_returns)))
            progress.advance(self.context.record.steps, force=True)
        if pending is not None:
            started = time.perf_counter()
            self.write_records(dataclasses.replace(pending, learner_record=True))  # The last before a pause.
            self.learner_times.updating_s += time.perf_counter() - started
        if self.replicas.all_ended:  # Every replica failed: nothing left to train.
            self.context.record.steps = until
        return self.context.record.steps

    def write_records(self, update: Update) -> None:
        """Each replica's actor record where episodes ended in the update and, where `learner_record`, its
        learner record (rl/experiments/replicas.py: a non-finite learner metric ends its replica)."""
        values = jax.device_get(update.metrics)  # The device's wait: the update behind the one dispatched.
        self.replicas.learned(int(values.pop("learner_steps")[0]))
        trained = values.pop(TRAINED, None)
        for replica in range(self.settings.num_seeds):
            learned = trained is None or trained[replica]
            metrics = {key: float(np.mean(value[replica])) for key, value in values.items()} if learned else {}
            episodes = sum(int(handoff.episodes[replica]) for handoff in update.handoffs)
            actor_row = self.episodes_row(replica, update, episodes) if episodes else {}
            self.replicas.updated(
                replica, update.steps, metrics, update.rate, episodes, actor_row, update.learner_record
            )

    def episodes_row(self, replica: int, update: Update, episodes: int) -> dict[str, Any]:
        """The replica's actor record of the episodes that ended in the update's blocks."""
        handoffs = update.handoffs
        record = {
            "episode_return": sum(float(handoff.returns[replica]) for handoff in handoffs) / episodes,
            "episode_length": sum(float(handoff.lengths[replica]) for handoff in handoffs) / episodes,
        }
        scores = [score for handoff in handoffs for score in handoff.game_scores[replica]]
        if scores:
            record["game_score"] = float(np.mean(scores))
        self.recent_returns[replica] = record["episode_return"]
        return {**record, "episodes": episodes}

    def begin_evaluation(self) -> None:
        """A round at the actor steps now on the evaluation thread (after any round begun before it), with the
        latest parameters and each replica's counts now."""
        steps = self.context.record.steps
        counts = self.round_counts()
        self.rounds.append(self.evaluator.submit(self.evaluate_at, steps, counts, self.board.latest()))

    def evaluations_done(self, wait: bool) -> list[tuple[int, float, float]]:
        started = time.perf_counter()
        done = []
        while self.rounds and (wait or self.rounds[0].done()):
            done.append(self.rounds.pop(0).result())
        if wait:  # The learner's thread waited for them; a round already ended costs it nothing.
            self.evaluation_times.waited_s += time.perf_counter() - started
        return done

    def evaluate(self) -> tuple[int, float, float]:
        """A round now, in this thread (the final one, after every round begun)."""
        started = time.perf_counter()
        steps = self.context.record.steps
        result = self.evaluate_at(steps, self.round_counts(), self.board.latest())
        self.evaluation_times.waited_s += time.perf_counter() - started
        return result

    def round_counts(self) -> tuple[list[dict[str, int]], int]:
        """Each replica's counts and the learner steps now: what a round begun now writes with."""
        return [
            self.replicas.counts_of(replica) for replica in range(self.settings.num_seeds)
        ], self.replicas.learner_steps

    def evaluate_at(
        self, steps: int, counts: tuple[list[dict[str, int]], int], params: Any
    ) -> tuple[int, float, float]:
        """The round at `steps` with `params`, its rows written with each replica's `counts` then (and the learner
        steps then): (actor steps, the replicas' mean return, the epoch time it ended)."""
        if self.replicas.all_ended:
            return steps, float("nan"), time.time()
        started = time.perf_counter()
        returns, lengths = self.play_round(steps, params)
        self.evaluation_times.playing_s += time.perf_counter() - started
        return steps, self.replicas.write_round(steps, returns, lengths, *counts), time.time()

    def play_round(self, steps: int, params: Any) -> tuple[np.ndarray, np.ndarray]:
        """A round of every replica's evaluation policy with `params`: `eval_episodes` whole episodes each,
        seeded by the replica's seed and the step count only; (returns, lengths) by replica."""
        environments = self.evaluation_environments.for_round(steps)
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.evaluation_keys, steps)
        try:
            return evaluation_round(
                environments, self.programs.evaluate, params, keys, self.settings.num_seeds, self.halt
            )
        finally:
            self.evaluation_environments.done_with(environments)

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        counts = self.replicas.counts_of(0)
        snapshot = lifecycle.Snapshot(self.context.record.steps, counts, consistent=self.state is not None)
        if checkpoint:
            snapshot.learner_state = self.state
            snapshot.state["sebulba"] = self.replicas.state()
        return snapshot

    def time_spent(self) -> dict[str, float]:
        """Where the run's time went: the actor threads' (summed over threads), the learner's, the evaluation
        rounds' (played, and waited for by the learner's thread)."""
        spent = dict.fromkeys(dataclasses.asdict(ThreadTimes()), 0.0)
        for thread in self.threads:
            for name, value in dataclasses.asdict(thread.times).items():
                spent[name] += value
        acting = {f"actors_{name}": round(value, 2) for name, value in spent.items()}
        learning = {
            f"learner_{name}": round(value, 2) for name, value in dataclasses.asdict(self.learner_times).items()
        }
        evaluation = {
            f"evaluation_{name}": round(value, 2) for name, value in dataclasses.asdict(self.evaluation_times).items()
        }
        return {**acting, **learning, **evaluation, "start_s": round(self.start_time_s, 2)}

    def steady_step_ms(self) -> dict[str, float] | None:
        """What one step of one actor thread cost after the threads' warm-up (compilation left out), in
        milliseconds by part, over every thread's steps since (None: no thread got that far)."""
        spent = dict.fromkeys(dataclasses.asdict(ThreadTimes()), 0.0)
        steps = 0
        for thread in self.threads:
            times, count = thread.steady_times()
            for name, value in dataclasses.asdict(times).items():
                spent[name] += value
            steps += count
        if not steps:
            return None
        return {name.removesuffix("_s"): round(1e3 * value / steps, 3) for name, value in spent.items()}

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        settings = self.settings
        extra: dict[str, Any] = {
            "launcher": "sebulba",
            "num_seeds": settings.num_seeds,
            "actor_threads": settings.actor_threads,
            "device": self.device,
            "time_s": self.time_spent(),
            "actor_step_ms": self.steady_step_ms(),
        }
        TRANSCRIPT.info("launcher=sebulba: time spent (s) %s", extra["time_s"])
        TRANSCRIPT.info("launcher=sebulba: one actor thread's step after warm-up (ms) %s", extra["actor_step_ms"])
        self.close()
        extra |= self.replicas.finish(summary, status, exit_code, {})
        add_summary_fields(self.context.experiment.run_directory, extra)
        return summary

    def close(self) -> None:
        """Stops the actor threads and the evaluation thread (a round in flight is dropped), closes their
        environments and the replicas' loggers."""
        self.halt.set()
        self.evaluator.shutdown(wait=True, cancel_futures=True)
        for thread in self.threads:
            thread.join(timeout=30)
            thread.environments.close()
        if self.threads:
            sys.setswitchinterval(self.switch_interval)
        self.threads = []
        if self.evaluation_environments is not None:
            self.evaluation_environments.close()
        if self.replicas is not None:
            self.replicas.close()
