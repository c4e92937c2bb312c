"""Experiment tracking: W&B runs of a multirun, crashed runs, secrets, run names, progress bar."""

from __future__ import annotations

import glob
import io
import json
import os
import re
import subprocess
import sys

import pytest
import rich
import yaml
from rich.console import Console

from conftest import ROOT, read_summary, read_wandb_offline_run, run_train
from rl.experiments.summary import ProgressDisplay
from rl.loggers import DefaultLoggerFactory
from rl.loggers.wandb import REDACTED, WandbRun, git_state, redact_secrets

FAKE_KEY = "fake0wandb0api0key0" + "7f3a9c1e5b2d4f6a8c0e1d3b5f7a9c1e"
TINY = ["max_actor_steps=1000", "eval_every=500", "eval_episodes=2", "agent.min_replay_size=200", "progress=false"]


def _metric_definitions(run_dir: str) -> dict[str, str]:
    """glob or metric name -> step metric, from the define_metric records of the offline run."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    store = datastore.DataStore()
    store.open_for_scan(path)
    definitions = {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "metric":
            definitions[record.metric.glob_name or record.metric.name] = record.metric.step_metric
    return definitions


def _run_tags_and_summary(run_dir: str) -> tuple[list[str], dict]:
    """The tags and the summary metrics set on the offline run under `run_dir`."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    store = datastore.DataStore()
    store.open_for_scan(path)
    tags, summary = [], {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            tags = list(record.run.tags)
        elif kind == "summary":
            summary.update({item.key: json.loads(item.value_json) for item in record.summary.update})
    return tags, summary


def _files_containing(directory: str, needle: str) -> list[str]:
    hits = []
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as file:
                if needle.encode() in file.read():
                    hits.append(path)
    return hits


@pytest.mark.reverb
def test_multirun_of_two_seeds_makes_two_wandb_runs_in_one_group_and_leaks_no_secret(tmp_path):
    sweep = tmp_path / "sweep_dqn_seeds"
    homes = {name: str(tmp_path / name) for name in ("wandb_cache", "wandb_config", "wandb_data")}
    result = run_train(
        ["-m", "experiment=dqn_cartpole", "seed=0,1", "logger=wandb", *TINY, f"hydra.sweep.dir={sweep}"],
        timeout=900,
        env={
            "WANDB_API_KEY": FAKE_KEY,
            "WANDB_CACHE_DIR": homes["wandb_cache"],
            "WANDB_CONFIG_DIR": homes["wandb_config"],
            "WANDB_DATA_DIR": homes["wandb_data"],
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = {seed: read_wandb_offline_run(str(sweep / str(seed))) for seed in (0, 1)}
    with open(os.path.join(ROOT, "conf", "experiment", "dqn_cartpole.yaml")) as file:
        preset = yaml.safe_load(file)
    # What the jobs share (the preset and its environment), the sweep directory's name and this
    # sweep's id (a default sweep directory gives its date and time instead).
    (group,) = {run["group"] for run in runs.values()}
    assert re.fullmatch(r"dqn_cartpole-CartPole-v1-sweep_dqn_seeds-[0-9a-f]{6}", group), group
    assert len({run["name"] for run in runs.values()}) == 2
    for seed, run in runs.items():
        # Job `seed` of the sweep: its number ends the name, its tags are what the sweep varies.
        assert re.fullmatch(rf"CartPole-v1__dqn__{seed}__\d{{8}}_\d{{6}}__{seed}", run["name"]), run["name"]
        assert run["tags"] == [f"seed={seed}"]
        config = run["config"]
        assert config["choices"]["experiment"] == "dqn_cartpole" and config["choices"]["agent"] == "dqn"
        assert config["choices"]["launcher"] == "local" and config["choices"]["environment"] == "cartpole"
        # The resolved composed config (the preset's values, the command line's overrides).
        assert config["seed"] == seed and config["max_actor_steps"] == 1000
        assert config["agent"]["n_step"] == preset["agent"]["n_step"]  # From the preset ...
        assert config["agent"]["min_replay_size"] == 200  # ... and from the command line.
        assert config["environment"]["name"] == "CartPole-v1"
        assert re.fullmatch(r"[0-9a-f]{40}", config["git"]["commit"]) and isinstance(config["git"]["dirty"], bool)
        keys = {key for row in run["history"] for key in row}
        assert {"actor/episode_return", "learner/td_error", "evaluator/episode_return"} <= keys
        assert not {key for key in keys if "/" not in key and not key.startswith("_")} - {"actor_steps"}
        evaluations = [row for row in run["history"] if "evaluator/episode_return" in row]
        assert [row["actor_steps"] for row in evaluations] == [0, 500, 1000]
        summary = read_summary(str(sweep / str(seed)))
        assert evaluations[-1]["evaluator/episode_return"] == pytest.approx(summary["final_eval_return"])
        assert run["exit_code"] == 0  # finished
        tags, results = _run_tags_and_summary(str(sweep / str(seed)))
        assert tags == [f"seed={seed}"]  # What the sweep varies (not experiment=, logger=, hydra.*).
        # The run's results are its summary metrics.
        assert results["final_eval_return"] == pytest.approx(summary["final_eval_return"])
        assert results["best_eval_return"] == pytest.approx(summary["best_eval_return"])
        assert results["status"] == "finished" and results["actor_steps_per_second"] > 0
        definitions = _metric_definitions(str(sweep / str(seed)))
        for label in ("actor", "learner", "evaluator"):
            assert definitions.get(f"{label}/*") == "actor_steps", definitions
    # No file the sweep wrote (configs, logs, wandb files, caches) holds the API key.
    for directory in (str(sweep), *homes.values()):
        assert _files_containing(directory, FAKE_KEY) == []
    assert FAKE_KEY not in result.stdout + result.stderr
    # W&B is quiet by default (logger.wandb.quiet): a few start lines per job, no end-of-run block.
    wandb_lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("wandb:")]
    assert len(wandb_lines) <= 4 * 2 and not any("Run summary" in line for line in wandb_lines), wandb_lines
    # And the sweep plots.
    plot = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "plot.py"), str(sweep), "--out", str(sweep / "curves.png")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plot.returncode == 0, plot.stderr
    assert (sweep / "curves.png").stat().st_size > 1000


@pytest.mark.reverb
def test_run_that_raises_is_marked_crashed_in_wandb(run_dir):
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "checkpoints"), "w") as file:  # The end-of-run save fails.
        file.write("not a directory\n")
    result = run_train(
        [
            "logger=wandb",
            "max_actor_steps=600",
            "eval_every=300",
            "eval_episodes=1",
            "agent.min_replay_size=200",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=600,
    )
    assert result.returncode != 0
    run = read_wandb_offline_run(run_dir)
    assert run["exit_code"] not in (None, 0)  # W&B shows it as failed/crashed, not finished.
    assert any("evaluator/episode_return" in row for row in run["history"])
    assert not os.path.exists(os.path.join(run_dir, "summary.json"))


def test_bad_wandb_mode_is_a_config_error(run_dir):
    result = run_train(["logger=wandb", "logger.wandb.mode=sometimes", f"hydra.run.dir={run_dir}"], timeout=300)
    assert result.returncode == 2
    assert "logger" in result.stderr and "mode" in result.stderr and "Traceback" not in result.stderr
    assert not os.path.exists(os.path.join(run_dir, "wandb"))


def test_factory_names_and_groups_the_run(tmp_path):
    settings = {"project": "p", "entity": None, "group": None, "tags": ["a"], "mode": "disabled", "name": None}
    factory = DefaultLoggerFactory(
        terminal=False,
        csv=False,
        wandb=settings,
        directory=str(tmp_path / "logs"),
        run_name="CartPole-v1__dqn__0__20240101_000000",
        run_config={"seed": 0},
        run_group="sweep_a",
    )
    assert factory.wandb_run.name == "CartPole-v1__dqn__0__20240101_000000"
    assert factory.wandb_run.group == "sweep_a"
    explicit = DefaultLoggerFactory(
        terminal=False,
        csv=False,
        wandb={**settings, "group": "mine", "name": "n"},
        directory=str(tmp_path / "logs"),
        run_name="default",
        run_group="sweep_a",
    )
    assert (explicit.wandb_run.group, explicit.wandb_run.name) == ("mine", "n")
    factory.close(exit_code=0)
    factory.close(exit_code=1)  # Idempotent.


def test_wandb_run_rejects_unknown_modes():
    with pytest.raises(ValueError, match="mode"):
        WandbRun(project="p", mode="sometimes")


def test_secrets_are_redacted_from_run_config(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    config = {
        "logger": {"wandb": {"api_key": "abc123", "project": "p"}, "token": None},
        "notes": f"key={FAKE_KEY}",
        "list": [{"password": "hunter2"}, "plain"],
        "agent": {"learning_rate": 0.001},
    }
    clean = redact_secrets(config)
    assert clean["logger"]["wandb"] == {"api_key": REDACTED, "project": "p"}
    assert clean["logger"]["token"] is None
    assert clean["notes"] == f"key={REDACTED}"
    assert clean["list"] == [{"password": REDACTED}, "plain"]
    assert clean["agent"] == {"learning_rate": 0.001}
    run = WandbRun(project="p", mode="disabled", config=config)
    assert FAKE_KEY not in json.dumps(run.config) and "hunter2" not in json.dumps(run.config)


def test_git_state_names_the_checked_out_commit():
    state = git_state(ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert state is not None and state["commit"] == head and isinstance(state["dirty"], bool)
    assert git_state("/") is None


def test_progress_bar_shows_steps_rate_eval_and_eta_on_a_terminal(monkeypatch):
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=True, width=160))
    with ProgressDisplay(1000, refresh_every=100) as progress:
        for step in range(1, 1001):
            if step == 500:
                progress.update(eval_return=123.5, episode_return=42.0)
            progress.advance(step)
    text = output.getvalue()
    assert "steps" in text and "1000/1000" in text and "/s" in text
    assert "123.5" in text and "42.0" in text
    assert re.search(r"\d+:\d\d:\d\d", text)  # Time remaining.


def _screen_lines(text: str) -> list[str]:
    """The lines a terminal shows of rich's output (escape sequences removed)."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_progress_bar_fits_80_columns_and_shows_a_dash_before_the_first_evaluation(monkeypatch):
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=True, width=80))
    with ProgressDisplay(1_000_000, refresh_every=250_000) as progress:
        progress.advance(250_000)
        before = _screen_lines(output.getvalue())
        progress.update(episode_return=-1234.5, eval_return=-1500.25)
        progress.advance(1_000_000)
    lines = _screen_lines(output.getvalue())
    assert "nan" not in output.getvalue()
    assert re.search(r"return +- +eval +- ", before[-1]), before[-1]
    assert "1000000/1000000" in lines[-1] and "return -1234.5" in lines[-1] and "eval -1500.2" in lines[-1]
    assert max(len(line) for line in lines) <= 80, lines


def test_progress_bar_is_quiet_when_output_is_not_a_terminal(monkeypatch):
    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False))
    with ProgressDisplay(100, refresh_every=10) as progress:
        assert not progress.enabled
        for step in range(1, 101):
            progress.advance(step)
    assert output.getvalue() == ""
