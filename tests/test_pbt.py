"""Population-based training (rl/sweeps/pbt.py, `launcher.pbt`, hydra/sweeper=pbt): the exchange's rules
pinned on numbers, the learner state a member inherits, records and checkpoints of a real population run,
and the sweeper from the command line."""

from __future__ import annotations

import csv
import json
import os
import re
from typing import Any, NamedTuple

import numpy as np
import pytest

from conftest import read_summary, run_train
from rl.anakin.programs import inherit
from rl.sweeps.pbt import (
    Hyperparameter,
    PbtSettings,
    Population,
    exploit_explore,
    initial_values,
    rounded,
    significant_digits,
)
from rl.sweeps.pbt_sweep import comma_list_notes, result_lines
from rl.experiments.validation import ConfigError

LEARNING_RATE = Hyperparameter(low=1e-4, high=1e-2, log=True)


def settings(**changes: Any) -> PbtSettings:
    rules = dict(space={"agent.learning_rate": LEARNING_RATE}, resample_probability=0.0) | changes
    return PbtSettings(**rules)


# --------------------------------------------------------------------------- the rules


def test_the_bottom_quarter_copies_the_top_quarter_and_perturbs_its_values():
    """Eight members, fraction 0.25: the two worst (a NaN ranks last) each take one of the two best as
    parent and the parent's value times 0.8 or 1.2; the others are their own parents and keep theirs."""
    fitness = np.array([5.0, 1.0, 3.0, np.nan, 4.0, 2.0, 0.0, 6.0])
    values = {"agent.learning_rate": np.linspace(1e-3, 8e-3, 8).astype(np.float32)}
    parents, new = exploit_explore(fitness, values, settings(), step=128)
    bottom = [3, 6]
    assert [int(p) for i, p in enumerate(parents) if i not in bottom] == [0, 1, 2, 4, 5, 7]
    assert {int(parents[i]) for i in bottom} <= {7, 0}
    for child in bottom:
        ratio = new["agent.learning_rate"][child] / values["agent.learning_rate"][parents[child]]
        assert min(abs(ratio - 0.8), abs(ratio - 1.2)) < 1e-6
    kept = [i for i in range(8) if i not in bottom]
    np.testing.assert_array_equal(new["agent.learning_rate"][kept], values["agent.learning_rate"][kept])
    again = exploit_explore(fitness, values, settings(), step=128)
    np.testing.assert_array_equal(again[0], parents)  # The draws are (seed, step)'s alone.
    np.testing.assert_array_equal(again[1]["agent.learning_rate"], new["agent.learning_rate"])


def test_exploring_stays_in_the_space():
    """A perturbed value is clipped to its interval; a choice moves to a neighbour; resampling draws from the
    space; one member of two is the bottom one."""
    interval = Hyperparameter(low=0.1, high=0.2)
    assert interval.perturbed(0.19, 1.2) == 0.2
    assert interval.perturbed(0.11, 0.8) == 0.1
    choice = Hyperparameter(choices=(0.9, 0.99, 0.999))
    assert choice.perturbed(0.99, 1.2) == 0.999
    assert choice.perturbed(0.99, 0.8) == 0.9
    assert choice.perturbed(0.999, 1.2) == 0.999
    rules = settings(space={"agent.entropy_cost": interval}, resample_probability=1.0)
    parents, new = exploit_explore(np.array([1.0, 2.0]), {"agent.entropy_cost": np.array([0.5, 0.5])}, rules, 7)
    assert list(parents) == [1, 1] and 0.1 <= new["agent.entropy_cost"][0] <= 0.2
    assert new["agent.entropy_cost"][1] == 0.5


def test_initial_values_are_drawn_from_the_space_with_the_seed():
    first = initial_values(settings(), 64)["agent.learning_rate"]
    assert first.dtype == np.float32 and first.min() >= 1e-4 and first.max() <= 1e-2
    assert (first < 1e-3).sum() > 16  # Log-uniform: half of the draws below the geometric middle.
    np.testing.assert_array_equal(first, initial_values(settings(), 64)["agent.learning_rate"])
    assert not np.array_equal(first, initial_values(settings(seed=1), 64)["agent.learning_rate"])


class Learner(NamedTuple):
    params: dict
    key: np.ndarray


class State(NamedTuple):
    learner: Learner
    environment: np.ndarray


def test_a_member_inherits_the_learner_state_but_keeps_its_keys_and_environments():
    state = State(Learner({"w": np.arange(3.0)}, np.array([[0, 10], [1, 11], [2, 12]])), np.arange(3) + 100)
    taken = inherit(state, np.array([0, 0, 2]))
    np.testing.assert_array_equal(taken.learner.params["w"], [0.0, 0.0, 2.0])
    np.testing.assert_array_equal(taken.learner.key, state.learner.key)
    np.testing.assert_array_equal(taken.environment, state.environment)


