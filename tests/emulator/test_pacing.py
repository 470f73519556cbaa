"""The paced switch's turns (emulator/pacing.py, thc-switch --pps) on a fake clock: no timed assertion."""

import pytest

from emulator.pacing import Pacer, service_ns
from emulator.switch_cli import parse_args


class FakeTime:
    def __init__(self):
        self.ns = 10_000_000
        self.sleeps = []

    def clock(self):
        return self.ns

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.ns += round(seconds * 1e9) + 30_000  # every sleep overshoots by 30 us


def test_frames_waiting_start_one_service_time_apart_and_oversleeping_does_not_lower_the_rate():
    t = FakeTime()
    pacer = Pacer(500_000, clock=t.clock, sleep=t.sleep)
    starts = []
    for _ in range(5):
        pacer.wait()
        starts.append(t.ns)
    # the first frame goes at once; each later one waits for its deadline, 0.5 ms after the one before,
    # counted from that deadline, so the 30 us overshoot does not accumulate
    assert t.sleeps[0] == pytest.approx(0.0005)
    assert t.sleeps[1:] == [pytest.approx(0.00047)] * 3
    assert starts[-1] - starts[0] == 4 * 500_000 + 30_000


def test_an_idle_switch_saves_up_no_credit():
    t = FakeTime()
    pacer = Pacer(1_000_000, clock=t.clock, sleep=t.sleep)
    pacer.wait()
    t.ns += 50_000_000  # idle for 50 service times
    pacer.wait()
    pacer.wait()
    assert len(t.sleeps) == 1 and t.sleeps[0] == pytest.approx(0.001)


def test_pps_is_a_service_time_and_a_bad_rate_is_refused(capsys):
    assert service_ns(None) == 0 and service_ns(2000) == 500_000
    with pytest.raises(ValueError, match="at least 1 frame a second"):
        service_ns(0.5)
    assert parse_args(["--no-p4", "--pps", "2000"]).pps == 2000
    for bad in ("0", "-5", "fast", "inf", "nan"):
        with pytest.raises(SystemExit):
            parse_args(["--no-p4", "--pps", bad])
        assert "--pps" in capsys.readouterr().err
