"""`playground`: steps/s of a MuJoCo Playground environment alone, as our compiled runs step it
(rl/environments/playground.py: PlaygroundVector, resets with their own draws) and as Brax's trainer steps it
(Playground's wrap_for_brax_training: episode and auto-reset wrappers over a vmap), measured in one invocation."""

from __future__ import annotations

import time
from typing import Any, Callable

from benchmarks.common import Row, Settings, median, progress, ratio

PLAYGROUND_CASES = ("CheetahRun",)
PLAYGROUND_COPIES = (64,)  # This CPU's; on an accelerator --widths 1024 (the chip is full there: docs/playground.md).
QUICK_COPIES = 4
STEPS = 100  # Agent steps of every copy per timed program.


def random_actions(key: Any, copies: int, action_size: int, steps: int) -> Any:
    import jax

    return jax.random.uniform(key, (steps, copies, action_size), minval=-1.0, maxval=1.0)


def ours(name: str, copies: int, steps: int) -> Callable[[], Any]:
    """A program of `steps` steps of `copies` copies under uniform random actions, stepped as our runs step them."""
    import jax

    from rl.environments.playground import PlaygroundVector, choose_impl

    vector = PlaygroundVector(name, copies, {"impl": choose_impl(None, jax.default_backend())})
    actions = random_actions(jax.random.PRNGKey(0), copies, vector.action_spec.shape[0], steps)

    @jax.jit
    def run(key: Any) -> Any:
        state = vector.reset(key)

        def one(state: Any, inputs: tuple[Any, Any]) -> tuple[Any, Any]:
            action, step_key = inputs
            state, answer = vector.step(state, action, step_key)
            return state, answer.reward

        _, rewards = jax.lax.scan(one, state, (actions, jax.random.split(key, steps)))
        return rewards

    return lambda: run(jax.random.PRNGKey(1))


def brax(name: str, copies: int, steps: int) -> Callable[[], Any]:
    """The same program stepped through the wrappers Brax's trainer steps (Playground's training wrapper)."""
    import jax
    from mujoco_playground import registry, wrapper

    from rl.environments.playground import choose_impl

    environment = registry.load(name, config_overrides={"impl": choose_impl(None, jax.default_backend())})
    config = environment._config
    wrapped = wrapper.wrap_for_brax_training(environment, config.episode_length, config.action_repeat)
    actions = random_actions(jax.random.PRNGKey(0), copies, environment.action_size, steps)

    @jax.jit
    def run(key: Any) -> Any:
        state = wrapped.reset(jax.random.split(key, copies))

        def one(state: Any, action: Any) -> tuple[Any, Any]:
            state = wrapped.step(state, action)
            return state, state.reward

        _, rewards = jax.lax.scan(one, state, actions)
        return rewards

    return lambda: run(jax.random.PRNGKey(1))


def steps_per_second(program: Callable[[], Any], steps: int, repeats: int) -> tuple[float, float]:
    """(compile-and-first-run seconds, median steps/s of `repeats` runs after it)."""
    import jax

    start = time.perf_counter()
    jax.block_until_ready(program())
    first = time.perf_counter() - start
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(program())
        rates.append(steps / (time.perf_counter() - start))
    return first, median(rates)


def suite_playground(settings: Settings) -> list[Row]:
    """steps/s of a Playground environment alone (CheetahRun), `--widths`
    copies (default 64; --quick 4) stepped 100 times under uniform random actions in one compiled program, ours
    (PlaygroundVector) and through Brax's training wrappers, median of --repeats runs after a first that
    compiles; ratio = ours / Brax's."""
    rows: list[Row] = []
    for name in PLAYGROUND_CASES:
        for copies in (QUICK_COPIES,) if settings.quick else settings.widths or PLAYGROUND_COPIES:
            steps = STEPS * copies
            compile_ours, ours_rate = steps_per_second(ours(name, copies, STEPS), steps, settings.repeats)
            compile_brax, brax_rate = steps_per_second(brax(name, copies, STEPS), steps, settings.repeats)
            case = f"{name} x{copies}"
            rows.append(Row("playground", f"{case}: ours", ours_rate, "steps/s", None, ratio(ours_rate, brax_rate)))
            rows.append(Row("playground", f"{case}: Brax's wrappers", brax_rate, "steps/s"))
            rows.append(Row("playground", f"{case}: first run (compile) ours", compile_ours, "s"))
            rows.append(Row("playground", f"{case}: first run (compile) Brax's", compile_brax, "s"))
            progress(f"playground {case}: ours {ours_rate:,.0f} steps/s, Brax's wrappers {brax_rate:,.0f}")
    return rows