def test_lineage_follows_the_learner_state():
    """A member that copies another takes the other's lineage and adds the exchange; checkpointed state
    round-trips; the best member is the best final return."""
    population = Population.start(settings(fraction=0.5), 2)
    parents = population.exchange(64, np.array([1.0, 0.0]))
    assert list(parents) == [0, 0]
    lineage = population.lineage[1]
    assert [(e["actor_steps"], e["member"], e["copied_from"]) for e in lineage] == [(0, 0, 0), (64, 1, 0)]
    assert lineage[1]["values"] == population.values_of(1)
    restored = Population.start(settings(fraction=0.5), 2)
    restored.restore(json.loads(json.dumps(population.state())))
    assert restored.lineage == population.lineage
    np.testing.assert_array_equal(restored.values["agent.learning_rate"], population.values["agent.learning_rate"])
    assert restored.best([1.0, 3.0])["best_member"] == 1 and restored.best([1.0, 3.0])["schedule"] == lineage


def test_records_give_values_without_float32_noise():
    """A member holds float32 (0.001 is 0.0010000000474974513); its records, schedule and best values give
    6 significant digits, or as many as the user's numbers have where more."""
    assert rounded(np.float32(0.001)) == 0.001 and rounded(np.float32(0.000120766657)) == 0.000120767
    assert [significant_digits(v) for v in (0.001, 0.00125, 0.0, 0.9999999)] == [1, 3, 1, 7]
    space = {"agent.learning_rate": LEARNING_RATE, "agent.discount": Hyperparameter(choices=(0.99, 0.9999999))}
    population = Population(settings(space=space), {}, [[], []])
    population.values = {
        "agent.learning_rate": np.array([0.001, 0.00234567891], np.float32),
        "agent.discount": np.array([0.99, 0.9999999], np.float32),
    }
    assert population.values_of(0) == {"agent.learning_rate": 0.001, "agent.discount": 0.99}
    assert population.values_of(1) == {"agent.learning_rate": 0.00234568, "agent.discount": 0.9999999}
    assert population.best([1.0, 2.0])["values"] == population.values_of(1)


def test_a_record_says_whether_a_member_kept_its_own_state():
    """pbt.csv's `kept`: 1 where copied_from is the member itself (no exchange for it this round), 0 where it
    took copied_from's learner state."""
    population = Population.start(settings(fraction=0.5), 2)
    parents = population.exchange(64, np.array([1.0, 0.0]))
    assert [population.record(member, int(parent))["kept"] for member, parent in enumerate(parents)] == [1, 0]
    assert population.record(1, 0)["copied_from"] == 0


def test_a_tie_for_best_is_said():
    population = Population.start(settings(), 4)
    best = population.best([500.0, 2.0, 500.0, np.nan])
    assert best["best_member"] == 0 and [entry["member"] for entry in best["tied"]] == [0, 2]
    assert best["tied"][1]["values"] == population.values_of(2)
    assert "tied" not in population.best([1.0, 2.0, 3.0, np.nan])
    assert "tied" not in population.best([np.nan] * 4)


def write_sweep_summary_of(tmp_path, pbt: dict[str, Any]) -> str:
    sweep = str(tmp_path)
    summary = {"run_directory": f"{sweep}/0", "status": "finished", "pbt": pbt, "population": 8}
    with open(os.path.join(sweep, "summary.json"), "w") as file:
        json.dump(summary, file)
    return sweep


def test_the_sweeps_end_names_the_winner_and_its_values(tmp_path):
    values = {"agent.learning_rate": 0.000120767, "agent.entropy_cost": 0.01}
    sweep = write_sweep_summary_of(tmp_path, {"best_member": 2, "final_eval_return": 117.0, "values": values})
    assert result_lines(sweep) == [
        "Best of 8 PBT members: member 2 at 117.0 (final_eval_return), ending with agent.learning_rate=0.000120767 "
        f"agent.entropy_cost=0.01; its run: {sweep}/0/seed_2",
        f"Its schedule of hyperparameters: {sweep}/summary.json; every member's history: "
        f"{sweep}/0/seed_<member>/logs/pbt.csv",
    ]
    tied = [{"member": 2, "values": values}, {"member": 5, "values": {**values, "agent.entropy_cost": 0.0}}]
    sweep = write_sweep_summary_of(
        tmp_path, {"best_member": 2, "final_eval_return": 500.0, "values": values, "tied": tied}
    )
    assert result_lines(sweep)[:3] == [
        "Best of 8 PBT members: members 2 and 5 tie at 500.0 (final_eval_return), ending with:",
        f"  member 2: agent.learning_rate=0.000120767 agent.entropy_cost=0.01; its run: {sweep}/0/seed_2",
        f"  member 5: agent.learning_rate=0.000120767 agent.entropy_cost=0.0; its run: {sweep}/0/seed_5",
    ]


