"""The timeline simulator on hand-built steps whose answer is known, the planner against brute force, the
cost models' packet arithmetic, profile files, and the shape-only models."""

import itertools
import json
import random

import pytest

import planner
from planner import models_zoo, plan_cli, profiles
from planner.timeline import (
    AllGatherCost,
    Bucket,
    INACost,
    LinearCost,
    MeasuredCost,
    Mode,
    RingCost,
    StepProfile,
    simulate,
)


class Fixed:
    """A communication that takes ``seconds`` whatever the size."""

    def __init__(self, seconds):
        self.s = seconds

    def seconds(self, numel):
        return self.s


def mode(name, comm_s, enc=0.0, dec=0.0, blocking=False):
    return Mode(name, Fixed(comm_s), LinearCost(enc), LinearCost(dec), blocking=blocking)


def test_one_bucket_ready_at_the_end_is_not_overlapped():
    step = StepProfile((Bucket(0, 100, 0.010),), forward_s=0.005, backward_s=0.010, optimizer_s=0.002)
    tl = simulate(step, mode("m", 0.004, enc=0.001, dec=0.0005))
    assert tl.iteration_s == pytest.approx(0.005 + 0.010 + 0.001 + 0.004 + 0.0005 + 0.002)
    assert tl.exposed_comm_s == pytest.approx(0.001 + 0.004 + 0.0005)


def test_no_overlap_when_every_mode_blocks():
    """Blocking hooks hold the backward pass: the step is compute plus every bucket's whole cost."""
    buckets = tuple(Bucket(i, 10, 0.002 * (i + 1)) for i in range(3))
    step = StepProfile(buckets, forward_s=0.001, backward_s=0.008)
    tl = simulate(step, mode("m", 0.003, enc=0.0005, dec=0.0005, blocking=True))
    assert tl.iteration_s == pytest.approx(0.001 + 0.008 + 3 * 0.004)
    assert tl.backward_end_s == pytest.approx(tl.iteration_s)


def test_full_overlap_hides_communication_behind_the_backward_pass():
    buckets = tuple(Bucket(i, 10, 0.001 * i) for i in range(4))  # ready at 0, 1, 2, 3 ms of 10
    step = StepProfile(buckets, forward_s=0.002, backward_s=0.010, optimizer_s=0.001)
    tl = simulate(step, mode("m", 0.0009))
    assert tl.iteration_s == pytest.approx(0.002 + 0.010 + 0.001)
    assert tl.bucket_done_s[3] == pytest.approx(0.002 + 0.003 + 0.0009)


def test_communications_queue_on_the_network_in_hook_order():
    """Two buckets ready together: the second waits for the first; the step ends when it is decoded."""
    step = StepProfile((Bucket(0, 10, 0.0), Bucket(1, 10, 0.0)), forward_s=0.0, backward_s=0.001)
    tl = simulate(step, [mode("a", 0.004), mode("b", 0.002, dec=0.001)])
    assert tl.bucket_done_s == {0: pytest.approx(0.004), 1: pytest.approx(0.007)}
    assert tl.iteration_s == pytest.approx(0.007)


def piped(name, comm_s, early_s, sums_at_s):
    """A pipelined round (ddp.aggregator_hooks's THC hook): its early part may overlap the previous one's sums."""
    return Mode(name, Fixed(comm_s), early=Fixed(early_s), sums_at=Fixed(sums_at_s))


def test_a_pipelined_round_starts_its_norm_round_while_the_previous_sums_are_out():
    """Bucket 1's early part (preparation, norm round) runs from when bucket 0's sums go out (2 ms), its
    rest once the network is free (4 ms): 6.5 ms, not 8. After a round that is not pipelined, or as the
    first bucket, nothing overlaps."""
    step = StepProfile((Bucket(0, 10, 0.0), Bucket(1, 10, 0.0)), forward_s=0.0, backward_s=0.001)
    thc = piped("thc", 0.004, early_s=0.0015, sums_at_s=0.002)
    tl = simulate(step, thc)
    assert tl.bucket_done_s == {0: pytest.approx(0.004), 1: pytest.approx(0.0065)}
    assert [(s.what, s.start_s) for s in tl.segments if s.lane == "network"] == [
        ("b0 early thc", 0.0),
        ("b0 thc", pytest.approx(0.0015)),
        ("b1 early thc", pytest.approx(0.002)),
        ("b1 thc", pytest.approx(0.004)),
    ]
    assert simulate(step, [mode("fix32", 0.004), thc]).bucket_done_s[1] == pytest.approx(0.008)
    assert simulate(step, [thc, mode("fix32", 0.004)]).bucket_done_s[1] == pytest.approx(0.008)


