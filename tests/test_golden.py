"""The golden runs (tests/golden_runs.py) reproduce their stored records exactly.

A failure means a change altered results: either a bug, or an intended change whose
records must be regenerated (`python tests/golden_runs.py NAME`) in a commit of its own
that says why. Records are per machine and stack (XLA's CPU code differs between processor
models and JAX versions); on a machine and stack without one, a run must equal another record
or be reproducible and shaped like the stored ones. The runs of launcher.deterministic=true
need the reverb stack; the compiled ones run on both stacks.
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


def _shape(record):
    """Files, row counts and columns of a record: what does not depend on the machine."""
    logs = {path: [sorted(row) for row in rows] for path, rows in record["logs"].items()}
    return {"logs": logs, "summaries": {path: sorted(summary) for path, summary in record["summaries"].items()}}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=() if name in golden_runs.COMPILED else pytest.mark.reverb)
        for name in sorted(golden_runs.RUNS)
    ],
)
def test_golden_run_reproduces_its_stored_record(name, tmp_path):
    stored = golden_runs.load(name)
    assert stored["command"] == golden_runs.RUNS[name], "the command changed: regenerate the record"
    fresh = golden_runs.run(name, str(tmp_path / "run"))
    records = {key: {k: record[k] for k in fresh} for key, record in stored["records"].items()}
    key, description, versions = golden_runs.record_key()
    if key in records:
        assert records[key] == fresh, (
            f"golden run {name} differs: {_first_difference(records[key], fresh)}; if intended, "
            f"`python tests/golden_runs.py {name}` in a commit that says why"
        )
        return
    if fresh in records.values():  # Another machine's arithmetic is this one's.
        return
    again = golden_runs.run(name, str(tmp_path / "again"))
    assert again == fresh, (
        f"golden run {name} is not reproducible on {description} with {versions}: {_first_difference(fresh, again)}"
    )
    for record in records.values():
        assert _shape(record) == _shape(fresh), f"golden run {name}: {_first_difference(_shape(record), _shape(fresh))}"


def test_records_hold_every_log_row_and_a_learner_digest():
    """What the comparison covers: a golden record that lost its rows would pass trivially."""
    for name in golden_runs.RUNS:
        stored = golden_runs.load(name)
        for key, record in stored["records"].items():
            if key != "unrecorded":  # Keyed by what made it: its machine and its stack.
                assert key == golden_runs.key_of(record["machine"], record["stack"]), (name, key)
            assert record["summaries"], name
            for path, rows in record["logs"].items():
                assert rows, (name, path)
                assert not any(golden_runs.is_wall_clock(key) for row in rows for key in row), (name, path)
            assert [path for path in record["logs"] if path.endswith("evaluator.csv")], name
            for summary_path, summary in record["summaries"].items():
                assert summary["status"] == "finished", (name, summary_path)
            assert record["learner_digests"]["summary.json"], name  # The run's checkpoint (all replicas).
