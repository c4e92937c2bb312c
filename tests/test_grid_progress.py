"""What a grid shows while it trains (rl/sweeps/progress.py): one line per setting of a group each evaluation
round, its own return and its jobs', never the mean over replicas of different settings; the same lines read
back from the jobs' records while another machine trains the group (engine=submitit)."""

from __future__ import annotations

import csv
import os

from rl.sweeps.progress import (
    EVALUATOR_RECORD,
    GridSetting,
    RecordsProgress,
    SettingsProgress,
    group_settings,
    setting_label,
    setting_lines,
)

# A group of four jobs (numbers 4-7): two learning rates, two seeds each.
SETTINGS = group_settings(
    [setting_label({"agent.learning_rate": rate}) for rate in (0.0001, 0.0001, 0.001, 0.001)], [4, 5, 6, 7]
)


def test_a_groups_replicas_form_its_settings_in_order():
    assert SETTINGS == [
        GridSetting("agent.learning_rate=0.0001", (0, 1), (4, 5)),
        GridSetting("agent.learning_rate=0.001", (2, 3), (6, 7)),
    ]
    assert setting_label({"agent.learning_rate": 2.5e-4, "agent.entropy_cost": 0.0}) == (
        "agent.learning_rate=0.00025 agent.entropy_cost=0.0"
    )


def test_each_setting_gets_its_own_line_with_its_jobs_returns():
    """Not the mean of the four (38.9): each setting's mean over its seeds, and each job's return."""
    assert setting_lines(256, 512, SETTINGS, {0: 10.0, 1: 9.5, 2: 67.5, 3: 68.75}) == [
        "256/512 actor steps agent.learning_rate=0.0001: eval return 9.8 (jobs 4, 5: 10.0, 9.5)",
        "256/512 actor steps agent.learning_rate=0.001: eval return 68.1 (jobs 6, 7: 67.5, 68.8)",
    ]


def test_a_setting_without_its_failed_replicas_and_a_group_of_seeds_only():
    """A failed or pruned replica is left out of its setting's line; a setting with none left has none; a group
    that batches seeds only is one setting, named by its jobs."""
    assert setting_lines(512, 512, SETTINGS, {1: 9.5}) == [
        "512/512 actor steps agent.learning_rate=0.0001: eval return 9.5 (job 5)"
    ]
    seeds = group_settings(["", ""], [0, 1])
    assert setting_lines(128, 512, seeds, {0: 20.0, 1: float("nan")}) == [
        "128/512 actor steps: eval return 20.0 (jobs 0, 1: 20.0, nan)"
    ]


def test_a_round_is_said_once_every_replica_still_training_has_told_it():
    said: list[str] = []
    progress = SettingsProgress(SETTINGS, 512, said.append)
    hooks = [progress.hook(replica) for replica in range(4)]
    for replica, value in enumerate([1.0, 2.0, 3.0]):
        assert hooks[replica].after_evaluation(128, value) is False  # A hook that never ends the run.
    assert said == []
    hooks[3].after_evaluation(128, 4.0)
    assert said == [
        "128/512 actor steps agent.learning_rate=0.0001: eval return 1.5 (jobs 4, 5: 1.0, 2.0)",
        "128/512 actor steps agent.learning_rate=0.001: eval return 3.5 (jobs 6, 7: 3.0, 4.0)",
    ]
    # Replica 3 fails before the next round: that round is said at the next round's first word, without it.
    for replica in range(3):
        hooks[replica].after_evaluation(256, 10.0)
    assert len(said) == 2
    hooks[0].after_evaluation(384, 20.0)
    assert said[2:] == [
        "256/512 actor steps agent.learning_rate=0.0001: eval return 10.0 (jobs 4, 5: 10.0, 10.0)",
        "256/512 actor steps agent.learning_rate=0.001: eval return 10.0 (job 6)",
    ]
    progress.flush()  # The run ended: what was told is said.
    assert said[4:] == ["384/512 actor steps agent.learning_rate=0.0001: eval return 20.0 (job 4)"]
    progress.flush()
    assert len(said) == 5


def write_round(directory: str, steps: int, value: float) -> None:
    path = os.path.join(directory, EVALUATOR_RECORD)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    new = not os.path.exists(path)
    with open(path, "a", newline="") as file:
        writer = csv.writer(file)
        if new:
            writer.writerow(["actor_steps", "evaluator_id", "episode_return"])
        writer.writerow([steps, 0, value])


def test_a_group_trained_elsewhere_is_watched_through_its_jobs_records(tmp_path):
    """Its jobs write a round one after another: the round is said once all have written it, once; a job two
    rounds behind has stopped and is not waited for; a row cut short is skipped; the group done, the latest is
    said whatever is missing."""
    directories = [str(tmp_path / str(job)) for job in (4, 5, 6, 7)]
    watched = RecordsProgress(SETTINGS, 512, directories)
    assert watched.new_lines() == []  # Nothing written yet.
    for replica in range(3):
        write_round(directories[replica], 128, 1.0 + replica)
    assert watched.new_lines() == []  # Job 7 has not written it yet.
    write_round(directories[3], 128, 4.0)
    with open(os.path.join(directories[3], EVALUATOR_RECORD), "a") as file:
        file.write("256,0")  # A row being written.
    lines = watched.new_lines()
    assert lines[1] == "128/512 actor steps agent.learning_rate=0.001: eval return 3.5 (jobs 6, 7: 3.0, 4.0)"
    assert watched.new_lines() == []  # Said once.
    for steps in (256, 384):  # Job 7 stopped after 128 steps.
        for replica in range(3):
            write_round(directories[replica], steps, 10.0)
    assert watched.new_lines()[1] == "384/512 actor steps agent.learning_rate=0.001: eval return 10.0 (job 6)"
    write_round(directories[0], 512, 30.0)
    assert watched.new_lines() == []  # Jobs 5 and 6 are one round behind: waited for.
    assert watched.new_lines(done=True) == ["512/512 actor steps agent.learning_rate=0.0001: eval return 30.0 (job 4)"]