def test_a_pipelined_round_needs_both_of_its_parts():
    with pytest.raises(ValueError, match="early and sums_at"):
        Mode("thc", Fixed(0.004), early=Fixed(0.001))


def test_encoding_delays_the_rest_of_the_backward_pass():
    step = StepProfile((Bucket(0, 10, 0.001),), forward_s=0.0, backward_s=0.005)
    tl = simulate(step, mode("m", 0.0, enc=0.002))
    assert tl.backward_end_s == pytest.approx(0.007)


def test_a_plan_must_name_every_bucket():
    step = StepProfile((Bucket(0, 10, 0.0), Bucket(1, 10, 0.0)), 0.0, 0.001)
    with pytest.raises(ValueError, match="bucket"):
        simulate(step, {0: mode("m", 0.001)})


def test_ina_packets_and_bytes_follow_the_p4_program():
    cost = INACost(link_bps=1e9, workers=4, switch_pps=1e9, rtt_s=0.0)
    assert cost.packets(2410) == (1, 2 + 1)  # 2048 + 512 padded: two chunks' norms in one NORM request; 3 cells
    assert cost.packets(17 * 2048) == (2, 34)  # 17 norms: 16 a NORM request
    assert cost.frame_bytes() == (574, 1086)  # p4/README.md, "Cells": 1,024 coordinates in 8-bit lanes
    sixteen = INACost(1e9, 16, 1e9, 0.0)  # n·g = 480 > 255: 16-bit lanes, 512 coordinates a request
    assert sixteen.frame_bytes() == (574, 1086) and sixteen.packets(2410) == (1, 4 + 1)  # 256 bytes of padding
    fix = INACost(1e9, 4, 1e9, 0.0, op="fix32")
    assert fix.packets(2410) == (1, 10) and fix.frame_bytes() == (1086, 1086)


def test_ina_time_is_bounded_by_the_slowest_resource():
    link = INACost(link_bps=8e6, workers=4, switch_pps=1e12, rtt_s=0.001, window=1024)
    norms, data = link.packets(1024 * 100)
    assert link.seconds(102400) == pytest.approx(0.001 + norms * 126 / 1e6 + 0.001 + data * 1086 / 1e6)
    switch = INACost(link_bps=1e12, workers=4, switch_pps=1000, rtt_s=0.0, window=1024)
    assert switch.seconds(102400) == pytest.approx(4 * (norms + data) / 1000)
    window = INACost(link_bps=1e12, workers=4, switch_pps=1e12, rtt_s=0.001, window=10)
    # 50 norms (2048-coordinate chunks) in 4 NORM requests, one window, then 100 cells in 10: a round trip
    # per window
    assert norms == 4
    assert window.seconds(102400) == pytest.approx(0.001 + (0.001 + 0.001 * 9))


def test_ring_and_allgather_costs():
    ring = RingCost(link_bps=8e9, workers=4, alpha_s=1e-5)
    assert ring.seconds(1_000_000) == pytest.approx(6 * 1e-5 + 1.5 * 4e6 / 1e9)
    gather = AllGatherCost(link_bps=8e9, workers=4, alpha_s=1e-5, bytes_per_coord=0.5)
    assert gather.seconds(1_000_000) == pytest.approx(3 * 1e-5 + 3 * 0.5e6 / 1e9)


def random_case(rng, buckets):
    step = StepProfile(
        tuple(Bucket(i, rng.randint(1, 10) * 1000, rng.uniform(0, 0.01)) for i in range(buckets)),
        forward_s=rng.uniform(0, 0.005),
        backward_s=0.01,
        optimizer_s=0.001,
    )
    modes = {
        "ring": Mode("ring", RingCost(rng.uniform(1e8, 1e10), 4, rng.uniform(0, 1e-3))),
        "fast": Mode(
            "fast",
            RingCost(rng.uniform(1e9, 1e11), 4, 1e-4),
            LinearCost(rng.uniform(0, 1e-3), 1e-8),
            LinearCost(rng.uniform(0, 1e-3)),
        ),
        "block": Mode("block", RingCost(1e11, 4, 1e-5), LinearCost(rng.uniform(0, 5e-4)), blocking=True),
        "piped": Mode(
            "piped",
            RingCost(rng.uniform(1e8, 1e10), 4, rng.uniform(0, 1e-3)),
            early=Fixed(rng.uniform(0, 2e-3)),
            sums_at=Fixed(rng.uniform(0, 3e-3)),
        ),
    }
    return step, modes


