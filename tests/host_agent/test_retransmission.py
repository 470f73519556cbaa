"""Loss recovery at the speed of the round trip, on a timed loopback wire and the virtual clock.

The wire has latency each way, a switch that takes a fixed time per frame (so results to one port are at
least that far apart), and optionally jitter (reordering) and duplication. Nothing here reads the wall
clock: assertions are on counters and virtual-clock times."""

import numpy as np
import pytest

from harness.loopback import LoopbackWire
from harness.sim import attach_workers, worker_port
from host_agent import wire
from host_agent.clock import VirtualClock
from host_agent.protocol import drive
from tests.host_agent.test_protocol import F, K, event_counts, expected_sums, job_of, random_indices

DELAY = 0.0005  # one way: a round trip of ~1 ms plus the switch's queue, like the emulated star
SERVICE = 20e-6  # the switch's time per frame


class TimedRecorder:
    """Wraps an engine; records (time, worker, slot, round) of every request in `arrivals` (and of every QUERY
    in `queries`), and drops the requests and the results (or STATUS answers) named in `drop_up` {(worker,
    slot, round): times} / `drop_down` {(port, slot, round): times}."""

    def __init__(self, engine, clock, drop_up=None, drop_down=None):
        self.engine, self.clock = engine, clock
        self.drop_up, self.drop_down = dict(drop_up or {}), dict(drop_down or {})
        self.arrivals, self.queries = [], []

    def process(self, port, frame):
        p = wire.parse_frame(frame)
        key = (p.worker_id, p.slot, p.round)
        if p.kind == wire.KIND_QUERY:
            self.queries.append((self.clock(),) + key)
        else:
            self.arrivals.append((self.clock(),) + key)
        if p.kind != wire.KIND_QUERY and self.drop_up.get(key):
            self.drop_up[key] -= 1
            return []
        out = []
        for out_port, out_frame in self.engine.process(port, frame):
            r = wire.parse_frame(bytes(out_frame))
            down = (out_port, r.slot, r.round)
            if self.drop_down.get(down):
                self.drop_down[down] -= 1
                continue
            out.append((out_port, out_frame))
        return out

    def sends(self, worker, slot, rnd) -> list[float]:
        """When `worker`'s request for (slot, rnd) reached the switch, each time it did."""
        return [t for t, w, s, r in self.arrivals if (w, s, r) == (worker, slot, rnd)]

    def asked(self, slot, rnd) -> list[tuple[float, int]]:
        """(time, worker) of every QUERY about (slot, rnd)."""
        return [(t, w) for t, w, s, r in self.queries if (s, r) == (slot, rnd)]

    def __getattr__(self, name):
        return getattr(self.engine, name)


class Tap:
    """Wraps a worker's transport: the order in which requests were first sent and results first came."""

    def __init__(self, transport):
        self.transport = transport
        self.first_sent, self.first_result = {}, []

    def send(self, frame):
        p = wire.parse_frame(frame)
        self.first_sent.setdefault((p.slot, p.round), len(self.first_sent))
        self.transport.send(frame)

    def recv(self, timeout):
        frames = self.transport.recv(timeout)
        seen = set(self.first_result)
        for frame in frames:
            p = wire.parse_frame(frame)
            if (p.slot, p.round) not in seen:
                seen.add((p.slot, p.round))
                self.first_result.append((p.slot, p.round))
        return frames

    def next_event(self):
        return self.transport.next_event()

    def describe(self):
        return self.transport.describe()

    def overtakers(self) -> list[int]:
        """Per result: how many results of requests first sent after it came back before it."""
        order = [self.first_sent[key] for key in self.first_result]
        return [sum(later > mine for later in order[:k]) for k, mine in enumerate(order)]


def timed_cluster(
    new_engine,
    n=4,
    window=8,
    *,
    drop_up=None,
    drop_down=None,
    seed=1,
    delay=DELAY,
    service_time=SERVICE,
    link=None,
    **options,
):
    """n workers on a timed loopback wire (virtual clock) to the engine behind a TimedRecorder; `link`: the
    wire's faults (LoopbackWire's loss_up, jitter_down, duplicate_up, ...); `options`: WorkerProtocol's."""
    job = job_of(n, window)
    engine = new_engine(job)
    clock = VirtualClock()
    recorder = TimedRecorder(engine, clock, drop_up, drop_down)
    lw = LoopbackWire(
        recorder, seed=seed, clock=clock, delay_up=delay, delay_down=delay, service_time=service_time, **(link or {})
    )
    lw, workers = attach_workers(recorder, job, clock=clock, lw=lw, **options)
    for w in workers:
        w.transport = Tap(w.transport)
    return workers, engine, recorder, lw, clock


