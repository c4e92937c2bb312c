"""scripts/evaluate.py on a launcher=anakin run (the compiled path: the current stack's part runs it)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_train

pytestmark = pytest.mark.current


def _evaluate(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    evaluate = os.path.join(ROOT, "scripts", "evaluate.py")
    return subprocess.run(
        [sys.executable, evaluate, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )


def test_evaluate_reads_each_replica_of_an_anakin_run_and_films_the_first(tmp_path):
    """A launcher=anakin checkpoint holds every replica's training state: each is evaluated in turn (its seed
    the run's plus its index), `replica=` picks one, and the video is of the first (gymnax frames drawn by
    gymnasium's CartPole)."""
    run_dir = str(tmp_path / "anakin")
    result = run_train(
        [
            "experiment=ppo_gymnax_cartpole",
            "max_actor_steps=4096",
            "eval_every=4096",
            "eval_episodes=2",
            "launcher.num_seeds=2",
            "seed=5",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    evaluated = _evaluate(f"run_dir={run_dir}", "episodes=2", "video=true")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    means = re.findall(r"^replica (\d) \(seed (\d)\): mean return ([0-9.]+)", evaluated.stdout, re.MULTILINE)
    assert [(index, seed) for index, seed, _ in means] == [("0", "5"), ("1", "6")], evaluated.stdout
    (video,) = glob.glob(os.path.join(run_dir, "videos", "*.mp4"))
    assert os.path.getsize(video) > 1000 and "video of one episode" in evaluated.stdout
    one = _evaluate(f"run_dir={run_dir}", "episodes=2", "replica=1")
    assert one.returncode == 0 and re.findall(r"^replica (\d) .*mean return", one.stdout, re.MULTILINE) == ["1"]
    wrong = _evaluate(f"run_dir={run_dir}", "replica=2")
    assert wrong.returncode == 1 and "replica=2: the run has 2 replica(s), 0 to 1" in wrong.stderr
