"""The persistent XLA cache: a run's compiled programs land on disk and are reused."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = """
import os, sys, time
import jax, jax.numpy as jnp
from rl.experiments.config import enable_compilation_cache
enable_compilation_cache(sys.argv[1])
assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.1  # The floor a run gets.
# No compile time is over a floor on every machine (CI once compiled this program in under 0.1 s):
# the test lowers the floor, as a user would, so that what it checks, the write and the read back,
# does not depend on speed.
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
enable_compilation_cache(sys.argv[1])
assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0

@jax.jit
def heavy(x):
    for _ in range(20):
        x = jnp.tanh(x @ x.T) @ x
    return x

start = time.perf_counter()
heavy(jnp.ones((64, 64))).block_until_ready()
print(time.perf_counter() - start)
"""


def run(argument):
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, argument], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return float(result.stdout.strip().splitlines()[-1])


def test_compiled_programs_are_written_to_the_cache_directory(tmp_path):
    cache = tmp_path / "xla"
    run(str(cache))
    entries = sorted(os.listdir(cache))
    assert any(name.startswith("jit_heavy-") for name in entries)
    before = set(entries)
    run(str(cache))  # The same program again: read back, nothing new written for it.
    assert {name for name in os.listdir(cache) if name.startswith("jit_heavy-") and name.endswith("-cache")} == {
        name for name in before if name.startswith("jit_heavy-") and name.endswith("-cache")
    }


@pytest.mark.reverb
def test_a_training_run_caches_its_learner_update_and_policies(tmp_path):
    """The cache is switched on before a run's first compilation (JAX decides once per
    process, at that moment): the learner's update and both policies land on disk. (The floor is
    lowered through JAX's own variable: a policy once compiled under 0.1 s on CI.)"""
    from conftest import run_train

    cache = tmp_path / "xla"
    result = run_train(
        [
            "max_actor_steps=300",
            "eval_every=300",
            "eval_episodes=1",
            "agent.min_replay_size=100",
            "logger=csv",
            "progress=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        timeout=600,
        env={"RL_COMPILATION_CACHE": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    programs = [name.rsplit("-", 2)[0] for name in os.listdir(cache) if name.endswith("-cache")]
    assert programs.count("jit__guarded_update") == 1  # The learner's (finite-checked) update.
    assert programs.count("jit_act") == 2  # The behaviour and the evaluation policy.


@pytest.mark.current
def test_a_second_anakin_run_loads_its_traced_programs_and_computes_the_same(tmp_path):
    """rl/program_cache.py under launcher=anakin: the first run keeps its initialiser, chunk and evaluation
    round traced (`exported/`); the same run again traces nothing new and computes the same. (Which programs XLA's
    cache keeps depends on their compile times, over its floor or not: not compared.)"""
    from conftest import read_summary, run_train

    cache = tmp_path / "xla"
    command = [
        "experiment=ppo_gymnax_cartpole",
        "max_actor_steps=4096",
        "eval_every=2048",
        "eval_episodes=2",
        "progress=false",
        f"compilation_cache={cache}",
    ]
    seen = []
    for name in ("first", "second"):
        result = run_train([*command, f"hydra.run.dir={tmp_path / name}"], timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        exported = cache / "exported"
        seen.append({name: (exported / name).stat().st_mtime_ns for name in os.listdir(exported)})
    from rl.anakin.programs import HOST_INIT_EXPORTS

    assert sorted(name.split("-")[0] for name in seen[0]) == ["chunk", "evaluation", *(["init"] * HOST_INIT_EXPORTS)]
    assert seen[1] == seen[0]  # The same files, none written again: nothing traced anew.
    first, second = (read_summary(str(tmp_path / name)) for name in ("first", "second"))
    assert first["eval_returns"] == second["eval_returns"]