def exact_sum(workers, rng, length=K * 8) -> list:
    """One operation of `length` random indices on every worker, every worker's sums checked; the operations."""
    data = random_indices(rng, 4, [length])
    ops = run_sum(workers, data)
    for op in ops:
        np.testing.assert_array_equal(op.result()[0][0], expected_sums(data)[0])
    return ops


def both_ways(**faults) -> dict:
    """LoopbackWire's keyword arguments for `faults` (loss=0.05, ...) on the way up and the way down alike."""
    return {f"{name}_{way}": value for name, value in faults.items() for way in ("up", "down")}


def run_sum(workers, data):
    ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
    drive(workers)
    return ops


def counts(w, *keys):
    s = w.stats()
    return tuple(s[k] for k in keys)


KINDS = ("timer_retransmissions", "fast_retransmissions", "probe_retransmissions")


def test_a_lost_request_is_resent_after_one_round_trip_not_after_the_timer(new_engine):
    rng = np.random.default_rng(0)
    # request q = 10 (slot 2, round 1) of worker 1 is lost on its way to the switch, once
    workers, engine, recorder, _, clock = timed_cluster(new_engine, drop_up={(1, 2, 1): 1}, query_first=True)
    warm = random_indices(rng, 4, [K * 8])
    run_sum(workers, warm)  # a clean operation: the round trip is measured
    srtt, rto = workers[1].stats()["srtt"], workers[1].stats()["rto"]
    assert 2 * DELAY < srtt < 4 * DELAY
    ops = exact_sum(workers, rng)
    sends, queries = recorder.sends(1, 2, 1), recorder.asked(2, 1)
    assert len(sends) == 2 and sorted(w for _, w in queries) == [0, 1, 2, 3]
    # worker 1 asked about one round trip after the first transmission, long before its timer, and sent the
    # request again as soon as the switch's STATUS said its contribution was missing
    query = next(t for t, w in queries if w == 1)
    assert query - sends[0] < 2 * srtt < rto and sends[1] - query < 2 * srtt
    assert ops[1].finished - ops[1].started < rto
    # every worker saw the hole and asked once (fast retransmission); only worker 1 sent its request again
    for w in workers:
        assert counts(w, *KINDS) == (0, 1, 0)
        assert counts(w, "statuses", "status_resends") == (1, int(w.worker_id == 1))
    events = event_counts(engine)  # no other copy of the request reached the switch
    assert events["COMPLETED"] == 16 and events["QUERY_ANSWERED"] == 4
    assert events["DROP_DUPLICATE"] + events["RETX_ANSWERED"] == 0


def test_a_lost_result_is_recovered_by_its_worker_alone(new_engine):
    rng = np.random.default_rng(1)
    # the result of slot 4 round 0 never reaches worker 2, once
    workers, engine, _, _, _ = timed_cluster(new_engine, drop_down={(worker_port(2), 4, 0): 1}, query_first=True)
    exact_sum(workers, rng)
    assert [counts(w, *KINDS) for w in workers] == [(0, 0, 0), (0, 0, 0), (0, 1, 0), (0, 0, 0)]
    # its QUERY found the use complete: the request went again and was answered from the stored result
    assert counts(workers[2], "statuses", "status_resends") == (1, 1)
    events = event_counts(engine)
    assert (events["QUERY_ANSWERED"], events["RETX_ANSWERED"]) == (1, 1)


