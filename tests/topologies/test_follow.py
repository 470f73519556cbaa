"""follow() reads a worker's last lines before it reports the worker's failure: a worker can exit before
the loop has read what it wrote last (its error record and traceback), and the runner's one-line error
must still say why (it used to say only "exited with code 3")."""

import subprocess
import sys

import pytest

from topologies.workers import PROGRESS_PREFIX, Worker, WorkerFailed, follow

# Fills its pipe past one read of follow()'s (64 KiB), then writes its error record and exits with the
# switch-timeout status; the enlarged pipe lets it exit before anything is read.
EXITS_EARLY = f"""
import fcntl, json, sys
fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)
sys.stdout.write("filler line of a long log\\n" * 8000)
print({PROGRESS_PREFIX!r} + json.dumps({{"event": "error", "rank": 0, "mode": "thc",
      "message": "no answer from the switch at 10.0.0.254 for 3 s"}}), flush=True)
sys.exit(3)
"""


def test_a_worker_that_exits_before_its_last_lines_are_read_is_reported_with_them(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", EXITS_EARLY], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.wait() == 3  # gone, its last 200 KB still in the pipe
    log_path = tmp_path / "h1.log"
    worker = Worker("h1", 0, process, log_path, tmp_path / "h1.json", open(log_path, "wb"))
    with pytest.raises(WorkerFailed, match="no answer from the switch at 10.0.0.254 for 3 s"):
        follow([worker], lambda w, e: None, stall_timeout=30, start_timeout=30)
    assert log_path.read_text().endswith('for 3 s"}\n')  # the log has the worker's last line too