def optimal_plans(step, modes):
    """Every plan whose simulated step is the shortest (brute force: all |modes|^buckets of them)."""
    indices = [b.index for b in step.buckets]
    times = {
        combo: simulate(step, {i: modes[n] for i, n in zip(indices, combo)}).iteration_s
        for combo in itertools.product(modes, repeat=len(indices))
    }
    best = min(times.values())
    return best, [dict(zip(indices, c)) for c, t in times.items() if t <= best * (1 + 1e-9)]


@pytest.mark.parametrize("seed", range(40))
def test_the_search_picks_a_plan_the_exhaustive_search_finds_best(seed):
    """The pruned search is exact, not a heuristic: on random small steps its plan is one of the optimal
    plans brute force finds (ties happen: modes equal on a bucket), and it says so."""
    rng = random.Random(seed)
    step, modes = random_case(rng, rng.randint(1, 6))
    best, optimal = optimal_plans(step, modes)
    found = planner.best_plan(step, modes)
    assert found.exact
    assert found.modes in optimal, (found.modes, optimal)
    assert found.iteration_s == pytest.approx(best, rel=1e-9)
    assert planner.brute_force(step, modes).iteration_s == pytest.approx(best, rel=1e-9)


def test_the_search_prunes_most_partial_timelines():
    """Seven buckets, three modes: 3^7 = 2,187 plans; the search builds far fewer partial timelines than
    brute force simulates buckets (2,187 x 7), and finds the same step."""
    rng = random.Random(7)
    step, modes = random_case(rng, 7)
    found = planner.best_plan(step, modes)
    exhaustive = planner.brute_force(step, modes)
    assert found.iteration_s == pytest.approx(exhaustive.iteration_s, rel=1e-9)
    assert found.evaluations < exhaustive.evaluations * len(step.buckets) / 10


def test_a_capped_front_still_gives_a_whole_plan_and_says_it_may_not_be_best():
    rng = random.Random(3)  # a step whose front holds several states after some bucket
    step, modes = random_case(rng, 6)
    capped = planner.best_plan(step, modes, max_front=1)
    assert not capped.exact
    assert set(capped.modes) == {b.index for b in step.buckets}
    assert capped.iteration_s >= planner.brute_force(step, modes).iteration_s * (1 - 1e-9)
    assert capped.iteration_s <= min(planner.uniform(step, modes, n).iteration_s for n in modes) * (1 + 1e-9)


def test_the_planner_compresses_only_where_it_pays():
    """A late bucket gains from a fast but costly mode; an early one is hidden anyway and keeps the
    cheap one (a blocking fast mode would cost it more than it saves)."""
    step = StepProfile((Bucket(0, 1000, 0.0), Bucket(1, 1000, 0.010)), forward_s=0.0, backward_s=0.010)
    modes = {"slow": mode("slow", 0.008), "fast": mode("fast", 0.001, enc=0.0005, blocking=True)}
    plan = planner.best_plan(step, modes)
    assert plan.modes == {0: "slow", 1: "fast"}
    assert plan.iteration_s == pytest.approx(planner.brute_force(step, modes).iteration_s)


