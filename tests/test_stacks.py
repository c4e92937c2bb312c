"""The two stacks (docs/stacks.md): the compiled path runs without reverb, TensorFlow or Ray, and a launcher
that needs them is refused in one line, before anything starts, where they are missing.

These run on both stacks. On the reverb stack the child process is made to lack the modules the current stack
lacks (`sys.modules[name] = None`, Python's own way of making an import fail), so the refusal is checked there too;
on the current stack (.venv-current) the modules are simply not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna
import pytest

from conftest import ROOT, TRAIN, read_summary, run_train
from rl.experiments.launcher import REVERB_STACK_MODULES

# Runs scripts/train.py (the entry point, re-execution under jemalloc included) in an interpreter without the
# modules that only the reverb stack has.
WITHOUT_REVERB = """
import runpy, sys
for name in {modules!r}:
    sys.modules[name] = None  # `import reverb` (and importlib.util.find_spec) now find nothing.
sys.argv = [{train!r}, *sys.argv[1:]]
runpy.run_path({train!r}, run_name="__main__")
"""

# Trains one tiny compiled run in this process, then reports the modules of the reverb stack it imported.
COMPILED_RUN = """
import json, sys
sys.argv = [{train!r}, *sys.argv[1:]]
try:
    import runpy
    runpy.run_path({train!r}, run_name="__main__")
finally:
    from rl import lazy_tensorflow
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("reverb", "ray"))
    tensorflow = "tensorflow" in sys.modules and not lazy_tensorflow.installed()  # Its own __init__ ran.
    print("REPORT=" + json.dumps({{"imported": heavy, "tensorflow": tensorflow}}))
"""


def run_without_reverb(overrides: list[str]) -> subprocess.CompletedProcess:
    code = WITHOUT_REVERB.format(modules=sorted(REVERB_STACK_MODULES), train=TRAIN)
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    command = [sys.executable, "-c", code, *overrides]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)


def this_stack() -> str:
    """How the refusal names the Python it runs in."""
    return "the current stack (.venv-current)" if os.path.basename(sys.prefix) == ".venv-current" else sys.prefix


@pytest.mark.parametrize(
    "overrides, launcher, needs",
    [
        ([], "local", "dm-reverb"),  # The default experiment.
        (["experiment=dqn_cartpole", "launcher.deterministic=true"], "local", "dm-reverb"),
        (["launcher=ray"], "ray", "dm-reverb and ray"),
    ],
    ids=["default", "deterministic", "ray"],
)
def test_a_launcher_that_needs_reverb_is_refused_in_one_line_where_it_is_missing(tmp_path, overrides, launcher, needs):
    run_dir = tmp_path / "run"
    result = run_without_reverb([*overrides, f"hydra.run.dir={run_dir}"])
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"Invalid configuration: launcher: {launcher} needs {needs}, which {this_stack()} lacks: "
        "use the reverb stack (.venv, requirements.txt) or launcher=anakin"
    ]
    assert "Traceback" not in result.stderr
    assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints").exists()


def test_each_job_of_a_sweep_that_needs_reverb_is_refused_and_the_sweep_exits_2(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_without_reverb(["-m", "seed=0,1", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 2, result.stderr[-3000:]
    assert "2 job(s) of the sweep" in result.stderr
    for job in ("0", "1"):
        assert "local needs dm-reverb" in (sweep / job / "refused.txt").read_text()
        assert not (sweep / job / "summary.json").exists()


def test_the_compiled_path_imports_neither_reverb_nor_ray_nor_tensorflow(tmp_path):
    """A whole launcher=anakin run, its checkpoint and summary included, with no reverb, Ray or TensorFlow (beyond
    the reverb stack's stand-in, whose `__init__` never runs; distrax's TensorFlow Probability is its JAX
    substrate): what the current stack can run."""
    run_dir = tmp_path / "run"
    code = COMPILED_RUN.format(train=TRAIN)
    overrides = ["experiment=ppo_gymnax_cartpole", "max_actor_steps=2048", "eval_every=1024", "eval_episodes=2"]
    command = [sys.executable, "-c", code, *overrides, "progress=false", "logger=csv", f"hydra.run.dir={run_dir}"]
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.split("REPORT=", 1)[1])
    assert report == {"imported": [], "tensorflow": False}
    summary = read_summary(str(run_dir))
    assert summary["status"] == "finished" and summary["actor_steps"] == 2048
    assert os.listdir(run_dir / "checkpoints")


@pytest.mark.current
def test_an_optuna_search_prunes_anakin_jobs(tmp_path):
    """Pruning over launcher=anakin jobs, one process per job (Hydra's basic launcher): each trial is judged at
    its first evaluation, pruned there, and the study records it."""
    from rl.sweeps.pruning import open_storage

    sweep = tmp_path / "search"
    result = run_train(
        [
            "-m",
            "experiment=ppo_gymnax_cartpole",
            "hydra/sweeper=optuna_pruning",
            "hydra/sweeper/pruner=threshold",  # Every return is below 1e9: each trial is pruned once judged.
            "hydra.sweeper.pruner.lower=1e9",
            "hydra.sweeper.pruner.n_warmup_steps=1000",
            "hydra/sweeper/sampler=grid",
            "hydra.sweeper.n_trials=2",
            "agent.learning_rate=choice(1e-4,1e-3)",
            "max_actor_steps=4096",
            "eval_every=1024",
            "eval_episodes=2",
            "progress=false",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        summary = read_summary(str(sweep / job))
        assert summary["status"] == "pruned" and summary["actor_steps"] == 1024, summary
    storage = open_storage(f"sqlite:///{sweep}/optuna.db")
    (study,) = storage.get_all_study_summaries()
    trials = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.PRUNED] * 2
