"""The same end-to-end check on BMv2 (simple_switch_grpc) where it is installed: the runner starts it
as a Mininet switch node, the controller programs it over P4Runtime, and THC and FIX32 rounds through it
equal thc's reference aggregation exactly."""

import pytest

from tests.support.bmv2 import needs_bmv2
from tests.support.e2e import (
    assert_fix32_probes_exact,
    assert_thc_probes_exact,
    mininet_marks,
    probe,
    served,
)

pytestmark = mininet_marks() + [
    pytest.mark.bmv2,
    needs_bmv2(),
]

PROBE_SIZE = 3000


def test_bmv2_aggregates_exactly(tmp_path):
    with served("star4.json", tmp_path, target="bmv2") as bed:
        thc = probe(bed, "thc", 2, PROBE_SIZE, job_id=1, stall_timeout=90)
        fix32 = probe(bed, "fix32", 1, PROBE_SIZE, job_id=2, stall_timeout=90)
    assert_thc_probes_exact(thc, 2, PROBE_SIZE)
    assert_fix32_probes_exact(fix32, 1, PROBE_SIZE)
