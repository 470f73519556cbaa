"""Workers against the software switch slowed to BMv2's pace (issue 31 item 3): the compiled program behind
thc-switch's own native port loop paced as `--pps` paces it, workers on socketpairs (no root, no BMv2).
Every worker sends a window at once, so a queue builds in front of the switch as it does in front of BMv2;
the timers and the window must take it for a queue, not for losses. Counters only, no timed assertion."""

import threading

import numpy as np

from harness.paced_switch import PacedSwitch
from tests.host_agent.test_protocol import F, K, expected_sums, job_of, random_indices
from tests.support.native import build_or_skip

PPS = 2000  # frames a second: BMv2's order of magnitude for THC frames (README, "BMv2")
WINDOW = 32
OPERATIONS = 4  # per mode, each of two windows of requests per worker


def run_threads(workers, operation) -> list:
    """operation(i, worker) on a thread per worker; the results in worker order, errors raised."""
    results, errors = [None] * len(workers), []

    def run(i, worker):
        try:
            results[i] = operation(i, worker)
        except BaseException as exc:  # re-raised below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)  # a guard against hanging the suite, not a timing assertion
    assert not any(t.is_alive() for t in threads), "a worker did not finish"
    if errors:
        raise errors[0]
    return results


def test_workers_against_a_switch_at_bmv2s_pace_sum_exactly_with_at_most_one_percent_timer_and_probe_resends():
    rng = np.random.default_rng(31)
    switch = build_or_skip(PacedSwitch, job_of(n=4, window=WINDOW), pps=PPS)
    with switch:
        workers = switch.protocols(timeout=0.05)
        for _ in range(OPERATIONS):
            data = random_indices(rng, 4, [2 * WINDOW * K])
            sums = run_threads(workers, lambda i, w: w.all_sum_indices(data[i]))
            for result, count in sums:
                np.testing.assert_array_equal(result[0], expected_sums(data)[0])
                assert count == 4
            fixed = [[rng.integers(-(2**20), 2**20, size=2 * WINDOW * F, dtype=np.int32)] for _ in range(4)]
            sums = run_threads(workers, lambda i, w: w.all_sum_fix32(fixed[i]))
            for result, _count in sums:
                np.testing.assert_array_equal(result[0], sum(f[0].astype(np.int64) for f in fixed).astype(np.int32))
    stats = [w.stats() for w in workers]
    requests = sum(s["requests"] for s in stats)
    assert requests == 4 * OPERATIONS * 2 * (2 * WINDOW)
    late = sum(s["timer_retransmissions"] + s["probe_retransmissions"] for s in stats)
    assert late <= 0.01 * requests, [(s["timer_retransmissions"], s["probe_retransmissions"]) for s in stats]
    # the switch was paced: one frame per turn of its loop, every frame it took a worker's
    loop = switch.loop_stats
    assert loop["batches"] == loop["rx"] >= requests
