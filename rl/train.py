"""Trains an agent: `python -m rl.train [group=option ...] [key=value ...]`; returns the final
evaluation return, for sweepers. `resume=DIR` resumes a run; Ctrl-C or SIGTERM stops it cleanly."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import warnings
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from rl.checkpointing import CheckpointError, RunWarning, holds_a_run
from rl.sweeps.jobs import REFUSED_FILE, Job, finish_job, refuse_job, report

# JAX and TensorFlow are imported in `main`: a bad command line fails in a fraction of a second.
TRANSCRIPT = logging.getLogger("rl.transcript")
CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def resume_arguments(argv: list[str]) -> list[str]:
    """The command line Hydra sees: `resume=DIR` runs in DIR with the run's own overrides, and a run
    directory that holds a run keeps its `.hydra/` config (`hydra.output_subdir=null`)."""
    if any(arg in ("-m", "--multirun") for arg in argv):
        return argv
    values = dict(arg.split("=", 1) for arg in argv if arg.startswith(("resume=", "hydra.run.dir=")))
    run_directory = values.get("hydra.run.dir")
    resume = values.get("resume")
    if resume not in (None, "", "null"):
        path = os.path.abspath(os.path.expanduser(resume))
        error = None if os.path.isdir(path) else f"no run directory at {path}"
        if error is None and run_directory is not None and os.path.abspath(os.path.expanduser(run_directory)) != path:
            error = f"names {path} but hydra.run.dir names {run_directory}"
        if error is not None:
            print(f"Invalid configuration: resume: {error}", file=sys.stderr)
            sys.exit(2)
        if run_directory is None:
            argv = [*argv, f"hydra.run.dir={path}"]
        argv = [*run_overrides(path, argv), *argv]
        run_directory = path
    if run_directory is not None:
        path = os.path.abspath(os.path.expanduser(run_directory))
        if os.path.isfile(os.path.join(path, ".hydra", "config.yaml")) and holds_a_run(path):
            argv = [*argv, "hydra.output_subdir=null"]
    return argv


def override_key(override: str) -> str:
    """The key an override sets: `agent.lr` of `agent.lr=1e-3`, `++seed=3` and `~seed`."""
    return override.split("=", 1)[0].lstrip("+~")


def run_overrides(run_directory: str, argv: list[str]) -> list[str]:
    """The overrides the run in `run_directory` was made with (its `.hydra/overrides.yaml`), but those whose
    key `argv` sets again: `resume=DIR` alone composes the run's own configuration, and what is typed beside
    it is then checked against that configuration as the same command's would be."""
    path = os.path.join(run_directory, ".hydra", "overrides.yaml")
    if not os.path.isfile(path):
        return []
    import yaml

    with open(path) as file:
        saved = [str(override) for override in yaml.safe_load(file) or []]
    given = {override_key(arg) for arg in argv}
    return [override for override in saved if override_key(override) not in given | {"resume"}]


# Set by `cli`: the run directories the command line names that existed before Hydra made its own.
_EXISTING_RUN_DIRECTORIES: set[str] = set()
# Whether the user set HYDRA_FULL_ERROR (read once, at import): otherwise `cli` sets it so that a command line
# Hydra cannot compose reaches `composition_error`, and the job unsets it once composed.
HYDRA_FULL_ERROR_GIVEN = "HYDRA_FULL_ERROR" in os.environ


