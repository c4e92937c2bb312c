"""launcher=ray on a cluster: several Ray nodes on this machine (`ray.cluster_utils`),
joined with `launcher.address`, actors placed by a custom resource, and a node that
stops mid-run.

Slow (-m slow): a cluster of three nodes starts in about 20 s and the run needs all of
them; the single-node faults are covered in tests/test_ray.py.
"""

import csv
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from conftest import ROOT, TRAIN, read_summary

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.reverb]

BUDGET = 6000


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def _raylet_pid(node) -> int:
    from ray._private import ray_constants

    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _host_raylet(pid: int) -> int | None:
    """The raylet a Ray worker process was started by (its node)."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return None


def _nodes(run_dir):
    path = os.path.join(run_dir, "logs", "nodes.json")
    if not os.path.exists(path):
        return {}
    with open(path) as file:
        return json.load(file)


def test_actors_run_on_the_nodes_with_their_resource_and_survive_their_node_stopping(tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4})
    process = None
    try:
        # Room for the two actors (half a CPU each) and nothing else that needs a CPU.
        first = cluster.add_node(num_cpus=1, resources={"actor_host": 2})
        run_dir = str(tmp_path / "run")
        environment = {**os.environ, "WANDB_MODE": "offline", "TF_CPP_MIN_LOG_LEVEL": "2"}
        process = subprocess.Popen(
            [
                sys.executable,
                TRAIN,
                "launcher=ray",
                f"launcher.address={cluster.address}",
                "launcher.num_actors=2",
                "launcher.actor_resources={actor_host: 1}",
                f"max_actor_steps={BUDGET}",
                f"eval_every={BUDGET // 2}",
                "eval_episodes=1",
                "agent.min_replay_size=100",
                "network.hidden_sizes=[64,64]",
                "progress=false",
                "checkpoint=false",
                f"hydra.run.dir={run_dir}",
            ],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        # Both actors are placed on the node with the resource, the others elsewhere.
        deadline = time.monotonic() + 600
        while not os.path.exists(os.path.join(run_dir, "logs", "actor.csv")):
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline
            time.sleep(1)
        placed = _nodes(run_dir)
        hosts = {name: _host_raylet(pid) for name, pid in placed.items()}
        assert hosts["actor_0"] == hosts["actor_1"] == _raylet_pid(first), (hosts, placed)
        head = _raylet_pid(cluster.head_node)
        others = {name: hosts[name] for name in ("replay", "counter", "learner", "evaluator_0")}
        assert set(others.values()) == {head}, (others, head)  # The head node's (see the launcher).

        # A second node with the resource joins, the first one stops: Ray restarts both
        # actors there and the run goes on to its budget.
        second = cluster.add_node(num_cpus=1, resources={"actor_host": 2})
        cluster.remove_node(first, allow_graceful=False)

        def restarted() -> list[str]:
            path = os.path.join(run_dir, "logs", "launcher.csv")
            events = [row["event"] for row in _rows(path)] if os.path.exists(path) else []
            return sorted(event.split(";")[0] for event in events if "died" in event)

        while restarted() != ["actor 0 died", "actor 1 died"]:
            assert process.poll() is None, process.communicate()[0][-3000:]
            assert time.monotonic() < deadline + 600, restarted()
            time.sleep(0.5)
        moved = _nodes(run_dir)
        moved_hosts = {_host_raylet(moved["actor_0"]), _host_raylet(moved["actor_1"])}
        output, _ = process.communicate(timeout=900)
        assert process.returncode == 0, output[-3000:]
        assert restarted() == ["actor 0 died", "actor 1 died"]  # Nothing else died.
        assert {moved["actor_0"], moved["actor_1"]}.isdisjoint({placed["actor_0"], placed["actor_1"]})
        assert moved_hosts == {_raylet_pid(second)}
        summary = read_summary(run_dir)
        assert summary["status"] == "finished" and summary["actor_steps"] == BUDGET
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        cluster.shutdown()
