"""Fixtures shared by several test modules."""

import pytest

from tests.support.torch_threads import torch_threads


@pytest.fixture
def one_torch_thread():
    """Tiny transforms gain nothing from threads, and OpenMP stalls when the shared 2-core box is busy."""
    with torch_threads(1):
        yield