def composition_error(error: Exception, argv: list[str]) -> str:
    """One line for a command line Hydra cannot compose; an unknown key names the nearest option."""
    from hydra.errors import MissingConfigException
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    from rl.experiments.validation import nearest_option

    def full_key(cause: BaseException | None) -> str:
        return str(cause.full_key or "") if isinstance(cause, OmegaConfBaseException) else ""

    cause = error.__cause__ or error.__context__
    missing = next((e for e in (error, cause) if isinstance(e, MissingConfigException) and e.options), None)
    if missing is not None:  # A group's option that conf/ lacks (a misspelt preset, say).
        group, _, name = str(missing.missing_cfg_file or "").rpartition("/")
        nearest = nearest_option(name, [str(option) for option in missing.options])
        options = f"did you mean {group}={nearest}?" if nearest else f"its options: {', '.join(missing.options)}"
        return f"{group}={name}: no such option of the config group {group}; {options}"
    while cause is not None and not full_key(cause) and (cause.__cause__ or cause.__context__):
        cause = cause.__cause__ or cause.__context__  # A preset's error comes wrapped in Hydra's.
    key = full_key(cause)
    if key and (isinstance(cause, (ConfigKeyError, AttributeError)) or "not in struct" in str(cause)):
        group, _, name = key.rpartition(".")
        choices = dict(arg.split("=", 1) for arg in argv if arg.startswith(("experiment=", "agent=")))
        experiment = choices.get("experiment")
        agent = choices.get("agent")
        preset = os.path.join(CONFIG_DIR, "experiment", f"{experiment}.yaml")
        if group == "agent" and agent and os.path.isfile(preset):  # An agent option of another agent's preset.
            defaults = OmegaConf.to_container(OmegaConf.load(preset)).get("defaults", [])
            owner = {k: v for e in defaults if isinstance(e, dict) for k, v in e.items()}.get("override /agent")
            if owner not in (None, agent):
                return (
                    f"agent: experiment={experiment} is a preset for agent={owner}: its agent settings ({key}, ...) "
                    f"are {owner}'s, not {agent}'s; drop experiment= to run agent={agent} from its defaults"
                )
        options = [str(option) for option in cause.parent_node or {} if option != "hydra"]
        nearest = nearest_option(name, [option for option in options if not option.startswith("_")])
        return f"{key}: unknown option" + (f"; did you mean {key.removesuffix(name)}{nearest}?" if nearest else "")
    if key:  # OmegaConf's type check of an override.
        return f"{key}: {cause.msg}"
    text = f"{error}\n{cause or ''}".split("Config search path:")[0]  # Hydra's search path: not the user's error.
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " ".join(line + ("" if line.endswith(":") or i + 1 == len(lines) else ";") for i, line in enumerate(lines))


# A number written as a float (1e5, 2.5e2, 100000.0).
_FLOAT_LITERAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


def integral_overrides(argv: list[str]) -> list[str]:
    """An integer written as a float is that integer (`max_actor_steps=1e5` is 100000)."""

    def integral(value: str) -> str:
        if _FLOAT_LITERAL.fullmatch(value) and not value.lstrip("+-").isdigit() and float(value).is_integer():
            return str(int(float(value)))
        return value

    rewritten = []
    for arg in argv:
        key, separator, value = arg.partition("=")
        if separator and not key.startswith(("-", "hydra.")):
            arg = f"{key}={','.join(integral(item) for item in value.split(','))}"
        rewritten.append(arg)
    return rewritten


def job_prefix() -> str:
    """What a multirun job's terminal lines start with (`[job 3] `: parallel jobs' lines interleave)."""
    hydra_config = HydraConfig.get()
    return f"[job {hydra_config.job.num}] " if hydra_config.mode == RunMode.MULTIRUN else ""


def prepare_job(config: DictConfig) -> Job | float:
    """Everything before training, its terminal lines after the job's prefix (`job_prefix`); the task of
    hydra/launcher=anakin_grid, which trains the jobs it prepares together."""
    from rl.loggers.base import console_prefixed

    with console_prefixed(job_prefix()):
        return build_job(config)


