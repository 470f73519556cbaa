"""Booking a whole operation in C (fastio.c thc_book, booking.booked_natively) against booking the same
wait's record in Python (Sender.sent_natively per send, booking.book_in_order): on twin workers, one
aggregating over a real socket pair through an echo switch thread, the other fed the first's record (its
sends and their times, its batches, arrival times and holds), every counter, timer, estimate, window and
per-request field ends bit-identical, operation after operation. Operation sizes, the paced window (which
makes the wait send in several goes), and holds before the wait are drawn from a
seed taken from the test's name. The C is also fuzzed under ASan/UBSan (test_native_wait's child)."""

import hashlib
import socket
import threading

import numpy as np
import pytest

from contract.job import JobSpec
from harness.fake_switch import FakeSwitch
from harness.sim import SERVICE, SimJob, worker_endpoint, worker_port
from host_agent import booking, native, wire
from host_agent.protocol import WorkerProtocol
from tests.host_agent.test_bulk_booking import Sink
from tests.host_agent.test_native_wait import SocketTransport
from tests.support.native import require_c_compiler


def seed_of(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


class Echo:
    """A FakeSwitch job of one worker behind the far end of the pair: every request is answered at once."""

    def __init__(self, sock: socket.socket, job: SimJob):
        self.sock, self.switch = sock, FakeSwitch()
        self.switch.add_job(job)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.sock.settimeout(0.01)
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            for _, out in self.switch.process(worker_port(0), frame):
                self.sock.send(out)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def state(worker: WorkerProtocol, op) -> dict:
    """What booking sets, on the worker and the operation (not what only the socket's side counts)."""
    t, s = worker.timers, worker.schedule
    counters = worker.counters.as_dict()
    for key in ("packets_received", "bytes_received"):  # the twin fed a record received nothing
        counters.pop(key)
    for key in [key for key in counters if key.endswith("_seconds")]:  # each twin's own clock at _finish
        counters.pop(key)
    return dict(
        arrays=[a.tobytes() for a in (op.done, op.answered_at, op.first_sent, op.attempts, op.seq, op.first_seq,
                                      op.firsts_before, op.evidence)],
        op=(op.answered, op.outstanding, op.first_result, op.last_result, op.min_rtt, op.in_flight_count,
            op.first_transmissions, op.sent_hi, op.in_order),
        sender=(worker.sender.tx, worker.sender.firsts),
        flags=(worker._batch, worker._held),
        counters=counters,
        rtt=(t.rtt.mean, t.rtt.var, t.rtt.timeout), gap=(t.gap.mean, t.gap.var, t.gap.timeout),
        timers=(t.retransmit_at, t.probe_at, t.deadline_at, t.newest_answered, t.backoffs, t._probe_backoff),
        window=(s.limit, s.ssthresh, s.paced, s._last_min_rtt, [o.q0 for o in s.ops], s._free, s._lost),
    )  # fmt: skip


@pytest.mark.parametrize("case", range(6))
def test_native_booking_equals_python_booking_of_the_same_record(request, case):
    require_c_compiler()
    lib = native.load()
    assert lib is not None, "a C compiler runs here, but the native helper did not build"
    rng = np.random.default_rng(seed_of(request.node.name))
    window = int(rng.choice([8, 16, 64]))
    job = SimJob.plan(JobSpec(job_id=6, workers=1, window=window, slots=window))
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    echo = Echo(theirs, job)
    builder = wire.FrameBuilder(worker_endpoint(0), SERVICE)
    kw = dict(timeout=0.5, min_timeout=0.05, deadline=20.0)
    native_worker = WorkerProtocol(SocketTransport(mine, lib), builder, job.spec, 0, **kw)
    twin = WorkerProtocol(Sink(), builder, job.spec, 0, **kw)
    records, booked = [], []
    take_until, book = native_worker._native.take_until, booking.booked_natively
    native_take = native_worker._native
    native_take.take_until = lambda *a, **k: (take_until(*a, **k), records.append(native_take.record()))[0]
    booking.booked_natively = lambda w, op, b: (booked.append(op), book(w, op, b))
    k = job.spec.coords_per_request
    try:
        for _ in range(8):
            paced = float(rng.choice([window, 2, 3, 5]))
            held = bool(rng.random() < 0.3)
            norms = rng.random() < 0.3
            if norms:
                values = rng.uniform(0, 1, int(rng.integers(1, 40))).astype(np.float32)
            else:
                n = int(rng.integers(1, window + 1))
                data = [rng.integers(0, 16, n * k - int(rng.integers(0, k)), dtype=np.uint8)]
            ops = []
            for w in (native_worker, twin):
                w.schedule.paced, w._held = paced, held
                ops.append(w.start_max(values) if norms else w.start_sum_indices(data))
            records.clear()
            result = native_worker.wait(ops[0])
            assert booked and booked[-1] is ops[0], "the wait did not book the operation natively"
            assert len(records) == 1
            acc, ends, times, held_after, stop, sends = records[0]
            assert stop == 1 and sends is not None
            lo = 0
            for hi, at in zip(*sends):  # what _take_natively books of a wait that sent
                twin.sender.sent_natively(ops[1], lo, hi, at)
                lo = hi
            twin.schedule.sent_natively(ops[1])
            ops[1].count, ops[1].counts[:], ops[1].sums[:] = ops[0].count, ops[0].counts, ops[0].sums
            booking.book_in_order(twin, ops[1], acc, ends, times, held_after)
            assert state(native_worker, ops[0]) == state(twin, ops[1])
            assert ops[1].complete
            want = twin.last_operation.result()
            if isinstance(want, tuple):
                assert [a.tobytes() for a in result[0]] == [a.tobytes() for a in want[0]] and result[1] == want[1]
            else:
                assert result.tobytes() == want.tobytes()
        assert native_worker.stats()["retransmissions"] == 0
    finally:
        booking.booked_natively = book
        echo.close()
        native_worker.transport.close()
