"""rl/program_cache.py: a program traced once per key, its results those of `jax.jit`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from conftest import ROOT
from rl import program_cache


class State(NamedTuple):
    weights: jax.Array
    totals: dict


def _program(traces: list[int]):
    def chunk(state: State, values: dict) -> tuple[State, dict]:
        traces.append(1)  # Python runs only while tracing.

        def step(state: State, _):
            weights = state.weights * values["scale"] + 1.0
            return State(weights, {"sum": state.totals["sum"] + weights.sum()}), weights.mean()

        state, means = jax.lax.scan(step, state, None, length=4)
        return state, {"mean": means}

    return chunk


def _arguments(rows: int = 3) -> tuple[State, dict]:
    return State(jnp.arange(rows * 2.0).reshape(rows, 2), {"sum": jnp.zeros(())}), {"scale": jnp.float32(0.5)}


def _equal(first, second) -> bool:
    same = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(a, b)), first, second)
    return jax.tree_util.tree_structure(first) == jax.tree_util.tree_structure(second) and all(
        jax.tree_util.tree_leaves(same)
    )


def test_a_second_compile_with_the_same_key_loads_the_export_and_computes_what_jit_does(tmp_path):
    traces: list[int] = []
    chunk, arguments = _program(traces), _arguments()
    expected = jax.jit(_program([]))(*arguments)
    first = program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=str(tmp_path))
    second = program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=str(tmp_path))
    assert len(traces) == 1
    assert _equal(first(*arguments), expected) and _equal(second(*arguments), expected)
    assert type(second(*arguments)[0]) is State
    assert len(os.listdir(tmp_path / program_cache.SUBDIRECTORY)) == 1


def test_another_context_or_shape_is_another_program(tmp_path):
    traces: list[int] = []
    chunk = _program(traces)
    compile = lambda arguments, context: program_cache.compile_program(
        chunk, arguments, name="chunk", context=context, directory=str(tmp_path)
    )
    compile(_arguments(3), "a")
    compile(_arguments(3), "b")
    wider = compile(_arguments(5), "a")
    assert len(traces) == 3
    assert _equal(wider(*_arguments(5)), jax.jit(_program([]))(*_arguments(5)))
    assert len(os.listdir(tmp_path / program_cache.SUBDIRECTORY)) == 3


def test_a_damaged_export_is_traced_again_and_replaced(tmp_path):
    traces: list[int] = []
    chunk, arguments = _program(traces), _arguments()
    program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=str(tmp_path))
    (stored,) = (tmp_path / program_cache.SUBDIRECTORY).iterdir()
    stored.write_bytes(b"not an export")
    again = program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=str(tmp_path))
    assert len(traces) == 2
    assert _equal(again(*arguments), jax.jit(_program([]))(*arguments))
    program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=str(tmp_path))
    assert len(traces) == 2  # The damaged file was replaced by a whole one.


def test_without_a_directory_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chunk, arguments = _program([]), _arguments()
    compiled = program_cache.compile_program(chunk, arguments, name="chunk", context="a", directory=None)
    assert _equal(compiled(*arguments), jax.jit(_program([]))(*arguments)) and os.listdir(tmp_path) == []


def test_the_key_follows_the_source_of_a_loaded_module_outside_the_installed_distributions(tmp_path, monkeypatch):
    module = tmp_path / "users_agent.py"
    module.write_text("LOSS = 'huber'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("users_agent")
    leaves, tree = jax.tree_util.tree_flatten(_arguments())
    key = lambda: program_cache.program_key("chunk", "a", leaves, tree, None)
    before = key()
    assert key() == before
    module.write_text("LOSS = 'squared'\n")
    assert key() == before, "a file is read once a process: the program traced is the module as loaded"
    program_cache._source_digest.cache_clear()  # The next process, which loads the edited module.
    assert key() != before
    monkeypatch.delitem(sys.modules, "users_agent")


def test_a_program_over_two_devices_keeps_its_sharding(tmp_path):
    """Host devices stand in for accelerators: arguments and results sharded over both, loaded from the export."""
    script = textwrap.dedent(
        f"""
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        from rl import program_cache
        sharding = NamedSharding(Mesh(jax.devices()[:2], ("replicas",)), PartitionSpec("replicas"))
        state = jax.device_put(jnp.arange(8.0).reshape(4, 2), sharding)
        step = lambda x: (x * 2.0, x.sum(axis=1))
        for _ in range(2):
            compiled = program_cache.compile_program(step, (state,), name="step", context="", directory={str(tmp_path)!r},
                                                     sharding=sharding)
            doubled, sums = compiled(state)
        assert doubled.sharding == sharding and sums.sharding == sharding, (doubled.sharding, sums.sharding)
        assert np.array_equal(doubled, np.arange(8.0).reshape(4, 2) * 2) and np.array_equal(sums, [1, 5, 9, 13])
        print("ok")
        """
    )
    environment = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_without_flatbuffers_programs_compile_as_before_with_one_warning(tmp_path):
    script = textwrap.dedent(
        f"""
        import logging, sys
        sys.modules["flatbuffers"] = None  # As if it were not installed: importing it raises ImportError.
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        import jax.numpy as jnp
        from rl import program_cache
        for _ in range(2):
            compiled = program_cache.compile_program(lambda x: x * 2.0, (jnp.ones(3),), name="double", context="",
                                                     directory={str(tmp_path)!r})
        print(compiled(jnp.ones(3)).tolist())
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[2.0, 2.0, 2.0]", result.stderr[-2000:]
    assert result.stderr.count("jax.export needs flatbuffers") == 1 and os.listdir(tmp_path) == []
