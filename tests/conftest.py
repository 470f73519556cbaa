"""Fixtures shared by several test modules."""

import pytest


@pytest.fixture
def one_torch_thread():
    """Tiny transforms gain nothing from threads, and OpenMP stalls when the shared 2-core box is busy."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
