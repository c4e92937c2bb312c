"""`baselines`: every preset trained over seeds 0..N-1, summarised in a generated docs/baselines.md and its PNG."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import datetime
import functools
import itertools
import json
import math
import os
import subprocess
import sys
import types
from typing import Any, Callable, Mapping, Sequence

import yaml

from benchmarks.common import QUICK, QUICK_WHERE_PRESENT, RUN_OVERRIDES, Row, RunFailed, median, progress, train

DEFAULT_NUM_SEEDS = 10
DEFAULT_JOBS = 2
DEFAULT_OUT = os.path.join("docs", "baselines.md")
DEFAULT_RUNS_DIR = os.path.join("outputs", "baselines")


# The report's fixed text and the published figures (where they come from, what they are).
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "baselines.yaml")) as _file:
    _DATA = yaml.safe_load(_file)
SOURCES = {key: (source["citation"], source["address"], source["what"]) for key, source in _DATA["sources"].items()}
# preset -> its task's published figure as the source prints it (`figure`), what it is (`detail`), `source`.
PUBLISHED = {preset: types.SimpleNamespace(**figure) for preset, figure in _DATA["published"].items()}
DEFAULT_PRESETS = tuple(PUBLISHED)  # The presets with a published figure, in its order.
TABLE_HEADER = tuple(_DATA["columns"])


def environment_label(name: str | None, option: str | None) -> str:
    """The task, and the environment option where it says more: `CartPole-v1 (gymnax)`, plain `CartPole-v1`."""
    task = name or option or "environment"
    if not option or option == task or option.lower() == task.split("-")[0].lower():
        return task
    return f"{task} ({option})"


def _number(value: Any) -> float | None:
    """A summary's figure as a finite float, else None."""
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if finite else None


class PresetResult:
    """One preset's runs from `describe`'s facts (`info`) and its seeds' summaries (None: failed, `failures`: why)."""

    def __init__(self, preset: str, info: Mapping, seeds: Sequence[int], summaries: Sequence, failures: Mapping = {}):
        self.preset, self.seeds, self.failures = preset, list(seeds), dict(failures)
        self.environment, self.budget = str(info.get("environment", "?")), info.get("budget")
        self.summaries = [None if s is None else dict(s) for s in summaries]
        recorded = [_number(s.get("threshold")) for s in self.summaries if s is not None]  # When `info` has none.
        self.threshold = next((t for t in [_number(info.get("threshold")), *recorded] if t is not None), None)
        self.skipped_overrides = list(info.get("skipped") or [])

    def values(self, key: str) -> list[float]:
        """`key`'s finite values in the finished seeds' summaries (steps_to_threshold: those that reached it)."""
        return [v for v in (_number(s.get(key)) for s in self.summaries if s is not None) if v is not None]

    @property
    def successes(self) -> int | None:
        """Seeds whose final evaluation return is at least the threshold (None: no threshold)."""
        finals = self.values("final_eval_return")
        return None if self.threshold is None else sum(value >= self.threshold for value in finals)

    def statistics(self) -> dict[str, float]:
        """IQM and mean of the final returns with their 95% bootstrap intervals (as rliable's, for one task)."""
        from rl.analysis import summarize

        return summarize(self.values("final_eval_return"))


def _return(value: Any) -> str:
    return "n/a" if _number(value) is None else f"{value:.1f}"


def table_cells(result: PresetResult, reference: str = "") -> list[str]:
    """`result`'s row of the table; `reference` marks the published figure's source (`[1]`)."""
    stats, published = result.statistics(), PUBLISHED.get(result.preset)
    steps, seconds = result.values("steps_to_threshold"), result.values("time_to_threshold_s")
    iqm = f"{_return(stats['iqm'])} [{_return(stats['iqm_low'])}, {_return(stats['iqm_high'])}]"
    return [
        f"`{result.preset}`",
        result.environment,
        "n/a" if result.budget is None else f"{result.budget:,}",
        "n/a" if result.threshold is None else f"{result.threshold:g}",
        "n/a" if result.successes is None else f"{result.successes}/{len(result.seeds)}",
        iqm if stats["runs"] else "n/a",
        f"{median(steps):,.0f} (n={len(steps)})" if steps else "n/a",
        f"{median(seconds):.1f} (n={len(seconds)})" if seconds else "n/a",
        "n/a" if published is None else f"{published.figure} ({published.detail}) {reference}".strip(),
    ]


