"""bench_pool.py --trained: the trace it trains (topologies/trace_bench.json) is one thc-run takes and
contends for the switch's memory, and its figures are computed from thc-run --trace's summaries as said;
the runs themselves need Mininet (root) and are not made here."""

import dataclasses

import pytest

import contract
from bench import bench_pool
from host_agent import workloads
from topologies import job_trace, report, trace_run
from topologies.trace_schedule import Schedule


def test_the_benchmark_trace_is_one_thc_run_takes_and_more_jobs_than_fit_statically():
    trace = job_trace.load(bench_pool.TRAINED_TRACE, models=workloads.names(), modes=trace_run.MODES)
    assert {(j.model, j.workers, j.mode) for j in trace} == {("mlp-digits", 2, "thc")}
    starts = [j.start for j in trace]
    assert starts == sorted(set(starts)) and starts[0] == 0  # staggered: no two jobs arrive together
    fit = contract.SLOTS // bench_pool.TRAINED_SLOTS
    assert 1 <= fit < len(trace)  # statically only some fit at once
    hosts = [f"h{i}" for i in range(1, sum(j.workers for j in trace) + 1)]  # thc-run's default --workers
    schedule = Schedule(trace, hosts, str(bench_pool.TRAINED_TRACE))
    assert [j.job_id for j in schedule.jobs] == list(range(1, len(trace) + 1))


def test_the_busy_trace_is_the_benchmark_trace_without_a_steps_own_work():
    """The default trace's steps have work of their own (cells a pool job gives back meanwhile); the busy one
    is the same jobs with none, as docs/results.md says."""
    load = lambda path: job_trace.load(path, models=workloads.names(), modes=trace_run.MODES)  # noqa: E731
    trace, busy = load(bench_pool.TRAINED_TRACE), load(bench_pool.TRAINED_TRACE.with_name("trace_bench_busy.json"))
    assert all(j.compute > 0 for j in trace) and all(j.compute == 0 for j in busy)
    assert [dataclasses.replace(j, compute=0) for j in trace] == list(busy)


def test_the_command_is_thc_run_trace_with_the_policy_slots_and_rate(tmp_path):
    command = bench_pool.trained_command(bench_pool.TRAINED_TRACE, "pool", 512, 2.5, tmp_path / "pool")
    assert command[1:3] == ["-m", "topologies.runner"]
    flags = {flag: command[i + 1] for i, flag in enumerate(command) if flag != "--no-pcap" and flag.startswith("--")}
    assert flags["--trace"] == str(bench_pool.TRAINED_TRACE) and flags["--policy"] == "pool"
    assert (flags["--slots"], flags["--bw"], flags["--log-dir"]) == ("512", "2.5", str(tmp_path / "pool"))
    assert flags["--window"] == str(bench_pool.TRAINED_WINDOW) and "--no-pcap" in command


def job(name, arrived, started, finished, tta, agree=True):
    return {"name": name, "arrived_s": arrived, "started_s": started, "finished_s": finished,
            "wait_s": started - arrived, "completion_s": finished - arrived, "time_to_target_s": tta,
            "train_s": finished - started - 2, "setup_s": 1.5, "final_metric": 0.95,
            "replicas_agree": agree}  # fmt: skip


def summary(policy, jobs, fallbacks=0, uses=None):
    completion = [j["completion_s"] for j in jobs]
    return {
        "policy": policy,
        "jobs": jobs,
        "mean_completion_s": sum(completion) / len(completion),
        "p95_completion_s": max(completion),
        "fallbacks": fallbacks,
        "uses": uses,
        "fallback_share": fallbacks / uses if uses else 0.0,
        "cells": contract.CELLS,
        "occupancy": [[0.0, 0], [0.5, 1024], [1.0, 2048], [1.5, 0]],
        "replicas_differ": [j["name"] for j in jobs if j["replicas_agree"] is False],  # as trace_run sums it up
    }


STATIC = summary("static", [job("a", 0, 0, 10, 4.0), job("b", 4, 4, 14, 4.0), job("c", 8, 10, 22, 5.0)])
POOL = summary("pool", [job("a", 0, 0, 10, 4.0), job("b", 4, 4, 15, None), job("c", 8, 8, 19, 5.0, agree=False)], 3, 60)


