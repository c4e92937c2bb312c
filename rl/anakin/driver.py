"""The host side of an anakin run: compile once, run chunks and evaluation rounds, hand what each replica did
to the replica layer (rl/experiments/replicas.py), which writes its records. Replica i of `seed=s` trains as a
run with `seed=s+i` and writes `<run dir>/seed_<i>/`; the run directory holds their mean."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any, Callable

import jax
import numpy as np

from rl.anakin.programs import (
    compile_programs,
    describe_devices,
    inherit,
    initial_states,
    padded,
    padded_count,
    program_cache,
    replica_sharding,
)
from rl.anakin.groups import (
    MARGIN,
    ReplicaGroups,
    devices_count,
    fitting_programs,
    fitting_size,
    free_memory_per_device,
    is_memory_error,
    program_memory,
)
from rl.experiments import lifecycle, signals
from rl.experiments.compiled import make_system, steps_per_update
from rl.experiments.replica_plan import Population, ReplicaPlan
from rl.experiments.replicas import Replicas, add_summary_fields
from rl.experiments.summary import ProgressDisplay, RunSummary
from rl.loggers.base import TRANSCRIPT
from rl.systems.base import Explores

log = logging.getLogger(__name__)


class AnakinNodes(lifecycle.Nodes):
    """The replicas its plan names of the experiment's system in chunks of `steps_per_chunk` updates; a checkpoint
    holds the whole stacked training state, so a resumed run computes bit for bit what one run does."""

    checkpoint_at_evaluations = False  # Rounds seconds apart: checkpoints every `every_seconds` and at the end.
    stop_in_flight = "leaving the chunks in flight unrecorded"  # A stop gives up on them (`act`).
    stops_at_steps_counted = True

    def __init__(self, steps_per_chunk: int, plan: ReplicaPlan | None = None):
        """`plan`: what the replicas are (rl/experiments/replica_plan.py: a grid group's jobs, their hooks, a population,
        the memory a program may hold); None: one replica of the run's experiment."""
        self.plan = plan or ReplicaPlan()
        self.num_seeds = self.plan.count
        self.steps_per_chunk = steps_per_chunk
        self.memory = self.plan.memory
        self.population: Population | None = None  # The plan's population, started with the run.
        self.hyperparameters = dict(self.plan.hyperparameters)
        self.groups: ReplicaGroups | None = None  # Laid out when the programs are compiled.
        self.replicas: Replicas | None = None  # The replicas' records, opened with the run.

    def start(self, context: lifecycle.RunContext) -> None:
        super().start(context)
        opening = time.perf_counter()
        self.device = describe_devices()  # Opens the devices: nothing in the run has computed yet.
        self.device_open_s = time.perf_counter() - opening
        experiment = context.experiment
        num_seeds = self.num_seeds
        restore = context.restore
        if self.plan.population is not None:
            self.population = self.plan.population.start()
            self.hyperparameters = self.population.values
        self.replicas = Replicas(self.plan, context)
        start = time.perf_counter()
        try:  # A stop while compiling or initialising ends the run with nothing new to checkpoint.
            self.chunk, self.evaluation, self.state = signals.wait_for(self.compile, self.stopping, "compiling")
        except signals.Stopped:
            self.state = None
        self.compile_time_s = time.perf_counter() - start
        if self.state is not None:
            log.info(
                "launcher=anakin: %d replicas compiled in %.1f s on %s", num_seeds, self.compile_time_s, self.device
            )
        if restore is not None:
            if self.state is not None:
                restored = padded(restore.learner_state(self.recorded_state()), self.groups.count)
                self.state = restored if self.groups.split else jax.device_put(restored, self.groups.sharding)
            self.replicas.restore(restore.state["anakin"], restore.counts)
        self.replicas.open_loggers({"pbt": ("actor_steps",)} if self.population is not None else None)
        if self.population is not None and self.state is not None:
            self.start_population(restore)
        self.chunk_steps = self.steps_per_chunk * steps_per_update(experiment)

    def compile(self) -> tuple[Any, Any, Any]:
        """(chunk, evaluation round, every replica's initial state) for as many replicas per program as fit
        the device's memory: all of them where they fit (the state on the devices), else groups (the state
        on the host). `launcher.max_replicas_per_program` sets the group size instead."""
        experiment = self.context.experiment
        system = make_system(experiment)
        make = lambda values: make_system(experiment, values) if values else system
        cache = program_cache(experiment, self.steps_per_chunk)
        seeds = jax.numpy.stack([jax.random.PRNGKey(replica.seed) for replica in self.replicas.experiments])

        init = lambda key, values: make(values).init(key)
        # Every replica's initial state, once, on the host; each layout pads it as it pads keys and values.
        states = jax.device_get(initial_states(init, seeds, self.hyperparameters, cache))

        def programs(size: int) -> tuple[Any, Any, Any]:
            keys, values = self.lay_out(seeds, size)
            state = padded(states, self.groups.count)
            first = jax.tree_util.tree_map(lambda leaf: leaf[:size], (keys, values, state))
            chunk, evaluation, first_state = compile_programs(
                make, system.evaluation_environment, first[0], self.steps_per_chunk, self.groups.sharding,
                first[1], cache, first[2],
            )  # fmt: skip
            return chunk, evaluation, state if self.groups.split else first_state

        limit = self.memory.max_replicas_per_program
        if limit is not None:
            programs_made = programs(padded_count(min(limit, self.num_seeds)))
        else:
            everyone = padded_count(self.num_seeds)
            devices = padded_count(min(devices_count(), self.num_seeds))
            programs_made = fitting_programs(programs, everyone, devices, self.fitting_group_size)
        if self.groups.split or self.groups.count > self.num_seeds:
            log.info("launcher=anakin: %s", self.groups.describe(self.num_seeds))
        return programs_made

    def lay_out(self, seeds: jax.Array, size: int) -> tuple[Any, dict[str, Any]]:
        """Every replica's key and values, padded to whole groups of `size` (a multiple of the devices);
        sets `groups`, the values and the evaluation keys the programs are called with."""
        self.groups = ReplicaGroups(-(-self.num_seeds // size) * size, size, replica_sharding(size))
        keys, values = padded((seeds, self.hyperparameters), self.groups.count)
        evaluation_keys = jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys)
        self.values = self.placed(values)
        self.evaluation_keys = self.placed(evaluation_keys)
        return keys, values

    def placed(self, rows: Any) -> Any:
        """Rows of every replica (padded) where the programs take them: the devices, or the host for groups."""
        return rows if self.groups.split else jax.device_put(rows, self.groups.sharding)

    def start_population(self, restore: Any) -> None:
        """The population's values and lineages from the checkpoint (or its first records, at step 0)."""
        if restore is not None:
            self.population.restore(restore.state["anakin"]["pbt"])
            self.place_population_values()
            return
        for member, log in enumerate(self.replicas.logs):
            log["pbt"].write(self.population_record(0, member, member))

    def place_population_values(self) -> None:
        """The population's present values as the programs' next hyperparameter inputs (padded, placed)."""
        self.values = self.placed(padded(self.population.values, self.groups.count))

    def population_record(self, steps: int, member: int, copied_from: int) -> dict[str, Any]:
        record = self.population.record(member, copied_from)
        return {"actor_steps": steps, "learner_steps": self.replicas.learner_steps, **record}

    def exchange(self, steps: int, fitness: np.ndarray) -> None:
        """PBT's step after an evaluation round: the bottom members take the top members' learner state
        and explore from their values (rl/sweeps/pbt.py); each member's record says what it holds now."""
        parents = self.population.exchange(steps, fitness)
        rows = np.concatenate([parents, np.arange(len(parents), self.groups.count)])  # Padding: its own.
        self.state = self.placed(inherit(self.state, rows))
        self.place_population_values()
        for member, log in enumerate(self.replicas.logs):
            log["pbt"].write(self.population_record(steps, member, int(parents[member])))
        moved = [f"{member}<-{parent}" for member, parent in enumerate(parents) if parent != member]
        TRANSCRIPT.info("PBT at %d actor steps: %s", steps, ", ".join(moved))

    def fitting_group_size(self, programs: tuple[Any, ...], size: int) -> int:
        """The most replicas per program whose chunk fits the memory budget, from the chunk's of `size`
        replicas (the present size where it fits)."""
        chunk = programs[0]
        everyone = padded_count(self.num_seeds)
        needed = program_memory(chunk)
        budget = self.memory_budget()
        if needed <= budget and size == everyone:
            return size
        fitting = fitting_size(everyone, needed * devices_count() / size, budget, devices_count())
        log.info(
            "launcher=anakin: %d replicas need %.3g GiB per device, %.3g GiB is free: %d per program "
            "(launcher.max_replicas_per_program sets it)",
            size, needed / 2**30, budget / 2**30, fitting,
        )  # fmt: skip
        return fitting

    def memory_budget(self) -> float:
        given = self.memory.per_device_gb
        return given * 2**30 if given is not None else MARGIN * free_memory_per_device()

    def act(self, until: int, pause: Callable[[], bool], progress: ProgressDisplay) -> int:
        """Chunks up to `until`, the next one dispatched before the host waits for the previous one's metrics
        and writes its records, so the device never waits on the host. `self.state` is the last written chunk's:
        on a stop request the chunks in flight run on, unwritten (`signals.wait_for`)."""
        in_flight: list[tuple[Any, Any]] = []  # (state, metrics) of chunks dispatched, oldest first.
        dispatched = self.context.record.steps
        done = time.perf_counter()
        dispatching = True
        try:
            while True:
                while dispatching and len(in_flight) < 2 and dispatched < until and not self.replicas.all_ended:
                    head = in_flight[-1][0] if in_flight else self.state
                    # One program: returns once XLA has the work; groups: once every group's is done.
                    dispatch = functools.partial(self.groups.run, self.chunk, head, self.values)
                    in_flight.append(signals.wait_for(dispatch, self.stopping, "a chunk"))
                    dispatched += self.chunk_steps
                if not in_flight:
                    break
                state, metrics = in_flight.pop(0)
                metrics = signals.wait_for(functools.partial(jax.device_get, metrics), self.stopping, "a chunk")
                self.state = state
                self.context.record.steps = self.context.record.steps + self.chunk_steps
                now = time.perf_counter()
                self._write_chunk_records(metrics, self.chunk_steps / (now - done))
                done = now
                progress.update(episode_return=float(np.mean(metrics["episode_return"][: self.num_seeds])))
                progress.advance(self.context.record.steps, force=True)
                dispatching = dispatching and not pause()  # A pause writes the chunks in flight first.
        except signals.Stopped:
            pass
        except Exception as error:
            if not is_memory_error(error):
                raise
            raise MemoryError(
                f"out of device memory with {self.groups.size} replicas per program: set "
                "launcher.max_replicas_per_program lower (or launcher.memory_per_device_gb)"
            ) from error
        if self.replicas.all_ended:  # Every replica failed or was pruned: nothing left to train.
            self.context.record.steps = until
        return self.context.record.steps

    def _write_chunk_records(self, metrics: dict[str, Any], rate: float) -> None:
        """Each replica's learner record and, when episodes ended, its actor record (rl/experiments/replicas.py:
        a non-finite learner metric ends its replica)."""
        for index in range(self.num_seeds):
            values = {key: value[index].item() for key, value in metrics.items()}
            self.replicas.learned(int(values.pop("learner_steps")))
            trained = int(values.pop("trained_updates"))
            episodes = int(values.pop("episodes"))
            episode = {"episode_return": values.pop("episode_return"), "episode_length": values.pop("episode_length")}
            head = self.replicas.experiments[index].builder.exploration
            steps = self.context.record.steps
            named = head.exploration_metrics(steps) if episodes and isinstance(head, Explores) else {}
            actor_row = {**episode, "episodes": episodes, **named}
            self.replicas.updated(index, steps, values if trained else {}, rate, episodes, actor_row)

    def evaluate(self) -> tuple[int, float, float]:
        """An evaluation round of every replica, keyed by seed and step only."""
        steps = self.context.record.steps
        if self.replicas.all_ended:
            return steps, float("nan"), time.time()
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.evaluation_keys, steps)
        keys = keys if self.groups.split else jax.device_put(keys, self.groups.sharding)
        # A first signal stops the run after the round (seconds); the wait lets a second one end it.
        evaluation_round = lambda: jax.block_until_ready(
            self.groups.run(self.evaluation, self.state, keys, self.values)
        )
        result = jax.device_get(signals.wait_for(evaluation_round, lambda: False, "an evaluation round"))
        counts = [self.replicas.counts_of(index) for index in range(self.num_seeds)]
        mean = self.replicas.write_round(steps, result.returns, result.lengths, counts, self.replicas.learner_steps)
        if self.population is not None and self.population.due(
            steps, self.context.experiment.eval_every, self.context.experiment.max_actor_steps
        ):
            fitness = [np.nan if ended else float(r.mean()) for ended, r in zip(self.replicas.ended, result.returns)]
            self.exchange(steps, np.asarray(fitness[: self.num_seeds]))
        return steps, mean, time.time()

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        counts = self.replicas.counts_of(0)
        snapshot = lifecycle.Snapshot(self.context.record.steps, counts, consistent=self.state is not None)
        if checkpoint:
            snapshot.learner_state = self.recorded_state()
            snapshot.state["anakin"] = self.replicas.state()
            if self.population is not None:
                snapshot.state["anakin"]["pbt"] = self.population.state()
        return snapshot

    def recorded_state(self) -> Any:
        """The replicas' training state without the padding: what a checkpoint holds, whatever the devices."""
        if self.groups is None or self.groups.count == self.num_seeds:
            return self.state
        return jax.tree_util.tree_map(lambda leaf: leaf[: self.num_seeds], self.state)

    def finished(self, summary: RunSummary, status: str, exit_code: int) -> RunSummary:
        compile_time = round(self.compile_time_s, 2)
        extra: dict[str, Any] = {"launcher": "anakin", "compile_time_s": compile_time, "num_seeds": self.num_seeds}
        extra |= {"device": self.device, "device_open_s": round(self.device_open_s, 2)}
        if self.groups is not None:
            extra |= {"replicas_per_program": self.groups.size, "programs": self.groups.count // self.groups.size}
        population = self.population
        lineage = lambda index: {"pbt": {"member": index, "lineage": population.lineage[index]}} if population else {}
        save = self.save_replica if self.plan.replica_checkpoints else None  # A finished job has its checkpoint.
        fields = {"compile_time_s": compile_time, **self.plan.summary_fields}
        extra |= self.replicas.finish(summary, status, exit_code, fields, save, lineage)
        if population is not None and self.replicas.own_records:
            extra["pbt"] = population.best([result.final_eval_return for result in self.replicas.summaries])
        add_summary_fields(self.context.experiment.run_directory, extra)
        return summary

    def save_replica(self, replica: int) -> str | None:
        """Writes replica `replica`'s state as the checkpoint its own one-replica run would write at its end, in
        its own run directory (None: its checkpoints are off): its counts, episodes and evaluation curve."""
        experiment = self.replicas.experiments[replica]
        if not experiment.checkpoint.enabled:
            return None
        state = jax.tree_util.tree_map(lambda leaf: leaf[replica : replica + 1], self.recorded_state())
        counts = self.replicas.counts_of(replica)
        snapshot = lifecycle.Snapshot(self.context.record.steps, counts, learner_state=state)
        own = self.replicas.state()["replicas"][replica]
        snapshot.state["anakin"] = {"num_seeds": 1, "replicas": [own]}
        record = dataclasses.replace(self.context.record, eval_returns=list(self.replicas.curves[replica]))
        return lifecycle.RunCheckpointer(experiment, record).write(snapshot)

    def close(self) -> None:
        if self.replicas is not None:
            self.replicas.close()
