"""scripts/benchmark.py baselines: the table from hand-made summaries (pure), the data file the report is
rendered from (a preset measured again replaces its entry, the others keep theirs, row for row; the committed
docs/baselines.md is what docs/baselines.json renders), and one tiny end-to-end run (2 seeds of dqn_cartpole)
whose markdown table is checked against the summaries it left on disk."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import baselines
from benchmarks.baselines import (
    PUBLISHED,
    SOURCES,
    TABLE_HEADER,
    PresetResult,
    curve_iqm,
    environment_label,
    preset_entry,
    render_markdown,
    table_cells,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = os.path.join(ROOT, "scripts", "benchmark.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

CARTPOLE = {"environment": "CartPole-v1", "budget": 50_000, "threshold": 475.0, "skipped": []}
# "IQM [low, high]", one decimal each.
IQM_CELL = re.compile(r"^(-?\d+\.\d) \[(-?\d+\.\d), (-?\d+\.\d)\]$")
COLUMN = {name: index for index, name in enumerate(TABLE_HEADER)}
MEASURED = {"command": "python scripts/benchmark.py baselines --seeds 2", "date": "2024-01-01 00:00 UTC", "jobs": 2}


def entries(*results, measured=MEASURED):
    """The data file's presets for `results`, all measured by one invocation."""
    return {result.preset: preset_entry(result, measured) for result in results}


def summary(final, steps_to_threshold=None, seconds=None, curve=None, seed=0):
    """A summary.json as scripts/train.py writes one, with only what the suite reads."""
    return {
        "seed": seed,
        "environment": "CartPole-v1",
        "final_eval_return": final,
        "eval_returns": curve if curve is not None else [[25_000, final / 2], [50_000, final]],
        "threshold": 475.0,
        "steps_to_threshold": steps_to_threshold,
        "time_to_threshold_s": seconds,
        "status": "finished",
    }


def parse_tables(markdown):
    """Each markdown table in `markdown` as a list of rows of cells (separator rows dropped)."""
    tables, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r"-{3,}", cell) for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


# --------------------------------------------------------------------------- pure: the table


def test_three_seeds_give_successes_iqm_and_medians_computed_by_hand():
    summaries = [
        summary(500.0, steps_to_threshold=10_000, seconds=20.0, seed=0),
        summary(480.0, steps_to_threshold=20_000, seconds=40.0, seed=1),
        summary(100.0, seed=2),  # Never reached 475.
    ]
    result = PresetResult("dqn_cartpole", CARTPOLE, [0, 1, 2], summaries)
    assert result.successes == 2
    cells = table_cells(result, "[1]")
    assert len(cells) == len(TABLE_HEADER)
    assert cells[COLUMN["preset"]] == "`dqn_cartpole`"
    assert cells[COLUMN["environment"]] == "CartPole-v1"
    assert cells[COLUMN["budget (actor steps)"]] == "50,000"
    assert cells[COLUMN["threshold"]] == "475"
    assert cells[COLUMN["successes"]] == "2/3"
    # A 25% trimmed mean of 3 values cuts int(0.25 * 3) = 0 from each end: the mean.
    iqm, low, high = map(float, IQM_CELL.match(cells[COLUMN["IQM final return [95% CI]"]]).groups())
    assert iqm == pytest.approx((500 + 480 + 100) / 3, abs=0.05)
    assert 100.0 <= low <= iqm <= high <= 500.0
    # Medians over the two seeds that reached the threshold.
    assert cells[COLUMN["median steps to threshold"]] == "15,000 (n=2)"
    assert cells[COLUMN["median seconds to threshold"]] == "30.0 (n=2)"
    assert cells[COLUMN["published"]].startswith("500.0 ± 0.0 (") and cells[-1].endswith("[1]")


def test_iqm_trims_a_quarter_from_each_end():
    finals = [500.0, 480.0, 100.0, 0.0]
    result = PresetResult("dqn_cartpole", CARTPOLE, [0, 1, 2, 3], [summary(f) for f in finals])
    iqm, _, _ = map(float, IQM_CELL.match(table_cells(result)[COLUMN["IQM final return [95% CI]"]]).groups())
    assert iqm == pytest.approx((480 + 100) / 2, abs=0.05)  # 4 values: the middle two.
    ten = [0.0, 10.0, 200.0, 300.0, 400.0, 450.0, 480.0, 490.0, 500.0, 500.0]
    result = PresetResult("dqn_cartpole", CARTPOLE, list(range(10)), [summary(f) for f in ten])
    assert result.statistics()["iqm"] == pytest.approx(np.mean(sorted(ten)[2:8]))  # 10: the middle six.
    assert result.successes == 4 and table_cells(result)[COLUMN["successes"]] == "4/10"


