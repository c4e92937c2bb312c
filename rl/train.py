"""Trains an agent: `python -m rl.train [group=option ...] [key=value ...]` (or `python scripts/train.py`, or
`rl-train`); returns the final evaluation return, for sweepers. One path: the command line is read and checked
(rl/command_line.py), Hydra's main composes the config, `prepare_job` builds and checks the job, `train`
launches it. `resume=DIR` resumes a run; Ctrl-C or SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import signal
import sys
import warnings
from typing import TYPE_CHECKING, Any

from rl.command_line import (
    CONFIG_DIR,
    cluster_error,
    composition_error,
    existing_run_directories,
    integral_overrides,
    resume_arguments,
    run_directory_error,
)
from rl.sweeps.jobs import RunRefused

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from rl.sweeps.jobs import Job, JobCheck, Refusal

# Only light modules at import: `cli` re-executes the process under jemalloc before anything heavy loads, and
# JAX and TensorFlow load once the config is composed (a bad command line fails in a fraction of a second).

# Whether the user set HYDRA_FULL_ERROR (read once, at import): otherwise `cli` sets it so that a command line
# Hydra cannot compose reaches `composition_error`, and the job unsets it once composed.
HYDRA_FULL_ERROR_GIVEN = "HYDRA_FULL_ERROR" in os.environ


def job_prefix() -> str:
    """What a multirun job's terminal lines start with (`[job 3] `: parallel jobs' lines interleave)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_config = HydraConfig.get()
    return f"[job {hydra_config.job.num}] " if hydra_config.mode == RunMode.MULTIRUN else ""


def prepare_job(config: DictConfig, announce: bool = True, refuse: JobCheck | None = None) -> Job | float | Refusal:
    """Everything before training, its terminal lines after the job's prefix (`job_prefix`); the task of
    hydra/launcher=anakin_grid, which trains the jobs it prepares together: it refuses what it cannot train
    (`refuse`) and, with `announce` false, is handed a refused job's `Refusal` to announce with the others."""
    from rl.loggers.base import console_prefixed

    with console_prefixed(job_prefix()):
        return build_job(config, announce, refuse)


