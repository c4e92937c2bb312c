"""Loggers: no key written is ever lost, and every record carries wall_time_s."""

import csv
import os
import stat
import time

from rl.loggers import CSVLogger, DefaultLoggerFactory, Dispatcher
from rl.loggers.base import Logger


def _read(path):
    with open(path, newline="") as file:
        return list(csv.reader(file))


def _rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_csv_logger_keeps_every_key_when_keys_change(tmp_path):
    logger = CSVLogger(str(tmp_path), "actor")
    records = [
        {"actor_steps": 10, "episode_return": 1.5},
        {"actor_steps": 20, "episode_return": 2.5, "learner_steps": 3},
        {"actor_steps": 30},
        {"loss": 0.25, "actor_steps": 40, "episode_return": -1.0, "note": 'a,b "quoted"'},
    ]
    for record in records:
        logger.write(record)
    logger.close()
    path = tmp_path / "actor.csv"
    table = _read(path)
    assert table[0] == ["actor_steps", "episode_return", "learner_steps", "loss", "note"]
    assert table[1:] == [
        ["10", "1.5", "", "", ""],
        ["20", "2.5", "3", "", ""],
        ["30", "", "", "", ""],
        ["40", "-1.0", "", "0.25", 'a,b "quoted"'],
    ]
    # Read back as records: every key written is there with its value.
    for record, row in zip(records, _rows(path)):
        assert {key: row[key] for key in record} == {key: str(value) for key, value in record.items()}
    assert not [name for name in os.listdir(tmp_path) if name != "actor.csv"]  # No temporary left.


def test_csv_widening_keeps_the_file_mode(tmp_path):
    logger = CSVLogger(str(tmp_path), "learner")
    logger.write({"a": 1})
    os.chmod(tmp_path / "learner.csv", 0o640)
    logger.write({"a": 2, "b": 3})
    logger.close()
    assert stat.S_IMODE(os.stat(tmp_path / "learner.csv").st_mode) == 0o640
    assert _read(tmp_path / "learner.csv") == [["a", "b"], ["1", ""], ["2", "3"]]


def test_several_writers_of_one_label_lose_no_keys(tmp_path):
    """Two actors' loggers on one file (as the Ray driver holds them), keys differing."""
    first = CSVLogger(str(tmp_path), "actor")
    second = CSVLogger(str(tmp_path), "actor")
    first.write({"actor_id": 0, "actor_steps": 1, "episode_return": 1.0})
    second.write({"actor_id": 1, "actor_steps": 2, "episode_return": 2.0, "epsilon": 0.5})
    first.write({"actor_id": 0, "actor_steps": 3, "episode_return": 3.0, "learner_steps": 7})
    second.write({"actor_id": 1, "actor_steps": 4})
    first.close()
    second.write({"actor_id": 1, "actor_steps": 5, "extra": "x"})
    second.close()
    assert _rows(tmp_path / "actor.csv") == [
        {"actor_id": "0", "actor_steps": "1", "episode_return": "1.0", "epsilon": "", "learner_steps": "", "extra": ""},
        {
            "actor_id": "1",
            "actor_steps": "2",
            "episode_return": "2.0",
            "epsilon": "0.5",
            "learner_steps": "",
            "extra": "",
        },
        {
            "actor_id": "0",
            "actor_steps": "3",
            "episode_return": "3.0",
            "epsilon": "",
            "learner_steps": "7",
            "extra": "",
        },
        {"actor_id": "1", "actor_steps": "4", "episode_return": "", "epsilon": "", "learner_steps": "", "extra": ""},
        {"actor_id": "1", "actor_steps": "5", "episode_return": "", "epsilon": "", "learner_steps": "", "extra": "x"},
    ]


def test_appending_to_an_existing_file_keeps_its_rows_and_adds_new_columns(tmp_path):
    first = CSVLogger(str(tmp_path), "evaluator")
    first.write({"actor_steps": 100, "episode_return": 9.0})
    first.close()
    second = CSVLogger(str(tmp_path), "evaluator")  # A resumed run.
    second.write({"episode_return": 10.0, "actor_steps": 200, "evaluator_id": 0})
    second.close()
    assert _read(tmp_path / "evaluator.csv") == [
        ["actor_steps", "episode_return", "evaluator_id"],
        ["100", "9.0", ""],
        ["200", "10.0", "0"],
    ]


def test_write_after_close_reopens_the_file(tmp_path):
    logger = CSVLogger(str(tmp_path), "learner")
    logger.write({"a": 1})
    logger.close()
    logger.close()  # Idempotent.
    logger.write({"b": 2})
    logger.close()
    assert _read(tmp_path / "learner.csv") == [["a", "b"], ["1", ""], ["", "2"]]


class _Recorder(Logger):
    def __init__(self):
        self.rows = []

    def write(self, data):
        self.rows.append(dict(data))


def test_wall_time_stamps_records_and_keeps_a_stamp_made_elsewhere():
    recorder = _Recorder()
    clock = iter([1.23456, 2.0])
    logger = Dispatcher([recorder], lambda: next(clock))
    logger.write({"actor_steps": 1})
    logger.write({"actor_steps": 2, "wall_time_s": 0.5})
    logger.write({"actor_steps": 3})
    assert recorder.rows == [
        {"actor_steps": 1, "wall_time_s": 1.235},
        {"actor_steps": 2, "wall_time_s": 0.5},
        {"actor_steps": 3, "wall_time_s": 2.0},
    ]


