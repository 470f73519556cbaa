"""The sharded aggregator (host_agent/sharded.py) against several in-process servers: every worker's sums,
maxima and contributor counts are bit for bit those of one switch, and a model trains to the same
parameters. Each server is an engine on a loopback wire of its own, serving the same job, as a ps mode's
servers each hold the job on their own host."""

import threading
import time

import numpy as np
import pytest
import torch

from emulator.switch import SoftwareSwitch
from harness.ddp_cluster import in_threads, thc_spec, train_ddp
from harness.fake_switch import FakeSwitch
from harness.sim import SimJob, attach_workers, program_engine
from host_agent.aggregator import SwitchAggregator
from host_agent.sharded import ShardedAggregator, cell_pieces, join_counts, whole_chunks
from tests.support import paths
from thc.config import THCConfig

CONFIG = THCConfig()
TIMERS = dict(clock=time.monotonic, timeout=0.01, max_timeout=0.1, deadline=60.0)


def engine_for(kind: str, job: SimJob):
    if kind == "fake":
        sw = FakeSwitch()
        sw.add_job(job)
        return sw
    if not paths.THC_JSON.exists():
        pytest.skip("p4/build/thc.json not built")
    sw = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(sw, job)
    return sw


def per_worker(kind: str, n: int, servers: int, job_id: int = 3, **options) -> list[list[SwitchAggregator]]:
    """Per worker its SwitchAggregators, one per server (each server an engine serving the job); `options`:
    WorkerProtocol's (e.g. straggler_timeout)."""
    job = SimJob.plan(thc_spec(CONFIG, job_id, n, window=64, slots=64))
    out = [[] for _ in range(n)]
    for _ in range(servers):
        _, protocols = attach_workers(engine_for(kind, job), job, **TIMERS, **options)
        for w, protocol in enumerate(protocols):
            out[w].append(SwitchAggregator(protocol))
    return out


def sharded(kind: str, n: int, servers: int, **options) -> list[ShardedAggregator]:
    cell = SimJob.plan(thc_spec(CONFIG, 3, n)).spec.fix32_per_request
    return [ShardedAggregator(shards, cell) for shards in per_worker(kind, n, servers, **options)]


def single(kind: str, n: int) -> list[SwitchAggregator]:
    return [shards[0] for shards in per_worker(kind, n, 1)]


def worker_indices(n: int, sizes: list[int], seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 16, size, dtype=np.uint8) for size in sizes] for _ in range(n)]


def calls(aggregators, sizes: list[int], seed: int) -> list[dict]:
    """Every worker's answer to a norm round, a THC sum and a FIX32 sum (run at once, one thread each)."""
    n = len(aggregators)
    indices = worker_indices(n, sizes, seed)
    rng = np.random.default_rng(seed + 1)
    norms = [torch.from_numpy(rng.random(len(sizes), dtype=np.float32)) for _ in range(n)]
    words = [[rng.integers(-(2**31), 2**31, size + 300, dtype=np.int64).astype(np.int32) for size in sizes]
             for _ in range(n)]  # fmt: skip
    table = CONFIG.make_table()

    def one(w):
        agg = aggregators[w]
        maxima = agg.all_max(norms[w])
        sums, contributors = agg.all_sum_table_values(indices[w], table)
        fix_sums, fix_contributors = agg.all_sum_int32(words[w])
        return {
            "max": maxima,
            "sums": sums,
            "contributors": contributors,
            "fix": fix_sums,
            "fix_contributors": fix_contributors,
        }

    out = in_threads(n, one, timeout=120)
    expected_sums = [sum(table.values[idx[j]].astype(np.int64) for idx in indices) for j in range(len(sizes))]
    expected_fix = [sum(w[j].astype(np.int64) for w in words).astype(np.int32) for j in range(len(sizes))]
    for got in out:
        assert torch.equal(got["max"], torch.stack(norms).amax(0))
        assert [s.astype(np.int64).tolist() for s in got["sums"]] == [s.tolist() for s in expected_sums]
        assert [s.astype(np.int32).tolist() for s in got["fix"]] == [s.tolist() for s in expected_fix]
    return out


@pytest.mark.parametrize("kind", ["fake", "p4"])
@pytest.mark.parametrize("servers", [2, 3])
def test_sharded_sums_are_one_switchs_bit_for_bit(kind, servers):
    sizes = [2048, 2048, 1024, 4096, 512]  # five chunks: some shards get two, one a single chunk
    n = 3
    alone = calls(single(kind, n), sizes, seed=5)
    spread = calls(sharded(kind, n, servers), sizes, seed=5)
    for one, many in zip(alone, spread):
        assert torch.equal(one["max"], many["max"])
        assert all(np.array_equal(a, b) for a, b in zip(one["sums"], many["sums"]))
        assert all(np.array_equal(a, b) for a, b in zip(one["fix"], many["fix"]))
        assert one["contributors"] == many["contributors"] == n
        assert one["fix_contributors"] == many["fix_contributors"] == n


