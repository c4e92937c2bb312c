"""What a researcher reads: terminal records, train.log lines, W&B namespaces, groups and tags."""

from __future__ import annotations

import io
import logging
import os
import re

import rich
from hydra import compose, initialize_config_dir
from rich.console import Console

from conftest import ROOT
from rl.experiments.make_experiment import tracking_settings
from rl.loggers.base import ConsoleFormatter, TerminalLogger, console_prefixed, format_number, format_record
from rl.loggers.wandb import default_group, node_metrics, override_tags, summary_metrics

RECORD = {
    "wall_time_s": 8.768123,
    "learner_steps": 221,
    "steps_per_second": 224.0,
    "episode_return": 39.0,
    "actor_id": 0,
    "actor_episodes": 138,
    "td_error": 0.0123456,
    "actor_steps": 1709,
    "episode_length": 39,
}
LINE = (
    "[actor 0] actor_steps=1709 episode_length=39 episode_return=39 steps_per_second=224 td_error=0.0123 "
    "actor_episodes=138 learner_steps=221 wall_time_s=8.768"
)


def test_numbers_are_rounded_for_reading():
    cases = {
        1709: "1709",
        224.0: "224",
        15.137: "15.14",
        0.38374: "0.384",
        1.2e-05: "1.2e-05",
        123456.7: "123457",
        -0.5: "-0.5",
        float("nan"): "nan",
        True: "True",
        "done": "done",
    }
    assert {value: format_number(value) for value in cases} == cases


def test_a_record_is_one_line_in_a_stable_order_whatever_the_insertion_order():
    assert format_record("actor 0", RECORD, hidden=("actor_id",)) == LINE
    assert format_record("actor 0", dict(reversed(list(RECORD.items()))), hidden=("actor_id",)) == LINE


def test_piped_output_is_one_plain_line_per_record_and_goes_to_the_transcript(monkeypatch, caplog):
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False, width=80))
    logger = TerminalLogger("actor", 0)
    with caplog.at_level(logging.INFO, logger="rl.transcript"):
        logger.write(RECORD)
        logger.write({**RECORD, "actor_steps": 1800})
    assert output.getvalue() == LINE + "\n" + LINE.replace("1709", "1800", 1) + "\n"  # Longer than 80: not wrapped.
    assert [record.getMessage() for record in caplog.records if record.name == "rl.transcript"] == [
        LINE,
        LINE.replace("1709", "1800", 1),
    ]


def test_a_jobs_prefix_starts_its_records_and_messages_on_the_terminal_only_while_it_runs(monkeypatch, caplog):
    """The console handler's prefix (a multirun job's number) starts every terminal line: the records' and the
    libraries' messages alike; train.log's copy has none, and the prefix ends with the job."""
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False, width=200))
    console = logging.StreamHandler(io.StringIO())
    console.setFormatter(ConsoleFormatter(fmt="%(message)s"))
    console.addFilter(lambda record: record.name != "rl.transcript")  # As in rl.yaml: train.log's only.
    root = logging.getLogger()
    root.addHandler(console)
    try:
        with caplog.at_level(logging.INFO, logger="rl.transcript"):
            with console_prefixed("[job 3] "):
                TerminalLogger("actor", 0).write(RECORD)
                logging.getLogger("rl.test").warning("a library's message")
            TerminalLogger("actor", 0).write(RECORD)
    finally:
        root.removeHandler(console)
    assert output.getvalue().splitlines() == ["[job 3] " + LINE, LINE]
    assert console.stream.getvalue().splitlines() == ["[job 3] [warning] a library's message"]
    assert [record.getMessage() for record in caplog.records if record.name == "rl.transcript"] == [LINE, LINE]


def test_a_terminal_line_keeps_to_its_width_with_the_steps_and_headline_first(monkeypatch, caplog):
    """Fields past the width are left out and counted (CSV and W&B keep them); train.log holds the same line."""
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False, width=200))
    with caplog.at_level(logging.INFO, logger="rl.transcript"):
        TerminalLogger("actor", 0, width=105).write(RECORD)
        TerminalLogger("actor", 0, width=len(LINE)).write(RECORD)
    short, whole = output.getvalue().splitlines()
    assert (
        short
        == "[actor 0] actor_steps=1709 episode_length=39 episode_return=39 steps_per_second=224 wall_time_s=8.768 +3"
    )
    assert whole == LINE  # It fits: nothing left out.
    assert [record.getMessage() for record in caplog.records if record.name == "rl.transcript"] == [short, whole]