def test_a_lost_last_request_is_resent_by_the_tail_probe(new_engine):
    """The last request of an operation has no later one to reveal its loss: the tail probe (no result for
    the spacing of results) resends it, well before the round-trip timer would."""
    rng = np.random.default_rng(2)
    workers, engine, recorder, _, _ = timed_cluster(new_engine, drop_up={(0, 7, 1): 1}, query_first=True)
    run_sum(workers, random_indices(rng, 4, [K * 8]))
    rto = workers[0].stats()["rto"]
    exact_sum(workers, rng)
    sends, queries = recorder.sends(0, 7, 1), recorder.asked(7, 1)
    # every worker probed with a QUERY before its timer; only worker 0's request was missing, and only it
    # went again, as soon as the STATUS said so
    assert sorted(w for _, w in queries) == [0, 1, 2, 3]
    query = next(t for t, w in queries if w == 0)
    assert len(sends) == 2 and query - sends[0] < rto and sends[1] - query < 2 * workers[0].stats()["srtt"]
    for w in workers:
        timer, fast, probe = counts(w, *KINDS)
        assert timer == 0 and probe == 1
        assert w.stats()["status_resends"] == int(w.worker_id == 0)
        assert w.stats()["pto"] == w.min_timeout  # results 80 µs apart: the floor
    assert event_counts(engine)["COMPLETED"] == 16


def test_a_request_is_fast_retransmitted_at_most_once_per_transmission(new_engine):
    """Worker 1's request for slot 2 is lost twice: every later result is evidence against the first
    transmission, but only one fast retransmission follows; the lost fast retransmission is left to the
    timers, since no request sent after it can reveal it."""
    rng = np.random.default_rng(3)
    workers, engine, recorder, _, _ = timed_cluster(new_engine, drop_up={(1, 2, 0): 2})
    exact_sum(workers, rng)
    for w in workers:
        timer, fast, probe = counts(w, *KINDS)
        assert fast == 1 and timer + probe >= 1
    assert len(recorder.sends(1, 2, 0)) == 3


@pytest.mark.parametrize("early", [False, True])
def test_reordering_within_dupthresh_costs_no_retransmission(new_engine, early):
    """Results to one port are at least SERVICE apart; a jitter of 2.5 × SERVICE lets each be overtaken by
    at most 2 < dupthresh later ones. Stated bound: no fast retransmission at all without early
    retransmission, at most dupthresh − 1 per operation with it; no timer as long as results come within
    the RTO (min_timeout 5 ms here, against round trips of ~1.7 ms)."""
    rng = np.random.default_rng(4)
    workers, _, _, _, _ = timed_cluster(
        new_engine, link={"jitter_down": 2.5 * SERVICE}, early_retransmit=early, min_timeout=0.005
    )
    operations = 0
    for lengths in ([K * 8], [K * 40 + 5], [K * 3], [K * 17, 64]):
        data = random_indices(rng, 4, lengths)
        for op in run_sum(workers, data):
            for got, want in zip(op.result()[0], expected_sums(data)):
                np.testing.assert_array_equal(got, want)
        operations += 1
    reordered = 0
    for w in workers:
        overtakers = w.transport.overtakers()
        assert max(overtakers) <= 2  # within the bound
        reordered += sum(o > 0 for o in overtakers)
        timer, fast, probe = counts(w, *KINDS)
        assert timer == 0 and probe == 0
        assert fast <= (w.dupthresh - 1) * operations if early else fast == 0
        assert w.stats()["duplicate_results"] <= fast  # the answers to spurious retransmissions, no more
    assert reordered >= 10  # it did reorder


def test_reordering_and_duplication_without_loss_stay_within_the_bound(new_engine):
    """Jitter far above the spacing of results reorders them arbitrarily within a window, and both ways
    frames arrive twice. With the window covering each operation, a request is fast-retransmitted only if a
    result of a request sent after it overtook its own, and at most once: fast ≤ overtaken results."""
    rng = np.random.default_rng(5)
    workers, engine, _, lw, _ = timed_cluster(
        new_engine,
        window=16,
        link=both_ways(jitter=0.001, duplicate=0.1),
        min_timeout=0.005,
    )
    for lengths in ([K * 16], [K * 9 + 1], [K * 16]):
        data = random_indices(rng, 4, lengths)
        for op in run_sum(workers, data):
            np.testing.assert_array_equal(op.result()[0][0], expected_sums(data)[0])
    assert lw.duplicated_up > 0 and lw.duplicated_down > 0
    for w in workers:
        overtaken = sum(o > 0 for o in w.transport.overtakers())
        timer, fast, probe = counts(w, *KINDS)
        assert overtaken >= 5 and fast <= overtaken
        assert timer == 0 and probe == 0
        assert w.stats()["duplicate_results"] > 0
    assert event_counts(engine)["COMPLETED"] == 16 + 10 + 16  # each slot use completed once


