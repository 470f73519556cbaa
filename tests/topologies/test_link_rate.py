"""--bw auto: the link rate that makes gloo's all-reduce the given share of its step, from a measured compute
time; and the verdict under the summary table that says how bandwidth-bound gloo really was."""

import pytest

from host_agent import workloads
from topologies import link_rate, report


def test_the_ring_all_reduce_moves_2_n_minus_1_over_n_gradients_per_worker():
    framed = 4 * 1000 * link_rate.TCP_FRAMING
    assert link_rate.gloo_bytes_per_step(1000, 4) == pytest.approx(1.5 * framed)
    assert link_rate.gloo_bytes_per_step(1000, 2) == pytest.approx(framed)
    assert link_rate.gloo_bytes_per_step(1000, 1) == 0  # one worker: nothing to exchange


def test_the_rate_gives_gloo_at_least_the_share_asked_for():
    for parameters, compute_ms in ((38_282, 5.0), (102_090, 7.0), (2_410, 0.4), (826_722, 80.0)):
        for share in (0.6, 0.75, 0.9):
            choice = link_rate.choose(parameters, 4, compute_ms, 2, share)
            assert choice.mbit == int(choice.mbit) and link_rate.MIN_MBIT <= choice.mbit <= link_rate.MAX_MBIT
            assert choice.compute_wall_ms == pytest.approx(2 * compute_ms)  # 4 workers share 2 cores
            if link_rate.MIN_MBIT < choice.mbit < link_rate.MAX_MBIT:
                assert choice.share >= share  # rounded down: never less bandwidth-bound than asked
                comm = choice.gloo_bytes * 8 / ((choice.mbit + 1) * 1e3)  # and the next whole rate would be
                assert comm / (comm + choice.compute_wall_ms) < share


def test_a_slower_cpu_gets_slower_links():
    slow_cpu = link_rate.choose(38_282, 4, 20.0, 2)
    fast_cpu = link_rate.choose(38_282, 4, 2.0, 2)
    assert slow_cpu.mbit < fast_cpu.mbit


def test_the_choice_says_what_it_measured():
    text = link_rate.choose(38_282, 4, 5.0, 2).describe(4, 2)
    assert "--bw auto" in text and "5.0 ms per worker" in text and "4 workers on 2 cores" in text


def test_a_share_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="share 1"):
        link_rate.choose(1000, 4, 1.0, 2, share=1)


def test_the_compute_time_is_measured_on_the_real_model(one_torch_thread):
    assert 0 < link_rate.measure_compute_ms("mlp-digits", steps=3, warmup=1) < 10_000
    with pytest.raises(workloads.UnknownModel):
        link_rate.measure_compute_ms("resnet")


def _row(mode, tta, step_ms=100.0, aggregation_ms=50.0, acc=0.97):
    return report.ModeSummary(
        mode, 4, 200, 1000, acc, 0.95, tta, 10.0, step_ms, aggregation_ms, 1.0, 1.0, 1.0, 0, {}, final_metric=acc
    )


def test_the_verdict_gives_gloos_share_and_thcs_speedups():
    rows = [_row("thc", 10.0), _row("fix32", 15.0), _row("gloo", 12.0, step_ms=100.0, aggregation_ms=85.0)]
    gloo_line, thc_line = report.verdict_lines(rows)
    assert gloo_line.startswith("gloo's communication: 85% of its step") and "bandwidth-bound" in gloo_line
    assert "reached 95% accuracy in 10.0 s" in thc_line
    assert "1.50x FIX32 via switch (15.0 s" in thc_line and "1.20x gloo all-reduce (12.0 s" in thc_line
    rows = [_row("thc", None), _row("gloo", 12.0, aggregation_ms=30.0)]
    gloo_line, thc_line = report.verdict_lines(rows)
    assert "not bandwidth-bound" in gloo_line and thc_line == "THC via switch did not reach 95% accuracy in 200 steps"


def test_a_busy_machine_does_not_stretch_the_run_past_its_budget():
    unhurried = link_rate.choose(38_282, 4, 18.0, 2)  # a loaded machine measures a slow step
    budgeted = link_rate.choose(38_282, 4, 18.0, 2, steps=200, budget_s=45.0)
    assert budgeted.mbit > unhurried.mbit and budgeted.raised_for_budget
    assert budgeted.gloo_comm_ms * 200 <= 45_000 and "time budget" in budgeted.describe(4, 2)
    quiet = link_rate.choose(38_282, 4, 2.0, 2, steps=200, budget_s=45.0)
    assert not quiet.raised_for_budget and quiet.mbit == link_rate.choose(38_282, 4, 2.0, 2).mbit
