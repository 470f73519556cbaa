"""The runner's side of a worker failure without Mininet: worker processes that print progress lines,
one killed with SIGKILL at a step (KillSwitch), follow() noticing its death, Failover admitting the
survivors as a new job on a stand-in control plane and writing the notice, the survivors reporting that
they moved, the old job removed, and the failure's record. In a mode without failover the same kill ends
the run with a clear error. A switch restarted at a step (SwitchRestarter): killed, started again,
reprogrammed, the job re-added with every worker under a new epoch and key, a restart notice, and the
pause in the record."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from contract.job import JobSpec
from tests.support import paths
from topologies.failover import Failover, KillSwitch
from topologies.report import restart_line
from topologies.switch_restart import SwitchRestarter
from topologies.workers import Worker, WorkerFailed, follow, load_results

# a stand-in worker: steps every 20 ms; once the notice names a new job it reports that it moved to it
WORKER = r"""
import json, os, sys, time
rank, steps, notice, echo = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[5]
moved = False
for step in range(1, steps + 1):
    time.sleep(0.02)
    if os.path.exists(echo):  # gloo's echo of a peer's death: "connection reset by peer"
        print("@thc " + json.dumps({"event": "error", "message": "Connection reset by peer"}), flush=True)
        sys.exit(1)
    if not moved and os.path.exists(notice):
        n = json.load(open(notice))
        print("@thc " + json.dumps({"event": "rejoined", "generation": n["generation"], "job_id": n["job_id"],
              "step": step - 1, "at_call": 2 * step}), flush=True)
        moved = True
    print("@thc " + json.dumps({"event": "step", "step": step, "loss": 0.0}), flush=True)
json.dump({"rank": rank, "moved": moved}, open(sys.argv[4], "w"))
"""


class Control:
    """The run's control plane (topologies/control_plane.py), as Failover uses it."""

    def __init__(self):
        self.jobs = {1: None}
        self.calls = []

    def add_job(self, spec, hosts, epoch=None):
        self.calls.append(("add", spec.job_id, spec.workers, spec.key, tuple(hosts)))
        self.jobs[spec.job_id] = SimpleNamespace(
            job_id=spec.job_id, epoch=epoch or 77, slot_base=256, n_slots=spec.slots, key=0x5EED
        )
        return self.jobs[spec.job_id]

    def last_epoch(self):
        return 0  # a switch that restarted: its program was pushed again

    def reprogram(self, name):
        self.calls.append(("reprogram", name))

    def job_ids(self):
        return set(self.jobs)

    def end_job(self, job_id):
        self.calls.append(("remove", job_id))
        self.jobs.pop(job_id, None)


def start(tmp_path, n, steps, notice, echo=None):
    workers = []
    for rank in range(n):
        host = f"h{rank + 1}"
        result = tmp_path / f"{host}.json"
        echo_path = echo if echo is not None and rank == 0 else tmp_path / "never"
        argv = [sys.executable, "-c", WORKER, str(rank), str(steps), str(notice), str(result), str(echo_path)]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        log_path = tmp_path / f"{host}.log"
        workers.append(Worker(host, rank, process, log_path, result, open(log_path, "wb")))
    return workers


def test_a_killed_worker_is_left_behind_and_the_survivors_go_on_as_a_new_job(tmp_path):
    notice = tmp_path / "membership.json"
    switch = Control()
    failover = Failover(switch, None, JobSpec(job_id=1, workers=4, key=0x01D), notice, say=lambda m: None)
    killer = KillSwitch([("h3", 5)])
    failover.killed = killer.killed
    workers = failover.workers = start(tmp_path, 4, 40, notice)
    seen = []

    def on_event(w, e):
        killer.on_event(w, e)
        failover.on_event(w, e)
        seen.append((w.host, e["event"]))

    follow(workers, on_event, stall_timeout=30, start_timeout=30, on_death=failover.on_death)

    assert [w.host for w in workers if w.lost] == ["h3"]
    assert ("h3", "lost") in seen
    assert json.loads(notice.read_text()) == {
        "generation": 1,
        "job_id": 2,
        "workers": [0, 1, 3],
        "epoch": 77,
        "failed": [2],
        "key": 0x5EED,
        "restarted": False,
    }
    # the survivors' job: the same description for three workers, and a fresh key (0 asks for one)
    assert switch.calls == [("add", 2, 3, 0, ("h1", "h2", "h4")), ("remove", 1)]
    assert failover.spec == JobSpec(job_id=2, workers=3, key=0x5EED)
    assert failover.jobs == [1, 2]
    (record,) = [f.record() for f in failover.failures]
    assert record["host"] == "h3" and record["rank"] == 2 and record["signal"] == "SIGKILL" and record["injected"]
    assert 5 <= record["step"] < 40  # it had reported step 5 (it may have printed one more before the signal)
    assert record["job_id"] == 2 and record["workers"] == 3 and record["old_job_id"] == 1
    assert 0 <= record["detected_s"] <= record["readmitted_s"] <= record["recovered_s"]
    results = load_results(workers)
    assert [r["rank"] for r in results] == [0, 1, 3] and all(r["moved"] for r in results)


