"""Two training jobs at once on one switch (the compiled program in the software switch, in-process):
each has its own job id, slots, epoch, multicast group and workers, and each job's parameters after N
steps are bit-identical to the same job trained alone on a switch that serves only it. The per-job event
counter (thc_job_events) tells the two apart."""

import threading

import pytest
import torch

import contract
from emulator.switch import SoftwareSwitch
from harness.ddp_cluster import jobs_aggregators, thc_spec, train_ddp
from harness.sim import SERVICE, SimJob, program_engine
from tests.support import paths
from thc.config import THCConfig

pytestmark = pytest.mark.skipif(not paths.THC_JSON.exists(), reason="p4/build/thc.json not built")

STEPS = 6
CONFIG = THCConfig()


def jobs() -> tuple[SimJob, SimJob]:
    first = SimJob.plan(thc_spec(CONFIG, 3, 2, window=64, slots=64), [0, 1], slot_base=0, epoch=11)
    second = SimJob.plan(thc_spec(CONFIG, 4, 2, window=64, slots=64), [2, 3], slot_base=64, epoch=12)
    return first, second


def switch_serving(*served: SimJob) -> SoftwareSwitch:
    sw = SoftwareSwitch.from_json(str(paths.THC_JSON))
    for i, job in enumerate(served):
        program_engine(sw, job, SERVICE if i == 0 else None)  # each job with its own lookup table
    return sw


def job_events(sw: SoftwareSwitch, job_id: int) -> dict[str, int]:
    cells = {name: sw.counter_read(contract.THC_JOB_EVENTS, contract.job_event_cell(job_id, name))[0]
             for name in contract.EVENTS}  # fmt: skip
    return {name: packets for name, packets in cells.items() if packets}


def train_job(job: SimJob, aggregators, seed: int) -> list[dict]:
    return train_ddp("mlp-digits", "thc", STEPS, n=2, config=CONFIG, aggregators=aggregators, seed=seed)


def test_two_concurrent_jobs_train_exactly_as_each_alone():
    first, second = jobs()
    seeds = {first.job_id: 0, second.job_id: 5}  # two different models (initialisation and batch order)
    shared = switch_serving(first, second)
    aggregators = jobs_aggregators(shared, [first, second])
    together: dict[int, list[dict]] = {}
    errors = []

    def run(job):
        try:
            together[job.job_id] = train_job(job, aggregators[job.job_id], seeds[job.job_id])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc)[:800])

    threads = [threading.Thread(target=run, args=(job,), daemon=True) for job in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors and len(together) == 2, errors
    for job in (first, second):
        alone_switch = switch_serving(job)
        alone = train_job(job, jobs_aggregators(alone_switch, [job])[job.job_id], seeds[job.job_id])
        for rank in range(2):
            assert torch.equal(together[job.job_id][rank]["params"], alone[rank]["params"]), (job.job_id, rank)
        # the same contributions reached the job's slots either way (retransmissions depend on timing)
        counted = ("CONSUMED", "COMPLETED")
        assert [job_events(shared, job.job_id).get(e) for e in counted] == [
            job_events(alone_switch, job.job_id).get(e) for e in counted
        ]
    assert not torch.equal(together[first.job_id][0]["params"], together[second.job_id][0]["params"])
    events = job_events(shared, first.job_id)
    retransmission = {"RETX_ANSWERED", "DROP_DUPLICATE", "QUERY_ANSWERED"}  # as timing has it under load
    assert events["COMPLETED"] > 0 and set(events) <= {"CONSUMED", "COMPLETED"} | retransmission
