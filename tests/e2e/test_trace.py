"""`thc-run --trace` on Mininet: two jobs of two workers that overlap in time, under the shared pool with a
pool of no cells, so that every round of both jobs falls back to the fallback server thc-run starts; both
jobs train to their end, and the summary counts every round as fallen back (the switch's POOL_TAKEN per job)."""

import json

from tests.support.e2e import mininet_marks, run_to_end

pytestmark = mininet_marks()

STEPS = 3


def test_a_trace_whose_rounds_all_fall_back_trains_every_job_to_its_end(tmp_path):
    jobs = [
        {"name": "a", "start": 0, "model": "mlp-digits", "workers": 2, "mode": "thc", "steps": STEPS, "compute": 0},
        {"name": "b", "start": 0.5, "model": "mlp-digits", "workers": 2, "mode": "fix32", "steps": STEPS, "compute": 0},
    ]
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"jobs": jobs}))
    logs = tmp_path / "logs"
    code, output = run_to_end("star4_ps.json", logs, "--trace", str(trace), "--policy", "pool", "--pool-cells", "0")
    assert code == 0, output
    summary = json.loads((logs / "summary.json").read_text())
    assert [r["name"] for r in summary["jobs"]] == ["a", "b"] and summary["policy"] == "pool"
    for row in summary["jobs"]:
        assert row["uses"] > 0 and row["fallbacks"] == row["uses"], row  # no cell: every round fell back
        assert row["completion_s"] > 0 and row["final_metric"] is not None and row["refusals"] == []
        assert row["replicas_agree"] is True and row["setup_s"] > 0  # the fallback server's sums reached both
        assert all((logs / "trace" / row["name"] / row["mode"] / f"{host}.json").exists() for host in row["hosts"])
    assert summary["fallback_share"] == 1.0 and summary["cells"] == 0 and summary["replicas_differ"] == []
    assert (logs / "occupancy.png").stat().st_size > 0
    assert "pool: mean completion" in output
