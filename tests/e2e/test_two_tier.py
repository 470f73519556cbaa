"""End to end on two switches: h1,h2 - s1 - s2 - h3,h4 with s2 aggregating. h1's and h2's requests and
results cross s1 as ordinary IPv4 (forwarded, never aggregated there), and every worker still gets the
exact THC aggregate."""

import math

from contract.job import JobSpec
from tests.support.e2e import assert_thc_probes_exact, mininet_marks, served
from topologies.workers import WorkerOptions

pytestmark = mininet_marks()

PROBE_SIZE = 2000


def test_two_tier_aggregates_exactly(tmp_path):
    with served("two_tier.json", tmp_path) as bed:
        assert bed.topo.aggregation.switch == "s2"
        probes = bed.run_workers(
            WorkerOptions(mode="thc", steps=0, probe_rounds=2, probe_size=PROBE_SIZE, switch_timeout=20),
            stall_timeout=60,
        )
        events = bed.last_switch_events
    assert_thc_probes_exact(probes, 2, PROBE_SIZE)
    # workers x (barrier + rounds x (norm + one THC request per cell)); 2000 coordinates fit one chunk
    per_round = 1 + math.ceil(PROBE_SIZE / JobSpec(job_id=1, workers=4).coords_per_request)
    requests = 4 * (1 + 2 * per_round)
    assert events["s2"]["CONSUMED"] + events["s2"]["COMPLETED"] == requests
    assert events["s1"]["CONSUMED"] + events["s1"]["COMPLETED"] == 0
    # s1 forwards h1's and h2's requests up and the results for them down
    assert events["s1"]["FORWARDED"] >= requests // 2 + 2 * events["s2"]["COMPLETED"]