def build_job(config: DictConfig) -> Job | float:
    """The experiment built and checked, the resume plan applied. A refused job of a multirun or an
    already finished run gives its value (NaN when refused)."""
    from rl.experiments.make_experiment import make_experiment, tracking_settings
    from rl.experiments.validation import ConfigError, check_launcher_stack
    from rl.experiments.resume import apply_plan, prepare_run

    if not HYDRA_FULL_ERROR_GIVEN:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    hydra_config = HydraConfig.get()
    output_dir = hydra_config.runtime.output_dir
    explicit = config.get("resume") is not None
    multirun = hydra_config.mode == RunMode.MULTIRUN
    objective = config.get("objective", "final_eval_return")
    try:
        tracking = tracking_settings(hydra_config, config)
        experiment, launch = make_experiment(config, output_dir, hydra_config.runtime.choices, **tracking)
        check_launcher_stack(launch, hydra_config.runtime.choices.get("launcher"))  # Before the run directory.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", RunWarning)  # Libraries' warnings keep their filters.
            plan = prepare_run(
                experiment, config, output_dir, explicit=explicit, learner_template=launch.checkpoint_template
            )
        for warning in caught:
            if issubclass(warning.category, RunWarning):
                report(f"Warning: {warning.message}", error=True, transcript=False)
            else:
                warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    except (ConfigError, CheckpointError) as error:
        what, code = ("Invalid configuration", 2) if isinstance(error, ConfigError) else ("Cannot resume", 1)
        if not multirun:
            report(f"{what}: {error}", error=True, transcript=False)  # A refused resume leaves its run as it was.
            remove_unused_run_directory(output_dir)
            sys.exit(code)
        return refuse_job(output_dir, f"{what}: {error}")
    if plan.finished is not None:
        summary = plan.finished
        report(
            f"The run in {output_dir} has already finished ({summary.get('actor_steps')} actor steps, final "
            f"evaluation return {summary.get('final_eval_return')}); nothing to do.",
            transcript=False,
        )
        return summary.get(objective, float("nan"))
    experiment = apply_plan(plan, experiment)
    if plan.restore is not None:
        counts = plan.restore.counts
        report(
            f"Resuming {output_dir} from {os.path.basename(plan.restore.checkpoint)} "
            f"({counts.get('actor_steps', 0)} actor steps, {counts.get('learner_steps', 0)} learner steps"
            + ("; replay buffer restored)" if plan.restore.restore_replay else ")")
        )
    return Job(experiment, launch, output_dir, objective)


def remove_unused_run_directory(output_dir: str) -> None:
    """After a refused command: what Hydra made for it (`.hydra/`, an empty train.log) and the directories
    left empty by that, up to the working directory; a directory that holds a run, or anything else, stays."""
    if holds_a_run(output_dir):
        return
    shutil.rmtree(os.path.join(output_dir, ".hydra"), ignore_errors=True)
    log = os.path.join(output_dir, f"{HydraConfig.get().job.name}.log")
    if os.path.isfile(log) and os.path.getsize(log) == 0:
        os.remove(log)
    directory = os.path.abspath(output_dir)
    stop = os.getcwd()
    if directory in _EXISTING_RUN_DIRECTORIES:
        return
    while not os.listdir(directory):
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
    from rl.experiments.signals import Interrupted, RunInterrupted, requeue_signal, signal_name
    from rl.experiments.launcher import LauncherError
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
        report(f"Interrupted by {signal_name(code - 128)} before a checkpoint could be written", error=True)
        sys.exit(code)
    except BaseException:
        close_loggers(experiment, exit_code=1)
        raise
    return finish_job(job, summary)


class SweepReport(Callback):
    """At the end of a multirun: `<sweep dir>/results.yaml` ranks the sweep's settings by their mean objective
    over seeds (rl.sweeps.results) and maps every job to its directory, overrides and value; the
    jobs refused before they started are listed (each one's `REFUSED_FILE`), exit status 2."""

    def on_multirun_start(self, config: DictConfig, **kwargs: object) -> None:
        sweeper = config.hydra.sweeper
        startup = (sweeper.get("sampler") or {}).get("n_startup_trials")
        if "optuna" in str(sweeper.get("_target_", "")).lower() and startup and sweeper.n_trials <= startup:
            print(
                f"Warning: hydra.sweeper.n_trials={sweeper.n_trials} is within the sampler's n_startup_trials={startup}: "
                "every trial is sampled at random",
                file=sys.stderr,
            )

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        from rl.sweeps.results import read_sweep, write_results

        sweep = os.path.abspath(str(config.hydra.sweep.dir))
        jobs = read_sweep(sweep, config.get("objective", "final_eval_return"), REFUSED_FILE)
        maximize = not str(config.hydra.sweeper.get("direction", "maximize")).startswith("min")
        for line in write_results(sweep, jobs, maximize):
            print(line)
        refused = jobs.refused
        if refused:
            lines = [f"  {job}: {reason}" for job, reason in refused.items()]
            print(f"{len(refused)} job(s) of the sweep in {sweep} were refused:", *lines, sep="\n", file=sys.stderr)
            sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(config: DictConfig) -> float:
    from rl.experiments.signals import Interrupted, raise_on_signals, signal_name
    from rl.loggers.base import console_prefixed

    with console_prefixed(job_prefix()):
        try:
            with raise_on_signals():
                return train(config)
        except Interrupted as error:  # While the experiment was being built: nothing to save.
            report(f"Interrupted by {signal_name(error.signum)} while starting; nothing was trained", error=True)
            sys.exit(error.exit_code)


