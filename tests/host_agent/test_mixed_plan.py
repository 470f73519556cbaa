"""A mixed per-bucket plan (ddp.mixed) trains, and each bucket goes where the plan says: 4 worker threads, each
with its own copy of a 3-bucket MLP, a SwitchAggregator on the loopback wire to the switch (THC and FIX32
buckets) and a gloo process group on a shared in-process store (the gloo bucket). The switch's COMPLETED
events must be exactly the slots the cost model counts for the switch buckets, so the gloo bucket sent it
nothing; the hook state's counters must show every bucket on its planned path."""

import time

import torch
import torch.distributed as dist
from torch import nn

import contract
from ddp import mixed
from harness.ddp_cluster import in_threads, thc_spec
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob, attach_workers
from host_agent import train, workloads
from host_agent.aggregator import SwitchAggregator
from planner import models_zoo
from planner.timeline import INACost
from tests.support.grad_bucket import GradBucket as Bucket
from thc.config import THCConfig

N = 4
STEPS = 20
PLAN = {0: "gloo", 1: "fix32", 2: "thc"}  # bucket 0: output layer (330), 1: 1,056, 2: input layer (2,080)
BUCKET_BYTES = 1024


def make_model():
    return workloads.make_mlp(32, 2, seed=0)  # 64-32-32-10


def completed(engine) -> int:
    if isinstance(engine, FakeSwitch):
        return engine.event_counts()["COMPLETED"]
    return engine.counter_read(contract.THC_EVENTS, contract.EVENT_INDEX["COMPLETED"])[0]


def test_a_mixed_plan_trains_and_each_bucket_takes_its_path(new_engine, one_torch_thread):
    config = THCConfig()
    job = SimJob.plan(thc_spec(config, 4, N, window=32, slots=32))
    engine = new_engine(job)
    _, protocols = attach_workers(engine, job, clock=time.monotonic, timeout=0.005, max_timeout=0.05, deadline=60.0)
    store = dist.HashStore()
    data = train.load_digits_split()
    x, y = data.x_train, data.y_train
    before = train.evaluate(make_model(), data.x_test, data.y_test)[0]
    models = [make_model() for _ in range(N)]
    assignment = models_zoo.ddp_buckets(models[0], BUCKET_BYTES, BUCKET_BYTES)
    assert [sum(dict(models[0].named_parameters())[p].numel() for p in b) for b in assignment] == [330, 1056, 2080]
    states = [None] * N

    def work(w):
        pg = dist.ProcessGroupGloo(dist.PrefixStore("mixed", store), w, N)
        state = mixed.MixedHookState(
            PLAN, SwitchAggregator(protocols[w]), config, process_group=pg, worker_id=w, workers=N
        )
        states[w] = state
        model = models[w]
        params = dict(model.named_parameters())
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(STEPS):
            rows = slice((step * N + w) * 16, (step * N + w + 1) * 16)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            futures = []
            for i, names in enumerate(assignment):
                flat = torch.cat([params[n].grad.reshape(-1) for n in names])
                futures.append((names, mixed.mixed_hook(state, Bucket(flat, i, i == len(assignment) - 1))))
            for names, fut in futures:
                avg, start = fut.wait(), 0
                for n in names:
                    g = params[n].grad
                    g.copy_(avg[start : start + g.numel()].view_as(g))
                    start += g.numel()
            opt.step()

    in_threads(N, work, timeout=300)

    for w in range(1, N):  # every path gave every worker the same average
        for a, b in zip(models[0].parameters(), models[w].parameters()):
            assert torch.equal(a, b)
    after = train.evaluate(models[0], data.x_test, data.y_test)[0]
    assert after < 0.95 * before, (before, after)  # 20 steps of a 3-layer MLP: 2.31 -> 2.16

    for state in states:
        assert state.bucket_modes == PLAN
        assert state.iteration == STEPS and state.thc.iteration == STEPS and state.fix32.iteration == STEPS
        for index, mode in PLAN.items():
            assert state.counts[mode]["calls"] == STEPS
            assert state.counts[mode]["coordinates"] == STEPS * [330, 1056, 2080][index]
        assert state.counts["fp16"]["calls"] == 0

    framing = dict(coords_per_packet=job.spec.coords_per_request, fix32_coords_per_packet=job.spec.fix32_per_request)
    thc_slots = sum(INACost(1e9, N, 1e9, 0.0, op="thc", chunk=2048, **framing).packets(2080))
    fix_slots = sum(INACost(1e9, N, 1e9, 0.0, op="fix32", **framing).packets(1056))
    assert completed(engine) == STEPS * (thc_slots + fix_slots)