# a stand-in worker with thc-worker's injected failure (worker_io.die_after): it ends itself after a step
DYING_WORKER = r"""
import json, sys, time
from host_agent.worker_io import die_after, emit
dies = die_after(int(sys.argv[2]) if sys.argv[2] != "-" else None)
for step in range(1, 200):
    time.sleep(0.005)
    record = {"event": "step", "step": step, "loss": 0.0}
    emit(record)
    dies(record)
"""


@pytest.mark.parametrize("die_at", [1, 7])
def test_an_injected_failure_lands_right_after_its_step_however_late_the_runner_reads(tmp_path, die_at):
    """The worker ends itself after step N (thc-worker --die-after-step, as thc-run --kill sets it), so the
    runner's reading late (a busy machine) cannot move the failure to a later step; KillSwitch takes the
    time from the worker's "dying" record. Its neighbour without a kill step runs to its end."""
    killer = KillSwitch([("h1", die_at)])
    workers = []
    for rank, step in enumerate((str(die_at), "-")):
        host, log_path = f"h{rank + 1}", tmp_path / f"h{rank + 1}.log"
        argv = [sys.executable, "-c", DYING_WORKER, str(rank), step]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=paths.REPO)
        workers.append(Worker(host, rank, process, log_path, tmp_path / f"{host}.json", open(log_path, "wb")))
    process = workers[0].process
    assert process.wait(30) == -9  # dead before the runner read a line: nothing of the runner's timing matters
    dying = []

    def on_event(w, e):
        killer.on_event(w, e)
        if e["event"] == "dying":
            dying.append(e)

    with pytest.raises(WorkerFailed, match=r"worker h1 \(rank 0\): killed by signal 9"):
        follow(workers, on_event, stall_timeout=30, start_timeout=30)
    assert workers[0].step == die_at and [e["step"] for e in dying] == [die_at]
    assert killer.killed == {"h1": dying[0]["t"]} and killer.kills == {}
    assert workers[1].process.wait(30) == 0  # no kill step: it ran to its end


def test_without_failover_a_killed_worker_stops_the_run_with_a_clear_error(tmp_path):
    """h1 fails as gloo's echo of h2's death, possibly before h2's death is seen: h2 is named as the cause."""
    killer = KillSwitch([("h2", 3)])
    echo = tmp_path / "echo"
    workers = start(tmp_path, 3, 400, tmp_path / "none.json", echo)

    def on_event(w, e):
        killer.on_event(w, e)
        if killer.killed:
            echo.touch()

    try:
        with pytest.raises(WorkerFailed, match=r"worker h2 \(rank 1\): killed by signal 9 \(a worker failure stops "):
            follow(workers, on_event, stall_timeout=30, start_timeout=30)
    finally:
        for w in workers:
            w.process.kill()
            w.process.wait()


class Bed:
    """The testbed as SwitchRestarter uses it: its network, control plane and counters."""

    def __init__(self, control):
        self.control = control
        self.net = SimpleNamespace(
            kill_switch=lambda name: control.calls.append(("kill", name)),
            restart_switch=lambda name, timeout: control.calls.append(("start", name)),
        )

    def keep_counters(self, name):
        self.control.calls.append(("counters", name))