def test_a_terminal_wraps_between_pairs_never_inside_one(monkeypatch):
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=True, width=60))
    TerminalLogger("actor", 0).write(RECORD)
    lines = [line.rstrip() for line in re.sub(r"\x1b\[[0-9;]*m", "", output.getvalue()).splitlines()]
    assert len(lines) > 1 and lines[0].startswith("[actor 0] actor_steps=1709")
    assert all(re.match(r"^[a-z_]+=\S+( [a-z_]+=\S+)*$", line) for line in lines[1:]), lines
    assert " ".join(lines) == LINE


def test_each_wandb_namespace_holds_its_own_metrics_and_counts():
    assert node_metrics("actor", RECORD) == {
        "wall_time_s": 8.768123,
        "steps_per_second": 224.0,
        "episode_return": 39.0,
        "actor_episodes": 138,
        "td_error": 0.0123456,
        "episode_length": 39,
    }
    learner = {"actor_steps": 5, "actor_episodes": 1, "learner_steps": 7, "td_error": 1.5, "wall_time_s": 1.0}
    assert node_metrics("learner", learner) == {"learner_steps": 7, "td_error": 1.5, "wall_time_s": 1.0}
    evaluator = {
        "actor_steps": 5,
        "evaluator_id": 1,
        "evaluator_steps": 9,
        "evaluator_episodes": 2,
        "learner_steps": 3,
        "episode_return": 4.0,
        "episodes": 2,
    }
    assert node_metrics("evaluator", evaluator) == {
        "evaluator_steps": 9,
        "evaluator_episodes": 2,
        "episode_return": 4.0,
        "episodes": 2,
    }


def test_summary_metrics_are_the_run_results_that_are_known():
    summary = {
        "final_eval_return": 500.0,
        "best_eval_return": 500.0,
        "actor_steps_per_second": 812.5,
        "time_to_threshold_s": None,
        "steps_to_threshold": None,
        "eval_returns": [[5, 1.0]],
        "status": "finished",
        "agent": "dqn",
        "wall_time_s": float("nan"),
    }
    assert summary_metrics(summary) == {
        "final_eval_return": 500.0,
        "best_eval_return": 500.0,
        "actor_steps_per_second": 812.5,
        "status": "finished",
    }


def test_default_group_reads_the_date_and_time_of_the_sweep_directory():
    assert default_group("multirun/2024-05-01/19-09-19", ["dqn_cartpole", "CartPole-v1"]) == (
        "dqn_cartpole-CartPole-v1-2024-05-01-19-09-19"
    )
    assert default_group("/abs/multirun/2024-05-02/19-09-19/", ["sac"]) == "sac-2024-05-02-19-09-19"
    assert default_group("sweeps/lr_search", ["dqn", "ALE/Pong-v5"]) == "dqn-ALE-Pong-v5-lr_search"
    assert override_tags(["seed=1", "hydra.sweep.dir=x", "agent.learning_rate=0.001", "+x=" + "y" * 80]) == [
        "seed=1",
        "agent.learning_rate=0.001",
        "+x=" + "y" * 60 + "…",
    ]


def _hydra_config(sweep_dir: str, overrides: list[str], mode: str = "MULTIRUN"):
    with initialize_config_dir(config_dir=os.path.join(ROOT, "conf"), version_base="1.3"):
        config = compose(
            "config",
            overrides=[*overrides, f"hydra.sweep.dir={sweep_dir}", f"hydra.mode={mode}"],
            return_hydra_config=True,
        )
    hydra_config = config.hydra
    hydra_config.overrides.task = overrides
    return hydra_config, config


def test_multirun_groups_carry_the_date_and_leave_out_what_the_sweep_varies(tmp_path):
    day_one, config = _hydra_config(
        str(tmp_path / "multirun/2024-05-01/19-09-19"), ["experiment=dqn_cartpole", "seed=1"]
    )
    day_two, _ = _hydra_config(str(tmp_path / "multirun/2024-05-02/19-09-19"), ["experiment=dqn_cartpole", "seed=1"])
    first, second = tracking_settings(day_one, config), tracking_settings(day_two, config)
    assert first == {
        "run_group": "dqn_cartpole-CartPole-v1-2024-05-01-19-09-19",
        "run_tags": [],  # The sweep varies nothing here: no tag.
        "job_number": None,
    }
    assert second["run_group"] == "dqn_cartpole-CartPole-v1-2024-05-02-19-09-19"
    # A sweep over agents: every job shares the group, which names no agent.
    sweep = tmp_path / "multirun/2024-05-03/08-00-00"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task: ['agent=sac,td3', 'environment=pendulum', 'seed=0,1']\n"
    )
    groups = set()
    for agent in ("sac", "td3"):
        job, job_config = _hydra_config(str(sweep), [f"agent={agent}", "environment=pendulum", "seed=0"])
        settings = tracking_settings(job, job_config)
        groups.add(settings["run_group"])
        assert settings["run_tags"] == [f"agent={agent}", "seed=0"]  # What the sweep varies, no more.
    assert groups == {"Pendulum-v1-2024-05-03-08-00-00"}
    single, single_config = _hydra_config(str(tmp_path / "unused"), ["seed=3", "logger=wandb"], mode="RUN")
    assert tracking_settings(single, single_config) == {"run_group": None, "run_tags": ["seed=3"], "job_number": None}


