"""`baselines`: every preset trained over seeds 0..N-1, summarised in docs/baselines.md.

Each (preset, seed) is one scripts/train.py process (checkpoint=false progress=false
logger=csv) in its own run directory, `<runs dir>/<preset>/seed_<s>`, `jobs` of them at
a time. From the runs' summary.json the suite writes a generated markdown file: per
preset its environment, budget (max_actor_steps), threshold, how many seeds ended at or
above the threshold (final_eval_return >= threshold), the interquartile mean (IQM) of
the final return with a 95% percentile-bootstrap interval over seeds, the median actor
steps and seconds to the threshold over the seeds that reached it, and a published
figure for the same task (PUBLISHED, each with its source). Next to it, a PNG of each
preset's IQM learning curve over seeds (summary.json's eval_returns) with its band.

rliable is not a dependency: the IQM and its interval come from rl/analysis/stats.py
(scipy's 25% trimmed mean and percentile bootstrap, as rliable computes them for a
single task, where the stratified bootstrap is the plain one).

The parts that read no process (`preset_result`, `render_markdown`, `curve_iqm`) are pure
functions of summaries, for tests. Hydra stays in scripts/benchmark.py: it passes
`describe(preset, overrides)`, the composed config's facts about a preset.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
from typing import Any, Callable, Mapping, Sequence

import yaml

from rl.benchmarks.common import Row, median, progress
from rl.benchmarks.runs import QUICK, QUICK_WHERE_PRESENT, RunFailed

DESCRIPTION = (
    "each --presets (default: the CartPole and Pendulum presets, reverb and gymnax) "
    "trained by scripts/train.py over seeds 0..N-1 (--seeds N, default 10), --jobs "
    "processes at a time (default 2), each in <--runs-dir>/<preset>/seed_<s>, with any "
    "--overrides; writes the markdown table --out (default docs/baselines.md: successes "
    "k/N, IQM of the final return with a 95% bootstrap CI, median steps and seconds to "
    "the threshold, a published figure with its source) and its IQM learning curves "
    "(<out>.png)."
)

DEFAULT_PRESETS = (
    "dqn_cartpole",
    "ppo_cartpole",
    "impala_cartpole",
    "r2d2_cartpole",
    "r2d2_cartpole_masked",
    "dqn_cartpole_masked",
    "sac_pendulum",
    "td3_pendulum",
    "d4pg_pendulum",
    "ppo_pendulum",
    "ppo_gymnax_cartpole",
    "dqn_gymnax_cartpole",
    "sac_gymnax_pendulum",
)
DEFAULT_NUM_SEEDS = 10
DEFAULT_JOBS = 2
DEFAULT_OUT = os.path.join("docs", "baselines.md")
DEFAULT_RUNS_DIR = os.path.join("outputs", "baselines")
# Every run's plumbing: no checkpoints (nothing to resume), no progress bar, CSV logs
# (logs/*.csv, which scripts/plot.py reads) and no W&B.
RUN_OVERRIDES = ("logger=csv", "checkpoint=false", "progress=false")
LOG_FILE = "benchmark.log"

# --------------------------------------------------------------------------- published figures

# Where the published figures come from: key -> (citation, address, what its numbers are).
SOURCES: dict[str, tuple[str, str, str]] = {
    "zoo": (
        'RL Baselines3 Zoo, benchmark.md, "Performance of trained agents" (version of commit 0088472b)',
        "https://github.com/DLR-RM/rl-baselines3-zoo/blob/0088472b8cb622732bdbc4aa3d0d0abde86c67ed/benchmark.md",
        "mean_reward ± std_reward of ONE trained Stable-Baselines3 agent (trained for n_timesteps), over "
        "about 150,000 evaluation steps with the deterministic policy: the ± is the spread over "
        "evaluation episodes, not over seeds (the page says it is not a quantitative benchmark)",
    ),
    "hf_ppo_lstm": (
        "Stable-Baselines3 model card sb3/ppo_lstm-CartPoleNoVel-v1 (RecurrentPPO, SB3-Contrib, trained with the RL Zoo)",
        "https://huggingface.co/sb3/ppo_lstm-CartPoleNoVel-v1",
        "mean_reward 500.00 ± 0.00 of one trained agent over 10 deterministic episodes (results.json) on "
        "CartPoleNoVel-v1, CartPole-v1 without the velocities: the observation environment=cartpole_masked "
        "keeps (cart position, pole angle)",
    ),
    "gymnasium": (
        "Gymnasium documentation, Classic Control: Cart Pole",
        "https://gymnasium.farama.org/environments/classic_control/cart_pole/",
        "CartPole-v1 gives +1 per step and truncates episodes at 500 steps: 500 is the largest return",
    ),
}


@dataclasses.dataclass(frozen=True)
class Published:
    """A published figure for a preset's task: the number as the source prints it (or a
    word where it has none), what it is, and the key of its source in SOURCES."""

    figure: str
    detail: str
    source: str


PUBLISHED: dict[str, Published] = {
    "dqn_cartpole": Published("500.0 ± 0.0", "SB3 DQN, CartPole-v1, 50k steps", "zoo"),
    "ppo_cartpole": Published("500.0 ± 0.0", "SB3 PPO, CartPole-v1, 100k steps", "zoo"),
    "impala_cartpole": Published(
        "500.0 ± 0.0", "no IMPALA figure; SB3 A2C (whose settings the preset takes), CartPole-v1, 500k steps", "zoo"
    ),
    "r2d2_cartpole": Published("see source", "no published R2D2 figure; 500 is the task's maximum", "gymnasium"),
    "r2d2_cartpole_masked": Published(
        "500.00 ± 0.00", "no R2D2 figure; SB3-Contrib RecurrentPPO (also recurrent), CartPoleNoVel-v1", "hf_ppo_lstm"
    ),
    "dqn_cartpole_masked": Published(
        "see source",
        "no published feed-forward figure; the recurrent RecurrentPPO's is 500.00 ± 0.00, CartPoleNoVel-v1",
        "hf_ppo_lstm",
    ),
    "sac_pendulum": Published("-157.0 ± 88.7", "SB3 SAC, Pendulum-v1, 20k steps", "zoo"),
    "td3_pendulum": Published("-151.9 ± 90.2", "SB3 TD3, Pendulum-v1, 20k steps", "zoo"),
    "d4pg_pendulum": Published("-152.1 ± 94.3", "no D4PG figure; SB3 DDPG, Pendulum-v1, 20k steps", "zoo"),
    "ppo_pendulum": Published("-172.2 ± 104.2", "SB3 PPO, Pendulum-v1, 100k steps", "zoo"),
    "ppo_gymnax_cartpole": Published(
        "500.0 ± 0.0", "SB3 PPO on Gymnasium's CartPole-v1 (gymnax reimplements it), 100k steps", "zoo"
    ),
    "dqn_gymnax_cartpole": Published(
        "500.0 ± 0.0", "SB3 DQN on Gymnasium's CartPole-v1 (gymnax reimplements it), 50k steps", "zoo"
    ),
    "sac_gymnax_pendulum": Published(
        "-157.0 ± 88.7", "SB3 SAC on Gymnasium's Pendulum-v1 (gymnax reimplements it), 20k steps", "zoo"
    ),
}

# --------------------------------------------------------------------------- one preset's result

TABLE_HEADER = (
    "preset",
    "environment",
    "budget (actor steps)",
    "threshold",
    "successes",
    "IQM final return [95% CI]",
    "median steps to threshold",
    "median seconds to threshold",
    "published",
)


def environment_label(name: str | None, option: str | None) -> str:
    """How the table names a preset's environment: the task (`environment.name`, or a
    wrapper's `environment.task`) and, where it says more, the environment option
    (`CartPole-v1 (gymnax)`, `CartPole-v1 (cartpole_masked)`; plain `CartPole-v1` for
    the option `cartpole`)."""
    task = name or option or "environment"
    if not option or option == task:
        return task
    if option.lower() == task.split("-")[0].lower():
        return task
    return f"{task} ({option})"


@dataclasses.dataclass
class PresetResult:
    """One preset's runs: `summaries[i]` is seed `seeds[i]`'s summary.json (None: the run
    failed, `failures` says why)."""

    preset: str
    environment: str
    budget: int | None
    threshold: float | None
    seeds: list[int]
    summaries: list[dict[str, Any] | None]
    failures: dict[int, str] = dataclasses.field(default_factory=dict)
    skipped_overrides: list[str] = dataclasses.field(default_factory=list)

    @property
    def finals(self) -> list[float]:
        """The final evaluation returns of the seeds that finished (finite ones)."""
        values = [_number(s.get("final_eval_return")) for s in self.summaries if s is not None]
        return [v for v in values if v is not None]

    @property
    def successes(self) -> int | None:
        """Seeds whose final evaluation return is at least the threshold (None: no threshold)."""
        if self.threshold is None:
            return None
        return sum(1 for value in self.finals if value >= self.threshold)

    def statistics(self) -> dict[str, float]:
        """IQM and mean of the final returns with their 95% bootstrap intervals (stats.summarize)."""
        from rl.analysis.stats import summarize

        return summarize(self.finals)

    def reached(self, key: str) -> list[float]:
        """`key` (steps_to_threshold, time_to_threshold_s) of the seeds that reached the threshold."""
        values = [_number(s.get(key)) for s in self.summaries if s is not None]
        return [v for v in values if v is not None]


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def preset_result(
    preset: str,
    info: Mapping[str, Any],
    seeds: Sequence[int],
    summaries: Sequence[Mapping[str, Any] | None],
    failures: Mapping[int, str] | None = None,
) -> PresetResult:
    """A PresetResult from `describe`'s facts (`environment`, `budget`, `threshold`,
    `skipped`) and the seeds' summaries. A preset without a threshold in `info` takes the
    one its summaries recorded."""
    if len(seeds) != len(summaries):
        raise ValueError(f"{len(seeds)} seeds but {len(summaries)} summaries")
    threshold = _number(info.get("threshold"))
    if threshold is None:
        threshold = next((_number(s.get("threshold")) for s in summaries if s and s.get("threshold") is not None), None)
    budget = info.get("budget")
    return PresetResult(
        preset=preset,
        environment=str(info.get("environment") or next((s.get("environment") for s in summaries if s), "?")),
        budget=None if budget is None else int(budget),
        threshold=threshold,
        seeds=list(seeds),
        summaries=[None if s is None else dict(s) for s in summaries],
        failures=dict(failures or {}),
        skipped_overrides=list(info.get("skipped") or []),
    )


def _return(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.1f}"


def table_cells(result: PresetResult, reference: str = "") -> list[str]:
    """The row of `result` in the table (TABLE_HEADER's columns); `reference` is the
    published figure's source marker (`[1]`)."""
    n = len(result.seeds)
    successes = "n/a" if result.successes is None else f"{result.successes}/{n}"
    stats = result.statistics()
    if stats["runs"] == 0:
        iqm_cell = "n/a"
    else:
        iqm_cell = f"{_return(stats['iqm'])} [{_return(stats['iqm_low'])}, {_return(stats['iqm_high'])}]"
    steps = result.reached("steps_to_threshold")
    seconds = result.reached("time_to_threshold_s")
    steps_cell = "n/a" if not steps else f"{median(steps):,.0f} (n={len(steps)})"
    seconds_cell = "n/a" if not seconds else f"{median(seconds):.1f} (n={len(seconds)})"
    published = PUBLISHED.get(result.preset)
    published_cell = "n/a" if published is None else f"{published.figure} ({published.detail}) {reference}".strip()
    return [
        f"`{result.preset}`",
        result.environment,
        "n/a" if result.budget is None else f"{result.budget:,}",
        "n/a" if result.threshold is None else f"{result.threshold:g}",
        successes,
        iqm_cell,
        steps_cell,
        seconds_cell,
        published_cell,
    ]


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def markdown_table(results: Sequence[PresetResult]) -> str:
    """The results table, one row per preset; published figures cite SOURCES as [k]
    in `used_sources` order."""
    numbers = {key: k + 1 for k, key in enumerate(used_sources(results))}
    lines = [_markdown_row(TABLE_HEADER), _markdown_row(["---"] * len(TABLE_HEADER))]
    for result in results:
        published = PUBLISHED.get(result.preset)
        reference = f"[{numbers[published.source]}]" if published else ""
        lines.append(_markdown_row(table_cells(result, reference)))
    return "\n".join(lines)


def used_sources(results: Sequence[PresetResult]) -> list[str]:
    """The SOURCES keys the table cites, in the order of first citation."""
    keys: list[str] = []
    for result in results:
        published = PUBLISHED.get(result.preset)
        if published and published.source not in keys:
            keys.append(published.source)
    return keys


def seeds_table(results: Sequence[PresetResult]) -> str:
    """Every seed's final evaluation return (`failed` for a run without a summary)."""
    lines = [_markdown_row(["preset", "final return per seed"]), _markdown_row(["---", "---"])]
    for result in results:
        cells = []
        for seed, summary in zip(result.seeds, result.summaries):
            value = None if summary is None else _number(summary.get("final_eval_return"))
            cells.append(
                f"{seed}: {'failed' if summary is None else _return(value if value is not None else math.nan)}"
            )
        lines.append(_markdown_row([f"`{result.preset}`", ", ".join(cells)]))
    return "\n".join(lines)


def render_markdown(
    results: Sequence[PresetResult],
    command: str,
    date: str,
    figure: str | None = None,
    details: Sequence[str] = (),
) -> str:
    """The whole generated file. `figure`: the curves' PNG, relative to the markdown file;
    `details`: lines about how the runs were made (machine, jobs, overrides)."""
    seeds = sorted({seed for result in results for seed in result.seeds})
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]} to {seeds[-1]})"
    lines = [
        "# Baselines",
        "",
        "> Generated by `scripts/benchmark.py baselines`: do not edit this file by hand; rerun the command "
        "below to update it.",
        "",
        f"- Command: `{command}`",
        f"- Date: {date}",
        *[f"- {line}" for line in details],
        "",
        f"Every preset trained with scripts/train.py over {which}, each seed in its own run directory.",
        "",
        markdown_table(results),
        "",
        "- **successes**: seeds whose final evaluation return (`final_eval_return` in summary.json) is at least "
        "the preset's threshold, out of the seeds run (a failed run counts as no success).",
        "- **IQM final return**: interquartile mean (25% trimmed mean) of the final evaluation returns over the "
        "seeds, with a 95% percentile-bootstrap interval over seeds (rl/analysis/stats.py; one task, so the "
        "stratified bootstrap is the plain one). With fewer than 4 seeds nothing is trimmed (it is the mean).",
        "- **median steps / seconds to threshold**: over the seeds whose evaluation reached the threshold at "
        "some point (n of them; `steps_to_threshold`, `time_to_threshold_s`); n/a when none did. Seconds are "
        "wall-clock from the start of the run, with other runs sharing the machine (see above).",
        "- **published**: a figure for the same task from the source cited, where one exists; it is not from the "
        "same budget, code or number of seeds, and its ± is what the source reports (see Sources).",
    ]
    if figure:
        lines += ["", f"![IQM learning curves over seeds, 95% bootstrap band]({figure})", ""]
        lines.append(
            f"[{figure}]({figure}): each preset's IQM evaluation return over seeds against actor steps "
            "(`eval_returns` of summary.json), shaded 95% percentile-bootstrap band; dashed: the threshold."
        )
    lines += ["", "## Final return per seed", "", seeds_table(results), "", "## Sources", ""]
    for k, key in enumerate(used_sources(results), start=1):
        citation, address, what = SOURCES[key]
        lines.append(f"{k}. {citation}: <{address}>. {what}.")
    notes = []
    for result in results:
        for seed, reason in sorted(result.failures.items()):
            notes.append(f"`{result.preset}` seed {seed} failed: {reason}")
        if result.skipped_overrides:
            skipped = " ".join(f"`{o}`" for o in result.skipped_overrides)
            notes.append(f"`{result.preset}`: overrides not in its config, not applied: {skipped}")
    if notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- learning curves


