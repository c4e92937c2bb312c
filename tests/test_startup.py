"""Start-up: --help and --cfg answer without the heavy libraries; an unwritable run
directory is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, TRAIN, run_train
from rl.command_line import run_directory_error

# "tensorflow.python": TensorFlow's own code (`import rl` puts only a stand-in `tensorflow`
# module in place, rl/lazy_tensorflow.py).
HEAVY = ("tensorflow.python", "reverb", "jax", "jaxlib", "haiku", "ray", "wandb")
# Runs scripts/train.py as `python scripts/train.py ARGS`, then prints which heavy modules it imported.
PROBE = """
import json, runpy, sys
sys.argv = [{train!r}, *{args!r}]
try:
    runpy.run_path({train!r}, run_name="__main__")
except SystemExit:
    pass
print("HEAVY=" + json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


@pytest.mark.parametrize("args", [["--help"], ["--cfg", "job"]])
def test_help_and_cfg_import_no_heavy_library(args):
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(train=TRAIN, args=args, heavy=HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "agent: " in result.stdout or "agent:" in result.stdout  # Hydra's help / the composed config.
    imported = json.loads(result.stdout.rsplit("HEAVY=", 1)[1])
    assert imported == []
    if args == ["--help"]:  # The groups a command line chooses from; the agents' schemas are not one.
        groups = result.stdout.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
        assert "agent: d4pg, dqn," in groups and "schema" not in groups


REPLAY_AND_LOSSES = ("tensorflow.python", "reverb", "rlax", "distrax", "ray", "wandb")


@pytest.mark.parametrize(
    "args,message",
    [
        (["agent.batch_size=-1"], "batch_size must be > 0"),
        (["agent=dqn", "environment=pendulum"], "acts in discrete action spaces"),
        (["experiment=sac_pendulum", "agent.tau=2"], "tau"),
        (["agent=impala", "network=mlp"], "needs policy_value"),
        (["experiment=impala_cartpole", "agent.optimizer=sgd"], "optimizer must be one of"),
    ],
)
def test_a_configuration_error_loads_no_replay_or_loss_library(args, message, tmp_path):
    """Checks read agent configs and builders, not learners: reverb and rlax (each
    bringing TensorFlow, about 3 s) load only when a run starts."""
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE.format(train=TRAIN, args=[*args, f"hydra.run.dir={tmp_path}"], heavy=REPLAY_AND_LOSSES),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert message in result.stdout + result.stderr, result.stderr[-2000:]
    imported = json.loads(result.stdout.rsplit("HEAVY=", 1)[1])
    assert imported == []


def test_an_unwritable_run_directory_is_one_line_and_exit_status_1(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    result = run_train(["max_actor_steps=100", f"hydra.run.dir={blocker}/run"], timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"Cannot write the run directory {blocker}/run (hydra.run.dir): {blocker} is not a directory"
    )
    assert "Traceback" not in result.stdout + result.stderr
    sweep = run_train(["-m", "seed=0,1", f"hydra.sweep.dir={blocker}/sweep"], timeout=120)
    assert sweep.returncode == 1 and sweep.stderr.strip().startswith(f"Cannot write the run directory {blocker}/sweep")


def test_run_directory_check_leaves_nothing_and_skips_commands_that_run_nothing(tmp_path):
    target = tmp_path / "runs" / "one"
    assert run_directory_error([f"hydra.run.dir={target}"]) is None
    assert os.listdir(tmp_path) == []  # Its probe is gone; Hydra makes the directory.
    assert run_directory_error([f"hydra.run.dir={os.path.dirname(tmp_path)}/no_such_dir/run"]) is None
    assert run_directory_error(["-m", "hydra.sweep.dir=/proc/sweep"]).startswith(
        "Cannot write the run directory /proc/sweep (hydra.sweep.dir): "
    )
    blocked = tmp_path / "f"
    blocked.write_text("")
    assert run_directory_error([f"hydra.run.dir={blocked}/x", "--help"]) is None
    assert run_directory_error(["--cfg", "job", f"hydra.run.dir={blocked}/x"]) is None
    # Up to the first interpolation, which only Hydra resolves.
    assert run_directory_error([f"hydra.run.dir={blocked}/" + "${now:%H}"]) is not None
    assert run_directory_error([f"hydra.run.dir={tmp_path}/out/" + "${now:%H}"]) is None