def test_more_servers_than_chunks_leaves_the_others_out():
    aggregators = sharded("fake", 2, 3)
    calls(aggregators, [2048], seed=9)  # one norm and one THC chunk: shard 0 alone; 2,348 FIX32 values: 3 pieces
    assert [s.stats()["operations"] for s in aggregators[0].shards] == [3, 1, 1]
    calls(aggregators, [100], seed=9)  # 400 FIX32 values: two cells, two pieces
    assert [s.stats()["operations"] for s in aggregators[0].shards] == [6, 2, 1]


@pytest.mark.parametrize("mode", ["thc", "fix32"])
def test_a_model_trains_to_the_same_parameters_through_shards(mode):
    alone = train_ddp("mlp-digits", mode, 4, n=2, config=CONFIG, aggregators=single("p4", 2))
    spread = train_ddp("mlp-digits", mode, 4, n=2, config=CONFIG, aggregators=sharded("p4", 2, 2))
    for rank in range(2):
        assert torch.equal(alone[rank]["params"], spread[rank]["params"]), rank
    assert alone[0]["after"] < alone[0]["before"]


@pytest.mark.parametrize("kind", ["fake", "p4"])
def test_partial_aggregation_releases_on_every_server(kind):
    """A worker that sends nothing until the others are done: each server releases its slots with the two
    that came, every worker (the straggler too, answered as LATE) gets their sums, and the norms' maximum
    is a partial one."""
    n, sizes = 3, [2048, 1024, 2048]
    aggregators = sharded(kind, n, 2, straggler_timeout=0.02)
    indices = worker_indices(n, sizes, seed=11)
    norms = [torch.tensor([1.0, 2.0, 3.0]) * (w + 1) for w in range(n)]
    table = CONFIG.make_table()
    others_done = threading.Barrier(n)

    def one(w):
        if w == n - 1:
            others_done.wait()  # the straggler starts once the others have their results
        maxima = aggregators[w].all_max(norms[w])
        partial = aggregators[w].last_max_partial
        sums, contributors = aggregators[w].all_sum_table_values(indices[w], table)
        if w < n - 1:
            others_done.wait()
        return maxima, partial, sums, contributors

    out = in_threads(n, one, timeout=120)
    expected = [sum(table.values[idx[j]].astype(np.int64) for idx in indices[:2]) for j in range(len(sizes))]
    for maxima, partial, sums, contributors in out:
        assert torch.equal(maxima, norms[1]) and partial
        assert contributors == 2
        assert [s.astype(np.int64).tolist() for s in sums] == [e.tolist() for e in expected]


def test_plans_cover_every_coordinate_once():
    sizes = [38282, 2048, 5, 0]
    for plan in (whole_chunks(sizes, 3), cell_pieces(sizes, 4, 256)):
        covered = [np.zeros(size, int) for size in sizes]
        for parts in plan:
            for j, start, stop in parts:
                covered[j][start:stop] += 1
        assert all((c == 1).all() for c in covered)
    assert [parts[0][1:] for parts in cell_pieces([38282], 4, 256)] == [
        (0, 9728),
        (9728, 19456),
        (19456, 29184),
        (29184, 38282),
    ]
    assert [[j for j, _, _ in parts] for parts in whole_chunks([1] * 5, 2)] == [[0, 2, 4], [1, 3]]


def test_contributors_per_coordinate_when_one_server_released_slots():
    sizes = [4, 6]
    plan = cell_pieces(sizes, 2, 2)  # chunk 0: [0,2) [2,4); chunk 1: [0,4) [4,6)
    assert join_counts(sizes, plan, {0: 3, 1: 3}) == 3
    counts = join_counts(sizes, plan, {0: 3, 1: [np.array([2, 3]), np.array([3, 2])]})
    assert [c.tolist() for c in counts] == [[3, 3, 2, 3], [3, 3, 3, 3, 3, 2]]


def test_a_shards_socket_takes_only_its_own_servers_results(veth):
    """On a real interface each shard's kernel filter passes the results of its own server only."""
    import socket
    from types import SimpleNamespace

    from host_agent import wire
    from host_agent.sharded import accept_only_from
    from host_agent.transport import RawSocketTransport

    a, b = veth
    me = wire.Endpoint("02:00:00:00:01:01", "10.0.0.1")
    servers = [wire.Endpoint("02:00:00:00:02:01", "10.0.0.201"), wire.Endpoint("02:00:00:00:02:02", "10.0.0.202")]
    results = [
        wire.FrameBuilder(server, me).frame(wire.OP_THC, wire.KIND_RESULT, 1, 0, 0, 0, payload=bytes(1024), count=2)
        for server in servers
    ]
    peer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    peer.bind((b, 0))
    with RawSocketTransport(a) as mine, RawSocketTransport(a) as everyone:
        accept_only_from(SimpleNamespace(protocol=SimpleNamespace(transport=mine)), servers[0].ip)
        for frame in results:
            peer.send(frame)
        got, seen = [], []
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            got += mine.recv(0.1)
            # the unfiltered socket also sees whatever else the kernel puts on a fresh veth: keep ours
            seen += [frame for frame in everyone.recv(0.1) if frame in results]
        got += mine.recv(0.2)
    peer.close()
    assert seen == results  # the unfiltered socket gets both: they did arrive
    assert got == results[:1]
