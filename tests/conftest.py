"""Fixtures shared by several test modules."""

import pytest

from tests.support.toolchain import pytest_configure, pytest_runtest_setup  # noqa: F401  (a missing tool fails when required)


@pytest.fixture
def one_torch_thread():
    """Tiny transforms gain nothing from threads, and OpenMP stalls when the shared 2-core box is busy."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
