"""`atari`: Pong frames/s, ALE through gymnasium against envpool, raw and through the actor.

Frames are emulator frames: an agent step is `frame_skip` (4) of them. Cases:

* raw environments with random actions (rl.environments, preprocessing included): one
  gymnasium ALE environment (the reference), 8 copies as an actor steps them
  (`VectorEnvironment`, environment.backend=gymnasium), and envpool with 1, 8 and 32
  copies (environment.backend=envpool, the same preprocessing); `ratio` is relative to
  one gymnasium environment;
* through the actor: `experiment=dqn_pong` with 1 and 8 copies on either backend, built
  like a training actor (`EnvironmentLoop` + jitted Nature-CNN policy + the n-step adder
  writing uint8 frames into a reverb server in this process; no learner steps). `bound`
  is the smaller of the loop's environment alone and the adder's inserts (both measured
  here, in frames/s); `ratio` = value / bound;
* the networks' gradient (one forward and backward pass over a batch of 32 uint8 frame
  stacks) for `atari_cnn` and `impala_resnet`, in stacks/s, and its compilation time: what
  bounds a learner on this machine (a DQN update is about 1.5 such passes per sample).
"""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable

import numpy as np

from rl.benchmarks.common import Row, Settings, measure_rate, median, progress, ratio
from rl.benchmarks.env import DmEnvStepper

GAME = "Pong"
FRAME_SKIP = 4
EXPERIMENT = "dqn_pong"
# (copies, backend) of the actor cases.
ACTOR_CASES = ((1, "gymnasium"), (8, "gymnasium"), (1, "envpool"), (8, "envpool"))
GRADIENT_BATCH = 32


def _environment_cases() -> list[tuple[str, Callable[[], Any]]]:
    from rl.environments.atari import make_atari_envpool, make_atari_environment
    from rl.environments.envpool_vector import envpool_tasks
    from rl.environments.vector import VectorEnvironment

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("ALE gymnasium x1", lambda: DmEnvStepper(make_atari_environment(seed=0, name=GAME))),
        (
            "ALE gymnasium x8 (VectorEnvironment)",
            lambda: DmEnvStepper(
                VectorEnvironment.make(lambda seed: make_atari_environment(seed=seed, name=GAME), 0, 8)
            ),
        ),
    ]
    if f"{GAME}-v5" in envpool_tasks():
        for n in (1, 8, 32):
            cases.append((f"envpool x{n}", lambda n=n: DmEnvStepper(make_atari_envpool(seed=0, num_envs=n, name=GAME))))
    return cases


def _frames_rate(stepper: Any, settings: Settings) -> float:
    for _ in range(10):  # Warm-up: first resets.
        stepper.step()
    return FRAME_SKIP * median([measure_rate(stepper.step, settings.seconds) for _ in range(settings.repeats)])


def environment_rows(settings: Settings) -> list[Row]:
    rows: list[Row] = []
    reference = None
    for name, make in _environment_cases():
        stepper = make()
        try:
            value = _frames_rate(stepper, settings)
        finally:
            stepper.environment.close()
        rows.append(Row("atari", f"{GAME} raw {name}", value, "frames/s", ratio=ratio(value, reference)))
        reference = value if reference is None else reference
        progress(f"atari {rows[-1].case}: {value:,.0f} frames/s")
    return rows


def actor_rows(settings: Settings) -> list[Row]:
    from rl.benchmarks.actor import _rates
    from rl.experiments.validation import ConfigError

    rows: list[Row] = []
    for num_envs, backend in ACTOR_CASES:
        case = f"{GAME} actor {EXPERIMENT} x{num_envs} {backend}"
        overrides = [
            f"experiment={EXPERIMENT}", "logger=csv", "progress=false", "checkpoint=false",
            f"environment.num_envs={num_envs}", f"environment.backend={backend}",
        ]  # fmt: skip
        with tempfile.TemporaryDirectory() as run_dir:
            try:
                experiment = settings.compose(overrides, run_dir)
            except ConfigError as error:
                settings.note(f"atari: {case} skipped ({error})")
                continue
            actor, environment, inserts = _rates(experiment, num_envs, settings)
        actor, environment, inserts = (FRAME_SKIP * x for x in (actor, environment, inserts))
        bound = min(environment, inserts)
        rows += [
            Row("atari", case, actor, "frames/s", bound, ratio(actor, bound)),
            Row("atari", f"{case}: environment alone", environment, "frames/s"),
            Row("atari", f"{case}: adder inserts", inserts, "frames/s"),
        ]
        progress(f"atari {case}: {actor:,.0f} frames/s (environment {environment:,.0f}, adder {inserts:,.0f})")
    return rows


def gradient_rate(network: Any, batch: np.ndarray, settings: Settings) -> tuple[float, float]:
    """(stacks/s of one jitted gradient of `network` on `batch`, its compile seconds)."""
    import jax
    import jax.numpy as jnp

    params = network.init(jax.random.PRNGKey(0))
    gradient = jax.jit(jax.grad(lambda p, x: jnp.mean(jnp.square(network.apply(p, x)))))
    started = time.perf_counter()
    jax.block_until_ready(gradient(params, batch))
    compile_s = time.perf_counter() - started

    def step() -> int:
        jax.block_until_ready(gradient(params, batch))
        return len(batch)

    return median([measure_rate(step, settings.seconds) for _ in range(settings.repeats)]), compile_s


def gradient_rows(settings: Settings) -> list[Row]:
    from dm_env import specs

    from rl.networks.conv import make_atari_cnn, make_impala_resnet
    from rl.specs import EnvironmentSpec

    spec = EnvironmentSpec(
        observations=specs.BoundedArray((84, 84, 4), np.uint8, 0, 255, "observation"),
        actions=specs.DiscreteArray(6, name="action"),
        rewards=specs.Array((), np.float32),
        discounts=specs.BoundedArray((), np.float32, 0.0, 1.0),
    )
    batch = np.random.default_rng(0).integers(0, 256, (GRADIENT_BATCH, 84, 84, 4), dtype=np.uint8)
    rows: list[Row] = []
    for name, make in (("atari_cnn", make_atari_cnn), ("impala_resnet", make_impala_resnet)):
        value, compile_s = gradient_rate(make(spec), batch, settings)
        rows += [
            Row("atari", f"{name} gradient, batch {GRADIENT_BATCH}", value, "stacks/s"),
            Row("atari", f"{name} gradient: compilation", compile_s, "s"),
        ]
        progress(f"atari {name} gradient: {value:,.0f} stacks/s (compiled in {compile_s:.1f} s)")
    return rows


def suite_atari(settings: Settings) -> list[Row]:
    import warnings

    warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
    return environment_rows(settings) + actor_rows(settings) + gradient_rows(settings)
