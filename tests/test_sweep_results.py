"""rl/sweeps/results.py: a sweep ranks settings by their mean over seeds."""

from __future__ import annotations

import pytest

from rl.sweeps.report import launcher_overrides, program_as_typed
from rl.sweeps.results import CommandLine, Trial, best_line, rank_settings, seed_of

# The best single job (lr=1e-3, seed=0: 500) is not in the best setting (lr=3e-4: mean 449.9).
SWEEP = [
    Trial("0", ("agent.learning_rate=0.001", "seed=0"), 500.0),
    Trial("1", ("agent.learning_rate=0.001", "seed=1"), 289.6),
    Trial("2", ("agent.learning_rate=0.0003", "seed=0"), 420.0),
    Trial("3", ("agent.learning_rate=0.0003", "seed=1"), 479.8),
    Trial("4", ("agent.learning_rate=0.0001", "seed=0"), None),  # Failed or pruned: not scored.
]


def test_settings_are_ranked_by_their_mean_over_seeds():
    best, second = rank_settings(SWEEP)
    assert best.overrides == ("agent.learning_rate=0.0003",) and best.mean == pytest.approx(449.9)
    assert best.describe() == {
        "overrides": ["agent.learning_rate=0.0003"],
        "mean": pytest.approx(449.9),
        "min": 420.0,
        "max": 479.8,
        "count": 2,
        "jobs": {"2": 420.0, "3": 479.8},
        "command": "python scripts/train.py -m agent.learning_rate=0.0003 seed=0,1",
    }
    assert second.overrides == ("agent.learning_rate=0.001",) and second.mean == pytest.approx(394.8)
    assert best_line([best, second], 4) == (
        "Best of 2 settings (4 jobs): mean 449.9 over 2 seeds (min 420.0, max 479.8): "
        "python scripts/train.py -m agent.learning_rate=0.0003 seed=0,1"
    )


def test_minimising_puts_the_lowest_mean_first():
    assert rank_settings(SWEEP, maximize=False)[0].overrides == ("agent.learning_rate=0.001",)


def test_one_seed_per_setting_ranks_jobs_as_before():
    trials = [Trial("0", ("agent.learning_rate=0.001",), 300.0), Trial("1", ("agent.learning_rate=0.01",), 310.0)]
    settings = rank_settings(trials)
    assert [setting.overrides for setting in settings] == [
        ("agent.learning_rate=0.01",),
        ("agent.learning_rate=0.001",),
    ]
    assert best_line(settings, 2) == "Best of 2 jobs: 1 (310.0): python scripts/train.py agent.learning_rate=0.01"


def test_seeds_given_in_any_override_form_are_one_setting():
    trials = [Trial("0", ("a=1", "seed=3"), 1.0), Trial("1", ("++seed=4", "a=1"), 3.0), Trial("2", ("a=1",), 5.0)]
    (setting,) = rank_settings(trials)
    assert setting.mean == 3.0 and seed_of(trials[1].overrides) == "4" and seed_of(trials[2].overrides) is None


@pytest.mark.parametrize(
    "orig_argv, program",
    [
        (["/venv/bin/python", "/venv/bin/rl-train", "-m", "seed=0,1"], "rl-train"),
        (["python3", "-m", "rl.train", "-m", "seed=0,1"], "python -m rl.train"),
        (["python", "scripts/train.py", "-m", "seed=0,1"], "python scripts/train.py"),
        (["python", "-X", "dev", "scripts/train.py"], "python scripts/train.py"),
        (["python", "-c", "..."], "python scripts/train.py"),  # Cannot tell: the documented command.
    ],
)
def test_the_printed_commands_start_with_the_program_as_it_was_typed(orig_argv, program):
    assert program_as_typed(orig_argv) == program


def test_a_sweeps_launcher_comes_with_the_best_setting_over_its_seeds_not_with_a_single_job():
    launcher = launcher_overrides(
        ["hydra.sweep.dir=/tmp/s", "hydra/launcher=anakin_grid", "hydra.launcher.engine=local", "hydra/sweeper=pbt"]
    )
    assert launcher == ("hydra/launcher=anakin_grid", "hydra.launcher.engine=local")
    command_line = CommandLine("rl-train", launcher)
    best, _ = rank_settings(SWEEP)
    assert best.command(command_line) == (
        "rl-train -m hydra/launcher=anakin_grid hydra.launcher.engine=local agent.learning_rate=0.0003 seed=0,1"
    )
    single = rank_settings([Trial("0", ("agent.learning_rate=0.01", "seed=3"), 1.0)])
    assert best_line(single, 1, command_line=command_line) == (
        "Best of 1 jobs: 0 (1.0): rl-train agent.learning_rate=0.01 seed=3"
    )
