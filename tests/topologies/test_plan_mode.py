"""thc-run --modes plan without Mininet: the mode is offered, probes become the planner's modes, and the plan
file the runner writes is the one thc-worker --mode plan reads."""

import json

import pytest

from ddp import mixed
from planner import testbed_costs
from planner.timeline import Bucket, StepProfile
from topologies import runner


def probes(costs_ms):
    return [
        {"mode": mode, "size": size, "seconds": ms * 1e-3}
        for mode, points in costs_ms.items()
        for size, ms in points.items()
    ]


def test_plan_is_a_mode_the_runner_takes_beside_the_uniform_ones():
    assert runner.parse_modes("thc,gloo,plan") == ["thc", "gloo", "plan"]


def test_probes_become_non_blocking_modes_and_the_plan_follows_them(tmp_path):
    """THC is cheap at the big bucket, gloo at the small one (its round trip is shorter): the plan mixes,
    and its file reads back as ddp.mixed's plan."""
    measured = probes(
        {
            "thc": {256: 4.0, 32768: 20.0},
            "fix32": {256: 4.0, 32768: 90.0},
            "gloo": {256: 1.0, 32768: 150.0},
        }
    )
    modes = testbed_costs.probe_modes(measured)
    assert set(modes) == set(testbed_costs.PROBED_MODES) and not any(m.blocking for m in modes.values())
    assert modes["thc"].comm_s(32768) == pytest.approx(0.020)
    step = StepProfile((Bucket(0, 256, 0.001), Bucket(1, 32768, 0.002)), forward_s=0.001, backward_s=0.002)
    plan = testbed_costs.planner.best_plan(step, modes)
    assert plan.modes == {0: "gloo", 1: "thc"}
    path = testbed_costs.write_plan(plan, tmp_path / "plan.json", note="x")
    assert mixed.load_plan(json.loads(path.read_text())) == {0: "gloo", 1: "thc"}


def test_a_mode_without_probes_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="no probe of mode 'gloo'"):
        testbed_costs.probe_modes(probes({"thc": {256: 1.0}, "fix32": {256: 1.0}}))


def test_a_mix_is_chosen_only_when_it_promises_more_than_the_margin():
    modes = testbed_costs.probe_modes(
        probes({"thc": {256: 4.0, 32768: 20.0}, "fix32": {256: 9.0, 32768: 90.0}, "gloo": {256: 1.0, 32768: 150.0}})
    )
    step = StepProfile((Bucket(0, 256, 0.001), Bucket(1, 32768, 0.002)), forward_s=0.001, backward_s=0.002)
    # the mix ends at 23 ms, all-THC at 26 ms: 11.5 % better
    assert testbed_costs.choose(step, modes, margin=0.05).modes == {0: "gloo", 1: "thc"}
    assert testbed_costs.choose(step, modes, margin=0.20).modes == {0: "thc", 1: "thc"}


def test_a_mix_must_still_win_with_its_modes_rounds_at_their_upper_quartile():
    """The same costs as above at the median; gloo's rounds at the small bucket spread (1 ms median, 9 ms
    upper quartile: a loaded machine). The mix wins at the medians but not at gloo's upper quartile, so the
    plan stays uniform; with rounds that do not spread the mix is kept."""
    costs = {"thc": {256: 4.0, 32768: 20.0}, "fix32": {256: 9.0, 32768: 90.0}, "gloo": {256: 1.0, 32768: 150.0}}
    spread = {("gloo", 256): [1.0, 1.0, 1.0, 9.0, 9.0]}
    measured = [
        dict(p, rounds_s=[x * 1e-3 for x in spread.get((p["mode"], p["size"]), [p["seconds"] * 1e3] * 5)])
        for p in probes(costs)
    ]
    step = StepProfile((Bucket(0, 256, 0.001), Bucket(1, 32768, 0.002)), forward_s=0.001, backward_s=0.002)
    modes = testbed_costs.probe_modes(measured)
    upper = testbed_costs.probe_modes(measured, quantile=testbed_costs.UPPER_QUANTILE)
    assert upper["gloo"].comm_s(256) == pytest.approx(0.009) and upper["thc"].comm_s(256) == pytest.approx(0.004)
    assert testbed_costs.choose(step, modes).modes == {0: "gloo", 1: "thc"}
    assert testbed_costs.choose(step, modes, upper=upper).modes == {0: "thc", 1: "thc"}
    assert testbed_costs.choose(step, modes, upper=modes).modes == {0: "gloo", 1: "thc"}


