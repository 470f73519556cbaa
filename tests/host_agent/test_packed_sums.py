"""THC sums of indices already packed as requests carry them (WorkerProtocol.start_sum_packed, which
SwitchAggregator.start_sum_encoded feeds from THCCompressor.encode_packed): the same frames, in the same
order, as start_sum_indices of the same indices, under loss, duplication and reordering, on the fake switch
and the compiled program; the flat sums exact; and the DDP hook through the switch decodes to the same
bits on the packed path as on the index path."""

import numpy as np
import pytest
import torch

from ddp import aggregator_hooks
from harness.ddp_cluster import aggregators_on, in_threads, thc_spec
from harness.sim import SimJob, attach_workers
from host_agent import native
from host_agent.clock import VirtualClock
from host_agent.operation import pack_indices
from host_agent.protocol import drive
from tests.host_agent.test_batched import SCENARIOS, TABLE, job_of, tapped_workers
from tests.host_agent.test_ddp import N
from tests.support.grad_bucket import GradBucket as Bucket
from thc.config import THCConfig

K = 1024  # the default job's coordinates a THC request (8-bit lanes)


def _run(new_engine, packed: bool, numpy_take: bool, *, seed, **scenario):
    tap, workers, clock = tapped_workers(new_engine, seed=seed, **scenario)
    if numpy_take:
        for w in workers:
            w._native = None
    rng = np.random.default_rng(seed)
    sums, counts = [], []
    for lengths in ([K * 30 + 7], [5, K * 3], [10 * K]):
        data = [[rng.integers(0, 16, n, dtype=np.uint8) for n in lengths] for _ in workers]
        if packed:
            padded = [[np.pad(c, (0, -c.size % K)) for c in d] for d in data]
            ops = [
                w.start_sum_packed(np.frombuffer(pack_indices(p, K)[0], np.uint8), [c.size for c in p])
                for w, p in zip(workers, padded)
            ]
        else:
            ops = [w.start_sum_indices(d) for w, d in zip(workers, data)]
        drive(workers)
        table = np.asarray(TABLE, np.int32)
        want = [sum(table[d[c]] for d in data) for c in range(len(lengths))]
        for op in ops:
            got, count = op.result()
            counts.append(count)
            if packed:  # one flat array: chunk after chunk, each padded to whole requests
                assert got.dtype == np.int32 and got.ndim == 1
                at = 0
                for c, n in enumerate(lengths):
                    np.testing.assert_array_equal(got[at : at + n], want[c])
                    at += -(-n // K) * K
                sums.append(got.copy())
            else:
                for g, w_ in zip(got, want):
                    np.testing.assert_array_equal(g, w_)
                sums.append(np.concatenate([np.pad(g, (0, -g.size % K)) for g in got]).astype(np.int32))
    return tap.frames, [w.stats() for w in workers], clock(), sums, counts


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_packed_sums_send_the_same_frames_as_index_sums(new_engine, scenario):
    """Same seed: the packed path and the index path put the same frames on the wire in the same order,
    end at the same virtual time with the same counters, and get the same sums (exact), with the numpy
    take and with the C take."""
    reference = _run(new_engine, False, True, **SCENARIOS[scenario])
    takes = [True] + ([False] if native.load() is not None else [])
    for numpy_take in takes:
        frames, stats, end, sums, counts = _run(new_engine, True, numpy_take, **SCENARIOS[scenario])
        assert frames == reference[0]
        assert stats == reference[1]
        assert end == reference[2]
        assert counts == reference[4] and set(counts) == {4}
        for got, want in zip(sums, reference[3]):
            np.testing.assert_array_equal(got, want)


def test_packed_sums_refuse_a_short_buffer(new_engine):
    job = job_of(4, 8)
    _, workers = attach_workers(new_engine(job), job, clock=VirtualClock())
    with pytest.raises(ValueError, match="packed indices"):
        workers[0].start_sum_packed(np.zeros(K // 2 - 1, np.uint8), [K])
    assert not workers[0].busy


def _hook_outputs(new_engine, config, encoded: bool, loss: float):
    """Each worker's thc_hook output for two steps of two buckets, through SwitchAggregators on the
    loopback wire; `encoded` False hides start_sum_encoded (the index path)."""
    job = SimJob.plan(thc_spec(config, 3, N, window=32, slots=32))
    aggs = aggregators_on(new_engine(job), job, loss=loss, seed=5, timeout=0.005, max_timeout=0.05, deadline=30.0)
    if not encoded:
        for a in aggs:
            a.start_sum_encoded = None  # not callable: the hook encodes indices and sums them
    states = [aggregator_hooks.THCHookState(config, aggs[w], worker_id=w) for w in range(N)]
    rng = np.random.default_rng(11)
    grads = [[torch.tensor(rng.normal(size=n), dtype=torch.float32) for n in (5000, 3 * K)] for _ in range(N)]

    def run(w):
        outs = []
        for it in range(2):
            futures = [
                aggregator_hooks.thc_hook(states[w], Bucket(g.clone() * (it + 1), index=b, last=b == 1))
                for b, g in enumerate(grads[w])
            ]
            outs += [f.wait().clone() for f in futures]
        return outs

    out = in_threads(N, run, timeout=120)
    for s in states:
        s.close()
    return out, [a.stats() for a in aggs]


def test_hook_decodes_the_same_bits_on_the_packed_path(new_engine):
    config = THCConfig(chunk=2**11)
    packed, stats = _hook_outputs(new_engine, config, True, loss=0.02)
    index, _ = _hook_outputs(new_engine, config, False, loss=0.0)
    for w in range(N):
        for got, want in zip(packed[w], index[w]):
            assert torch.equal(got, want)
    assert sum(s["retransmissions"] for s in stats) > 0  # the packed path recovered from loss
    assert all(s["operations"] == 8 for s in stats)  # 2 steps x 2 buckets x (norm round + sums)


def test_packed_sums_in_sixteen_bit_lanes(new_engine):
    """n·g = 4 × 100 > 255: 16-bit lanes, K = 512 coordinates a request (and the padding 16-bit requests
    carry): the packed path's sums are exact there too."""
    job = job_of(4, 8, granularity=100)
    k = job.spec.coords_per_request
    assert job.spec.lane_bits == 16 and k == 512
    _, workers = attach_workers(new_engine(job), job, loss_up=0.05, loss_down=0.05, seed=3, clock=VirtualClock())
    rng = np.random.default_rng(16)
    table = np.asarray(job.spec.table_values(), np.int32)
    data = [[rng.integers(0, 16, n, dtype=np.uint8) for n in (3 * k + 5, k)] for _ in workers]
    padded = [[np.pad(c, (0, -c.size % k)) for c in d] for d in data]
    ops = [
        w.start_sum_packed(np.frombuffer(pack_indices(p, k)[0], np.uint8), [c.size for c in p])
        for w, p in zip(workers, padded)
    ]
    drive(workers)
    want = np.concatenate([sum(table[p[c]] for p in padded) for c in range(2)])
    for op in ops:
        got, count = op.result()
        assert count == 4
        np.testing.assert_array_equal(got, want)
