"""docs/results.md's generated tables are what their records render (bench/results.py), so a figure on the
page always names the command and commit that produced it and cannot drift from its record."""

import json
import re
import shutil

import pytest

from bench import results
from tests.support.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "results"

PAGE = """# Results

Prose that stays as written.

<!-- results:bench_e2e -->
stale text the generator replaces
<!-- /results:bench_e2e -->

More prose.

<!-- results:bench_pipeline -->
<!-- /results:bench_pipeline -->
<!-- results:bench_host_agent_worker -->
<!-- /results:bench_host_agent_worker -->
<!-- results:thc_run -->
<!-- /results:thc_run -->
<!-- results:bench_two_level -->
<!-- /results:bench_two_level -->
<!-- results:bench_stragglers -->
<!-- /results:bench_stragglers -->
<!-- results:bench_switch -->
<!-- /results:bench_switch -->
<!-- results:bench_faults -->
<!-- /results:bench_faults -->
<!-- results:bench_ablation -->
<!-- /results:bench_ablation -->
<!-- results:bench_timeline_planner -->
<!-- /results:bench_timeline_planner -->
<!-- results:bench_tta -->
<!-- /results:bench_tta -->
<!-- results:bench_timeline -->
<!-- /results:bench_timeline -->
<!-- results:thc_plan_project -->
<!-- /results:thc_plan_project -->
<!-- results:bench_thc_native -->
<!-- /results:bench_thc_native -->
<!-- results:bench_thc -->
<!-- /results:bench_thc -->
<!-- results:bench_switch_ports -->
<!-- /results:bench_switch_ports -->
<!-- results:bench_slow_switch -->
<!-- /results:bench_slow_switch -->
"""
NAMES = [
    "bench_e2e",
    "bench_pipeline",
    "bench_host_agent_worker",
    "thc_run",
    "bench_two_level",
    "bench_stragglers",
    "bench_switch",
    "bench_faults",
    "bench_ablation",
    "bench_timeline_planner",
    "bench_tta",
    "bench_timeline",
    "thc_plan_project",
    "bench_thc_native",
    "bench_thc",
    "bench_switch_ports",
    "bench_slow_switch",
]


def fixture_records():
    records = {p.stem: json.loads(p.read_text()) for p in FIXTURES.glob("bench_*.json")}
    records["thc_run"] = results.as_record(FIXTURES / "summary.json")[1]
    records["thc_plan_project"] = json.loads((FIXTURES / "thc_plan_project.json").read_text())
    return records


def test_the_fixture_records_render_the_same_page_every_time_and_only_inside_the_regions():
    records = fixture_records()
    once = results.render(PAGE, records)
    assert once == results.render(PAGE, records)
    assert results.render(once, records) == once  # a rendered page renders to itself
    assert "stale text the generator replaces" not in once
    outside = results.REGION.sub("", once)
    assert outside == results.REGION.sub("", PAGE)  # the prose around the regions is untouched


@pytest.mark.parametrize("name", NAMES)
def test_each_generated_region_names_its_command_commit_date_and_load(name):
    record = fixture_records()[name]
    region = next(
        m["body"] for m in results.REGION.finditer(results.render(PAGE, fixture_records())) if m["name"] == name
    )
    assert f"`{record['command']}`" in region
    assert f"commit {record['commit']}" in region
    assert record["date"] in region
    assert f"load average {record['load_start']:g} → {record['load_end']:g}" in region
    assert ("Quick run" in region) == record["quick"]


