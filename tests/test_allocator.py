"""rl/allocator.py: the entry points re-execute themselves once under jemalloc (real
processes: the child reads its own /proc/self/maps), keep glibc with
RL_ALLOCATOR=system, and run again with exactly the same command line."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, TRAIN
from rl.allocator import MARKER, MODE, SYSTEM_PATHS, find_jemalloc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD and /proc are Linux's")

# Prints START once per process start (a re-exec shows two), re-executes, then reports.
PROBE = (
    """
import json, os, sys
print("START", flush=True)
from rl.allocator import jemalloc_loaded, reexec_with_jemalloc
reexec_with_jemalloc()
print("REPORT=" + json.dumps({
    "argv": sys.argv, "orig_argv": sys.orig_argv[1:], "utf8": sys.flags.utf8_mode,
    "marker": os.environ.get(%r), "preload": os.environ.get("LD_PRELOAD"), "mapped": jemalloc_loaded(),
}))
"""
    % MARKER
)

# Arguments a shell would pass through unchanged: spaces, `=`, quotes, an empty one, unicode.
ARGUMENTS = ["a b", "key=value with spaces", "--flag=x=y", "", "-m", 'it\'s "quoted"', "ünï"]


def clean_environment(**extra: str) -> dict[str, str]:
    """This environment without the allocator's variables (scripts/test.sh preloads jemalloc)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", MARKER, MODE)}
    environment.update(extra)
    return environment


def run_probe(tmp_path, environment: dict[str, str], interpreter_options: tuple[str, ...] = ()):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    command = [sys.executable, *interpreter_options, str(script), *ARGUMENTS]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60)
    report = None
    if "REPORT=" in result.stdout:
        report = json.loads(result.stdout.split("REPORT=", 1)[1])
    return result, result.stdout.count("START"), report, command


@pytest.fixture
def jemalloc():
    """Ray's bundled jemalloc, which the reverb stack always has (tests that use it are marked `reverb`)."""
    library = find_jemalloc()
    assert library is not None, "no jemalloc library: Ray's wheel ships one (ray/core/libjemalloc.so)"
    return library


@pytest.mark.reverb
def test_the_child_runs_under_jemalloc_once_with_the_same_command_line(tmp_path, jemalloc):
    result, starts, report, command = run_probe(tmp_path, clean_environment(), ("-X", "utf8"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert starts == 2  # The original and one re-exec: no loop.
    assert report["mapped"] is not None  # In the child's own /proc/self/maps.
    assert not os.path.isabs(jemalloc) or os.path.samefile(report["mapped"], jemalloc)
    assert report["marker"] == jemalloc
    assert report["preload"] == jemalloc
    assert report["argv"] == [command[3], *ARGUMENTS]
    assert report["orig_argv"] == command[1:]  # Interpreter options too:
    assert report["utf8"] == 1


@pytest.mark.reverb
def test_an_existing_preload_is_kept_after_jemalloc(tmp_path, jemalloc):
    other = ctypes.util.find_library("m")  # libm: harmless to preload.
    result, starts, report, _ = run_probe(tmp_path, clean_environment(LD_PRELOAD=other))
    assert result.returncode == 0, result.stderr[-2000:]
    assert starts == 2
    assert report["preload"] == f"{jemalloc}:{other}"
    assert report["mapped"] is not None


def test_rl_allocator_system_keeps_glibc(tmp_path):
    result, starts, report, _ = run_probe(tmp_path, clean_environment(**{MODE: "system"}))
    assert result.returncode == 0, result.stderr[-2000:]
    assert starts == 1
    assert report["mapped"] is None and report["marker"] is None and report["preload"] is None


@pytest.mark.reverb
def test_no_second_exec_when_already_preloaded_or_marked(tmp_path, jemalloc):
    # Preloaded by the caller (as scripts/test.sh does): nothing to do, even when required.
    result, starts, report, _ = run_probe(tmp_path, clean_environment(LD_PRELOAD=jemalloc, **{MODE: "jemalloc"}))
    assert (result.returncode, starts, report["marker"]) == (0, 1, None), result.stderr[-2000:]
    assert report["mapped"] is not None
    # Re-executed once but LD_PRELOAD lost on the way: the marker stops a loop.
    result, starts, report, _ = run_probe(tmp_path, clean_environment(**{MARKER: jemalloc}))
    assert (result.returncode, starts, report["mapped"]) == (0, 1, None), result.stderr[-2000:]


def test_an_invalid_or_unmet_choice_is_one_line(tmp_path):
    result, starts, _, _ = run_probe(tmp_path, clean_environment(**{MODE: "tcmalloc"}))
    assert (result.returncode, starts) == (1, 1)
    assert result.stderr.strip() == "RL_ALLOCATOR='tcmalloc': must be one of auto, jemalloc, system"
    if any(os.path.isfile(path) for path in SYSTEM_PATHS) or ctypes.util.find_library("jemalloc"):
        return  # The system's jemalloc would be found: the case below cannot be made.
    # A `ray` package without the bundled library, found first: no jemalloc anywhere.
    (tmp_path / "fake" / "ray").mkdir(parents=True)
    (tmp_path / "fake" / "ray" / "__init__.py").write_text("")
    environment = clean_environment(**{MODE: "jemalloc"}, PYTHONPATH=str(tmp_path / "fake"))
    result, starts, _, _ = run_probe(tmp_path, environment)
    assert (result.returncode, starts) == (1, 1)
    assert result.stderr.strip().startswith("RL_ALLOCATOR=jemalloc: no jemalloc library found")


@pytest.mark.reverb
@pytest.mark.parametrize("entry", [[TRAIN], ["-m", "rl.train"]], ids=["scripts/train.py", "python -m rl.train"])
def test_the_train_entry_points_reexecute(entry, jemalloc):
    """The child's environment, read back through the composed config (`--cfg job`
    starts no run)."""
    command = [
        sys.executable,
        *entry,
        "+probe=${oc.env:" + MARKER + ",none}",
        "seed=20260",
        "--cfg",
        "job",
        "--resolve",
    ]
    for mode, expected in ((None, jemalloc), ("system", "none")):
        environment = clean_environment(**({MODE: mode} if mode else {}))
        result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"probe: {expected}\n" in result.stdout
        assert "seed: 20260\n" in result.stdout  # The arguments survived the re-exec.


def test_a_training_command_reexecutes_in_one_place():
    """`rl.train:cli` is the one place a training command re-executes (scripts/train.py, `python -m rl.train`
    and `rl-train` all call it); scripts/benchmark.py is a command of its own."""
    callers = []
    for folder in ("rl", "scripts", "hydra_plugins"):
        for directory, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in (name for name in names if name.endswith(".py")):
                with open(os.path.join(directory, name)) as file:
                    if re.search(r"^\s*reexec_with_jemalloc\(\)", file.read(), re.MULTILINE):  # A call.
                        callers.append(os.path.relpath(os.path.join(directory, name), ROOT))
    assert sorted(callers) == ["rl/train.py", "scripts/benchmark.py"]


def test_the_entry_point_imports_nothing_heavy_before_it_reexecutes():
    """What `rl.train` imports runs twice under a re-exec: the standard library and rl's light modules only."""
    heavy = ("hydra", "omegaconf", "numpy", "yaml", "jax", "tensorflow.python")
    probe = f"import sys, rl.train; print([name for name in {heavy!r} if name in sys.modules])"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
