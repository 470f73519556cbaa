"""thc-worker refuses a bad option value at once, in one line that names the option, with exit status 2:
before any rendezvous, so that no other worker waits for it and nothing is half done."""

import json

import pytest

from host_agent.worker import main

BASE = ["--mode", "gloo", "--rank", "0", "--world-size", "1", "--model", "mlp-digits"]
RENDEZVOUS = ["--rank", "0", "--world-size", "2", "--master-addr", "127.0.0.1"]  # never reached: no one listens

BAD = [
    ("--batch-size", "-1"),
    ("--batch-size", "0"),
    ("--steps", "-1"),
    ("--steps", "many"),
    ("--lr", "0"),
    ("--lr", "nan"),
    ("--switch-timeout", "0"),
    ("--switch-timeout", "-3"),
    ("--retransmit-timeout", "inf"),
    ("--min-retransmit-timeout", "0"),
    ("--max-retransmit-timeout", "-1"),
    ("--rendezvous-timeout", "0"),
    ("--rendezvous-timeout", "nan"),
    ("--dupthresh", "-1"),
    ("--coalesce", "-0.5"),
    ("--probe-size", "0"),
    ("--probe-size", str(2**40)),
    ("--probe-rounds", "0"),
    ("--master-port", "0"),
    ("--master-port", "70000"),
    ("--step-delay", "-5"),
    ("--bucket-cap-kb", "0"),
    ("--straggler-timeout", "0"),
    ("--fallback-server", "10.0.0.253"),
    ("--fallback-server", "10.0.0.999,02:00:00:00:00:fd"),
    ("--fallback-server", "10.0.0.253,02:00:00"),
]


def run(capsys, argv):
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize("option, value", BAD, ids=[f"{o}={v}" for o, v in BAD])
def test_a_bad_value_is_one_line_naming_the_option(capsys, option, value):
    status, err = run(capsys, [*BASE, option, value])
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("thc-worker: error: argument " + option), err
    assert "Traceback" not in err


def plan_files(tmp_path):
    """Bad --plan files: a missing one, one in a missing folder, not UTF-8, not JSON, a list, a wrong mode."""
    files = {}
    for name, content in {
        "not-utf8": b"\xff\xfe{",
        "not-json": b"{buckets",
        "a-list": b"[1, 2]",
        "wrong-mode": json.dumps({"buckets": {"0": "thc", "1": "zip"}}).encode(),
        "wrong-key": json.dumps({"buckets": {"first": "thc"}}).encode(),
    }.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(content)
        files[name] = path
    files["missing"] = tmp_path / "missing.json"
    files["missing-folder"] = tmp_path / "no" / "such" / "plan.json"
    return files


@pytest.mark.parametrize(
    "case", ["not-utf8", "not-json", "a-list", "wrong-mode", "wrong-key", "missing", "missing-folder"]
)
def test_a_bad_plan_file_is_one_line_before_the_rendezvous(capsys, tmp_path, case):
    path = plan_files(tmp_path)[case]
    status, err = run(capsys, ["--mode", "plan", "--plan", str(path), *RENDEZVOUS])
    assert status == 2
    assert err.count("\n") == 1 and str(path) in err and "--plan" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content", [b"\xff\xfe[", b"[{}]", b"{}", b"[]"], ids=["not-utf8", "no-fields", "object", "empty"]
)
def test_a_bad_servers_file_is_one_line_before_the_rendezvous(capsys, tmp_path, content):
    path = tmp_path / "servers.json"
    path.write_bytes(content)
    argv = ["--mode", "thc-ps", "--servers", str(path), *RENDEZVOUS]
    status, err = run(capsys, [*argv, "--src-ip", "10.0.0.1", "--src-mac", "00:00:00:00:00:01"])
    assert status == 2
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err, err


def test_a_fallback_server_is_read_as_its_address():
    from host_agent import wire
    from host_agent.worker_cli import build_parser

    args = build_parser().parse_args([*BASE, "--fallback-server", "10.0.0.253, 02:00:00:00:00:fd"])
    assert args.fallback_server == wire.Endpoint("02:00:00:00:00:fd", "10.0.0.253")
    assert build_parser().parse_args(BASE).fallback_server is None
