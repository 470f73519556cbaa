"""Parameter servers in Mininet (star4_ps: four workers, one switch that only forwards, server hosts p1..p4):
THC and FIX32 rounds summed by one dedicated server, by four dedicated shards and by four shards colocated
with the workers are thc's reference bit for bit, also under loss; and training through one server or
through colocated shards ends on every rank with the parameters that training through the switch ends with.

One network serves the module; each run starts its placement's servers and programs them afresh.
"""

import json

import pytest

from contract.job import JobSpec
from tests.support import e2e
from tests.support.e2e import assert_fix32_probes_exact, assert_thc_probes_exact, mininet_marks, served
from topologies.workers import WorkerOptions

pytestmark = mininet_marks()

PROBE_SIZE = 5000  # chunks of 2048, 2048 and 904: three shards of four have THC chunks to sum


@pytest.fixture(scope="module")
def star(tmp_path_factory):
    with served("star4_ps.json", tmp_path_factory.mktemp("star_ps")) as bed:
        yield bed


def probe(bed, mode: str, rounds: int = 1):
    return e2e.probe(bed, mode, rounds, PROBE_SIZE)


def aggregated(events: dict) -> int:
    return events["CONSUMED"] + events["COMPLETED"]


def test_one_dedicated_server_sums_exactly_and_the_switch_only_forwards(star):
    probes = probe(star, "thc-ps:dedicated1")
    assert_thc_probes_exact(probes, 1, PROBE_SIZE)
    events = star.last_switch_events
    # 4 workers x (barrier norm + one NORM request of the 3 chunk norms + 5 THC requests), one result per
    # slot, all on p1's server
    assert aggregated(events["dedicated1-p1"]) == 4 * 7 and events["dedicated1-p1"]["COMPLETED"] == 7
    assert aggregated(events["s1"]) == 0 and events["s1"]["FORWARDED"] >= 2 * 4 * 7
    assert star.last_busiest.link == "p1-s1" and star.last_busiest.direction == "from p1"  # n results per cell


def test_colocated_shards_sum_exactly_under_loss(star):
    star.set_loss(2)
    try:
        probes = probe(star, "thc-ps:colocated4", rounds=3)
    finally:
        star.set_loss(0)
    assert_thc_probes_exact(probes, 3, PROBE_SIZE)
    # about 430 frames cross a lossy link twice or more: some were lost and sent again
    assert sum(json.loads(p["stats"].item())["retransmissions"] for p in probes) >= 1
    events = star.last_switch_events
    served = [name for name in events if name.startswith("colocated4-") and events[name]["COMPLETED"]]
    assert served == ["colocated4-h1", "colocated4-h2", "colocated4-h3"]  # chunk j on shard j mod 4


def test_fix32_through_four_dedicated_shards_is_exact(star):
    probes = probe(star, "fix32-ps:dedicated4")
    assert_fix32_probes_exact(probes, 1, PROBE_SIZE)
    assert all(star.last_switch_events[f"dedicated4-p{i}"]["COMPLETED"] for i in range(1, 5))  # a piece each


def test_training_through_servers_ends_with_the_switchs_parameters(star):
    digests = {}
    for mode in ("thc", "thc-ps:dedicated1", "thc-ps:colocated4"):
        records = star.run_workers(WorkerOptions(mode, steps=30, spec=JobSpec(job_id=2, workers=4), switch_timeout=20))
        digests[mode] = {r["parameter_sha256"] for r in records}
        assert len(records) == 4 and len(digests[mode]) == 1, (mode, digests[mode])
        assert star.last_busiest is not None and star.last_busiest.bytes_per_step > 0
    assert len(set.union(*digests.values())) == 1, digests  # the same sums wherever they were made
