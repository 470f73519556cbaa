"""The timers follow the measured round trip (issue 31): a switch whose answers come later and later, then
sooner again, behind a slow link that queues each window's results one behind the other. On the timed
loopback wire and the virtual clock: every assertion is on counters and virtual times."""

from types import SimpleNamespace

import numpy as np

from host_agent import wire
from host_agent.timers import Smoothed, Timers
from tests.host_agent.test_protocol import K
from tests.host_agent.test_retransmission import KINDS, counts, exact_sum, timed_cluster

WINDOW = 16
RESULT_RATE = 8.7e6  # bit/s to each worker: a result (1,086 bytes) a millisecond, a window's results 16 ms
LEVELS = [0.0005 * 1.5**k for k in range(8)]  # one-way delay of the answers, 0.5 .. 8.5 ms
OPS_PER_LEVEL = 4


class Pausing:
    """Wraps an engine: the switch stops for `pause` s when worker 3's request for `slot` reaches it (a
    software switch descheduled in the middle of every window; worker 3's requests complete the slots)."""

    def __init__(self, engine, slot: int, pause: float):
        self.engine, self.slot, self.pause = engine, slot, pause
        self.wire = None

    def process(self, port, frame):
        p = wire.parse_frame(frame)
        if self.pause and p.worker_id == 3 and p.slot == self.slot and p.kind == wire.KIND_REQUEST:
            self.wire.hold_switch(self.pause)
        return self.engine.process(port, frame)

    def __getattr__(self, name):
        return getattr(self.engine, name)


class PausingOnce(Pausing):
    """Pausing, but once per round: copies of worker 3's request (a timeout's) do not stop it again."""

    def __init__(self, engine, slot: int, pause: float):
        super().__init__(engine, slot, pause)
        self.rounds = set()

    def process(self, port, frame):
        p = wire.parse_frame(frame)
        if p.worker_id == 3 and p.slot == self.slot and p.kind == wire.KIND_REQUEST and p.round not in self.rounds:
            self.rounds.add(p.round)
            self.wire.hold_switch(self.pause)
        return self.engine.process(port, frame)