def test_a_restarted_switch_gets_its_program_and_the_job_again_and_every_worker_follows(tmp_path):
    notice = tmp_path / "membership.json"
    control = Control()
    failover = Failover(control, None, JobSpec(job_id=1, workers=3, key=0x01D), notice, say=lambda m: None, epoch=4)
    restarter = SwitchRestarter([("s1", 5)], Bed(control), failover, say=lambda m: None)
    workers = failover.workers = start(tmp_path, 3, 40, notice)

    def on_event(w, e):
        restarter.on_event(w, e)
        failover.on_event(w, e)

    follow(workers, on_event, stall_timeout=30, start_timeout=30, on_death=failover.on_death)

    # killed, started, programmed, then the same job with every worker, a fresh key and a later epoch
    assert control.calls == [
        ("counters", "s1"),
        ("kill", "s1"),
        ("start", "s1"),
        ("reprogram", "s1"),
        ("add", 1, 3, 0, ("h1", "h2", "h3")),
    ]
    assert json.loads(notice.read_text()) == {
        "generation": 1,
        "job_id": 1,
        "workers": [0, 1, 2],
        "epoch": 5,
        "failed": [],
        "key": 0x5EED,
        "restarted": True,
    }
    assert failover.jobs == [1] and failover.spec == JobSpec(job_id=1, workers=3, key=0x5EED)
    (restart,) = restarter.restarts
    record = restart.record()
    assert record["kind"] == "switch_restart" and record["switch"] == "s1" and 5 <= record["step"] < 40
    assert record["job_id"] == 1 and record["epoch"] == 5 and record["workers"] == 3
    assert 0 <= record["answering_s"] <= record["reprogrammed_s"] <= record["readmitted_s"] <= record["recovered_s"]
    assert record["resumed_s"] >= record["reprogrammed_s"]  # every worker reported a later step
    assert f"a pause of {record['recovered_s']:.2f} s" in restart_line("thc", record)
    assert all(r["moved"] for r in load_results(workers))


def test_a_lost_evaluators_evaluations_open_the_record_of_the_lowest_surviving_rank(tmp_path):
    """Only the lowest surviving rank evaluates at each epoch's end: when rank 0 dies, the evaluations it
    emitted before go into the record the report reads (rank 1's), ahead of those rank 1 made after it."""

    def epoch(step, acc, **extra):
        return {"event": "epoch", "step": step, "t": step / 10, "test_acc": acc, **extra}

    def worker(host, rank, epochs=None, events=()):
        path = tmp_path / f"{host}.json"
        if epochs is not None:
            path.write_text(json.dumps({"rank": rank, "epochs": epochs}))
        return Worker(host, rank, None, tmp_path / f"{host}.log", path, events=list(events), lost=epochs is None)

    workers = [
        worker("h1", 0, events=[{"event": "step", "step": 11}, epoch(11, 0.5, rank=0), epoch(22, 0.7, rank=0)]),
        worker("h2", 1, [epoch(33, 0.8), epoch(40, 0.9)]),
        worker("h3", 2, [epoch(40, 0.9)]),  # the final evaluation: every rank makes it
    ]
    by_rank = {r["rank"]: r for r in load_results(workers)}
    assert [(e["step"], e["test_acc"]) for e in by_rank[1]["epochs"]] == [(11, 0.5), (22, 0.7), (33, 0.8), (40, 0.9)]
    assert all("rank" not in e for e in by_rank[1]["epochs"])
    assert [e["step"] for e in by_rank[2]["epochs"]] == [40]


def test_thc_run_kill_starts_the_named_worker_with_its_step_and_no_other(tmp_path):
    from controller.topology import Topology
    from host_agent.worker_cli import build_parser
    from topologies.workers import WorkerOptions, worker_command

    topo = Topology.load(paths.TOPOLOGIES / "star4.json")
    JobSpec(job_id=1, workers=4, key=0x01D).save(tmp_path / "job.json")
    options = WorkerOptions(mode="thc", steps=100, job_file=tmp_path / "job.json", kills={"h3": 50})
    for host, want in (("h3", 50), ("h1", None)):
        argv = worker_command(topo, host, options, tmp_path / f"{host}.json")
        worker_argv = argv[argv.index("--mode") :]  # thc-worker's own options, after its interpreter and path
        assert build_parser().parse_args(worker_argv).die_after_step == want
