"""The golden runs (tests/golden_runs.py) reproduce their stored records exactly.

A failure means a change altered results: either a bug, or an intended change whose
records must be regenerated (`python tests/golden_runs.py NAME`) in a commit of its own
that says why. Records are per machine and stack (XLA's CPU code differs between processor
models and JAX versions). On a machine and stack without one, the exact comparison is skipped
with one line that says so and how to store one, and the run is held to what float arithmetic
cannot change (`golden_runs.invariants`: files, columns, evaluation rounds, compiled learner
steps, statuses, summary keys) in every stored record, and to itself run a second time. Every
run is held to the invariants of every record on every machine, so a record of another stack
(the compiled runs have one per stack) keeps that comparison honest where the exact one
passes. The runs of launcher.deterministic=true need the reverb stack; the compiled ones run on
both stacks.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

import golden_runs

Record = dict[str, Any]
# Records of the runs this process made, by (name, attempt): the tests of one golden run share its run.
_RUNS: dict[tuple[str, int], Record] = {}


def _params(names: list[str]) -> list[Any]:
    """One parameter per golden run, marked for the stack it needs; a run's tests share one pytest-xdist
    worker (its group), so that they share its run."""
    return [
        pytest.param(
            name,
            marks=(
                pytest.mark.xdist_group(f"golden_{name}"),
                *(() if name in golden_runs.COMPILED else (pytest.mark.reverb,)),
            ),
        )
        for name in names
    ]


@pytest.fixture
def golden_record(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Record]:
    """`golden_record(name, attempt=0)`: the record of golden run `name`, run once per attempt and process."""

    def get(name: str, attempt: int = 0) -> Record:
        if (name, attempt) not in _RUNS:
            directory = tmp_path_factory.mktemp(f"golden_{name}_{attempt}")
            _RUNS[name, attempt] = golden_runs.run(name, str(directory / "run"))
        return _RUNS[name, attempt]

    return get


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


def compare_exactly(name: str, fresh: Callable[[], Record]) -> None:
    """Golden run `name` (`fresh()` runs it) equals the record of this machine and stack; skipped, with the
    one line of `golden_runs.unrecorded`, where there is none."""
    stored = golden_runs.load(name)
    assert stored["command"] == golden_runs.RUNS[name], "the command changed: regenerate the record"
    key = golden_runs.record_key()[0]
    if key not in stored["records"]:
        pytest.skip(golden_runs.unrecorded(name))
    record = fresh()
    expected = {field: stored["records"][key][field] for field in record}
    assert expected == record, (
        f"golden run {name} differs: {_first_difference(expected, record)}; if intended, "
        f"`{golden_runs.store_command(name)}` in a commit that says why"
    )


def compare_invariants(name: str, fresh: Record, again: Callable[[], Record]) -> None:
    """Golden run `name`'s `fresh` record has what float arithmetic cannot change in every stored record;
    without a record of this machine and stack, a second run (`again()`) must equal it too."""
    stored = golden_runs.load(name)["records"]
    found = golden_runs.invariants(name, fresh)
    for record in stored.values():
        expected = golden_runs.invariants(name, record)
        assert expected == found, (
            f"golden run {name} differs from the record of {record['machine']} ({record['stack']}) where float "
            f"arithmetic has no say: {_first_difference(expected, found)}"
        )
    if golden_runs.record_key()[0] not in stored:
        _, description, versions = golden_runs.record_key()
        second = again()
        assert second == fresh, (
            f"golden run {name} is not reproducible on {description} with {versions}: {_first_difference(fresh, second)}"
        )


@pytest.mark.parametrize("name", _params(sorted(golden_runs.RUNS)))
def test_golden_run_reproduces_its_stored_record(name, golden_record):
    compare_exactly(name, lambda: golden_record(name))


@pytest.mark.parametrize("name", _params(sorted(golden_runs.RUNS)))
def test_golden_run_keeps_what_float_arithmetic_cannot_change(name, golden_record):
    compare_invariants(name, golden_record(name), lambda: golden_record(name, attempt=1))


@pytest.mark.parametrize("name", _params(["dqn", "sebulba_ppo"]))
def test_on_an_unknown_processor_only_the_exact_comparison_is_skipped(name, golden_record, monkeypatch):
    """RL_GOLDEN_MACHINE makes this machine one without records, as a new processor is: the exact comparison
    is skipped in one line naming it, the stack and the command that stores its record, and the run still
    passes the comparison of its invariants. sebulba_ppo's records (one per stack) end different numbers of
    episodes (test_records_of_a_run_agree_where_float_arithmetic_has_no_say), so a comparison that counted
    per-episode rows would fail here, on every machine. This machine's record of the run, where it has one,
    stands in for the second run (it is one, made earlier by the same command here), which keeps this test
    within the runs the golden tests make anyway."""
    stored = golden_runs.load(name)["records"]
    own_key = golden_runs.record_key()[0]
    fresh = golden_record(name)
    monkeypatch.setenv(golden_runs.FORCED_MACHINE, "an unknown processor")
    key, description, versions = golden_runs.record_key()
    assert key not in stored and description == "an unknown processor"
    with pytest.raises(pytest.skip.Exception) as skipped:
        compare_exactly(name, lambda: golden_record(name))
    line = str(skipped.value.msg)
    assert "\n" not in line and "exact comparison skipped" in line
    assert description in line and versions in line and f"tests/golden_runs.py {name}`" in line
    earlier = {field: stored[own_key][field] for field in fresh} if own_key in stored else None
    compare_invariants(name, fresh, lambda: earlier if earlier is not None else golden_record(name, attempt=1))


def test_records_of_a_run_agree_where_float_arithmetic_has_no_say():
    """The records of one run (other machines, other stacks) share their invariants, whatever their floats,
    while sebulba_ppo's stacks' records differ in how many episodes each seed's actor ended: the case of a
    machine whose arithmetic ends other episodes within the budget, which must not fail."""
    for name in golden_runs.RUNS:
        records = list(golden_runs.load(name)["records"].values())
        first = golden_runs.invariants(name, records[0])
        for record in records[1:]:
            assert golden_runs.invariants(name, record) == first, (name, record["machine"], record["stack"])
    per_episode = [
        [len(rows) for path, rows in sorted(record["logs"].items()) if path.endswith("actor.csv")]
        for record in golden_runs.load("sebulba_ppo")["records"].values()
    ]
    assert len(set(map(tuple, per_episode))) > 1, per_episode


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
