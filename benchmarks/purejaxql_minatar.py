"""purejaxql's own PQN on gymnax Breakout-MinAtar (its `pqn_minatar` settings, its CNN), SEEDS seeds vmapped in
one program: the peer figure beside `pqn_minatar_breakout`'s (docs/performance.md), on the same work and device.

    python benchmarks/purejaxql_minatar.py PUREJAXQL_DIR SEEDS [STEPS]   # PUREJAXQL_DIR: its purejaxql/ folder

Needs flax and gymnax 0.0.9 beside JAX; W&B is replaced by a module that records nothing. Prints one line,
`RESULT {json}`: compile and run seconds, and each seed's greedy test return at the end (purejaxql's own
`test/returned_episode_returns`: 128 greedy episodes, its last test round) and its best test return.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import types

import jax
import numpy as np
import yaml


def load_peer(directory: str) -> types.ModuleType:
    """purejaxql's pqn_minatar module, its W&B import answered by a module whose calls do nothing."""
    silent = types.ModuleType("wandb")
    silent.init = silent.log = silent.finish = lambda *args, **kwargs: None
    sys.modules.setdefault("wandb", silent)
    spec = importlib.util.spec_from_file_location("pqn_minatar", os.path.join(directory, "pqn_minatar.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settings(directory: str, seeds: int, steps: int | None = None) -> dict:
    """Its config.yaml with its alg/pqn_minatar.yaml merged, on Breakout, W&B off, the step count an integer
    (`steps`: fewer, its schedules kept, for a smoke test)."""
    with open(os.path.join(directory, "config", "config.yaml")) as file:
        base = yaml.safe_load(file)
    with open(os.path.join(directory, "config", "alg", "pqn_minatar.yaml")) as file:
        algorithm = yaml.safe_load(file)
    config = {**base, **base.get("alg", {}), **algorithm}
    steps = steps or int(float(config["TOTAL_TIMESTEPS"]))
    return config | dict(
        ENV_NAME="Breakout-MinAtar", NUM_SEEDS=seeds, WANDB_MODE="disabled", TOTAL_TIMESTEPS=steps,
        TOTAL_TIMESTEPS_DECAY=int(float(config["TOTAL_TIMESTEPS_DECAY"])), SAVE_PATH=None,
    )  # fmt: skip


def main(directory: str, seeds: int, steps: int | None = None) -> dict:
    peer, config = load_peer(directory), settings(directory, seeds, steps)
    keys = jax.random.split(jax.random.PRNGKey(int(config["SEED"])), seeds)
    start = time.perf_counter()
    program = jax.jit(jax.vmap(peer.make_train(dict(config)))).lower(keys).compile()
    compiled = time.perf_counter() - start
    outputs = jax.block_until_ready(program(keys))
    ran = time.perf_counter() - start - compiled
    tests = np.asarray(outputs["metrics"]["test/returned_episode_returns"])  # (seeds, updates)
    return {
        "seeds": seeds,
        "steps_per_seed": config["TOTAL_TIMESTEPS"],
        "compile_s": round(compiled, 2),
        "run_s": round(ran, 2),
        "final_test_returns": [round(float(row[-1]), 2) for row in tests],
        "best_test_returns": [round(float(np.nanmax(row)), 2) for row in tests],
    }


if __name__ == "__main__":
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else None
    print("RESULT " + json.dumps(main(sys.argv[1], int(sys.argv[2]), steps)), flush=True)
