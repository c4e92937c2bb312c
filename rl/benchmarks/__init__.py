"""Benchmark suites behind `scripts/benchmark.py`: one function per suite, each returning
`Row`s ({suite, case, value, unit, bound, ratio}). Every ratio compares figures measured
in the same invocation, never a remembered number.

Suites import what they measure lazily (reverb, JAX, Ray), so listing them is cheap.
"""

from __future__ import annotations

import importlib
from typing import Callable

from rl.benchmarks.common import Row, Settings, format_table, write_json

# name -> (module, function, what it measures: the command line's --help).
SUITES: dict[str, tuple[str, str, str]] = {
    "env": (
        "rl.benchmarks.env",
        "suite_env",
        "raw environment steps/s with random actions for CartPole-v1, Pendulum-v1 and "
        "HalfCheetah-v5: one gymnasium environment, the dm_env an actor steps, and 8 and 32 "
        "copies through gymnasium's vector API and envpool. The actor's bound. ratio: "
        "relative to one gymnasium environment.",
    ),
    "replay": (
        "rl.benchmarks.replay",
        "suite_replay",
        "reverb inserts/s of single n-step transitions through the actor's adder, and "
        "sampled transitions/s through the learner's dataset iterator at batch 128 and 256, "
        "with the server in this process and in another one. The bounds for actor and "
        "learner. ratio: another process relative to in-process.",
    ),
    "actor": (
        "rl.benchmarks.actor",
        "suite_actor",
        "actor steps/s through the real EnvironmentLoop + jitted policy + adder into a "
        "reverb server, for environment.num_envs 1, 8 and 32 (experiment dqn_cartpole unless "
        "--experiments). bound: min(the loop's environment alone, the adder's inserts), "
        "both measured here; ratio = value / bound.",
    ),
    "learner": (
        "rl.benchmarks.learner",
        "suite_learner",
        "learner SGD updates/s of DQN (dqn_cartpole) and SAC (sac_pendulum) fed by the real "
        "dataset iterator from a pre-filled reverb table, against the same learner fed one "
        "fixed in-memory batch: ratio = reverb-fed / in-memory. Also DQN with 8 SGD steps "
        "fused per call (lax.scan): ratio = fused / one step per call, both in-memory.",
    ),
    "solve": (
        "rl.benchmarks.runs",
        "suite_solve",
        "scripts/train.py experiment=<preset> seed=S for each --seeds (default 0 1 2) and "
        "each --experiments (default dqn_cartpole): seconds and actor steps until the first "
        "evaluation reaches the preset's threshold, the whole run's wall-clock and the final "
        "return, per seed and as medians (a seed that never reaches the threshold counts as "
        "infinitely slow).",
    ),
    "anakin": (
        "rl.benchmarks.anakin",
        "suite_anakin",
        "launcher=anakin (whole runs compiled into one JAX program): environment steps/s after "
        "and including compilation, and compile seconds, for PPO and DQN on gymnax CartPole "
        "(presets ppo_gymnax_cartpole, dqn_gymnax_cartpole) with 1 and 8 seeds; one 8-seed run "
        "against 8 single-seed runs of the budget. bound: raw gymnax steps/s of as many copies; "
        "ratio = value / bound.",
    ),
    "atari": (
        "rl.benchmarks.atari",
        "suite_atari",
        "Pong frames/s (4 per agent step): ALE through gymnasium (1 and 8 copies) against "
        "envpool (1, 8, 32 copies), raw with random actions (ratio: relative to one gymnasium "
        "environment) and through a dqn_pong actor (EnvironmentLoop + Nature-CNN policy + "
        "adder into reverb; bound: min(environment alone, adder inserts), ratio = value / "
        "bound); the atari_cnn and impala_resnet gradient at batch 32.",
    ),
    "startup": (
        "rl.benchmarks.runs",
        "suite_startup",
        "seconds of a whole 500-step scripts/train.py process (experiment dqn_cartpole unless "
        "--experiments), mostly start-up, with reverb loading only the TensorFlow modules it "
        "uses (rl/lazy_tensorflow.py) against TensorFlow's full import "
        "(RL_LAZY_TENSORFLOW=0), alternating, median of --repeats; ratio = lazy / full.",
    ),
    "scaling": (
        "rl.benchmarks.runs",
        "suite_scaling",
        "total actor steps/s of launcher=ray with 1, 2 and 4 actors (experiment dqn_cartpole "
        "unless --experiments; the acting phase of summary.json). ratio: relative to 1 "
        "actor. Flat on 2 cores; the same command shows the slope on a bigger machine.",
    ),
}


def get_suite(name: str) -> Callable[[Settings], list[Row]]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}")
    module, function, _ = SUITES[name]
    return getattr(importlib.import_module(module), function)


__all__ = ["Row", "SUITES", "Settings", "format_table", "get_suite", "write_json"]
