"""Waiting for an operation's results in C (fastio.c's thc_wait_results, protocol._take_natively) against
the numpy path, over a real socket: an AF_UNIX datagram pair whose far end is a switch thread that drops,
duplicates and holds back results by a script seeded from the test's name. Both recover every loss and
end with bit-identical, exact sums and one result per request; over a real socket, which retransmission a
loss costs depends on timing, so those counters are compared only on the virtual clock
(test_batched.test_per_packet_and_batched_paths_run_identically, whose native run books through the same
path). The C it runs (thc_wait_results, thc_build_requests) is fuzzed under ASan/UBSan."""

import hashlib
import socket
import threading

import numpy as np
import pytest

from contract.job import JobSpec
from harness.fake_switch import FakeSwitch
from harness.sim import SERVICE, SimJob, worker_endpoint, worker_port
from host_agent import booking, native, receive, wire
from host_agent.protocol import WorkerProtocol
from host_agent.transport import DatagramTransport
from tests.support.native import require_c_compiler


def seed_of(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


class SocketTransport(DatagramTransport):
    """A worker's end of a datagram socket pair; `_native` and fileno() let the protocol wait in C."""

    def __init__(self, sock: socket.socket, lib):
        super().__init__(sock, "socket pair")
        self._native = lib

    def fileno(self) -> int:
        return self._sock.fileno()


class ScriptedSwitch:
    """A FakeSwitch behind the far end of the pair: result number r (in the order the switch makes them)
    is dropped, sent twice, or held back behind the next one, as the seeded script says."""

    def __init__(self, sock: socket.socket, job: SimJob, seed: int):
        self.sock, self.switch = sock, FakeSwitch()
        self.switch.add_job(job)
        self.rng = np.random.default_rng(seed)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        held = None
        self.sock.settimeout(0.01)
        while not self.stop.is_set():
            try:
                frame = self.sock.recv(4096)
            except TimeoutError:
                if held is not None:
                    self.sock.send(held)
                    held = None
                continue
            except OSError:
                return
            for _, out in self.switch.process(worker_port(0), frame):
                fate = self.rng.random()
                if fate < 0.06:
                    continue  # lost
                if fate < 0.14 and held is None:
                    held = out  # goes out behind the next result (or after 10 ms of quiet)
                    continue
                self.sock.send(out)
                if fate < 0.2:
                    self.sock.send(out)  # duplicated
                if held is not None:
                    self.sock.send(held)  # overtaken by this result
                    held = None
            # results held back go out behind the next one, or after 10 ms of quiet

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _run(use_native: bool, seed: int, window: int = 16, paced: int | None = None):
    """Four rounds of THC, NORM and FIX32 sums through the scripted switch; `paced`: the congestion window's
    pace set to that many requests in flight before every call (the paced window holds back the rest)."""
    lib = native.load()
    job = SimJob.plan(JobSpec(job_id=5, workers=1, window=window, slots=window))
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    transport = SocketTransport(mine, lib if use_native else None)
    worker = WorkerProtocol(
        transport, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0,
        timeout=0.02, min_timeout=0.002, deadline=20.0,
    )  # fmt: skip
    if not use_native:
        worker._native = None
    else:
        assert worker._wait_fd >= 0
    rng = np.random.default_rng(seed)
    table = np.asarray(job.spec.table_values(), np.int32)
    results = []
    switch = ScriptedSwitch(theirs, job, seed)
    switch.thread.start()
    sent_natively = []
    booked = worker.sender.sent_natively
    worker.sender.sent_natively = lambda op, lo, hi, now: (sent_natively.append(hi - lo), booked(op, lo, hi, now))
    whole = booking.booked_natively  # a wait that sent and answered a whole operation books it in C
    booking.booked_natively = lambda w, op, book: (sent_natively.append(op.n), whole(w, op, book))

    def pace():
        if paced is not None:
            worker.schedule.paced = float(paced)

    try:
        for _ in range(4):
            data = [rng.integers(0, 16, n, dtype=np.uint8) for n in (job.spec.coords_per_request * 20 + 5, 77)]
            pace()
            sums, count = worker.all_sum_indices(data)
            assert count == 1
            for got, want in zip(sums, data):
                assert got.tobytes() == table[want].tobytes()
            results.append([s.tobytes() for s in sums])
            norms = rng.uniform(0, 1, 12).astype(np.float32)
            assert worker.all_max(norms).tobytes() == norms.tobytes()
            values = [rng.integers(-(2**31), 2**31, job.spec.fix32_per_request * 3 + 1).astype(np.int32)]
            pace()
            fix, _ = worker.all_sum_fix32(values)
            assert fix[0].tobytes() == values[0].tobytes()
    finally:
        booking.booked_natively = whole
        switch.close()
        transport.close()
    return dict(worker.stats(), sent_natively=sum(sent_natively)), results


@pytest.mark.parametrize("case", ["a", "b"])
def test_native_wait_and_numpy_path_agree_under_loss_duplication_and_reordering(request, case):
    require_c_compiler()
    assert native.load() is not None, "the native helper did not build (THC_NATIVE=0 set, or the compiler refused it)"
    seed = seed_of(request.node.name)
    stats_c, sums_c = _run(True, seed)
    stats_py, sums_py = _run(False, seed)
    assert sums_c == sums_py
    keys = ("requests", "results", "operations")
    assert {k: stats_c[k] for k in keys} == {k: stats_py[k] for k in keys}
    assert stats_c["results"] == stats_c["requests"]
    assert stats_c["retransmissions"] > 0 and stats_py["retransmissions"] > 0  # there was loss


@pytest.mark.parametrize("case", ["a", "b"])
def test_the_native_wait_sends_what_the_paced_window_held_back_and_agrees_with_numpy(request, case):
    """A window of 64 slots paced to 5 requests in flight: the 22-request THC call sends 5 at once, and the
    native wait sends the other 17 as results come (ack-clocked, in C), under loss, duplication and
    reordering; the sums are bit-identical to the numpy path's and exact, one result per request."""
    require_c_compiler()
    assert native.load() is not None, "the native helper did not build (THC_NATIVE=0 set, or the compiler refused it)"
    seed = seed_of(request.node.name)
    stats_c, sums_c = _run(True, seed, window=64, paced=5)
    stats_py, sums_py = _run(False, seed, window=64, paced=5)
    assert sums_c == sums_py
    keys = ("requests", "results", "operations")
    assert {k: stats_c[k] for k in keys} == {k: stats_py[k] for k in keys}
    assert stats_c["results"] == stats_c["requests"]
    assert stats_c["sent_natively"] > 0 and stats_py["sent_natively"] == 0
    assert stats_c["retransmissions"] > 0 and stats_py["retransmissions"] > 0  # there was loss


def test_paced_sends_without_loss_cost_no_retransmission():
    """Results of requests the native wait sent itself come while it waits: each is taken in (its request
    counts as sent at once), not refused as stale and recovered by a retransmission."""
    require_c_compiler()
    lib = native.load()
    assert lib is not None, "a C compiler runs here, but the native helper did not build"
    job = SimJob.plan(JobSpec(job_id=5, workers=1, window=64, slots=64))
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    transport = SocketTransport(mine, lib)
    worker = WorkerProtocol(
        transport, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0,
        timeout=0.05, min_timeout=0.002, deadline=20.0,
    )  # fmt: skip
    switch = FakeSwitch()
    switch.add_job(job)
    stop = threading.Event()

    def serve():
        theirs.settimeout(0.01)
        while not stop.is_set():
            try:
                frame = theirs.recv(4096)
            except TimeoutError:
                continue
            for _, out in switch.process(worker_port(0), frame):
                theirs.send(out)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    rng = np.random.default_rng(seed_of("paced without loss"))
    table = np.asarray(job.spec.table_values(), np.int32)
    sent = []
    booked = worker.sender.sent_natively
    worker.sender.sent_natively = lambda op, lo, hi, now: (sent.append(hi - lo), booked(op, lo, hi, now))
    whole = booking.booked_natively  # a wait that sent and answered a whole operation books it in C
    booking.booked_natively = lambda w, op, book: (sent.append(op.n), whole(w, op, book))
    try:
        for _ in range(10):
            worker.schedule.paced = 5.0
            data = [rng.integers(0, 16, job.spec.coords_per_request * 40, dtype=np.uint8)]
            sums, count = worker.all_sum_indices(data)
            assert count == 1 and sums[0].tobytes() == table[data[0]].tobytes()
    finally:
        booking.booked_natively = whole
        stop.set()
        thread.join(5)
        transport.close()
        theirs.close()
    stats = worker.stats()
    assert sum(sent) > 0
    assert stats["requests"] == stats["results"] == 400 and stats["retransmissions"] == 0, stats


def test_the_native_wait_holds_between_batches_once_the_pace_is_known(monkeypatch):
    """Receive coalescing in C: results queued at once, taken in two a receive, come microseconds apart; with
    any hold allowed, every batch after the one that brings the HOLD_AFTER-th result is taken in after a
    hold (and flagged so), and the sums are exact."""
    require_c_compiler()
    lib = native.load()
    assert lib is not None, "a C compiler runs here, but the native helper did not build"
    monkeypatch.setattr(receive, "MIN_HOLD", 0.0)
    job = SimJob.plan(JobSpec(job_id=5, workers=1, window=16, slots=16))
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    transport = SocketTransport(mine, lib)
    worker = WorkerProtocol(
        transport, wire.FrameBuilder(worker_endpoint(0), SERVICE), job.spec, 0,
        timeout=1.0, min_timeout=1.0, deadline=20.0, coalesce=0.5,
    )  # fmt: skip
    worker._io._allocate(2)  # two frames a receive: the queued results come in batches of two
    data = [np.random.default_rng(seed_of("holds")).integers(0, 16, job.spec.coords_per_request * 12, np.uint8)]
    op = worker.start_sum_indices(data)
    worker.sender.send_ready()
    switch = FakeSwitch()
    switch.add_job(job)
    try:
        for _ in range(op.n):
            for _, out in switch.process(worker_port(0), theirs.recv(4096)):
                theirs.send(out)
        sums, count = worker.wait(op)
    finally:
        transport.close()
        theirs.close()
    table = np.asarray(job.spec.table_values(), np.int32)
    assert count == 1 and sums[0].tobytes() == table[data[0]].tobytes()
    wait = worker._native._wait
    held = worker._native._held[: wait.batches].tolist()
    assert wait.batches == 6 and wait.holds == 4 and held == [0, 0, 1, 1, 1, 1]


FUZZ_CHILD = r"""
import ctypes, socket, sys, time
import numpy as np
from host_agent import native, receive, wire
from harness.sim import SERVICE, worker_endpoint
from native_build import SANITIZER_FLAGS, build_shared
from tests.support import sanitizers

lib = ctypes.CDLL(str(build_shared([native.SOURCE], "host_fastio_asan", (*native.FLAGS, *SANITIZER_FLAGS))))
lib.thc_wait_results.restype = ctypes.c_long
rng = np.random.default_rng(int(sys.argv[1]))
window, n, per_packet, lane_bits = 8, 12, 1024, 8
builder = wire.FrameBuilder(SERVICE, worker_endpoint(0))
stride, batches, fuzzed, holds, booked = 2048, int(sys.argv[2]), 0, 0, 0
buf = np.zeros((64, stride), np.uint8)
lens = np.zeros(64, np.int32)
send_rows = rng.integers(0, 256, (n, 100), dtype=np.uint8)
send_ends, send_times, sent = np.zeros(4, np.int64), np.zeros(4, np.float64), 0
mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
for s in (mine, theirs):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
for b in range(batches):
    sanitizers.progress("thc_wait_results", b)
    done = (rng.random(n) < 0.3).astype(np.uint8)
    attempts = rng.integers(0, 3, n).astype(np.int64)
    sums, counts = np.zeros(n * per_packet, np.int32), np.zeros(n, np.uint8)
    st = native.Take(job_id=3, key=0x77, window=window, next_request=int(rng.integers(0, 3 * n)),
                     q0=int(rng.integers(0, n)), n=n, op=wire.OP_THC, per_packet=per_packet, n_workers=4,
                     lane_bits=lane_bits, result_bytes=per_packet, outstanding=int(rng.integers(0, n + 1)),
                     ref_count=int(rng.integers(-1, 5)), done=done.ctypes.data, attempts=attempts.ctypes.data,
                     sums=sums.ctypes.data, counts=counts.ctypes.data)
    rows = int(rng.integers(0, 65))
    for r in range(rows):
        q = int(rng.integers(0, 3 * n))
        frame = bytearray(builder.frame(wire.OP_THC, int(rng.choice([1, 2, 0, 3])), 3, 0, q % window, q // window, 0,
                                        bytes(int(rng.choice([per_packet, 0, 10, per_packet + 2]))),
                                        int(rng.integers(0, 6)), lane_bits, int(rng.choice([0x77, 1]))))
        for _ in range(int(rng.integers(0, 4))):
            frame[int(rng.integers(0, len(frame)))] = int(rng.integers(0, 256))
        size = min(len(frame), stride)
        buf[r, :size] = np.frombuffer(bytes(frame[:size]), np.uint8)
        lens[r] = int(rng.integers(0, size + 1)) if rng.random() < 0.2 else size
    w = native.Wait(until=0.0, fixed=0.0, slack=0.0, cap=0.0, low=int(rng.integers(0, n)), max_batches=4,
                    preloaded=rows)
    fd, cap_rows, whole = -1, 64, False
    if rng.random() < 0.5:  # over a socket, a few rows a receive, holding between batches (no timing asserted)
        now = time.monotonic()
        fd, cap_rows = mine.fileno(), int(rng.integers(1, 9))
        if rng.random() < 0.5:  # clean results in request order: batches go on, and holds happen
            done[:], attempts[:], st.outstanding, st.ref_count, st.next_request = 0, 1, n, -1, st.q0 + n
            rows, w.low = int(rng.integers(1, n + 1)), st.q0
            whole = rng.random() < 0.4  # the wait sends all of the operation and may book it natively
            rows = n if whole else rows
            for r in range(rows):
                q = st.q0 + r
                frame = builder.frame(wire.OP_THC, 1, 3, 0, q % window, q // window, 0, bytes(per_packet), 2,
                                      lane_bits, 0x77)
                buf[r, : len(frame)], lens[r] = np.frombuffer(frame, np.uint8), len(frame)
        for r in range(rows):
            theirs.send(buf[r, : lens[r]].tobytes())
        w.until, w.fixed, w.slack, w.cap = now + 1e-3, now + float(rng.uniform(0, 3e-3)), 1e-3, now + 3e-3
        w.coalesce, w.max_hold, w.min_hold = float(rng.choice([0.0, 0.5, 2.0])), 2e-4, float(rng.choice([0.0, 1e-5]))
        w.hold_after, w.answered = int(rng.integers(0, 6)), int(rng.integers(0, 3))
        w.first, w.last = now - float(rng.uniform(0, 1e-3)), now
        if rng.random() < 0.5:  # paced sends: the held-back rows go to the far end as results come
            w.send_base, w.send_stride = send_rows.ctypes.data, send_rows.shape[1]
            w.send_next, w.send_end = int(rng.integers(0, n + 1)), n
            w.send_cap, w.in_flight = int(rng.integers(0, n + 2)), int(rng.integers(0, n + 1))
            w.max_sends, w.send_batch_end, w.send_batch_time = 4, send_ends.ctypes.data, send_times.ctypes.data
        if whole:
            w.send_base, w.send_stride, w.send_next, w.send_end = send_rows.ctypes.data, send_rows.shape[1], 0, n
            w.send_cap, w.in_flight, w.answered = n, 0, 0
            w.max_sends, w.send_batch_end, w.send_batch_time = 4, send_ends.ctypes.data, send_times.ctypes.data
    acc_row, acc_req = np.zeros(max(64, n), np.int64), np.zeros(max(64, n), np.int64)
    ends, times, held = np.zeros(4, np.int64), np.zeros(4, np.float64), np.zeros(4, np.uint8)
    book = None
    if whole or rng.random() < 0.3:  # a whole operation's booking in C, should the wait send and answer it all
        op_times, op_ints = np.zeros((2, n)), np.zeros((5, n), np.int64)
        book = native.Book(times=op_times.ctypes.data, ints=op_ints.ctypes.data,
                           tx=int(rng.integers(0, 2**40)), firsts=int(rng.integers(0, 2**40)),
                           per_window=int(rng.integers(1, n + 1)), adaptive=int(rng.integers(0, 2)),
                           held=int(rng.integers(0, 2)), rtt_known=int(rng.integers(0, 2)),
                           gap_known=int(rng.integers(0, 2)), rtt_mean=float(rng.uniform(0, 1e-3)),
                           rtt_var=float(rng.uniform(0, 1e-3)), gap_mean=float(rng.uniform(0, 1e-3)),
                           gap_var=float(rng.uniform(0, 1e-3)))
    taken = lib.thc_wait_results(fd, ctypes.c_void_p(buf.ctypes.data), ctypes.c_long(stride), ctypes.c_long(cap_rows),
                                 ctypes.c_void_p(lens.ctypes.data), ctypes.byref(st), ctypes.byref(w),
                                 ctypes.c_void_p(acc_row.ctypes.data), ctypes.c_void_p(acc_req.ctypes.data),
                                 ctypes.c_void_p(ends.ctypes.data), ctypes.c_void_p(times.ctypes.data),
                                 ctypes.c_void_p(held.ctypes.data), None if book is None else ctypes.byref(book))
    if book is not None and book.booked:  # every request sent in this wait, answered in order
        assert w.stop == 1 and taken == n and (op_ints[0] == 1).all() and np.isfinite(op_times).all(), w.stop
        booked += 1
    if fd < 0:
        assert 0 <= taken <= min(rows, n) and w.batches == 1 and w.frames == rows
    else:
        assert 0 <= taken <= min(rows, n) and w.batches <= 4 and 0 <= w.holds <= w.batches
        assert w.stop >= 0 and (w.batches == 0 or held[0] == 0), (w.stop, w.batches, held)
        assert 0 <= w.sends <= 4 and w.send_next <= n, (w.sends, w.send_next)
        assert list(send_ends[: w.sends]) == sorted(send_ends[: w.sends]), send_ends
        holds += w.holds
        sent += w.sends
        for sock in (mine, theirs):
            while True:  # what the wait left in the socket, and what it sent
                try:
                    sock.recv(4096, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
    fuzzed += rows
assert holds, "no round held between batches: the hold went unfuzzed"
assert sent, "no round sent paced requests: the sends went unfuzzed"
assert booked, "no round booked a whole operation natively: thc_book went unfuzzed"
print("fuzzed", fuzzed)
"""


def fuzz_sanitized(child: str, seed: int, rounds: int, cache) -> None:
    """Run a fuzzing child under ASan/UBSan; it must finish, print what it fuzzed and report nothing."""
    from tests.support import sanitizers

    proc = sanitizers.run_sanitized(child, str(seed), str(rounds), cache=cache, timeout=240)
    fuzzed = [line for line in proc.stdout.splitlines() if line.startswith("fuzzed ")]
    assert fuzzed, proc.stderr[-3000:]
    sanitizers.assert_clean(proc, int(fuzzed[0].split()[1]))


def test_wait_results_fuzzed_under_address_and_undefined_behaviour_sanitizers(request, tmp_path):
    fuzz_sanitized(FUZZ_CHILD, seed_of(request.node.name), 1500, tmp_path / "cache")


BUILD_FUZZ_CHILD = r"""
import ctypes, sys
import numpy as np
from host_agent import native
from native_build import SANITIZER_FLAGS, build_shared
from tests.support import sanitizers

lib = ctypes.CDLL(str(build_shared([native.SOURCE], "host_fastio_asan", (*native.FLAGS, *SANITIZER_FLAGS))))
lib.thc_build_requests.restype = ctypes.c_long
lib.thc_build_requests.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                   ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
rng = np.random.default_rng(int(sys.argv[1]))
built = 0
for b in range(int(sys.argv[2])):
    sanitizers.progress("thc_build_requests", b)
    frame_len = int(rng.choice([0, 61, 62, 63, 126, 574, 1086, 2000]))
    carried = int(rng.choice([0, 1, 64, 512, 1024, frame_len - 62, frame_len - 61, -1]))
    n = int(rng.choice([0, 1, 2, 17, -1]))
    q0 = int(rng.choice([0, 7, 2**40, 2**63 - 2, -3]))
    window = int(rng.choice([1, 8, 1024, 65536, 0, -1]))
    valid = n >= 0 and q0 >= 0 and window > 0 and 0 <= carried <= frame_len - 62 and q0 <= 2**63 - 1 - n
    out = np.zeros(max(n, 0) * max(frame_len, 0) if valid else 1, np.uint8)  # exactly what valid frames need
    template = rng.integers(0, 256, max(frame_len, 1), dtype=np.uint8)
    payloads = rng.integers(0, 256, max(n, 0) * max(carried, 0) if valid else 1, dtype=np.uint8)
    got = lib.thc_build_requests(out.ctypes.data, frame_len, template.ctypes.data, q0, window, payloads.ctypes.data,
                                 carried, n)
    assert got == (n if valid else -1), (frame_len, carried, n, q0, window, got)
    if valid and n:
        rows = out.reshape(n, frame_len)
        assert (rows[:, 62 + carried :] == template[62 + carried :]).all()
        assert (rows[:, 62 : 62 + carried].reshape(-1) == payloads).all()
        built += n
print("fuzzed", built)
"""


def test_build_requests_fuzzed_under_address_and_undefined_behaviour_sanitizers(request, tmp_path):
    fuzz_sanitized(BUILD_FUZZ_CHILD, seed_of(request.node.name), 3000, tmp_path / "cache")
