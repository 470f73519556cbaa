"""Link loss without netem: the classic BPF program's threshold, and (as root, in a private network
namespace with its own veth pair) that the filter drops about the requested share, silently for a raw
AF_PACKET sender, and can be changed and removed."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support import paths
from topologies.link_loss import drop_program, loss_commands


def test_program_threshold():
    count, *instructions = drop_program(25).split(",")
    assert count == "4" and len(instructions) == 4
    load, jump, drop, accept = (tuple(int(x) for x in i.split()) for i in instructions)
    assert load == (32, 0, 0, 0xFFFFF000 + 56)  # ld rand
    assert jump == (0x35, 0, 1, 3 * 2**30)  # jge 0.75 * 2^32: the top quarter is dropped
    assert drop == (6, 0, 0, 4) and accept == (6, 0, 0, 0)  # TC_ACT_STOLEN, TC_ACT_OK


def test_zero_loss_removes_the_filter_and_bad_values_are_refused():
    assert not any("bpf" in c for c in loss_commands("s1-eth1", 0))
    with pytest.raises(ValueError):
        drop_program(100)
    with pytest.raises(ValueError):
        drop_program(-1)


# Runs inside `unshare -n`: a veth pair that exists only there; counts frames that reach the peer.
MEASURE = textwrap.dedent("""
    import socket, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from topologies.link_loss import loss_commands
    def sh(cmd):
        subprocess.run(cmd, shell=True, check=True, capture_output=True)
    sh("ip link add lossa type veth peer name lossb && ip link set lossa up && ip link set lossb up")
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
    rx.bind(("lossb", 0)); rx.settimeout(0.5)
    rx.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)     # SO_RCVBUFFORCE: room for every frame
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind(("lossa", 0))
    frame = bytes.fromhex("020000000002" "020000000001" "88b5") + bytes(50)
    for loss in (25.0, 0.0):
        for cmd in loss_commands("lossa", loss):
            sh(cmd)
        for _ in range(4000):
            tx.send(frame)              # raises (ENOBUFS) if the drop were not silent
        got = 0
        try:
            while True:
                rx.recv(2048); got += 1
        except socket.timeout:
            pass
        print(loss, got, flush=True)
""")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private network namespace")
def test_filter_drops_about_the_requested_share():
    repo = str(paths.REPO)
    out = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", MEASURE, repo], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    received = {float(loss): int(n) for loss, n in (line.split() for line in out.stdout.split("\n") if line)}
    # 4000 frames at 25 % loss: 3000 expected, standard deviation 27; the bounds are 7 deviations wide
    assert 2800 <= received[25.0] <= 3200
    assert received[0.0] == 4000