def _markdown_table(rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines[:1] + ["| " + " | ".join(["---"] * len(rows[0])) + " |"] + lines[1:]


def render_markdown(
    results: Sequence[PresetResult], command: str, date: str, figure: str | None = None, details: Sequence[str] = ()
) -> str:
    """The generated file; `figure`: the curves' PNG beside it, `details`: how the runs were made."""
    seeds = sorted({seed for result in results for seed in result.seeds})
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]} to {seeds[-1]})"
    cited = {r.preset: PUBLISHED[r.preset].source for r in results if r.preset in PUBLISHED}
    numbers = {key: k for k, key in enumerate(dict.fromkeys(cited.values()), start=1)}  # In the order first cited.
    references = [f"[{numbers[cited[r.preset]]}]" if r.preset in cited else "" for r in results]
    table = [TABLE_HEADER, *map(table_cells, results, references)]
    per_seed = [("preset", "final return per seed")]
    for r in results:
        finals = ["failed" if s is None else _return(s.get("final_eval_return")) for s in r.summaries]
        per_seed.append((f"`{r.preset}`", ", ".join(f"{seed}: {final}" for seed, final in zip(r.seeds, finals))))
    lines = [
        *_DATA["header"],
        f"- Command: `{command}`",
        f"- Date: {date}",
        *[f"- {line}" for line in details],
        "",
        f"Every preset trained with scripts/train.py over {which}, each seed in its own run directory.",
        "",
        *_markdown_table(table),
        "",
        *[f"- {note}" for note in _DATA["notes"]],
    ]
    if figure:
        lines += ["", f"![IQM learning curves over seeds, 95% bootstrap band]({figure})", ""]
        lines.append(_DATA["figure"].format(figure=figure))
    lines += ["", "## Final return per seed", "", *_markdown_table(per_seed), "", "## Sources", ""]
    lines += [f"{k}. {SOURCES[key][0]}: <{SOURCES[key][1]}>. {SOURCES[key][2]}." for key, k in numbers.items()]
    notes = []
    for r in results:
        notes += [f"`{r.preset}` seed {seed} failed: {reason}" for seed, reason in sorted(r.failures.items())]
        if r.skipped_overrides:
            skipped = " ".join(f"`{o}`" for o in r.skipped_overrides)
            notes.append(f"`{r.preset}`: overrides not in its config, not applied: {skipped}")
    lines += ["", "## Notes", "", *[f"- {note}" for note in notes]] if notes else []
    return "\n".join(lines) + "\n"


def curve_iqm(curves: Sequence[Sequence[Sequence[float]]]) -> dict[str, Any]:
    """IQM over seeds of [[actor steps, return], ...] curves on the steps they share, with 95% bootstrap bands."""
    import numpy as np
    import scipy.stats

    from rl.analysis import aggregate_curve

    arrays = []
    for curve in curves:
        points = np.asarray(curve, dtype=np.float64).reshape(-1, 2)
        points = points[np.isfinite(points).all(axis=1)]
        points = points[np.argsort(points[:, 0], kind="stable")]
        arrays.append((points[:, 0], points[:, 1]))
    curve = aggregate_curve(arrays, functools.partial(scipy.stats.trim_mean, proportiontocut=0.25))
    return {**curve, "iqm": curve["value"], "runs": len(curve["runs"])}


def plot_learning_curves(results: Sequence[PresetResult], path: str) -> None:
    """A PNG at `path`: per preset the IQM evaluation return over seeds, its band and the threshold dashed."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    columns = min(4, max(len(results), 1))
    rows = math.ceil(max(len(results), 1) / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows), dpi=110, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, result in zip(axes, results):
        curve = curve_iqm([s.get("eval_returns") or [] for s in result.summaries if s is not None])
        if curve["steps"].size:
            marker = "o" if curve["steps"].size <= 25 else None
            ax.fill_between(curve["steps"], curve["low"], curve["high"], color="C0", alpha=0.25, linewidth=0)
            ax.plot(curve["steps"], curve["iqm"], color="C0", linewidth=1.8, marker=marker, markersize=3)
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
        if result.threshold is not None:
            ax.axhline(result.threshold, color="0.4", linestyle="--", linewidth=1)
        ax.set_title(f"{result.preset} ({curve['runs']} seeds)\n{result.environment}", fontsize="medium")
        ax.set(xlabel="actor steps", ylabel="IQM evaluation return")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    figure.suptitle("IQM of the evaluation return over seeds (band: 95% percentile bootstrap CI; dashed: threshold)")
    figure.savefig(path, format="png")


@dataclasses.dataclass
class BaselinesOptions:
    """What `suite_baselines` runs and where; `describe`: scripts/benchmark.py's describe_preset (Hydra stays there)."""

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

    @property
    def requested(self) -> list[str]:
        """--quick's smoke-test budgets (a check that the suite runs, not a result), then --overrides."""
        return [*(QUICK + QUICK_WHERE_PRESENT if self.quick else []), *self.overrides]


def _finished_summary(run_dir: str, command: Sequence[str], config: Mapping | None = None) -> dict[str, Any] | None:
    """The summary of a finished run in `run_dir` by `command` and, given, `config` but the seed (edited presets)."""

    def load(name: str, parse: Callable = json.load) -> Any:
        with open(os.path.join(run_dir, name)) as file:
            return parse(file)

    try:
        recorded, summary = load("benchmark.json"), load("summary.json")
        used = None if config is None else {**load(os.path.join(".hydra", "config.yaml"), yaml.safe_load), "seed": None}
    except (OSError, ValueError, TypeError, yaml.YAMLError):  # TypeError: a config that is no mapping.
        return None
    finished = recorded.get("command") == list(command[1:]) and summary.get("status", "finished") == "finished"
    return summary if finished and (config is None or used == {**config, "seed": None}) else None