def test_a_policys_figures_from_its_summary():
    f = bench_pool.trained_summary(STATIC)
    assert f["mean_jct_s"] == pytest.approx((10 + 10 + 14) / 3)
    assert f["mean_wait_s"] == pytest.approx(2 / 3)
    assert (f["mean_run_s"], f["mean_train_s"]) == (pytest.approx(32 / 3), pytest.approx(26 / 3))
    assert (f["unreached"], f["replicas_differ"], f["uses"], f["peak_cells"]) == ([], [], None, 2048)
    assert f["jobs"]["c"] == {"arrived_s": 8, "started_s": 10, "finished_s": 22, "time_to_target_s": 5.0,
                              "final_metric": 0.95}  # fmt: skip
    line = bench_pool.trained_line("static", f)
    assert "every job reached its target" in line and "mean run  10.7 s (setup  1.5 s, training   8.7 s)" in line
    p = bench_pool.trained_summary(POOL)
    assert (p["unreached"], p["replicas_differ"], p["fallback_share"]) == (["b"], ["c"], 3 / 60)
    line = bench_pool.trained_line("pool", p)
    assert "target missed by b" in line and "5.0% (3/60 uses)" in line and "models differ: 1" in line


def test_the_ratio_and_the_floors_lines():
    static, pool = bench_pool.trained_summary(STATIC), bench_pool.trained_summary(POOL)
    ratio, lines = bench_pool.trained_verdict({"static": static, "pool": pool})
    assert ratio == pytest.approx(((10 + 11 + 11) / 3) / ((10 + 10 + 14) / 3))
    assert lines[0].endswith(f"missed ({ratio:.3f})")
    assert lines[1] == "floor: every job reaches its target: missed (b)"
    assert lines[2].endswith("models differ: c")
    faster = dict(pool, mean_jct_s=0.75 * static["mean_jct_s"], unreached=[], replicas_differ=[])
    ratio, lines = bench_pool.trained_verdict({"static": static, "pool": faster})
    assert ratio == pytest.approx(0.75) and "met" in lines[0] and lines[1].endswith("met")
    assert lines[2].endswith("models differ: 0")


@pytest.mark.parametrize("flag", ["--quick", "--contention"])
def test_trained_refuses_the_in_process_runs_options(flag, capsys):
    with pytest.raises(SystemExit):
        bench_pool.parse_args(["--trained", flag])
    assert "--trained" in capsys.readouterr().err


def test_a_policy_over_several_runs():
    first = bench_pool.trained_summary(POOL)
    later = bench_pool.trained_summary(summary("pool", [job("a", 0, 0, 12, 4.0), job("b", 4, 4, 10, 3.0),
                                                        job("c", 8, 8, 20, 5.0)], 1, 60))  # fmt: skip
    both = bench_pool.trained_combine([first, later])
    assert both["mean_jct_s"] == pytest.approx((first["mean_jct_s"] + later["mean_jct_s"]) / 2)
    assert both["mean_setup_s"] == 1.5 and both["runs"] == 2
    assert both["p95_jct_s"] == pytest.approx(report.percentile95([10, 11, 11, 12, 6, 12]))
    assert (both["fallbacks"], both["uses"], both["fallback_share"]) == (4, 120, 4 / 120)
    assert (both["unreached"], both["replicas_differ"]) == (["b (run 1)"], ["c (run 1)"])
    static = bench_pool.trained_combine([bench_pool.trained_summary(STATIC)] * 2)
    assert (static["uses"], static["fallback_share"], static["peak_cells"]) == (None, 0.0, 2048)
    ratio, _ = bench_pool.trained_verdict({"static": static, "pool": both})
    assert ratio == pytest.approx(both["mean_jct_s"] / static["mean_jct_s"])


def test_repeat_is_a_count_of_runs(capsys):
    assert bench_pool.parse_args(["--trained", "--repeat", "3"]).repeat == 3
    with pytest.raises(SystemExit):
        bench_pool.parse_args(["--trained", "--repeat", "0"])
