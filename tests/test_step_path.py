"""docs/architecture.md's list of the files one DQN step passes through, checked against a
real run: a tiny `dqn` run under `launcher=local` records the repository files with a frame
on the Python stack where its learning is made (`make_learning`), where the learner's thread
is started, where the learner takes a batch (`__next__`) and where the SGD update runs the
loss (`double_q_loss`, traced by jit on the first update)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILES = 8  # Issue 21: at most 8 files from scripts/train.py to the SGD update.

TRACER = r"""
import json, os, runpy, sys, threading
import pytest

root, output = os.environ["STEP_PATH_ROOT"], os.environ["STEP_PATH_OUTPUT"]
records, started = {}, {}

def stack_files(frame):
    files = []
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(root + os.sep) and os.sep + ".venv" + os.sep not in name:
            relative = os.path.relpath(name, root)
            if relative not in files:
                files.append(relative)
        frame = frame.f_back
    return files

def record(kind, files):
    records.setdefault(kind, [])
    records[kind] = sorted(set(records[kind]) | set(files))
    with open(output, "w") as file:
        json.dump(records, file)

thread_start = threading.Thread.start
def start(self):
    started[self] = stack_files(sys._getframe(1))
    if self.name == "learner":  # What the main thread does from here on is not traced.
        sys.setprofile(None)
    return thread_start(self)
threading.Thread.start = start

def profile(frame, event, arg):
    if event != "call":
        return
    thread = threading.current_thread()
    if thread is not threading.main_thread() and thread.name != "learner":
        sys.setprofile(None)  # Only the main and the learner's threads are traced.
        return
    code = frame.f_code
    if not code.co_filename.startswith(os.path.join(root, "rl")):
        return
    if code.co_name == "make_learning":
        record("make_learning", stack_files(frame))
    elif code.co_name == "__next__" and thread.name == "learner":
        record("next", stack_files(frame))
    elif code.co_name == "double_q_loss":
        record("loss", stack_files(frame))
        record("thread_start", started.get(thread, ["<main thread>"]))
        sys.setprofile(None)

sys.setprofile(profile)
threading.setprofile(profile)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def documented_files() -> list[str]:
    """The files in docs/architecture.md's "One DQN step" list (`path` items)."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as file:
        text = file.read()
    section = text.split("### One DQN step", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\d+\. `([^`]+\.py)`", section, flags=re.M)


def test_the_documented_dqn_step_path_is_the_run_s(tmp_path):
    tracer, output = tmp_path / "tracer.py", tmp_path / "path.json"
    tracer.write_text(TRACER)
    env = {**os.environ, "STEP_PATH_ROOT": ROOT, "STEP_PATH_OUTPUT": str(output)}
    command = [
        sys.executable,
        str(tracer),
        os.path.join(ROOT, "scripts", "train.py"),
        "agent=dqn",
        "agent.min_replay_size=100",
        "network.hidden_sizes=[16]",
        "max_actor_steps=300",
        "eval_every=300",
        "eval_episodes=1",
        "logger=csv",
        "progress=false",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-2000:]
    records = json.loads(output.read_text())
    assert set(records) == {"make_learning", "next", "loss", "thread_start"}, records
    traced = sorted(set().union(*records.values()))
    assert traced[0] != "<main thread>"
    assert sorted(documented_files()) == traced
    assert len(traced) <= MAX_FILES
