"""benchmarks/side_by_side_returns.py: each seed's return at the budget asked, from our run directories and
Stable-Baselines3's result files, and the table over seeds."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.side_by_side_returns import our_return, sb3_return, table


def _our_run(directory, seed: int, returns: dict[int, float]) -> str:
    os.makedirs(directory / "logs")
    (directory / "summary.json").write_text(json.dumps({"seed": seed}))
    rows = ["actor_steps,evaluator_id,episode_return"] + [f"{steps},0,{value}" for steps, value in returns.items()]
    (directory / "logs" / "evaluator.csv").write_text("\n".join(rows) + "\n")
    return str(directory)


def _sb3_run(path, seed: int, returns: dict[int, float], final: float) -> str:
    evals = [{"steps": steps, "mean": value, "std": 1.0} for steps, value in returns.items()]
    path.write_text(json.dumps({"result": {"seed": seed, "final_eval": {"steps": 200, "mean": final}}, "evals": evals}))
    return str(path)


def test_each_side_gives_its_return_at_the_budget_and_refuses_a_run_without_one(tmp_path):
    ours = _our_run(tmp_path / "ours", 3, {100: 1.5, 200: 7.25})
    theirs = _sb3_run(tmp_path / "sb3.json", 4, {100: 2.0, 200: 5.0}, final=99.0)
    assert our_return(ours, 200) == (3, 7.25)
    assert sb3_return(theirs, 200) == (4, 5.0)  # The curve's point, not the second evaluation after training.
    with pytest.raises(ValueError, match="no evaluation at 300"):
        our_return(ours, 300)
    with pytest.raises(ValueError, match="no evaluation at 300"):
        sb3_return(theirs, 300)


def test_the_table_lists_seeds_in_order_with_iqm_and_mean():
    lines = table({"ours": [(1, 20.0), (0, 10.0), (2, 30.0), (3, 40.0)]})
    assert lines[0].startswith("| implementation | seeds | per seed | IQM")
    row = lines[2].split(" | ")
    assert row[1:3] == ["0, 1, 2, 3", "10.0, 20.0, 30.0, 40.0"]
    assert row[3].startswith("25.0 [") and row[4].startswith("25.0 [")  # IQM of 4: the middle two's mean.
