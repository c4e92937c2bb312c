"""scripts/plot.py and rl.analysis: grouping runs by override, bootstrap bands, IQM tables (curves);
rliable's aggregates, performance profiles and probabilities of improvement (--aggregate)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import ROOT
from rl.analysis import find_runs, final_table, group_runs, varying_keys
from rl.analysis.aggregates import summarize

PLOT = os.path.join(ROOT, "scripts", "plot.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _write_run(path, overrides, returns, steps=(500, 1000, 1500), agent="dqn", summary=None):
    """A run directory laid out as scripts/train.py leaves it (only what plot.py reads)."""
    os.makedirs(os.path.join(path, ".hydra"))
    os.makedirs(os.path.join(path, "logs"))
    settings = dict(item.split("=", 1) for item in overrides)
    with open(os.path.join(path, ".hydra", "overrides.yaml"), "w") as file:
        yaml.safe_dump(list(overrides), file)
    with open(os.path.join(path, ".hydra", "config.yaml"), "w") as file:
        yaml.safe_dump({"seed": int(settings.get("seed", 0)), "agent": {"learning_rate": 1e-3, "n_step": 3}}, file)
    with open(os.path.join(path, ".hydra", "hydra.yaml"), "w") as file:
        yaml.safe_dump({"hydra": {"runtime": {"choices": {"agent": agent, "environment": "cartpole"}}}}, file)
    with open(os.path.join(path, "logs", "evaluator.csv"), "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["actor_steps", "learner_steps", "episode_return"])
        for step, value in zip(steps, returns):
            writer.writerow([step, step // 2, value])
    with open(os.path.join(path, "summary.json"), "w") as file:
        record = {"environment": "CartPole-v1", "seed": int(settings.get("seed", 0))}
        json.dump({**record, "final_eval_return": float(returns[-1]), **(summary or {})}, file)


@pytest.fixture
def sweep(tmp_path):
    """Two groups (learning rates) of two seeds, as a Hydra multirun directory."""
    root = tmp_path / "multirun"
    job = 0
    for rate, base in (("1e-3", 100.0), ("3e-4", 20.0)):
        for seed in (0, 1):
            returns = [base * 0.3 + seed, base * 0.6 + seed, base + 10 * seed]
            _write_run(
                str(root / str(job)),
                ["experiment=dqn_cartpole", f"seed={seed}", f"agent.learning_rate={rate}"],
                returns,
            )
            job += 1
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def _plot(*args):
    return subprocess.run([sys.executable, PLOT, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_plot_groups_by_the_varying_override_and_prints_final_table(sweep, tmp_path):
    out = tmp_path / "figures" / "curves.png"
    result = _plot(sweep, "--out", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC and out.stat().st_size > 5000
    lines = result.stdout.splitlines()
    assert lines[0] == "final evaluator/episode_return per group"
    assert lines[1].split()[:3] == ["agent.learning_rate", "runs", "mean"] and "IQM" in lines[1]
    rows = {line.split()[0]: line.split() for line in lines[3:5]}
    assert set(rows) == {"3e-4", "1e-3"}
    assert rows["1e-3"][1] == "2" and float(rows["1e-3"][2]) == pytest.approx(105.0)  # (100 + 110) / 2
    assert float(rows["3e-4"][2]) == pytest.approx(25.0)
    assert "4 runs in 2 groups" in result.stdout


def test_plot_hue_and_metric_options(sweep, tmp_path):
    out = tmp_path / "by_agent.png"
    result = _plot(sweep, "--out", out, "--hue", "agent", "--metric", "evaluator/learner_steps")
    assert result.returncode == 0, result.stderr
    assert "final evaluator/learner_steps per group" in result.stdout
    assert result.stdout.splitlines()[3].split()[:3] == ["dqn", "4", "750.0"]
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_plot_reports_missing_inputs_without_a_traceback(tmp_path):
    result = _plot(tmp_path / "missing", "--out", tmp_path / "x.png")
    assert result.returncode == 1 and "not a directory" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "empty").mkdir()
    result = _plot(tmp_path / "empty", "--out", tmp_path / "x.png")
    assert result.returncode == 1 and "no runs" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_runs_are_found_parsed_and_grouped(sweep):
    runs = find_runs([str(sweep)])
    assert [run.name for run in runs] == ["0", "1", "2", "3"]
    assert varying_keys(runs) == ["agent.learning_rate"]
    groups = group_runs(runs)
    assert list(groups) == ["3e-4", "1e-3"]  # Sorted by value.
    assert [run.setting("seed") for run in groups["1e-3"]] == ["0", "1"]
    assert group_runs(runs, "agent.n_step").keys() == {"3"}  # A config value.
    steps, values = runs[0].curve()
    assert steps.tolist() == [500, 1000, 1500] and values.tolist() == [30.0, 60.0, 100.0]
    table = final_table(groups)
    assert [row["group"] for row in table] == ["3e-4", "1e-3"] and table[1]["runs"] == 2


def test_iqm_and_intervals_are_rliables():
    """The table's statistics are rliable's, seeded: the IQM of 1..8 is the mean of 3..6, and the
    intervals are what rliable's stratified bootstrap gives from numpy's generator seeded 0."""
    from rliable import library, metrics

    values = np.array([1.0, 2.0, 3.0, 4.0, 8.0, 5.0, 6.0, 7.0])
    stats = summarize(values, reps=500)
    assert stats["runs"] == 8 and stats["mean"] == pytest.approx(4.5) and stats["iqm"] == pytest.approx(4.5)
    np.random.seed(0)
    _, expected = library.get_interval_estimates(
        {"x": values[:, None]},
        lambda scores: np.array([metrics.aggregate_mean(scores), metrics.aggregate_iqm(scores)]),
        reps=500,
    )
    assert [stats["mean_low"], stats["iqm_low"]] == pytest.approx(expected["x"][0])
    assert [stats["mean_high"], stats["iqm_high"]] == pytest.approx(expected["x"][1])
    assert 1.0 < stats["mean_low"] < 4.5 < stats["mean_high"] < 8.0
    assert summarize(values, reps=500) == stats  # The same runs, the same intervals.
    state = np.random.get_state()[1].copy()
    summarize(values, reps=50)
    assert (np.random.get_state()[1] == state).all()  # The caller's generator is left as it was.
    single = summarize([5.0])
    assert single["runs"] == 1 and single["mean_low"] == single["mean_high"] == 5.0


def test_curve_bands_resample_each_point():
    from rl.analysis import aggregate_curve

    steps = np.array([0.0, 1.0])
    curve = aggregate_curve(
        [(steps, np.array([0.0, 10.0])), (steps, np.array([2.0, 10.0])), (steps, np.array([4.0, 10.0]))]
    )
    assert curve["value"].tolist() == [2.0, 10.0]
    assert curve["low"][0] < 2.0 < curve["high"][0] and curve["low"][1] == curve["high"][1] == 10.0


OPTUNA_TRIALS = [
    (0.00012345678901234, 1, 250),
    (0.0023456789012345, 3, 1000),
    (0.00078901234567, 5, 100),
    (0.001, 3, 500),
]


@pytest.fixture
def optuna_sweep(tmp_path):
    """An Optuna sweep's jobs: three parameters per trial, learning rates as Optuna writes them."""
    root = tmp_path / "optuna"
    for job, (rate, n_step, period) in enumerate(OPTUNA_TRIALS):
        overrides = [
            "experiment=dqn_cartpole",
            f"agent.learning_rate={rate}",
            f"agent.n_step={n_step}",
            f"agent.target_update_period={period}",
        ]
        _write_run(str(root / str(job)), overrides, [10.0 + job, 50.0 + 10 * job, 100.0 + 20 * job])
    return root


