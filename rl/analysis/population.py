"""A PBT population (hydra/sweeper=pbt; rl/sweeps/pbt.py runs it) read from its members' records, and the figure
that shows it at a glance: every member's curve, each exchange (a member taking another member's learner state)
marked where it happened with whom it came from, and the best member, a tie said as one."""

from __future__ import annotations

import csv
import dataclasses
import os
import re
from typing import Any, Sequence

import numpy as np

from rl.analysis import figures
from rl.analysis.aggregates import text_table
from rl.analysis.groups import short_value
from rl.analysis.runs import DEFAULT_METRIC, Run

RECORD = os.path.join("logs", "pbt.csv")  # A member's values after every round, and whose state it holds.
NOT_VALUES = ("actor_steps", "learner_steps", "copied_from", "kept", "wall_time_s")  # pbt.csv's other columns.
MAX_LABELLED_EXCHANGES = 24  # More: markers only, the list in the terminal.
EXCHANGE_MARKER = {"marker": "D", "markersize": 5, "markerfacecolor": "white", "markeredgewidth": 1.5, "zorder": 3}


@dataclasses.dataclass(frozen=True)
class Exchange:
    """At `actor_steps`, `member` took the learner state (and explored from the values) of `copied_from`."""

    actor_steps: float
    member: int
    copied_from: int


@dataclasses.dataclass
class Member:
    run: Run
    index: int  # Its place in the population: `copied_from` names members by it.
    exchanges: list[Exchange]
    values: dict[str, str]  # Its hyperparameters after the last round, as pbt.csv wrote them.


def read_member(run: Run) -> Member | None:
    """`run` as a population's member (None: it is not one). In pbt.csv a row whose `copied_from` is the
    member itself says it kept its own state that round; any other is an exchange."""
    path = os.path.join(run.path, RECORD)
    if not os.path.isfile(path):
        return None
    pbt = (run.summary or {}).get("pbt") or {}
    named = re.fullmatch(r"seed_(\d+)", run.name)
    index = int(pbt["member"]) if "member" in pbt else int(named.group(1)) if named else None
    if index is None:
        return None
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    exchanges = [
        Exchange(float(row["actor_steps"]), index, int(row["copied_from"]))
        for row in rows
        if float(row["actor_steps"]) > 0 and int(row["copied_from"]) != index
    ]
    values = {key: value for key, value in (rows[-1] if rows else {}).items() if key not in NOT_VALUES}
    return Member(run, index, exchanges, values)


def read_population(runs: Sequence[Run]) -> list[Member] | None:
    """The members, in index order, when `runs` are exactly one population (the replicas of one run); else None."""
    members = [read_member(run) for run in runs]
    if not members or any(member is None for member in members):
        return None
    if len({os.path.dirname(run.path) for run in runs}) != 1:
        return None
    return sorted(members, key=lambda member: member.index)  # type: ignore[arg-type, return-value]


def best(members: Sequence[Member], metric: str = DEFAULT_METRIC) -> tuple[float, list[int]]:
    """The best final value of `metric` and every member that reached it (more than one: a tie)."""
    finals = np.array([member.run.final(metric) for member in members], np.float64)
    if not np.isfinite(finals).any():
        return float("nan"), []
    top = float(np.nanmax(finals))
    return top, [member.index for member, final in zip(members, finals) if np.isclose(final, top, rtol=1e-6)]


def say_best(members: Sequence[Member], metric: str = DEFAULT_METRIC) -> str:
    """ "best: member 2 (500.0)" or, for a tie, "best: members 0, 1, 3 tie at 500.0"."""
    value, indices = best(members, metric)
    if not indices:
        return "best: none (no member has a finite final value)"
    if len(indices) == 1:
        return f"best: member {indices[0]} ({value:.1f})"
    return f"best: members {', '.join(map(str, indices))} tie at {value:.1f}"


def exchange_lines(members: Sequence[Member]) -> list[str]:
    """One line per round with exchanges: "at 8,192 actor steps: 3 took 0's state, 2 took 1's"."""
    rounds: dict[float, list[Exchange]] = {}
    for exchange in sorted((e for member in members for e in member.exchanges), key=lambda e: e.member):
        rounds.setdefault(exchange.actor_steps, []).append(exchange)
    return [
        f"at {steps:,.0f} actor steps: " + ", ".join(f"{e.member} took {e.copied_from}'s state" for e in exchanges)
        for steps, exchanges in sorted(rounds.items())
    ]