def curve_iqm(curves: Sequence[Sequence[Sequence[float]]]) -> dict[str, Any]:
    """IQM over seeds of evaluation curves ([[actor steps, return], ...] each) on the
    steps they share (plotting.common_grid, runs interpolated onto it), with the 95%
    bootstrap interval at each step."""
    import numpy as np

    from rl.analysis.plotting import common_grid
    from rl.analysis.stats import bootstrap_ci, iqm

    arrays = []
    for curve in curves:
        points = np.asarray(curve, dtype=np.float64).reshape(-1, 2)
        points = points[np.isfinite(points).all(axis=1)]
        if points.size:
            order = np.argsort(points[:, 0], kind="stable")
            arrays.append((points[order, 0], points[order, 1]))
    grid = common_grid(arrays)
    if grid.size == 0:
        empty = np.zeros(0)
        return {"steps": empty, "iqm": empty, "low": empty, "high": empty, "runs": 0}
    values = np.stack([np.interp(grid, steps, returns) for steps, returns in arrays])
    low, high = bootstrap_ci(values, iqm)
    return {"steps": grid, "iqm": iqm(values, axis=0), "low": low, "high": high, "runs": len(arrays)}


def plot_learning_curves(results: Sequence[PresetResult], path: str, columns: int = 4) -> None:
    """One subplot per preset: IQM evaluation return over seeds, 95% bootstrap band,
    the threshold dashed; saved as a PNG at `path` (matplotlib's object API, no display)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    count = max(len(results), 1)
    columns = min(columns, count)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows), dpi=110, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, result in zip(axes, results):
        curves = [s.get("eval_returns") or [] for s in result.summaries if s is not None]
        curve = curve_iqm(curves)
        if curve["steps"].size:
            marker = "o" if curve["steps"].size <= 25 else None
            ax.fill_between(curve["steps"], curve["low"], curve["high"], color="C0", alpha=0.25, linewidth=0)
            ax.plot(curve["steps"], curve["iqm"], color="C0", linewidth=1.8, marker=marker, markersize=3)
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
        if result.threshold is not None:
            ax.axhline(result.threshold, color="0.4", linestyle="--", linewidth=1)
        ax.set_title(f"{result.preset} ({curve['runs']} seeds)\n{result.environment}", fontsize="medium")
        ax.set_xlabel("actor steps")
        ax.set_ylabel("IQM evaluation return")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    figure.suptitle("IQM of the evaluation return over seeds (band: 95% percentile bootstrap CI; dashed: threshold)")
    figure.savefig(path, format="png")


# --------------------------------------------------------------------------- running


@dataclasses.dataclass
class BaselinesOptions:
    """What `suite_baselines` runs and where it writes.

    `describe(preset, overrides)` returns the composed config's facts about a preset:
    `environment` (its label), `budget`, `threshold`, `overrides` (those of `overrides`
    its config has) and `skipped` (the rest). `command` is the command line recorded in
    the markdown file.
    """

    train_script: str
    describe: Callable[[str, Sequence[str]], Mapping[str, Any]]
    presets: Sequence[str] = DEFAULT_PRESETS
    seeds: Sequence[int] = tuple(range(DEFAULT_NUM_SEEDS))
    out: str = DEFAULT_OUT
    runs_dir: str = DEFAULT_RUNS_DIR
    overrides: Sequence[str] = ()
    jobs: int = DEFAULT_JOBS
    quick: bool = False
    reuse: bool = False
    command: str = "python scripts/benchmark.py baselines"
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.jobs}")
        if not self.seeds:
            raise ValueError("at least one seed is needed")
        if not self.presets:
            raise ValueError("at least one preset is needed")


def run_directory(runs_dir: str, preset: str, seed: int) -> str:
    return os.path.join(runs_dir, preset, f"seed_{seed}")


def run_command(train_script: str, preset: str, seed: int, overrides: Sequence[str], run_dir: str) -> list[str]:
    """scripts/train.py's command line for one (preset, seed)."""
    return [
        sys.executable,
        train_script,
        f"experiment={preset}",
        f"seed={seed}",
        *RUN_OVERRIDES,
        *overrides,
        f"hydra.run.dir={os.path.abspath(run_dir)}",
    ]


