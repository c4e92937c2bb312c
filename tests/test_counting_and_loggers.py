import csv
import threading

import pytest

from rl.counting import Counter
from rl.loggers import CSVLogger, DefaultLoggerFactory, Dispatcher, TimeFilter
from rl.loggers.base import Logger


def test_child_counters_prefix_keys_and_see_the_root_totals():
    root = Counter()
    actor_a = Counter(root, "actor")
    actor_b = Counter(root, "actor")
    learner = Counter(root, "learner")
    actor_a.increment(steps=10, episodes=1)
    actor_b.increment(steps=5)
    counts = learner.increment(steps=1)
    assert counts == {"actor_steps": 15, "actor_episodes": 1, "learner_steps": 1}
    assert actor_a.get_counts()["actor_steps"] == 15
    assert actor_a.save() == {"steps": 10, "episodes": 1}


def test_counter_is_thread_safe():
    root = Counter()
    child = Counter(root, "actor")
    threads = [threading.Thread(target=lambda: [child.increment(steps=1) for _ in range(1000)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert root.get_counts()["actor_steps"] == 4000


def test_restoring_a_child_gives_its_parent_the_restored_counts_exactly():
    root = Counter()
    other = Counter(root, "actor")
    other.increment(steps=7, episodes=1)
    learner = Counter(root, "learner")
    learner.restore({"steps": 120, "sgd_steps": 240})
    assert root.get_counts() == {"actor_steps": 7, "actor_episodes": 1, "learner_steps": 120, "learner_sgd_steps": 240}
    assert learner.save() == {"steps": 120, "sgd_steps": 240}
    assert learner.get_counts() == root.get_counts()
    # Restoring again moves the parent by the difference only; a key left out goes to 0.
    learner.increment(steps=5)
    learner.restore({"steps": 100})
    assert root.get_counts() == {"actor_steps": 7, "actor_episodes": 1, "learner_steps": 100, "learner_sgd_steps": 0}
    assert learner.save() == {"steps": 100}
    learner.increment(steps=1)
    assert root.get_counts()["learner_steps"] == 101


def test_restoring_through_two_levels_reaches_the_root():
    root = Counter()
    middle = Counter(root, "actor")
    leaf = Counter(middle, "evaluator")
    leaf.restore({"steps": 3})
    assert middle.save() == {"evaluator_steps": 3}
    assert root.get_counts() == {"actor_evaluator_steps": 3}


def test_restoring_the_root_sets_its_counts():
    root = Counter()
    root.increment(actor_steps=4)
    root.restore({"actor_steps": 50, "learner_steps": 9})
    assert root.get_counts() == {"actor_steps": 50, "learner_steps": 9}


@pytest.mark.reverb
def test_step_budget_leases_exactly_the_total():
    from rl.ray.nodes import StepBudget  # Ray's launcher: imports ray.

    budget = StepBudget(250)
    assert budget.register(0) == {"restart": 0, "steps": 0, "reclaimed": 0}
    assert budget.register(1) == {"restart": 0, "steps": 0, "reclaimed": 0}
    assert [budget.lease(0, 0, 100), budget.lease(1, 0, 100), budget.lease(0, 0, 100), budget.lease(1, 0, 100)] == [
        100,
        100,
        50,
        0,
    ]
    assert budget.count(0, 0, 150) and budget.count(1, 0, 100)
    assert budget.state() == {
        "unleased": 0,
        "outstanding": {0: 0, 1: 0},
        "counted": {0: 150, 1: 100},
        "restarts": {0: 0, 1: 0},
    }
    with pytest.raises(ValueError, match="actor 1 counted 1 steps but holds a lease of 0"):
        budget.count(1, 0, 1)


@pytest.mark.reverb
def test_a_held_budget_leases_up_to_the_point_then_asks_actors_to_wait():
    """Ray evaluations sit at multiples of eval_every: leases stop at the point (-1: wait)
    until the hold moves on; reclaimed steps of a dead actor can be leased below it."""
    from rl.ray.nodes import StepBudget  # Ray's launcher: imports ray.

    budget = StepBudget(500)
    budget.register(0)
    budget.register(1)
    budget.hold_until(250)
    assert [budget.lease(0, 0, 100), budget.lease(1, 0, 100), budget.lease(0, 0, 100), budget.lease(1, 0, 100)] == [
        100,
        100,
        50,
        -1,
    ]
    assert budget.count(0, 0, 150) and budget.count(1, 0, 60)  # Actor 1 dies holding 40 uncounted.
    assert budget.lease(0, 0, 100) == -1
    assert budget.register(1)["reclaimed"] == 40
    assert budget.lease(1, 1, 100) == 40 and budget.lease(0, 0, 100) == -1  # Back to the point, no further.
    budget.hold_until(500)
    assert budget.lease(0, 0, 300) == 250 and budget.lease(0, 0, 100) == 0  # The whole budget: spent, not held.


@pytest.mark.reverb
def test_a_restarted_actor_returns_its_uncounted_lease_and_resumes_its_count():
    from rl.ray.nodes import StepBudget  # Ray's launcher: imports ray.

    budget = StepBudget(300)
    budget.register(0)
    budget.register(1)
    assert budget.lease(1, 0, 100) == 100
    assert budget.count(1, 0, 100)
    assert budget.lease(1, 0, 100) == 100
    assert budget.count(1, 0, 30)  # 30 of the second lease counted, then the actor dies.
    assert budget.lease(0, 0, 100) == 100
    assert budget.lease(0, 0, 100) == 0  # Spent, but 70 steps are stranded with actor 1.
    assert budget.register(1) == {"restart": 1, "steps": 130, "reclaimed": 70}
    # The dead incarnation's late calls change nothing.
    assert not budget.count(1, 0, 10) and budget.lease(1, 0, 100) == 0
    assert budget.lease(1, 1, 100) == 70
    assert budget.count(1, 1, 70) and budget.count(0, 0, 100)
    state = budget.state()
    assert state["unleased"] == 0 and state["outstanding"] == {0: 0, 1: 0}
    assert state["counted"] == {0: 100, 1: 200} and sum(state["counted"].values()) == 300
    assert state["restarts"] == {0: 0, 1: 1}
    assert budget.register(1) == {"restart": 2, "steps": 200, "reclaimed": 0}


def test_csv_logger_writes_header_and_rows(tmp_path):
    logger = CSVLogger(str(tmp_path), "learner")
    logger.write({"learner_steps": 1, "loss": 0.5})
    logger.write({"learner_steps": 2, "loss": 0.25})
    logger.close()
    with open(tmp_path / "learner.csv") as file:
        rows = list(csv.DictReader(file))
    assert rows == [{"learner_steps": "1", "loss": "0.5"}, {"learner_steps": "2", "loss": "0.25"}]


def test_csv_logger_appends_with_the_existing_columns(tmp_path):
    first = CSVLogger(str(tmp_path), "actor")
    first.write({"actor_id": 0, "episode_return": 1.0})
    first.close()
    second = CSVLogger(str(tmp_path), "actor")
    second.write({"episode_return": 2.0, "actor_id": 1, "extra": 3})
    second.close()
    with open(tmp_path / "actor.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["actor_id"] for row in rows] == ["0", "1"]
    # A key the file did not have widens its header: nothing written is dropped.
    assert list(rows[1]) == ["actor_id", "episode_return", "extra"]
    assert [row["extra"] for row in rows] == ["", "3"]


class _Recorder(Logger):
    def __init__(self):
        self.rows = []

    def write(self, data):
        self.rows.append(dict(data))


def test_time_filter_and_dispatcher():
    a, b = _Recorder(), _Recorder()
    logger = TimeFilter(Dispatcher([a, b]), time_delta=3600)
    logger.write({"x": 1})
    logger.write({"x": 2})
    assert a.rows == b.rows == [{"x": 1}]


def test_logger_factory_adds_instance_ids_and_writes_csv(tmp_path):
    factory = DefaultLoggerFactory(terminal=False, csv=True, directory=str(tmp_path))
    factory("actor", "actor_steps", 1).write({"actor_steps": 3, "episode_return": 9.0})
    factory.close()
    with open(tmp_path / "actor.csv") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 1 and float(rows[0].pop("wall_time_s")) >= 0.0  # The run clock stamps every record.
    assert rows == [{"actor_id": "1", "actor_steps": "3", "episode_return": "9.0"}]