def suite_baselines(options: BaselinesOptions) -> tuple[list[Row], list[str], list[PresetResult]]:
    """each --presets (default: the CartPole and Pendulum presets, reverb and gymnax) trained by scripts/train.py
    over seeds 0..N-1 (--seeds N, default 10), --jobs processes at a time (default 2), each in
    <--runs-dir>/<preset>/seed_<s>, with any --overrides; writes the markdown table --out (default docs/baselines.md:
    successes k/N, IQM of the final return with a 95% bootstrap CI, median steps and seconds to the threshold, a
    published figure with its source) and its IQM learning curves (<out>.png)."""
    infos = {}
    for preset in options.presets:
        try:
            infos[preset] = dict(options.describe(preset, options.requested))
        except Exception as error:  # Hydra's: no such preset, a bad value.
            raise ValueError(f"preset {preset}: {error}") from error
    unknown = [o for o in options.overrides if all(o in info.get("skipped", ()) for info in infos.values())]
    if unknown:
        raise ValueError(f"overrides in no preset's config: {' '.join(unknown)}")
    skipped = {preset: " ".join(info["skipped"]) for preset, info in infos.items() if info.get("skipped")}
    notes = [f"{preset}: not in its config, not applied: {overrides}" for preset, overrides in skipped.items()]
    jobs = [(preset, seed) for preset in options.presets for seed in options.seeds]
    failures: dict[str, dict[int, str]] = {preset: {} for preset in options.presets}
    finished = itertools.count(1)

    def one(preset: str, seed: int) -> dict[str, Any] | None:
        run_dir = os.path.join(options.runs_dir, preset, f"seed_{seed}")
        command = [sys.executable, options.train_script, f"experiment={preset}", f"seed={seed}", *RUN_OVERRIDES]
        command += [*infos[preset].get("overrides", options.requested), f"hydra.run.dir={os.path.abspath(run_dir)}"]
        summary = _finished_summary(run_dir, command, infos[preset].get("config")) if options.reuse else None
        message = f"reusing the finished run in {run_dir}"
        try:
            if summary is None:
                summary = train(command, run_dir)
                message = f"final return {summary.get('final_eval_return')}"
        except RunFailed as error:
            failures[preset][seed], message = str(error), f"failed: {error}"
        progress(f"[{next(finished)}/{len(jobs)}] baselines {preset} seed={seed}: {message}")
        return summary

    for note in notes:
        progress(note)
    progress(f"baselines: {len(jobs)} runs, {options.jobs} at a time, into {options.runs_dir}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
        summaries = dict(zip(jobs, pool.map(lambda job: one(*job), jobs)))
    results = [
        PresetResult(p, infos[p], options.seeds, [summaries[(p, s)] for s in options.seeds], failures[p])
        for p in options.presets
    ]
    notes += [f"{r.preset} seed={seed} failed: {error}" for r in results for seed, error in sorted(r.failures.items())]

    os.makedirs(os.path.dirname(os.path.abspath(options.out)), exist_ok=True)
    figure = os.path.splitext(options.out)[0] + ".png"  # docs/baselines.md -> docs/baselines.png
    plot_learning_curves(results, figure)
    root = os.path.dirname(os.path.dirname(os.path.abspath(options.train_script)))
    runs_dir = os.path.relpath(os.path.abspath(options.runs_dir), root)  # What a reader can find, when inside.
    details = [
        f"Runs: `scripts/train.py experiment=<preset> seed=<s> {' '.join([*RUN_OVERRIDES, *options.requested])}`, "
        f"{options.jobs} at a time on a machine with {os.cpu_count()} CPU cores",
        f"Run directories: `{options.runs_dir if runs_dir.startswith('..') else runs_dir}/<preset>/seed_<s>`",
    ]
    with contextlib.suppress(OSError, subprocess.CalledProcessError):  # The commit, unless outside a repository.
        git = ["git", "rev-parse", "--short=12", "HEAD"]
        commit = subprocess.check_output(git, cwd=root, stderr=subprocess.DEVNULL, text=True).strip()
        details += [f"Code: commit `{commit}` (plus any uncommitted changes in the tree)"] if commit else []
    if options.quick:
        details.append("--quick: smoke-test budgets; the figures mean little")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(options.out, "w") as file:
        file.write(render_markdown(results, options.command, date, os.path.basename(figure), details))
    progress(f"baselines: wrote {options.out} and {figure}")

    rows: list[Row] = []
    for r in results:
        n, k, stats = len(r.seeds), r.successes, r.statistics()
        figures = [
            ("successes", k, "seeds", n, None if k is None else k / n),
            ("IQM final return", stats["iqm"] if stats["runs"] else None, "return", r.threshold),
            ("median steps to threshold", median(r.values("steps_to_threshold")), "actor steps"),
            ("median seconds to threshold", median(r.values("time_to_threshold_s")), "s"),
        ]
        rows += [Row("baselines", f"{r.preset} {case}", *figure) for case, *figure in figures]
    return rows, notes, results
