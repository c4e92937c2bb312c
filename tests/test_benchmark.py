"""scripts/benchmark.py: suites run with tiny budgets and write valid rows (no timings asserted)."""

import json
import math
import re
import os
import subprocess
import sys

import pytest

from benchmarks.common import ROW_KEYS, SUITES, Row, format_table, median

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = os.path.join(ROOT, "scripts", "benchmark.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))


def _run(arguments, timeout=900, temporary=None):
    """scripts/benchmark.py with `arguments`; `temporary`: the folder its temporary files go to (TMPDIR)."""
    environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if temporary is not None:
        os.makedirs(temporary)
        environment["TMPDIR"] = str(temporary)
    return subprocess.run(
        [sys.executable, BENCHMARK, *arguments],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _check_rows(path, suite):
    with open(path) as file:
        rows = json.load(file)
    assert isinstance(rows, list) and rows
    for row in rows:
        assert list(row) == list(ROW_KEYS)
        assert row["suite"] == suite
        assert isinstance(row["case"], str) and row["case"]
        assert isinstance(row["unit"], str) and row["unit"]
        assert isinstance(row["value"], float) and math.isfinite(row["value"]) and row["value"] > 0, row
        for key in ("bound", "ratio"):
            assert row[key] is None or (isinstance(row[key], float) and row[key] > 0), row
    cases = [row["case"] for row in rows]
    assert len(set(cases)) == len(cases)
    return {row["case"]: row for row in rows}


def test_help_explains_every_suite():
    result = _run(["--help"], timeout=120)
    assert result.returncode == 0, result.stderr
    for name in SUITES:
        assert f"  {name}: " in result.stdout
    for option in ("--json", "--repeats", "--seeds", "--experiments", "--quick"):
        assert option in result.stdout


def test_unknown_suite_is_a_usage_error():
    result = _run(["speed"], timeout=120)
    assert result.returncode == 2 and "invalid choice: 'speed'" in result.stderr


@pytest.mark.reverb
def test_actor_suite_writes_valid_rows(tmp_path):
    from benchmark import has_key

    out = tmp_path / "actor.json"
    result = _run(["actor", "--repeats", "1", "--quick", "--json", str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _check_rows(out, "actor")
    vectorised = has_key("environment.num_envs", ["experiment=dqn_cartpole"])
    for num_envs in (1, 8, 32) if vectorised else (1,):
        case = f"dqn_cartpole num_envs={num_envs}"
        actor = rows[case]
        environment = rows[f"{case}: environment alone"]
        inserts = rows[f"{case}: adder inserts"]
        assert actor["unit"] == environment["unit"] == "steps/s" and inserts["unit"] == "items/s"
        assert actor["bound"] == pytest.approx(min(environment["value"], inserts["value"]), rel=1e-3)
        # One round: its ratio is the round's actor / min(environment, adder).
        assert actor["ratio"] == pytest.approx(actor["value"] / actor["bound"], rel=1e-3)
        serial = rows[f"{case}: serial ceiling"]
        expected = 1 / (1 / environment["value"] + 1 / inserts["value"])
        assert serial["value"] == pytest.approx(expected, rel=1e-3) and serial["unit"] == "steps/s"
        assert serial["ratio"] == pytest.approx(actor["value"] / serial["value"], rel=1e-3)
    native, public = (
        rows["insert path: reverb's C++ writer (item_inserter)"],
        rows["insert path: reverb's public TrajectoryWriter"],
    )
    assert native["value"] > 0 and public["value"] > 0 and native["unit"] == public["unit"] == "items/s"
    assert native["bound"] == public["value"] and native["ratio"] == pytest.approx(
        native["value"] / public["value"], rel=1e-3
    )
    if not vectorised:
        assert "num_envs=8 skipped" in result.stdout and "num_envs=32 skipped" in result.stdout
    else:
        assert "skipped" not in result.stdout


@pytest.mark.reverb
def test_startup_suite_times_both_imports_and_compares_them(tmp_path):
    out = tmp_path / "startup.json"
    result = _run(["startup", "--repeats", "1", "--json", str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _check_rows(out, "startup")
    full = rows["dqn_cartpole 500-step process, TensorFlow's full import"]
    lazy = rows["dqn_cartpole 500-step process, reverb's TensorFlow modules only"]
    assert full["unit"] == lazy["unit"] == "s" and full["value"] > 0 and lazy["value"] > 0
    assert lazy["bound"] == pytest.approx(full["value"], rel=1e-3)
    assert lazy["ratio"] == pytest.approx(lazy["value"] / full["value"], rel=1e-3)


@pytest.mark.current
def test_accelerator_suite_reports_widths_device_and_the_warm_cache_compile(tmp_path):
    out = tmp_path / "accelerator.json"
    temporary = tmp_path / "tmp"
    arguments = ["accelerator", "--quick", "--cases", "width", "cache", "--widths", "2", "--json", str(out)]
    result = _run(arguments, temporary=temporary)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(temporary) == []  # Its runs and caches are removed once measured.
    rows = _check_rows(out, "accelerator")
    width = "ppo_gymnax_cartpole 2 seeds on 1 x cpu"
    assert {f"{width}: {part}" for part in ("compile", "process", "acting")} <= set(rows)
    acting = rows[f"{width}: acting"]
    assert acting["unit"] == "steps/s" and acting["bound"] == 5e6  # The widest width is held to the bound.
    assert acting["ratio"] == pytest.approx(acting["value"] / 5e6, abs=1e-4)  # Rows keep 4 decimals.
    warm = rows["the same run again: compile, cache warm"]
    assert warm["unit"] == "s" and warm["bound"] == 5.0
    assert f"note: {width}: finals median" in result.stdout


def test_accelerator_options_belong_to_their_suites():
    result = _run(["anakin", "--cases", "width"], timeout=120)
    assert result.returncode == 2 and "--cases: only for the accelerator suite" in result.stderr
    result = _run(["grid", "--widths", "4"], timeout=120)
    assert (
        result.returncode == 2 and "--widths: only for the accelerator, anakin and playground suites" in result.stderr
    )


@pytest.mark.current
def test_anakin_suite_compares_the_compiled_agents_at_the_widths_asked(tmp_path):
    out = tmp_path / "anakin.json"
    result = _run(["anakin", "--quick", "--widths", "2", "--json", str(out)])
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _check_rows(out, "anakin")
    for agent in ("ppo", "dqn", "pqn"):
        case = f"{agent} CartPole 2 seeds"
        assert {f"{case}: {part}" for part in ("steps/s after compile", "compile")} <= set(rows)
        (reached,) = re.findall(rf"note: {case}: (\d)/2 replicas reached 475", result.stdout)
        assert (f"{case}: s to threshold" in rows) == (reached != "0")  # A quick run may reach it or not.
        assert rows[f"{agent} 2 seeds vs 2 runs: whole run"]["bound"] > 0


@pytest.mark.current
def test_checkpoint_suite_times_each_presets_replicas_against_the_default_cadence(tmp_path):
    from rl.checkpointing import EVERY_SECONDS

    out = tmp_path / "checkpoint.json"
    result = _run(["checkpoint", "--quick", "--repeats", "1", "--json", str(out)], temporary=tmp_path / "tmp")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _check_rows(out, "checkpoint")
    for preset in ("ppo_gymnax_cartpole", "dqn_gymnax_cartpole"):
        assert rows[f"{preset} 2 seeds: state"]["unit"] == "MB"
        timed = rows[f"{preset} 2 seeds: one checkpoint"]
        assert timed["unit"] == "s" and timed["bound"] == EVERY_SECONDS
    # DQN's replay buffer is part of its state, so of every checkpoint.
    assert rows["dqn_gymnax_cartpole 2 seeds: state"]["value"] > rows["ppo_gymnax_cartpole 2 seeds: state"]["value"]


def test_median_counts_missing_values_as_never():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([1.0, None, None]) is None
    assert median([1.0, 2.0, None]) == 2.0
    assert median([]) is None


def test_rows_round_non_finite_to_null_and_print_as_a_table():
    row = Row("env", "case a", 12345.678, "steps/s", math.inf, 0.5)
    assert row.as_json() == {
        "suite": "env",
        "case": "case a",
        "value": 12345.678,
        "unit": "steps/s",
        "bound": None,
        "ratio": 0.5,
    }
    table = format_table([row, Row("env", "case b", None, "s")], notes=["something skipped"])
    lines = table.splitlines()
    assert lines[0].split() == ["suite", "case", "value", "unit", "bound", "ratio"]
    assert "12,346" in lines[2] and "0.50" in lines[2]
    assert lines[3].split()[-3:] == ["s", "-", "-"]
    assert lines[-1] == "note: something skipped"


@pytest.mark.current
def test_pbt_suite_compares_exchanging_members_with_the_same_members_alone(tmp_path):
    out = tmp_path / "pbt.json"
    temporary = tmp_path / "tmp"
    result = _run(["pbt", "--quick", "--json", str(out)], temporary=temporary)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(temporary) == []  # Its sweeps are removed once measured.
    with open(out) as file:
        rows = {row["case"]: row for row in json.load(file)}  # A quick run may solve nothing: counts may be 0.
    units = {"mean final return": "return", "best final return": "return", "seconds": "s"}
    units["members at >= threshold, of 16"] = "members"
    assert set(rows) == {f"ppo_gymnax_cartpole: {case}, PBT vs no exchange" for case in units}
    for case, unit in units.items():
        row = rows[f"ppo_gymnax_cartpole: {case}, PBT vs no exchange"]
        assert row["suite"] == "pbt" and row["unit"] == unit and row["value"] is not None and row["bound"] is not None
    assert "exchanges in its schedule" in result.stdout + result.stderr


@pytest.mark.current
def test_the_sebulba_suites_read_steady_rates_from_a_runs_records(tmp_path):
    """The steady rate leaves out the first fifth of the rows (compilation, warm-up); the learning-phase rate
    starts at the first row at or past the learning start (5,000 steps)."""
    from benchmarks.sebulba import learning_rate, steady_rate

    path = tmp_path / "learner.csv"
    rows = [(0, 0.0), (1000, 30.0)] + [(1000 + 500 * i, 30.0 + 2 * i) for i in range(1, 13)]
    path.write_text("actor_steps,wall_time_s\n" + "".join(f"{steps},{seconds}\n" for steps, seconds in rows))
    assert steady_rate(str(path), "actor_steps") == pytest.approx(250.0)  # (1,500 at 32 s) to (7,000 at 54 s).
    assert learning_rate(str(path)) == pytest.approx(250.0)  # (5,000 at 46 s) to (7,000 at 54 s).
    path.write_text("actor_steps,wall_time_s\n0,0.0\n5000,10.0\n")
    assert learning_rate(str(path)) is None and steady_rate(str(path), "actor_steps") is None
