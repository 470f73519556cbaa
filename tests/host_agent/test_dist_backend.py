"""The switch as a torch.distributed backend (host_agent/dist_backend.py): float SUM/AVG all-reduces through
the switch (FIX32 exactly the fixed-point sum, THC n times its reference average), every other collective
through gloo, clear refusals of the all-reduces the switch cannot do, and DDP without a hook training as the
DDP hook does. Ranks are threads, each a SwitchProcessGroup on one in-process store with a SwitchAggregator
on the loopback wire to the compiled program or the fake switch (harness/ddp_cluster.py)."""

import threading
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist

from harness import ddp_cluster as cluster
from harness.sim import SimJob
from host_agent import dist_backend, train, worker, workloads
from host_agent.aggregator import SwitchAggregator
from host_agent.dist_backend import Options, SwitchProcessGroup, Unsupported
from thc.aggregate import reference_aggregate
from thc.baselines import FixedPoint32
from thc.compressor import THCCompressor
from thc.config import THCConfig

CONFIG = THCConfig()
TIMEOUT = timedelta(seconds=60)


def on_engine(new_engine, n: int) -> list[SwitchAggregator]:
    """n workers' aggregators on the loopback wire to a fresh engine (new_engine: the fake switch or the
    compiled program) serving their job."""
    job = SimJob.plan(cluster.thc_spec(CONFIG, 3, n, window=64, slots=64))
    return cluster.aggregators_on(new_engine(job), job, timeout=0.01, max_timeout=0.1, deadline=60.0)


def groups(n: int, mode: str, fallback: bool = False, aggregators=None) -> list[SwitchProcessGroup]:
    """n ranks' groups on one store (built in threads: gloo's rendezvous waits for every rank), each with
    its aggregator (default: the fake switch's)."""
    aggregators = aggregators or cluster.switch_aggregators(n, CONFIG)
    spec = aggregators[0].protocol.spec
    store = dist.HashStore()
    return cluster.in_threads(
        n,
        lambda r: SwitchProcessGroup(store, r, n, TIMEOUT, Options(spec, aggregators[r], mode, fallback)),
    )


def on_every_rank(pgs, fn) -> list:
    try:
        return cluster.in_threads(len(pgs), lambda r: fn(r, pgs[r]))
    finally:
        for pg in pgs:
            pg.shutdown()


def tensor(rank: int, size: int, round_: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * round_ + rank)
    return torch.randn(size, generator=g) * (rank + 1)


def test_fix32_sums_the_fixed_point_values_exactly(new_engine):
    n, sizes = 3, (5000, 70)
    pgs = groups(n, "fix32", aggregators=on_engine(new_engine, n))

    def run(rank, pg):
        out = []
        for k, size in enumerate(sizes):  # repeated calls on other tensors: one request schedule
            t = tensor(rank, size, k)
            dist.all_reduce(t, group=pg)
            out.append(t)
        avg = tensor(rank, 300, 9)
        dist.all_reduce(avg, op=dist.ReduceOp.AVG, group=pg)
        return out, avg

    got = on_every_rank(pgs, run)
    codec = FixedPoint32(n)
    for k, size in enumerate(sizes):
        inputs = [tensor(r, size, k) for r in range(n)]
        preps = [codec.prepare(x, k) for x in inputs]
        stats = torch.stack([p.stats for p in preps]).max(0).values
        sums = codec.aggregate([codec.encode(p, stats) for p in preps])
        want = codec.decode(preps[0], sums, 1, stats)  # one contributor: the sum itself
        scale = (2**31 - 1) // n / 2.0 ** np.frexp(float(stats.max()))[1]
        for out, _ in got:
            assert torch.equal(out[k], want)  # every rank the same bits, the switch's sums exact
        exact = torch.stack(inputs).double().sum(0)
        assert float((got[0][0][k].double() - exact).abs().max()) <= n / (2 * scale) + 1e-6 * float(exact.abs().max())
    mean = torch.stack([tensor(r, 300, 9) for r in range(n)]).mean(0)
    assert torch.allclose(got[0][1], mean, atol=1e-6)


def test_thc_sums_are_n_times_the_reference_average(new_engine):
    n, sizes = 4, (5000, 2048)
    pgs = groups(n, "thc", aggregators=on_engine(new_engine, n))

    def run(rank, pg):
        out = []
        for k, size in enumerate(sizes):
            t = tensor(rank, size, k)
            pg.allreduce([t]).wait()
            out.append(t)
        return out

    got = on_every_rank(pgs, run)
    for k, size in enumerate(sizes):
        inputs = [tensor(r, size, k) for r in range(n)]
        comps = [THCCompressor(CONFIG, worker_id=r) for r in range(n)]
        preps = [c.prepare(x, k) for c, x in zip(comps, inputs)]
        max_norms = torch.stack([p.norms for p in preps]).max(0).values
        indices = [c.encode(p, max_norms) for c, p in zip(comps, preps)]
        sums = [reference_aggregate([ix[c] for ix in indices], comps[0].table) for c in range(len(indices[0]))]
        want = comps[0].decode(preps[0], sums, n, max_norms) * n
        assert all(torch.equal(out[k], want) for out in got)  # the switch's sums are thc's reference sums
        exact = torch.stack(inputs).sum(0)
        nmse = float((got[0][k] - exact).pow(2).sum() / exact.pow(2).sum())
        assert nmse < 0.1  # 4-bit THC of ranks at 1x..4x scale (0.03 here), far from the average's 0.56