def test_two_sweeps_in_directories_of_one_name_get_two_groups(tmp_path):
    """A sweep directory without a date and time: its name and the sweep's id (the directory
    and when its multirun.yaml was written) make the group, so a second sweep there gets another."""
    sweep = tmp_path / "lr_search"
    sweep.mkdir()
    groups = []
    for stamp in (1_000_000_000, 2_000_000_000):
        (sweep / "multirun.yaml").write_text("hydra: {}\n")
        os.utime(sweep / "multirun.yaml", ns=(stamp, stamp))
        job, config = _hydra_config(str(sweep), ["experiment=dqn_cartpole", "seed=1"])
        groups.append(tracking_settings(job, config)["run_group"])
    assert all(re.fullmatch(r"dqn_cartpole-CartPole-v1-lr_search-[0-9a-f]{6}", group) for group in groups), groups
    assert groups[0] != groups[1]


LEARNER_RECORD = {"td_error": 0.5, "actor_episodes": 3, "learner_steps": 7, "actor_steps": 1400, "wall_time_s": 2.0}


def test_the_steps_key_leads_the_terminal_line_and_the_csv_columns(tmp_path, monkeypatch):
    import csv

    from rl.loggers import DefaultLoggerFactory

    assert format_record("learner", LEARNER_RECORD, steps_key="learner_steps") == (
        "[learner] learner_steps=7 actor_steps=1400 td_error=0.5 actor_episodes=3 wall_time_s=2"
    )
    assert format_record("learner", LEARNER_RECORD) == (
        "[learner] actor_steps=1400 td_error=0.5 actor_episodes=3 learner_steps=7 wall_time_s=2"
    )
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False, width=80))
    factory = DefaultLoggerFactory(terminal=True, csv=True, directory=str(tmp_path), terminal_time_delta=0)
    factory("learner", "learner_steps").write(LEARNER_RECORD)
    factory("evaluator", "actor_steps", 1).write({"evaluator_id": 1, "episode_return": 4.0, "actor_steps": 1400})
    factory.close()
    assert output.getvalue().splitlines()[0].startswith("[learner] learner_steps=7 actor_steps=1400 ")
    with open(tmp_path / "learner.csv") as file:
        assert next(csv.reader(file)) == ["learner_steps", "actor_steps", "td_error", "actor_episodes", "wall_time_s"]
    with open(tmp_path / "evaluator.csv") as file:
        assert next(csv.reader(file)) == ["actor_steps", "evaluator_id", "episode_return", "wall_time_s"]


def test_wandb_keeps_the_steps_key_in_its_namespace_and_plots_every_node_against_actor_steps():
    from rl.loggers.wandb import step_metric

    # The learner's records carry actor_steps: its curves share the other nodes' x-axis.
    assert step_metric("learner", LEARNER_RECORD, "learner_steps") == "actor_steps"
    assert node_metrics("learner", LEARNER_RECORD, "learner_steps") == {
        "td_error": 0.5,
        "learner_steps": 7,
        "wall_time_s": 2.0,
    }
    # A node whose steps key is another node's count keeps it in its namespace ...
    assert node_metrics("critic", {"learner_steps": 3, "loss": 1.0, "actor_steps": 9}, "learner_steps") == {
        "learner_steps": 3,
        "loss": 1.0,
    }
    # ... and a logger used without the run's counter is plotted against its own steps key.
    assert step_metric("learner", {"learner_steps": 7, "loss": 1.0}, "learner_steps") == "learner/learner_steps"
    assert step_metric("actor", {"episode_return": 1.0}) == "actor_steps"


def test_a_sweep_quiets_the_libraries_its_sweeper_pulls_in(tmp_path):
    from omegaconf import OmegaConf

    from rl.library_output import quiet_libraries

    config = OmegaConf.create(
        {"hydra": {"sweeper": {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"}}}
    )
    quiet_libraries().on_multirun_start(config)
    import optuna

    assert logging.getLogger("alembic").level == logging.WARNING
    assert optuna.logging.get_verbosity() == optuna.logging.WARNING
    # The job logging registers the callback (it is packaged at `hydra`).
    hydra_config, _ = _hydra_config(str(tmp_path / "sweep"), ["seed=1"])
    assert hydra_config.callbacks.quiet_libraries._target_ == "rl.library_output.quiet_libraries"
    assert hydra_config.job_logging.loggers["rl.transcript"].handlers == ["transcript"]
