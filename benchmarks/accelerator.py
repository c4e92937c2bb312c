"""`accelerator`: compiled runs (launcher=anakin) on whatever device JAX sees, over widths, beside Rejax."""

from __future__ import annotations

import glob
import json
import os
import statistics
import time
from typing import Any, Sequence

from benchmarks.common import Row, Settings, progress, ratio, run_logged, scratch
from benchmarks.runs import ANAKIN_QUICK, REJAX, REJAX_SETTINGS, run

# case -> (preset, overrides, default widths, the acting steps/s the issue asks of the widest, threshold).
CASES: dict[str, tuple[str, list[str], tuple[int, ...], float | None]] = {
    "rejax": ("ppo_gymnax_cartpole", REJAX_SETTINGS, (16, 256), None),
    "width": ("ppo_gymnax_cartpole", [], (1024,), 5e6),
    "minatar": ("ppo_minatar_breakout", [], (64,), 2e6),
}
CACHE_RUN = ["experiment=ppo_gymnax_cartpole", "max_actor_steps=65536", "eval_every=65536"]
CACHE_BOUND_S = 5.0  # A second identical run's compile, the cache warm.
THRESHOLD = 475.0


def finals(run_dir: str, summary: dict[str, Any]) -> list[float]:
    """Every replica's final evaluation return (a one-replica run: its own)."""
    paths = sorted(glob.glob(os.path.join(run_dir, "seed_*", "summary.json")))
    return [json.load(open(path))["final_eval_return"] for path in paths] or [summary["final_eval_return"]]


def trained(settings: Settings, overrides: Sequence[str]) -> tuple[dict[str, Any], float, list[float]]:
    """(summary, process seconds, finals) of one scripts/train.py run."""
    with scratch("accelerator-") as run_dir:
        start = time.perf_counter()
        summary = run(settings, overrides, run_dir=run_dir)
        seconds = time.perf_counter() - start
        return summary, seconds, finals(run_dir, summary)


def rejax(seeds: int) -> dict[str, Any] | None:
    """Rejax's CartPole PPO over `seeds` in one program (its RESULT), where REJAX names it."""
    if not all(os.path.isfile(path) for path in REJAX):
        return None
    with scratch("rejax-") as out:
        run_logged([*REJAX, "--algo", "ppo", "--seeds", str(seeds), "--out", f"{out}/result.json"], out)
        with open(f"{out}/result.json") as file:
            return json.load(file)


def width_rows(settings: Settings, name: str, seeds: int) -> list[Row]:
    preset, overrides, _, target = CASES[name]
    quick = ANAKIN_QUICK if settings.quick else []
    summary, seconds, returns = trained(
        settings, [f"experiment={preset}", *overrides, f"launcher.num_seeds={seeds}", *quick]
    )
    rate = summary.get("total_actor_steps_per_second") or summary.get("actor_steps_per_second")
    solved = sum(value >= THRESHOLD for value in returns) if preset.endswith("cartpole") else None
    case = f"{preset}{' (Rejax work)' if overrides else ''} {seeds} seeds on {summary.get('device')}"
    settings.note(
        f"{case}: finals median {statistics.median(returns):.1f}, min {min(returns):.1f}"
        + (f", {solved}/{len(returns)} >= {THRESHOLD:g}" if solved is not None else "")
        + f"; device opened in {summary.get('device_open_s')} s"
    )
    rows = [
        Row("accelerator", f"{case}: compile", summary.get("compile_time_s"), "s"),
        Row("accelerator", f"{case}: process", seconds, "s"),
    ]
    bound = target if seeds == max(settings_widths(settings, name)) else None
    rows.append(Row("accelerator", f"{case}: acting", rate, "steps/s", bound, ratio(rate, bound)))
    peer = rejax(seeds) if name == "rejax" and not settings.quick else None
    if peer is not None:
        case = f"Rejax's CartPole PPO {seeds} seeds, same device"
        rows.append(Row("accelerator", f"{case}: compile", peer["compile_s"], "s"))
        rows.append(Row("accelerator", f"{case}: run (with its evaluations)", peer["steps_per_s"], "steps/s"))
        rows.append(
            Row(
                "accelerator",
                f"ours / Rejax, {seeds} seeds: acting",
                rate,
                "steps/s",
                peer["steps_per_s"],
                ratio(rate, peer["steps_per_s"]),
            )
        )
        solved = sum(value >= THRESHOLD for value in peer["final_returns"])
        settings.note(f"Rejax {seeds} seeds: {solved}/{len(peer['final_returns'])} >= {THRESHOLD:g}")
    progress(f"accelerator {case}: {rate} steps/s")
    return rows


def settings_widths(settings: Settings, name: str) -> tuple[int, ...]:
    return tuple(settings.widths or ((1, 2) if settings.quick else CASES[name][2]))


def cache_rows(settings: Settings) -> list[Row]:
    """One run's compile with an empty persistent cache, then the same run's again."""
    with scratch("xla-cache-") as cache:
        overrides = [*CACHE_RUN, f"compilation_cache={cache}", *(ANAKIN_QUICK if settings.quick else [])]
        first, second = (trained(settings, overrides)[0]["compile_time_s"] for _ in range(2))
    return [
        Row("accelerator", "ppo_gymnax_cartpole 1 seed: compile, empty cache", first, "s"),
        Row(
            "accelerator",
            "the same run again: compile, cache warm",
            second,
            "s",
            CACHE_BOUND_S,
            ratio(second, CACHE_BOUND_S),
        ),
    ]


def suite_accelerator(settings: Settings) -> list[Row]:
    """launcher=anakin on the device JAX sees (GPU, TPU or CPU): compile s, process s and acting steps/s of
    ppo_gymnax_cartpole with Rejax's CartPole work at 16 and 256 seeds beside Rejax's own (where REJAX_PYTHON
    runs ../shared/peers/rejax_bench.py; ratio = ours / Rejax), of the preset at 1,024 seeds and of
    ppo_minatar_breakout at 64 seeds (bounds: 5 M and 2 M steps/s), and a second identical run's compile with the
    persistent cache warm (bound 5 s). --cases picks some of rejax, width, minatar, cache; --widths replaces the
    seed counts."""
    rows: list[Row] = []
    for name in settings.cases or (*CASES, "cache"):
        if name == "cache":
            rows += cache_rows(settings)
            continue
        for seeds in settings_widths(settings, name):
            rows += width_rows(settings, name, seeds)
    return rows