def test_failed_runs_and_missing_thresholds_are_not_successes():
    result = PresetResult(
        "ppo_cartpole", CARTPOLE, [0, 1], [summary(500.0, 5_000, 9.5), None], {1: "exited with status 1"}
    )
    cells = table_cells(result)
    assert cells[COLUMN["successes"]] == "1/2"
    iqm, low, high = map(float, IQM_CELL.match(cells[COLUMN["IQM final return [95% CI]"]]).groups())
    assert iqm == low == high == 500.0  # One finished run: the interval collapses onto it.
    none = PresetResult("ppo_cartpole", CARTPOLE, [0], [summary(100.0)])
    assert table_cells(none)[COLUMN["median steps to threshold"]] == "n/a"
    assert table_cells(none)[COLUMN["median seconds to threshold"]] == "n/a"
    nothing = PresetResult("ppo_cartpole", CARTPOLE, [0], [None])
    assert table_cells(nothing)[COLUMN["IQM final return [95% CI]"]] == "n/a"
    no_threshold = PresetResult("x", {**CARTPOLE, "threshold": None}, [0], [{**summary(1.0), "threshold": None}])
    assert no_threshold.successes is None and table_cells(no_threshold)[COLUMN["successes"]] == "n/a"
    markdown = render_markdown(entries(result))
    assert "`ppo_cartpole` seed 1 failed: exited with status 1" in markdown
    assert "0: 500.0, 1: failed" in markdown


def test_markdown_is_generated_with_command_date_figure_and_numbered_sources():
    results = [
        PresetResult("dqn_cartpole", CARTPOLE, [0, 1], [summary(500.0, 1, 1.0), summary(490.0, 2, 2.0)]),
        PresetResult(
            "r2d2_cartpole_masked",
            {**CARTPOLE, "environment": "CartPole-v1 (cartpole_masked)"},
            [0, 1],
            [summary(200.0), summary(300.0)],
        ),
        PresetResult("sac_pendulum", {**CARTPOLE, "threshold": -200.0}, [0, 1], [summary(-150.0), summary(-170.0)]),
    ]
    command = MEASURED["command"]
    markdown = render_markdown(entries(*results), "baselines.png", "baselines.json")
    lines = markdown.splitlines()
    assert lines[0] == "# Baselines"
    assert "Generated by `scripts/benchmark.py baselines` from [baselines.json](baselines.json)" in lines[2]
    assert "do not edit" in lines[2]
    assert "over 2 seeds (0 to 1)" in markdown
    # One invocation measured all three: listed once, with its presets.
    assert "- `dqn_cartpole`, `r2d2_cartpole_masked`, `sac_pendulum`:" in lines
    assert f"  - Command: `{command}`" in lines and "  - Date: 2024-01-01 00:00 UTC" in lines
    assert "  - Runs: `scripts/train.py experiment=<preset> seed=<s>`, 2 at a time on a machine" in lines
    assert "![IQM learning curves over seeds, 95% bootstrap band](baselines.png)" in markdown
    assert "No learning curve is stored" not in markdown
    table, per_seed = parse_tables(markdown)
    assert table[0] == list(TABLE_HEADER)
    assert [row[0] for row in table[1:]] == ["`dqn_cartpole`", "`r2d2_cartpole_masked`", "`sac_pendulum`"]
    assert all(len(row) == len(TABLE_HEADER) for row in table)
    assert [row[COLUMN["successes"]] for row in table[1:]] == ["2/2", "0/2", "2/2"]
    assert per_seed[1] == ["`dqn_cartpole`", "0: 500.0, 1: 490.0"]
    # Sources numbered in the order the table first cites them.
    assert table[1][-1].endswith("[1]") and table[2][-1].endswith("[2]") and table[3][-1].endswith("[1]")
    assert f"1. {SOURCES['zoo'][0]}: <{SOURCES['zoo'][1]}>" in markdown
    assert f"2. {SOURCES['hf_ppo_lstm'][0]}: <{SOURCES['hf_ppo_lstm'][1]}>" in markdown