def test_optuna_labels_are_rounded_and_the_legend_lies_outside_the_axes(optuna_sweep):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from rl.analysis import plot_curves

    runs = find_runs([str(optuna_sweep)])
    hue = ",".join(varying_keys(runs))
    groups = group_runs(runs, hue)
    assert list(groups) == [
        "learning_rate=0.000123, n_step=1, target_update_period=250",
        "learning_rate=0.000789, n_step=5, target_update_period=100",
        "learning_rate=0.001, n_step=3, target_update_period=500",
        "learning_rate=0.00235, n_step=3, target_update_period=1000",
    ]
    figure = plot_curves(groups, hue=hue)
    FigureCanvasAgg(figure).draw()
    renderer = figure.canvas.get_renderer()
    axes = figure.axes[0]
    legend, plot_area = axes.get_legend().get_window_extent(renderer), axes.get_window_extent(renderer)
    assert legend.x0 > plot_area.x1  # Beside the axes, not over the curves.
    for text in (axes.get_legend(), axes.title, axes.xaxis.label, axes.yaxis.label):  # Nothing cut.
        box = text.get_window_extent(renderer)
        assert (
            figure.bbox.x0 <= box.x0
            and box.x1 <= figure.bbox.x1
            and figure.bbox.y0 <= box.y0
            and box.y1 <= figure.bbox.y1
        )
    assert axes.get_legend().get_title().get_text() == "learning_rate, n_step, target_update_period"
    entries = [text.get_text() for text in axes.get_legend().get_texts()]
    assert entries == [label.replace(", ", "\n") for label in groups]  # One setting a line; n=1 said once.
    assert axes.get_title() == "evaluation return, one run per group"