def test_exact_under_loss_duplication_and_reordering(new_engine):
    """THC, FIX32 and NORM through a wire that loses 5 % each way, duplicates and reorders: the results are
    bit-identical to the clean run's, and every kind of recovery took part."""
    rng = np.random.default_rng(6)
    thc = random_indices(rng, 4, [K * 30 + 7, 100])
    fix = [[rng.integers(-(2**31), 2**31, size=F * 20 + 3, dtype=np.int64).astype(np.int32)] for _ in range(4)]
    norms = rng.uniform(0, 10, size=(4, 100)).astype(np.float32)  # 7 NORM requests of 16

    def run(link=None, seed=1):
        workers, engine, _, _, _ = timed_cluster(new_engine, window=16, link=link, seed=seed)
        out = []
        for start in (
            lambda w: w.start_sum_indices(thc[w.worker_id]),
            lambda w: w.start_max(norms[w.worker_id]),
            lambda w: w.start_sum_fix32(fix[w.worker_id]),
        ):
            ops = [start(w) for w in workers]
            drive(workers)
            out.append([op.result() for op in ops])
        return out, workers, engine

    clean, _, _ = run()
    lossy, workers, engine = run(both_ways(loss=0.05, duplicate=0.05, jitter=0.0005), seed=11)
    for sums_c, sums_l in zip(clean[0] + clean[2], lossy[0] + lossy[2]):
        assert sums_c[1] == sums_l[1] == 4
        for a, b in zip(sums_c[0], sums_l[0]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    for a, b in zip(clean[1], lossy[1]):
        assert a.tobytes() == b.tobytes() == norms.max(axis=0).tobytes()
    totals = np.sum([counts(w, *KINDS) for w in workers], axis=0)
    assert totals[1] > 0 and totals[0] + totals[2] > 0
    events = event_counts(engine)
    slot_uses = 31 + 1 + 7 + 21
    assert events["COMPLETED"] == slot_uses and events["CONSUMED"] == 3 * slot_uses


def test_a_lost_request_costs_its_own_retransmission_not_the_window(new_engine):
    """FIX32, 40 requests through a window of 8 (five uses of every slot): worker 1's request 19 (slot 3,
    round 2) is lost once. Each worker sends it again once, at once (fast retransmission: nobody's timer
    or probe fires); the congestion window stays the job's; the other slots go on meanwhile, so the
    operation takes at most two round trips (srtt) longer than without the loss: one for the QUERY that
    finds whose contribution is missing, one for that worker's copy. The other three send no copy."""
    rng = np.random.default_rng(7)
    values = [[rng.integers(-(2**31), 2**31, size=F * 40, dtype=np.int64).astype(np.int32)] for _ in range(4)]
    want = np.sum([v[0] for v in values], axis=0, dtype=np.int32)
    durations, srtts = [], []
    for drop in (None, {(1, 3, 2): 1}):
        workers, engine, _, _, clock = timed_cluster(new_engine, window=8, drop_up=drop, query_first=True)
        warm = [[rng.integers(0, 16, size=K * 8, dtype=np.uint8)] for _ in range(4)]
        run_sum(workers, warm)  # round 0: the round trip is measured
        start = clock()
        ops = [w.start_sum_fix32(v) for w, v in zip(workers, values)]
        drive(workers)
        durations.append(clock() - start)
        srtts.append(workers[1].stats()["srtt"])
        for op in ops:
            np.testing.assert_array_equal(op.result()[0][0], want)
    assert durations[1] - durations[0] <= 2 * srtts[1], (durations, srtts)
    for w in workers:
        assert counts(w, *KINDS) == (0, 1, 0)
        assert w.stats()["status_resends"] == int(w.worker_id == 1)
        assert w.stats()["window_limit"] == 8 and w.stats()["window_cuts"] == 0
    events = event_counts(engine)
    assert events["QUERY_ANSWERED"] == 4 and events["DROP_DUPLICATE"] + events["RETX_ANSWERED"] == 0
