"""The replica layer below the compiled launchers (rl/experiments/replicas.py): one failure policy on both. A
non-finite learner metric in one replica of a two-replica run ends that replica alone, its summary says why, and
the other trains to the end, under launcher=anakin and under launcher=sebulba.

The fault is put in where the nodes hand a replica's metrics to the layer (a real run's metrics with one more,
non-finite for replica 1 alone): the replicas of one run share their hyperparameters, so no setting makes one of
them diverge alone."""

from __future__ import annotations

import dataclasses
import math
import os

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from conftest import ROOT, SMALL_PQN, read_summary
from rl.experiments.make_experiment import make_experiment

CONF = os.path.join(ROOT, "conf")

RUNS = {
    "anakin": [*SMALL_PQN, "max_actor_steps=512", "launcher.num_seeds=2"],
    "sebulba": [
        "experiment=ppo_cartpole",
        "launcher=sebulba",
        "launcher.num_seeds=2",
        "environment.num_envs=2",
        "max_actor_steps=1024",
        "eval_every=512",
        "eval_episodes=2",
    ],
}


def poisoned(metrics: dict) -> dict:
    """`metrics` with a `probe` that is non-finite for replica 1 alone (rows: replicas, padding included)."""
    replicas = len(np.asarray(metrics["learner_steps"]))
    return {**metrics, "probe": np.where(np.arange(replicas) == 1, np.nan, 0.0)}


def poison(launcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if launcher == "anakin":
        from rl.anakin.driver import AnakinNodes

        write = AnakinNodes._write_chunk_records
        monkeypatch.setattr(AnakinNodes, "_write_chunk_records", lambda self, m, rate: write(self, poisoned(m), rate))
    else:
        from rl.sebulba.nodes import SebulbaNodes

        write = SebulbaNodes.write_records
        replaced = lambda update: dataclasses.replace(update, metrics=poisoned(jax.device_get(update.metrics)))
        monkeypatch.setattr(SebulbaNodes, "write_records", lambda self, update: write(self, replaced(update)))


@pytest.mark.current  # The compiled launchers, the same on both stacks: the current part runs it.
@pytest.mark.parametrize("launcher", sorted(RUNS))
def test_a_non_finite_metric_ends_its_replica_alone(launcher, tmp_path, monkeypatch):
    poison(launcher, monkeypatch)
    overrides = [*RUNS[launcher], "logger=csv", "progress=false", "checkpoint.enabled=false", "seed=3"]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        config = compose(config_name="config", overrides=overrides)
    experiment, run = make_experiment(config, str(tmp_path), {"agent": config.agent._target_.split(".")[-2]})
    summary = run(experiment)
    assert summary.status == "finished"
    healthy, failed = (read_summary(str(tmp_path / f"seed_{replica}")) for replica in range(2))
    assert healthy["status"] == "finished" and "failure" not in healthy
    assert healthy["actor_steps"] == experiment.max_actor_steps and math.isfinite(healthy["final_eval_return"])
    assert failed["status"] == "failed" and failed["failure"].startswith("non-finite probe in the updates")
    assert failed["actor_steps"] < experiment.max_actor_steps  # Ended at its first update's records.
    statuses = [replica["status"] for replica in read_summary(str(tmp_path))["replicas"]]
    assert statuses == ["finished", "failed"]
