"""Throughput benchmarks, reported as ratios measured in one invocation.

    python scripts/benchmark.py actors [--steps 6000] [--overrides k=v ...]
        actor steps/s of launcher=ray with 1 actor vs 2 actors (same experiment).
    python scripts/benchmark.py learner [--batch 64] [--updates 2000]
        jitted DQN learner updates/s with 1 SGD step per call vs 8 fused with lax.scan
        (pure JAX: runs on any accelerator JAX sees).

Wall-clock numbers on a shared machine are noisy; compare the ratio within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _train(overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), *overrides, f"hydra.run.dir={run_dir}"]
        environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
        result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"benchmark run failed ({' '.join(overrides)}):\n{result.stderr[-2000:]}")
        with open(os.path.join(run_dir, "summary.json")) as file:
            return json.load(file)


def benchmark_actors(steps: int, overrides: list[str]) -> None:
    common = [
        "launcher=ray",
        f"max_actor_steps={steps}",
        f"eval_every={steps}",
        "eval_episodes=1",
        "checkpoint=false",
        "progress=false",
        "logger=csv",
        *overrides,
    ]
    rates = {}
    for actors in (1, 2):
        summary = _train([*common, f"launcher.num_actors={actors}"])
        rates[actors] = summary["actor_steps_per_second"]
        print(f"{actors} actor(s): {summary['actor_steps']} actor steps, {rates[actors]:.0f} actor steps/s, "
              f"{summary['learner_steps']} learner steps, wall {summary['wall_time_s']:.0f} s")
    print(f"ratio 2 actors / 1 actor: {rates[2] / rates[1]:.2f}")


def benchmark_learner(batch: int, updates: int) -> None:
    import jax
    import numpy as np

    from rl.agents.dqn import DQNConfig, DQNLearner
    from rl.environments import make_gymnasium_environment
    from rl.networks import make_q_network
    from rl.replay.dataset import ReplaySample
    from rl.specs import make_environment_spec
    from rl.types import Transition

    spec = make_environment_spec(make_gymnasium_environment("CartPole-v1", seed=0))
    network = make_q_network(spec, hidden_sizes=(256, 256))
    rng = np.random.default_rng(0)
    results = {}
    for fused in (1, 8):
        size = batch * fused
        data = Transition(
            observation=rng.normal(size=(size, 4)).astype(np.float32),
            action=rng.integers(0, 2, size=size).astype(np.int32),
            reward=np.ones(size, np.float32),
            discount=np.full(size, 0.99, np.float32),
            next_observation=rng.normal(size=(size, 4)).astype(np.float32),
        )
        sample = ReplaySample(
            keys=np.arange(size, dtype=np.uint64),
            probabilities=np.full(size, 1.0 / size),
            table_size=np.full(size, size),
            data=jax.device_put(data),
        )

        class Repeat:
            def __next__(self):
                return sample

        learner = DQNLearner(network, jax.random.PRNGKey(0), Repeat(), DQNConfig(batch_size=batch, sgd_steps_per_learner_step=fused))
        for _ in range(5):
            learner.step()
        jax.block_until_ready(learner.save().params)
        calls = max(1, updates // fused)
        start = time.perf_counter()
        for _ in range(calls):
            learner.step()
        jax.block_until_ready(learner.save().params)
        results[fused] = calls * fused / (time.perf_counter() - start)
        print(f"{fused} SGD step(s) per call: {results[fused]:.0f} updates/s on {jax.devices()[0].platform}")
    print(f"ratio fused x8 / single: {results[8] / results[1]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    actors = sub.add_parser("actors")
    actors.add_argument("--steps", type=int, default=6000)
    actors.add_argument("--overrides", nargs="*", default=[])
    learner = sub.add_parser("learner")
    learner.add_argument("--batch", type=int, default=64)
    learner.add_argument("--updates", type=int, default=2000)
    args = parser.parse_args()
    if args.benchmark == "actors":
        benchmark_actors(args.steps, args.overrides)
    else:
        benchmark_learner(args.batch, args.updates)


if __name__ == "__main__":
    main()