def run_directory_error(argv: list[str]) -> str | None:
    """Why the run (or sweep) directory this command would write cannot be written, as one line;
    None when it can or no job starts. Probed in its nearest existing ancestor, nothing left behind."""
    information = ("-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info", "-sc", "--shell-completion")
    if any(arg in information or arg.startswith("--cfg=") for arg in argv):
        return None
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [arg.split("=", 1)[1] for arg in argv if arg.startswith(f"{key}=")]
    value = given[-1].strip("'\"") if given else ("multirun" if multirun else "outputs")
    if "${" in value:  # Resolved by Hydra: check the fixed part before the interpolation.
        value = os.path.dirname(value.split("${", 1)[0]) or "."
    path = os.path.abspath(os.path.expanduser(value))
    existing = path
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"Cannot write the run directory {path} ({key}): {existing} is not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write_check_", dir=existing))
    except OSError as error:
        return f"Cannot write the run directory {path} ({key}): {error.strerror or error} ({existing})"
    return None


def cluster_error(argv: list[str]) -> str | None:
    """A sweep sent to SLURM from a machine without it, as one line (submitit's own error is a traceback)."""
    launcher = [arg.split("=", 1)[1] for arg in argv if arg.startswith("hydra/launcher=")]
    multirun = any(arg in ("-m", "--multirun") for arg in argv)
    if multirun and launcher and launcher[-1] in ("slurm", "submitit_slurm") and shutil.which("srun") is None:
        return (
            f"hydra/launcher={launcher[-1]}: SLURM's srun is not on this machine's PATH; submit from the cluster "
            "(hydra/launcher=submitit_local runs the same jobs here)"
        )
    return None


def exit_past_running_work(code: Any) -> None:
    """After a stop that left device work running (rl.experiments.signals.left_running), everything is
    written: ends the process now, as Python's shutdown would wait for that work (XLA cannot cancel it)."""
    from rl.experiments.signals import left_running

    if not left_running():
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


def cli() -> None:
    """The command line: an unwritable run directory, or SLURM where there is none, is refused in one
    line (exit status 1)."""
    from rl.allocator import reexec_with_jemalloc

    reexec_with_jemalloc()  # sys.orig_argv keeps `-m rl.train` and the arguments.
    sys.argv[1:] = resume_arguments(integral_overrides(sys.argv[1:]))
    named = [arg.split("=", 1)[1] for arg in sys.argv[1:] if arg.startswith("hydra.run.dir=")]
    _EXISTING_RUN_DIRECTORIES.update(os.path.abspath(os.path.expanduser(path)) for path in named if os.path.isdir(path))
    error = run_directory_error(sys.argv[1:]) or cluster_error(sys.argv[1:])
    if error is not None:
        print(error, file=sys.stderr)
        sys.exit(1)
    from hydra.errors import CompactHydraException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    try:
        main()
    except CompactHydraException as error:
        if HYDRA_FULL_ERROR_GIVEN:
            raise
        print(f"Invalid configuration: {composition_error(error, sys.argv[1:])}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as stop:  # A stopped run or grid (exit status 128 + the signal's number).
        exit_past_running_work(stop.code)
        raise


if __name__ == "__main__":
    cli()
