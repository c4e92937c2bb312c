"""Adding an agent as docs/adding_an_agent.md says: QR-DQN (tests/agents/qrdqn.py), with its own defaults, runs
under all four launchers (local, ray, anakin, sebulba) as the page's steps add it to a copy of the project (its
package, its conf/agent file and the README row, the docs test passing only once all three are there), and as a
package of its own outside the project (found through PYTHONPATH and Hydra's search path, editing no file of the
project)."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from test_docs import readme_lists_every_option

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENTS = os.path.join(ROOT, "tests", "agents")
COMMON = [
    "agent=qrdqn",
    f"hydra.searchpath=[file://{AGENTS}/conf]",
    "max_actor_steps=2048",  # Whole updates of every launcher (sebulba's: blocks of 32 steps of one copy).
    "eval_every=1024",
    "eval_episodes=2",
    "logger=csv",
    "progress=false",
]
LAUNCHERS = {
    "local": [],
    "ray": ["launcher=ray", "launcher.num_actors=1"],
    "anakin": ["launcher=anakin", "environment=gymnax", "environment.name=CartPole-v1"],  # One copy: its own defaults.
    "sebulba": ["launcher=sebulba"],  # gymnasium's CartPole-v1 (the default environment) stepped on the host.
}


# What each step of docs/adding_an_agent.md's list writes, in its order, for QR-DQN.
STEPS = ("rl/agents/<name>/__init__.py", "conf/agent/<name>.yaml", "README.md")
PROJECT = ("rl", "conf", "hydra_plugins", "scripts", "README.md")  # What a copy of the project needs to train.


def _train(launcher: str, run_dir: str, project: str = ROOT) -> dict:
    """A short run of QR-DQN: from `project`'s own agents (a copy with the agent added), or else from tests/agents."""
    path = project if project != ROOT else AGENTS
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)}
    common = COMMON if project == ROOT else [option for option in COMMON if not option.startswith("hydra.searchpath")]
    command = [sys.executable, os.path.join(project, "scripts", "train.py"), *common, *LAUNCHERS[launcher]]
    process = subprocess.run(  # From the project's root, as a user runs it (Ray's workers import from there).
        [*command, f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True, timeout=900, cwd=project
    )
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as file:
        return json.load(file)


def _check(summary: dict, run_dir: str) -> None:
    assert summary["status"] == "finished" and summary["agent"] == "qrdqn" and summary["actor_steps"] == 2048
    with open(os.path.join(run_dir, "logs", "learner.csv"), newline="") as file:
        losses = [float(row["quantile_loss"]) for row in csv.DictReader(file) if row.get("quantile_loss")]
    assert losses and all(math.isfinite(loss) for loss in losses)  # The agent's own loss trained.


@pytest.mark.current
def test_an_agent_outside_the_project_runs(tmp_path):
    """The page's last section: the same agent kept in a package of its own (compiled here; the route is
    the same for every launcher)."""
    _check(_train("anakin", str(tmp_path)), str(tmp_path))


def documented_steps() -> list[str]:
    """The file each item of docs/adding_an_agent.md's "Steps" list names first."""
    with open(os.path.join(ROOT, "docs", "adding_an_agent.md")) as file:
        section = file.read().split("## Steps", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)


def add_the_agent_to_a_copy(copy: str) -> None:
    """The page's steps for QR-DQN, in a copy of the project; the docs test fails until the last one."""
    for name in PROJECT:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, os.path.join(copy, name), ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, os.path.join(copy, name))
    package = os.path.join(copy, "rl", "agents", "qrdqn")
    os.makedirs(package)
    shutil.copy(os.path.join(AGENTS, "qrdqn.py"), os.path.join(package, "__init__.py"))  # Step 1.
    shutil.copy(os.path.join(AGENTS, "conf", "agent", "qrdqn.yaml"), os.path.join(copy, "conf", "agent"))  # Step 2.
    assert any("agent row" in line and "'qrdqn'" in line for line in readme_lists_every_option(copy))
    readme = os.path.join(copy, "README.md")  # Step 3: the README row.
    with open(readme) as file:
        text = file.read()
    assert text.count("\n| `agent` | ") == 1
    with open(readme, "w") as file:
        file.write(text.replace("\n| `agent` | ", "\n| `agent` | `qrdqn`, "))
    assert readme_lists_every_option(copy) == []


def test_the_test_takes_the_steps_docs_adding_an_agent_lists():
    assert documented_steps() == list(STEPS)


@pytest.mark.parametrize(
    "launcher",
    [
        pytest.param("local", marks=pytest.mark.reverb),
        pytest.param("ray", marks=[pytest.mark.reverb, pytest.mark.ray]),
        "anakin",
        pytest.param("sebulba", marks=pytest.mark.current),  # The same code on both stacks: run once.
    ],
)
def test_an_agent_added_by_the_documented_steps_runs(tmp_path, launcher):
    copy = str(tmp_path / "project")
    add_the_agent_to_a_copy(copy)
    run_dir = str(tmp_path / "run")
    _check(_train(launcher, run_dir, project=copy), run_dir)