def report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """The run's own warnings (`RunWarning`) as one line each; a library's as it would have shown it."""
    from rl.checkpointing import RunWarning
    from rl.sweeps.jobs import report

    for warning in caught:
        if issubclass(warning.category, RunWarning):
            report(f"Warning: {warning.message}", error=True, transcript=False)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def build_job(config: DictConfig, announce: bool = True, refuse: JobCheck | None = None) -> Job | float | Refusal:
    """The experiment built and checked (by `refuse` too: why its launcher and restore point cannot train,
    before the run directory is written), the resume plan applied. A refused job of a multirun or an already
    finished run gives its value (NaN when refused, after its line; with `announce` false, its `Refusal`,
    unannounced); a refused single run exits (`RunRefused`)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from rl.checkpointing import CheckpointError, RunWarning
    from rl.sweeps.jobs import Job, Refusal, remove_hydra_files, report
    from rl.experiments.extension import extend_config
    from rl.experiments.make_experiment import make_experiment, tracking_settings
    from rl.experiments.resume import apply_plan, prepare_run
    from rl.experiments.validation import ConfigError, check_launcher_stack

    if not HYDRA_FULL_ERROR_GIVEN:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    hydra_config = HydraConfig.get()
    output_dir = hydra_config.runtime.output_dir
    explicit = config.get("resume") is not None
    objective = config.get("objective", "final_eval_return")
    try:
        tracking = tracking_settings(hydra_config, config)
        extend_config(config, output_dir)  # A larger max_actor_steps on a run: its schedules as `extend` says.
        experiment, launch = make_experiment(config, output_dir, hydra_config.runtime.choices, **tracking)
        check_launcher_stack(launch, hydra_config.runtime.choices.get("launcher"))  # Before the run directory.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunWarning)  # Libraries' warnings keep their filters.
            plan = prepare_run(
                experiment, config, output_dir, explicit=explicit, learner_template=launch.checkpoint_template
            )
        report_warnings(caught)
    except (ConfigError, CheckpointError) as error:
        what, code = ("Invalid configuration", 2) if isinstance(error, ConfigError) else ("Cannot resume", 1)
        if hydra_config.mode == RunMode.MULTIRUN:
            return refused_job(Refusal(output_dir, f"{what}: {error}", code), announce)
        report(f"{what}: {error}", error=True, transcript=False)  # A refused resume leaves its run as it was.
        remove_hydra_files(output_dir, f"{hydra_config.job.name}.log")
        raise RunRefused(code, output_dir) from None
    if plan.finished is not None:
        summary = plan.finished
        report(
            f"The run in {output_dir} has already finished ({summary.get('actor_steps')} actor steps, final "
            f"evaluation return {summary.get('final_eval_return')}); nothing to do.",
            transcript=False,
        )
        return summary.get(objective, float("nan"))
    why = refuse(launch, plan.restore, output_dir) if refuse is not None else None
    if why is not None:
        return refused_job(Refusal(output_dir, f"Invalid configuration: {why}", 2), announce)
    experiment = apply_plan(plan, experiment)
    report_resume(plan, output_dir)
    return Job(experiment, launch, output_dir, objective)


def report_resume(plan: Any, output_dir: str) -> None:
    """The lines a resumed run starts with: its extension to a larger budget and the checkpoint it resumes."""
    from rl.sweeps.jobs import report

    if plan.extension is not None:
        report(plan.extension.describe())
    if plan.restore is not None:
        counts = plan.restore.counts
        report(
            f"Resuming {output_dir} from {os.path.basename(plan.restore.checkpoint)} "
            f"({counts.get('actor_steps', 0)} actor steps, {counts.get('learner_steps', 0)} learner steps"
            + ("; replay buffer restored)" if plan.restore.restore_replay else ")")
        )


def refused_job(refusal: Refusal, announce: bool) -> float | Refusal:
    """A refused job of a multirun: announced now (its value, NaN: the sweep goes on) or handed back as it is."""
    from rl.sweeps.jobs import refuse_job

    return refuse_job(refusal.output_dir, refusal.reason) if announce else refusal


def remove_empty_directories(run_directory: str, existing: frozenset[str]) -> None:
    """The run directory of a refused command and the directories left empty by it, up to the working
    directory; a directory that existed before the command (`existing`), or that holds anything, stays."""
    directory = os.path.abspath(run_directory)
    stop = os.getcwd()
    if directory in existing:
        return
    while os.path.isdir(directory) and not os.listdir(directory):
        os.rmdir(directory)
        directory = os.path.dirname(directory)
        if not directory.startswith(stop + os.sep):  # Above the working directory: not this command's.
            return


def with_search_hooks(experiment: Any) -> Any:
    """The experiment with the hooks of the search it runs in: the trial of an Optuna search that prunes, which
    the sweeper names in the job's environment (rl/sweeps/pruning.py)."""
    import dataclasses

    from rl.sweeps.pruning import PruningHook

    trial = PruningHook.from_environment(experiment.run_directory)
    return experiment if trial is None else dataclasses.replace(experiment, hooks=(*experiment.hooks, trial))


