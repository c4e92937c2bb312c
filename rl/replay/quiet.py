"""Keeps reverb's informational C++ lines off the terminal during a run.

reverb 0.14 writes a few INFO lines from C++ straight to file descriptor 2: a server
starting and stopping, a sampler reading an in-process table, its checkpointer starting.
No flag or environment variable turns them off. `reverb_info_filtered` routes fd 2
through `grep -v` for the length of a run and drops exactly those lines; everything else
(our errors, reverb's warnings, a crash's last words) passes. grep runs as its own
process, so what the run wrote before dying still reaches the terminal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from typing import Iterator

# reverb's informational lines (`[reverb/cc/<file>:<line>] <message>`), as grep -E patterns.
INFO_LINES = (
    r"^\[reverb/cc/platform/default/server\.cc:[0-9]+\] (Started replay server on port [0-9]+|Shutting down replay server)$",
    r"^\[reverb/cc/client\.cc:[0-9]+\] Sampler and server are owned by the same process \([0-9]+\) so Table .+"
    r" is accessed directly without gRPC\.$",
    r"^\[reverb/cc/platform/tfrecord_checkpointer\.cc:[0-9]+\] +(Initializing TFRecordCheckpointer in |Loading latest"
    r" checkpoint from |No checkpoint found in |Saving checkpoint to |Writing checkpoint to )",
    r"^\[reverb/cc/reverb_service_impl\.cc:[0-9]+\] Stored checkpoint to ",
)


@contextlib.contextmanager
def reverb_info_filtered(enabled: bool = True) -> Iterator[None]:
    """Within the block, lines written to fd 2 that match `INFO_LINES` are dropped.

    Nothing changes when `enabled` is False, when grep is missing, or when fd 2 cannot
    be replaced (no such descriptor)."""
    grep = shutil.which("grep")
    if not enabled or grep is None:
        yield
        return
    try:
        original = os.dup(2)
    except OSError:
        yield
        return
    arguments = [grep, "--line-buffered", "-v", "-E"]
    for pattern in INFO_LINES:
        arguments += ["-e", pattern]
    try:
        filter_process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=original, stderr=subprocess.DEVNULL)
    except OSError:
        os.close(original)
        yield
        return
    assert filter_process.stdin is not None
    sys.stderr.flush()
    os.dup2(filter_process.stdin.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(original, 2)
        os.close(original)
        # grep writes the rest and exits once every writer has closed the pipe: this
        # process now, a child started meanwhile (W&B's service) when it exits.
        filter_process.stdin.close()
        try:
            filter_process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
