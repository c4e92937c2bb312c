"""`baselines`: presets trained over seeds 0..N-1, each one's results stored in docs/baselines.json (the presets
not run again keep theirs), and docs/baselines.md and its PNG rendered from that file."""

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
# The row of a run imported with --from-runs whose overrides name its task (a preset for several tasks).
IMPORTED_ROW = "{preset} on {task}"
# The presets with a published figure, in its order, that the suite trains by default (imported rows are not).
DEFAULT_PRESETS = tuple(name for name in PUBLISHED if " on " not in name)
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


def published_cell(preset: str, reference: str = "") -> str:
    """The published column: `preset`'s figure from baselines.yaml; `reference` marks its source (`[1]`)."""
    published = PUBLISHED.get(preset)
    return "n/a" if published is None else f"{published.figure} ({published.detail}) {reference}".strip()


def table_cells(result: PresetResult, reference: str = "") -> list[str]:
    """`result`'s row of the table; `reference` marks the published figure's source (`[1]`)."""
    stats = result.statistics()
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
        published_cell(result.preset, reference),
    ]


def _markdown_table(rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines[:1] + ["| " + " | ".join(["---"] * len(rows[0])) + " |"] + lines[1:]


def data_path(out: str) -> str:
    """The data file the report is rendered from, beside it: docs/baselines.md -> docs/baselines.json."""
    return os.path.splitext(out)[0] + ".json"


def _plain(value: Any) -> Any:
    """`value` as JSON writes it: numpy arrays and numbers as lists and floats, NaN and infinities as None."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return None if isinstance(value, float) and not math.isfinite(value) else value


def preset_entry(result: PresetResult, measured: Mapping[str, Any]) -> dict[str, Any]:
    """What the data file keeps of one preset's runs: its row's cells (all but the published column), the figures
    behind them, each seed's results, the IQM curve with its band, and how it was `measured` (command, date, ...)."""
    finished = [s for s in result.summaries if s is not None]
    curve = curve_iqm([s.get("eval_returns") or [] for s in finished])
    per_seed = {
        name: [None if s is None else _number(s.get(key)) for s in result.summaries]
        for name, key in [
            ("final_returns", "final_eval_return"),
            ("steps_to_threshold", "steps_to_threshold"),
            ("seconds_to_threshold", "time_to_threshold_s"),
        ]
    }
    steps, seconds = result.values("steps_to_threshold"), result.values("time_to_threshold_s")
    return _plain(
        {
            "environment": result.environment,
            "budget": result.budget,
            "threshold": result.threshold,
            "cells": dict(zip(TABLE_HEADER[1:-1], table_cells(result)[1:-1])),
            "successes": result.successes,
            "statistics": result.statistics(),
            "median_steps_to_threshold": median(steps),
            "median_seconds_to_threshold": median(seconds),
            "seeds_reaching_threshold": len(steps),
            "seeds": result.seeds,
            **per_seed,
            "failures": {str(seed): reason for seed, reason in sorted(result.failures.items())},
            "skipped_overrides": result.skipped_overrides,
            "curve": {key: curve[key] for key in ("steps", "iqm", "low", "high", "runs")},
            "measured": dict(measured),
        }
    )


def _ordered(entries: Mapping[str, Any]) -> dict[str, Any]:
    """`entries` in DEFAULT_PRESETS' order, then any other presets in the order they were stored."""
    order = [p for p in DEFAULT_PRESETS if p in entries] + [p for p in entries if p not in DEFAULT_PRESETS]
    return {preset: entries[preset] for preset in order}


def load_entries(path: str) -> dict[str, Any]:
    """The presets stored in the data file at `path` ({} when there is none yet)."""
    if not os.path.exists(path):
        return {}
    with open(path) as file:
        return dict(json.load(file)["presets"])


def _measurement_lines(measured: Mapping[str, Any]) -> list[str]:
    """How one invocation measured its presets: command, date, the runs, where they went, the code; for a run
    imported with --from-runs, its own command, device and directory."""
    lines = [f"Command: `{measured['command']}`", f"Date: {measured['date']}"]
    if measured.get("run"):
        device = f" on {measured['device']}" if measured.get("device") else ""
        lines.append(f"Run: `{measured['run']}`, its seeds in one program{device}")
        lines.append(f"Run directory: `{measured['run_dir']}` (each seed's in `seed_<i>/`)")
        return lines
    runs = " ".join(["scripts/train.py experiment=<preset> seed=<s>", *measured.get("overrides", [])])
    machine = f"a machine with {measured['cpu_cores']} CPU cores" if measured.get("cpu_cores") else "a machine"
    lines.append(f"Runs: `{runs}`, {measured.get('jobs', '?')} at a time on {machine}")
    if measured.get("runs_dir"):
        lines.append(f"Run directories: `{measured['runs_dir']}/<preset>/seed_<s>`")
    if measured.get("commit"):
        changes = {True: "with uncommitted changes", False: "no uncommitted changes"}
        state = changes.get(measured.get("uncommitted_changes"), "plus any uncommitted changes in the tree")
        lines.append(f"Code: commit `{measured['commit']}` ({state})")
    if measured.get("quick"):
        lines.append("--quick: smoke-test budgets; the figures mean little")
    return lines


def render_markdown(entries: Mapping[str, Mapping[str, Any]], figure: str | None = None, data: str = "") -> str:
    """The generated file from the data file's presets (`entries`); `figure`: the curves' PNG beside it, `data`:
    the data file's name."""
    entries = _ordered(entries)
    seeds = sorted({seed for entry in entries.values() for seed in entry["seeds"]})
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds ({seeds[0]} to {seeds[-1]})"
    if any(entry["seeds"] != seeds for entry in entries.values()):  # Rows measured over different seeds.
        which = "the seeds listed with it under Final return per seed"
    cited = {preset: PUBLISHED[preset].source for preset in entries if preset in PUBLISHED}
    numbers = {key: k for k, key in enumerate(dict.fromkeys(cited.values()), start=1)}  # In the order first cited.
    table = [TABLE_HEADER]
    for preset, entry in entries.items():
        reference = f"[{numbers[cited[preset]]}]" if preset in cited else ""
        cells = [entry["cells"].get(column, "n/a") for column in TABLE_HEADER[1:-1]]
        table.append([f"`{preset}`", *cells, published_cell(preset, reference)])
    per_seed = [("preset", "final return per seed")]
    for preset, entry in entries.items():
        finals = [
            "failed" if str(seed) in entry["failures"] else _return(final)
            for seed, final in zip(entry["seeds"], entry["final_returns"])
        ]
        per_seed.append((f"`{preset}`", ", ".join(f"{seed}: {final}" for seed, final in zip(entry["seeds"], finals))))
    measurements: dict[str, list[str]] = {}  # The presets each invocation measured, in the table's order.
    for preset, entry in entries.items():
        measurements.setdefault(json.dumps(entry["measured"], sort_keys=True), []).append(preset)
    imported = any(entry["measured"].get("run") for entry in entries.values())
    lines = [*(line.format(data=data) for line in _DATA["header"]), _DATA["measurements"], ""]
    for measured, presets in measurements.items():
        lines.append(f"- {', '.join(f'`{preset}`' for preset in presets)}:")
        lines += [f"  - {line}" for line in _measurement_lines(json.loads(measured))]
    lines += [
        "",
        f"Every preset trained with scripts/train.py over {which}, each seed in its own run directory"
        + (" (an imported run: its seeds in one program, each in its own `seed_<i>/`)." if imported else "."),
        "",
        *_markdown_table(table),
        "",
        *[f"- {note}" for note in _DATA["notes"]],
    ]
    drawn = [preset for preset, entry in entries.items() if entry.get("curve") is not None]
    missing = ", ".join(f"`{preset}`" for preset in entries if preset not in drawn)
    no_curve = _DATA["no_curve"].format(presets=missing) if missing else ""
    if figure and drawn:
        lines += ["", f"![IQM learning curves over seeds, 95% bootstrap band]({figure})", ""]
        lines.append(f"{_DATA['figure'].format(figure=figure)} {no_curve}".strip())
    elif no_curve:
        lines += ["", no_curve]
    lines += ["", "## Final return per seed", "", *_markdown_table(per_seed), "", "## Sources", ""]
    lines += [f"{k}. {SOURCES[key][0]}: <{SOURCES[key][1]}>. {SOURCES[key][2]}." for key, k in numbers.items()]
    notes = []
    for preset, entry in entries.items():
        notes += [f"`{preset}` seed {seed} failed: {reason}" for seed, reason in entry["failures"].items()]
        if entry.get("skipped_overrides"):
            skipped = " ".join(f"`{o}`" for o in entry["skipped_overrides"])
            notes.append(f"`{preset}`: overrides not in its config, not applied: {skipped}")
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


def plot_learning_curves(entries: Mapping[str, Mapping[str, Any]], path: str) -> None:
    """A PNG at `path`: per preset its stored IQM evaluation return over seeds, its band and the threshold dashed."""
    import textwrap

    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    columns = min(4, max(len(entries), 1))
    rows = math.ceil(max(len(entries), 1) / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows + 0.3), dpi=110, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, (preset, entry) in zip(axes, entries.items()):
        curve = entry["curve"]
        if curve["steps"]:
            marker = "o" if len(curve["steps"]) <= 25 else None
            ax.fill_between(curve["steps"], curve["low"], curve["high"], color="C0", alpha=0.25, linewidth=0)
            ax.plot(curve["steps"], curve["iqm"], color="C0", linewidth=1.8, marker=marker, markersize=3)
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
        if entry["threshold"] is not None:
            ax.axhline(entry["threshold"], color="0.4", linestyle="--", linewidth=1)
        ax.set_title(f"{preset} ({curve['runs']} seeds)\n{entry['environment']}", fontsize="medium")
        ax.set(xlabel="actor steps", ylabel="IQM evaluation return")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes[len(entries) :]:
        ax.set_visible(False)
    title = "IQM of the evaluation return over seeds (band: 95% percentile bootstrap CI; dashed: threshold)"
    figure.suptitle(textwrap.fill(title, width=45 * columns), fontsize="medium")
    figure.savefig(path, format="png")


def _json(value: Any, depth: int = 0) -> str:
    """`value` as JSON with one key per line and each list on one line (a seed's results, a curve's points)."""
    if not isinstance(value, dict) or not value:
        return json.dumps(value, ensure_ascii=False)
    inside = "\n" + " " * (depth + 1)
    items = [f"{json.dumps(key, ensure_ascii=False)}: {_json(item, depth + 1)}" for key, item in value.items()]
    return "{" + inside + ("," + inside).join(items) + "\n" + " " * depth + "}"


def write_report(entries: Mapping[str, Mapping[str, Any]], out: str) -> None:
    """The data file beside `out` with `entries`, and `out` and its figure (<out>.png) rendered from them; the
    figure draws the presets with a stored curve (none: no figure)."""
    entries = _ordered(entries)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    figure, data = os.path.splitext(out)[0] + ".png", data_path(out)  # docs/baselines.md -> docs/baselines.png
    with open(data, "w") as file:
        file.write(_json({"about": _DATA["data_note"], "presets": entries}) + "\n")
    drawn = {preset: entry for preset, entry in entries.items() if entry.get("curve") is not None}
    if drawn:
        plot_learning_curves(drawn, figure)
    elif os.path.exists(figure):
        os.remove(figure)  # Curves of presets no longer stored.
    with open(out, "w") as file:
        file.write(render_markdown(entries, os.path.basename(figure), os.path.basename(data)))


def render_report(out: str) -> None:
    """`out` and its figure rewritten from the data file beside it, nothing measured (after editing baselines.yaml)."""
    entries = load_entries(data_path(out))
    if not entries:
        raise ValueError(f"no presets stored in {data_path(out)}")
    write_report(entries, out)


def _override_value(overrides: Sequence[str], key: str) -> str | None:
    """The value `overrides` (a run's .hydra/overrides.yaml) give `key`, if any."""
    values = [override.split("=", 1)[1] for override in overrides if override.split("=", 1)[0] == key]
    return values[-1] if values else None


def imported_run(run_dir: str) -> PresetResult:
    """A finished run of scripts/train.py as one row: its replicas' results (launcher.num_seeds; its one seed
    otherwise). The row is `<preset> on <task>` where the run's overrides name `environment.name` or the preset's
    published figures are per task (sac_mujoco's default HalfCheetah-v5 run is `sac_mujoco on HalfCheetah-v5`),
    else the preset. A run that is not finished, or names no preset, is refused."""

    def load(name: str, parse: Callable = json.load) -> Any:
        with open(os.path.join(run_dir, name)) as file:
            return parse(file)

    try:
        overrides = [str(override) for override in load(os.path.join(".hydra", "overrides.yaml"), yaml.safe_load)]
        config = load(os.path.join(".hydra", "config.yaml"), yaml.safe_load)
        summary = load("summary.json")
    except (OSError, ValueError, yaml.YAMLError) as error:
        raise ValueError(f"{run_dir}: not a run of scripts/train.py ({error})") from error
    preset, task = _override_value(overrides, "experiment"), _override_value(overrides, "environment.name")
    if preset is None:
        raise ValueError(f"{run_dir}: its command names no preset (experiment=...)")
    if summary.get("status", "finished") != "finished":
        raise ValueError(f"{run_dir}: the run did not finish (status {summary.get('status')!r})")
    replicas = summary.get("replicas") or [summary]
    threshold = config.get("threshold")
    info = {
        "environment": summary.get("environment") or task or "?",
        "budget": int(config["max_actor_steps"]),
        "threshold": None if threshold is None else float(threshold),
    }
    configured = (config.get("environment") or {}).get("name")
    if task is None and IMPORTED_ROW.format(preset=preset, task=configured) in PUBLISHED:
        task = configured
    name = preset if task is None else IMPORTED_ROW.format(preset=preset, task=task)
    return PresetResult(name, info, [int(replica["seed"]) for replica in replicas], replicas)


def import_runs(run_dirs: Sequence[str], out: str, command: str) -> list[PresetResult]:
    """Each finished run in `run_dirs` stored as its row of the data file beside `out` (replacing a row of the
    same name; the others kept), and `out` and its figure rendered: the way rows measured elsewhere (a lent
    accelerator, several seeds in one program) join the table."""
    results, entries = [], {}
    for run_dir in run_dirs:
        result = imported_run(run_dir)
        written = os.path.getmtime(os.path.join(run_dir, "summary.json"))
        with open(os.path.join(run_dir, "summary.json")) as file:
            summary = json.load(file)
        with open(os.path.join(run_dir, ".hydra", "overrides.yaml")) as file:
            overrides = yaml.safe_load(file)
        measured = {
            "command": command,
            "date": datetime.datetime.fromtimestamp(written, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "run": " ".join(["scripts/train.py", *map(str, overrides)]),
            "device": summary.get("device"),
            "run_dir": run_dir,
        }
        results.append(result)
        entries[result.preset] = preset_entry(result, measured)
    write_report({**load_entries(data_path(out)), **entries}, out)
    return results


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


def _code_version(root: str) -> dict[str, Any]:
    """The commit checked out in `root` and whether its tracked files have uncommitted changes ({}: no repository)."""
    version: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        git = functools.partial(subprocess.check_output, cwd=root, stderr=subprocess.DEVNULL, text=True)
        version["commit"] = git(["git", "rev-parse", "--short=12", "HEAD"]).strip() or None
        version["uncommitted_changes"] = bool(git(["git", "status", "--porcelain", "--untracked-files=no"]).strip())
    return version


def suite_baselines(options: BaselinesOptions) -> tuple[list[Row], list[str], list[PresetResult]]:
    """each --presets (default: the CartPole and Pendulum presets, reverb and gymnax) trained by scripts/train.py
    over seeds 0..N-1 (--seeds N, default 10), --jobs processes at a time (default 2), each in
    <--runs-dir>/<preset>/seed_<s>, with any --overrides; stores each preset's results in the data file beside --out
    (<out>.json), keeping the stored presets not run now, and renders from it the markdown table --out (default
    docs/baselines.md: successes k/N, IQM of the final return with a 95% bootstrap CI, median steps and seconds to
    the threshold, a published figure with its source, which invocation measured each row) and the IQM learning
    curves (<out>.png); --render rewrites both from the data file without training."""
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
    root = os.path.dirname(os.path.dirname(os.path.abspath(options.train_script)))
    code = _code_version(root)  # Before the runs: the code they ran.
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

    runs_dir = os.path.relpath(os.path.abspath(options.runs_dir), root)  # What a reader can find, when inside.
    measured = {
        "command": options.command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        **code,
        "overrides": [*RUN_OVERRIDES, *options.requested],
        "jobs": options.jobs,
        "cpu_cores": os.cpu_count(),
        "runs_dir": options.runs_dir if runs_dir.startswith("..") else runs_dir,
        "quick": options.quick,
    }
    stored = load_entries(data_path(options.out))  # The presets not measured now keep their entries.
    write_report({**stored, **{r.preset: preset_entry(r, measured) for r in results}}, options.out)
    kept = [preset for preset in stored if preset not in options.presets]
    progress(f"baselines: wrote {options.out}, {data_path(options.out)} (kept: {' '.join(kept) or 'none'}), figure")

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
