"""The gloo modes (ddp.gloo_hooks) average exactly what their references average: fp16 and PowerSGD exactly what
torch's own hooks give on the same bucket when run alone; TopK, QSGD and TernGrad exactly what the thc
library's compressor gives offline (prepare, encode, the reference aggregate, decode) from every worker's
gradient. Two worker threads, each with its own gloo process group on one in-process store."""

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from ddp import gloo_hooks
from harness.ddp_cluster import gloo_group, in_threads, serialized
from tests.support.grad_bucket import GradBucket as Bucket
from thc.errors import ConfigError
from thc.registry import make_compressor

N = 2
SHAPES = [(48, 40), (40,), (10, 48), (10,)]  # two matrices (PowerSGD compresses them) and two vectors
NUMEL = sum(int(np.prod(s)) for s in SHAPES)
ROUNDS = 4  # PowerSGD starts compressing at round 2 (POWERSGD_START); TopK's memory carries over


def grads(rank: int, rnd: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(100 * rank + rnd)
    return torch.randn(NUMEL, generator=g) * torch.rand(NUMEL, generator=g)


def run_pairs(mode, reference):
    """Per rank and round: (the mode's average, the reference hook's average) of the same bucket."""
    store = dist.HashStore()

    def work(rank):
        ours = gloo_group(dist.PrefixStore("ours", store), rank, N)
        theirs = gloo_group(dist.PrefixStore("theirs", store), rank, N)
        state, hook = gloo_hooks.make_gloo_hook(mode, process_group=ours, worker_id=rank)
        ref_state, ref_hook = reference(theirs)
        hook, ref_hook = serialized(hook), serialized(ref_hook)  # PowerSGD seeds torch's global RNG
        out = []
        for rnd in range(ROUNDS):
            a = hook(state, Bucket(grads(rank, rnd), shapes=SHAPES)).wait().clone()
            b = ref_hook(ref_state, Bucket(grads(rank, rnd), shapes=SHAPES)).wait().clone()
            out.append((a, b))
        return out

    return in_threads(N, work)


@pytest.mark.parametrize(
    "mode, reference",
    [
        ("fp16", lambda pg: (pg, default_hooks.fp16_compress_hook)),
        (
            "powersgd",
            lambda pg: (
                powerSGD_hook.PowerSGDState(
                    pg,
                    matrix_approximation_rank=gloo_hooks.POWERSGD_RANK,
                    start_powerSGD_iter=gloo_hooks.POWERSGD_START,
                ),
                powerSGD_hook.powerSGD_hook,
            ),
        ),
        ("gloo", lambda pg: (pg, default_hooks.allreduce_hook)),
    ],
)
def test_a_torch_hook_mode_averages_what_the_hook_alone_averages(mode, reference, one_torch_thread):
    results = run_pairs(mode, reference)
    truth = [(grads(0, r) + grads(1, r)) / 2 for r in range(ROUNDS)]
    for rank in range(N):
        for rnd, (ours, theirs) in enumerate(results[rank]):
            assert torch.equal(ours, theirs), (mode, rank, rnd)
            assert torch.equal(ours, results[0][rnd][0])  # every worker holds the same average
            err = float((ours - truth[rnd]).norm() / truth[rnd].norm())
            # random gradients are full rank: a rank-2 approximation only captures part of them
            assert err < (1.0 if mode == "powersgd" and rnd >= gloo_hooks.POWERSGD_START else 1e-3), (mode, rnd, err)


@pytest.mark.parametrize("mode", ["topk", "qsgd", "terngrad"])
def test_a_thc_baseline_mode_averages_what_the_library_computes(mode, one_torch_thread):
    store = dist.HashStore()

    def work(rank):
        pg = gloo_group(dist.PrefixStore(mode, store), rank, N)
        state, hook = gloo_hooks.make_gloo_hook(mode, process_group=pg, worker_id=rank)
        return [hook(state, Bucket(grads(rank, rnd), shapes=SHAPES)).wait().clone() for rnd in range(ROUNDS)]

    results = in_threads(N, work)
    comps = [make_compressor(mode, 1, w) for w in range(N)]  # the library's own, as the hook builds bucket 0
    for rnd in range(ROUNDS):
        preps = [comps[w].prepare(grads(w, rnd), rnd) for w in range(N)]
        stats = torch.stack([p.stats for p in preps]).amax(0) if comps[0].summable else torch.zeros_like(preps[0].stats)
        payloads = [comps[w].encode(preps[w], stats) for w in range(N)]
        aggregated = comps[0].aggregate(payloads)
        truth = (grads(0, rnd) + grads(1, rnd)) / 2
        for w in range(N):
            want = comps[w].decode(preps[w], aggregated, N, stats)
            assert torch.equal(results[w][rnd], want), (mode, w, rnd)
        err = float((results[0][rnd] - truth).norm() / truth.norm())
        assert err < 1.5, (mode, rnd, err)  # compressed, but an estimate of the average


def test_pack_round_trips_every_payload_shape():
    payload = [np.arange(5, dtype=np.uint8), (np.arange(3, dtype=np.int32), np.ones(3, np.float32)), np.zeros(0)]
    data, layout = gloo_hooks.pack(payload)
    back = gloo_hooks.unpack(data.clone(), layout)
    assert len(back) == 3 and isinstance(back[1], tuple)
    for a, b in zip(gloo_hooks._arrays(payload), gloo_hooks._arrays(back)):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_an_unknown_gloo_mode_names_the_modes():
    with pytest.raises(ConfigError, match="choose from gloo, fp16, powersgd, topk, qsgd, terngrad"):
        gloo_hooks.make_gloo_hook("nope")


def test_each_bucket_draws_its_own_random_stream(one_torch_thread):
    """Two buckets holding the same gradient in one round are rounded independently (QSGD's streams are
    keyed by worker, round and chunk; the hook gives each bucket its own seed)."""
    store = dist.HashStore()

    def work(rank):
        pg = gloo_group(dist.PrefixStore("streams", store), rank, N)
        state, hook = gloo_hooks.make_gloo_hook("qsgd", process_group=pg, worker_id=rank)
        a = hook(state, Bucket(grads(rank, 0), index=0, last=False)).wait().clone()
        b = hook(state, Bucket(grads(rank, 0), index=1, last=True)).wait().clone()
        return a, b

    (a, b), _ = in_threads(N, work)
    assert not torch.equal(a, b)


def test_terngrads_levels_are_summed_as_int8_up_to_127_workers():
    """A quarter of int32's bytes: n values in {-1, 0, 1} sum to [-n, n]; the offset gives the levels' sum."""
    comp = make_compressor("terngrad", 1, 0)
    levels = [np.array([0, 1, 2, 2], np.uint8), np.array([1, 0], np.uint8)]
    for n, dtype in ((2, torch.int8), (127, torch.int8), (128, torch.int32)):
        total, offset = gloo_hooks.summable_payload(comp, levels, n)
        assert total.dtype == dtype and total.numel() == 6 and offset == (n if dtype == torch.int8 else 0)
    assert gloo_hooks.summable_payload(comp, levels, 128)[0].tolist() == [0, 1, 2, 2, 1, 0]
    total, offset = gloo_hooks.summable_payload(comp, levels, 4)
    assert total.tolist() == [-1, 0, 1, 1, 0, -1] and offset == 4  # four workers' sums get +4 back