def test_a_comma_list_is_said_to_be_a_choice():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(
        ["agent.entropy_cost=0.0,0.01", "agent.discount=choice(0.9,0.99)"]
    )
    assert comma_list_notes(parsed) == [
        "hydra/sweeper=pbt: agent.entropy_cost's comma list is searched as choice(0.0, 0.01): each member starts "
        "from one of these values and exploring moves it to a neighbouring one (one population, not a grid)"
    ]


def test_settings_round_trip_and_refusals(tmp_path):
    path = str(tmp_path / "pbt.yaml")
    written = settings(space={"agent.learning_rate": LEARNING_RATE, "policy.epsilon": Hyperparameter(choices=(0.1,))})
    written.write(path)
    assert PbtSettings.read(path) == written
    assert "num_seeds >= 2" in written.problem(1)
    assert "fraction" in settings(fraction=0.7).problem(4)
    assert "only agent" in settings(space={"seed": LEARNING_RATE}).problem(4)
    assert "low < high" in settings(space={"agent.x": Hyperparameter(low=1.0, high=0.5)}).problem(4)


# --------------------------------------------------------------------------- a population run

# A small PPO population: 4 members, an exchange after each of the first 3 of 4 evaluation rounds (128 steps each).
POPULATION = [
    "experiment=ppo_gymnax_cartpole",
    "agent.unroll_length=16",
    "agent.num_epochs=1",
    "agent.num_minibatches=2",
    "max_actor_steps=512",
    "eval_every=128",
    "eval_episodes=2",
    "logger=csv",
    "progress=false",
    "launcher.num_seeds=4",
]


def write_settings(tmp_path, **changes: Any) -> str:
    path = str(tmp_path / "pbt.yaml")
    settings(fraction=0.5, **changes).write(path)
    return path


def rows(path: str) -> list[dict[str, str]]:
    with open(path) as file:
        return list(csv.DictReader(file))


def without_times(table: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in ("wall_time_s", "steps_per_second")} for row in table]


@pytest.mark.current
def test_a_population_run_records_every_members_history(tmp_path):
    """Each member's logs/pbt.csv has its values at step 0 and after each exchange, whom it copied; with
    factors of 1 a copying member takes its parent's value exactly; summary.json names the best member and
    its schedule, each member's its lineage."""
    from test_anakin import _launch_as_train_does

    path = write_settings(tmp_path, factors=(1.0,))
    run = str(tmp_path / "run")
    summary = _launch_as_train_does([*POPULATION, "checkpoint.enabled=false", f"launcher.pbt={path}"], run)
    assert summary.status == "finished"
    tables = [rows(os.path.join(run, f"seed_{i}", "logs", "pbt.csv")) for i in range(4)]
    assert all([int(r["actor_steps"]) for r in table] == [0, 128, 256, 384] for table in tables)
    for step in range(1, 4):
        copied = [(i, int(t[step]["copied_from"])) for i, t in enumerate(tables) if int(t[step]["copied_from"]) != i]
        assert len(copied) == 2  # fraction 0.5 of 4
        for child, parent in copied:
            assert tables[child][step]["agent.learning_rate"] == tables[parent][step]["agent.learning_rate"]
    result = read_summary(run)["pbt"]
    finals = [read_summary(os.path.join(run, f"seed_{i}"))["final_eval_return"] for i in range(4)]
    assert result["best_member"] == int(np.argmax(finals)) and result["final_eval_return"] == max(finals)
    member = read_summary(os.path.join(run, f"seed_{result['best_member']}"))["pbt"]
    assert member["lineage"] == result["schedule"] and result["schedule"][0]["actor_steps"] == 0


