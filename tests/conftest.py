"""Fixtures shared by several test modules."""

import pytest

from tests.support.toolchain import pytest_configure, pytest_runtest_setup  # noqa: F401  (a missing tool fails when required)
from tests.support.torch_threads import torch_threads


@pytest.fixture
def one_torch_thread():
    """Tiny transforms gain nothing from threads, and OpenMP stalls when the shared 2-core box is busy."""
    with torch_threads(1):
        yield
