"""Population-based training of launcher=anakin's replicas (`launcher.pbt`; `hydra/sweeper=pbt` writes it).

The population is the run's replicas, vmapped in one program, each with its own hyperparameters as traced
inputs. After every `interval` actor steps' evaluation round the members are ranked by that round's return
(truncation selection): each of the bottom `fraction` takes the learner state (parameters, optimiser state,
the schedules' clock) of a member drawn from the top `fraction`, and explores from that member's
hyperparameters. Environments, replay and every random key stay each member's own. Nothing recompiles:
the exchange is a gather between chunks (rl/anakin/programs.py `inherit`) and the new values are the
programs' next inputs. The anakin launcher is given the search as data (`PbtSearch`, conf/launcher/anakin.yaml's
`pbt_search`) and its nodes act on the population it starts; rl/anakin imports nothing of this module."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import os

import numpy as np
import yaml

from rl.anakin.build import untraceable, value_of
from rl.experiments.config import Experiment
from rl.experiments.validation import ConfigError

# Members hold float32 values (0.001 is 0.0010000000474974513): records give them rounded to this many
# significant digits, or to as many as the user's own numbers for the hyperparameter have where more.
SIGNIFICANT_DIGITS = 6
FLOAT32_DIGITS = 9  # More than float32 holds.


def significant_digits(value: float) -> int:
    """The significant digits of `value`'s shortest decimal: 1 for 0.001, 3 for 0.00125."""
    mantissa = np.format_float_scientific(float(value), unique=True, trim="-").split("e")[0]
    return len(mantissa.replace("-", "").replace(".", "").lstrip("0")) or 1


