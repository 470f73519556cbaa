"""thc-ctl's errors: one line on stderr that says what is wrong and what to do, and a non-zero exit, for
every problem it can see, before it connects to a switch when the switch is not needed to see it.

Commands whose only fault is in their options point at a port where nothing listens: a check made after
connecting would report "no P4Runtime server answers" instead of the real problem.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import contract
from controller.connection import SwitchConnection
from controller.ctl_cli import run
from controller.errors import NotPrimary
from controller.session import DEFAULT_BMV2_JSON, DEFAULT_P4INFO
from tests.support.thc_ctl import cli
from topologies.targets import free_tcp_port

REPO = Path(__file__).resolve().parents[2]


def assert_one_line(status, err, *words):
    assert status != 0
    assert err.count("\n") == 1 and err.startswith("thc-ctl: error: "), err
    for word in words:
        assert word in err, err
    assert "no P4Runtime server answers" not in err and "usage:" not in err


def nowhere() -> list[str]:
    return ["--grpc-addr", f"127.0.0.1:{free_tcp_port()}", "--connect-timeout", "0.2"]


def job_add(tmp_path, *options) -> tuple[int, str, str]:
    """`thc-ctl job add` on a star whose switch listens nowhere: what is wrong must show before connecting."""
    topo = json.loads((REPO / "topologies" / "star4.json").read_text())
    topo["switches"]["s1"]["grpc_port"] = free_tcp_port()
    path = tmp_path / "star4.json"
    path.write_text(json.dumps(topo))
    return cli("job", "add", "--topology", path, "--id", 1, "--workers", "h1,h2", "--connect-timeout", "0.2", *options)


@pytest.mark.parametrize("bits, g, levels", [(2, 2, 4), (4, 8, 16)])
def test_a_table_with_g_below_its_levels_is_refused_before_connecting(tmp_path, bits, g, levels):
    """With g < 2**b - 1 some indices must share a value: the table wastes bits, which the job refuses."""
    status, _, err = job_add(tmp_path, "--bits", bits, "--granularity", g)
    assert_one_line(status, err, f"{levels} levels", f"at least {levels - 1}", f"got g={g}", "raise g or lower --bits")
    assert status == 1


@pytest.mark.parametrize(
    "options, words",
    [
        (["--granularity", "256"], ["argument --granularity", "256: must be 1..255"]),
        (["--window", "300", "--slots", "256"], ["'window' = 300", "from 1 to 256"]),
        (["--table", "optimal", "--clip", "0"], ["clip", "strictly between 0 and 1"]),
        (["--key", "0"], ["--key 0", "1..2**32-1"]),
    ],
)
def test_a_job_description_the_switch_cannot_run_is_refused_before_connecting(tmp_path, options, words):
    status, _, err = job_add(tmp_path, *options)
    assert_one_line(status, err, *words)


def test_a_valid_job_still_passes_the_checks(tmp_path):
    """The checks refuse only bad descriptions: a valid one gets as far as the (absent) switch."""
    status, _, err = job_add(tmp_path, "--bits", "2", "--granularity", "3")
    assert status == 1 and "no P4Runtime server answers" in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (["job", "add", "--bits", "four"], ["argument --bits", "'four'", "see `thc-ctl job add --help`"]),
        (["stats", "--grpc-addr", ""], ["argument --grpc-addr", "expected HOST:PORT, like 127.0.0.1:9559"]),
        (["stats", "--grpc-addr", "127.0.0.1:99999"], ["port 99999 is outside 1..65535"]),
        (["stats", "--grpc-addr", "127.0.0.1"], ["expected HOST:PORT"]),
        (["stats", "--connect-timeout", "0"], ["argument --connect-timeout", "positive number of seconds"]),
        (["stats", "--device-id", "-1"], ["argument --device-id", "0..2**64-1"]),
        (["frobnicate"], ["invalid choice: 'frobnicate'", "see `thc-ctl --help`"]),
    ],
)
def test_usage_errors_are_one_line_not_a_usage_block(capsys, argv, words):
    status = run(argv)
    err = capsys.readouterr().err
    assert status == 2
    assert_one_line(status, err, *words)


@pytest.mark.parametrize("where", ["no/such/folder/job.json", "."], ids=["missing-folder", "a-folder"])
def test_a_save_file_that_cannot_be_written_is_refused_before_anything_is_installed(tmp_path, where):
    status, _, err = job_add(tmp_path, "--save", tmp_path / where)
    assert_one_line(status, err, "argument --save")


def test_a_topology_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"hosts": {"h\xe9": {}}}')
    status, _, err = cli("stats", "--topology", path)
    assert_one_line(status, err, str(path), "not UTF-8")


def test_a_missing_topology_file_is_named():
    status, _, err = cli("stats", "--topology", "/nonexistent.json")
    assert_one_line(status, err, "argument --topology", "'/nonexistent.json' does not exist")


@pytest.mark.parametrize(
    "workers, words",
    [("h9,h1", ["unknown host 'h9'", "hosts: h1, h2, h3, h4"]), ("h1,h1", ["worker h1 is listed twice"])],
)
def test_workers_the_topology_does_not_have_are_refused_before_connecting(tmp_path, workers, words):
    topo = json.loads((REPO / "topologies" / "star4.json").read_text())
    topo["switches"]["s1"]["grpc_port"] = free_tcp_port()
    path = tmp_path / "star4.json"
    path.write_text(json.dumps(topo))
    status, _, err = cli("job", "add", "--topology", path, "--id", 1, "--workers", workers, "--connect-timeout", "0.2")
    assert_one_line(status, err, *words)


BAD_JSON = {
    "not UTF-8": b'\xff\xfe{"table_entries": []}',
    "not JSON": b'{"table_entries": [',
    "a list": b"[]",
}


@pytest.mark.parametrize("bad", BAD_JSON)
def test_a_bmv2_json_that_is_no_program_is_refused_before_connecting(tmp_path, bad):
    path = tmp_path / "prog.json"
    path.write_bytes(BAD_JSON[bad])
    status, _, err = cli("push", "--bmv2-json", path, *nowhere())
    assert_one_line(status, err, str(path))


def test_a_p4info_that_does_not_parse_is_refused_before_connecting(tmp_path):
    path = tmp_path / "prog.p4info.txtpb"
    path.write_text("tables { preamble { id: 1 ")
    status, _, err = cli("push", "--p4info", path, *nowhere())
    assert_one_line(status, err, str(path), "not a P4Info")


def _runtime(tmp_path, **doc) -> Path:
    """A p4lang/tutorials runtime file naming the committed program, with `doc`'s keys."""
    path = tmp_path / "s1-runtime.json"
    path.write_text(json.dumps({"p4info": str(DEFAULT_P4INFO), "bmv2_json": str(DEFAULT_BMV2_JSON), **doc}))
    return path


