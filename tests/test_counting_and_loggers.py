import csv
import threading

from rl.counting import Counter
from rl.loggers import CSVLogger, DefaultLoggerFactory, Dispatcher, TimeFilter
from rl.loggers.base import Logger


def test_child_counters_prefix_keys_and_see_the_root_totals():
    root = Counter()
    actor_a = Counter(root, "actor", time_delta=0.0)
    actor_b = Counter(root, "actor", time_delta=0.0)
    learner = Counter(root, "learner", time_delta=0.0)
    actor_a.increment(steps=10, episodes=1)
    actor_b.increment(steps=5)
    counts = learner.increment(steps=1)
    assert counts == {"actor_steps": 15, "actor_episodes": 1, "learner_steps": 1}
    assert actor_a.get_counts()["actor_steps"] == 15
    assert actor_a.save() == {"steps": 10, "episodes": 1}


def test_counter_is_thread_safe():
    root = Counter()
    child = Counter(root, "actor", time_delta=0.0)
    threads = [threading.Thread(target=lambda: [child.increment(steps=1) for _ in range(1000)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert root.get_counts()["actor_steps"] == 4000


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
    assert list(rows[1]) == ["actor_id", "episode_return"]


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
        assert list(csv.DictReader(file)) == [{"actor_id": "1", "actor_steps": "3", "episode_return": "9.0"}]
