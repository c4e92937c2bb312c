"""Runs grouped by what varies between them (an override, a config group, a config key or the directory
given), with labels short enough for a legend."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from rl.analysis.runs import Run

IGNORED_HUE_KEYS = ("seed", "hydra", "progress", "checkpoint", "logger")  # Overrides that never name a group.


def varying_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> list[str]:
    """Override keys whose values differ between runs, seeds, plumbing and top-level names in `exclude` left out."""
    ignored = (*IGNORED_HUE_KEYS, *exclude)
    keys = dict.fromkeys(key for run in runs for key in run.overrides if re.split(r"[./]", key)[0] not in ignored)
    return [key for key in keys if len({run.setting(key) for run in runs}) > 1]


def short_value(value: str | None) -> str:
    """A setting as a label shows it: numbers rounded to 3 significant figures (0.000123456789 -> 0.000123)."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    mantissa = re.split(r"[eE]", text)[0].lstrip("+-").replace(".", "").lstrip("0").rstrip("0")
    if not math.isfinite(number) or re.fullmatch(r"[+-]?\d+", text) or len(mantissa) <= 3:
        return text
    return f"{number:.3g}"


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key's shortest trailing part no other key ends with (`agent.lr` -> `lr`)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for start in range(len(parts) - 1, -1, -1):
            name = ".".join(parts[start:])
            if not any(other != key and (other == name or other.endswith("." + name)) for other in keys):
                break
        names[key] = name
    return names


def _sort_value(label: str) -> tuple[int, Any]:
    try:
        return (0, float(label))
    except ValueError:
        return (1, label)


def group_runs(
    runs: Sequence[Run], hue: str | Sequence[str] | None = None, exclude: Sequence[str] = ()
) -> dict[str, list[Run]]:
    """Runs grouped by `hue`'s values (keys, comma-separated in a string); no hue: varying_keys(runs, exclude)."""
    if hue is None:
        keys = varying_keys(runs, exclude)
    else:
        keys = [key.strip() for key in hue.split(",") if key.strip()] if isinstance(hue, str) else list(hue)
    names = short_keys(keys)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if len(keys) == 1:
            label = short_value(run.setting(keys[0]))
        else:
            label = ", ".join(f"{names[key]}={short_value(run.setting(key))}" for key in keys) or "all runs"
        groups.setdefault(label, []).append(run)
    return dict(sorted(groups.items(), key=lambda item: _sort_value(item[0])))