def test_labels_keep_short_values_and_round_long_ones():
    from rl.analysis import short_keys, short_value

    assert [short_value(v) for v in ("1e-3", "3e-4", "0.25", "500", "3.14159", "0.00012345678", "2.5e-05", "dqn")] == [
        "1e-3",
        "3e-4",
        "0.25",
        "500",
        "3.14",
        "0.000123",
        "2.5e-05",
        "dqn",
    ]
    assert short_keys(["agent.learning_rate", "policy.learning_rate", "agent.n_step"]) == {
        "agent.learning_rate": "agent.learning_rate",
        "policy.learning_rate": "policy.learning_rate",
        "agent.n_step": "n_step",
    }


def test_an_unknown_hue_lists_the_keys_that_vary(sweep, tmp_path):
    result = _plot(sweep, "--out", tmp_path / "x.png", "--hue", "agent.learning_rat")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--hue agent.learning_rat: no run has this key" in result.stderr and "agent.learning_rate" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_run_without_hydra_directory_is_read_from_its_logs_and_summary(sweep, tmp_path):
    import shutil

    copy = tmp_path / "copied"
    for job in ("0", "2"):
        shutil.copytree(sweep / job, copy / job, ignore=shutil.ignore_patterns(".hydra"))
        summary = json.loads((copy / job / "summary.json").read_text())
        (copy / job / "summary.json").write_text(json.dumps({**summary, "agent": "sac" if job == "0" else "td3"}))
    runs = find_runs([str(copy)])
    assert [run.name for run in runs] == ["0", "2"] and all(run.overrides == {} for run in runs)
    assert list(group_runs(runs, "agent")) == ["sac", "td3"]
    result = _plot(copy, "--out", tmp_path / "agents.png", "--hue", "agent")
    assert result.returncode == 0, result.stderr
    assert "2 runs in 2 groups" in result.stdout and (tmp_path / "agents.png").read_bytes()[:8] == PNG_MAGIC


def test_the_table_gives_an_interval_for_every_group_of_two_runs_or_more():
    from rl.analysis import format_table

    rows = [{"group": "a", **summarize([1.0])}, {"group": "b", **summarize([1.0, 2.0, 3.0])}]
    lines = format_table(rows, hue="agent.learning_rate").splitlines()
    assert lines[3].split() == ["a", "1", "1.0", "-", "1.0", "-"]
    assert lines[4].split()[:4] == ["b", "3", "2.0", "[1.0,"]
    assert lines[5] == "CI: 95% percentile bootstrap over runs; - : a single run, no interval"
    assert "single run" not in format_table(rows[1:])
    two = format_table([{"group": "c", **summarize([1.0, 3.0])}]).splitlines()  # As --aggregate, an interval.
    assert two[3].split() == ["c", "2", "2.0", "[1.0,", "3.0]", "2.0", "[1.0,", "3.0]"]


