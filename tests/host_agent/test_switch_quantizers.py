"""The ablation's codecs through the compiled program (p4/build/thc.json in the software switch, workers on
the in-process loopback wire): THC without its transform and TernGrad summed by the switch. The switch
sums the job's table, and every worker's decode equals, bit for bit, a numpy reference of the formula
thc/direct.py states; TernGrad's 32 workers fit 8-bit lanes. And a model trains in terngrad-switch mode,
the THC hook with TernGrad's codec, as thc-worker runs it."""

import math

import numpy as np
import pytest
import torch

from contract.job import JobSpec
from emulator.switch import SoftwareSwitch
from harness import ddp_cluster as cluster
from harness.sim import SimJob, attach_workers, program_engine, thc_round
from host_agent.clock import VirtualClock
from host_agent.worker_cli import mode_job
from tests.support import paths
from thc import THCCompressor
from thc.config import THCConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def through_the_program(spec: JobSpec, grads: list[torch.Tensor]):
    """One round: NORM round, encode, THC sums, decode, every worker through the program. Returns per
    worker (decoded, sums, count), and the maxima, the indices and worker 0's prepared gradient."""
    job = SimJob.plan(spec)
    engine = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(engine, job)
    _, workers = attach_workers(engine, job, clock=VirtualClock())
    comps = [THCCompressor(job.spec.codec, worker_id=w) for w in job.worker_ids]
    preps, maxima, indices, ops = thc_round(workers, comps, grads, 0)
    out = []
    for c, p, op in zip(comps, preps, ops):
        sums, count = op.result()
        out.append((c.decode(p, sums, count, maxima), sums, count))
    return out, maxima, indices, preps[0]


def reference(spec: JobSpec, maxima, indices, prep) -> tuple[list[np.ndarray], np.ndarray]:
    """Sums of the job's table values and x_hat = (S/n - g/2) step per chunk, in numpy."""
    values, g, n = np.array(spec.table_values()), spec.codec.granularity, spec.workers
    table = spec.codec.make_table()
    sums, decoded = [], []
    for c, m in zip(prep.chunks, maxima.double().numpy()):
        s = sum(values[i[c.index]] for i in indices)
        step = 2 * m / g if spec.codec.quantizer == "terngrad" else table.inc * m / math.sqrt(c.padded)
        sums.append(s)
        decoded.append((s[: c.length] / n - g / 2) * step)
    return sums, np.concatenate(decoded).astype(np.float32)


@pytest.mark.parametrize(
    "mode, workers, fields, lanes",
    [
        ("terngrad-switch", 8, {}, 8),
        ("terngrad-switch", 32, {}, 8),  # n g = 64: TernGrad's sums of 32 workers fit a byte
        ("thc", 8, {"transform": False}, 8),
        ("thc", 32, {"transform": False, "table": "uniform", "bits": 3}, 16),
    ],
)
def test_every_worker_decodes_the_reference_bit_for_bit(mode, workers, fields, lanes):
    spec = mode_job(
        mode, JobSpec(job_id=2, workers=workers, codec=THCConfig(chunk=1024, **fields), window=16, slots=16)
    )
    assert spec.lane_bits == lanes
    gen = torch.Generator().manual_seed(workers)
    grads = [torch.randn(2500, generator=gen) * (1 + w % 3) for w in range(workers)]
    got, maxima, indices, prep = through_the_program(spec, grads)
    want_sums, want = reference(spec, maxima, indices, prep)
    for decoded, sums, count in got:
        assert count == workers
        for s, w in zip(sums, want_sums):
            np.testing.assert_array_equal(s, w)
        np.testing.assert_array_equal(decoded.numpy(), want)


def test_a_model_trains_in_terngrad_switch_mode_through_the_program():
    spec = mode_job("terngrad-switch", JobSpec(job_id=3, workers=2, window=64, slots=64))
    job = SimJob.plan(spec)
    engine = SoftwareSwitch.from_json(str(paths.THC_JSON))
    program_engine(engine, job)
    aggregators = cluster.jobs_aggregators(engine, [job])[job.job_id]
    ranks = cluster.train_ddp("mlp-digits", "thc", 8, config=spec.codec, aggregators=aggregators)
    assert ranks[0]["after"] < ranks[0]["before"], ranks[0]
    assert torch.equal(ranks[0]["params"], ranks[1]["params"])
