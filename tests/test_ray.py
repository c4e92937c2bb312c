"""launcher=ray: real Ray processes for replay, counter, learner, actors and evaluator."""

import ast
import contextlib
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
import yaml

from conftest import ROOT, TRAIN, read_summary

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb


def _rows(path):
    with open(path) as file:
        return list(csv.DictReader(file))


def _start_train(overrides, run_dir):
    """scripts/train.py in a fresh process; a thread notes every process it starts (Ray's
    daemons and workers) while it runs, for `_processes_left`."""
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen(
        [sys.executable, TRAIN, *overrides, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    process.started = set()  # (pid, create time) of each descendant seen.

    def watch():
        while process.poll() is None:
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                with contextlib.suppress(psutil.Error):
                    process.started.add((child.pid, child.create_time()))
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()
    return process


def _train(overrides, run_dir, timeout):
    """scripts/train.py to its end: the process and its output."""
    process = _start_train(overrides, run_dir)
    try:
        output, _ = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    return process, output


def _processes_left(process, pids=(), seconds=15):
    """What is left, after `seconds` to exit, of what the run of `process` started: every
    process it was seen to start, its Ray daemons (their session is named after its pid)
    and the given node pids. Other processes on the machine (other Ray runs) do not count."""
    session = re.compile(rf"session_[0-9_-]+_{process.pid}\b")
    deadline = time.monotonic() + seconds
    while True:
        left = []
        for other in psutil.process_iter(["pid", "cmdline", "create_time"]):
            info = other.info
            command = " ".join(info["cmdline"] or [])
            started = (info["pid"], info["create_time"]) in process.started
            if started or info["pid"] in pids or session.search(command):
                left.append(command or str(info["pid"]))
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def _wait_for(predicate, timeout, process):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if process.poll() is not None:
            return False
        time.sleep(1.0)
    return False


def _actor_1_has_acted(run_dir):
    """Actor 1 writes no episode records (only actor 0 does) and its steps show only in
    the counts; by the first evaluation (2,500 steps of both) it has counted some even
    when it started much later than actor 0 on a busy machine."""
    path = os.path.join(run_dir, "logs", "actor.csv")
    evaluated = os.path.exists(os.path.join(run_dir, "logs", "evaluator.csv"))
    return evaluated and os.path.exists(path) and len(_rows(path)) >= 10


def _budget(run_dir):
    with open(os.path.join(run_dir, ".hydra", "config.yaml")) as file:
        return yaml.safe_load(file)["max_actor_steps"]


_BUDGET_EVENT = re.compile(r"step budget: (\d+) actor steps counted of (\d+); per actor (\{.*\}); restarts (\{.*\})$")


def _budget_event(run_dir):
    """The launcher's account of the step budget: counted steps, per actor, restarts."""
    events = [row["event"] for row in _rows(os.path.join(run_dir, "logs", "launcher.csv"))]
    matches = [_BUDGET_EVENT.match(event) for event in events if event.startswith("step budget")]
    assert len(matches) == 1 and matches[0], events  # No "MISMATCH" suffix either.
    counted, total, per_actor, restarts = matches[0].groups()
    return int(counted), int(total), ast.literal_eval(per_actor), ast.literal_eval(restarts)


def _check_solved_run(run_dir, output, restarts):
    budget = _budget(run_dir)
    summary = read_summary(run_dir)
    assert summary["final_eval_return"] >= 475, (summary, output[-3000:])
    assert summary["actor_steps"] == budget, summary  # Exactly the budget, faults or not.
    counted, total, per_actor, actor_restarts = _budget_event(run_dir)
    assert counted == total == budget and sum(per_actor.values()) == budget and set(per_actor) == {0, 1}
    assert actor_restarts == restarts
    actor_ids = {row["actor_id"] for row in _rows(os.path.join(run_dir, "logs", "actor.csv"))}
    assert actor_ids == {"0"}  # Acme's rule: only actor 0 writes episode records; both count (above).
    evaluations = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    steps = [int(row["actor_steps"]) for row in evaluations]
    assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] == budget  # The final round sits at the budget.
    assert float(evaluations[-1]["episode_return"]) == pytest.approx(summary["final_eval_return"])


@pytest.mark.slow
def test_ray_run_with_its_replay_learner_and_an_actor_killed_still_solves_cartpole(run_dir):
    """The end-to-end distributed run of the tuned preset, two actors: its replay node's
    process is killed after the first checkpoint, then its learner's and actor 1's; each
    is restarted (replay from its checkpoint, learner from its last checkpoint, actor
    with a fresh key) and the run still solves CartPole within exactly its budget. (The
    default suite meets the same faults in the shorter fault run below.)"""
    process = _start_train(
        [
            "experiment=dqn_cartpole",
            "launcher=ray",
            "launcher.num_actors=2",
            "seed=0",
            "progress=false",
            "checkpoint.every_seconds=5",
            "checkpoint.replay=true",
        ],
        run_dir,
    )
    died = lambda *names: lambda: {row["event"].split(" died")[0] for row in _launcher_events(run_dir)} >= set(names)
    try:
        # A checkpoint whose replay holds items (the one written as the run starts holds none).
        filled = lambda: any(s["counts"].get("actor_steps", 0) >= 100 for s in _checkpoint_states(run_dir).values())
        assert _wait_for(filled, 600, process), process.communicate()[0][-3000:]
        with open(os.path.join(run_dir, "logs", "nodes.json")) as file:
            pids = json.load(file)
        os.kill(pids["replay"], signal.SIGKILL)
        assert _wait_for(died("replay"), 300, process), process.communicate()[0][-3000:]
        before = set(_checkpoint_states(run_dir))
        assert _wait_for(lambda: set(_checkpoint_states(run_dir)) - before, 300, process), process.communicate()[0][
            -3000:
        ]
        os.kill(pids["learner"], signal.SIGKILL)
        os.kill(pids["actor_1"], signal.SIGKILL)
        assert _wait_for(died("replay", "learner", "actor 1"), 300, process), process.communicate()[0][-3000:]
        output, _ = process.communicate(timeout=1800)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output[-3000:]
    _check_solved_run(run_dir, output, restarts={0: 0, 1: 1})
    events = [row["event"] for row in _launcher_events(run_dir)]
    killed = [event.split(" died")[0] for event in events if " died; " in event]
    assert killed[0] == "replay" and sorted(killed[1:]) == ["actor 1", "learner"], events
    assert _REPLAY_RESTART.match(next(e for e in events if e.startswith("replay died"))), events
    assert _LEARNER_RESTART.match(next(e for e in events if e.startswith("learner died"))), events
    assert _ACTOR_RESTART.match(next(e for e in events if e.startswith("actor 1 died"))), events
    counts = [int(row["actor_steps"]) for row in _rows(os.path.join(run_dir, "logs", "actor.csv"))]
    assert counts == sorted(counts), "actor 0's records reach the driver in order"
    assert not _processes_left(process, set(pids.values())), "processes left behind after the run"


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["launcher.num_actors=0"], "num_actors"),
        (["launcher.num_actors=two"], "launcher.num_actors"),
        (["launcher.address=ray://127.0.0.1:1", "launcher.connect_timeout_s=2"], "launcher.address"),
        (["launcher.address=not an address"], "address"),
        (["launcher.actor_resources={actor_host: -1}"], "actor_resources.actor_host must be a number > 0"),
        (["launcher.max_replay_restarts=-1"], "max_replay_restarts must be >= 0"),
    ],
)
def test_ray_bad_input_fails_fast_with_a_clear_message(overrides, key, tmp_path):
    process, output = _train(["launcher=ray", *overrides], tmp_path, timeout=180)
    assert process.returncode != 0
    assert key in output and "Traceback" not in output, output[-3000:]
    assert not _processes_left(process)


