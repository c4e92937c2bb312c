"""hydra/sweeper=pbt's work (hydra_plugins/rl_pbt_sweeper.py registers it): the sweep's ranges and rules turned
into a settings file in the sweep directory, the one launcher=anakin run that trains the population (its
replicas), the sweep's summary.json (the best member, its values and its schedule of hyperparameters) and
the lines that say at the sweep's end who won with which values."""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException

from rl.sweeps.pbt import Hyperparameter, PbtSettings

SETTINGS_FILE = "pbt.yaml"
SEARCHED = ("agent.", "policy.")  # What a member's values can set.


def hyperparameter(override: Any) -> Hyperparameter:
    """The Hyperparameter a parsed sweep override describes; refused, naming its key, otherwise."""
    sweep = override.value()
    key = override.get_key_element()
    if override.is_interval_sweep():
        return Hyperparameter(low=float(sweep.start), high=float(sweep.end), log="log" in sweep.tags)
    if override.is_choice_sweep():
        return Hyperparameter(choices=tuple(float(value) for value in sweep.list))
    raise ConfigCompositionException(
        f"hydra/sweeper=pbt: {key}: use interval(a, b), tag(log, interval(a, b)) or choice(...)"
    )


def comma_list_notes(searched: Sequence[Any]) -> list[str]:
    """One line for each comma list among the searched overrides: under PBT it is no grid (there is one run)
    but the choices the members start from and explore between, as choice(...) would say."""
    notes = []
    for override in searched:
        sweep = override.value()
        if override.is_choice_sweep() and sweep.simple_form:  # A ChoiceSweep: choice(...) or a comma list.
            choices = ", ".join(str(float(value)) for value in sweep.list)
            notes.append(
                f"hydra/sweeper=pbt: {override.get_key_element()}'s comma list is searched as choice({choices}): each member starts "
                "from one of these values and exploring moves it to a neighbouring one (one population, not a grid)"
            )
    return notes


def refusal(launcher_target: str, searched: Sequence[Any], others: Sequence[Any]) -> str | None:
    """Why this sweep cannot run (None: it can): the run must be launcher=anakin, other overrides single."""
    if not launcher_target.endswith("AnakinLauncher"):
        return "trains a launcher=anakin run's replicas as the population; add launcher=anakin"
    if not searched:
        return "searches nothing: give a range, e.g. 'agent.learning_rate=tag(log, interval(1e-4, 1e-2))'"
    swept = [o.input_line for o in others if o.is_sweep_override()]
    if swept:
        return f"searches agent.* and policy.* ranges only; other overrides take one value: {', '.join(swept)}"
    return None


def run_population(
    launcher: Any,
    sweep_dir: str,
    launcher_target: str,
    population: int,
    params: Mapping[str, str],
    rules: Mapping[str, Any],
    arguments: Sequence[str],
) -> Any:
    """Launches the population's run with `launcher` (Hydra's); returns its JobReturn (a list of one). `params`
    and the command line's agent.*/policy.* ranges are the space, `rules` the other PbtSettings."""
    parse = OverridesParser.create().parse_overrides
    given = parse(list(arguments))
    searched = parse([f"{key}={text}" for key, text in params.items()])
    searched += [o for o in given if o.is_sweep_override() and o.get_key_element().startswith(SEARCHED)]
    others = [o for o in given if o not in searched]
    refused = refusal(launcher_target, searched, others)
    if refused:
        raise ConfigCompositionException(f"hydra/sweeper=pbt: {refused}")
    for note in comma_list_notes(searched):
        print(note)
    space = {o.get_key_element(): hyperparameter(o) for o in searched}
    settings = PbtSettings(space=space, **{**rules, "factors": tuple(rules["factors"])})
    problem = settings.problem(population)
    if problem:
        raise ConfigCompositionException(f"hydra/sweeper=pbt: {problem}")
    sweep_directory = os.path.abspath(sweep_dir)
    os.makedirs(sweep_directory, exist_ok=True)
    path = os.path.join(sweep_directory, SETTINGS_FILE)
    settings.write(path)
    overrides = [*(o.input_line for o in others), f"launcher.num_seeds={population}", f"launcher.pbt={path}"]
    returns = launcher.launch([overrides], initial_job_idx=0)
    result = returns[0]
    run_directory = result.hydra_cfg.hydra.runtime.output_dir if result.hydra_cfg is not None else None
    write_sweep_summary(sweep_directory, run_directory)
    return returns


def write_sweep_summary(sweep_directory: str, run_directory: str | None) -> None:
    """`<sweep>/summary.json`: the population run's directory, status and PBT result (its best member)."""
    summary: dict[str, Any] = {"run_directory": run_directory, "status": "not started"}
    path = os.path.join(run_directory or "", "summary.json")
    if run_directory and os.path.exists(path):
        with open(path) as file:
            run = json.load(file)
        summary |= {"status": run.get("status"), "pbt": run.get("pbt"), "population": run.get("num_seeds")}
        best = (run.get("pbt") or {}).get("best_member")
        if best is not None:
            summary["best_run_directory"] = os.path.join(run_directory, f"seed_{best}")
    with open(os.path.join(sweep_directory, "summary.json"), "w") as file:
        json.dump(summary, file, indent=2)


def result_lines(sweep_directory: str) -> list[str]:
    """What the terminal says at a PBT sweep's end, from its summary.json: the best member and its final
    values (a tie named as one), where its run and every member's history are."""
    path = os.path.join(sweep_directory, "summary.json")
    if not os.path.isfile(path):
        return []
    with open(path) as file:
        summary = json.load(file)
    run = summary.get("run_directory")
    pbt = summary.get("pbt")
    if summary.get("status") != "finished" or not pbt:
        return [f"Population-based training: the population's run is {summary.get('status')}: {run}"]
    size = summary.get("population")
    score = f"{pbt['final_eval_return']:.1f}"
    member_run = lambda member: os.path.join(run, f"seed_{member}")
    tied = pbt.get("tied") or []
    if tied:
        names = spoken_list([str(entry["member"]) for entry in tied])
        lines = [f"Best of {size} PBT members: members {names} tie at {score} (final_eval_return), ending with:"]
        for entry in tied:
            member = entry["member"]
            lines.append(f"  member {member}: {values_text(entry['values'])}; its run: {member_run(member)}")
    else:
        member = pbt["best_member"]
        lines = [
            f"Best of {size} PBT members: member {member} at {score} (final_eval_return), ending with "
            f"{values_text(pbt['values'])}; its run: {member_run(member)}"
        ]
    history = os.path.join(run, "seed_<member>", "logs", "pbt.csv")
    lines.append(f"Its schedule of hyperparameters: {path}; every member's history: {history}")
    return lines


def values_text(values: Mapping[str, float]) -> str:
    return " ".join(f"{key}={value}" for key, value in values.items())


def spoken_list(items: Sequence[str]) -> str:
    """ "2 and 5", "1, 2 and 5"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"