@pytest.mark.current
def test_a_stopped_population_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """SIGTERM after the first chunk (an exchange has happened at 128 steps): the resumed population ends
    with the uninterrupted one's training state, values, lineages and records, bit for bit."""
    from rl.experiments.signals import RunInterrupted
    from test_anakin import _checkpoint_digest, _launch_as_train_does, _stop_after_first_chunk

    overrides = [
        *POPULATION,
        "checkpoint.enabled=true",
        "checkpoint.keep=1",
        f"launcher.pbt={write_settings(tmp_path)}",
    ]
    whole, stopped = str(tmp_path / "whole"), str(tmp_path / "stopped")
    _launch_as_train_does(overrides, whole)
    with monkeypatch.context() as patch:
        _stop_after_first_chunk(patch)
        with pytest.raises(RunInterrupted):
            _launch_as_train_does(overrides, stopped)
    assert read_summary(stopped)["status"] == "interrupted"
    assert _launch_as_train_does(overrides, stopped).status == "finished"
    assert _checkpoint_digest(stopped, 512) == _checkpoint_digest(whole, 512)
    assert read_summary(stopped)["pbt"] == read_summary(whole)["pbt"]
    for i in range(4):
        tables = [rows(os.path.join(run, f"seed_{i}", "logs", "pbt.csv")) for run in (stopped, whole)]
        assert without_times(tables[0]) == without_times(tables[1])
        assert (
            read_summary(os.path.join(stopped, f"seed_{i}"))["pbt"]
            == read_summary(os.path.join(whole, f"seed_{i}"))["pbt"]
        )


@pytest.mark.current
def test_a_search_the_members_cannot_hold_is_refused(tmp_path):
    from test_anakin import compose_experiment

    with pytest.raises(ConfigError, match="agent.unroll_length: population-based training searches float"):
        compose_experiment(
            [*POPULATION, f"launcher.pbt={write_settings(tmp_path, space={'agent.unroll_length': LEARNING_RATE})}"],
            str(tmp_path / "a"),
        )
    with pytest.raises(ConfigError, match="agent.lr: not an option of agent=ppo's agent config"):
        compose_experiment(
            [*POPULATION, f"launcher.pbt={write_settings(tmp_path, space={'agent.lr': LEARNING_RATE})}"],
            str(tmp_path / "d"),
        )
    with pytest.raises(ConfigError, match="interval=192 must be a multiple of eval_every=128"):
        compose_experiment([*POPULATION, f"launcher.pbt={write_settings(tmp_path, interval=192)}"], str(tmp_path / "b"))
    with pytest.raises(ConfigError, match="launcher.pbt: cannot read"):
        compose_experiment([*POPULATION, f"launcher.pbt={tmp_path / 'missing.yaml'}"], str(tmp_path / "c"))


@pytest.mark.current
def test_the_launcher_is_given_the_search_as_data(tmp_path):
    """conf/launcher/anakin.yaml hands the launcher rl/sweeps/pbt.py's reader (`pbt_search`); without one a
    settings file is refused before the run starts, not trained as independent replicas."""
    from rl.anakin import AnakinLauncher
    from rl.sweeps.pbt import PbtSearch

    path = write_settings(tmp_path)
    given = AnakinLauncher(num_seeds=4, pbt=path, pbt_search=PbtSearch.read)
    assert given.pbt == PbtSearch(PbtSettings.read(path), 4)
    with pytest.raises(
        ConfigError, match=re.escape(f"launcher.pbt_search: is null: nothing reads launcher.pbt={path}")
    ):
        AnakinLauncher(num_seeds=4, pbt=path)(None)


@pytest.mark.current
def test_the_sweeper_trains_a_population_from_the_command_line(tmp_path):
    """`-m hydra/sweeper=pbt` with a range on the command line: the settings file, the population's run
    and the sweep's summary.json naming the best member's directory; a swept seed is refused in one line."""
    sweep = str(tmp_path / "sweep")
    searched = "agent.learning_rate=tag(log, interval(1e-4, 1e-2))"
    overrides = [o for o in POPULATION if not o.startswith("launcher.num_seeds")]
    result = run_train(
        ["-m", "hydra/sweeper=pbt", "hydra.sweeper.population=2", searched, *overrides, f"hydra.sweep.dir={sweep}"]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    best = [line for line in result.stdout.splitlines() if line.startswith("Best of")]
    assert len(best) == 1 and best[0].startswith("Best of 2 PBT members: member"), result.stdout[-3000:]
    assert PbtSettings.read(os.path.join(sweep, "pbt.yaml")).space == {"agent.learning_rate": LEARNING_RATE}
    with open(os.path.join(sweep, "summary.json")) as file:
        summary = json.load(file)
    assert summary["status"] == "finished" and summary["population"] == 2
    assert summary["best_run_directory"] == os.path.join(sweep, "0", f"seed_{summary['pbt']['best_member']}")
    refused = run_train(["-m", "hydra/sweeper=pbt", searched, "seed=0,1", *overrides, f"hydra.sweep.dir={sweep}2"])
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "Invalid configuration: hydra/sweeper=pbt: searches agent.* and policy.* ranges only; other overrides "
        "take one value: seed=0,1"
    ]
    assert not os.path.exists(f"{sweep}2")