def test_the_figures_come_from_the_record():
    page = results.render(PAGE, fixture_records())
    assert "| 100 | THC via switch | 7.1 | 1.4 | 5.10× | 9,310 | 17,502 | 0 |" in page  # e2e, link bound beside
    assert "| 1,024 | 2,840 pkt/s = 2.9 M coord/s | 335,260 pkt/s = 343.3 M coord/s |" in page
    assert "0.79 (prepare 0.07, norm round 0.20, encode 0.12, sums 0.27, decode 0.13)" in page
    assert "| gloo all-reduce | 0.967 | not reached | 131.3 | 105.1 |" in page  # 249,724 B at 19 Mbit/s
    assert "THC reached the target 4.38× sooner than gloo all-reduce." in page
    assert "| 2 | 8 | 40 | 4,344 |" in page and "two-level/one-level spine bytes per round: **0.327**" in page
    assert "| thc_data | 2,840 pkt/s | – | 335,260 pkt/s |" in page
    assert "| partial (10 ms timeout) | 41.0 | 76.0 | not reached | 0.972 | yes | 6300 |" in page
    assert "| reordering | fix32 | in process (native) | yes | yes | yes | 36.0 | 1.54 | 0/113/0 | 0.000 |" in page
    assert "| full THC | 2.5e-3 (2.5e-3) | 3.0e-3 (3.0e-3) |" in page  # ablation: NMSE per round (of the sum)
    assert "| tofino | bert-base | 14 | 2.68e+08 | 0.59 | 0.99 | 2.47 | 0.99 | yes |" in page
    assert "| cnn-digits | 50 | gloo all-reduce | not reached | – | 0.103 | 81.2 | 40.0 | 249,912 |" in page
    assert "| mlp-digits | FIX32 via switch | 10 | 20.4 | 18.0 | -12.0 % |" in page  # the plan's case left out:
    assert "median |error| **12.0 %** over 3 cases" in page  # plan_cli.validation_table's cases
    assert "| mlp-digits | 10 | thc, thc | 10.4 | THC via switch 13.1 | 0.789 |" in page
    assert "| resnet50 | 10 | 113.1 | 199.5 | 126.1 (1.58×) | 118.3 (1.69×) | 116.0 (1.72×) | fp16 4, thc 1 |" in page
    assert "- resnet50: over ring fp32 **12.1–12.7 Gbit/s**, over FIX32-INA at no rate in 1–400 Gbit/s" in page
    assert "| 16,384 | native | 56.0 | 44.0 | 292.6 | 372.4 |" in page  # bench_thc --native, µs and M coord/s
    assert "| 2^10 | 0.001 | 0.025 | 0.060 | 0.040 | – | – |" in page  # bench_thc, ms per call
    assert "2^20 chunks (the paper's d) **0.24** (pass)" in page
    assert "| TernGrad |  | 1.58 | 32 | 1.50e-01 | 1.30e-01 |" in page
    assert "| thc-switch | 20,000 | 19,000 | 5.0% | 37,125 | 19.0 |" in page  # frames/s and Mbit/s of 64 B
    assert "| THC via switch | 213.1 | 17.0 | 198,000 | 1,600 | 1 / 0 / 2 | 0.19% |" in page  # bound: 42,500 B
    assert "- THC step / FIX32 step: **0.299** (floor 0.7, met)" in page


def test_a_region_without_a_record_is_refused_by_name():
    with pytest.raises(SystemExit, match="no docs/results/thc_run.json"):
        results.render(PAGE, {k: v for k, v in fixture_records().items() if k != "thc_run"})


def test_a_file_that_is_no_record_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"modes": []}))
    with pytest.raises(SystemExit, match="neither a benchmark's record nor a thc-run summary"):
        results.as_record(path)


