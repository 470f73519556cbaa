"""A worker killed mid-run on the default star (4 workers): `thc-run --kill h3:50` sends SIGKILL to h3
once it reports step 50 of 150. THC and FIX32 finish the run with the 3 survivors, re-admitted as a new
job, and the summary records the failure; gloo's all-reduce needs every rank, so there the run ends with
an error that says so. Either way nothing of the run is left behind."""

import json

from tests.support.e2e import mininet_marks, run_to_end

pytestmark = mininet_marks()


def thc_run(log_dir, *extra: str) -> tuple[int, str]:
    return run_to_end("star4.json", log_dir, "--steps", "150", "--kill", "h3:50", *extra)


def test_thc_and_fix32_finish_with_the_survivors(tmp_path):
    code, output = thc_run(tmp_path, "--modes", "thc,fix32")
    assert code == 0, output
    summary = json.loads((tmp_path / "summary.json").read_text())
    for mode in summary["modes"]:
        assert mode["workers"] == 3 and mode["steps"] == 150, mode["mode"]
        (failure,) = mode["failures"]
        assert failure["host"] == "h3" and failure["rank"] == 2 and failure["signal"] == "SIGKILL", failure
        assert failure["injected"] and failure["step"] >= 50 and failure["workers"] == 3, failure
        assert failure["job_id"] != failure["old_job_id"], failure
        assert 0 <= failure["readmitted_s"] <= failure["recovered_s"], failure
        # the survivors trained every step, and data parallel: they end with the same model
        records = [json.loads((tmp_path / mode["mode"] / f"{h}.json").read_text()) for h in ("h1", "h2", "h4")]
        assert all(len(r["steps"]) == 150 and r["workers_at_end"] == 3 for r in records)
        assert len({r["final_test_acc"] for r in records}) == 1
        assert all(r["aggregator"]["rejoins"][0]["job_id"] == failure["job_id"] for r in records)
        assert not (tmp_path / mode["mode"] / "h3.json").exists()
    assert "[3 left]" in output and "worker h3 (rank 2) killed by an injected failure (SIGKILL)" in output


def test_gloo_stops_with_a_clear_error(tmp_path):
    code, output = thc_run(tmp_path, "--modes", "gloo")
    assert code != 0, output
    assert "worker h3 (rank 2): killed by signal 9 (a worker failure stops this mode" in output
