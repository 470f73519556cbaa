"""No measured figure is typed by hand in the current text of the README, docs/ or a package README: each
is generated from a record (bench/results.py) or kept in docs/results.md's History with its commit. The
figures left are design constants, a command's parameters or how long a command takes, each allowed below
by the words around it, so that the same number in a new claim is still found."""

import pytest

from tests.support import hand_figures
from tests.support.paths import REPO

# (file, the words around the figure, as the line reads with code spans left out)
ALLOWED = [
    # targets, loss rates and timeouts that a command or a test is given
    ("README.md", "time to 95 % test accuracy"),
    ("topologies/README.md", 'as "2ms"/"500us" or a number of milliseconds'),  # the topology file's syntax
    ("topologies/README.md", "sampled every 0.5 s"),  # trace_run.SAMPLE_S
    ("topologies/README.md", "arriving 4 s apart"),  # topologies/trace_bench.json, the benchmark's trace
    ("topologies/README.md", "each step with 50 ms of its own work"),  # trace_bench.json's compute
    ("docs/results.md", "each step with 50 ms of the job's own work"),  # trace_bench.json's compute
    ("README.md", "would spend 95 % of its step"),
    ("README.md", "communication fits 45 s"),
    ("docs/architecture.md", "the same under 1 % and 5 % loss"),
    ("docs/architecture.md", "a short training run reaching 85 %"),
    ("docs/features.md", "delays one worker by 50 ms"),
    ("docs/features.md", "release a slot after 10 ms"),
    ("docs/features.md", "with and without 1 % loss"),
    ("docs/multi-host.md", "They reach 95 %"),
    ("docs/planner.md", "promises 5 % over the best"),
    ("docs/results.md", "a step's own work 0.5 s"),
    ("docs/results.md", "pool ≤ 0.75× static"),
    ("docs/results.md", "a few percent of its time at 20 Mbit/s"),
    ("docs/results.md", "arriving 7.5 s apart"),
    ("docs/results.md", "With 1 % loss per frame"),
    ("docs/results.md", "within 3× one"),
    ("docs/results.md", "at most 1 % of requests, THC's step at most 0.7×"),
    ("docs/results.md", "On Mininet at 5 % loss"),
    ("docs/results.md", "The sweep over 0–10 % loss"),
    ("docs/results.md", "the paper's headline (1.40–1.47×"),
    ("docs/results.md", "At 100 Gbit/s"),
    ("docs/workloads.md", "test accuracy, 90 %"),
    ("docs/workloads.md", "test accuracy, 95 % | SGD 0.05"),
    ("docs/workloads.md", "test accuracy, 85 %"),
    ("docs/workloads.md", "stretched ×0.8–1.25, scaled ×0.7–1.3"),
    ("docs/workloads.md", "the ~100k-parameter model"),
    ("docs/workloads.md", "the first 200k characters"),
    ("docs/workloads.md", "(1 % of each chunk)"),
    ("emulator/README.md", "by polling, every 100 ms"),
    ("emulator/README.md", "at least 100 ms"),
    ("host_agent/README.md", "(at most 10 ms"),
    ("host_agent/README.md", "at most every 20 ms"),
    ("host_agent/README.md", "at least every 50 ms"),
    ("host_agent/README.md", "with and without 3 % loss"),
    ("p4/README.md", "drift more than 10 ms apart"),
    ("p4/README.md", "with and without 1 % loss"),
    ("topologies/README.md", "promises 5 % over the best"),
    # how long a command takes: a reader's guide to what they start, not a result
    ("README.md", "about 2 minutes on 2 cores"),
    ("README.md", "(~25 min)"),
    ("docs/architecture.md", "(about 6 minutes here)"),
    ("docs/multi-host.md", "About 2 minutes here"),
]


def allowed(path: str, figure: str, line: str) -> bool:
    return any(p == path and figure in words and words in line for p, words in ALLOWED)


def found() -> list[tuple[str, int, str, str]]:
    return [
        (str(page.relative_to(REPO)), n, figure, line)
        for page in hand_figures.PAGES
        for n, figure, line in hand_figures.figures(page)
    ]


def test_no_figure_is_typed_by_hand_in_the_current_text():
    stray = [f"{path}:{n}: {figure}" for path, n, figure, line in found() if not allowed(path, figure, line)]
    assert not stray, (
        "measured figures typed by hand (generate them from a record with bench/results.py, or move them to "
        "docs/results.md's History with their commit; a design constant goes into ALLOWED):\n" + "\n".join(stray)
    )


def test_every_allowed_figure_is_still_on_its_page():
    hits = found()
    unused = [
        (path, words)
        for path, words in ALLOWED
        if not any(p == path and words in line and figure in words for p, _, figure, line in hits)
    ]
    assert not unused, f"ALLOWED names figures no page has any more: {unused}"


PAGE = """# A page

Trained to 0.917 in 3.4–3.6 s on 9 Mbit/s links, 18,200 THC packets/s, 1.51–1.67× the step, 37k-96k.
Commands are arguments: `thc-run --bw 9 --loss 5` and products are not figures: 2 × 1024 cells, 8×8 digits.

```
thc-run --straggler-timeout 10   # 10 ms
```

<!-- results:x -->
| 12.5 ms | 96.4 % |
<!-- /results:x -->

## History: superseded figures

### An old run

It took 74.2 ms a step.

## Later

Back in current text: 41.0 ms.
"""


@pytest.mark.parametrize("history_level", ["## History: superseded figures", "### History"])
def test_the_checker_finds_prose_figures_and_leaves_code_regions_and_history_alone(tmp_path, history_level):
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace("## History: superseded figures", history_level), encoding="utf-8")
    figures = [(n, figure) for n, figure, _ in hand_figures.figures(page)]
    prose = [(3, "0.917"), (3, "3.4–3.6 s"), (3, "9 Mbit/s"), (3, "18,200 THC packets/s"), (3, "1.51–1.67×")]
    prose.append((3, "37k-96k"))
    if history_level.startswith("## "):  # "### An old run" is inside it
        assert figures == [*prose, (22, "41.0 ms")]
    else:  # a History section ends at the next heading of its level or above: "### An old run"
        assert figures == [*prose, (18, "74.2 ms"), (22, "41.0 ms")]