# ---- profiles -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, field",
    [
        ({"workers": 1}, "'workers'"),
        ({"workers": "eight"}, "'workers'"),
        ({"link_gbps": -1}, "'link_gbps'"),
        ({"switch": {"packets_per_s": "fast"}}, "'switch.packets_per_s'"),
        ({"switch": {"lane_bits": 12}}, "'switch.lane_bits'"),
        ({"ring": {"efficiency": 1.5}}, "'ring.efficiency'"),
        ({"compute": {"gpu_flops": 10}}, "'compute.gpu_flops'"),
        ({"compression": {"thc": {"encode_us": -3}}}, "'compression.thc.encode_us'"),
        ({"colour": "red"}, "'colour'"),
    ],
)
def test_a_bad_profile_field_is_one_line_naming_it(tmp_path, capsys, change, field):
    data = {"workers": 8, "link_gbps": 100, **change}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data))
    assert plan_cli.main(["project", "--profile", str(path), "--models", "mlp-digits"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("thc-plan: error: ") and field in err, err


def test_a_profile_file_that_is_not_json_is_one_line(tmp_path, capsys):
    path = tmp_path / "hw.json"
    path.write_text("workers: 8\n")
    assert plan_cli.main(["plan", "--profile", str(path), "--model", "mlp-digits"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not JSON at line 1" in err


def test_profile_fields_reach_the_cost_model():
    hw = profiles.parse_profile(
        {
            "workers": 4,
            "link_mbps": 10,
            "switch": {"packets_per_s": 5000, "rtt_us": 700, "window": 64, "blocking": True},
            "compression": {"thc": {"encode_us": 400, "encode_ns_per_coord": 60}},
        }
    )
    modes = profiles.modes_for(hw)
    thc = modes["thc"]
    assert thc.blocking and not modes["gloo"].blocking
    assert (thc.comm.link_bps, thc.comm.switch_pps, thc.comm.rtt_s, thc.comm.window) == (1e7, 5000, 7e-4, 64)
    assert thc.encode.seconds(1000) == pytest.approx(400e-6 + 1000 * 60e-9)


# ---- shape-only models --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, params",
    [("resnet50", 25_557_032), ("vgg16", 138_357_544), ("bert-base", 109_482_240), ("mlp-digits", 2_410)],
)
def test_zoo_models_have_the_published_parameter_counts(name, params):
    model = models_zoo.build(name)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == params


def test_ddp_buckets_follow_ddps_assignment_by_size():
    model = models_zoo.build("mlp2-digits")  # 64-128-128-10: weights 8192, 16384, 1280 coordinates
    assert models_zoo.ddp_buckets(model, 4096, 4096) == [
        ["4.bias", "4.weight"],  # the trained model's own names (host_agent.workloads builds both)
        ["2.bias", "2.weight"],
        ["0.bias", "0.weight"],
    ]
    assert len(models_zoo.ddp_buckets(model)) == 1  # all 104 KB fit DDP's first 1 MiB bucket


def test_flop_profile_readiness_runs_from_the_output_layer_back():
    step = models_zoo.flop_profile(models_zoo.build("resnet50"), 32, 1e13)
    assert step.parameters == 25_557_032
    ready = [b.ready_s for b in sorted(step.buckets, key=lambda b: b.index)]
    assert ready == sorted(ready) and ready[-1] == pytest.approx(step.backward_s)
    assert step.backward_s == pytest.approx(2 * step.forward_s)


def test_a_measured_cost_interpolates_between_its_sizes_and_never_drops_below_its_least():
    cost = MeasuredCost(((2048, 0.004), (256, 0.003), (8192, 0.010)))
    assert cost.points[0] == (256, 0.003)  # sorted
    assert cost.seconds(256) == pytest.approx(0.003) and cost.seconds(8192) == pytest.approx(0.010)
    assert cost.seconds(1152) == pytest.approx(0.0035)  # half-way from 256 to 2048
    assert cost.seconds(5120) == pytest.approx(0.007)
    assert cost.seconds(16384) == pytest.approx(0.010 + 0.006 * 8192 / 6144)  # along the last segment
    assert cost.seconds(10) == pytest.approx(0.003)  # the first segment would go below: the least holds
    assert cost.seconds(0) == 0.0
    with pytest.raises(ValueError, match="distinct"):
        MeasuredCost(((256, 0.001), (256, 0.002)))


def test_the_validation_table_gives_the_median_and_the_worst_error():
    cases = [
        {"model": "a", "mode": "thc", "mbps": 10, "measured_ms": 100.0, "predicted_ms": 105.0},
        {"model": "a", "mode": "gloo", "mbps": 10, "measured_ms": 100.0, "predicted_ms": 75.0},
        {"model": "b", "mode": "thc", "mbps": 5, "measured_ms": 50.0, "predicted_ms": 49.0},
    ]
    lines = plan_cli.validation_table(cases).splitlines()
    assert lines[-1] == "median |error|: 5.0 %"
    assert lines[-2] == "worst |error|: 25.0 % (a gloo at 10 Mbit/s); cases beyond 20 %: 1 of 3"