def _finished_summary(
    run_dir: str, command: Sequence[str], config: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """The summary of a finished earlier run in `run_dir` made by the same command line
    (recorded in benchmark.json) and, when `config` is given, from the same composed
    config apart from the seed (its .hydra/config.yaml: a preset edited since has the same
    command line), else None."""
    try:
        with open(os.path.join(run_dir, "benchmark.json")) as file:
            recorded = json.load(file)
        with open(os.path.join(run_dir, "summary.json")) as file:
            summary = json.load(file)
    except (OSError, ValueError):
        return None
    if recorded.get("command") != list(command[1:]) or summary.get("status", "finished") != "finished":
        return None
    if config is not None:
        try:
            with open(os.path.join(run_dir, ".hydra", "config.yaml")) as file:
                used = yaml.safe_load(file)
        except (OSError, yaml.YAMLError):
            return None
        if not isinstance(used, dict) or _without_seed(used) != _without_seed(config):
            return None
    return summary


def _without_seed(config: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if key != "seed"}


def train_into(command: Sequence[str], run_dir: str, timeout_s: float | None = None) -> dict[str, Any]:
    """Runs `command` (scripts/train.py writing into `run_dir`, which is emptied first);
    its output goes to <run_dir>/benchmark.log. Returns summary.json; RunFailed if the
    process fails or leaves none."""
    if os.path.isdir(run_dir):
        shutil.rmtree(run_dir)  # A run directory that holds a run would be resumed, not started over.
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "benchmark.json"), "w") as file:
        json.dump({"command": list(command[1:])}, file, indent=1)  # Not the interpreter: a venv may move.
    environment = {**os.environ, "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
    log_path = os.path.join(run_dir, LOG_FILE)
    root = os.path.dirname(os.path.dirname(os.path.abspath(command[1])))
    with open(log_path, "w") as log:
        try:
            result = subprocess.run(
                list(command), cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            raise RunFailed(f"timed out after {timeout_s} s (output: {log_path})") from None
    if result.returncode != 0:
        raise RunFailed(f"exited with status {result.returncode} (output: {log_path}){_tail(log_path)}")
    try:
        with open(os.path.join(run_dir, "summary.json")) as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        raise RunFailed(f"left no readable summary.json ({error}; output: {log_path})") from None


def _tail(path: str, lines: int = 1) -> str:
    """The last non-empty line of a log, for a one-line failure reason."""
    try:
        with open(path, errors="replace") as file:
            text = [line.strip() for line in file if line.strip()]
    except OSError:
        return ""
    return (": " + " / ".join(text[-lines:]))[:300] if text else ""


def quick_overrides() -> list[str]:
    """--quick: runs.py's smoke-test budgets (a check that the suite runs, not a result)."""
    return [*QUICK, *QUICK_WHERE_PRESENT]


def suite_baselines(options: BaselinesOptions) -> tuple[list[Row], list[str], list[PresetResult]]:
    """Trains every (preset, seed), writes the markdown file and its figure; the rows
    (for the printed table and --json), notes and per-preset results."""
    notes: list[str] = []
    requested = [*(quick_overrides() if options.quick else []), *options.overrides]
    infos = {}
    for preset in options.presets:
        try:
            infos[preset] = dict(options.describe(preset, requested))
        except Exception as error:  # Hydra's: no such preset, a bad value.
            raise ValueError(f"preset {preset}: {error}") from error
    unknown = [o for o in options.overrides if all(o in info.get("skipped", ()) for info in infos.values())]
    if unknown:
        raise ValueError(f"overrides in no preset's config: {' '.join(unknown)}")
    for preset, info in infos.items():
        if info.get("skipped"):
            notes.append(f"{preset}: not in its config, not applied: {' '.join(info['skipped'])}")
            progress(notes[-1])

    jobs = [(preset, seed) for preset in options.presets for seed in options.seeds]
    summaries: dict[tuple[str, int], dict[str, Any] | None] = {}
    failures: dict[str, dict[int, str]] = {preset: {} for preset in options.presets}

    def one(preset: str, seed: int) -> dict[str, Any]:
        run_dir = run_directory(options.runs_dir, preset, seed)
        command = run_command(options.train_script, preset, seed, infos[preset].get("overrides", requested), run_dir)
        if options.reuse:
            summary = _finished_summary(run_dir, command, infos[preset].get("config"))
            if summary is not None:
                progress(f"baselines {preset} seed={seed}: reusing the finished run in {run_dir}")
                return summary
        return train_into(command, run_dir, options.timeout_s)

    progress(f"baselines: {len(jobs)} runs, {options.jobs} at a time, into {options.runs_dir}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = {pool.submit(one, preset, seed): (preset, seed) for preset, seed in jobs}
        for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            preset, seed = futures[future]
            try:
                summary = future.result()
            except RunFailed as error:
                summaries[(preset, seed)] = None
                failures[preset][seed] = str(error)
                notes.append(f"{preset} seed={seed} failed: {error}")
                progress(f"[{done}/{len(jobs)}] {notes[-1]}")
                continue
            summaries[(preset, seed)] = summary
            progress(
                f"[{done}/{len(jobs)}] baselines {preset} seed={seed}: final return {summary.get('final_eval_return')}, "
                f"threshold reached after {summary.get('steps_to_threshold')} steps, run {summary.get('wall_time_s')} s"
            )

    results = [
        preset_result(
            preset,
            infos[preset],
            list(options.seeds),
            [summaries.get((preset, seed)) for seed in options.seeds],
            failures[preset],
        )
        for preset in options.presets
    ]
    write_report(results, options)
    return result_rows(results), notes, results


def figure_path(out: str) -> str:
    """The curves' PNG beside the markdown file: docs/baselines.md -> docs/baselines.png."""
    return os.path.splitext(out)[0] + ".png"


def write_report(results: Sequence[PresetResult], options: BaselinesOptions) -> None:
    directory = os.path.dirname(os.path.abspath(options.out))
    os.makedirs(directory, exist_ok=True)
    figure = figure_path(options.out)
    plot_learning_curves(results, figure)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    overrides = [*(quick_overrides() if options.quick else []), *options.overrides]
    root = os.path.dirname(os.path.dirname(os.path.abspath(options.train_script)))
    details = [
        f"Runs: `scripts/train.py experiment=<preset> seed=<s> {' '.join(RUN_OVERRIDES)}"
        + (f" {' '.join(overrides)}" if overrides else "")
        + f"`, {options.jobs} at a time on a machine with {os.cpu_count()} CPU cores",
        f"Run directories: `{_shown(options.runs_dir, root)}/<preset>/seed_<s>`",
    ]
    commit = _git_commit(root)
    if commit:
        details.append(f"Code: commit `{commit}` (plus any uncommitted changes in the tree)")
    if options.quick:
        details.append("--quick: smoke-test budgets; the figures mean little")
    text = render_markdown(results, options.command, date, os.path.basename(figure), details)
    with open(options.out, "w") as file:
        file.write(text)
    progress(f"baselines: wrote {options.out} and {figure}")


def _shown(path: str, root: str) -> str:
    """`path` relative to the project when it lies inside it (what a reader can find)."""
    relative = os.path.relpath(os.path.abspath(path), root)
    return path if relative.startswith("..") else relative


def _git_commit(root: str) -> str | None:
    """The checked-out commit (read-only `git rev-parse`), or None outside a repository."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def result_rows(results: Sequence[PresetResult]) -> list[Row]:
    """The suite's rows: per preset, successes (bound: the seeds run; ratio: the fraction),
    the IQM final return (bound: the threshold) and the medians to the threshold."""
    rows: list[Row] = []
    for result in results:
        n = len(result.seeds)
        k = result.successes
        rows.append(Row("baselines", f"{result.preset} successes", k, "seeds", n, None if k is None else k / n))
        stats = result.statistics()
        iqm = stats["iqm"] if stats["runs"] else None
        rows.append(Row("baselines", f"{result.preset} IQM final return", iqm, "return", result.threshold))
        steps = result.reached("steps_to_threshold")
        seconds = result.reached("time_to_threshold_s")
        rows.append(Row("baselines", f"{result.preset} median steps to threshold", median(steps), "actor steps"))
        rows.append(Row("baselines", f"{result.preset} median seconds to threshold", median(seconds), "s"))
    return rows
