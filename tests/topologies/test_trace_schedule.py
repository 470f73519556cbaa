"""thc-run --trace's scheduling (topologies/trace_schedule.py), without Mininet: jobs start at their trace
time on the first free hosts, first come first served; one that finds too few hosts or a refusing switch
waits for a job to end; one that could never start is refused in one line."""

import pytest

from topologies.job_trace import TraceError, TraceJob
from topologies.trace_schedule import Schedule

HOSTS = ["h1", "h2", "h3", "h4"]


def job(name, start, workers=2):
    return TraceJob(name, start, "mlp-digits", workers, "thc", steps=3, compute=0.0)


def accept(job):
    return None


def test_jobs_start_when_due_on_the_first_free_hosts_with_ids_in_start_order():
    s = Schedule([job("late", 5.0), job("early", 0.0)], HOSTS)
    assert [(j.trace.name, j.job_id) for j in s.jobs] == [("early", 1), ("late", 2)]
    assert [j.trace.name for j in s.start_due(0.0, accept)] == ["early"]
    assert s.jobs[0].hosts == ("h1", "h2") and s.next_start(0.0) == 5.0
    assert s.start_due(4.9, accept) == []
    assert [j.hosts for j in s.start_due(5.0, accept)] == [("h3", "h4")]
    assert s.next_start(5.0) is None and not s.done


def test_a_job_without_enough_free_hosts_waits_and_no_later_job_overtakes_it():
    s = Schedule([job("a", 0.0, 3), job("b", 1.0, 2), job("c", 2.0, 1)], HOSTS)
    s.start_due(0.0, accept)
    assert s.start_due(2.0, accept) == []  # b needs 2 of the 1 free host; c, which would fit, waits behind it
    a = s.jobs[0]
    s.finish(a, 7.0)
    started = s.start_due(7.5, accept)
    assert [(j.trace.name, j.hosts) for j in started] == [("b", ("h1", "h2")), ("c", ("h3",))]
    b, c = started
    assert (b.wait_s, c.wait_s) == (6.5, 5.5)
    s.finish(b, 9.0)
    s.finish(c, 10.0)
    assert s.done and a.completion_s == 7.0 and c.completion_s == 8.0 and s.free == HOSTS


def test_a_job_the_switch_refuses_waits_for_a_running_job_to_end_and_keeps_the_reason():
    s = Schedule([job("a", 0.0), job("b", 0.0)], HOSTS)
    slots = {"free": 1}

    def place(j):
        if not slots["free"]:
            return "no free range of 512 slots"
        slots["free"] -= 1
        return None

    assert [j.trace.name for j in s.start_due(0.0, place)] == ["a"]
    b = s.jobs[1]
    assert b.hosts == () and b.refusals == ["no free range of 512 slots"] and s.free == ["h3", "h4"]
    assert s.start_due(1.0, place) == [] and b.refusals == ["no free range of 512 slots"]  # said once
    s.finish(s.jobs[0], 2.0)
    slots["free"] = 1
    assert s.start_due(2.0, place) == [b] and b.hosts == ("h1", "h2")


def test_a_job_refused_with_no_other_job_running_can_never_start():
    s = Schedule([job("big", 0.0)], HOSTS)
    with pytest.raises(TraceError, match=r"^job 'big' can never start: with no other job running, too big$"):
        s.start_due(0.0, lambda j: "too big")


def test_a_job_with_more_workers_than_the_topology_has_is_refused_before_anything_starts():
    with pytest.raises(TraceError) as exc:
        Schedule([job("a", 0.0), job("wide", 3.0, 5)], HOSTS, "jobs.json")
    assert str(exc.value).startswith("jobs.json: job 'wide' needs 5 workers but the topology has 4 worker hosts")
    assert "\n" not in str(exc.value)


def test_the_shipped_trace_is_one_thc_run_takes_two_jobs_at_once_then_a_third():
    from host_agent import workloads
    from tests.support.paths import REPO
    from topologies import job_trace, trace_run

    trace = job_trace.load(REPO / "topologies" / "trace3.json", models=workloads.names(), modes=trace_run.MODES)
    s = Schedule(trace, [f"h{i}" for i in range(1, 7)])
    assert [j.trace.name for j in s.start_due(0.0, accept)] == ["a", "b"]
    assert [j.hosts for j in s.start_due(1.0, accept)] == [("h5", "h6")]
