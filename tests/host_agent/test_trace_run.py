"""A short trace of jobs that come and go on one software switch (harness/trace_run.py), under each policy:
every step's sums equal the reference, every job completes, and each policy does what it says: static
partitions admit a job only into free slots (the others wait), the pool admits every job at once and sends
what does not fit to the fallback server, no switch sends everything there. Cells are all free at the end."""

import pytest

from harness.trace_run import Setup, TraceRunner
from tests.support import paths
from topologies.job_trace import TraceJob

pytestmark = pytest.mark.skipif(not paths.THC_JSON.exists(), reason="p4/build/thc.json not built")

TRACE = [TraceJob(f"j{i}", 0.1 * i, "mlp-digits", 3, "thc", steps=3, compute=0.2) for i in range(3)]
SETUP = Setup(budget=8, window=8, requests=8)  # statically one job at a time; a pool of 16 cells


def run(policy):
    return TraceRunner(TRACE, policy, SETUP, seed=3).run()


def test_static_partitions_run_one_job_at_a_time_and_the_rest_wait():
    r = run("static")
    assert r.wrong_sums == 0 and r.fallbacks == 0
    assert all(run.steps_done == 3 for run in r.runs)
    spans = sorted((run.admitted, run.finished) for run in r.runs)
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert r.runs[1].admitted > r.runs[1].trace.start  # it waited
    assert max(c for _, c in r.occupancy) <= r.cells and r.occupancy[-1][1] == 0


def test_the_pool_admits_every_job_at_once_and_falls_back_exactly():
    # all three start together, so their steps overlap: three jobs' rings in 16 cells, some uses find their
    # cell taken (apart, a job's cells go back while it computes and the others' steps find them free)
    together = [TraceJob(j.name, 0.0, j.model, j.workers, j.mode, j.steps, j.compute) for j in TRACE]
    r = TraceRunner(together, "pool", SETUP, seed=3).run()
    assert r.wrong_sums == 0
    assert all(run.admitted == run.trace.start and run.steps_done == 3 for run in r.runs)
    assert 0 < r.fallbacks < r.uses
    assert max(c for _, c in r.occupancy) <= r.cells and r.occupancy[-1][1] == 0


def test_no_switch_sends_every_use_to_the_parameter_server():
    r = run("none")
    assert r.wrong_sums == 0 and r.fallbacks == r.uses == 3 * 3 * SETUP.requests
    assert all(run.admitted == run.trace.start for run in r.runs)


def test_an_unknown_policy_or_an_odd_budget_is_refused():
    with pytest.raises(ValueError, match="policy"):
        TraceRunner(TRACE, "lottery", SETUP)
    with pytest.raises(ValueError, match="power of two"):
        TraceRunner(TRACE, "pool", Setup(budget=12))


class Echo:
    """An engine that sends each frame back where it came from."""

    def process(self, port, frame):
        return [(port, frame)]


def test_the_fallback_servers_link_delays_its_results_but_not_the_switchs():
    from harness.fallback_server import SERVER, SwitchAndServer
    from harness.loopback import LoopbackWire
    from host_agent import wire
    from host_agent.clock import VirtualClock

    clock = VirtualClock()
    engine = SwitchAndServer(Echo(), Echo(), SERVER, rate=1e6)
    lw = LoopbackWire(engine, clock=clock, delay_up=1e-6)
    engine.wire = lw
    port = lw.attach(1)
    frame = bytearray(1000)
    frame[wire.ETH_LEN + 16 : wire.ETH_LEN + 20] = wire.ip_bytes(SERVER.ip)
    for _ in range(2):
        port.send(bytes(frame))  # to the server: 2000 bytes on its link each, in turn
    port.send(bytes(1000))  # to the switch, after them
    arrivals = []
    while (due := lw.next_event()) is not None:
        clock.advance_to(due)
        arrivals += [(clock(), len(f)) for f in port.recv(0.0)]
    switch_first, *server = sorted(arrivals)
    assert switch_first[0] < 1e-3  # the switch's answer did not wait for the server
    assert [round(t, 6) for t, _ in server] == [round(1e-6 + 0.016, 6), round(1e-6 + 0.032, 6)]
    assert engine.server_frames == 2


def test_a_job_waits_for_worker_ids_when_the_jobs_running_hold_them():
    big = [TraceJob(f"big{i}", 0.0, "mlp-digits", 20, "thc", steps=1, compute=0.1) for i in range(2)]
    r = TraceRunner(big, "pool", SETUP, seed=3).run()
    first, second = r.runs
    assert r.wrong_sums == 0 and first.admitted == 0.0
    assert second.admitted >= first.finished  # 40 workers: the 32 worker ids do not hold both at once
