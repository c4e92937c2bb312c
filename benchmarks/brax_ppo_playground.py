"""Brax's own PPO trainer on a MuJoCo Playground DM Control Suite task with Playground's published settings, the
peer of `experiment=ppo_playground` (docs/playground.md): what Playground's learning/train_jax_ppo.py runs, timed.

    python benchmarks/brax_ppo_playground.py --env CheetahRun --seeds 0 1 2 [--num-timesteps N] [--small]

in the current stack's venv (brax 0.14.2, playground 0.2.0). Brax 0.14.2 calls `jax.device_put_replicated`, which
JAX 0.10 removed: this script (only) puts it back for one device, as Brax uses it (a leading axis of one copy per
device). `--small` shrinks the copies and batches so that a CPU runs it in minutes (a smoke test, not a figure).

Prints one line per seed, `RESULT {json}`: acting-and-learning steps/s (the median over the stretches between
evaluations after the first, which compiles; not Brax's own `training/sps`, 10x too high here), the seconds of training (compile included) and of evaluation (apart),
and the evaluation curve (env steps, mean episode return).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import jax
import jax.numpy as jnp

SMALL = {"num_envs": 16, "batch_size": 16, "num_minibatches": 4, "num_updates_per_batch": 2, "num_eval_envs": 4}


def restore_device_put_replicated() -> None:
    """Brax 0.14.2's trainers call `jax.device_put_replicated` (removed in JAX 0.10): one copy per device, stacked."""
    if hasattr(jax, "device_put_replicated"):
        return

    def device_put_replicated(tree: Any, devices: list) -> Any:
        stacked = jax.tree_util.tree_map(lambda leaf: jnp.stack([jnp.asarray(leaf)] * len(devices)), tree)
        return jax.device_put(stacked, devices[0]) if len(devices) == 1 else stacked

    jax.device_put_replicated = device_put_replicated


def train_once(name: str, seed: int, num_timesteps: int | None, small: bool) -> dict[str, Any]:
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo
    from mujoco_playground import registry, wrapper
    from mujoco_playground.config import dm_control_suite_params

    impl = "warp" if jax.default_backend() == "gpu" else "jax"  # Warp has no TPU or CPU kernels for training here.
    environment = registry.load(name, config_overrides={"impl": impl})
    evaluation_environment = registry.load(name, config_overrides={"impl": impl})
    settings = dict(dm_control_suite_params.brax_ppo_config(name, impl))
    settings.pop("network_factory", None)
    if num_timesteps is not None:
        settings["num_timesteps"] = num_timesteps
    if small:
        settings.update(SMALL)
    curve: list[tuple[int, float]] = []
    marks: list[tuple[int, float, dict]] = []  # (step, time, metrics) of every evaluation.

    def progress(step: int, metrics: dict) -> None:
        marks.append((int(step), time.perf_counter(), {k: float(v) for k, v in metrics.items()}))
        if "eval/episode_reward" in metrics:
            curve.append((int(step), float(metrics["eval/episode_reward"])))

    start = time.perf_counter()
    ppo.train(
        environment=environment,
        eval_env=evaluation_environment,
        wrap_env_fn=wrapper.wrap_for_brax_training,
        network_factory=ppo_networks.make_ppo_networks,
        progress_fn=progress,
        seed=seed,
        **settings,
    )
    total = time.perf_counter() - start
    last = marks[-1][2]
    # Brax's own `training/sps` counts num_resets_per_eval epochs' steps over one epoch's time (10x too many with
    # Playground's settings): the rates here are env steps over training seconds between evaluations, skipping the
    # first stretch (it compiles the training epoch).
    timed = [(step, metrics["training/walltime"]) for step, _, metrics in marks if "training/walltime" in metrics]
    rates = sorted((b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(timed, timed[1:]))
    return {
        "peer": "brax 0.14.2 ppo.train",
        "environment": name,
        "seed": seed,
        "settings": {key: value for key, value in settings.items() if not callable(value)},
        "training_steps_per_s": round(rates[len(rates) // 2]) if rates else None,
        "training_s": round(last.get("training/walltime", float("nan")), 2),
        "evaluation_s": round(last.get("eval/walltime", float("nan")), 2),
        "total_s": round(total, 2),
        "curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CheetahRun")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--num-timesteps", type=int, default=None, help="Playground's budget unless given")
    parser.add_argument("--small", action="store_true", help="a few copies and small batches (a CPU smoke test)")
    args = parser.parse_args()
    restore_device_put_replicated()
    for seed in args.seeds:
        print("RESULT " + json.dumps(train_once(args.env, seed, args.num_timesteps, args.small)), flush=True)


if __name__ == "__main__":
    main()