def test_sac_runs_under_ray_with_action_statistics(run_dir):
    """A continuous agent runs unchanged under launcher=ray (a few hundred steps); the
    action statistics observer reports in actor 0's and the evaluator's records."""
    process, output = _train(
        [
            "experiment=sac_pendulum",
            "observers=[action_stats]",
            "launcher=ray",
            "launcher.num_actors=2",
            # Episodes of 50 steps: actor 0 ends some within any lease it gets (100 steps),
            # however late it starts beside actor 1 on a busy machine.
            "environment.max_episode_steps=50",
            "max_actor_steps=600",
            "eval_every=200",
            "eval_episodes=1",
            "agent.min_replay_size=200",
            "progress=false",
        ],
        run_dir,
        timeout=900,
    )
    assert process.returncode == 0, output[-3000:]
    # Only our own lines: no Ray notice or warning (token authentication stays on, silently).
    assert "WARNING" not in output and "Token authentication" not in output, output[-3000:]
    summary = read_summary(run_dir)
    assert summary["agent"] == "sac" and summary["actor_steps"] == 600 and summary["learner_steps"] > 0
    counted, total, per_actor, restarts = _budget_event(run_dir)
    assert counted == total == 600 and sum(per_actor.values()) == 600 and restarts == {0: 0, 1: 0}
    assert per_actor[0] > 0 and per_actor[1] > 0  # Both actors acted and counted ...
    actor_rows = _rows(os.path.join(run_dir, "logs", "actor.csv"))
    assert {row["actor_id"] for row in actor_rows} == {"0"}  # ... only actor 0 wrote episode records,
    # ... and summary.json has every actor's steps and episodes (episodes of 50 steps, none cut short).
    assert summary["actors"] == {str(a): {"actor_steps": per_actor[a], "episodes": per_actor[a] // 50} for a in (0, 1)}
    assert summary["episodes"] == sum(actor["episodes"] for actor in summary["actors"].values())
    evaluator_rows = _rows(os.path.join(run_dir, "logs", "evaluator.csv"))
    # Audit: evaluations landed wherever the count was when the driver looked (4,748,
    # 6,140, ...); actors now wait at each point, so rounds sit where a local run's do.
    assert [point[0] for point in summary["eval_returns"]] == [0, 200, 400, 600]
    assert [int(row["actor_steps"]) for row in evaluator_rows] == [0, 200, 400, 600]
    for row in actor_rows + evaluator_rows:  # Pendulum's torques lie in [-2, 2].
        assert -2.0 <= float(row["action_min"]) <= float(row["action_mean"]) <= float(row["action_max"]) <= 2.0
        assert float(row["action_std"]) >= 0.0
    assert not _processes_left(process)


# --------------------------------------------------------------------------- faults and resume

FAULT_BUDGET = 6000
FAULT_COMMAND = [
    "launcher=ray",
    "launcher.num_actors=2",
    f"max_actor_steps={FAULT_BUDGET}",
    f"eval_every={FAULT_BUDGET // 2}",
    "eval_episodes=1",
    "agent.min_replay_size=100",
    # 4 learner steps per actor step: the actors go at a quarter of the learner's pace, so the faults below are all
    # injected well before the budget (about 1,800 of 6,000 steps on an idle machine; at the default ratio a quiet
    # machine spent the whole budget before the learner's restart was seen).
    "agent.samples_per_insert=512",
    "network.hidden_sizes=[64,64]",
    "progress=false",
    "checkpoint.every_seconds=2",
    "checkpoint.keep=100",  # Every checkpoint stays, for the checks below.
    "checkpoint.replay=true",  # A restarted replay node starts from the newest one.
]
_REPLAY_RESTART = re.compile(
    r"replay died; restarted by Ray as pid (\d+) \(1/3\) at ([\d.]+:\d+), restored from"
    r" checkpoints/(step_\d+)/files/replay, holding (\d+) items$"
)
_LEARNER_RESTART = re.compile(
    r"learner died; restarted by Ray as pid (\d+) \(1/3\): restored from checkpoint (step_\d+)"
    r" \(state sha256 ([0-9a-f]{12})\) at (\d+) learner steps; it had reported (\d+), so (\d+) learner steps were lost"
    r" \((\d+) of its log rows past them moved to logs/superseded/\)$"
)


def _checkpoint_states(run_dir):
    """{checkpoint name: its state} of every checkpoint of the run."""
    from rl import checkpointing

    return {os.path.basename(p): checkpointing.read_state(p) for p in checkpointing.list_checkpoints(run_dir)}


def _launcher_events(run_dir):
    path = os.path.join(run_dir, "logs", "launcher.csv")
    return _rows(path) if os.path.exists(path) else []


@pytest.fixture(scope="module")
def faulted_ray_run(tmp_path_factory):
    """One small Ray run that meets every fault the launcher must survive: its replay
    node's process is killed (SIGKILL) after the first checkpoint that holds replay items,
    its learner's and actor 1's together after the first checkpoint that follows the replay's restart, the
    run is stopped with SIGTERM after the restored learner's first checkpoint, and the
    same command resumes it to the end. What each session left behind is kept
    for the tests."""
    run_dir = str(tmp_path_factory.mktemp("ray_faults") / "run")
    seen = {"run_dir": run_dir}
    process = _start_train(FAULT_COMMAND, run_dir)
    try:
        # A checkpoint whose replay holds items (the one written as the run starts holds none).
        filled = lambda: any(s["counts"].get("actor_steps", 0) >= 100 for s in _checkpoint_states(run_dir).values())
        assert _wait_for(filled, 600, process), process.communicate()[0][-3000:]
        with open(os.path.join(run_dir, "logs", "nodes.json")) as file:
            seen["pids"] = json.load(file)
        replay = psutil.Process(seen["pids"]["replay"])
        seen["replay_ports"] = {c.laddr.port for c in replay.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        os.kill(seen["pids"]["replay"], signal.SIGKILL)
        replay_back = lambda: any(row["event"].startswith("replay died") for row in _launcher_events(run_dir))
        assert _wait_for(replay_back, 300, process), process.communicate()[0][-3000:]
        before = set(_checkpoint_states(run_dir))
        assert _wait_for(lambda: set(_checkpoint_states(run_dir)) - before, 300, process), process.communicate()[0][
            -3000:
        ]
        # The learner and actor 1 die together: actors wait on the rate limiter while the
        # learner is restored, so actor 0 cannot spend the budget meanwhile.
        os.kill(seen["pids"]["learner"], signal.SIGKILL)
        os.kill(seen["pids"]["actor_1"], signal.SIGKILL)
        restarted = lambda: (
            {row["event"].split(" died")[0] for row in _launcher_events(run_dir)} >= {"learner", "actor 1"}
        )
        assert _wait_for(restarted, 300, process), process.communicate()[0][-3000:]
        before = set(_checkpoint_states(run_dir))
        # A checkpoint of the restored learner, then a clean stop.
        assert _wait_for(lambda: set(_checkpoint_states(run_dir)) - before, 300, process), process.communicate()[0][
            -3000:
        ]
        process.send_signal(signal.SIGTERM)
        seen["sigterm_output"], _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    seen["sigterm_returncode"] = process.returncode
    seen["sigterm_summary"] = read_summary(run_dir)
    seen["sigterm_checkpoints"] = _checkpoint_states(run_dir)
    seen["sigterm_events"] = [row["event"] for row in _launcher_events(run_dir)]
    seen["sigterm_processes_left"] = _processes_left(process, set(seen["pids"].values()))
    with open(os.path.join(run_dir, "logs", "nodes.json")) as file:
        seen["sigterm_pids"] = json.load(file)
    resumed = _start_train(FAULT_COMMAND, run_dir)
    try:
        seen["resume_output"], _ = resumed.communicate(timeout=900)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    seen["resume_returncode"] = resumed.returncode
    with open(os.path.join(run_dir, "logs", "nodes.json")) as file:
        seen["resume_processes_left"] = _processes_left(resumed, set(json.load(file).values()))
    return seen


def _replay_items(replay_checkpoint):
    """Items a reverb checkpoint holds, over all its tables: the records of its (zlib
    compressed) items.tfrecord, each a 12-byte header, the record and a 4-byte CRC."""
    import struct
    import zlib

    with open(os.path.join(replay_checkpoint, "items.tfrecord"), "rb") as file:
        data = file.read()
    try:
        data = zlib.decompress(data)
    except zlib.error:
        pass
    count = offset = 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12 + length + 4
        count += 1
    return count


def test_ray_replay_node_killed_comes_back_on_its_address_with_its_last_checkpoint(faulted_ray_run):
    """The replay node's process dies (SIGKILL); Ray restarts it on the same address with
    the tables of the newest checkpoint written before, writers and the learner's
    dataset reconnect, and the run goes on: the learner keeps learning and the actors
    keep counting."""
    run = faulted_ray_run
    run_dir = run["run_dir"]
    events = [event for event in run["sigterm_events"] if event.startswith("replay died")]
    assert len(events) == 1, run["sigterm_events"]
    match = _REPLAY_RESTART.match(events[0])
    assert match, events[0]
    pid, address, checkpoint, items = int(match.group(1)), match.group(2), match.group(3), int(match.group(4))
    assert pid == run["sigterm_pids"]["replay"] != run["pids"]["replay"]
    assert int(address.rsplit(":", 1)[1]) in run["replay_ports"]  # Where it listened before it died.
    event = next(row for row in _rows(os.path.join(run_dir, "logs", "launcher.csv")) if row["event"] == events[0])
    event_time = float(event["wall_time_s"])
    states = run["sigterm_checkpoints"]
    # The newest checkpoint on disk when it restarted (one being written then, waiting
    # for the replay node to checkpoint, is finished after it).
    written = {name: os.path.getmtime(os.path.join(run_dir, "checkpoints", name, "state")) for name in states}
    earlier = [name for name in states if written[name] < float(event["time"])]
    assert checkpoint == max(earlier, key=written.get), (checkpoint, written, event)
    assert items == _replay_items(os.path.join(run_dir, "checkpoints", checkpoint, "files", "replay")) > 0
    # Both sides reconnected: learner steps and actor steps went on after the restart.
    learner_rows = _rows(os.path.join(run_dir, "logs", "learner.csv"))
    before = max(int(row["learner_steps"]) for row in learner_rows if float(row["wall_time_s"]) <= event_time)
    later = [row for row in learner_rows if float(row["wall_time_s"]) > event_time]
    assert later and int(later[-1]["learner_steps"]) > before
    # (The checkpoint written as the run starts has counted no actor steps yet.)
    assert int(later[-1]["actor_steps"]) > int(states[checkpoint]["counts"].get("actor_steps", 0))


def test_ray_learner_killed_is_restored_from_its_last_checkpoint(faulted_ray_run):
    """The learner process dies (SIGKILL); Ray restarts it, the driver restores the last
    checkpoint into it (state and learner steps) and logs it; the run carries on."""
    run = faulted_ray_run
    run_dir, output = run["run_dir"], run["sigterm_output"]
    restarts = [event for event in run["sigterm_events"] if event.startswith("learner died")]
    assert len(restarts) == 1, run["sigterm_events"]
    match = _LEARNER_RESTART.match(restarts[0])
    assert match, restarts[0]
    pid, checkpoint, digest = int(match.group(1)), match.group(2), match.group(3)
    restored_steps, reported, lost = (int(match.group(i)) for i in (4, 5, 6))
    assert pid == run["sigterm_pids"]["learner"] != run["pids"]["learner"]  # nodes.json follows the restart.
    states = run["sigterm_checkpoints"]
    # It restored the newest checkpoint written before the restart, bit for bit.
    event_time = next(
        float(row["wall_time_s"])
        for row in _rows(os.path.join(run_dir, "logs", "launcher.csv"))
        if row["event"] == restarts[0]
    )
    earlier = {name: state for name, state in states.items() if state["wall_time_s"] < event_time}
    newest = max(earlier, key=lambda name: earlier[name]["wall_time_s"])
    assert checkpoint == newest, (checkpoint, sorted(earlier))
    assert digest == states[checkpoint]["learner"]["digest"][:12]
    assert restored_steps == states[checkpoint]["counts"]["learner_steps"]
    assert lost == reported - restored_steps and reported >= restored_steps
    # The restored learner's steps continue from the checkpoint's, not from where it died,
    # and logs/learner.csv holds one curve: the dead learner's rows past the restore
    # point are set aside, exactly those.
    learner_rows = _rows(os.path.join(run_dir, "logs", "learner.csv"))
    after = [int(row["learner_steps"]) for row in learner_rows if float(row["wall_time_s"]) > event_time]
    assert after and after[0] == restored_steps + 1, (restored_steps, after[:5], output[-3000:])
    steps = [int(row["learner_steps"]) for row in learner_rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # (How many depends on when it died; tests/test_loggers.py pins the moving itself.)
    aside = os.path.join(run_dir, "logs", "superseded", "learner.restart1.csv")
    set_aside = _rows(aside) if os.path.exists(aside) else []
    assert len(set_aside) == int(match.group(7))
    # (`reported` is what its counter had sent; its log rows may run a little past it.)
    assert all(int(row["learner_steps"]) > restored_steps for row in set_aside)
    assert all(float(row["wall_time_s"]) < event_time for row in set_aside)


_ACTOR_RESTART = re.compile(
    r"actor 1 died; restarted by Ray as pid (\d+) \(1/3\): restart 1 with a fresh key,"
    r" schedules resumed at step (\d+), (\d+) leased steps returned to the budget$"
)


def test_ray_actor_killed_is_restarted_with_a_fresh_key_its_schedules_and_its_lease(faulted_ray_run):
    """Actor 1's process dies (SIGKILL); Ray rebuilds it with a fresh key (restart 1),
    its schedules resume at the steps it had counted, the uncounted rest of its lease
    returns to the budget, nodes.json names the new process, and the run still ends at
    exactly its budget (checked after the resume, below)."""
    run = faulted_ray_run
    restarts = [event for event in run["sigterm_events"] if event.startswith("actor ")]
    assert len(restarts) == 1, run["sigterm_events"]
    match = _ACTOR_RESTART.match(restarts[0])
    assert match, restarts[0]
    new_pid, resumed_at, reclaimed = (int(group) for group in match.groups())
    assert new_pid == run["sigterm_pids"]["actor_1"] != run["pids"]["actor_1"]
    assert run["sigterm_pids"]["actor_0"] == run["pids"]["actor_0"]  # The other actor went on.
    assert resumed_at > 0  # Its schedules carry on from the steps it had counted, not from 0.
    assert 0 <= reclaimed <= 100  # At most one lease (STEP_LEASE) was left uncounted.


def test_ray_sigterm_writes_a_checkpoint_and_the_same_command_resumes_to_the_budget(faulted_ray_run):
    run = faulted_ray_run
    run_dir, output = run["run_dir"], run["sigterm_output"]
    # SIGTERM: exit 143, one line, an "interrupted" summary and a checkpoint at its counts.
    assert run["sigterm_returncode"] == 143, output[-3000:]
    assert "Traceback" not in output
    summary = run["sigterm_summary"]
    assert summary["status"] == "interrupted"
    states = run["sigterm_checkpoints"]
    last = max(states, key=lambda name: states[name]["wall_time_s"])
    stopped = states[last]
    assert stopped["counts"]["actor_steps"] == summary["actor_steps"] == int(last.split("_")[1])
    assert stopped["counts"]["learner_steps"] == summary["learner_steps"]
    assert 0 < summary["actor_steps"] < FAULT_BUDGET
    path = os.path.join(run_dir, "checkpoints", last)
    last_line = output.strip().splitlines()[-1]
    assert last_line == (
        f"Interrupted: stopped by SIGTERM at {summary['actor_steps']} actor steps; checkpoint {path};"
        " the same command resumes it"
    ), output[-3000:]
    assert not run["sigterm_processes_left"], "processes left behind after the interrupt"

    # The same command resumes from that checkpoint and ends exactly at the budget.
    assert run["resume_returncode"] == 0, run["resume_output"][-3000:]
    assert f"Resuming {run_dir} from {last} ({summary['actor_steps']} actor steps," in run["resume_output"]
    final = read_summary(run_dir)
    assert final["status"] == "finished" and final["actor_steps"] == FAULT_BUDGET
    counted, total, per_actor, _ = _budget_event(run_dir)
    assert counted == total == FAULT_BUDGET and sum(per_actor.values()) == FAULT_BUDGET
    # One evaluation curve: the interrupted run's rounds, then the resumed run's.
    saved_curve = [list(point) for point in stopped["eval_returns"]]
    assert final["eval_returns"][: len(saved_curve)] == saved_curve
    assert final["eval_returns"][-1][0] == FAULT_BUDGET
    steps = [point[0] for point in final["eval_returns"]]
    assert steps == sorted(steps)
    # The resumed learner continues from the checkpoint's learner steps.
    resumed = [
        int(row["learner_steps"])
        for row in _rows(os.path.join(run_dir, "logs", "learner.csv"))
        if float(row["wall_time_s"]) > stopped["wall_time_s"]
    ]
    assert resumed and resumed[0] == stopped["counts"]["learner_steps"] + 1, resumed[:5]
    assert final["learner_steps"] >= resumed[-1]
    assert not run["resume_processes_left"], "processes left behind after the resumed run"


def test_ray_driver_waits_are_bounded_and_an_expired_one_names_the_node_and_call():
    """In-process, no Ray instance: a driver wait that expires is a one-line
    LauncherError naming the node and the call; and no wait in the driver is unbounded."""
    import types

    import ray

    from rl.ray import launcher as ray_launcher
    from rl.experiments.launcher import LauncherError

    run = ray_launcher.RayNodes.__new__(ray_launcher.RayNodes)
    run.launcher = ray_launcher.RayLauncher(call_timeout_s=0.25)
    timeouts = []

    def expired_get(refs, timeout=None):
        timeouts.append(timeout)
        raise ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")

    run.ray = types.SimpleNamespace(get=expired_get, exceptions=ray.exceptions)
    with pytest.raises(LauncherError) as raised:
        run._get(object(), "learner", "checkpoint")
    assert str(raised.value) == "learner.checkpoint did not answer within 0.25 s"
    with pytest.raises(LauncherError) as raised:
        run._get(object(), "evaluator", "evaluate", timeout=7)
    assert str(raised.value) == "evaluator.evaluate did not answer within 7 s"
    assert timeouts == [0.25, 7]

    # Every ray.get and ray.wait the driver makes passes a timeout.
    with open(ray_launcher.__file__) as file:
        tree = ast.parse(file.read())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("get", "wait")
        and ast.unparse(node.func.value) in ("ray", "self.ray")
    ]
    assert len(calls) == 6, [ast.unparse(call) for call in calls]  # The scan sees them all.
    unbounded = [ast.unparse(call) for call in calls if "timeout" not in {k.arg for k in call.keywords}]
    assert unbounded == []


@pytest.fixture
def ray_instance():
    """A small local Ray instance for driver-level tests (no run, no nodes of ours)."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _driver_with_evaluator(ray, evaluator, max_restarts, run_directory):
    """The Ray driver's evaluation round bookkeeping around one evaluator node."""
    import types

    from rl.ray import launcher as ray_launcher

    run = ray_launcher.RayNodes.__new__(ray_launcher.RayNodes)
    run.ray = ray
    run.launcher = ray_launcher.RayLauncher(
        max_restarts=max_restarts, restart_timeout_s=60, call_timeout_s=60, evaluation_timeout_s=120
    )
    events = []
    experiment = types.SimpleNamespace(
        eval_episodes=3,
        run_directory=run_directory,
        logger_factory=lambda label, steps_key, instance: types.SimpleNamespace(write=events.append),
    )
    run.context = types.SimpleNamespace(experiment=experiment)  # What `start` would have been handed.
    run.loggers, run.node_pids = {}, {}
    run.evaluators, run.handles, run.deaths = [evaluator], {"evaluator_0": evaluator}, {}
    return run, events


def test_an_evaluator_that_dies_mid_round_is_restarted_and_plays_its_round_again(ray_instance, tmp_path):
    """The evaluator's process dies during a round (its first incarnation exits inside
    `evaluate`); Ray rebuilds it, the driver counts the restart, logs it with the new pid
    and asks the new incarnation for the same round, whose result joins the curve. One
    past launcher.max_restarts fails the run, naming the setting."""
    from rl.experiments.launcher import LauncherError

    ray = ray_instance
    marker = tmp_path / "died_once"

    @ray.remote(num_cpus=0, max_restarts=1)
    class Evaluator:
        def evaluate(self, episodes):
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(1)
            return (2500, 10.0 * episodes, 1234.5)

        def pid(self):
            return os.getpid()

    evaluator = Evaluator.remote()
    run, events = _driver_with_evaluator(ray, evaluator, max_restarts=1, run_directory=str(tmp_path))
    assert run.evaluate() == (2500, 30.0, 1234.5) and run.evaluations == []
    assert run.deaths == {"evaluator_0": 1}
    (event,) = [row["event"] for row in events]
    match = re.fullmatch(r"evaluator 0 died; restarted by Ray as pid (\d+) \(1/1\): it plays its round again", event)
    assert match, event
    new_pid = int(match.group(1))
    assert new_pid != int(marker.read_text()) and new_pid == ray.get(evaluator.pid.remote(), timeout=60)
    with open(tmp_path / "logs" / "nodes.json") as file:
        assert json.load(file) == {"evaluator_0": new_pid}

    @ray.remote(num_cpus=0, max_restarts=0)
    class DyingEvaluator:
        def evaluate(self, episodes):
            os._exit(1)

    run, events = _driver_with_evaluator(ray, DyingEvaluator.remote(), max_restarts=0, run_directory=str(tmp_path))
    with pytest.raises(LauncherError) as raised:
        run.evaluate()
    assert str(raised.value).startswith("evaluator 0 died more than launcher.max_restarts=0 times (")
    assert events == []


def test_ray_learner_restarts_exhausted_fail_the_run_with_one_line(run_dir):
    """With launcher.max_learner_restarts=0 a dead learner ends the run: exit 1, one
    `Run failed:` line naming the setting, the reason in launcher.csv, a "failed" summary."""
    process = _start_train([*FAULT_COMMAND, "launcher.max_learner_restarts=0"], run_dir)
    try:
        nodes_path = os.path.join(run_dir, "logs", "nodes.json")
        assert _wait_for(lambda: os.path.exists(nodes_path), 600, process), process.communicate()[0][-3000:]
        with open(nodes_path) as file:
            pids = json.load(file)
        os.kill(pids["learner"], signal.SIGKILL)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    last_line = output.strip().splitlines()[-1]
    pattern = r"Run failed: the learner died more than launcher\.max_learner_restarts=0 times \(ActorDiedError: .+\)"
    assert re.fullmatch(pattern, last_line), output[-3000:]
    events = [row["event"] for row in _launcher_events(run_dir)]
    assert events == [f"run failed: {last_line.removeprefix('Run failed: ')}"]
    summary = read_summary(run_dir)
    assert summary["status"] == "failed" and summary["actor_steps"] < FAULT_BUDGET
    assert not _processes_left(process, set(pids.values()))


def _rss_mb(pids):
    """{node: resident memory in MB} of the node processes still alive."""
    sizes = {}
    for node, pid in pids.items():
        try:
            sizes[node] = psutil.Process(pid).memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            pass
    return sizes


@pytest.mark.slow
@pytest.mark.ray
def test_soak_two_actors_memory_has_no_growth_trend(run_dir):
    """A few minutes of a two-actor run once replay is full: no node's resident memory
    grows. A leak of 0.2 MB/s (a few hundred bytes per actor step) would show as 30 MB
    over the 150 s measured; the bound allows a few MB of allocator noise."""
    process = _start_train(
        [
            "launcher=ray",
            "launcher.num_actors=2",
            "max_actor_steps=10000000",
            "eval_every=20000",
            "eval_episodes=2",
            "agent.max_replay_size=5000",
            "network.hidden_sizes=[64,64]",
            "progress=false",
            "checkpoint=false",
        ],
        run_dir,
    )
    try:
        nodes_path = os.path.join(run_dir, "logs", "nodes.json")
        assert _wait_for(lambda: os.path.exists(nodes_path), 600, process), process.communicate()[0][-3000:]
        with open(nodes_path) as file:
            pids = json.load(file)
        time.sleep(60)  # Warm-up: replay fills to its 5,000 items, programs compile, the first rounds run.
        samples = []
        for _ in range(31):  # 150 s, every 5 s.
            assert process.poll() is None, process.communicate()[0][-3000:]
            samples.append(_rss_mb(pids))
            time.sleep(5)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
    growth = {}
    for node in pids:
        series = [sample[node] for sample in samples if node in sample]
        assert len(series) == len(samples), f"{node} died during the soak"
        third = len(series) // 3
        growth[node] = sum(series[-third:]) / third - sum(series[:third]) / third
    print("growth in MB over the soak (mean of the last third - mean of the first):", growth)
    assert all(value < 8.0 for value in growth.values()), growth
