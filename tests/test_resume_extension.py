"""Extending a finished run through the real entry point (scripts/train.py in a subprocess): a DQN run finished at
its budget, `resume=DIR max_actor_steps=<2x>` is refused in one line until `extend=keep|stretch` says what its
schedules do; then it ends at exactly twice the budget, its evaluation curve the first run's rows followed by the
new ones, its learning rate kept at its end (keep) or risen again (stretch), and `resume=DIR` alone then finds it
finished. The mechanism's unit tests are in tests/test_extension.py."""

from __future__ import annotations

import csv
import os
import shutil

import pytest

from conftest import read_summary, run_train
from test_resume import _fingerprint, _our_lines

# Needs the reverb stack (the local launcher's replay): see pytest.ini.
pytestmark = pytest.mark.reverb

BUDGET = 800
COMMAND = [
    f"max_actor_steps={BUDGET}",
    f"eval_every={BUDGET // 4}",
    "eval_episodes=1",
    "agent.min_replay_size=100",
    "network.hidden_sizes=[64,64]",
    "progress=false",
]
SCHEDULES = "policy.run_steps, agent.learning_rate_decay_actor_steps"


def _rows(run_dir: str, label: str) -> list[dict[str, str]]:
    with open(os.path.join(run_dir, "logs", f"{label}.csv"), newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> str:
    run_dir = str(tmp_path_factory.mktemp("extension") / "finished")
    result = run_train([*COMMAND, f"hydra.run.dir={run_dir}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_summary(run_dir)["status"] == "finished"
    return run_dir


def _extended(finished_run: str, tmp_path, choice: str) -> tuple[str, str]:
    """A copy of the finished run extended to twice its budget with `extend=choice`; its directory and stdout."""
    run_dir = str(tmp_path / choice)
    shutil.copytree(finished_run, run_dir)
    result = run_train([f"resume={run_dir}", f"max_actor_steps={2 * BUDGET}", f"extend={choice}"], timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout


def _continues_the_first_curve(finished_run: str, run_dir: str) -> None:
    summary = read_summary(run_dir)
    assert summary["actor_steps"] == 2 * BUDGET and summary["status"] == "finished"
    first = read_summary(finished_run)["eval_returns"]
    assert summary["eval_returns"][: len(first)] == first
    # The untrained policy's round at 0 once (the extension does not evaluate there again).
    assert [steps for steps, _ in summary["eval_returns"]] == list(range(0, 2 * BUDGET + 1, BUDGET // 4))
    rows = _rows(run_dir, "evaluator")
    first_rows = _rows(finished_run, "evaluator")
    assert rows[: len(first_rows)] == first_rows  # The first run's rows, untouched.
    assert [int(row["actor_steps"]) for row in rows[len(first_rows) :]] == [1000, 1200, 1400, 1600]


def _learning_rates_after(run_dir: str, actor_steps: int) -> list[float]:
    return [float(row["learning_rate"]) for row in _rows(run_dir, "learner") if int(row["actor_steps"]) > actor_steps]


def test_an_extension_without_a_choice_is_refused_in_one_line_naming_both(finished_run, tmp_path):
    before = _fingerprint(finished_run)
    result = run_train([f"resume={finished_run}", f"max_actor_steps={2 * BUDGET}"], timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    assert _our_lines(result.stderr) == [
        f"Invalid configuration: extend: the run in {finished_run} is extended from {BUDGET} to {2 * BUDGET} actor "
        f"steps and {SCHEDULES} follow max_actor_steps: add extend=keep (they keep their horizon, {BUDGET}: the "
        f"schedules stay where they ended) or extend=stretch (they stretch to {2 * BUDGET})"
    ]
    assert _fingerprint(finished_run) == before


def test_keep_extends_a_finished_run_to_twice_its_budget_with_its_schedules_ended(finished_run, tmp_path):
    run_dir, stdout = _extended(finished_run, tmp_path, "keep")
    line = (
        f"Extending the run in {run_dir} from {BUDGET} to {2 * BUDGET} actor steps; its schedules keep their horizon "
        f"(policy.run_steps={BUDGET}, agent.learning_rate_decay_actor_steps={BUDGET}; extend=stretch stretches them)"
    )
    assert stdout.count(line) == 1, stdout[-3000:]
    assert f"Resuming {run_dir} from step_{BUDGET} ({BUDGET} actor steps" in stdout
    _continues_the_first_curve(finished_run, run_dir)
    later = _learning_rates_after(run_dir, BUDGET)
    assert later and max(later) < 1e-9  # Decayed to final_learning_rate_fraction (0) at the first budget: stays.
    again = run_train([f"resume={run_dir}"], timeout=600)  # The extension is the run's own now.
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"The run in {run_dir} has already finished ({2 * BUDGET} actor steps" in again.stdout


def test_stretch_extends_a_finished_run_to_twice_its_budget_with_its_schedules_stretched(finished_run, tmp_path):
    run_dir, stdout = _extended(finished_run, tmp_path, "stretch")
    changes = f"{BUDGET} -> {2 * BUDGET}"
    line = (
        f"Extending the run in {run_dir} from {BUDGET} to {2 * BUDGET} actor steps; its schedules stretch "
        f"(policy.run_steps {changes}, agent.learning_rate_decay_actor_steps {changes}; extend=keep keeps them)"
    )
    assert stdout.count(line) == 1, stdout[-3000:]
    _continues_the_first_curve(finished_run, run_dir)
    later = _learning_rates_after(run_dir, BUDGET)
    assert later and min(later) > 1e-5  # Half-way down a decay that now ends at twice the budget.