def row_lines(markdown, preset):
    """The lines of `markdown` that are `preset`'s rows (the table's and the per-seed one)."""
    return [line for line in markdown.splitlines() if line.startswith(f"| `{preset}` |")]


def test_a_preset_measured_again_replaces_its_entry_and_the_others_keep_theirs_row_for_row(tmp_path):
    out = tmp_path / "docs" / "baselines.md"
    first = {**MEASURED, "command": "python scripts/benchmark.py baselines --seeds 2", "commit": "aaaaaaaaaaaa"}
    results = [
        PresetResult("dqn_cartpole", CARTPOLE, [0, 1], [summary(500.0, 1, 1.0), summary(490.0, 2, 2.0)]),
        PresetResult("ppo_cartpole", CARTPOLE, [0, 1], [summary(100.0), summary(120.0)]),
        PresetResult("sac_pendulum", {**CARTPOLE, "threshold": -200.0}, [0, 1], [summary(-150.0), summary(-170.0)]),
    ]
    baselines.write_report(entries(*results, measured=first), str(out))
    before, stored = out.read_text(), baselines.load_entries(baselines.data_path(str(out)))
    assert list(stored) == ["dqn_cartpole", "ppo_cartpole", "sac_pendulum"]
    assert (tmp_path / "docs" / "baselines.json").is_file() and (tmp_path / "docs" / "baselines.png").is_file()

    # ppo_cartpole measured again by another invocation (as `--presets ppo_cartpole` stores it).
    second = {**first, "command": "python scripts/benchmark.py baselines --presets ppo_cartpole", "commit": "b" * 12}
    again = PresetResult("ppo_cartpole", CARTPOLE, [0, 1], [summary(500.0, 7, 3.0), summary(480.0, 9, 4.0)])
    baselines.write_report({**stored, **entries(again, measured=second)}, str(out))
    after, merged = out.read_text(), baselines.load_entries(baselines.data_path(str(out)))
    for kept in ("dqn_cartpole", "sac_pendulum"):
        assert merged[kept] == stored[kept]
        assert row_lines(after, kept) == row_lines(before, kept) and len(row_lines(after, kept)) == 2
    assert merged["ppo_cartpole"] == json.loads(json.dumps(preset_entry(again, second)))
    assert row_lines(after, "ppo_cartpole") != row_lines(before, "ppo_cartpole")
    table = parse_tables(after)[0]
    assert [row[0] for row in table[1:]] == ["`dqn_cartpole`", "`ppo_cartpole`", "`sac_pendulum`"]  # Its place.
    assert table[2][COLUMN["successes"]] == "2/2" and table[2][COLUMN["median steps to threshold"]] == "8 (n=2)"
    # Each invocation is listed once, with the presets it measured.
    lines = after.splitlines()
    assert "- `dqn_cartpole`, `sac_pendulum`:" in lines and "- `ppo_cartpole`:" in lines
    assert f"  - Command: `{first['command']}`" in lines and f"  - Command: `{second['command']}`" in lines
    assert "  - Code: commit `bbbbbbbbbbbb` (plus any uncommitted changes in the tree)" in lines
    assert "over 2 seeds (0 to 1)" in after
    baselines.write_report({**merged, **entries(PresetResult("ppo_cartpole", CARTPOLE, [0], [summary(1.0)]))}, str(out))
    assert "over the seeds listed with it under Final return per seed" in out.read_text()


def test_the_report_is_rendered_from_the_data_file_alone(tmp_path):
    out = tmp_path / "baselines.md"
    curve = [[25_000, 250.0], [50_000, 500.0]]
    measured = PresetResult("dqn_cartpole", CARTPOLE, [0, 1], [summary(500.0, curve=curve), summary(500.0)])
    stored = entries(measured, measured={**MEASURED, "uncommitted_changes": False, "commit": "c" * 12})
    # An entry kept from before the data file stored curves: its row, no curve.
    stored["ppo_cartpole"] = {**entries(PresetResult("ppo_cartpole", CARTPOLE, [0], [summary(1.0)]))["ppo_cartpole"]}
    stored["ppo_cartpole"]["curve"] = None
    baselines.write_report(stored, str(out))
    markdown = out.read_text()
    assert "No learning curve is stored for `ppo_cartpole`" in markdown and "](baselines.png)" in markdown
    assert "  - Code: commit `cccccccccccc` (no uncommitted changes)" in markdown.splitlines()
    out.write_text("edited by hand\n")
    (tmp_path / "baselines.png").unlink()
    baselines.render_report(str(out))
    assert out.read_text() == markdown and (tmp_path / "baselines.png").is_file()
    # No stored curve at all: no figure, and none left behind.
    stored["dqn_cartpole"]["curve"] = None
    baselines.write_report(stored, str(out))
    assert not (tmp_path / "baselines.png").exists() and "](baselines.png)" not in out.read_text()
    assert "No learning curve is stored for `dqn_cartpole`, `ppo_cartpole`" in out.read_text()
    with pytest.raises(ValueError, match="no presets stored"):
        baselines.render_report(str(tmp_path / "elsewhere" / "baselines.md"))