def _write_many_seed_run(path, overrides, seeds_returns):
    """A launcher=anakin run of several seeds: the run's own files (its logs hold the
    mean) and one `seed_<i>/` per replica with its logs and summary (no .hydra/)."""
    mean = np.mean(seeds_returns, axis=0)
    _write_run(path, overrides, mean)
    seed = int(dict(item.split("=", 1) for item in overrides).get("seed", 0))
    for index, returns in enumerate(seeds_returns):
        replica = os.path.join(path, f"seed_{index}")
        os.makedirs(os.path.join(replica, "logs"))
        with open(os.path.join(replica, "logs", "evaluator.csv"), "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["actor_steps", "learner_steps", "episode_return"])
            for step, value in zip((500, 1000, 1500), returns):
                writer.writerow([step, step // 2, value])
        with open(os.path.join(replica, "summary.json"), "w") as file:
            json.dump({"final_eval_return": float(returns[-1]), "seed": seed + index, "agent": "ppo"}, file)


@pytest.fixture
def many_seed_sweep(tmp_path):
    """A multirun over two learning rates whose jobs each trained 3 seeds in one run."""
    root = tmp_path / "multirun"
    for job, (rate, base) in enumerate((("1e-3", 100.0), ("3e-4", 20.0))):
        seeds_returns = [[base * 0.3 + i, base * 0.6 + i, base + 10 * i] for i in range(3)]
        overrides = ["experiment=ppo_gymnax_cartpole", "launcher.num_seeds=3", "seed=5", f"agent.learning_rate={rate}"]
        _write_many_seed_run(str(root / str(job)), overrides, seeds_returns)
    return root


def test_a_many_seed_run_is_read_as_its_seeds(many_seed_sweep, tmp_path):
    """Each job's seed_<i>/ replicas are runs with the job's settings and their own seed;
    the job's mean logs are not a run of their own."""
    runs = find_runs([str(many_seed_sweep)])
    assert [os.path.relpath(run.path, many_seed_sweep) for run in runs] == [
        os.path.join(job, f"seed_{i}") for job in ("0", "1") for i in range(3)
    ]
    assert [run.setting("seed") for run in runs] == ["5", "6", "7"] * 2
    assert [run.setting("agent.learning_rate") for run in runs] == ["1e-3"] * 3 + ["3e-4"] * 3
    assert varying_keys(runs) == ["agent.learning_rate"]
    groups = group_runs(runs)
    assert {label: len(members) for label, members in groups.items()} == {"3e-4": 3, "1e-3": 3}
    assert find_runs([str(many_seed_sweep / "0")]) == runs[:3]  # One run directory: its seeds.

    out = tmp_path / "seeds.png"
    result = _plot(many_seed_sweep, "--out", out)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[3:5]}
    assert rows["1e-3"][1] == "3" and float(rows["1e-3"][2]) == pytest.approx(110.0)  # (100 + 110 + 120) / 3
    assert "6 runs in 2 groups" in result.stdout


RUN_DIRS = os.path.join(ROOT, "tests", "data", "run_dirs")  # What real tiny runs wrote (its README.md).


@pytest.mark.parametrize(
    "given, expected",
    [
        ("seeds", [f"seeds/seed_{i}" for i in range(4)]),  # A many-seed run: its replicas.
        ("sweep", [f"sweep/{job}/seed_{i}" for job in (0, 1) for i in (0, 1)]),  # Hydra's -m of such runs.
        ("grid", [f"grid/{job}" for job in range(4)]),  # hydra/launcher=anakin_grid: not its .grid/ records.
        ("grid/2", ["grid/2"]),  # One job: a single run.
        ("pbt", [f"pbt/0/seed_{i}" for i in range(4)]),  # hydra/sweeper=pbt: its population's members.
        ("pbt/0", [f"pbt/0/seed_{i}" for i in range(4)]),
    ],
)
def test_every_directory_a_run_or_sweep_writes_is_found(given, expected):
    runs = find_runs([os.path.join(RUN_DIRS, given)])
    assert [os.path.relpath(run.path, RUN_DIRS) for run in runs] == expected
    assert all(run.curve()[0].size == 4 for run in runs)  # Each has its evaluations.


def test_plot_draws_every_member_of_a_pbt_sweep_with_its_exchanges(tmp_path):
    """The fixture's population: member 3 took member 0's state at 8,192 and 24,576 actor steps, member 2 took
    member 1's at 16,384 (their pbt.csv rows whose copied_from is another member); 0 ends best, at 500."""
    out = tmp_path / "pbt.png"
    result = _plot(os.path.join(RUN_DIRS, "pbt"), "--out", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == PNG_MAGIC
    lines = result.stdout.splitlines()
    assert [line.split()[:4] for line in lines[3:7]] == [
        ["0", "0", "500.0", "0"],
        ["1", "1", "469.6", "0"],
        ["2", "2", "403.4", "1"],
        ["3", "3", "417.9", "2"],
    ]
    assert lines[7:11] == [
        "best: member 0 (500.0)",
        "exchanges (a member took another's learner state and explored from its values):",
        "at 8,192 actor steps: 3 took 0's state",
        "at 16,384 actor steps: 2 took 1's state",
    ]


def _exchange_markers(axes):
    """(x, y) of every exchange's diamond and the member named beside it."""
    diamonds = [line for line in axes.lines if line.get_marker() == "D"]
    points = [(float(line.get_xdata()[0]), float(line.get_ydata()[0])) for line in diamonds]
    return points, [text.get_text() for text in axes.texts]


def test_an_exchange_is_marked_on_the_curve_of_the_member_it_copied():
    from rl.analysis.population import plot_population, read_population

    members = read_population(find_runs([os.path.join(RUN_DIRS, "pbt")]))
    assert [(m.index, [(e.actor_steps, e.copied_from) for e in m.exchanges]) for m in members] == [
        (0, []),  # Its pbt.csv says copied_from 0 every round: it kept its own state.
        (1, []),
        (2, [(16384.0, 1)]),
        (3, [(8192.0, 0), (24576.0, 0)]),
    ]
    axes = _drawn(plot_population(members))
    curves = {m.index: dict(zip(*m.run.curve())) for m in members}
    points, names = _exchange_markers(axes)
    assert points == [(16384.0, curves[1][16384.0]), (8192.0, curves[0][8192.0]), (24576.0, curves[0][24576.0])]
    assert names == ["1", "0", "0"]
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["0: 500.0 (best)", "1: 469.6", "2: 403.4", "3: 417.9", "exchange (n: took\nmember n's state)"]
    assert axes.figure.get_suptitle() == "PPO on CartPole-v1: a PBT population of 4"


def test_a_tie_for_the_best_member_is_said(tmp_path):
    import shutil

    shutil.copytree(os.path.join(RUN_DIRS, "pbt"), tmp_path / "pbt")
    path = tmp_path / "pbt" / "0" / "seed_3" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "final_eval_return": 500.0}))
    result = _plot(tmp_path / "pbt", "--out", tmp_path / "pbt.png")
    assert result.returncode == 0, result.stderr
    assert "best: members 0, 3 tie at 500.0" in result.stdout.splitlines()


