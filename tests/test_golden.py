"""The golden runs (tests/golden_runs.py) reproduce their stored records exactly.

A failure means a change altered results: either a bug, or an intended change whose
records must be regenerated (`python tests/golden_runs.py NAME`) in a commit of its own
that says why.
"""

from __future__ import annotations

import pytest

import golden_runs


def _first_difference(stored, fresh, where="record"):
    """A readable path to the first place two records differ."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for key in sorted(set(stored) | set(fresh)):
            if key not in stored or key not in fresh:
                return f"{where}.{key}: only in {'the fresh run' if key not in stored else 'the stored record'}"
            if stored[key] != fresh[key]:
                return _first_difference(stored[key], fresh[key], f"{where}.{key}")
    if isinstance(stored, list) and isinstance(fresh, list):
        for index, (a, b) in enumerate(zip(stored, fresh)):
            if a != b:
                return _first_difference(a, b, f"{where}[{index}]")
        return f"{where}: {len(stored)} entries stored, {len(fresh)} now"
    return f"{where}: stored {stored!r}, now {fresh!r}"


@pytest.mark.parametrize("name", sorted(golden_runs.RUNS))
def test_golden_run_reproduces_its_stored_record(name, tmp_path):
    stored = golden_runs.load(name)
    assert stored["command"] == golden_runs.RUNS[name], "the command changed: regenerate the record"
    fresh = golden_runs.run(name, str(tmp_path / "run"))
    stored_record = {key: stored[key] for key in fresh}
    assert stored_record == fresh, (
        f"golden run {name} differs: {_first_difference(stored_record, fresh)}; if intended, "
        f"`python tests/golden_runs.py {name}` in a commit that says why"
    )


def test_records_hold_every_log_row_and_a_learner_digest():
    """What the comparison covers: a golden record that lost its rows would pass trivially."""
    for name in golden_runs.RUNS:
        stored = golden_runs.load(name)
        assert stored["summaries"], name
        for path, rows in stored["logs"].items():
            assert rows, (name, path)
            assert not any(golden_runs.is_wall_clock(key) for row in rows for key in row), (name, path)
        evaluator_logs = [path for path in stored["logs"] if path.endswith("evaluator.csv")]
        assert evaluator_logs, name
        for summary_path, summary in stored["summaries"].items():
            assert summary["status"] == "finished", (name, summary_path)
        assert stored["learner_digests"]["summary.json"], name  # The run's checkpoint (all replicas).