def test_the_committed_report_is_what_its_data_file_renders():
    """docs/baselines.md is generated from docs/baselines.json and never edited by hand (after editing
    benchmarks/baselines.yaml: `python scripts/benchmark.py baselines --render`)."""
    out = os.path.join(ROOT, baselines.DEFAULT_OUT)
    stored = baselines.load_entries(baselines.data_path(out))
    assert list(stored) == list(baselines._ordered(stored))
    with open(out) as file:
        assert file.read() == render_markdown(stored, "baselines.png", "baselines.json")
    drawn = any(entry["curve"] is not None for entry in stored.values())
    assert os.path.isfile(os.path.join(ROOT, "docs", "baselines.png")) == drawn


def test_every_default_preset_has_a_cited_published_figure():
    number = r"-?\d+(\.\d+)?"
    for preset in baselines.DEFAULT_PRESETS:
        published = PUBLISHED[preset]
        assert published.source in SOURCES
        assert published.figure == "see source" or re.fullmatch(rf"{number} ± {number}", published.figure), preset
        assert published.detail
    for citation, address, what in SOURCES.values():
        assert citation and address.startswith("https://") and what


def test_environment_labels():
    assert environment_label("CartPole-v1", "cartpole") == "CartPole-v1"
    assert environment_label("Pendulum-v1", "pendulum") == "Pendulum-v1"
    assert environment_label("CartPole-v1", "gymnax") == "CartPole-v1 (gymnax)"
    assert environment_label("CartPole-v1", "cartpole_masked") == "CartPole-v1 (cartpole_masked)"
    assert environment_label(None, "cartpole_masked") == "cartpole_masked"