def test_a_population_is_one_run_s_members_and_hue_draws_groups_instead(tmp_path):
    from rl.analysis.population import read_population

    assert read_population(find_runs([os.path.join(RUN_DIRS, "seeds")])) is None  # Seeds are no population.
    both = find_runs([os.path.join(RUN_DIRS, "pbt"), os.path.join(RUN_DIRS, "seeds")])
    assert read_population(both) is None
    result = _plot(os.path.join(RUN_DIRS, "pbt"), "--out", tmp_path / "x.png", "--hue", "agent")
    assert result.returncode == 0 and "4 runs in 1 groups" in result.stdout


def _drawn(figure):
    """`figure` drawn (so that its layout and extents are final) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure).draw()
    return figure.axes[0]


def test_a_many_seed_run_is_titled_with_agent_and_environment_and_needs_no_legend():
    from rl.analysis import plot_curves

    runs = find_runs([os.path.join(RUN_DIRS, "seeds")])
    axes = _drawn(plot_curves(group_runs(runs)))
    assert axes.figure.get_suptitle() == "PPO on CartPole-v1"
    assert axes.get_title() == "evaluation return: the mean of the 4 runs, band: 95% bootstrap CI"
    assert axes.get_legend() is None and axes.get_ylabel() == "evaluation return"
    low, high = axes.get_ylim()
    assert low <= 22.7 and high >= 500.0  # A random policy's CartPole return and the best one are on the axis.


def test_a_learned_run_is_not_zoomed_into_a_collapse(tmp_path):
    """Returns between 440 and 500: the axis still shows them against a random policy's return, not 440-500."""
    from rl.analysis import plot_curves

    for seed in range(3):
        _write_run(str(tmp_path / str(seed)), [f"seed={seed}"], [495.0, 440.0 + seed, 500.0])
    axes = _drawn(plot_curves(group_runs(find_runs([str(tmp_path)]))))
    low, high = axes.get_ylim()
    assert low <= 22.7 and 500.0 <= high <= 530.0


def test_an_evaluation_at_step_0_is_drawn_and_the_axis_starts_there(tmp_path):
    from rl.analysis import plot_curves

    for seed in range(2):
        _write_run(str(tmp_path / str(seed)), [f"seed={seed}"], [20.0 + seed, 200.0, 480.0], steps=(0, 500, 1000))
    axes = _drawn(plot_curves(group_runs(find_runs([str(tmp_path)]))))
    steps, values = axes.lines[0].get_data()
    assert steps[0] == 0.0 and values[0] == pytest.approx(20.5) and axes.get_xlim()[0] == 0.0


def test_a_grid_legend_is_compact_and_its_table_has_every_interval(tmp_path):
    from rl.analysis import plot_curves

    runs = find_runs([os.path.join(RUN_DIRS, "grid")])
    hue = ",".join(varying_keys(runs))
    axes = _drawn(plot_curves(group_runs(runs, hue), hue=hue))
    legend = axes.get_legend()
    assert legend.get_title().get_text() == "learning_rate, entropy_cost"
    assert [text.get_text() for text in legend.get_texts()][0] == "learning_rate=0.0003\nentropy_cost=0"
    renderer = axes.figure.canvas.get_renderer()
    assert legend.get_window_extent(renderer).width < 0.3 * axes.figure.bbox.width
    result = _plot(os.path.join(RUN_DIRS, "sweep"), "--out", tmp_path / "sweep.png")  # Two seeds a group.
    rows = [line.split() for line in result.stdout.splitlines()[3:5]]
    assert [row[1] for row in rows] == ["2", "2"] and all(row[3].startswith("[") for row in rows), result.stdout
