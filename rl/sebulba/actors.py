"""The host side of a sebulba run: actor threads, each stepping its environment copies (a block of every
replica's) with the replicas' behaviour policy, and handing whole blocks of steps to the learner; the board
where the learner publishes each update's parameters; the plan that says how many blocks to take."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from rl.environments.gymnax_vector import EnvStep
from rl.environments.host import HostVector
from rl.sebulba.programs import Programs
from rl.systems.base import Trajectory

# Seconds a waiting thread sleeps before it looks at the stop flag again.
POLL_S = 0.1

# Blocks a thread steps before its steady figures start (the programs compile in the first ones).
WARMUP_BLOCKS = 2


class Stopped(Exception):
    """The run is stopping: a waiting thread gives up."""


class ParamsBoard:
    """Each learner update's policy parameters by version (the updates before it). Block j of every thread acts
    with version j - lag, so a run takes the same steps whatever the threads' timing (lag 0: acting waits for
    each update; lag 1: the next block is stepped while the learner updates)."""

    def __init__(self, version: int, params: Any, lag: int, stop: threading.Event):
        self.lag = lag
        self.first = version
        self._stop = stop
        self._versions = {version: params}
        self._changed = threading.Condition()

    def publish(self, version: int, params: Any) -> None:
        with self._changed:
            self._versions[version] = params
            for old in [v for v in self._versions if v < version - self.lag]:
                del self._versions[old]
            self._changed.notify_all()

    def for_block(self, block: int) -> Any:
        """The parameters block `block` acts with (a resumed run's first blocks: the restored ones)."""
        version = max(block - self.lag, self.first)
        with self._changed:
            while version not in self._versions:
                if self._stop.is_set():
                    raise Stopped
                self._changed.wait(POLL_S)
            return self._versions[version]

    def latest(self) -> Any:
        with self._changed:
            return self._versions[max(self._versions)]


class BlockPlan:
    """How many blocks the actor threads may step in all (`allowed`); a thread waits at its next block until
    the learner allows it, so acting stops exactly at an evaluation, a checkpoint or the budget."""

    def __init__(self, blocks: int, stop: threading.Event):
        self.allowed = blocks
        self._stop = stop
        self._changed = threading.Condition()
        self.started: dict[int, int] = {}  # Thread -> blocks it has begun.

    def allow(self, blocks: int) -> None:
        with self._changed:
            self.allowed = blocks
            self._changed.notify_all()

    def begin(self, thread: int, block: int) -> None:
        with self._changed:
            while block >= self.allowed:
                if self._stop.is_set():
                    raise Stopped
                self._changed.wait(POLL_S)
            self.started[thread] = block + 1

    def hold(self, taken: int) -> int:
        """Allows no block beyond those a thread has begun (at least `taken`, the blocks the learner has
        taken); returns how many that is: the learner takes them all before the run pauses."""
        with self._changed:
            self.allowed = max(taken, *self.started.values()) if self.started else taken
            self._changed.notify_all()
            return self.allowed


@dataclasses.dataclass
class Handoff:
    """One thread's block for the learner: its steps (replicas, T, copies, ...) on the learner's device, its
    `ends` (the observations after it, each copy's truncated final observation where the block carries no next
    observations), and what ended in it, per replica (host numbers)."""

    block: Trajectory
    ends: tuple[Any, Any]
    episodes: np.ndarray
    returns: np.ndarray
    lengths: np.ndarray
    game_scores: list[list[float]]


@dataclasses.dataclass
class ThreadTimes:
    """Seconds an actor thread spent stepping environments, in the policy (the device call and its copy
    back), waiting for parameters or for the learner's permission, and handing blocks over."""

    environment_s: float = 0.0
    policy_s: float = 0.0
    waiting_s: float = 0.0
    handoff_s: float = 0.0


class ActorThread(threading.Thread):
    """Steps `environments` (the replicas' copies side by side, replica-major) block after block: block j's
    T steps with parameters `board.for_block(j)`, handed to `handoffs` on `device` once stepped. With
    `next_observations` a block carries every step's next observation, else each copy's last truncated one."""

    def __init__(
        self,
        index: int,
        environments: HostVector,
        programs: Programs,
        keys: jax.Array,
        board: ParamsBoard,
        plan: BlockPlan,
        num_replicas: int,
        block_length: int,
        first_block: int,
        next_observations: bool,
        device: Any,
        stop: threading.Event,
    ):
        super().__init__(name=f"sebulba-actor-{index}", daemon=True)
        self.index = index
        self.environments = environments
        self.programs = programs
        self.keys = keys
        self.board = board
        self.plan = plan
        self.stop = stop
        self.replicas = num_replicas
        self.copies = environments.num_envs // num_replicas
        self.length = block_length
        self.block = first_block
        self.next_observations = next_observations
        self.device = device
        self.handoffs: queue.Queue[Handoff] = queue.Queue()
        self.times = ThreadTimes()
        # The thread's times and block when its warm-up ended (None: still warming up).
        self.warm: tuple[ThreadTimes, int] | None = None
        self.error: BaseException | None = None
        self.unpack: Callable[[np.ndarray], tuple[np.ndarray, Any]] | None = None
        # The thread's steps so far, kept where its policy runs (the keys' device).
        self.step = jax.device_put(np.int32(first_block * block_length), keys.sharding)
        # A policy on the host's CPU reads numpy observations as they are: placing each one first took about a
        # third of a policy call's time there (docs/sebulba.md).
        self.on_host = all(device.platform == "cpu" for device in keys.devices())

    def run(self) -> None:
        try:
            observation = self.environments.reset()
            warmed = self.block + WARMUP_BLOCKS
            while not self.stop.is_set():
                if self.block == warmed:
                    self.warm = (dataclasses.replace(self.times), self.block)
                waited = time.perf_counter()
                self.plan.begin(self.index, self.block)
                params = self.board.for_block(self.block)
                self.times.waiting_s += time.perf_counter() - waited
                observation = self.step_block(params, observation)
                self.block += 1
        except Stopped:
            pass
        except BaseException as error:  # noqa: BLE001 - the learner's thread re-raises it.
            self.error = error

    def steady_times(self) -> tuple[ThreadTimes, int]:
        """The thread's seconds by part since its warm-up ended, and its steps since ((zeros, 0) before then)."""
        if self.warm is None:
            return ThreadTimes(), 0
        times, block = self.warm
        now = dataclasses.asdict(self.times)
        then = dataclasses.asdict(times)
        since = ThreadTimes(**{name: now[name] - then[name] for name in now})
        return since, (self.block - block) * self.length

    def by_replica(self, array: np.ndarray) -> np.ndarray:
        return np.reshape(array, (self.replicas, self.copies) + array.shape[1:])

    def policy(self, params: Any, observation: jax.Array) -> tuple[np.ndarray, Any]:
        """The behaviour policy's (actions, extras) for every copy, (replicas, copies, ...), at the next step."""
        arguments = (params, self.keys, self.step, observation)
        if self.unpack is None:
            self.unpack = self.programs.unpacking(*arguments)
        words, self.step = self.programs.act(*arguments)
        return self.unpack(np.asarray(words))

    def place(self, observation: np.ndarray) -> jax.Array | np.ndarray:
        """`observation` by replica on the policy's device: the policy reads it there and the block keeps it, so
        each frame crosses to an accelerator once (a policy on the host's CPU reads the numpy array itself)."""
        if self.on_host:
            return np.array(self.by_replica(observation))  # Its own copy: environments may reuse a buffer.
        return jax.device_put(self.by_replica(observation), self.keys.sharding)

    def step_block(self, params: Any, observation: np.ndarray) -> np.ndarray:
        """Steps block `self.block` from `observation`, hands it over, returns the observation after it."""
        rows: list[tuple[Any, ...]] = []
        record = BlockRecord(self.replicas)
        truncated = TruncatedObservations(observation)
        for _ in range(self.length):
            started = time.perf_counter()
            placed = self.place(observation)
            actions, extras = self.policy(params, placed)
            stepped = time.perf_counter()
            answer = self.environments.step(np.reshape(actions, (-1,) + actions.shape[2:]))
            self.times.policy_s += stepped - started
            self.times.environment_s += time.perf_counter() - stepped
            rows.append((placed, actions, extras, answer))
            if not self.next_observations:
                truncated.add(answer)
            record.add(*map(self.by_replica, (answer.done, answer.episode_return, answer.episode_length)))
            record.add_scores(self.by_replica(self.environments.game_scores()))
            observation = answer.observation
        handing = time.perf_counter()
        finals = None if self.next_observations else self.by_replica(truncated.observations)
        ends = (self.by_replica(observation), finals)
        block, ends = jax.device_put((self.stack(rows), ends), self.device)
        self.handoffs.put(Handoff(block, ends, *record.totals()))
        self.times.handoff_s += time.perf_counter() - handing
        return observation

    def stack(self, rows: list[tuple[Any, ...]]) -> Trajectory:
        """The block's rows as one trajectory (replicas, T, copies, ...) with the fields the learner reads (every
        step's next observation only with `next_observations`); its observations stacked where they are (on the
        policy's device, or in numpy for a policy on the host)."""
        time_axis = lambda *values: np.stack(values, axis=1)
        observations, actions, extras, answers = zip(*rows)
        steps = lambda field: time_axis(*(self.by_replica(field(answer)) for answer in answers))
        final = steps(lambda answer: answer.final_observation) if self.next_observations else None
        step = EnvStep(
            observation=None,
            reward=steps(lambda answer: answer.reward),
            discount=steps(lambda answer: answer.discount),
            done=steps(lambda answer: answer.done),
            truncated=steps(lambda answer: answer.truncated),
            final_observation=final,
            episode_return=None,
            episode_length=None,
        )
        stacked = time_axis(*observations) if self.on_host else jnp.stack(observations, axis=1)
        return Trajectory(stacked, time_axis(*actions), jax.tree_util.tree_map(time_axis, *extras), step)


class TruncatedObservations:
    """Each copy's final observation of its episode truncated in a block (an on-policy rollout bootstraps from
    it); a copy truncated twice in one block is refused: its time limit is shorter than the block."""

    def __init__(self, observation: np.ndarray):
        self.observations = np.zeros_like(observation)
        self.seen = np.zeros(len(observation), bool)

    def add(self, answer: EnvStep) -> None:
        truncated = np.asarray(answer.truncated, bool)
        if not truncated.any():
            return
        if (self.seen & truncated).any():
            raise ValueError(
                "an episode was truncated twice within one rollout: the environment's time limit "
                "(environment.max_episode_steps) is shorter than agent.unroll_length"
            )
        self.observations[truncated] = answer.final_observation[truncated]
        self.seen |= truncated


class BlockRecord:
    """What ended in a block, per replica: episodes, the sums of their returns and lengths, games' scores."""

    def __init__(self, replicas: int):
        self.episodes = np.zeros(replicas, np.int64)
        self.returns = np.zeros(replicas, np.float64)
        self.lengths = np.zeros(replicas, np.float64)
        self.scores: list[list[float]] = [[] for _ in range(replicas)]

    def add(self, done: np.ndarray, returns: np.ndarray, lengths: np.ndarray) -> None:
        """A step's episode ends, their returns and lengths, each (replicas, copies)."""
        self.episodes += done.sum(axis=1)
        self.returns += returns.sum(axis=1)
        self.lengths += lengths.sum(axis=1)

    def add_scores(self, scores: np.ndarray) -> None:
        for replica, copy in zip(*np.nonzero(~np.isnan(scores))):
            self.scores[replica].append(float(scores[replica, copy]))

    def totals(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[float]]]:
        return self.episodes, self.returns, self.lengths, self.scores
