"""The persistent XLA cache: a run's compiled programs land on disk and are reused."""

import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = """
import sys, time
import jax, jax.numpy as jnp
from rl.experiments.compilation import enable_compilation_cache
enable_compilation_cache(sys.argv[1])

@jax.jit
def heavy(x):
    # Long enough to compile (well over the cache's 0.1 s floor) on any machine.
    for _ in range(60):
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

