"""The trace of jobs (topologies/job_trace.py): a good file round-trips; every bad one is refused in one line
that names the file, the job and what is wrong, before anything runs."""

import json

import pytest

from topologies import job_trace
from topologies.job_trace import TraceError, TraceJob

GOOD = {"name": "a", "start": 0, "model": "mlp-digits", "workers": 4, "mode": "thc"}


def test_a_trace_round_trips_and_is_ordered_by_start(tmp_path):
    jobs = [TraceJob("late", 5.0, "mlp-digits", 2, "fix32", 3, 0.25), TraceJob("early", 0.0, "cnn-digits", 4, "thc")]
    path = tmp_path / "trace.json"
    path.write_text(job_trace.dump(jobs))
    assert job_trace.load(path) == sorted(jobs, key=lambda j: j.start)
    assert job_trace.load(path)[0].steps == job_trace.STEPS  # the default, written out


def test_defaults_and_a_bare_list_are_taken():
    (job,) = job_trace.parse([dict(GOOD)])
    assert (job.steps, job.compute) == (job_trace.STEPS, job_trace.COMPUTE)
    (unnamed,) = job_trace.parse({"jobs": [{k: v for k, v in GOOD.items() if k != "name"}]})
    assert unnamed.name == "job0"


BAD_DOCUMENTS = [
    ({}, "expected"),
    ([], "at least one job"),
    ("jobs", "expected"),
    ([7], "expected an object"),
    ([{**GOOD, "gpus": 2}], "unknown field 'gpus'"),
    ([{k: v for k, v in GOOD.items() if k != "workers"}], "missing field 'workers'"),
    ([GOOD, GOOD], "name must be a fresh"),
    ([{**GOOD, "start": -1}], "start must be 0..1e+06"),
    ([{**GOOD, "start": "soon"}], "start must be a number"),
    ([{**GOOD, "start": float("nan")}], "start must be"),
    ([{**GOOD, "start": 1e30}], "start must be"),
    ([{**GOOD, "workers": 0}], "workers must be 1..32"),
    ([{**GOOD, "workers": 33}], "workers must be 1..32"),
    ([{**GOOD, "workers": 2.5}], "workers must be an integer"),
    ([{**GOOD, "workers": True}], "workers must be an integer"),
    ([{**GOOD, "steps": 0}], "steps must be"),
    ([{**GOOD, "compute": -0.1}], "compute must be"),
    ([{**GOOD, "model": ""}], "model must be a name"),
    ([{**GOOD, "model": "resnet"}], "model 'resnet' is not one of"),
    ([{**GOOD, "mode": "nccl"}], "mode 'nccl' is not one of"),
]


@pytest.mark.parametrize("document, message", BAD_DOCUMENTS, ids=[m for _, m in BAD_DOCUMENTS])
def test_a_bad_trace_is_refused_in_one_line(tmp_path, document, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(document))
    with pytest.raises(TraceError) as e:
        job_trace.load(path, models={"mlp-digits", "cnn-digits"}, modes={"thc", "fix32"})
    text = str(e.value)
    assert message in text and "\n" not in text and text.startswith(str(path))


@pytest.mark.parametrize(
    "content, message",
    [(None, "cannot read"), ("{", "not JSON"), (b"\xff\xfe", "cannot read")],
    ids=["missing", "not-json", "not-utf8"],
)
def test_an_unreadable_trace_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / "t.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(TraceError, match=message) as e:
        job_trace.load(path)
    assert "\n" not in str(e.value)
