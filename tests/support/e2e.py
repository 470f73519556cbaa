"""Test support for the Mininet end-to-end tests (no tests here): skip conditions, a testbed factory,
and the reference recomputation of a probe round with thc's own aggregation."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support import paths

REPO = paths.REPO
BUILD = paths.BUILD


def skip_reasons() -> list[str]:
    from topologies.targets import find_executable

    reasons = []
    if os.geteuid() != 0:
        reasons.append("needs root (Mininet network namespaces)")
    if not (BUILD / "thc.json").exists() or not (BUILD / "thc.p4info.txtpb").exists():
        reasons.append("p4/build/ has no compiled program")
    if find_executable("emulator") is None:
        reasons.append("thc-switch is not installed")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        reasons.append("Mininet is not importable")
    return reasons


def mininet_marks() -> list:
    reasons = skip_reasons()
    return [pytest.mark.mininet, pytest.mark.slow, pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "ok")]


def wait_until_free(topo, timeout: float = 600.0) -> None:
    """Wait while another run on this machine (someone's `make run`, another test session) holds the
    switch interfaces or gRPC ports this topology needs; the testbed would refuse to touch them."""
    from topologies.ledger import interface_index
    from topologies.p4switch import port_open

    deadline = time.monotonic() + timeout
    while True:
        busy = [i for s in topo.switches for i in topo.interfaces(s).values() if interface_index(i) is not None]
        busy += [s.grpc_addr for s in topo.switches.values() if port_open("127.0.0.1", s.grpc_port)]
        if not busy:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"another run keeps {', '.join(busy)} busy")
        time.sleep(1.0)


def run_to_end(topology: str, log_dir: Path, *options: str) -> tuple[int, str]:
    """`thc-run --topo topologies/<topology> --log-dir LOG_DIR --no-pcap OPTIONS` to its end, started once
    the topology's interfaces are free: (exit status, output). Nothing it recorded may be left behind."""
    import subprocess
    import sys

    from controller.topology import Topology
    from topologies.ledger import Ledger

    wait_until_free(Topology.load(REPO / "topologies" / topology))
    command = [sys.executable, "-m", "topologies.runner", "--topo", f"topologies/{topology}"]
    run = subprocess.run(
        command + ["--log-dir", str(log_dir), "--no-pcap", *options],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
    )
    ledger = Ledger.load(log_dir / "run-state.removed.json")
    assert ledger.live_processes() == [] and ledger.live_interfaces() == [], run.stdout
    return run.returncode, run.stdout


def open_testbed(topo, log_dir: Path, target: str = "emulator"):
    from mininet.log import setLogLevel

    from topologies.testbed import Testbed

    setLogLevel("critical")
    wait_until_free(topo)
    return Testbed(topo, log_dir, target=target, say=lambda message: None)


def assert_nothing_left(ledger) -> None:
    """Every process and interface the testbed recorded is gone."""
    assert ledger.live_processes() == []
    assert ledger.live_interfaces() == []


@contextlib.contextmanager
def served(topology: str, log_dir: Path, target: str = "emulator"):
    """The testbed of topologies/<topology> up for the block; after it, nothing of it is left."""
    from controller.topology import Topology

    bed = open_testbed(Topology.load(REPO / "topologies" / topology), log_dir, target=target)
    with bed:
        yield bed
    assert_nothing_left(bed.ledger)


def probe(bed, mode: str, rounds: int, size: int, job_id: int = 1, stall_timeout: float = 60):
    """`rounds` probe rounds (thc-worker --probe) of `size` coordinates in `mode` by four workers, job `job_id`."""
    from contract.job import JobSpec
    from topologies.workers import WorkerOptions

    spec = JobSpec(job_id=job_id, workers=4)
    options = WorkerOptions(mode, steps=0, spec=spec, probe_rounds=rounds, probe_size=size, switch_timeout=20)
    return bed.run_workers(options, stall_timeout=stall_timeout)


PROBE_CHUNK = 2048  # thc-worker's default --chunk


def reference_thc_round(n: int, round_: int, size: int, probe_seed: int = 7):
    """What every worker must get in probe round ``round_``, computed in-process with thc: per worker
    (indices, sums, decoded vector)."""
    from host_agent.probe import probe_gradient
    from thc.compressor import THCCompressor
    from thc.config import THCConfig

    config = THCConfig(bits=4, granularity=30, seed=0, error_feedback=False, chunk=PROBE_CHUNK)
    compressors = [THCCompressor(config, worker_id=r) for r in range(n)]
    preps = [c.prepare(probe_gradient(probe_seed, r, round_, size), step=round_) for r, c in enumerate(compressors)]
    max_norms = torch.stack([p.norms for p in preps]).amax(0)
    indices = [c.encode(p, max_norms) for c, p in zip(compressors, preps)]
    sums = compressors[0].aggregate(indices)
    decoded = [c.decode(p, sums, n, max_norms) for c, p in zip(compressors, preps)]
    return max_norms, indices, sums, decoded


def assert_thc_probes_exact(probes: list, rounds: int, size: int) -> None:
    """Each worker's switch-aggregated round equals the reference aggregation, bit for bit."""
    n = len(probes)
    for k in range(rounds):
        max_norms, indices, sums, decoded = reference_thc_round(n, k, size)
        for rank, probe in enumerate(probes):
            where = f"round {k}, worker {rank}"
            assert int(probe[f"r{k}_contributors"]) == n, where
            assert np.array_equal(probe[f"r{k}_max_norms"], max_norms.numpy()), where
            assert np.array_equal(probe[f"r{k}_indices"], np.concatenate(indices[rank])), where
            assert np.array_equal(probe[f"r{k}_sums"], np.concatenate(sums)), where
            assert np.array_equal(probe[f"r{k}_decoded"], decoded[rank].numpy()), where


def assert_fix32_probes_exact(probes: list, rounds: int, size: int, probe_seed: int = 7) -> None:
    """FIX32 through the switch equals thc.baselines.FixedPoint32's own aggregation, bit for bit."""
    from host_agent.probe import probe_gradient
    from thc.baselines import FixedPoint32

    n = len(probes)
    for k in range(rounds):
        codecs = [FixedPoint32(n, worker_id=r) for r in range(n)]
        preps = [c.prepare(probe_gradient(probe_seed, r, k, size), step=k) for r, c in enumerate(codecs)]
        stats = torch.stack([p.stats for p in preps]).amax(0)
        words = [c.encode(p, stats) for c, p in zip(codecs, preps)]
        sums = codecs[0].aggregate(words)
        for rank, probe in enumerate(probes):
            where = f"round {k}, worker {rank}"
            assert int(probe[f"r{k}_contributors"]) == n, where
            assert np.array_equal(probe[f"r{k}_words"], np.concatenate(words[rank])), where
            assert np.array_equal(probe[f"r{k}_sums"], np.concatenate(sums).astype(np.int64)), where
            decoded = codecs[rank].decode(preps[rank], sums, n, stats)
            assert np.array_equal(probe[f"r{k}_decoded"], decoded.numpy()), where
