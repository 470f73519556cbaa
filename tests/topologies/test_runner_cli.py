"""thc-run refuses bad options in one line on stderr with a non-zero exit, before anything needs root.

Each case runs ``main()`` as a non-root user would (os.geteuid patched): had the check come after the
root check, or after the network was built, the error would be "needs root" instead. A valid command
line gets exactly that far, so the checks refuse only what is wrong.
"""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topologies import interrupts, runner
from topologies.progress import Progress

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def as_user(monkeypatch, tmp_path):
    """main() without root and without installing the runner's signal handlers in the test process."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(interrupts, "install", lambda: None)
    return tmp_path


def bad_grpc_port_topology(tmp_path: Path) -> Path:
    topo = json.loads((REPO / "topologies" / "star4.json").read_text())
    topo["switches"]["s1"]["grpc_port"] = 99999
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(topo, indent=1))
    return path


@pytest.mark.parametrize(
    "argv, status, words",
    [
        (["--window", "5000"], 2, ["argument --window", "5000: must be 1..1024"]),
        (["--window", "0"], 2, ["argument --window", "0: must be 1..1024"]),
        (["--bits", "5"], 2, ["argument --bits", "5: must be 1..4"]),
        (["--granularity", "300"], 2, ["argument --granularity", "300: must be 1..255"]),
        (["--bits", "4", "--granularity", "10"], 1, ["16 levels, so g must be at least 15"]),
        (["--job-id", "300"], 2, ["argument --job-id", "300: must be 0..255"]),
        (["--steps", "-5"], 2, ["argument --steps", "-5: must be at least 1"]),
        (["--steps", "five"], 2, ["argument --steps", "'five': expected an integer"]),
        (["--batch-size", "0"], 2, ["argument --batch-size", "must be at least 1"]),
        (["--lr", "0"], 2, ["argument --lr", "must be a positive number"]),
        (["--bucket-cap-kb", "0"], 2, ["argument --bucket-cap-kb", "must be a positive number"]),
        (["--switch-timeout", "-1"], 2, ["argument --switch-timeout", "positive"]),
        (["--straggler", "h4"], 2, ["argument --straggler", "'h4' is not HOST:MS"]),
        (["--straggler", "h4:-3"], 2, ["argument --straggler", "milliseconds >= 0"]),
        (["--straggler-timeout", "0"], 2, ["argument --straggler-timeout", "positive"]),
        (["--straggler", "h9:50"], 1, ["--straggler h9: not a worker of"]),
        (["--modes", "gloo", "--query"], 1, ["--query: no mode of --modes gloo", "add thc or fix32"]),
        (["--modes", "gloo,fp16", "--straggler-timeout", "5"], 1, ["--straggler-timeout: no mode of"]),
        (["--target-acc", "90"], 2, ["argument --target-acc", "(0, 1]"]),
        (["--workers", "40"], 2, ["argument --workers", "must be 1..32"]),
        (["--target", "tofino"], 2, ["argument --target", "invalid choice"]),
        (["--modes", "thc,zip"], 2, ["argument --modes", "unknown 'zip'", "choose from thc, fix32, gloo"]),
        (["--bw", "0"], 2, ["argument --bw", "0: must be in (0, 1000]"]),
        (["--bw", "fast"], 2, ["argument --bw", "'fast': Mbit/s as a number, or 'auto'"]),
        (["--bw", "auto", "--comm-share", "1"], 2, ["argument --comm-share", "a share in (0, 1)"]),
        (["--kill", "h3"], 2, ["argument --kill", "'h3': expected HOST:STEP"]),
        (["--kill", "h3:0"], 2, ["argument --kill", "expected HOST:STEP"]),
        (["--kill", "h9:5"], 1, ["--kill h9:5: h9 is not a worker of"]),
        (["--kill", "h3:200", "--steps", "150"], 1, ["--kill h3:200: the run has 150 steps"]),
        (["--restart-switch", "s1"], 2, ["argument --restart-switch", "expected SWITCH:STEP, like s1:50"]),
        (["--restart-switch", "s9:5"], 1, ["--restart-switch s9:5: s9 is not a switch of"]),
        (["--restart-switch", "s1:200", "--steps", "150"], 1, ["--restart-switch s1:200: the run has 150 steps"]),
        (["--target", "bmv2", "--switch-pps", "2000"], 1, ["--switch-pps paces the software switch", "emulator"]),
        (["--switch-pps", "0.5"], 1, ["--switch-pps 0.5", "at least 1 frame a second"]),
        (["--switch-pps", "0"], 2, ["argument --switch-pps", "positive"]),
        (["--topo", "/nonexistent.json"], 2, ["argument --topo", "'/nonexistent.json' does not exist"]),
        (
            ["--model", "charlm-stdlib", "--steps", "1000000"],
            1,
            ["the pcaps of this run could take up to", "GB free: give --no-pcap"],
        ),
        (["--topo", "{bad}"], 1, ["bad.json:", "switches.s1.grpc_port: 99999", "1024..65535"]),
        (
            ["--switch-exe", "/nonexistent/simple_switch_grpc"],
            1,
            ["--switch-exe /nonexistent/simple_switch_grpc", "no executable file"],
        ),
    ],
)
def test_bad_options_are_one_line_before_the_root_check(as_user, capsys, argv, status, words):
    argv = [a.replace("{bad}", str(bad_grpc_port_topology(as_user))) for a in argv]
    assert runner.main(argv + ["--log-dir", str(as_user / "logs")]) == status
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("thc-run: error: "), err
    for word in words:
        assert word in err, err
    assert "needs root" not in err and "unknown switch" not in err and "usage:" not in err
    assert captured.out == "" and not (as_user / "logs").exists()  # nothing was started or written


@pytest.mark.parametrize("option", ["--log-dir", "--pcap-dir"])
def test_a_folder_option_naming_a_file_is_one_line(as_user, capsys, option):
    taken = as_user / "taken"
    taken.write_text("a file")
    assert runner.main([option, str(taken)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {option}" in err and "is a file, not a folder" in err, err


def test_a_topology_file_that_is_not_utf8_is_one_line(as_user, capsys):
    path = as_user / "latin1.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    assert runner.main(["--topo", str(path), "--log-dir", str(as_user / "logs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not UTF-8" in err and str(path) in err, err


def test_a_valid_command_line_gets_as_far_as_the_root_check(as_user, capsys):
    assert (
        runner.main(
            [
                "--window",
                "1024",
                "--job-id",
                "255",
                "--steps",
                "1",
                "--workers",
                "2",
                "--log-dir",
                str(as_user / "logs"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err and "sudo make run" in err


def test_the_console_script_exits_non_zero_with_one_line():
    """As a user runs it (as root here: the option check still comes first)."""
    exe = Path(sys.executable).with_name("thc-run")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "topologies.runner"]
    out = subprocess.run(argv + ["--job-id", "300"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("thc-run: error: argument --job-id: 300")


@pytest.mark.parametrize("saved", [[], ["thc", "fix32"]])
def test_a_full_disk_is_one_line_naming_the_file_and_what_was_kept(monkeypatch, capsys, tmp_path, saved):
    def full(args):
        args.saved = saved
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "logs" / "gloo" / "h1.log"))

    monkeypatch.setattr(runner, "run", full)
    assert runner.main(["--log-dir", str(tmp_path / "logs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("thc-run: error: the disk is full"), err
    assert "No space left on device while writing" in err and "gloo/h1.log" in err and "Traceback" not in err
    if saved:
        assert f"the results of thc, fix32 are in {tmp_path / 'logs' / 'summary.json'}" in err
    else:
        assert "nothing was saved" in err


def test_a_modes_time_estimate_is_its_own_average_pace_from_its_first_step():
    """Steps come in bursts between evaluations; the estimate must not swing with each pause, nor count
    the workers' start-up or another mode's steps."""
    now = [100.0]
    bar = Progress("thc", steps=100, n_workers=2, clock=lambda: now[0])
    try:
        worker = [type("W", (), {"rank": r, "host": f"h{r + 1}"})() for r in range(2)]
        now[0] = 160.0  # a minute of imports and rendezvous: not the mode's pace
        for step in range(1, 41):
            now[0] += 0.125
            if step % 20 == 0:
                now[0] += 6.0  # an evaluation
            for w in worker:
                bar(w, {"event": "step", "step": step, "loss": 1.0})
        # from the first step: 39 more steps in 16.9 s (two 6-second evaluations among them): 60 more take 25.3 s
        assert bar.bar.n == 40 and "[00:16<00:25]" in str(bar.bar)
    finally:
        bar.close()


def test_switch_pps_reaches_the_software_switchs_command_line_and_thc_switch_takes_it(tmp_path):
    from emulator.switch_cli import parse_args
    from topologies.targets import switch_command

    launch = switch_command("emulator", "thc-switch", "s1", 0, 50051, {1: "s1-eth1"}, tmp_path, None, pps=2000)
    assert launch.argv[launch.argv.index("--pps") + 1] == "2000"
    assert parse_args(launch.argv[1:]).pps == 2000
    plain = switch_command("emulator", "thc-switch", "s1", 0, 50051, {1: "s1-eth1"}, tmp_path, None)
    assert "--pps" not in plain.argv


TRACE_JOB = {"name": "a", "start": 0, "model": "mlp-digits", "workers": 2, "mode": "thc", "steps": 3}


@pytest.mark.parametrize(
    "jobs, argv, words",
    [
        ("{not json", [], ["trace.json: not JSON"]),
        ([dict(TRACE_JOB, mode="gloo")], [], ["job 'a': mode 'gloo' is not one of fix32, terngrad-switch, thc"]),
        ([dict(TRACE_JOB, model="resnet")], [], ["job 'a': model 'resnet' is not one of"]),
        ([TRACE_JOB, dict(TRACE_JOB, name="b", workers=5)], ["--workers", "4"], ["job 'b' needs 5 workers", "has 4"]),
        ([TRACE_JOB], ["--topo", "topologies/star4.json"], ["--policy pool: star4 has no placement of one server"]),
        ([TRACE_JOB], ["--topo", "topologies/leaf_spine8.json"], ["--trace runs on one switch", "two levels"]),
        ([TRACE_JOB], ["--policy", "static", "--pool-cells", "256"], ["--pool-cells", "it needs --policy pool"]),
        ([TRACE_JOB], ["--pool-cells", "300"], ["--pool-cells 300: the pool is a power of two"]),
        ([TRACE_JOB], ["--bw", "auto"], ["--bw auto measures one model's step"]),
        ([TRACE_JOB], ["--kill", "h1:2"], ["--kill injects a fault into a --modes run"]),
        ([TRACE_JOB], ["--straggler", "h1:20"], ["--straggler injects a fault"]),
        ([TRACE_JOB], ["--steps", "10"], ["--steps: each job of the trace gives its own"]),
        ([TRACE_JOB], ["--modes", "thc"], ["--modes: each job of the trace gives its own"]),
        ([TRACE_JOB], ["--model", "cnn-digits"], ["--model: each job", "drop --model"]),
        ([TRACE_JOB], ["--job-id", "9"], ["--job-id: each job", "own job id"]),
    ],
)
def test_a_bad_trace_run_is_one_line_before_the_root_check(as_user, capsys, jobs, argv, words):
    path = as_user / "trace.json"
    path.write_text(jobs if isinstance(jobs, str) else json.dumps({"jobs": jobs}))
    assert runner.main(["--trace", str(path), *argv, "--log-dir", str(as_user / "logs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("thc-run: error: "), err
    for word in words:
        assert word in err, err
    assert "needs root" not in err and not (as_user / "logs").exists()


@pytest.mark.parametrize("policy", ["static", "pool"])
def test_a_valid_trace_gets_as_far_as_the_root_check(as_user, capsys, policy):
    path = as_user / "trace.json"
    path.write_text(json.dumps({"jobs": [TRACE_JOB, dict(TRACE_JOB, name="b", start=2.5, mode="fix32")]}))
    assert runner.main(["--trace", str(path), "--policy", policy, "--log-dir", str(as_user / "logs")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err, err