def rounded(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """`value` to `digits` significant digits: a member's float32 value as the user wrote it."""
    return float(f"{float(value):.{digits}g}")


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """Where a hyperparameter starts and where exploring may take it: an interval [low, high] (sampled
    uniformly, or uniformly in log space with `log`) or a set of `choices`."""

    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[float, ...] = ()

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.choices:
            return rng.choice(np.asarray(self.choices, np.float64), size=size)
        if self.log:
            return np.exp(rng.uniform(math.log(self.low), math.log(self.high), size))
        return rng.uniform(self.low, self.high, size)

    @property
    def digits(self) -> int:
        """The significant digits its members' values are recorded with: SIGNIFICANT_DIGITS, or more where the
        user's bounds or choices have more (choice(0.9999999) keeps its seven 9s)."""
        given = [significant_digits(number) for number in (self.low, self.high, *self.choices)]
        return min(max(SIGNIFICANT_DIGITS, *given), FLOAT32_DIGITS)

    def perturbed(self, value: float, factor: float) -> float:
        """`value` times `factor`, kept inside the interval; a choice moves to a neighbouring one instead
        (up when `factor` > 1)."""
        if not self.choices:
            return float(np.clip(value * factor, self.low, self.high))
        ordered = sorted(self.choices)
        index = int(np.argmin([abs(choice - value) for choice in ordered]))
        return float(ordered[int(np.clip(index + (1 if factor > 1 else -1), 0, len(ordered) - 1))])


@dataclasses.dataclass(frozen=True)
class PbtSettings:
    """`space`: "agent.<field>" or "policy.<field>" -> its Hyperparameter; `interval`: actor steps between
    exchanges (None: every evaluation round); the bottom `fraction` copies the top `fraction`; exploring
    resamples a value with `resample_probability`, else multiplies it by one of `factors`; `seed` seeds
    the population's initial values and every exchange's draws (with the exchange's step)."""

    space: dict[str, Hyperparameter]
    interval: int | None = None
    fraction: float = 0.25
    factors: tuple[float, ...] = (0.8, 1.2)
    resample_probability: float = 0.25
    seed: int = 0

    @classmethod
    def from_mapping(cls, mapping: dict[str, Any]) -> PbtSettings:
        space = {
            key: Hyperparameter(**{**dict(value), "choices": tuple(dict(value).get("choices", ()))})
            for key, value in dict(mapping["space"]).items()
        }
        fields = {key: value for key, value in mapping.items() if key != "space"}
        return cls(space=space, **fields | {"factors": tuple(fields.get("factors", cls.factors))})

    @classmethod
    def read(cls, path: str) -> PbtSettings:
        with open(path) as file:
            try:
                mapping = yaml.safe_load(file)
            except yaml.YAMLError as error:
                raise ValueError(f"not YAML: {error}") from None
        if not isinstance(mapping, dict) or "space" not in mapping:
            raise ValueError("expected a mapping with a `space` of hyperparameters")
        return cls.from_mapping(mapping)

    def write(self, path: str) -> None:
        mapping = dataclasses.asdict(self)
        mapping["factors"] = list(self.factors)
        for hyperparameter in mapping["space"].values():
            hyperparameter["choices"] = list(hyperparameter["choices"])
        with open(path, "w") as file:
            yaml.safe_dump(mapping, file, sort_keys=False)

    def problem(self, population: int) -> str | None:
        """Why these settings cannot run a population of `population` (None: they can)."""
        if population < 2:
            return "needs launcher.num_seeds >= 2 (the population)"
        if not self.space:
            return "names no hyperparameter to search"
        if not 0 < self.fraction <= 0.5:
            return f"fraction must be in (0, 0.5], got {self.fraction}"
        for key, h in self.space.items():
            if key.split(".")[0] not in ("agent", "policy"):
                return f"{key}: only agent.<field> and policy.<field> can be a member's value"
            if not h.choices and not (h.low < h.high and (h.low > 0 or not h.log)):
                return f"{key}: an interval needs low < high (and low > 0 with log)"
        return None


def initial_values(settings: PbtSettings, population: int) -> dict[str, np.ndarray]:
    """Every member's starting value of each hyperparameter, drawn from the space with `settings.seed`."""
    rng = np.random.default_rng([settings.seed])
    return {key: h.sample(rng, population).astype(np.float32) for key, h in settings.space.items()}


def exploit_explore(
    fitness: np.ndarray, values: dict[str, np.ndarray], settings: PbtSettings, step: int
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(parents, new values) of one exchange. Members ranked by `fitness` (NaN last, ties by index): each
    of the bottom k = max(1, floor(fraction * n)) gets a parent drawn uniformly from the top k and the
    parent's values, each resampled with `resample_probability`, else multiplied by a factor drawn from
    `factors`; everyone else is its own parent and keeps its values. Draws depend on (seed, step) only."""
    rng = np.random.default_rng([settings.seed, step])
    count = len(fitness)
    k = min(max(1, int(settings.fraction * count)), count // 2)
    ranked = np.argsort(-np.nan_to_num(np.asarray(fitness, np.float64), nan=-np.inf), kind="stable")
    parents = np.arange(count)
    parents[ranked[count - k :]] = rng.choice(ranked[:k], size=k)
    new = {key: np.array(value, np.float32) for key, value in values.items()}
    for child in ranked[count - k :]:
        for key, h in settings.space.items():
            parent_value = float(values[key][parents[child]])
            if rng.uniform() < settings.resample_probability:
                new[key][child] = h.sample(rng, 1)[0]
            else:
                new[key][child] = h.perturbed(parent_value, float(rng.choice(settings.factors)))
    return parents, new


@dataclasses.dataclass
class Population:
    """The settings, every member's present values and its lineage: the exchanges that made the learner
    state it holds ({"actor_steps", "member" it went to, "copied_from", "values"}), which a checkpoint keeps.
    A lineage starts with the member's own start (actor_steps 0, copied_from: the member itself); each later
    event is an exchange that gave the member `copied_from`'s learner state. Records give values `rounded`."""

    settings: PbtSettings
    values: dict[str, np.ndarray]
    lineage: list[list[dict[str, Any]]]

    @classmethod
    def start(cls, settings: PbtSettings, size: int) -> Population:
        population = cls(settings, initial_values(settings, size), [])
        population.lineage = [[population.event(0, member, member)] for member in range(size)]
        return population

    def due(self, steps: int, eval_every: int, max_actor_steps: int) -> bool:
        return 0 < steps < max_actor_steps and steps % (self.settings.interval or eval_every) == 0

    def exchange(self, steps: int, fitness: np.ndarray) -> np.ndarray:
        """One exchange at `steps`: sets the new values and lineages; returns the parents."""
        parents, self.values = exploit_explore(fitness, self.values, self.settings, steps)
        lineage = [list(self.lineage[parent]) for parent in parents]
        for member, parent in enumerate(parents):
            if parent != member:
                lineage[member].append(self.event(steps, member, int(parent)))
        self.lineage = lineage
        return parents

    def state(self) -> dict[str, Any]:
        return {"values": {key: value.tolist() for key, value in self.values.items()}, "lineage": self.lineage}

    def restore(self, state: dict[str, Any]) -> None:
        self.values = {key: np.asarray(value, np.float32) for key, value in state["values"].items()}
        self.lineage = state["lineage"]

    def values_of(self, member: int) -> dict[str, float]:
        """`member`'s present values, `rounded` as the records give them (no float32 noise)."""
        space = self.settings.space
        return {key: rounded(value[member], space[key].digits) for key, value in self.values.items()}

    def record(self, member: int, copied_from: int) -> dict[str, Any]:
        """A member's row of logs/pbt.csv after a round: whose learner state it holds now (`kept`: 1 when its
        own, copied_from being itself; 0 when it took copied_from's at this exchange) and its values."""
        return {"copied_from": int(copied_from), "kept": int(copied_from == member), **self.values_of(member)}

    def event(self, steps: int, member: int, copied_from: int) -> dict[str, Any]:
        return {
            "actor_steps": int(steps),
            "member": int(member),
            "copied_from": int(copied_from),
            "values": self.values_of(member),
        }

    def best(self, finals: Sequence[float]) -> dict[str, Any]:
        """The member with the best final return (the first of a tie), its values and its schedule of
        hyperparameters; on a tie `tied` lists every member at that return with its values."""
        scores = np.nan_to_num(np.asarray(finals, np.float64), nan=-np.inf)
        member = int(np.argmax(scores))
        best = {
            "best_member": member,
            "final_eval_return": float(finals[member]),
            "values": self.values_of(member),
            "schedule": self.lineage[member],
        }
        tied = [int(index) for index in np.flatnonzero(scores == scores[member])] if np.isfinite(scores[member]) else []
        if len(tied) > 1:
            best["tied"] = [{"member": index, "values": self.values_of(index)} for index in tied]
        return best


@dataclasses.dataclass(frozen=True)
class PbtSearch:
    """`launcher.pbt`'s search as the anakin launcher is given it: the settings, read and checked, and the
    population's size; `start` gives a run its population (the same every time: the settings' seed)."""

    settings: PbtSettings
    size: int

    @classmethod
    def read(cls, path: str, population: int) -> PbtSearch:
        """`launcher.pbt`'s file (hydra/sweeper=pbt writes one; docs/anakin.md), refused in one line if unusable."""
        try:
            settings = PbtSettings.read(os.path.expanduser(str(path)))
        except (OSError, ValueError, TypeError, KeyError) as error:
            message = f"cannot read population-based training's settings {path}: {error}"
            raise ConfigError("launcher.pbt", message) from None
        problem = settings.problem(population)
        if problem is not None:
            raise ConfigError("launcher.pbt", problem)
        return cls(settings, population)

    def check(self, experiment: Experiment) -> None:
        """Refuses a search whose hyperparameters the members cannot hold as traced values, or whose interval
        falls between evaluation rounds (an exchange ranks members by a round's returns)."""
        space = self.settings.space
        for key in space:
            value = value_of(experiment, key)
            if value is None:
                raise ConfigError(key, f"not an option of agent={experiment.agent_name}'s {key.split('.')[0]} config")
            if not isinstance(value, float):
                raise ConfigError(key, "population-based training searches float fields of the agent or policy only")
        interval = self.settings.interval or experiment.eval_every
        if interval % experiment.eval_every:
            raise ConfigError(
                "launcher.pbt", f"interval={interval} must be a multiple of eval_every={experiment.eval_every}"
            )
        why = untraceable(experiment, list(space))
        if why is not None:
            raise ConfigError("launcher.pbt", f"the members cannot hold {', '.join(space)} as values: {why}")

    def start(self) -> Population:
        return Population.start(self.settings, self.size)