def test_other_float_types_and_layouts_are_summed_in_place():
    pgs = groups(2, "fix32")

    def run(rank, pg):
        wide = torch.tensor([0.25, -1.5], dtype=torch.float64) * (rank + 1)
        half = torch.tensor([2.0, 0.5], dtype=torch.bfloat16) * (rank + 1)
        strided = torch.arange(8.0).reshape(2, 4).t() * (rank + 1)  # not contiguous
        for t in (wide, half, strided):
            dist.all_reduce(t, group=pg)
        return wide, half, strided

    for wide, half, strided in on_every_rank(pgs, run):
        assert wide.dtype == torch.float64 and torch.allclose(wide, torch.tensor([0.75, -4.5], dtype=torch.float64))
        assert half.dtype == torch.bfloat16 and half.tolist() == [6.0, 1.5]
        assert torch.allclose(strided, torch.arange(8.0).reshape(2, 4).t() * 3)


def test_every_other_collective_goes_through_gloo():
    n = 3
    pgs = groups(n, "fix32")

    def run(rank, pg):
        b = torch.tensor([rank * 10, 7])
        dist.broadcast(b, group=pg, group_src=1)
        gathered = [torch.zeros(2) for _ in range(n)]
        dist.all_gather(gathered, torch.tensor([rank, -rank], dtype=torch.float32), group=pg)
        dist.barrier(group=pg)
        r = torch.full((4,), float(rank + 1))
        dist.reduce(r, group=pg, group_dst=0)
        return b, gathered, r, pg.options.aggregator.stats()["operations"]

    got = on_every_rank(pgs, run)
    for b, gathered, _, operations in got:
        assert b.tolist() == [10, 7]
        assert [g.tolist() for g in gathered] == [[r, -r] for r in range(n)]
        assert operations == 0  # none of it reached the switch
    assert got[0][2].tolist() == [6.0] * 4


def test_fallback_sends_what_the_switch_cannot_do_to_gloo():
    pgs = groups(2, "thc", fallback=True)

    def run(rank, pg):
        m = torch.tensor([float(rank), -float(rank)])
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=pg)
        i = torch.tensor([rank + 1, 2**40], dtype=torch.int64)
        dist.all_reduce(i, group=pg)
        return m, i, pg.options.aggregator.stats()["operations"]

    for m, i, operations in on_every_rank(pgs, run):
        assert m.tolist() == [1.0, 0.0] and i.tolist() == [3, 2**41] and operations == 0


@pytest.mark.parametrize(
    "what, says",
    [
        (lambda pg: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX, group=pg), "all_reduce of ReduceOp.MAX"),
        (lambda pg: dist.all_reduce(torch.ones(3, dtype=torch.int32), group=pg), "all_reduce of int32 tensors"),
        (lambda pg: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.PRODUCT, group=pg), "ReduceOp.PRODUCT"),
    ],
)
def test_what_the_switch_cannot_do_is_refused_and_the_schedule_goes_on(what, says):
    pgs = groups(2, "fix32")

    def run(rank, pg):
        with pytest.raises(Unsupported) as refused:
            what(pg)
        t = torch.full((10,), float(rank))
        dist.all_reduce(t, group=pg)  # the request schedule is untouched by the refusal
        return str(refused.value), t

    for message, t in on_every_rank(pgs, run):
        assert says in message and "THC_FALLBACK=1" in message and 'backend="gloo"' in message
        assert t.tolist() == [1.0] * 10


class GatedAggregator:
    """One worker alone whose switch answers only once ``gate`` is set; records the order of its calls."""

    def __init__(self, gate: threading.Event):
        self.gate, self.calls, self.n_workers = gate, [], 1

    def all_max(self, t):
        assert self.gate.wait(30)
        return t.clone()

    def all_sum_int32(self, values):
        self.calls.append([len(v) for v in values])
        return [np.asarray(v, np.int32) for v in values], 1


def test_an_all_reduce_returns_before_the_switch_answers_and_completes_in_call_order():
    gate = threading.Event()
    agg = GatedAggregator(gate)
    spec = cluster.thc_spec(CONFIG, 1, 1)
    pg = SwitchProcessGroup(dist.HashStore(), 0, 1, TIMEOUT, Options(spec, agg, "fix32"))
    try:
        works = [dist.all_reduce(torch.ones(size), group=pg, async_op=True) for size in (5, 6, 7)]
        assert not any(w.is_completed() for w in works)  # all handed over while the "switch" holds the first
        gate.set()
        assert all(w.wait() for w in works)
        assert agg.calls == [[5], [6], [7]] and len(pg.aggregation_seconds) == 3
    finally:
        pg.shutdown()


class FailingAggregator(GatedAggregator):
    def all_max(self, t):
        raise TimeoutError("the switch said nothing")