def test_thc_probes_with_phases_become_a_pipelined_mode():
    """Asked to (the testbed's model runs every mode's rounds one after another, PIPELINED_MODES), THC's
    early part (prepare + norm round) and when its sums go out (+ encode) come from the probe's phases,
    scaled with the mode; FIX32, whose hook does not pipeline, and a probe without phases stay plain."""
    phases = {"prepare_ms": 0.5, "norm_ms": 1.5, "encode_ms": 0.5, "sum_ms": 2.0, "decode_ms": 0.5}
    measured = [dict(p, phases_ms=phases) for p in probes({"thc": {256: 5.0}, "fix32": {256: 5.0}, "gloo": {256: 1.0}})]
    assert testbed_costs.probe_modes(measured)["thc"].pipeline_s(256) is None  # the testbed's model: serial
    modes = testbed_costs.probe_modes(measured, pipelined=("thc",))
    assert modes["thc"].pipeline_s(256) == (pytest.approx(0.002), pytest.approx(0.0025))
    assert modes["fix32"].pipeline_s(256) is None and modes["gloo"].pipeline_s(256) is None
    assert testbed_costs.scaled_mode(modes["thc"], 2.0).pipeline_s(256) == (pytest.approx(0.004), pytest.approx(0.005))
    without_phases = probes({"thc": {256: 5.0}, "fix32": {256: 5.0}, "gloo": {256: 1.0}})
    assert testbed_costs.probe_modes(without_phases, pipelined=("thc",))["thc"].pipeline_s(256) is None
    # two THC buckets ready together: the second's norm round runs during the first's sums (from 2.5 ms)
    step = StepProfile((Bucket(0, 256, 0.0), Bucket(1, 256, 0.0)), forward_s=0.0, backward_s=0.0)
    assert testbed_costs.planner.uniform(step, modes, "thc").iteration_s == pytest.approx(0.008)
    assert testbed_costs.planner.uniform(step, modes, "fix32").iteration_s == pytest.approx(0.010)


def test_a_plan_never_mixes_thc_and_fix32_buckets():
    """FIX32 is cheapest for the small bucket and THC for the big one, but the two alternating on one
    aggregator cost more than the model sees: the plan takes one switch op (here THC, with gloo)."""
    modes = testbed_costs.probe_modes(
        probes({"thc": {256: 6.0, 32768: 20.0}, "fix32": {256: 2.0, 32768: 90.0}, "gloo": {256: 4.0, 32768: 150.0}})
    )
    step = StepProfile((Bucket(0, 256, 0.001), Bucket(1, 32768, 0.002)), forward_s=0.001, backward_s=0.002)
    assert testbed_costs.planner.best_plan(step, modes).modes == {0: "fix32", 1: "thc"}
    assert testbed_costs.choose(step, modes).modes == {0: "gloo", 1: "thc"}


def test_the_contention_factor_is_the_one_under_which_the_model_predicts_the_measured_step():
    modes = testbed_costs.probe_modes(probes({"thc": {256: 4.0, 32768: 20.0}, "fix32": {256: 1.0}, "gloo": {256: 1.0}}))
    step = StepProfile((Bucket(0, 256, 0.001), Bucket(1, 32768, 0.002)), forward_s=0.001, backward_s=0.002)
    # as probed: bucket 0 from 2 to 6 ms, bucket 1 from 6 to 26 ms; with rounds x1.5: 2-8, 8-38 ms
    factor = testbed_costs.contention(step, modes["thc"], 0.038)
    assert factor == pytest.approx(1.5, rel=1e-6)
    assert testbed_costs.contention(step, modes["thc"], 0.001) == 0.25  # a step faster than any factor gives


def test_a_runs_step_is_the_median_over_steps_of_the_mean_over_ranks():
    ranks = [{"steps": [{"step_time": t} for t in times]} for times in ([1, 1, 9, 3, 5], [3, 3, 1, 5, 7])]
    assert testbed_costs.median_step_s(ranks, warmup=1) == pytest.approx(4.5)  # means 2, 5, 4, 6 after step 1