def test_factory_records_carry_wall_time_since_the_factory_was_made(tmp_path):
    before = time.time()
    factory = DefaultLoggerFactory(terminal=False, csv=True, directory=str(tmp_path))
    after = time.time()
    assert before <= factory.start_time <= after
    factory("evaluator", "actor_steps", 2).write({"actor_steps": 5, "episode_return": 1.0})
    factory("learner", "learner_steps").write({"learner_steps": 1, "actor_steps": 5})
    written = time.time()
    factory.close()
    (evaluation,) = _rows(tmp_path / "evaluator.csv")
    assert list(evaluation) == ["actor_steps", "evaluator_id", "episode_return", "wall_time_s"]  # Steps key first.
    assert evaluation["evaluator_id"] == "2" and evaluation["actor_steps"] == "5"
    (learner,) = _rows(tmp_path / "learner.csv")
    for row in (evaluation, learner):
        assert 0.0 <= float(row["wall_time_s"]) <= written - before + 0.001


def test_move_rows_sets_rows_aside_and_open_loggers_append_after_the_rest(tmp_path):
    from rl.loggers.csv import move_rows

    logger = CSVLogger(str(tmp_path), "learner", steps_key="learner_steps")
    for step in (1, 2, 3, 4):
        logger.write({"learner_steps": step, "loss": step / 10})
    path, aside = str(tmp_path / "learner.csv"), str(tmp_path / "superseded" / "learner.restart1.csv")
    moved = move_rows(path, lambda row: int(row["learner_steps"]) > 2, aside)
    assert moved == 2
    logger.write({"learner_steps": 3, "loss": 0.5})  # The restored learner, from step 2 again.
    logger.close()
    with open(path, newline="") as file:
        assert [(r["learner_steps"], r["loss"]) for r in csv.DictReader(file)] == [
            ("1", "0.1"),
            ("2", "0.2"),
            ("3", "0.5"),
        ]
    with open(aside, newline="") as file:
        assert [(r["learner_steps"], r["loss"]) for r in csv.DictReader(file)] == [("3", "0.3"), ("4", "0.4")]
    # Nothing to move: the file is left as it is, and no destination is made.
    assert move_rows(path, lambda row: False, str(tmp_path / "other.csv")) == 0
    assert not os.path.exists(tmp_path / "other.csv")


def test_every_evaluation_round_reaches_the_terminal_and_train_log(tmp_path, monkeypatch, caplog):
    """With a terminal rate limit no run outlives, every evaluator record is still printed
    and copied to train.log's logger; the actor's (and learner's) stay rate-limited."""
    import io
    import logging

    import rich
    from rich.console import Console

    output = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=output, force_terminal=False, width=200))
    factory = DefaultLoggerFactory(terminal=True, csv=False, directory=str(tmp_path), terminal_time_delta=3600.0)
    evaluator = factory("evaluator", "actor_steps", 0)
    actor = factory("actor", "actor_steps", 0)
    learner = factory("learner", "learner_steps")
    with caplog.at_level(logging.INFO, logger="rl.transcript"):
        for round_ in range(1, 4):
            actor.write({"actor_steps": 100 * round_, "episode_return": 1.0})
            learner.write({"learner_steps": round_, "actor_steps": 100 * round_})
            evaluator.write({"actor_steps": 100 * round_, "episode_return": float(round_)})
    factory.close()
    printed = output.getvalue().splitlines()
    assert [line.split()[2] for line in printed if line.startswith("[evaluator 0]")] == [
        "actor_steps=100",
        "actor_steps=200",
        "actor_steps=300",
    ]
    assert sum(line.startswith("[actor 0]") for line in printed) == 1  # The first of the hour.
    assert sum(line.startswith("[learner]") for line in printed) == 1
    transcript = [record.getMessage() for record in caplog.records if record.name == "rl.transcript"]
    assert sum(line.startswith("[evaluator 0]") for line in transcript) == 3


def test_learner_csv_keeps_one_record_per_interval_as_documented(tmp_path, monkeypatch):
    """What rl/loggers/csv.py and docs/architecture.md say of learner.csv: behind the
    learner's `TimeFilter` the first record is kept, the next ones within
    `learner_log_interval_s` are dropped (not averaged), and the first after it is kept."""
    import rl.loggers.base as aggregators
    import rl.loggers.csv as csv_module
    from rl.loggers import TimeFilter

    assert "learner_log_interval_s" in csv_module.__doc__ and "TimeFilter" in csv_module.__doc__
    now = [100.0]
    monkeypatch.setattr(aggregators.time, "monotonic", lambda: now[0])
    logger = TimeFilter(CSVLogger(str(tmp_path), "learner", steps_key="learner_steps"), 1.0)
    for step, at in enumerate([100.0, 100.4, 100.9, 101.0, 101.5, 102.2], start=1):
        now[0] = at
        logger.write({"learner_steps": step, "actor_steps": 10 * step, "loss": float(step)})
    logger.close()
    assert [row["learner_steps"] for row in _rows(tmp_path / "learner.csv")] == ["1", "4", "6"]
