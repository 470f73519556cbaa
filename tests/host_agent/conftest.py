"""Fixtures of the host agent's tests."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from emulator.switch import SoftwareSwitch
from harness.fake_switch import FakeSwitch
from harness.sim import program_engine
from tests.support import paths


@pytest.fixture(params=["fake", "p4"])
def new_engine(request):
    """new_engine(job) -> an engine serving `job`."""
    if request.param == "fake":

        def make(job):
            sw = FakeSwitch()
            sw.add_job(job)
            return sw

        return make

    def make(job):
        sw = SoftwareSwitch.from_json(str(paths.THC_JSON))
        program_engine(sw, job)
        return sw

    return make


def _root_with_ip() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@pytest.fixture
def veth():
    if not _root_with_ip():
        pytest.skip("needs root and iproute2 to create a veth pair")
    a, b = f"thcT{os.getpid() % 100000}a", f"thcT{os.getpid() % 100000}b"
    try:
        subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a veth pair: {exc.stderr.decode().strip()}")
    try:
        for dev in (a, b):
            subprocess.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"], capture_output=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        deadline = time.monotonic() + 5  # frames sent before the carrier is up are dropped
        while time.monotonic() < deadline and not all(
            Path(f"/sys/class/net/{dev}/operstate").read_text().strip() == "up" for dev in (a, b)
        ):
            time.sleep(0.01)
        yield a, b
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)
