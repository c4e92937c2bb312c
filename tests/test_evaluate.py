"""scripts/evaluate.py: restores a run's checkpoint, reproduces its evaluation, records video."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, run_train

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

EVALUATE = os.path.join(ROOT, "scripts", "evaluate.py")


def _evaluate(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, EVALUATE, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )


def _fingerprint(directory: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Path -> content hash of every file under `directory` (minus the `skip` subfolders)."""
    prints = {}
    for root, directories, files in os.walk(directory):
        directories[:] = [d for d in directories if os.path.relpath(os.path.join(root, d), directory) not in skip]
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as file:
                    prints[os.path.relpath(path, directory)] = hashlib.sha256(file.read()).hexdigest()
    return prints


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A short W&B-logged run with two evaluation rounds: the untrained policy's at step 0 and one at its end."""
    run_dir = str(tmp_path_factory.mktemp("evaluate") / "run")
    result = run_train(
        [
            "logger=wandb",
            "max_actor_steps=1500",
            "eval_every=1500",
            "eval_episodes=3",
            "agent.min_replay_size=200",
            "progress=false",
            "seed=2",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def _returns(output: str) -> list[float]:
    return [float(value) for value in re.search(r"episode returns: (.*)", output).group(1).split(", ")]


def test_evaluate_plays_the_runs_evaluation_with_its_final_parameters_and_writes_a_video(trained_run):
    """The run's evaluation seeds, greedy policy and restored parameters: the same episodes every time. They start
    where the run's first round (the untrained policy's, at step 0) started, not its last, so the run's final
    return is matched within noise only."""
    before = _fingerprint(trained_run, skip=("wandb",))
    result = _evaluate(f"run_dir={trained_run}", "episodes=3", "video=true")
    assert result.returncode == 0, result.stderr[-3000:]
    mean = float(re.search(r"mean return (-?[\d.]+) ± ([\d.]+)", result.stdout).group(1))
    returns = _returns(result.stdout)
    assert len(returns) == 3 and mean == pytest.approx(sum(returns) / 3, abs=0.005)  # Printed to 0.01.
    again = _evaluate(f"run_dir={trained_run}", "episodes=3")
    assert again.returncode == 0 and _returns(again.stdout) == returns, again.stderr[-3000:]

    videos = glob.glob(os.path.join(trained_run, "videos", "*.mp4"))
    assert len(videos) == 1
    import imageio_ffmpeg

    frames, seconds = imageio_ffmpeg.count_frames_and_secs(videos[0])
    assert frames > 1 and seconds > 0
    reader = imageio_ffmpeg.read_frames(videos[0])
    metadata = next(reader)
    first = next(reader)
    reader.close()
    assert metadata["size"] == (600, 400) and len(first) == 600 * 400 * 3 and max(first) > min(first)

    # The run's W&B run is offline: it cannot be continued, and no second run with its id is made.
    runs = sorted(glob.glob(os.path.join(trained_run, "wandb", "offline-run-*")))
    assert len(runs) == 1
    run_id = runs[0].rsplit("-", 1)[1]
    assert f"W&B run {run_id} is offline: the video was not added to it" in result.stdout

    after = _fingerprint(trained_run, skip=("wandb", "videos"))
    assert after == before  # Checkpoints, logs, summary and configs untouched.


def test_evaluate_other_seed_and_episode_count(trained_run):
    result = _evaluate(f"run_dir={trained_run}", "episodes=2", "seed=11")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "over 2 episodes" in result.stdout and "seed 11" in result.stdout


def test_evaluate_reports_bad_inputs_without_traceback(trained_run, tmp_path):
    missing = _evaluate(f"run_dir={tmp_path / 'nowhere'}")
    assert missing.returncode == 1 and "no run directory" in missing.stderr and "Traceback" not in missing.stderr

    no_checkpoint = tmp_path / "no_checkpoint"
    shutil.copytree(os.path.join(trained_run, ".hydra"), no_checkpoint / ".hydra")
    before = _fingerprint(str(no_checkpoint))
    result = _evaluate(f"run_dir={no_checkpoint}", "video=true")
    assert result.returncode == 1 and "no checkpoint" in result.stderr and "Traceback" not in result.stderr
    assert _fingerprint(str(no_checkpoint)) == before and sorted(os.listdir(no_checkpoint)) == [".hydra"]

    not_a_run = tmp_path / "plain"
    not_a_run.mkdir()
    result = _evaluate(f"run_dir={not_a_run}")
    assert result.returncode == 1 and "not a run directory" in result.stderr

    for arguments in (["episodes=0", f"run_dir={trained_run}"], ["bogus=1", f"run_dir={trained_run}"], ["episodes=3"]):
        result = _evaluate(*arguments)
        assert result.returncode == 1 and "Traceback" not in result.stderr, arguments


def test_a_run_whose_saved_config_names_the_launcher_s_old_module_is_evaluated(trained_run, tmp_path):
    """Runs written before the launchers moved to rl/local/ and rl/ray/ name the old class in `.hydra/config.yaml`:
    evaluation reads it under its new name (rl/experiments/saved_config.py) and leaves the file as it was."""
    old_run = str(tmp_path / "old_run")
    shutil.copytree(trained_run, old_run, ignore=shutil.ignore_patterns("wandb", "videos"))
    config_path = os.path.join(old_run, ".hydra", "config.yaml")
    with open(config_path) as file:
        saved = file.read()
    assert "_target_: rl.local.LocalLauncher" in saved
    with open(config_path, "w") as file:
        file.write(saved.replace("rl.local.LocalLauncher", "rl.experiments.launchers.local.LocalLauncher"))
    before = _fingerprint(old_run)
    result = _evaluate(f"run_dir={old_run}", "episodes=3")
    assert result.returncode == 0, result.stderr[-3000:]
    unchanged = _evaluate(f"run_dir={trained_run}", "episodes=3")
    assert unchanged.returncode == 0, unchanged.stderr[-3000:]
    assert _returns(result.stdout) == _returns(unchanged.stdout)  # What the run with today's names gives.
    assert _fingerprint(old_run) == before