LPM = {"table": contract.IPV4_LPM, "match": {"hdr.ipv4.dstAddr": ["10.0.1.1", 32]}}
BAD_RUNTIME = {
    "not UTF-8": lambda p: p.write_bytes(b'\xff\xfe{"table_entries": []}'),
    "not JSON": lambda p: p.write_text('{"table_entries": ['),
    "a list": lambda p: p.write_text("[]"),
    "nothing to apply": lambda p: p.write_text("{}"),
    "entries not a list": lambda p: p.write_text('{"table_entries": "x"}'),
    "a replica's port -1": lambda p: p.write_text(
        json.dumps({"multicast_group_entries": [{"multicast_group_id": 1, "replicas": [{"egress_port": -1}]}]})
    ),
}


@pytest.mark.parametrize("bad", BAD_RUNTIME)
def test_a_bad_runtime_file_is_refused_before_connecting(tmp_path, bad):
    path = tmp_path / "s1-runtime.json"
    BAD_RUNTIME[bad](path)
    status, _, err = cli("apply", path, *nowhere())
    assert_one_line(status, err, str(path))


def test_a_runtime_files_entries_are_built_against_the_p4info_it_names_before_connecting(tmp_path):
    path = _runtime(tmp_path, table_entries=[{**LPM, "action_name": contract.IPV4_FORWARD + "_nowhere"}])
    status, _, err = cli("apply", path, *nowhere())
    assert_one_line(status, err, str(path), "table_entries[0]")


def test_a_good_runtime_file_gets_as_far_as_the_switch(tmp_path):
    path = _runtime(tmp_path, table_entries=[{**LPM, "action_name": contract.FORWARDING_DROP, "action_params": {}}])
    status, _, err = cli("apply", path, *nowhere())
    assert status == 1 and "no P4Runtime server answers" in err, err


def test_a_bad_grpc_port_in_the_topology_is_one_problem_not_also_an_unknown_switch(tmp_path):
    topo = json.loads((REPO / "topologies" / "star4.json").read_text())
    topo["switches"]["s1"]["grpc_port"] = 99999
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(topo, indent=1))
    status, _, err = cli("stats", "--topology", path)
    assert_one_line(status, err, f"{path}:", "switches.s1.grpc_port: 99999", "1024..65535")
    assert "unknown switch" not in err and "more)" not in err


def test_the_same_runs_as_a_process():
    """thc-ctl as a user runs it: the console script's exit status and stderr."""
    out = subprocess.run(
        [str(Path(sys.executable).with_name("thc-ctl")), "job", "add", "--bits", "four"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("thc-ctl: error: ")


# ---- arbitration: what lower election ids are told ------------------------------------------------


@pytest.fixture
def switch():
    """The software switch's P4Runtime server, in-process, with no program (arbitration needs none)."""
    from emulator.p4rt.device import Device
    from emulator.p4runtime_server import P4RuntimeServer

    server = P4RuntimeServer(Device(device_id=0))
    port = server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    server.stop()


def test_a_lower_id_while_the_primary_is_up_is_told_it_holds_the_switch(switch):
    holder = SwitchConnection(switch, 0, (0, 7))
    holder.become_primary()
    try:
        with pytest.raises(NotPrimary, match=r"ALREADY_EXISTS.*holds election id 0,7 and ours is 0,3"):
            SwitchConnection(switch, 0, (0, 3)).become_primary()
    finally:
        holder.close()


@pytest.mark.skipif(not (DEFAULT_BMV2_JSON.exists() and DEFAULT_P4INFO.exists()), reason="p4/build/ is not built")
def test_after_the_primary_has_gone_a_lower_id_is_told_the_truth_and_what_id_takes_over(switch):
    """The switch keeps the highest election id it has seen: nobody holds the switch, but 0,3 cannot
    become primary; the message says so, and the id it names does take over."""
    holder = SwitchConnection(switch, 0, (0, 7))
    holder.become_primary()
    holder.close()
    status, _, err = cli("push", "--grpc-addr", switch, "--election-id", "0,3")
    assert_one_line(
        status,
        err,
        "NOT_FOUND",
        "no controller is primary now",
        "highest election id the switch has seen is 0,7",
        "ours is 0,3",
        "pass --election-id 0,7 or higher",
    )
    assert "holds" not in err
    again = SwitchConnection(switch, 0, (0, 7))
    try:
        again.become_primary()
        assert again.primary
    finally:
        again.close()