def test_learning_curve_iqm_and_band_over_seeds(tmp_path):
    curves = [[[500, 10.0], [1000, 100.0]], [[500, 20.0], [1000, 300.0]], [[500, 30.0], [1000, 500.0]]]
    curve = curve_iqm(curves)
    np.testing.assert_array_equal(curve["steps"], [500, 1000])
    np.testing.assert_allclose(curve["iqm"], [20.0, 300.0])  # 3 seeds: nothing trimmed.
    assert np.all(curve["low"] <= curve["iqm"]) and np.all(curve["iqm"] <= curve["high"])
    assert curve["runs"] == 3 and curve_iqm([])["steps"].size == 0
    results = [
        PresetResult("dqn_cartpole", CARTPOLE, [0, 1, 2], [summary(c[-1][1], curve=c) for c in curves]),
        PresetResult("ppo_cartpole", CARTPOLE, [0], [None]),
    ]
    stored = entries(*results)
    assert stored["dqn_cartpole"]["curve"]["iqm"] == [20.0, 300.0] and stored["dqn_cartpole"]["curve"]["runs"] == 3
    assert stored["ppo_cartpole"]["curve"] == {"steps": [], "iqm": [], "low": [], "high": [], "runs": 0}
    path = tmp_path / "curves.png"
    baselines.plot_learning_curves(stored, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_finished_run_is_reused_only_for_the_same_command_and_config(tmp_path):
    command = ["python", "train.py", "experiment=dqn_cartpole", "seed=0"]
    run_dir = tmp_path / "seed_0"
    run_dir.mkdir()
    (run_dir / "benchmark.json").write_text(json.dumps({"command": command[1:]}))
    (run_dir / "summary.json").write_text(json.dumps(summary(500.0)))
    assert baselines._finished_summary(str(run_dir), command)["final_eval_return"] == 500.0
    assert baselines._finished_summary(str(run_dir), [*command, "max_actor_steps=10"]) is None
    # With the composed config: the run's .hydra/config.yaml must be the same but for the seed
    # (an edited preset keeps the command line).
    config = {"seed": 1, "max_actor_steps": 50000, "agent": {"learning_rate": 1e-3}}
    assert baselines._finished_summary(str(run_dir), command, config) is None  # No .hydra/config.yaml.
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\nmax_actor_steps: 50000\nagent: {learning_rate: 0.001}\n")
    assert baselines._finished_summary(str(run_dir), command, config)["final_eval_return"] == 500.0
    edited = {**config, "agent": {"learning_rate": 5e-4}}
    assert baselines._finished_summary(str(run_dir), command, edited) is None
    (run_dir / "summary.json").write_text(json.dumps({**summary(500.0), "status": "interrupted"}))
    assert baselines._finished_summary(str(run_dir), command) is None


def test_command_line_checks():
    from benchmark import parse_arguments

    arguments = parse_arguments(["baselines", "--presets", "dqn_cartpole", "--seeds", "3", "--overrides", "a=1", "b=2"])
    assert arguments.experiments == ["dqn_cartpole"] and arguments.seeds == [3]
    assert arguments.overrides == ["a=1", "b=2"]
    assert parse_arguments(["baselines", "--render", "--out", "x.md"]).render
    bad = (["baselines", "--seeds", "0", "1"], ["baselines", "--seeds", "0"], ["actor", "--out", "x.md"])
    bad += (["actor", "--render"], ["baselines", "--render", "--presets", "dqn_cartpole"])  # --render trains nothing.
    bad += (["baselines", "--render", "--seeds", "3"],)
    for arguments in (*bad, ["actor", "--seeds", "3"]):  # --seeds is baselines' only.
        with pytest.raises(SystemExit) as error:
            parse_arguments(arguments)
        assert error.value.code == 2


# --------------------------------------------------------------------------- end to end


@pytest.mark.reverb
def test_two_seeds_of_dqn_cartpole_make_a_valid_table(tmp_path):
    out = tmp_path / "docs" / "baselines.md"
    runs = tmp_path / "runs"
    rows_path = tmp_path / "rows.json"
    arguments = [
        "baselines",
        "--presets",
        "dqn_cartpole",
        "--seeds",
        "2",
        "--out",
        str(out),
        "--runs-dir",
        str(runs),
        "--json",
        str(rows_path),
        "--overrides",
        "max_actor_steps=1500",
        "eval_every=500",
        "eval_episodes=2",
        "agent.min_replay_size=500",
    ]
    environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = subprocess.run(
        [sys.executable, BENCHMARK, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]

    summaries = []
    for seed in (0, 1):
        with open(runs / "dqn_cartpole" / f"seed_{seed}" / "summary.json") as file:
            summaries.append(json.load(file))
        assert summaries[-1]["seed"] == seed and summaries[-1]["actor_steps"] == 1500
    finals = [s["final_eval_return"] for s in summaries]

    markdown = out.read_text()
    assert "Generated by" in markdown and "do not edit" in markdown
    assert "`python scripts/benchmark.py baselines --presets dqn_cartpole --seeds 2" in markdown
    table = parse_tables(markdown)[0]
    assert table[0] == list(TABLE_HEADER)
    assert len(table) == 2 and table[1][0] == "`dqn_cartpole`"
    row = dict(zip(TABLE_HEADER, table[1]))
    assert row["environment"] == "CartPole-v1"
    assert row["budget (actor steps)"] == "1,500" and row["threshold"] == "475"
    assert row["successes"] == f"{sum(f >= 475.0 for f in finals)}/2"
    iqm, low, high = map(float, IQM_CELL.match(row["IQM final return [95% CI]"]).groups())
    assert iqm == pytest.approx(np.mean(finals), abs=0.051)  # 2 seeds: nothing trimmed.
    assert min(finals) - 0.051 <= low <= iqm <= high <= max(finals) + 0.051
    reached = [s["steps_to_threshold"] for s in summaries if s["steps_to_threshold"] is not None]
    if reached:
        assert row["median steps to threshold"] == f"{np.median(reached):,.0f} (n={len(reached)})"
    else:
        assert row["median steps to threshold"] == "n/a"
    assert row["published"].startswith("500.0 ± 0.0")

    figure = out.with_suffix(".png")
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "](baselines.png)" in markdown

    rows = {r["case"]: r for r in json.loads(rows_path.read_text())}
    assert rows["dqn_cartpole successes"]["bound"] == 2.0
    assert math.isclose(rows["dqn_cartpole IQM final return"]["value"], np.mean(finals), abs_tol=1e-3)


FAKE_TRAIN = """
import json, os, sys
arguments = dict(a.split("=", 1) for a in sys.argv[1:])
seed, run_dir = int(arguments["seed"]), arguments["hydra.run.dir"]
with open(os.environ["FAKE_TRAIN_CALLS"], "a") as file:
    file.write(f"{arguments['experiment']} {seed}\\n")
if seed == 3:
    print("something broke", file=sys.stderr)
    sys.exit(1)
final = 500.0 if seed % 2 == 0 else 100.0
summary = {"seed": seed, "final_eval_return": final, "eval_returns": [[10, final / 2], [20, final]],
           "threshold": 475.0, "steps_to_threshold": 20 if final >= 475 else None,
           "time_to_threshold_s": 1.5 if final >= 475 else None, "status": "finished"}
with open(os.path.join(run_dir, "summary.json"), "w") as file:
    json.dump(summary, file)
"""


def test_the_pool_runs_every_seed_reports_failures_and_reuses_finished_runs(tmp_path, monkeypatch):
    """The suite's plumbing with a stand-in for scripts/train.py (no JAX): every (preset,
    seed) in its own directory, a failed seed noted and counted as no success."""
    scripts = tmp_path / "project" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "train.py").write_text(FAKE_TRAIN)
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))

    def describe(preset, overrides):
        return {**CARTPOLE, "overrides": list(overrides), "skipped": []}

    options = baselines.BaselinesOptions(
        train_script=str(scripts / "train.py"),
        describe=describe,
        presets=("dqn_cartpole", "ppo_cartpole"),
        seeds=(0, 1, 2, 3),
        out=str(tmp_path / "out" / "baselines.md"),
        runs_dir=str(tmp_path / "runs"),
        overrides=("max_actor_steps=20",),
    )
    rows, notes, results = baselines.suite_baselines(options)
    assert sorted(calls.read_text().split("\n")[:-1]) == sorted(f"{p} {s}" for p in options.presets for s in range(4))
    for result in results:
        assert result.successes == 2 and list(result.failures) == [3]
        assert "something broke" in result.failures[3]
    table = parse_tables((tmp_path / "out" / "baselines.md").read_text())[0]
    assert [row[COLUMN["successes"]] for row in table[1:]] == ["2/4", "2/4"]
    assert [row[COLUMN["median steps to threshold"]] for row in table[1:]] == ["20 (n=2)", "20 (n=2)"]
    assert (tmp_path / "out" / "baselines.png").is_file()
    assert any("dqn_cartpole seed=3 failed" in note for note in notes)
    assert {row.case: row.value for row in rows}["ppo_cartpole successes"] == 2
    stored = baselines.load_entries(str(tmp_path / "out" / "baselines.json"))
    assert stored["dqn_cartpole"]["final_returns"] == [500.0, 100.0, 500.0, None]
    assert stored["dqn_cartpole"]["failures"] == {"3": results[0].failures[3]}
    assert stored["dqn_cartpole"]["measured"]["command"] == options.command
    # Again with reuse: only the failed seeds train again.
    calls.write_text("")
    baselines.suite_baselines(dataclasses.replace(options, reuse=True))
    assert sorted(calls.read_text().split("\n")[:-1]) == ["dqn_cartpole 3", "ppo_cartpole 3"]
    # One preset measured again over 2 seeds: only it trains and changes; the other keeps its entry and rows.
    calls.write_text("")
    before = (tmp_path / "out" / "baselines.md").read_text()
    stored = baselines.load_entries(str(tmp_path / "out" / "baselines.json"))
    baselines.suite_baselines(dataclasses.replace(options, presets=("ppo_cartpole",), seeds=(0, 1), command="again"))
    assert sorted(calls.read_text().split("\n")[:-1]) == ["ppo_cartpole 0", "ppo_cartpole 1"]
    merged = baselines.load_entries(str(tmp_path / "out" / "baselines.json"))
    assert merged["dqn_cartpole"] == stored["dqn_cartpole"] and merged["ppo_cartpole"]["seeds"] == [0, 1]
    after = (tmp_path / "out" / "baselines.md").read_text()
    assert row_lines(after, "dqn_cartpole") == row_lines(before, "dqn_cartpole")
    assert [row[COLUMN["successes"]] for row in parse_tables(after)[0][1:]] == ["2/4", "1/2"]
    assert "`dqn_cartpole` seed 3 failed" in after and "`ppo_cartpole` seed 3 failed" not in after
    # An override no preset has is refused before anything runs.
    calls.write_text("")
    with pytest.raises(ValueError, match="no preset"):
        baselines.suite_baselines(
            dataclasses.replace(options, describe=lambda p, o: {**CARTPOLE, "overrides": [], "skipped": list(o)})
        )
    assert calls.read_text() == ""


