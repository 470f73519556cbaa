"""Two-level aggregation end to end: `thc-run --topo topologies/leaf_spine8.json` trains mlp-digits in THC
mode through two leaves (s1: h1-h4, s2: h5-h8) and the spine s0. Every worker ends with the same
parameters (their SHA-256 digests are equal), each leaf sent one PARTIAL per completed use that the spine
counted once, and the spine's results reached the workers through the leaves. With `--kill` a dead
worker's survivors are re-admitted on both levels and finish the run."""

import json

from tests.support.e2e import mininet_marks, run_to_end

pytestmark = mininet_marks()

STEPS = 40


def thc_run(log_dir, *extra: str) -> tuple[int, str]:
    return run_to_end("leaf_spine8.json", log_dir, "--modes", "thc", "--steps", str(STEPS), *extra)


def test_eight_workers_train_through_two_levels(tmp_path):
    code, output = thc_run(tmp_path)
    assert code == 0, output
    (mode,) = json.loads((tmp_path / "summary.json").read_text())["modes"]
    assert (mode["workers"], mode["steps"]) == (8, STEPS)
    records = [json.loads((tmp_path / "thc" / f"h{i}.json").read_text()) for i in range(1, 9)]
    assert len({r["parameter_sha256"] for r in records}) == 1
    events = mode["events_by_switch"]
    spine, leaves = events["s0"], [events["s1"], events["s2"]]
    # every use a leaf completed went up as one PARTIAL, counted once at the spine, which completes a use
    # when both leaves' partials are in and sends the result down, where each leaf fans it out
    assert spine["COMPLETED"] > 0
    assert spine["CONSUMED"] + spine["COMPLETED"] == sum(leaf["COMPLETED"] for leaf in leaves)
    assert spine["CONSUMED"] == spine["COMPLETED"]
    assert all(leaf["FANNED_OUT"] >= spine["COMPLETED"] for leaf in leaves)
    assert all(leaf["CONSUMED"] == 3 * leaf["COMPLETED"] for leaf in leaves)  # four workers per leaf
    assert "two-level aggregation: leaves s1 at 10.0.0.251, s2 at 10.0.0.252" in output


def test_a_killed_worker_leaves_seven_that_finish_on_both_levels(tmp_path):
    code, output = thc_run(tmp_path, "--kill", "h6:15")
    assert code == 0, output
    (mode,) = json.loads((tmp_path / "summary.json").read_text())["modes"]
    assert (mode["workers"], mode["steps"]) == (7, STEPS)
    (failure,) = mode["failures"]
    assert failure["host"] == "h6" and failure["workers"] == 7 and failure["job_id"] != failure["old_job_id"]
    survivors = [f"h{i}" for i in range(1, 9) if i != 6]
    records = [json.loads((tmp_path / "thc" / f"{h}.json").read_text()) for h in survivors]
    assert all(r["workers_at_end"] == 7 and len(r["steps"]) == STEPS for r in records)
    assert len({r["parameter_sha256"] for r in records}) == 1
