"""thc-worker under torchrun: rank, world size and rendezvous come from torchrun's env:// variables, so the
same worker trains on real hosts. Options given on the command line win over the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from host_agent import identity, worker

TORCHRUN = Path(sys.executable).with_name("torchrun")


def test_options_win_over_torchruns_variables():
    env = {"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400"}
    assert identity.resolve(None, None, None, 29500, env) == identity.Identity(1, 4, "env://")
    assert identity.resolve(2, None, "10.0.0.9", 29501, env) == identity.Identity(2, 4, "tcp://10.0.0.9:29501")


@pytest.mark.parametrize(
    "env, args, says",
    [
        ({}, (None, 2, "10.0.0.1"), "--rank is missing and $RANK is not set"),
        ({"RANK": "x"}, (None, 2, "10.0.0.1"), "$RANK='x' is not an integer"),
        ({}, (3, 2, "10.0.0.1"), "rank 3 is not in 0..1"),
        ({"RANK": "0", "WORLD_SIZE": "2"}, (None, None, None), "set $MASTER_ADDR and $MASTER_PORT"),
    ],
)
def test_a_missing_identity_says_what_to_give(env, args, says):
    with pytest.raises(identity.IdentityError) as err:
        identity.resolve(*args, 29500, env)
    assert says in str(err.value)


def test_the_worker_refuses_an_unresolved_identity_in_one_line(capsys, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert worker.main(["--mode", "gloo", "--world-size", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("thc-worker: --rank is missing") and "torchrun" in err and "\n" not in err


def test_a_switch_mode_takes_its_source_addresses_from_the_interface():
    lo_mac = identity.interface_mac("lo")
    args = worker.build_parser().parse_args(
        ["--mode", "thc", "--rank", "0", "--world-size", "1", "--master-addr", "127.0.0.1", "--iface", "lo"]
        + ["--service-ip", "127.0.0.1", "--service-mac", "02:00:00:00:00:01"]
    )
    worker.resolve_identity(args)
    assert (args.src_ip, args.src_mac) == ("127.0.0.1", lo_mac)
    with pytest.raises(identity.IdentityError, match="no interface 'thc-none0'"):
        identity.interface_mac("thc-none0")


def test_the_neighbour_table_gives_the_service_mac(tmp_path):
    table = tmp_path / "arp"
    table.write_text(
        "IP address       HW type     Flags       HW address            Mask     Device\n"
        "10.0.1.254       0x1         0x2         02:aa:00:00:00:01     *        eth0\n"
        "10.0.1.253       0x1         0x0         00:00:00:00:00:00     *        eth0\n"
    )
    assert identity.neighbour_mac("10.0.1.254", "eth0", str(table)) == "02:aa:00:00:00:01"
    assert identity.neighbour_mac("10.0.1.254", "eth1", str(table)) is None
    assert identity.neighbour_mac("10.0.1.253", "eth0", str(table)) is None  # incomplete entry


def test_two_workers_train_under_torchrun(tmp_path):
    """torchrun starts both ranks; each rendezvouses with env://, trains and writes its own result."""
    result = tmp_path / "rank{rank}.json"
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "-m", "host_agent.worker"]
    command += ["--mode", "gloo", "--model", "mlp-digits", "--steps", "6", "--result", str(result)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in records] == [0, 1] and all(r["world_size"] == 2 for r in records)
    assert all(len(r["steps"]) == 6 for r in records)
    assert records[0]["final_test_loss"] == records[1]["final_test_loss"]  # one model, replicated


def test_the_worker_process_exits_with_mains_status_and_flushes_its_line():
    """entry() skips the interpreter's finalisation (a gloo teardown race), so the status and the last
    line must still come out: here a refused option's 2 and its one-line error."""
    command = [sys.executable, "-m", "host_agent.worker", "--rank", "0", "--world-size", "1"]
    command += ["--master-addr", "127.0.0.1", "--model", "resnet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("thc-worker: unknown model 'resnet'")


@pytest.mark.slow
def test_fifty_worker_shutdowns_after_a_gloo_hook_end_cleanly(tmp_path):
    """A worker that has trained and reported must exit with 0, every time: gloo's threads used to abort a
    worker now and then (SIGABRT during the interpreter's teardown, after its last line) when a hook's
    future callback was destroyed late. 25 pairs of TernGrad workers (whose hook chains futures), two
    pairs at a time."""
    from topologies.targets import free_tcp_port

    exe = Path(sys.executable).with_name("thc-worker")
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1"}

    def pair(k: int) -> list[subprocess.Popen]:
        port = free_tcp_port()
        return [
            subprocess.Popen(
                [
                    str(exe),
                    "--mode",
                    "terngrad",
                    "--rank",
                    str(r),
                    "--world-size",
                    "2",
                    "--master-addr",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                    "--steps",
                    "2",
                    "--model",
                    "mlp-digits",
                    "--result",
                    str(tmp_path / f"{k}-{r}.json"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )  # fmt: skip
            for r in range(2)
        ]

    exits = []
    for k in range(0, 25, 2):
        running = [p for j in range(k, min(k + 2, 25)) for p in pair(j)]
        for p in running:
            out, _ = p.communicate(timeout=600)
            exits.append((p.returncode, out.strip().splitlines()[-1] if out.strip() else ""))
    assert len(exits) == 50
    assert [code for code, _ in exits] == [0] * 50, [e for e in exits if e[0]]
    assert all(line.startswith('@thc {"event": "done"') for _, line in exits)
    assert len(list(tmp_path.glob("*.json"))) == 50