def test_add_keeps_a_record_under_its_benchmarks_name(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RECORDS", tmp_path / "records")
    page = tmp_path / "results.md"
    page.write_text(PAGE)
    monkeypatch.setattr(results, "PAGE", page)
    benches = [n for n in NAMES if n != "thc_run"]  # thc-plan's --json is a record too
    for name in benches:
        shutil.copy(FIXTURES / f"{name}.json", tmp_path / f"{name}.record.json")
    adds = [str(tmp_path / f"{n}.record.json") for n in benches]
    assert results.main(["--add", *adds, str(FIXTURES / "summary.json")]) == 0
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == sorted(f"{n}.json" for n in NAMES)
    assert page.read_text() == results.render(PAGE, fixture_records())
    assert results.main(["--check"]) == 0
    page.write_text(page.read_text().replace("9,310", "9,311"))
    assert results.main(["--check"]) == 1


def test_docs_results_md_is_what_the_committed_records_render():
    page = results.PAGE.read_text()
    records = results.load_records(results.RECORDS)
    assert results.render(page, records) == page, "docs/results.md is stale: run `make results`"
    regions = {m["name"] for m in results.REGION.finditer(page)}
    assert regions == set(records), "every kept record has its region on the page, and every region its record"


COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
CODE = re.compile(r"`([^`]+)`")  # a backticked span, which may wrap over lines
COMMAND = re.compile(r"\.py\b|\bthc-[a-z]+|^make\b")
FIGURES = re.compile(r"(?m)^\||\d\.\d")


def unsourced_sections(page: str) -> list[str]:
    """Headings of the hand-written sections that show figures (a table or a decimal number) but name no
    commit or no backticked command; generated regions carry their own and are left out."""
    text = results.REGION.sub("", page)
    sections = re.split(r"(?m)^(?=#{1,6} )", text)
    return [
        section.splitlines()[0]
        for section in sections
        if FIGURES.search(section)
        and not (COMMIT.search(section) and any(COMMAND.search(code) for code in CODE.findall(section)))
    ]


def test_a_section_with_figures_but_no_commit_or_no_command_is_named():
    page = """# Results

## Sourced
(`.venv/bin/python bench/bench_x.py`, commit 1a2b3c4): 3.5 ms.

## No commit
(`.venv/bin/python bench/bench_x.py`): 3.5 ms.

## No command
Recorded in commit 1a2b3c4:

| a | b |
|---|---|

## Prose only
Nothing measured here, 12 words.
"""
    assert unsourced_sections(page) == ["## No commit", "## No command"]


def test_every_figure_on_docs_results_md_names_its_command_and_commit():
    assert unsourced_sections(results.PAGE.read_text()) == []


def test_thc_plan_project_json_is_a_record_the_page_renders(tmp_path):
    from planner import plan_cli

    path = tmp_path / "project.json"
    assert plan_cli.main(["project", "--models", "resnet50", "--gbps", "10", "--json", str(path)]) == 0
    name, record = results.as_record(path)
    assert name == "thc_plan_project"
    assert record["command"] == f"thc-plan project --models resnet50 --gbps 10 --json {path}"
    region = results.render_record(name, record)
    assert "| resnet50 | 10 |" in region and "Link rates" not in region  # no --headline, no band


def test_a_language_models_run_is_rendered_in_bits_per_character():
    record = fixture_records()["thc_run"]
    figures = dict(record["figures"], target=3.0)
    figures["modes"] = [dict(m, metric="bpc", final_metric=2.743) for m in figures["modes"]]
    region = results.render_record("thc_run", dict(record, figures=figures))
    assert "time to 3 validation bits per character" in region and "| final bpc |" in region
    assert "| 2.743 |" in region and "accuracy" not in region


def test_a_runs_failures_are_rendered_as_the_console_prints_them():
    from topologies.report import failure_line

    record = fixture_records()["thc_run"]
    kill = {"host": "h3", "rank": 2, "step": 50, "signal": "SIGKILL", "injected": True, "detected_s": 0.06}
    kill |= {"readmitted_s": 0.078, "recovered_s": 0.118, "job_id": 2, "epoch": 2, "workers": 3, "survivors_step": 51}
    restart = {"kind": "switch_restart", "switch": "s1", "step": 50, "answering_s": 0.41, "reprogrammed_s": 2.9}
    restart |= {"readmitted_s": 3.3, "recovered_s": 3.4, "job_id": 1, "epoch": 2, "resumed_step": 51}
    modes = [dict(m) for m in record["figures"]["modes"]]
    modes[0]["failures"], modes[1]["failures"] = [kill], [restart]
    region = results.render_record("thc_run", dict(record, figures=dict(record["figures"], modes=modes)))
    assert f"- {failure_line(modes[0]['mode'], kill)}" in region
    assert "survivors re-admitted as job 2 (epoch 2, 3 workers) 0.08 s after it" in region
    assert f"- {failure_line(modes[1]['mode'], restart)}" in region and "a pause of 3.40 s" in region
    assert "Failures" not in results.render_record("thc_run", record)  # a run without failures has no list


def trace_job(name, wait, completion, tta, fallbacks, uses):
    return {"name": name, "mode": "thc", "model": "mlp-digits", "workers": 2, "wait_s": wait,
            "completion_s": completion, "time_to_target_s": tta, "fallbacks": fallbacks, "uses": uses}  # fmt: skip


def test_a_thc_run_trace_summary_is_a_record_rendered_per_job(tmp_path):
    provenance = {"command": "thc-run --trace t.json", "commit": "abc1234", "date": "2026-12-05 20:00 UTC",
                  "load_start": 1.5, "load_end": 2.0, "quick": False}  # fmt: skip
    jobs = [trace_job("a", 0.0, 10.0, 4.0, 0, 60), trace_job("b", 0.5, 12.25, None, 3, 60)]
    summary = {"policy": "pool", "jobs": jobs,
               "mean_completion_s": 11.125, "p95_completion_s": 12.25, "fallbacks": 3, "uses": 120,
               "fallback_share": 0.025, "all_reached": False, "replicas_differ": [], "cells": 2048,
               "occupancy": [[0.0, 0]], "trace": "t.json", "topology": "star4_ps", "target": "emulator",
               "bw_mbit": 2.0, "provenance": provenance}  # fmt: skip
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    name, record = results.as_record(path)
    assert name == "thc_run_trace" and "occupancy" not in record["figures"]
    region = results.render_record(name, record)
    assert "`thc-run --trace t.json`, commit abc1234" in region
    assert "on star4_ps, emulator, 2 Mbit/s links, policy shared pool" in region
    assert "| a | THC via switch | mlp-digits | 2 | 0.0 | 10.0 | 4.0 | 0/60 |" in region
    assert "| b | THC via switch | mlp-digits | 2 | 0.5 | 12.2 | not reached | 3/60 |" in region
    assert "Mean completion **11.1 s**, p95 12.2 s, rounds fallen back 2.5%; not every job reached" in region


def test_bench_pool_trained_is_rendered_per_policy_with_its_ratio():
    from bench import bench_pool

    trace = [{"name": f"j{i}", "start": 4.0 * i, "model": "mlp-digits", "workers": 2} for i in range(3)]
    static = {"mean_jct_s": 18.0, "p95_jct_s": 24.0, "mean_wait_s": 6.0, "mean_run_s": 12.0, "mean_setup_s": 4.0,
              "mean_train_s": 6.5,
              "unreached": [], "fallbacks": 0,
              "uses": None, "fallback_share": 0.0, "replicas_differ": []}  # fmt: skip
    pool = dict(static, mean_jct_s=12.0, p95_jct_s=13.0, mean_wait_s=0.0, uses=400, fallbacks=4, fallback_share=0.01)
    pool.update(mean_run_s=12.0, mean_setup_s=3.0, mean_train_s=6.25)
    figures = {"setup": {"slots": 512, "window": 64, "bw_mbit": 2.0, "cells": 2048}, "trace": trace,
               "policies": {"pool": dict(pool, unreached=["j2"]), "static": static}, "ratio": 12.0 / 18.0}  # fmt: skip
    record = {"command": "bench_pool.py --trained", "commit": "abc1234", "date": "2026-12-05 20:00 UTC",
              "load_start": 1.5, "load_end": 2.0, "quick": False, "benchmark": "bench_pool_trained",
              "figures": figures}  # fmt: skip
    region = results.render_record("bench_pool_trained", record)
    assert "3 jobs (mlp-digits, 6 workers) trained with `thc-run --trace` on Mininet, arriving over 8 s" in region
    assert "512 slots a job (2 fit statically, a pool of 2048 cells), window 64, links 2 Mbit/s" in region
    assert "| static partitions | 18.0 | 24.0 | 6.0 | 12.0 | 4.0 | 6.5 | yes | – | 0 |" in region
    assert "| shared pool | 12.0 | 13.0 | 0.0 | 12.0 | 3.0 | 6.2 | no: j2 | 1.0% (4/400) | 0 |" in region
    assert region.index("| static partitions |") < region.index("| shared pool |")  # as the benchmark runs them
    assert "pool/static mean JCT: **0.667** (floor 0.75)" in region
    assert bench_pool.FLOOR == 0.75  # the floor the page names
    figures["ratios"] = [0.5, 0.9]  # --repeat 2: the ratio of the means, and each run's
    region = results.render_record("bench_pool_trained", record)
    assert "pool/static mean JCT: **0.667** over 2 runs (per run: 0.500, 0.900) (floor 0.75)" in region


def test_the_worker_round_shows_what_its_compiled_calls_alone_cost():
    """bench_host_agent's calls-only figure sits beside the full round it bounds."""
    page = results.render(PAGE, fixture_records())
    region = next(m["body"] for m in results.REGION.finditer(page) if m["name"] == "bench_host_agent_worker")
    row = next(line for line in region.splitlines() if "compiled calls alone" in line)
    assert "| 0.23 |" in row and "native" in row
