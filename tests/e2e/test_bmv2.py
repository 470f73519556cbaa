"""The same end-to-end check on BMv2 (simple_switch_grpc) where it is installed: the runner starts it
as a Mininet switch node, the controller programs it over P4Runtime, and THC and FIX32 rounds through it
equal thc's reference aggregation exactly."""

import pytest

from controller.topology import Topology
from spec.job import JobSpec
from tests.support.bmv2 import needs_bmv2
from tests.support.e2e import (
    REPO,
    assert_fix32_probes_exact,
    assert_nothing_left,
    assert_thc_probes_exact,
    mininet_marks,
    open_testbed,
)
from topologies.workers import WorkerOptions

pytestmark = mininet_marks() + [
    pytest.mark.bmv2,
    needs_bmv2(),
]

PROBE_SIZE = 3000


def test_bmv2_aggregates_exactly(tmp_path):
    topo = Topology.load(REPO / "topologies" / "star4.json")
    bed = open_testbed(topo, tmp_path, target="bmv2")
    with bed:
        thc = bed.run_workers(
            WorkerOptions(
                mode="thc",
                steps=0,
                job=JobSpec(job_id=1, workers=4),
                probe_rounds=2,
                probe_size=PROBE_SIZE,
                switch_timeout=20,
            ),  # fmt: skip
            stall_timeout=90,
        )
        fix32 = bed.run_workers(
            WorkerOptions(
                mode="fix32",
                steps=0,
                job=JobSpec(job_id=2, workers=4),
                probe_rounds=1,
                probe_size=PROBE_SIZE,
                switch_timeout=20,
            ),  # fmt: skip
            stall_timeout=90,
        )
    assert_nothing_left(bed.ledger)
    assert_thc_probes_exact(thc, 2, PROBE_SIZE)
    assert_fix32_probes_exact(fix32, 1, PROBE_SIZE)
