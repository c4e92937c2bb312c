"""benchmarks/mujoco_peers.py (scripts/benchmark.py mujoco_peers) and its peer runner benchmarks/peer_sb3_run.py:
the options, the zoo's settings the runner passes (pinned), the commands, the table from fixed figures and the
refusal when a peer's venv is missing; the `slow` ones run the peer (and ours) for real and fail, never skip, when
its venv is missing."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import mujoco_peers
from benchmarks.mujoco_peers import PeerMissing, PeerOptions
from benchmarks.peer_sb3_run import ZOO, zoo_settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARK = os.path.join(ROOT, "scripts", "benchmark.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))

TD3_ZOO = {
    "learning_starts": 10000,
    "noise_type": "normal",
    "noise_std": 0.1,
    "train_freq": 1,
    "gradient_steps": 1,
    "learning_rate": 1e-3,
    "batch_size": 256,
    "policy_kwargs": {"net_arch": [400, 300]},
}


def _options(*arguments):
    from benchmark import parse_arguments

    return parse_arguments(["mujoco_peers", *arguments]).peer_options


def test_options_default_to_walker_sac_at_100k_against_sb3_and_take_the_command_line():
    assert _options() == PeerOptions()
    assert PeerOptions() == PeerOptions(
        "Walker2d-v5", "sac", 100_000, (0, 1, 2, 3, 4), ("sb3",), 10_000, 10, None, None
    )
    given = _options("--task", "Ant-v5", "--algo", "td3", "--steps", "50000", "--seeds", "3", "--peers", "sb3", "sbx")
    assert given == PeerOptions("Ant-v5", "td3", 50_000, (0, 1, 2), ("sb3", "sbx"), 10_000, 10, None, None)
    smoke = _options("--quick", "--eval-every", "500", "--peer-dir", "out")
    assert smoke == PeerOptions(steps=3000, seeds=(0,), eval_every=500, learning_starts=1000, peer_dir="out")


@pytest.mark.parametrize(
    "arguments",
    [
        ["mujoco_peers", "--task", "CartPole-v1"],  # The zoo has no MuJoCo settings for it.
        ["mujoco_peers", "--task", "Reacher-v5"],
        ["mujoco_peers", "--algo", "ppo"],
        ["mujoco_peers", "--seeds", "0"],
        ["mujoco_peers", "--seeds", "1", "2"],
        ["mujoco_peers", "--steps", "0"],
        ["mujoco_peers", "--learning-starts", "-1"],
        ["mujoco_peers", "--experiments", "sac_mujoco"],
        ["mujoco_peers", "--peers", "cleanrl"],
        ["actor", "--task", "Walker2d-v5"],  # The suite's options are its own.
        ["baselines", "--steps", "1000"],
    ],
)
def test_bad_options_are_usage_errors(arguments, capsys):
    from benchmark import parse_arguments

    with pytest.raises(SystemExit) as error:
        parse_arguments(arguments)
    assert error.value.code == 2
    assert " error: " in capsys.readouterr().err.strip().splitlines()[-1]


def test_the_runner_passes_the_zoos_mujoco_settings_exactly():
    assert "22e3ff2450fd" in ZOO and "2.9.0a2" in ZOO
    for task in ("Walker2d-v5", "HalfCheetah-v5", "Ant-v5", "Hopper-v5", "Humanoid-v5"):
        assert zoo_settings("sac", task) == {"learning_starts": 10000}
        assert zoo_settings("td3", task) == TD3_ZOO
    assert zoo_settings("sac", "Swimmer-v5") == {"learning_starts": 10000, "gamma": 0.999}
    assert zoo_settings("td3", "Swimmer-v5") == {**TD3_ZOO, "gamma": 0.9999}
    assert zoo_settings("td3", "Walker2d-v5", learning_starts=500) == {**TD3_ZOO, "learning_starts": 500}
    zoo_settings("td3", "Walker2d-v5")["policy_kwargs"]["net_arch"].append(1)  # A copy: the table stays.
    assert zoo_settings("td3", "Walker2d-v5") == TD3_ZOO
    for algo, task in (("sac", "InvertedPendulum-v5"), ("ddpg", "Walker2d-v5"), ("sac", "Walker2d")):
        with pytest.raises(ValueError):
            zoo_settings(algo, task)


def test_both_sides_commands():
    options = PeerOptions(task="Ant-v5", algo="td3", steps=3000, eval_every=1000, learning_starts=1000)
    ours = mujoco_peers.our_command(options, 2, "/runs/ours_seed2", "scripts/train.py")
    assert ours == [
        sys.executable,
        "scripts/train.py",
        "experiment=td3_mujoco",
        "environment.name=Ant-v5",
        "max_actor_steps=3000",
        "eval_every=1000",
        "eval_episodes=10",
        "seed=2",
        "logger=csv",
        "checkpoint=false",
        "progress=false",
        "agent.min_replay_size=1000",
        "policy.warmup_steps=1000",
        "hydra.run.dir=/runs/ours_seed2",
    ]
    peer = mujoco_peers.peer_command(options, "sbx", "/py", 2, "/runs/r.json")
    assert peer == [
        "/py",
        mujoco_peers.RUNNER,
        *("--lib", "sbx", "--algo", "td3", "--task", "Ant-v5", "--steps", "3000", "--seed", "2"),
        *("--eval-every", "1000", "--eval-episodes", "10", "--out", "/runs/r.json", "--learning-starts", "1000"),
    ]
    peer_defaults = mujoco_peers.peer_command(PeerOptions(), "sb3", "/py", 0, "r.json")
    assert peer_defaults[-2:] == ["--out", "r.json"] and "--learning-starts" not in peer_defaults
    assert "experiment=sac_mujoco" in mujoco_peers.our_command(PeerOptions(), 0, "d", "t")
    assert not any("min_replay_size" in part for part in mujoco_peers.our_command(PeerOptions(), 0, "d", "t"))


def test_the_table_from_fixed_figures():
    ours = mujoco_peers.side_summary([(1, 400.0), (0, 100.0), (2, 700.0), (3, 1000.0)], [10.0, 11.0, 12.0, 13.0])
    assert ours["seeds"] == [0, 1, 2, 3] and ours["final_returns"] == [100.0, 400.0, 700.0, 1000.0]
    assert ours["mean"] == pytest.approx(550.0) and ours["iqm"] == pytest.approx(550.0)  # IQM: the middle two.
    assert ours["wall_seconds_total"] == 46.0
    for name in ("mean", "iqm"):
        assert 100.0 <= ours[f"{name}_low"] < ours[name] < ours[f"{name}_high"] <= 1000.0
    again = mujoco_peers.side_summary([(3, 1000.0), (2, 700.0), (1, 400.0), (0, 100.0)], [10.0, 11.0, 12.0, 13.0])
    assert again == ours  # A seeded bootstrap: the same figures give the same intervals.
    sb3 = mujoco_peers.side_summary([(0, 200.0), (1, 200.0), (2, 200.0), (3, 200.0)], [23.0, 23.0, 23.0, 23.0])
    assert (sb3["iqm"], sb3["iqm_low"], sb3["iqm_high"]) == (200.0, 200.0, 200.0)
    rows, lines = mujoco_peers.rows_and_lines({"ours": ours, "sb3": sb3})
    by_case = {row.case: row for row in rows}
    assert by_case["ours seed 2"].value == 700.0 and by_case["sb3 seed 0"].value == 200.0
    assert by_case["ours IQM"].value == pytest.approx(550.0) and by_case["sb3 mean 95% high"].value == 200.0
    assert by_case["ours wall"].ratio == 1.0 and by_case["sb3 wall"].ratio == pytest.approx(2.0)
    assert len(rows) == 2 * (4 + 6 + 1) and {row.suite for row in rows} == {"mujoco_peers"}
    assert lines[0].startswith("| implementation | seeds | per seed | IQM [95% CI] |")
    assert lines[2].startswith("| ours | 0, 1, 2, 3 | 100.0, 400.0, 700.0, 1000.0 | 550.0 [")
    assert lines[3] == "| Stable-Baselines3 | 0, 1, 2, 3 | 200.0, 200.0, 200.0, 200.0 | 200.0 [200.0, 200.0] | " + (
        "200.0 [200.0, 200.0] |"
    )
    assert lines[4:] == [
        "wall seconds, ours, per seed: 10, 11, 12, 13",
        "wall seconds, Stable-Baselines3, per seed: 23, 23, 23, 23",
    ]


def test_our_evaluations_are_read_in_step_order(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "evaluator.csv").write_text(
        "actor_steps,evaluator_id,episode_return\n1024,0,45.5\n0,0,-3.5\n3008,0,267.25\n"
    )
    points = mujoco_peers.our_evaluations(str(tmp_path))
    assert points == [{"steps": 0, "return": -3.5}, {"steps": 1024, "return": 45.5}, {"steps": 3008, "return": 267.25}]


def test_a_missing_peer_venv_is_one_line_naming_its_setup_script_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("SBX_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(
        PeerMissing, match=r"no SBX venv at .*nowhere/python: build it with `bash \.\./shared/peers/setup_sbx\.sh`"
    ):
        mujoco_peers.check_peer("sbx")
    peer_dir = tmp_path / "runs"
    environment = {**os.environ, "SB3_PYTHON": str(tmp_path / "nowhere" / "python"), "WANDB_MODE": "disabled"}
    command = [sys.executable, BENCHMARK, "mujoco_peers", "--quick", "--peer-dir", str(peer_dir)]
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"mujoco_peers: no Stable-Baselines3 venv at {tmp_path}/nowhere/python: build it with "
        "`bash ../shared/peers/setup.sh` (a few minutes, once) or name its Python in SB3_PYTHON"
    ]
    assert not peer_dir.exists()  # Nothing ran.


def _peer_python(name):
    """The peer's checked Python; a missing venv fails the test with the line naming its setup script."""
    try:
        return mujoco_peers.check_peer(name)
    except PeerMissing as error:
        pytest.fail(str(error))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_the_runner_trains_and_evaluates_sb3_with_the_zoos_settings(algo, tmp_path):
    python = _peer_python("sb3")
    out = tmp_path / "result.json"
    options = PeerOptions(steps=300, eval_every=100, eval_episodes=2, learning_starts=100, algo=algo)
    result = subprocess.run(
        mujoco_peers.peer_command(options, "sb3", python, 3, str(out)), capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [point["steps"] for point in data["evaluations"]] == [100, 200, 300]
    assert data["settings"] == zoo_settings(algo, "Walker2d-v5", learning_starts=100)
    assert (data["lib"], data["algo"], data["task"], data["seed"], data["steps"]) == (
        "sb3",
        algo,
        "Walker2d-v5",
        3,
        300,
    )
    assert data["final_return"] == data["evaluations"][-1]["return"] and data["versions"]["stable_baselines3"]


@pytest.mark.slow
def test_the_suite_runs_ours_beside_sb3_end_to_end(tmp_path):
    _peer_python("sb3")
    arguments = ["mujoco_peers", "--steps", "1024", "--eval-every", "512", "--learning-starts", "512", "--seeds", "1"]
    arguments += ["--peer-dir", str(tmp_path / "runs"), "--json", str(tmp_path / "rows.json")]
    environment = {**os.environ, "WANDB_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, BENCHMARK, *arguments], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=1500
    )
    assert result.returncode == 0, result.stderr[-2000:]
    cases = {row["case"]: row for row in json.loads((tmp_path / "rows.json").read_text())}
    assert {"ours seed 0", "sb3 seed 0", "ours IQM", "sb3 IQM", "ours wall", "sb3 wall"} <= set(cases)
    report = json.loads((tmp_path / "runs" / "mujoco_peers.json").read_text())
    assert [run["side"] for run in report["runs"]] == ["ours", "sb3"]
    assert [run["evaluations"][-1]["steps"] for run in report["runs"]] == [1024, 1024]
    assert "| Stable-Baselines3 | 0 |" in result.stdout