def train(config: DictConfig) -> float:
    from rl.sweeps.jobs import Job, finish_job, report
    from rl.experiments.launcher import LauncherError
    from rl.experiments.signals import Interrupted, RunInterrupted, ending_now, requeue_signal, signal_name
    from rl.experiments.summary import close_loggers

    job = prepare_job(config)
    if not isinstance(job, Job):
        return job
    experiment = with_search_hooks(job.experiment)
    try:
        experiment.logger_factory.start()  # The W&B run exists (with its config) before the first step.
        summary = job.launch(experiment=experiment)
    except RunInterrupted as stop:
        requeue = stop.signum == requeue_signal() and callable(signal.getsignal(stop.signum))
        who = "submitit requeues the job, which" if requeue else "the same command"
        report(f"Interrupted: {stop}; {who} {'resumes it' if stop.checkpoint else 'starts it over'}", error=True)
        if requeue:  # Submitit's handler, back in place: it requeues the job (the same run directory) and exits.
            signal.raise_signal(stop.signum)
        sys.exit(stop.exit_code)
    except LauncherError as error:  # Expected failures (unreachable cluster, dead learner): no traceback.
        close_loggers(experiment, exit_code=1)
        report(f"Run failed: {error}", error=True)
        sys.exit(1)
    except KeyboardInterrupt as error:  # Before the run could stop cleanly (or a second signal).
        code = error.exit_code if isinstance(error, Interrupted) else 130
        close_loggers(experiment, exit_code=code)
        if not ending_now():  # A second signal: the signal watcher has said what is lost.
            report(f"Interrupted by {signal_name(code - 128)} before a checkpoint could be written", error=True)
        sys.exit(code)
    except BaseException:
        close_loggers(experiment, exit_code=1)
        raise
    return finish_job(job, summary)


def main(config: DictConfig) -> float:
    """Hydra's task (`cli` hands it to `hydra.main`): the job, prepared and launched."""
    from rl.sweeps.jobs import report
    from rl.experiments.signal_watcher import watch_signals
    from rl.experiments.signals import Interrupted, raise_on_signals, signal_name
    from rl.loggers.base import console_prefixed

    watch_signals(lambda line: report(line, error=True))  # Signals answered at once, whatever the main thread does.
    with console_prefixed(job_prefix()):
        try:
            with raise_on_signals():
                return train(config)
        except Interrupted as error:  # While the experiment was being built: nothing to save.
            report(f"Interrupted by {signal_name(error.signum)} while starting; nothing was trained", error=True)
            sys.exit(error.exit_code)


def exit_past_running_work(code: Any) -> None:
    """After a stop that left device work running (rl.experiments.signals.left_running), everything is
    written, and after a second signal nothing more will be: ends the process now, as Python's shutdown would
    wait for the device work in flight (XLA cannot cancel it)."""
    from rl.experiments.signals import end_process, ending_now, left_running

    if left_running() or ending_now():
        end_process(code if isinstance(code, int) else 1)


def cli() -> None:
    """The command line: re-executed under jemalloc (the one place a training command does), rewritten and
    checked (rl/command_line.py: an unwritable run directory, or SLURM where there is none, exits with status
    1), then Hydra's main; a command line Hydra cannot read or compose is one line, exit status 2."""
    from rl.allocator import reexec_with_jemalloc

    reexec_with_jemalloc()  # Before anything heavy loads; sys.orig_argv keeps the command as typed.
    typed = sys.argv[1:]
    sys.argv[1:] = resume_arguments(integral_overrides(typed))
    existing = existing_run_directories(sys.argv[1:])
    error = run_directory_error(sys.argv[1:]) or cluster_error(sys.argv[1:])
    if error is not None:
        print(error, file=sys.stderr)
        sys.exit(1)
    import hydra
    from hydra.errors import CompactHydraException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")(main)()
    except CompactHydraException as error:
        if HYDRA_FULL_ERROR_GIVEN:
            raise
        print(f"Invalid configuration: {composition_error(error, sys.argv[1:], typed)}", file=sys.stderr)
        sys.exit(2)
    except RunRefused as refused:
        remove_empty_directories(refused.run_directory, existing)
        raise
    except SystemExit as stop:  # A stopped run or grid (exit status 128 + the signal's number).
        exit_past_running_work(stop.code)
        raise


if __name__ == "__main__":  # `python -m rl.train`: run the imported module, the one the grid launcher imports too.
    from rl.train import cli as imported_cli

    imported_cli()
