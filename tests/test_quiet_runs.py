"""What a healthy run prints when its output is piped: one record per line, only our own
lines (no reverb 'pending items is alarmingly high' warning, no MuJoCo deprecation), and a
train.log that holds the records; and what it leaves in the temporary directory: nothing."""

from __future__ import annotations

import os
import re

import pytest

from conftest import read_summary, run_train

# A record: its fields, then how many were left out to keep the line to logger.terminal_width.
RECORD = re.compile(r"^\[(actor \d+|learner|evaluator \d+)\] [a-z0-9_]+=\S+( [a-z0-9_]+=\S+)*( \+\d+)?$")
QUIET_RUNS = {
    # The two runs that used to print reverb's pending-items warning.
    "sac_pendulum": ["experiment=sac_pendulum"],
    "dqn_acrobot": ["agent=dqn", "environment=gymnasium", "environment.name=Acrobot-v1"],
    "dqn_cartpole": ["experiment=dqn_cartpole"],
}
NOT_OURS = ("alarmingly", "settotalmass", "Traceback", "WARNING", "Warning", "[warning]", "E0000", "ERROR", "[error]")


@pytest.mark.reverb
@pytest.mark.parametrize("name", list(QUIET_RUNS))
def test_a_piped_3000_step_run_prints_one_record_per_line_and_no_library_warning(name, run_dir, tmp_path):
    temporary = tmp_path / "tmp"  # The run's own TMPDIR: reverb's default checkpointer made a directory there.
    temporary.mkdir()
    result = run_train(
        [
            *QUIET_RUNS[name],
            "max_actor_steps=3000",
            "eval_every=3000",
            "eval_episodes=2",
            "checkpoint=false",
            f"hydra.run.dir={run_dir}",
        ],
        timeout=900,
        env={"TMPDIR": str(temporary)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_summary(run_dir)["actor_steps"] == 3000
    lines = result.stdout.splitlines()
    records = [line for line in lines if line.startswith("[")]
    others = [line for line in lines if not line.startswith("[")]
    assert records and all(RECORD.match(line) for line in records), [line for line in records if not RECORD.match(line)]
    assert others == [line for line in others if line.startswith("final evaluation return ")] and len(others) == 1
    assert any(line.startswith("[evaluator 0] actor_steps=3000 ") for line in records)
    # At most logger.terminal_width's default, the run directory shown as its default (under the working directory).
    shown = [line.replace(run_dir, "outputs/2026-12-06/00-00-00") for line in lines]
    assert max(map(len, shown)) <= 120, max(shown, key=len)
    assert result.stderr == "", result.stderr[-3000:]  # Not even reverb's INFO lines.
    for needle in NOT_OURS:
        assert needle not in result.stdout + result.stderr, (needle, result.stderr[-2000:])
    # train.log holds what the terminal showed: every record and the final line, stamped with the time.
    with open(os.path.join(run_dir, "train.log")) as file:
        logged = [line.split("] ", 1)[1] for line in file.read().splitlines() if line.startswith("[")]
    assert [line for line in logged if line in records] == records
    assert logged[-1] == others[0]  # And the closing line.
    assert os.listdir(temporary) == []


def test_reverb_info_lines_are_dropped_and_everything_else_passes_even_a_crash():
    """The fd-2 filter of local runs drops exactly reverb's informational lines; a
    process that dies inside it (no clean-up) still gets its last words out."""
    import subprocess
    import sys

    script = "\n".join(
        [
            "import os",
            "from rl.library_output import reverb_info_filtered",
            "with reverb_info_filtered():",
            "    for line in (",
            "        '[reverb/cc/platform/default/server.cc:71] Started replay server on port 41901',",
            "        '[reverb/cc/client.cc:165] Sampler and server are owned by the same process (23536) so Table"
            " priority_table is accessed directly without gRPC.',",
            "        '[reverb/cc/trajectory_writer.cc:655] The number of pending items is alarmingly high',",
            "        '[reverb/cc/reverb_service_impl.cc:168] Stored checkpoint to /tmp/x/2026-11-30T07:09:11',",
            "        '[reverb/cc/platform/default/server.cc:84] Shutting down replay server',",
            "        'our own error line',",
            "    ):",
            "        os.write(2, (line + '\\n').encode())",
            "    os._exit(3)",
        ]
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "[reverb/cc/trajectory_writer.cc:655] The number of pending items is alarmingly high",
        "our own error line",
    ]
