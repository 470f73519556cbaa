"""A worker's CPU counters (host_agent.worker_io.cpu_counters), which probe rounds save and bench_e2e reads:
besides seconds, how often the process went to sleep waiting, the wake-ups a round costs."""

import threading

from host_agent.worker_io import cpu_counters


def test_sleeps_count_the_times_the_process_waited():
    before = cpu_counters()
    for _ in range(3):
        threading.Event().wait(0.001)  # blocks in the kernel: a voluntary context switch each time
    after = cpu_counters()
    assert after["sleeps"] - before["sleeps"] >= 3
    assert set(after) == {"wall_s", "process_s", "machine_busy_s", "machine_total_s", "sleeps"}
