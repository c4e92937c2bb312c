"""hydra/launcher=anakin_grid: a sweep's jobs trained as the replicas of one compiled program."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, TRAIN, read_summary, read_wandb_offline_run, run_train
from rl.analysis import find_runs
from rl.sweeps.grid import group_jobs

SHORT = ["experiment=ppo_gymnax_cartpole", "max_actor_steps=8192", "eval_every=4096", "progress=false"]


def test_jobs_group_by_all_but_seed_records_and_float_agent_and_policy_settings():
    def job(seed: int, lr: float, epsilon: float = 0.05, envs: int = 4, logger: str = "csv") -> dict:
        return {
            "seed": seed,
            "logger": {"_target_": logger},
            "agent": {"learning_rate": lr, "n_step": 3},
            "policy": {"epsilon_end": epsilon},
            "environment": {"num_envs": envs},
        }

    configs = [
        job(0, 1e-3),
        job(1, 1e-3, logger="wandb"),
        job(0, 3e-4, 0.1),
        job(0, 1e-3, envs=8),
        job(1, 1e-3, envs=8),
    ]
    assert group_jobs(configs) == [([0, 1, 2], ["agent.learning_rate", "policy.epsilon_end"]), ([3, 4], [])]
    # An agent setting written as an integer in one job is not a float in every job: it splits.
    integral = [job(0, 1e-3), {**job(0, 1e-3), "agent": {"learning_rate": 1, "n_step": 3}}]
    assert group_jobs(integral) == [([0], []), ([1], [])]


@pytest.mark.current  # The compiled path, the same on both stacks: run in the current stack's part.
def test_a_two_by_two_grid_is_one_program_whose_jobs_equal_separate_runs(tmp_path):
    grid, separate = tmp_path / "grid", tmp_path / "separate"
    sweep = ["-m", *SHORT, "agent.learning_rate=1e-4,1e-3", "seed=0,1"]
    result = run_train([*sweep, "hydra/launcher=anakin_grid", "logger=wandb", f"hydra.sweep.dir={grid}"])
    assert result.returncode == 0, result.stderr[-3000:]
    reference = run_train([*sweep, "logger=csv", f"hydra.sweep.dir={separate}"])
    assert reference.returncode == 0, reference.stderr[-3000:]

    groups = os.listdir(grid / ".grid")
    assert len(groups) == 1  # One compiled program for the four jobs.
    assert read_summary(str(grid / ".grid" / groups[0]))["num_seeds"] == 4
    for job in ("0", "1", "2", "3"):
        ours, theirs = read_summary(str(grid / job)), read_summary(str(separate / job))
        assert ours["status"] == "finished" and ours["actor_steps"] == theirs["actor_steps"] == 8192
        assert ours["grid"] == {"group": str(grid / ".grid" / groups[0]), "jobs": 4, "batched": ["agent.learning_rate"]}
        assert [step for step, _ in ours["eval_returns"]] == [step for step, _ in theirs["eval_returns"]]
        for (_, value), (_, expected) in zip(ours["eval_returns"], theirs["eval_returns"]):
            assert value == pytest.approx(expected, rel=1e-4)
        for name in (".hydra/config.yaml", "logs/evaluator.csv", "train.log"):
            assert os.path.isfile(grid / job / name), name
        assert "final evaluation return" in (grid / job / "train.log").read_text()
        run = read_wandb_offline_run(str(grid / job))
        assert run["exit_code"] == 0 and run["name"].endswith(f"__{job}")
        assert [row["evaluator/episode_return"] for row in run["history"] if "evaluator/episode_return" in row] == [
            pytest.approx(value) for _, value in ours["eval_returns"]
        ]
    assert [os.path.basename(run.path) for run in find_runs([str(grid)])] == ["0", "1", "2", "3"]  # Not .grid/.
    # The terminal's line of each round is each learning rate's own (its two seeds'), not the four replicas' mean.
    assert "[evaluator" not in result.stdout
    finals = {job: read_summary(str(grid / job))["final_eval_return"] for job in ("0", "1", "2", "3")}
    for rate, jobs in (("0.0001", ("0", "1")), ("0.001", ("2", "3"))):
        mean = (finals[jobs[0]] + finals[jobs[1]]) / 2
        each = f"{finals[jobs[0]]:.1f}, {finals[jobs[1]]:.1f}"
        line = (
            f"8192/8192 actor steps agent.learning_rate={rate}: eval return {mean:.1f} (jobs {', '.join(jobs)}: {each})"
        )
        assert f"[group {groups[0]}] {line}" in result.stdout.splitlines()
    # The sweep's results: each job's value is what its run returned.
    with open(grid / "results.yaml") as file:
        trials = {trial["job"]: trial["value"] for trial in yaml.safe_load(file)["trials"]}
    assert trials == {job: pytest.approx(read_summary(str(grid / job))["final_eval_return"]) for job in trials}
    # Both sweeps (the grid's launcher and Hydra's basic one) name the setting with the best mean over its seeds.
    # Its command is the one typed, with the grid's launcher where the grid ran its seeds as one program.
    for directory, output, launcher in (
        (grid, result.stdout, " hydra/launcher=anakin_grid"),
        (separate, reference.stdout, ""),
    ):
        command = _check_best_setting(directory, output)
        assert command.startswith(f"python {TRAIN} -m{launcher} experiment=") and " agent.learning_rate=" in command
    _check_best_job_evaluates_as_its_separate_run(grid, separate)


def _check_best_job_evaluates_as_its_separate_run(grid, separate) -> None:
    """The best job results.yaml names kept its final state: scripts/evaluate.py evaluates (and films) it, and
    its returns are those of the same job's separate launcher=anakin run, evaluated from that run's checkpoint."""
    with open(grid / "results.yaml") as file:
        jobs = yaml.safe_load(file)["best"]["jobs"]
    best = max(jobs, key=jobs.get)
    ours = _evaluate(f"run_dir={grid / best}", "episodes=2", "video=true")
    assert ours.returncode == 0, ours.stderr[-3000:]
    theirs = _evaluate(f"run_dir={separate / best}", "episodes=2")
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    assert f"checkpoints/step_8192 (actor steps 8192), seed {_seed(grid / best)}" in ours.stdout
    returns = lambda output: [line for line in output.splitlines() if line.startswith("replica 0 ")]
    assert len(returns(ours.stdout)) == 2 and returns(ours.stdout) == returns(theirs.stdout)
    assert "video of one episode" in ours.stdout and len(os.listdir(grid / best / "videos")) == 1


def _seed(job_dir) -> int:
    with open(job_dir / ".hydra" / "config.yaml") as file:
        return yaml.safe_load(file)["seed"]


def _evaluate(*arguments: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    evaluate = os.path.join(ROOT, "scripts", "evaluate.py")
    return subprocess.run(
        [sys.executable, evaluate, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )


def _check_best_setting(sweep, output: str) -> str:
    """results.yaml's best is the learning rate whose jobs (one per seed) have the highest mean final return, with
    each job's value; the printed line says the same. Returns the best setting's command."""
    settings: dict[str, dict[str, float]] = {}
    for job in ("0", "1", "2", "3"):
        with open(sweep / job / ".hydra" / "overrides.yaml") as file:
            (rate,) = [o for o in yaml.safe_load(file) if o.startswith("agent.learning_rate=")]
        settings.setdefault(rate, {})[job] = read_summary(str(sweep / job))["final_eval_return"]
    best = max(settings, key=lambda rate: sum(settings[rate].values()) / len(settings[rate]))
    with open(sweep / "results.yaml") as file:
        report = yaml.safe_load(file)
    assert best in report["best"]["overrides"] and report["best"]["count"] == 2
    assert report["best"]["jobs"] == pytest.approx(settings[best])
    assert report["best"]["mean"] == pytest.approx(sum(settings[best].values()) / 2)
    assert [setting["count"] for setting in report["settings"]] == [2, 2]
    (line,) = [line for line in output.splitlines() if line.startswith("Best of 2 settings (4 jobs): mean ")]
    assert best in line and line.endswith("seed=0,1")
    command = line.split("): ")[-1]
    assert report["best"]["command"] == command
    return command


@pytest.mark.current  # The compiled path, the same on both stacks.
def test_a_pqn_grid_over_its_float_settings_and_seeds_is_one_program(tmp_path):
    """PQN's learning rate and lambda are read only inside its jitted maths: a 2 x 2 x 2 grid (with seeds) is one
    program of 8 replicas, and a job's curve is its separate run's."""
    small = [
        "experiment=pqn_gymnax_cartpole",
        "environment.num_envs=4",
        "agent.unroll_length=16",
        "agent.num_epochs=1",
        "agent.num_minibatches=2",
        "network.hidden_sizes=[32]",
        "max_actor_steps=2048",
        "eval_every=1024",
        "eval_episodes=2",
        "progress=false",
        "logger=csv",
    ]
    grid = tmp_path / "grid"
    sweep = ["-m", *small, "agent.learning_rate=1e-4,1e-3", "agent.q_lambda=0.5,0.9", "seed=0,1"]
    result = run_train([*sweep, "hydra/launcher=anakin_grid", f"hydra.sweep.dir={grid}"])
    assert result.returncode == 0, result.stderr[-3000:]
    (group,) = os.listdir(grid / ".grid")
    assert read_summary(str(grid / ".grid" / group))["num_seeds"] == 8
    for job in map(str, range(8)):
        summary = read_summary(str(grid / job))
        assert summary["status"] == "finished" and summary["agent"] == "pqn" and summary["actor_steps"] == 2048
        assert summary["grid"]["batched"] == ["agent.learning_rate", "agent.q_lambda"]
    separate = tmp_path / "separate"
    alone = [
        "agent.learning_rate=0.001",
        "agent.q_lambda=0.9",
        "seed=1",
        f"hydra.run.dir={separate}",
    ]  # As Hydra writes it.
    reference = run_train([*small, *alone])
    assert reference.returncode == 0, reference.stderr[-3000:]
    (job,) = [j for j in map(str, range(8)) if set(alone[:3]) <= set(_overrides(grid / j))]
    ours, theirs = read_summary(str(grid / job)), read_summary(str(separate))
    assert [step for step, _ in ours["eval_returns"]] == [step for step, _ in theirs["eval_returns"]]
    for (_, value), (_, expected) in zip(ours["eval_returns"], theirs["eval_returns"]):
        assert value == pytest.approx(expected, rel=1e-4)


def _overrides(job_dir) -> list[str]:
    with open(job_dir / ".hydra" / "overrides.yaml") as file:
        return yaml.safe_load(file)


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_structural_difference_makes_two_programs_and_a_failing_replica_fails_alone(tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train(
        [
            "-m",
            "hydra/launcher=anakin_grid",
            *SHORT,
            "environment.num_envs=4,8",
            "agent.learning_rate=2.5e-4,1e30",  # The second diverges to a non-finite loss.
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(os.listdir(sweep / ".grid")) == 2
    for job, envs, diverges in (("0", 4, False), ("1", 4, True), ("2", 8, False), ("3", 8, True)):
        summary = read_summary(str(sweep / job))
        assert summary["grid"]["jobs"] == 2
        if diverges:
            assert summary["status"] == "failed" and "non-finite" in summary["failure"]
            # Failed before its first round after step 0: its curve is the untrained policy's round alone, whose
            # return is its last (the sweeper is given NaN for it all the same).
            assert summary["eval_returns"] == [[0, summary["final_eval_return"]]]
            assert "Run failed: numerical fault: non-finite" in (sweep / job / "train.log").read_text()
            assert f"[job {job}] Run failed" in result.stderr
        else:
            assert summary["status"] == "finished" and math.isfinite(summary["final_eval_return"])
        with open(sweep / job / ".hydra" / "config.yaml") as file:
            assert yaml.safe_load(file)["environment"]["num_envs"] == envs


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_jobs_the_grid_cannot_train_are_each_refused_and_listed_while_the_others_train(tmp_path):
    sweep = tmp_path / "sweep"
    grid = ["-m", "hydra/launcher=anakin_grid", *SHORT, "logger=csv", f"hydra.sweep.dir={sweep}"]
    result = run_train([*grid, "launcher.num_seeds=1,2,3"])
    assert result.returncode == 2  # The sweep's refusals, listed at its end.
    for job in ("1", "2"):  # The first refusal did not end the sweep.
        assert "launcher.num_seeds must be 1" in (sweep / job / "refused.txt").read_text()
        assert "launcher.num_seeds must be 1" in (sweep / job / "train.log").read_text()
        assert result.stderr.count(f"[job {job}] Invalid configuration: hydra/launcher=anakin_grid: ") == 1
    assert read_summary(str(sweep / "0"))["status"] == "finished"
    assert "2 job(s) of the sweep" in result.stderr and len(os.listdir(sweep / ".grid")) == 1


REFUSED_EVERY_JOB = (
    "Invalid configuration: hydra/launcher=anakin_grid: launcher.num_seeds must be 1 (sweep seed=0,1,... instead)"
)


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_sweep_whose_every_job_is_refused_for_one_reason_is_refused_once_and_leaves_nothing(tmp_path):
    every_job = ["-m", "hydra/launcher=anakin_grid", "experiment=ppo_gymnax_cartpole", "launcher.num_seeds=2"]
    environment = {**os.environ, "WANDB_MODE": "offline", "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, TRAIN, *every_job, "seed=0,1,2,3"]  # Into multirun/<date>/<time> under tmp_path.
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2 and result.stderr.splitlines() == [REFUSED_EVERY_JOB]
    assert os.listdir(tmp_path) == []  # No job directory, no multirun.yaml, no sweep directory up to here.
    # A sweep directory the user had stays, with what it held.
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine\n")
    result = run_train([*every_job, "seed=0,1", f"hydra.sweep.dir={kept}"])
    assert result.returncode == 2 and result.stderr.splitlines() == [REFUSED_EVERY_JOB]
    assert os.listdir(kept) == ["notes.txt"] and (kept / "notes.txt").read_text() == "mine\n"
    # Every job refused, but for two reasons: each job's line, and the sweep's list of them, as in any sweep.
    sweep = tmp_path / "two_reasons"
    result = run_train([*every_job, "max_actor_steps=-5,8192", f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 2 and "[job 0] Invalid configuration: max_actor_steps: " in result.stderr
    assert f"[job 1] {REFUSED_EVERY_JOB}" in result.stderr and "2 job(s) of the sweep" in result.stderr
    assert sorted(os.listdir(sweep)) == ["0", "1", "multirun.yaml"] and (sweep / "1" / "refused.txt").is_file()


@pytest.mark.current  # The same on both stacks: the current part runs it.
def test_refusing_a_sweep_keeps_a_job_directory_that_holds_a_run(tmp_path):
    from rl.sweeps.grid import refuse_sweep
    from rl.sweeps.jobs import Refusal, RunRefused

    for job in ("0", "1"):
        os.makedirs(tmp_path / job / ".hydra")
        (tmp_path / job / ".hydra" / "config.yaml").write_text("seed: 0\n")
        (tmp_path / job / "train.log").write_text("")
    (tmp_path / "0" / "run.json").write_text("{}")  # Job 0's directory holds an earlier run.
    (tmp_path / "multirun.yaml").write_text("hydra: {}\n")
    refusals = [Refusal(str(tmp_path / job), "Invalid configuration: x: no", 2) for job in ("0", "1")]
    with pytest.raises(RunRefused) as refused:
        refuse_sweep(refusals, "train.log", str(tmp_path))
    assert refused.value.code == 2 and refused.value.run_directory == str(tmp_path)
    assert os.listdir(tmp_path) == ["0"]
    assert sorted(os.listdir(tmp_path / "0")) == [".hydra", "run.json", "train.log"]


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_search_that_prunes_masks_its_pruned_replicas_and_skips_a_group_with_none_left(tmp_path):
    import optuna

    from rl.sweeps.pruning import open_storage

    sweep = tmp_path / "search"
    result = run_train(
        [
            "-m",
            "hydra/launcher=anakin_grid",
            "hydra/sweeper=optuna_pruning",
            "hydra/sweeper/pruner=threshold",  # Every return is below 1e9: each trial is pruned once judged.
            "hydra.sweeper.pruner.lower=1e9",
            "hydra.sweeper.pruner.n_warmup_steps=3000",
            "hydra/sweeper/sampler=grid",
            "hydra.sweeper.n_trials=2",
            "hydra.sweeper.n_jobs=2",  # Both trials in one launch: one program.
            "agent.learning_rate=choice(1e-4,1e-3)",
            *SHORT,
            "max_actor_steps=16384",
            "logger=csv",
            f"hydra.sweep.dir={sweep}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(os.listdir(sweep / ".grid")) == 1
    for job in ("0", "1"):
        summary = read_summary(str(sweep / job))
        assert summary["status"] == "pruned" and summary["actor_steps"] == 4096 < 16384 / 2
        assert [step for step, _ in summary["eval_returns"]] == [0, 4096]  # The pruner is not told of step 0.
        learner_rows = (sweep / job / "logs" / "learner.csv").read_text().splitlines()
        assert learner_rows[-1].split(",")[1] == "4096"  # Nothing trained past the pruning point.
    storage = open_storage(f"sqlite:///{sweep}/optuna.db")
    (study,) = storage.get_all_study_summaries()
    trials = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(deepcopy=False)
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.PRUNED] * 2


@pytest.mark.current  # The compiled path, the same on both stacks: the current part runs it.
def test_a_non_finite_loss_fails_a_plain_anakin_run_and_a_one_job_grid_job_alone(tmp_path):
    diverging = [*SHORT, "agent.learning_rate=1e30", "logger=csv"]
    result = run_train([*diverging, f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.returncode == 1 and "Run failed: numerical fault: non-finite" in result.stderr
    assert read_summary(str(tmp_path / "run"))["status"] == "failed"
    sweep = tmp_path / "sweep"
    result = run_train(["-m", "hydra/launcher=anakin_grid", *diverging, f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr[-3000:]  # The sweep ends; its one job failed.
    assert read_summary(str(sweep / "0"))["status"] == "failed"
