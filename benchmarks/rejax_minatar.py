"""Rejax's PPO on gymnax Breakout-MinAtar with `ppo_minatar_breakout`'s settings, the peer of the accelerator
suite's `minatar` case: SEEDS seeds vmapped in one program, no evaluation, timed twice after compilation.

    python benchmarks/rejax_minatar.py SEEDS STEPS_PER_SEED    # in a venv with rejax 0.1.3 and gymnax 0.0.9

Prints one line, `RESULT {json}`: compile s, both runs' s and the faster run's environment steps/s.
"""

from __future__ import annotations

import json
import sys
import time

import jax
import jax.numpy as jnp
from rejax import get_algo

# conf/experiment/ppo_minatar_breakout.yaml in Rejax's names.
SETTINGS = dict(
    env="Breakout-MinAtar",
    agent_kwargs={"activation": "relu", "hidden_layer_sizes": (256, 256)},
    num_envs=64,
    num_steps=128,
    num_epochs=4,
    num_minibatches=8,
    learning_rate=5e-4,
    max_grad_norm=0.5,
    gamma=0.999,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    skip_initial_evaluation=True,
)


def main(seeds: int, steps: int) -> dict:
    algo = get_algo("ppo").create(**SETTINGS, total_timesteps=steps, eval_freq=steps)
    algo = algo.replace(eval_callback=lambda algo, state, key: jnp.zeros(()))  # Training alone is timed.
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
    compile_s, runs = time.perf_counter() - start, []
    for _ in range(2):
        start = time.perf_counter()
        jax.block_until_ready(compiled(keys))
        runs.append(time.perf_counter() - start)
    return {
        "peer": "rejax 0.1.3",
        "seeds": seeds,
        "steps_per_seed": steps,
        "compile_s": round(compile_s, 2),
        "run_s": [round(run, 2) for run in runs],
        "steps_per_s": round(seeds * steps / min(runs)),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