def format_population(members: Sequence[Member], metric: str = DEFAULT_METRIC) -> str:
    """Per member its final value, exchanges and values at the end; the best (a tie said); every exchange."""
    keys = list(dict.fromkeys(key for member in members for key in member.values))
    header = ["member", "seed", f"final {figures.metric_name(metric)}", "exchanges", *keys]
    body = [
        [
            str(member.index),
            str(member.run.setting("seed")),
            f"{member.run.final(metric):.1f}",
            str(len(member.exchanges)),
            *(short_value(member.values.get(key, "")) for key in keys),
        ]
        for member in members
    ]
    lines = [f"PBT population of {len(members)} (values: each member's after the last round)"]
    lines += text_table(header, body)
    lines.append(say_best(members, metric))
    exchanges = exchange_lines(members)
    lines += ["exchanges (a member took another's learner state and explored from its values):", *exchanges]
    return "\n".join(lines if exchanges else lines[:-1] + ["no exchanges"])


def _colors(count: int) -> list[Any]:
    import matplotlib

    if count <= 10:
        return [f"C{index}" for index in range(count)]
    return [matplotlib.colormaps["tab20"](index % 20) for index in range(count)]


def plot_population(members: Sequence[Member], metric: str = DEFAULT_METRIC, title: str | None = None) -> Any:
    """Every member's curve of `metric`. At an exchange the member's line jumps (dotted) to the point of the
    member it copied (a diamond, labelled with that member's index), since from there it holds that state.
    The best members' lines are thicker; the legend gives each member's final value."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    curves = {member.index: member.run.curve(metric) for member in members}
    _, winners = best(members, metric)
    labelled = sum(len(member.exchanges) for member in members) <= MAX_LABELLED_EXCHANGES
    labels = [f"{m.index}: {m.run.final(metric):.1f}" + (" (best)" if m.index in winners else "") for m in members]
    handles = [Line2D([], [], linestyle=":", color="0.3", label="exchange (n: took\nmember n's state)")]
    handles[0].set(**EXCHANGE_MARKER, markeredgecolor="0.3")
    figure = Figure(figsize=(figures.figure_width([*labels, "member n's state)"]), 4.5), dpi=150)
    figure.set_layout_engine("constrained")
    ax = figure.add_subplot()
    marker = "o" if max(steps.size for steps, _ in curves.values()) <= 25 else None
    for member, color, label in zip(members, _colors(len(members)), labels):
        steps, values = curves[member.index]
        width = 2.4 if member.index in winners else 1.3
        layer = 2.9 - member.index / len(members)  # Lower members on top: where curves coincide, member 0 shows.
        start_x, start_y = steps[:0], values[:0]  # Where the present segment begins (after an exchange).
        bounds = [exchange.actor_steps for exchange in member.exchanges] + [np.inf]
        begin = -np.inf
        for end, exchange in zip(bounds, [*member.exchanges, None]):
            inside = (steps > begin) & (steps <= end)
            xs, ys = np.concatenate([start_x, steps[inside]]), np.concatenate([start_y, values[inside]])
            ax.plot(xs, ys, color=color, linewidth=width, marker=marker, markersize=3, label=label, zorder=layer)
            label = None  # One legend entry per member.
            if exchange is None:
                break
            parent_steps, parent_values = curves.get(exchange.copied_from, (steps[:0], values[:0]))
            jump = float(np.interp(end, parent_steps, parent_values)) if parent_steps.size else np.nan
            own = float(np.interp(end, steps, values)) if steps.size else np.nan
            ax.plot([end, end], [own, jump], color=color, linestyle=":", linewidth=1.2, zorder=layer)
            ax.plot([end], [jump], color=color, **EXCHANGE_MARKER, markeredgecolor=color)
            if labelled:
                ax.annotate(
                    str(exchange.copied_from), (end, jump), xytext=(4, 3), textcoords="offset points",
                    fontsize="x-small", color=color,
                )  # fmt: skip
            start_x, start_y, begin = np.array([end]), np.array([jump]), end
    runs = [member.run for member in members]
    figures.finish_axes(ax, runs, metric)
    figure.suptitle(title or f"{figures.title(runs)}: a PBT population of {len(members)}")
    ax.set_title(f"{figures.metric_name(metric)} of every member; {say_best(members, metric)}", fontsize="small")
    entries, names = ax.get_legend_handles_labels()
    ax.legend([*entries, *handles], [*names, handles[0].get_label()], title="member: final", **figures.LEGEND_STYLE)
    return figure