def slow_cluster(new_engine, pause=0.0, pausing_class=Pausing, **options):
    """Workers whose results come at RESULT_RATE, from a switch that stops for `pause` s in every window."""
    pausing = []

    def engine(job):
        pausing.append(pausing_class(new_engine(job), WINDOW // 2, pause))
        return pausing[0]

    workers, engine, recorder, lw, clock = timed_cluster(engine, window=WINDOW, **options)
    lw.rate_down = RESULT_RATE
    pausing[0].wire = lw
    return workers, engine, recorder, lw, clock


def round_trips(op) -> np.ndarray:
    return op.answered_at - op.first_sent


def test_the_timers_follow_answers_that_come_later_then_sooner(new_engine):
    """The delay grows ×1.5 every four operations from 0.5 to 8.5 ms and comes back. Each window's results
    queue behind each other for 16 ms, far longer than the path's round trip, and in the middle of every
    window the switch stops for 12 ms, longer than the results queued ahead: the worker hears nothing for
    several milliseconds with half its window in flight. Those results are late, not lost: no timer, probe
    or fast retransmission at all. Stated bounds, at the end of each level: the RTO covers the level's
    longest round trip but is at most twice it, and srtt lies within the level's round trips (it follows
    the delay up and down, queue included)."""
    rng = np.random.default_rng(0)
    workers, _, _, lw, _ = slow_cluster(new_engine, pause=0.012)
    for delay in LEVELS + LEVELS[-2::-1]:
        lw.delay_down = delay
        for _ in range(OPS_PER_LEVEL):
            rtt = round_trips(exact_sum(workers, rng, K * WINDOW)[0])
        for w in workers:
            assert counts(w, *KINDS) == (0, 0, 0)
            stats = w.stats()
            assert rtt.max() < stats["rto"] < 2 * rtt.max(), (delay, stats["rto"], rtt.max())
            assert rtt.min() < stats["srtt"] < rtt.max(), (delay, stats["srtt"])


def test_a_loss_behind_a_long_delay_is_recovered_within_a_few_round_trips(new_engine):
    """At the longest delay (a round trip of 11 ms, 26 ms for the last of a window's results), worker 1's
    request in the middle of a window and its last request are lost once each, and worker 2 loses a result:
    the operation takes at most three round trips (srtt) longer than the same operation without loss."""
    rng = np.random.default_rng(1)
    durations = []
    for drop in (False, True):
        workers, _, _, lw, clock = slow_cluster(
            new_engine,
            drop_up={(1, 5, 6): 1, (1, 15, 6): 1} if drop else None,
            drop_down={(3, 9, 6): 1} if drop else None,  # port 3: worker 2
        )
        lw.delay_down = LEVELS[-1]
        for _ in range(6):  # rounds 0..5: the estimates settle at this delay
            exact_sum(workers, rng, K * WINDOW)
        start = clock()
        exact_sum(workers, rng, K * WINDOW)  # round 6: the losses
        durations.append(clock() - start)
        srtt = workers[1].stats()["srtt"]
    assert durations[1] - durations[0] <= 3 * srtt, (durations, srtt)
    fast = [counts(w, *KINDS)[1] for w in workers]
    assert fast[1] >= 1 and fast[2] >= 1  # the middle request and the lost result: fast retransmission
    assert sum(counts(w, *KINDS)[2] for w in workers) >= 1  # the last request: the tail probe


def test_many_samples_of_one_window_weigh_as_one():
    """RFC 7323 §4.2: a window's results, each a sample with the gains divided by the window, move the
    estimate as one sample of their mean would (to first order), and the deviation within a burst does not
    collapse rttvar the way per-result samples with full gains would."""
    one, many = Smoothed(1.0, 0.001, 10.0), Smoothed(1.0, 0.001, 10.0)
    one.sample(0.010)
    many.sample(0.010)
    one.sample(0.020)
    many.samples([0.020] * 16, per_window=16)
    assert abs(many.mean - one.mean) < 0.0005 and abs(many.var - one.var) < 0.0005
    full = Smoothed(1.0, 0.001, 10.0)
    full.sample(0.010)
    for _ in range(3):
        full.samples([0.010] * 16)  # a steady burst: rttvar falls to nothing with the full gains
    scaled = Smoothed(1.0, 0.001, 10.0)
    scaled.sample(0.010)
    for _ in range(3):
        scaled.samples([0.010] * 16, per_window=16)
    assert full.var < 0.0001 < scaled.var


def test_a_retransmission_is_lost_only_once_a_request_sent_after_it_came_back():
    """A retransmission's own timer: past its RTO, results of requests sent before it (queued ahead of it on
    the worker's slow uplink) do not make it lost, and it is looked at again; a result of one sent after it
    does (RACK's rule)."""
    timers = Timers(
        timeout=0.01, min_timeout=0.002, max_timeout=1.0, backoff=2.0, deadline=30.0, tail=3, adaptive=False
    )
    # request 0 was sent again as transmission 10; request 1 was first sent as 12
    op = SimpleNamespace(attempts=np.array([2, 1]), done=np.zeros(2, bool), seq=np.array([10, 12]))
    timers.resent(op, np.array([0]), now=0.0)
    timers.results_of(9)  # what was queued ahead of it keeps coming
    timers.answered(0.4, np.zeros(0), per_window=1, in_flight=2, tail=False)
    assert timers.lost_resends(now=0.5) == []  # late, not lost: looked at again a probe timeout later
    assert timers.next_due() is not None and timers.next_due() <= 0.5 + timers.pto
    timers.results_of(12)  # request 2, sent after both, came back
    ((lost_op, lost),) = timers.lost_resends(now=1.0)
    assert lost_op is op and lost.tolist() == [0]


def test_max_timeout_bounds_the_backoff_never_the_measured_round_trip():
    """Behind a slow switch (BMv2) a window's round trips vary by more than a LAN's max_timeout: the RTO
    follows srtt + 4·rttvar above it, and backs off from there without shrinking; on a fast path with loss
    the backoff still stops at max_timeout (issue 24's figures)."""
    slow = Timers(timeout=0.05, min_timeout=0.002, max_timeout=0.25, backoff=2.0, deadline=30.0, tail=3, adaptive=True)
    for rtts in ([0.1] * 8, [0.5] * 8, [0.1] * 8, [0.6] * 8):  # a queue of 0.1 .. 0.6 s in front of results
        slow.answered(0.0, np.array(rtts), per_window=8, in_flight=8, tail=False)
    estimate = slow.rtt.mean + 4 * slow.rtt.var
    assert slow.rto == estimate > 0.25 + 0.2
    slow.back_off()
    assert slow.rto == estimate  # the backoff's ceiling is the estimate: the RTO never shrinks on a timeout
    fast = Timers(timeout=0.05, min_timeout=0.002, max_timeout=0.25, backoff=2.0, deadline=30.0, tail=3, adaptive=True)
    fast.answered(0.0, np.array([0.001] * 8), per_window=8, in_flight=8, tail=False)
    for _ in range(10):
        fast.back_off()
    assert fast.rto == 0.25


def test_a_stall_longer_than_the_rto_costs_one_copy_and_no_window(new_engine):
    """The switch stops for 0.3 s in the middle of every window (far longer than the RTO its 16 ms queue
    taught the workers) and then answers everything it had: the timeouts fire, but the first result of a
    request sent once shows the rest was queued, not lost (F-RTO's test, RFC 5682). Each expiry resends
    the lowest request only: 4 in the first stall (the RTO doubling from ~20 ms), at most one in each later
    one (the round trips of the stall taught the RTO), no cut, and the window stays whole. Before, every
    stall sent the half window still in flight again (22 copies per worker in the first)."""
    rng = np.random.default_rng(2)
    workers, _, _, _, _ = slow_cluster(new_engine, pause=0.3, pausing_class=PausingOnce)
    stalls = 3
    for _ in range(stalls):
        exact_sum(workers, rng, K * WINDOW)
    for w in workers:
        stats = w.stats()
        timer, fast, probe = counts(w, *KINDS)
        assert timer <= 4 + (stalls - 1) and fast == 0 and probe == 0, (timer, fast, probe)
        assert stats["spurious_timeouts"] >= 1 and stats["window_cuts"] == 0 and stats["window_limit"] == WINDOW
