"""The host side of an anakin run: compile once, run chunks, write every replica's records. Replica i
of `seed=s` trains as a run with `seed=s+i` and writes `<run dir>/seed_<i>/`; the run directory
holds their mean."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import Any, Callable

import jax
import numpy as np

from rl.anakin.plan import Population, ReplicaPlan
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
from rl.environment_loop import return_statistics
from rl.experiments import lifecycle, signals
from rl.experiments.compiled import make_system, steps_per_update
from rl.core import NumericalError
from rl.experiments.replicas import add_summary_fields, improvement_flag, replica_table, seed_replicas
from rl.experiments.summary import ProgressDisplay, RunSummary, close_loggers, finish_run
from rl.loggers.base import TRANSCRIPT, Logger
from rl.systems.base import Explores

log = logging.getLogger(__name__)

# Each replica's loggers: label -> (steps key, instance).
LOGGERS = {"learner": ("learner_steps",), "actor": ("actor_steps", 0), "evaluator": ("actor_steps", 0)}


class AnakinNodes(lifecycle.Nodes):
    """The replicas its plan names of the experiment's system in chunks of `steps_per_chunk` updates; a checkpoint
    holds the whole stacked training state, so a resumed run computes bit for bit what one run does."""

    checkpoint_at_evaluations = False  # Rounds seconds apart: checkpoints every `every_seconds` and at the end.
    stop_in_flight = "leaving the chunks in flight unrecorded"  # A stop gives up on them (`act`).
    stops_at_steps_counted = True

    def __init__(self, steps_per_chunk: int, plan: ReplicaPlan | None = None):
        """`plan`: what the replicas are (rl/anakin/plan.py: a grid group's jobs, their hooks, a population,
        the memory a program may hold); None: one replica of the run's experiment."""
        self.plan = plan or ReplicaPlan()
        self.num_seeds = self.plan.count
        self.steps_per_chunk = steps_per_chunk
        self.own_records = self.plan.own_records  # Each replica writes its own run's records.
        self.memory = self.plan.memory
        self.population: Population | None = None  # The plan's population, started with the run.
        self.hyperparameters = dict(self.plan.hyperparameters)
        self.groups: ReplicaGroups | None = None  # Laid out when the programs are compiled.
        self.logs: list[dict[str, Logger]] = []

    def start(self, context: lifecycle.RunContext) -> None:
        super().start(context)
        opening = time.perf_counter()
        self.device = describe_devices()  # Opens the devices: nothing in the run has computed yet.
        self.device_open_s = time.perf_counter() - opening
        experiment = context.experiment
        num_seeds = self.num_seeds
        restore = context.restore
        for hook in (hook for replica in range(num_seeds) for hook in self.plan.hooks_of(replica)):
            hook.start()
        if self.plan.population is not None:
            self.population = self.plan.population.start()
            self.hyperparameters = self.population.values
        if self.own_records:
            experiment.logger_factory.start()  # The run's own W&B run before its replicas'.
        replicas = self.plan.replicas
        self.replica_experiments = list(replicas) if replicas is not None else seed_replicas(experiment, num_seeds)
        # A replica that failed or was pruned: (status, why, its counts then); it computes on, unrecorded.
        self.ended: list[tuple[str, str, dict[str, int]] | None] = [None] * num_seeds
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
        self.learner_steps = 0
        self.episodes = [0] * num_seeds
        self.curves = [[] for _ in range(num_seeds)]
        if restore is not None:
            if self.state is not None:
                restored = padded(restore.learner_state(self.recorded_state()), self.groups.count)
                self.state = restored if self.groups.split else jax.device_put(restored, self.groups.sharding)
            self.learner_steps = int(restore.counts.get("learner_steps", 0))
            replicas = restore.state["anakin"]["replicas"]
            self.episodes = [int(r["episodes"]) for r in replicas]
            self.curves = [[(int(s), float(v)) for s, v in r["eval_returns"]] for r in replicas]
        labels = LOGGERS | ({"pbt": ("actor_steps",)} if self.population is not None else {})
        for factory in (replica.logger_factory for replica in self.replica_experiments):
            self.logs.append({label: factory(label, *arguments) for label, arguments in labels.items()})
        if self.population is not None and self.state is not None:
            self.start_population(restore)
        self.mean_evaluator = experiment.logger_factory("evaluator", "actor_steps", 0) if self.own_records else None
        self.chunk_steps = self.steps_per_chunk * steps_per_update(experiment)

    def compile(self) -> tuple[Any, Any, Any]:
        """(chunk, evaluation round, every replica's initial state) for as many replicas per program as fit
        the device's memory: all of them where they fit (the state on the devices), else groups (the state
        on the host). `launcher.max_replicas_per_program` sets the group size instead."""
        experiment = self.context.experiment
        system = make_system(experiment)
        make = lambda values: make_system(experiment, values) if values else system
        cache = program_cache(experiment, self.steps_per_chunk)
        seeds = jax.numpy.stack([jax.random.PRNGKey(replica.seed) for replica in self.replica_experiments])

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
        for member, log in enumerate(self.logs):
            log["pbt"].write(self.population_record(0, member, member))

    def place_population_values(self) -> None:
        """The population's present values as the programs' next hyperparameter inputs (padded, placed)."""
        self.values = self.placed(padded(self.population.values, self.groups.count))

    def population_record(self, steps: int, member: int, copied_from: int) -> dict[str, Any]:
        record = self.population.record(member, copied_from)
        return {"actor_steps": steps, "learner_steps": self.learner_steps, **record}

    def exchange(self, steps: int, fitness: np.ndarray) -> None:
        """PBT's step after an evaluation round: the bottom members take the top members' learner state
        and explore from their values (rl/sweeps/pbt.py); each member's record says what it holds now."""
        parents = self.population.exchange(steps, fitness)
        rows = np.concatenate([parents, np.arange(len(parents), self.groups.count)])  # Padding: its own.
        self.state = self.placed(inherit(self.state, rows))
        self.place_population_values()
        for member, log in enumerate(self.logs):
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

    def counts_of(self, replica: int) -> dict[str, int]:
        if self.ended[replica]:
            return self.ended[replica][2]
        return dict(
            actor_steps=self.context.record.steps,
            learner_steps=self.learner_steps,
            actor_episodes=self.episodes[replica],
        )

    def end(self, index: int, status: str, why: str) -> None:
        self.ended[index] = (status, why, self.counts_of(index))
        TRANSCRIPT.info("replica %d (%s) %s: %s", index, self.replica_experiments[index].run_directory, status, why)

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
                while dispatching and len(in_flight) < 2 and dispatched < until and not all(self.ended):
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
        if all(self.ended):  # Every replica failed or was pruned: nothing left to train.
            self.context.record.steps = until
        return self.context.record.steps

    def _write_chunk_records(self, metrics: dict[str, Any], rate: float) -> None:
        """Each replica's learner record and, when episodes ended, its actor record; a non-finite learner
        metric fails the replica (a plain one-replica run: the run)."""
        for index, log in enumerate(self.logs):
            values = {key: value[index].item() for key, value in metrics.items()}
            self.learner_steps = int(values.pop("learner_steps"))
            if self.ended[index]:
                continue
            trained = int(values.pop("trained_updates"))
            episodes = int(values.pop("episodes"))
            self.episodes[index] += episodes
            counts = self.counts_of(index)
            episode = {"episode_return": values.pop("episode_return"), "episode_length": values.pop("episode_length")}
            learner_metrics = values if trained else {}
            log["learner"].write({**counts, **learner_metrics, "steps_per_second": rate})
            if episodes:
                head = self.replica_experiments[index].builder.exploration
                named = head.exploration_metrics(counts["actor_steps"]) if isinstance(head, Explores) else {}
                log["actor"].write({**counts, **episode, "episodes": episodes, **named, "steps_per_second": rate})
            faults = sorted(key for key, value in learner_metrics.items() if not np.isfinite(value))
            if faults:
                message = f"non-finite {', '.join(faults)} in the updates up to learner step {self.learner_steps}"
                if not self.own_records:  # A plain one-replica run fails as under launcher=local.
                    raise NumericalError(message)
                self.end(index, "failed", message)

    def evaluate(self) -> tuple[int, float, float]:
        """An evaluation round of every replica, keyed by seed and step only."""
        steps = self.context.record.steps
        if all(self.ended):
            return steps, float("nan"), time.time()
        keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(self.evaluation_keys, steps)
        keys = keys if self.groups.split else jax.device_put(keys, self.groups.sharding)
        # A first signal stops the run after the round (seconds); the wait lets a second one end it.
        evaluation_round = lambda: jax.block_until_ready(
            self.groups.run(self.evaluation, self.state, keys, self.values)
        )
        result = jax.device_get(signals.wait_for(evaluation_round, lambda: False, "an evaluation round"))
        means = []
        for index, log in enumerate(self.logs):
            if self.ended[index]:
                continue
            returns = result.returns[index]
            lengths = result.lengths[index]
            record = return_statistics(returns)
            log["evaluator"].write(
                {**self.counts_of(index), **record, "episode_length": float(lengths.mean()), "episodes": returns.size}
            )
            self.curves[index].append((steps, record["episode_return"]))
            means.append(record["episode_return"])
            self.tell_hooks(index, steps, means[-1])
        if self.mean_evaluator is not None:
            record = {"actor_steps": steps, "learner_steps": self.learner_steps, **return_statistics(means)}
            self.mean_evaluator.write({**record, "replicas": len(means)})
        if self.population is not None and self.population.due(
            steps, self.context.experiment.eval_every, self.context.experiment.max_actor_steps
        ):
            fitness = [np.nan if ended else float(r.mean()) for ended, r in zip(self.ended, result.returns)]
            self.exchange(steps, np.asarray(fitness[: self.num_seeds]))
        return steps, float(np.mean(means)) if means else float("nan"), time.time()

    def tell_hooks(self, index: int, steps: int, mean_return: float) -> None:
        """Replica `index`'s evaluation told to its hooks; the first that ends it (a search's pruner) ends it
        `pruned` (but the last round, which completes it). It computes on, masked: the program is the whole group's.
        The untrained policy's round is told to none (`lifecycle.told_to_hooks`)."""
        if not lifecycle.told_to_hooks(steps):
            return
        final = steps >= self.context.experiment.max_actor_steps
        for hook in self.plan.hooks_of(index):
            if hook.after_evaluation(steps, mean_return) and not final:
                hook.ended_early()
                self.end(index, "pruned", f"pruned by the search at {steps} actor steps")
                return

    def snapshot(self, checkpoint: bool) -> lifecycle.Snapshot:
        snapshot = lifecycle.Snapshot(self.context.record.steps, self.counts_of(0), consistent=self.state is not None)
        if checkpoint:
            snapshot.learner_state = self.recorded_state()
            snapshot.state["anakin"] = {
                "num_seeds": self.num_seeds,
                "replicas": [
                    {"episodes": episodes, "eval_returns": [[int(s), float(v)] for s, v in curve]}
                    for episodes, curve in zip(self.episodes, self.curves)
                ],
            }
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
        self.close()
        self.replica_summaries: list[RunSummary] = []
        if self.own_records:
            replicas = []
            times = self.context.record.eval_times, summary.wall_time_s, self.context.record.acting_time_s
            fields = {"compile_time_s": compile_time, **self.plan.summary_fields}
            for index, replica in enumerate(self.replica_experiments):
                replica_status, why, _ = self.ended[index] or (status, None, None)
                if self.plan.replica_checkpoints and replica_status == "finished":
                    self.save_replica(index)  # Before its summary: a finished job has its checkpoint.
                code = 1 if replica_status == "failed" else 0 if replica_status == "pruned" else exit_code
                result = finish_run(replica, self.counts_of(index), self.curves[index], *times, status=replica_status)
                lineage = self.population.lineage[index] if self.population is not None else None
                member = {"pbt": {"member": index, "lineage": lineage}} if lineage is not None else {}
                failure = {"failure": why} if replica_status == "failed" else {}
                add_summary_fields(replica.run_directory, fields | member | failure)
                close_loggers(replica, exit_code=code)
                self.replica_summaries.append(result)
                replicas.append(dataclasses.asdict(result) | {"run_directory": replica.run_directory})
            extra["replicas"] = replicas
            if self.population is not None:
                extra["pbt"] = self.population.best([result.final_eval_return for result in self.replica_summaries])
            acting = self.context.record.acting_time_s
            steps = self.context.record.steps * self.num_seeds
            extra["total_actor_steps_per_second"] = round(steps / acting, 1) if acting else None
            threshold = self.context.experiment.threshold
            flagged = sum(1 for curve in self.curves if improvement_flag([value for _, value in curve], threshold))
            title = f"Evaluation returns of each of the {len(self.curves)} replicas ({flagged} flagged):"
            table = replica_table([replica.seed for replica in self.replica_experiments], self.curves, threshold)
            for line in (title, *(f"  {line}" for line in table)):
                print(line, flush=True)
                TRANSCRIPT.info(line)
        add_summary_fields(self.context.experiment.run_directory, extra)
        return summary

    def save_replica(self, replica: int) -> str | None:
        """Writes replica `replica`'s state as the checkpoint its own one-replica run would write at its end, in
        its own run directory (None: its checkpoints are off): its counts, episodes and evaluation curve."""
        experiment = self.replica_experiments[replica]
        if not experiment.checkpoint.enabled:
            return None
        state = jax.tree_util.tree_map(lambda leaf: leaf[replica : replica + 1], self.recorded_state())
        snapshot = lifecycle.Snapshot(self.context.record.steps, self.counts_of(replica), learner_state=state)
        curve = self.curves[replica]
        own = {"episodes": self.episodes[replica], "eval_returns": [[int(s), float(v)] for s, v in curve]}
        snapshot.state["anakin"] = {"num_seeds": 1, "replicas": [own]}
        record = dataclasses.replace(self.context.record, eval_returns=list(curve))
        return lifecycle.RunCheckpointer(experiment, record).write(snapshot)

    def close(self) -> None:
        for logger in (logger for log in self.logs for logger in log.values()):
            logger.close()
        self.logs = []