def test_a_switch_failure_reaches_whoever_waits_with_its_name_and_is_kept_as_raised():
    spec = cluster.thc_spec(CONFIG, 1, 1)
    pg = SwitchProcessGroup(
        dist.HashStore(), 0, 1, TIMEOUT, Options(spec, FailingAggregator(threading.Event()), "fix32")
    )
    try:
        with pytest.raises(RuntimeError, match="TimeoutError: the switch said nothing"):
            dist.all_reduce(torch.ones(4), group=pg)
        assert [type(e) for e in pg.errors] == [TimeoutError]  # thc-worker raises it instead (by its type)
    finally:
        pg.shutdown()


def test_a_job_for_another_world_or_with_error_feedback_is_refused():
    spec = cluster.thc_spec(CONFIG, 1, 3)
    with pytest.raises(Unsupported, match="job 1 has 3 workers but the group has 2 ranks"):
        SwitchProcessGroup(dist.HashStore(), 0, 2, TIMEOUT, Options(spec, None, "thc"))
    feedback = cluster.thc_spec(THCConfig(error_feedback=True), 1, 1)
    with pytest.raises(ValueError, match="error feedback needs a tensor's identity"):
        SwitchProcessGroup(dist.HashStore(), 0, 1, TIMEOUT, Options(feedback, None, "thc"))
    with pytest.raises(Unsupported, match="THC_MODE='fix16': use thc or fix32"):
        Options(spec, None, "fix16")


def train_without_a_hook(model_name: str, mode: str, steps: int, n: int) -> list[torch.Tensor]:
    """Each rank's parameters after ``steps`` of DDP (no communication hook) on the thc backend."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    workload = workloads.get(model_name)
    data = workload.load()
    cfg = train.config_for(workload, steps=steps)
    pgs = groups(n, mode)

    def run(rank, pg):
        with cluster._seeding:
            model = workload.build(cfg.seed)
        ddp = DDP(model, process_group=pg)
        train.train(ddp, data, cfg, rank, n, lambda record: None, metric=workload.metric_of)
        del ddp  # the reducer goes before its process group
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()

    return on_every_rank(pgs, run)


@pytest.mark.parametrize("mode", ["thc", "fix32"])
def test_ddp_without_a_hook_trains_bit_for_bit_as_the_hook(mode, one_torch_thread):
    """DDP divides each bucket by n and asks for its SUM; the switch sums n times the average the hook
    decodes, and with n a power of two both scalings are exact: the same parameters on every rank and
    the same as the hook's (one bucket, so the backend's call count is the hook's round)."""
    backend = train_without_a_hook("mlp-digits", mode, steps=8, n=2)
    hook = cluster.train_ddp("mlp-digits", mode, 8, n=2, config=CONFIG)
    initial = torch.cat([p.reshape(-1) for p in workloads.get("mlp-digits").build(0).parameters()])
    assert torch.equal(backend[0], backend[1])
    assert torch.equal(backend[0], hook[0]["params"])
    assert not torch.equal(backend[0], initial)


def test_init_process_group_by_name_and_one_group_per_process():
    agg = cluster.switch_aggregators(1, CONFIG)[0]
    options = Options(agg.protocol.spec, agg, "fix32")
    dist.init_process_group(dist_backend.NAME, store=dist.HashStore(), rank=0, world_size=1, pg_options=options)
    try:
        assert dist.get_backend() == "thc"
        t = torch.tensor([1.5, -2.0])
        dist.all_reduce(t)
        assert t.tolist() == [1.5, -2.0] and agg.stats()["operations"] == 2  # the max round and the sums
        with pytest.raises(Unsupported, match="already has a thc group"):
            dist.new_group([0])
        assert dist.new_group([0], backend="gloo") is not None
    finally:
        dist.destroy_process_group()


def test_thc_worker_refuses_partial_aggregation_on_the_backend(capsys):
    argv = ["--mode", "thc-backend", "--rank", "0", "--world-size", "1", "--master-addr", "127.0.0.1"]
    argv += ["--iface", "lo", "--service-ip", "127.0.0.1", "--service-mac", "02:00:00:00:00:01"]
    assert worker.main([*argv, "--straggler-timeout", "10"]) == 2
    assert "--straggler-timeout is for the hook modes" in capsys.readouterr().err


SET = {"THC_JOB": "j.json", "THC_IFACE": "lo", "THC_SERVICE_IP": "10.9.9.9"}


@pytest.mark.parametrize(
    "environ, says",
    [
        ({}, "needs $THC_JOB"),
        ({"THC_JOB": "j.json"}, "needs $THC_IFACE"),
        ({"THC_JOB": "j.json", "THC_IFACE": "lo"}, "needs $THC_SERVICE_IP"),
        (dict(SET, THC_FALLBACK="yes"), "THC_FALLBACK='yes'"),
        (SET, "no neighbour entry for THC_SERVICE_IP=10.9.9.9 on lo (the switch answers no ARP)"),
    ],
)
def test_a_missing_setting_says_what_to_set(environ, says):
    with pytest.raises(Unsupported) as refused:
        dist_backend.options_from_environ(0, environ)
    assert says in str(refused.value)
