"""One Stable-Baselines3 (or SBX, its JAX port) SAC or TD3 run on a Gymnasium MuJoCo task with RL Baselines3 Zoo's
settings, evaluated like ours, for the `mujoco_peers` suite (benchmarks/mujoco_peers.py). The peer's own Python runs
this file (its venv has SB3, torch and MuJoCo, not the project), so it imports nothing of the project and the peer's
libraries only inside `main`:

    PEER_PYTHON benchmarks/peer_sb3_run.py --lib sb3 --algo sac --task Walker2d-v5 --steps 100000 --seed 0 --out R.json

Every `--eval-every` steps, and at the end when the budget is not a multiple of it, it evaluates `--eval-episodes`
episodes with the deterministic action on an environment of its own, and writes one JSON file (`result`)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any, Sequence

# RL Baselines3 Zoo 2.9.0a2 (commit 22e3ff2450fd, 2026-04-23): hyperparams/sac.yml and hyperparams/td3.yml, their
# "Mujoco Envs" entries (written for the v4 tasks; the v5 tasks are the same robots). What they leave out is the
# library's default. SAC: only learning_starts. TD3: Gaussian exploration noise of 0.1, one gradient step of 256 per
# step, Adam 1e-3, 400x300 networks.
ZOO = "rl-baselines3-zoo 2.9.0a2 @ 22e3ff2450fd, hyperparams/{sac,td3}.yml (MuJoCo entries)"
ZOO_SETTINGS: dict[str, dict[str, Any]] = {
    "sac": {"learning_starts": 10000},
    "td3": {
        "learning_starts": 10000,
        "noise_type": "normal",
        "noise_std": 0.1,
        "train_freq": 1,
        "gradient_steps": 1,
        "learning_rate": 1e-3,
        "batch_size": 256,
        "policy_kwargs": {"net_arch": [400, 300]},
    },
}
# The robots the zoo's MuJoCo entries name, and the one they tune apart (Swimmer's discount).
ZOO_TASKS = ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid", "Swimmer")
SWIMMER_GAMMA = {"sac": 0.999, "td3": 0.9999}
LIBRARIES = ("sb3", "sbx")


def zoo_settings(algo: str, task: str, learning_starts: int | None = None) -> dict[str, Any]:
    """The zoo's keyword arguments for `algo` on `task` (exploration noise as `noise_type`/`noise_std`, as the zoo
    writes it); `learning_starts` replaces the zoo's (a smoke run's shorter start). ValueError for a task or
    algorithm the zoo has no MuJoCo entry for."""
    if algo not in ZOO_SETTINGS:
        raise ValueError(f"algorithm {algo!r}: the zoo's MuJoCo settings exist for {', '.join(ZOO_SETTINGS)}")
    robot, _, version = task.rpartition("-")
    if robot not in ZOO_TASKS or not version.startswith("v"):
        raise ValueError(f"task {task!r}: the zoo has MuJoCo settings for {', '.join(t + '-vN' for t in ZOO_TASKS)}")
    settings = json.loads(json.dumps(ZOO_SETTINGS[algo]))  # A deep copy.
    if robot == "Swimmer":
        settings["gamma"] = SWIMMER_GAMMA[algo]
    if learning_starts is not None:
        settings["learning_starts"] = int(learning_starts)
    return settings


def parse_arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", choices=LIBRARIES, default="sb3")
    parser.add_argument("--algo", choices=tuple(ZOO_SETTINGS), required=True)
    parser.add_argument("--task", required=True, help="a Gymnasium MuJoCo id, e.g. Walker2d-v5")
    parser.add_argument("--steps", type=int, required=True, help="environment steps to train")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--eval-every", type=int, default=10000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--learning-starts", type=int, help="replaces the zoo's (smoke runs only)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    if min(args.steps, args.eval_every, args.eval_episodes) < 1 or (args.learning_starts or 0) < 0:
        parser.error("--steps, --eval-every and --eval-episodes must be >= 1, --learning-starts >= 0")
    try:
        zoo_settings(args.algo, args.task, args.learning_starts)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_arguments(argv)
    import gymnasium
    import numpy as np
    import stable_baselines3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.noise import NormalActionNoise

    if args.lib == "sbx":
        import sbx as library
    else:
        import stable_baselines3 as library

    settings = zoo_settings(args.algo, args.task, args.learning_starts)
    env = make_vec_env(args.task, n_envs=1, seed=args.seed)  # As the zoo makes it: one copy under a Monitor.
    kwargs = {key: value for key, value in settings.items() if key not in ("noise_type", "noise_std")}
    if settings.get("noise_type") == "normal":
        size = env.action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(size), settings["noise_std"] * np.ones(size))
    if args.lib == "sb3":
        kwargs["device"] = "cpu"
    model = getattr(library, args.algo.upper())("MlpPolicy", env, seed=args.seed, verbose=0, **kwargs)
    eval_env = Monitor(gymnasium.make(args.task))  # Its episodes' own returns, as the zoo's EvalCallback reads.
    eval_env.reset(seed=args.seed + 10_000)
    evaluations: list[dict[str, float]] = []
    evaluation_seconds = [0.0]

    def evaluate(steps: int) -> None:
        start = time.perf_counter()
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
        evaluation_seconds[0] += time.perf_counter() - start
        evaluations.append({"steps": int(steps), "return": float(mean), "std": float(std)})
        print(json.dumps(evaluations[-1]), flush=True)

    class EveryN(BaseCallback):
        """Evaluates at each multiple of --eval-every (one environment copy: num_timesteps counts one a step)."""

        def _on_step(self) -> bool:
            if self.num_timesteps % args.eval_every == 0:
                evaluate(self.num_timesteps)
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=args.steps, callback=EveryN())
    if not evaluations or evaluations[-1]["steps"] != model.num_timesteps:
        evaluate(model.num_timesteps)
    learn_seconds = time.perf_counter() - start
    versions = {"stable_baselines3": stable_baselines3.__version__, "gymnasium": gymnasium.__version__}
    versions |= {"numpy": np.__version__, "python": platform.python_version()}
    if args.lib == "sbx":
        versions["sbx"] = library.__version__
    else:
        import torch

        versions |= {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    result = {
        "lib": args.lib,
        "algo": args.algo,
        "task": args.task,
        "seed": args.seed,
        "steps": int(model.num_timesteps),
        "eval_episodes": args.eval_episodes,
        "zoo": ZOO,
        "settings": settings,
        "evaluations": evaluations,
        "final_return": evaluations[-1]["return"],
        "learn_seconds": learn_seconds,
        "evaluation_seconds": evaluation_seconds[0],
        "versions": versions,
    }
    with open(args.out, "w") as file:
        json.dump(result, file, indent=1)
        file.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
