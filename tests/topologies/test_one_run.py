"""thc-run's machine lock (topologies/one_run.py): a second holder waits for the first, saying whose run it
waits for, and gets the lock when that process ends however it ends."""

import os
import subprocess
import sys
import threading

from topologies import one_run

HOLDER = """
import sys
from pathlib import Path
from topologies import one_run
lock = one_run.hold(print, Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


def test_a_second_run_waits_for_the_first_and_names_it(tmp_path):
    path = tmp_path / "thc-run.lock"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout.readline().strip() == "held"
        said, waiting, got = [], threading.Event(), []

        def say(line):
            said.append(line)
            waiting.set()

        second = threading.Thread(target=lambda: got.append(one_run.hold(say, path)))
        second.start()
        assert waiting.wait(60), "the second holder neither took the lock nor said it waits"  # (a hang guard)
        assert not got
        assert f"pid {first.pid}" in said[0]
        first.stdin.close()  # the first run ends: its lock goes with it
        second.join(60)
        assert got and path.read_text().strip() == str(os.getpid())
        got[0].close()
    finally:
        first.kill()
        first.wait()


def test_an_unheld_lock_is_taken_at_once_without_a_word(tmp_path):
    said = []
    lock = one_run.hold(said.append, tmp_path / "thc-run.lock")
    lock.close()
    assert said == []