def test_a_finished_run_of_several_seeds_is_imported_as_one_row_of_its_replicas(tmp_path):
    """--from-runs: a 4-seed anakin run (tests/data/run_dirs/seeds) becomes the row of its preset with its
    replicas' final returns; a run naming environment.name becomes `<preset> on <task>`; an unfinished run and
    a run of no preset are refused, and the stored rows are kept."""
    import shutil

    import yaml

    source = os.path.join(ROOT, "tests", "data", "run_dirs", "seeds")
    out = str(tmp_path / "report" / "baselines.md")
    stored = PresetResult("dqn_cartpole", CARTPOLE, [0, 1], [summary(500.0), summary(480.0, seed=1)])
    baselines.write_report(entries(stored), out)
    [result] = baselines.import_runs([source], out, "python scripts/benchmark.py baselines --from-runs x")
    with open(os.path.join(source, "summary.json")) as file:
        finals = [replica["final_eval_return"] for replica in json.load(file)["replicas"]]
    assert result.preset == "ppo_gymnax_cartpole" and result.seeds == [0, 1, 2, 3]
    data = baselines.load_entries(baselines.data_path(out))
    assert list(data) == ["dqn_cartpole", "ppo_gymnax_cartpole"]  # The stored row kept.
    assert data["ppo_gymnax_cartpole"]["final_returns"] == finals
    assert data["ppo_gymnax_cartpole"]["budget"] == 32768
    with open(out) as file:
        report = file.read()
    assert "Run: `scripts/train.py experiment=ppo_gymnax_cartpole launcher.num_seeds=4" in report
    assert "its seeds in one program" in report

    named = tmp_path / "named"
    shutil.copytree(source, named)
    with open(named / ".hydra" / "overrides.yaml", "a") as file:
        file.write("- environment.name=CartPole-v1\n")
    assert baselines.imported_run(str(named)).preset == "ppo_gymnax_cartpole on CartPole-v1"

    # A preset whose published figures are per task names its task though the command does not.
    per_task = tmp_path / "per_task"
    shutil.copytree(source, per_task)
    with open(per_task / ".hydra" / "overrides.yaml", "w") as file:
        yaml.safe_dump(["experiment=sac_mujoco", "launcher.num_seeds=4"], file)
    with open(per_task / ".hydra" / "config.yaml") as file:
        config = yaml.safe_load(file)
    with open(per_task / ".hydra" / "config.yaml", "w") as file:
        yaml.safe_dump({**config, "environment": {**config["environment"], "name": "HalfCheetah-v5"}}, file)
    assert baselines.imported_run(str(per_task)).preset == "sac_mujoco on HalfCheetah-v5"

    stopped = tmp_path / "stopped"
    shutil.copytree(source, stopped)
    with open(stopped / "summary.json") as file:
        record = json.load(file)
    with open(stopped / "summary.json", "w") as file:
        json.dump({**record, "status": "interrupted"}, file)
    with pytest.raises(ValueError, match="did not finish"):
        baselines.imported_run(str(stopped))
    with open(named / ".hydra" / "overrides.yaml", "w") as file:
        yaml.safe_dump(["seed=1"], file)
    with pytest.raises(ValueError, match="names no preset"):
        baselines.imported_run(str(named))


def test_from_runs_trains_nothing_and_takes_no_training_options():
    from benchmark import parse_arguments

    assert parse_arguments(["baselines", "--from-runs", "a", "b", "--out", "x.md"]).from_runs == ["a", "b"]
    for arguments in (["baselines", "--from-runs", "a", "--seeds", "3"], ["baselines", "--from-runs", "a", "--render"]):
        with pytest.raises(SystemExit) as error:
            parse_arguments(arguments)
        assert error.value.code == 2
