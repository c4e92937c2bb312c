"""`checkpoint`: what one checkpoint of a compiled run costs, so the default cadence can be judged against it."""

from __future__ import annotations

import os
import time
from typing import Any

from benchmarks.common import Row, Settings, median, progress, ratio, scratch

# Presets whose state is measured (--experiments replaces them): an on-policy and an off-policy one (its replay buffer
# is in the state, so it is in every checkpoint), both launcher=anakin; a launcher=sebulba preset is measured alike.
CHECKPOINT_PRESETS = ("ppo_gymnax_cartpole", "dqn_gymnax_cartpole")
CHECKPOINT_SEEDS = 8
QUICK_SEEDS = 2


def replicas_state(experiment: Any, seeds: int) -> Any:
    """Every replica's initial training state on the run's device, as the launcher makes it: the same arrays, shapes
    and bytes as the state any later checkpoint holds."""
    import jax

    launcher = experiment.composed_config["launcher"]
    keys = jax.numpy.stack([jax.random.PRNGKey(experiment.seed + index) for index in range(seeds)])
    if launcher["_target_"].endswith("SebulbaLauncher"):
        from rl.experiments.compiled import make_system
        from rl.sebulba.programs import host_inputs, initial_state
        from rl.sebulba.settings import SebulbaSettings

        options = {key: value for key, value in launcher.items() if key != "_target_"}
        system = make_system(
            experiment, inputs=host_inputs(experiment, SebulbaSettings(**{**options, "num_seeds": seeds}))
        )
        return initial_state(system, keys, jax.devices()[0])
    from rl.anakin.build import make_system
    from rl.anakin.programs import initial_states

    system = make_system(experiment)
    return jax.device_put(initial_states(lambda key, values: system.init(key), keys, {}), jax.devices()[0])


def state_megabytes(state: Any) -> float:
    import jax

    return sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(state)) / 1e6


def checkpoint_seconds(state: Any, directory: str, repeats: int) -> list[float]:
    """Seconds of each of `repeats` checkpoints of `state` written into `directory` as a run writes them (from the
    device, digested, atomically, the newest kept)."""
    from rl import checkpointing

    seconds = []
    for repeat in range(repeats):
        start = time.perf_counter()
        checkpointing.save_checkpoint(directory, repeat + 1, state, {"actor_steps": repeat + 1}, keep=2)
        seconds.append(time.perf_counter() - start)
    return seconds


def suite_checkpoint(settings: Settings) -> list[Row]:
    """seconds to write one checkpoint of every replica's training state (parameters, optimiser state, environment
    copies, keys and, off-policy, the replay buffer) of ppo_gymnax_cartpole and dqn_gymnax_cartpole with 8 seeds
    (--experiments: other presets, launcher=anakin or sebulba; --quick: 2 seeds), from the device as a run writes
    it, median of --repeats, and the state's MB; bound: the default checkpoint.every_seconds, ratio = the share of
    a run's time its checkpoints take at that cadence."""
    from rl.checkpointing import CheckpointSettings

    cadence = CheckpointSettings().every_seconds
    seeds = QUICK_SEEDS if settings.quick else CHECKPOINT_SEEDS
    rows: list[Row] = []
    for preset in settings.experiments or CHECKPOINT_PRESETS:
        with scratch("benchmark-checkpoint-") as directory:
            experiment = settings.compose([f"experiment={preset}", f"launcher.num_seeds={seeds}"], directory)
            state = replicas_state(experiment, seeds)
            megabytes = state_megabytes(state)
            runs = os.path.join(directory, "run")
            seconds = median(checkpoint_seconds(state, runs, settings.repeats + 1)[1:])  # The first opens orbax.
        case = f"{preset} {seeds} seeds"
        rows.append(Row("checkpoint", f"{case}: state", megabytes, "MB"))
        rows.append(Row("checkpoint", f"{case}: one checkpoint", seconds, "s", cadence, ratio(seconds, cadence)))
        progress(f"checkpoint {case}: {megabytes:.1f} MB in {seconds:.3f} s")
    return rows
