"""Fixtures of the host agent's tests."""

import pytest

from emulator.switch import SoftwareSwitch
from host_agent.fake_switch import FakeSwitch
from host_agent.sim import program_engine
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
