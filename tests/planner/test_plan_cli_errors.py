"""thc-plan's bad input is one line naming what to change, exit status 2, no traceback, nothing written."""

import json

import pytest

from planner.plan_cli import main


def run(capsys, argv):
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err


def one_line(status, err, *words):
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("thc-plan: error: ") and "Traceback" not in err, err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize(
    "content, words",
    [
        (b"[]", ['{"cases": [...]}']),
        (b'{"cases": {}}', ['{"cases": [...]}']),
        (b'{"cases": [1]}', ["cases[0]", "expected an object"]),
        (b'{"cases": [{"model": "m", "mode": "thc", "mbps": 20}]}', ["cases[0]", "'measured_ms'"]),
        (b'{"cases": [{"model": "m", "mode": "thc", "mbps": 20, "measured_ms": 0, "predicted_ms": 1}]}', ["is 0"]),
        (b'{"cases": [{"model": "m", "mode": "thc", "mbps": 20, "measured_ms": "5", "predicted_ms": 1}]}', ["number"]),
        (b"\xff\xfe", ["not UTF-8"]),
        (b"{cases", ["not JSON"]),
    ],
    ids=["a-list", "cases-object", "case-number", "missing-keys", "measured-zero", "wrong-type", "latin1", "not-json"],
)
def test_validate_refuses_a_bad_results_file(capsys, tmp_path, content, words):
    path = tmp_path / "results.json"
    path.write_bytes(content)
    one_line(*run(capsys, ["validate", "--results", path]), str(path), *words)


def test_validate_still_reads_a_good_results_file(capsys, tmp_path):
    case = {"model": "mlp", "mode": "thc", "mbps": 20, "measured_ms": 10.0, "predicted_ms": 11.0}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"cases": [case]}))
    assert main(["validate", "--results", str(path)]) == 0
    assert "median |error|: 10.0 %" in capsys.readouterr().out


@pytest.mark.parametrize(
    "profile, words",
    [
        ([], ["expected a JSON object"]),
        ({"forward_ms": "1", "backward_ms": 1, "buckets": [{"index": 0, "numel": 10, "ready_ms": 1}]}, ["forward_ms"]),
        ({"forward_ms": 1, "backward_ms": 1, "buckets": 3}, ["'buckets' must be a non-empty list"]),
        ({"forward_ms": 1, "backward_ms": 1, "buckets": [{"index": 0, "numel": -1, "ready_ms": 1}]}, ["numel"]),
    ],
    ids=["a-list", "string-time", "buckets-number", "negative-numel"],
)
def test_plan_refuses_a_step_profile_with_wrong_types(capsys, tmp_path, profile, words):
    path = tmp_path / "step.json"
    path.write_text(json.dumps(profile))
    one_line(*run(capsys, ["plan", "--step-profile", path]), str(path), *words)


@pytest.mark.parametrize("option", ["--png", "--save"])
def test_plan_refuses_an_output_in_a_missing_folder_before_any_work(capsys, tmp_path, option):
    target = tmp_path / "no" / "such" / "out.file"
    one_line(*run(capsys, ["plan", "--model", "resnet50", option, target]), option, "create it first")
    assert not (tmp_path / "no").exists()


def test_project_refuses_a_json_output_in_a_missing_folder(capsys, tmp_path):
    one_line(*run(capsys, ["project", "--json", tmp_path / "no" / "rows.json"]), "--json", "create it first")


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--workers", 0, ["argument --workers", "0: must be at least 1"]),
        ("--gpu-tflops", 0, ["argument --gpu-tflops", "must be a positive number"]),
    ],
)
def test_a_zero_override_is_refused_not_ignored(capsys, option, value, words):
    one_line(*run(capsys, ["project", "--models", "resnet50", option, value]), *words)
