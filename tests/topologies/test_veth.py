"""VethPorts and the test machines' namespaces never trip over what a killed run left behind: a later
process may get the same pid, and so the same prefix (CI failed on exactly this once, with `RTNETLINK
answers: File exists`)."""

import subprocess

import pytest

from tests.support.veths import needs_netns
from topologies.veth import VethPorts, free_prefix

pytestmark = needs_netns()


def test_a_stale_link_of_the_same_name_moves_the_ports_to_a_free_prefix():
    stem = "tvstale"
    subprocess.run(["ip", "link", "add", f"{stem}2s", "type", "veth", "peer", "name", f"{stem}2h"], check=True)
    try:
        ports = VethPorts(stem, [1, 2])
        try:
            assert ports.prefix == f"{stem}a"
            assert [ports.switch_end(p) for p in (1, 2)] == [f"{stem}a1s", f"{stem}a2s"]
        finally:
            ports.close()
        assert free_prefix(stem, [1]) == stem, "port 1's names were free all along"
    finally:
        subprocess.run(["ip", "link", "del", f"{stem}2s"], check=True)
    assert free_prefix(stem, [1, 2]) == stem


def test_a_prefix_too_long_for_an_interface_name_is_refused_before_any_link_is_made():
    with pytest.raises(ValueError, match="exceed 15 characters"):
        free_prefix("x" * 13, [10])


def test_a_stale_namespace_of_the_same_pid_moves_the_machines_to_a_free_prefix():
    from tests.support.machines import _free_namespace_prefix

    stem = "tvstalens"
    subprocess.run(["ip", "netns", "add", f"{stem}h1"], check=True)
    try:
        assert _free_namespace_prefix(stem) == f"{stem}a"
    finally:
        subprocess.run(["ip", "netns", "del", f"{stem}h1"], check=True)
    assert _free_namespace_prefix(stem) == stem
