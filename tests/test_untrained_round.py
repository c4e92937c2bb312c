"""Every fresh run's curve starts with a round of the untrained policy at actor step 0 (rl/experiments/lifecycle.py):
its first evaluation row is at 0, no hook is told of that round (a pruner, an early stop or PBT's exchange on an
untrained policy means nothing), and a resumed run never evaluates at 0 again. Summaries treat it as a point on the
curve; the final return stays the last round's."""

from __future__ import annotations

import csv
import dataclasses
import os
import signal

import pytest
from hydra import compose, initialize_config_dir

import conftest
from conftest import ROOT, read_summary
from rl.experiments.hooks import RunHook
from rl.experiments.lifecycle import told_to_hooks
from rl.experiments.make_experiment import make_experiment
from rl.experiments.summary import curve_statistics, first_reaching

CONF = os.path.join(ROOT, "conf")

# PQN on gymnax CartPole: 4 copies x 16 steps an update, 2 updates a chunk of 128 steps, a round every chunk.
SMALL_PQN = [
    *conftest.SMALL_PQN,
    "max_actor_steps=512",
    "seed=3",
    "logger=csv",
    "progress=false",
    "checkpoint.enabled=true",
    "checkpoint.keep=1",
]
ROUNDS = [0, 128, 256, 384, 512]


class RoundsHeard(RunHook):
    """The actor steps of every evaluation round the run tells this hook of."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def after_evaluation(self, actor_steps: int, mean_return: float) -> bool:
        self.steps.append(int(actor_steps))
        return False


def _evaluated_steps(run_dir: str) -> list[int]:
    with open(os.path.join(run_dir, "logs", "evaluator.csv"), newline="") as file:
        return [int(row["actor_steps"]) for row in csv.DictReader(file)]


def _launch_as_train_does(run_dir: str, hook: RunHook, overrides: list[str] = SMALL_PQN):
    """compose, prepare_run, apply_plan, launch (rl/train.py's steps, in this process), with `hook` told the rounds."""
    from rl.experiments.resume import apply_plan, prepare_run

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, launcher = make_experiment(config, run_dir, {"agent": "pqn"})
    plan = prepare_run(experiment, config, run_dir, learner_template=launcher.checkpoint_template)
    return launcher(dataclasses.replace(apply_plan(plan, experiment), hooks=(hook,)))


def test_only_the_round_at_step_0_is_kept_from_the_hooks():
    assert not told_to_hooks(0)
    assert told_to_hooks(1) and told_to_hooks(128)


def test_summaries_take_the_untrained_round_as_a_point_on_the_curve_but_not_as_a_final_result():
    curve = [(0, 20.0), (100, 60.0), (200, 100.0)]
    last_mean, area = curve_statistics(curve)
    assert last_mean == 80.0  # The trained rounds only ...
    assert area == pytest.approx((100 * 40.0 + 100 * 80.0) / 200)  # ... the area from step 0.
    assert curve_statistics([(0, 20.0)]) == (20.0, 20.0)  # The only round: what there is.
    assert first_reaching(15.0, curve, [1.0, 2.0, 3.0]) == (1.0, 0)  # Reached untrained: at step 0.


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_fresh_run_evaluates_at_0_untold_and_its_resumption_never_again(tmp_path, monkeypatch):
    """A run stopped by SIGTERM after its first chunk has evaluated at 0 and 128 and told its hook of 128 only;
    resumed, it evaluates from 256 on, and its curve holds step 0 once."""
    from rl.anakin import driver
    from rl.experiments.signals import RunInterrupted

    run_dir = str(tmp_path / "run")
    write = driver.AnakinNodes._write_chunk_records

    def write_then_stop(*args, **kwargs):
        write(*args, **kwargs)
        monkeypatch.undo()  # Once: the first chunk's records written, the launcher's stop request catches it.
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(driver.AnakinNodes, "_write_chunk_records", write_then_stop)
    first = RoundsHeard()
    with pytest.raises(RunInterrupted):
        _launch_as_train_does(run_dir, first)
    assert _evaluated_steps(run_dir) == [0, 128]
    assert first.steps == [128]

    resumed = RoundsHeard()
    summary = _launch_as_train_does(run_dir, resumed)
    assert summary.status == "finished" and resumed.steps == ROUNDS[2:]
    assert _evaluated_steps(run_dir) == ROUNDS
    assert [steps for steps, _ in read_summary(run_dir)["eval_returns"]] == ROUNDS
    assert summary.final_eval_return == summary.eval_returns[-1][1]


@pytest.mark.current
def test_each_replicas_hooks_never_hear_of_step_0(tmp_path):
    """Two replicas in one program, each with its own hook (a grid job's pruner or live line): both replicas'
    records start at 0, the hooks hear of every later round."""
    from rl.anakin.driver import AnakinNodes
    from rl.experiments.replica_plan import ReplicaPlan
    from rl.experiments import lifecycle

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=[*SMALL_PQN, "checkpoint.enabled=false"])
    experiment, launcher = make_experiment(config, str(tmp_path), {"agent": "pqn"})
    heard = [RoundsHeard(), RoundsHeard()]
    plan = ReplicaPlan(2, replica_hooks=((heard[0],), (heard[1],)))
    nodes = AnakinNodes(launcher.check_experiment(experiment), plan)
    summary = lifecycle.run(lifecycle.RunContext.make(experiment), nodes)
    assert summary.status == "finished"
    for replica in range(2):
        assert heard[replica].steps == ROUNDS[1:]
        assert _evaluated_steps(os.path.join(tmp_path, f"seed_{replica}")) == ROUNDS
    assert _evaluated_steps(str(tmp_path)) == ROUNDS  # The replicas' mean.
