"""Small codec work runs on the calling thread alone, and only there, and only while it runs."""

import threading

import pytest
import torch

from tests.support.torch_threads import torch_threads
from thc.intraop import SMALL, _knobs, one_thread_if_small

CPU = torch.device("cpu")


@pytest.fixture
def two_torch_threads():
    with torch_threads(2):
        yield


def mkl_threads() -> str:
    return next(line for line in torch.__config__.parallel_info().splitlines() if "mkl_get_max_threads" in line)


@pytest.mark.skipif(None in _knobs(), reason="this torch has no OpenMP or no MKL")
def test_small_work_has_one_thread_here_and_the_counts_come_back(two_torch_threads):
    seen = []
    with one_thread_if_small(SMALL, CPU):
        assert torch.get_num_threads() == 1 and mkl_threads().endswith(": 1")
        other = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
        other.start()
        other.join()
        with one_thread_if_small(100, CPU):  # nested: the outer block's setting comes back
            pass
        assert torch.get_num_threads() == 1
    assert seen == [2]  # another thread keeps its count
    assert torch.get_num_threads() == 2 and mkl_threads().endswith(": 2")
    with one_thread_if_small(SMALL + 1, CPU):
        assert torch.get_num_threads() == 2


@pytest.mark.skipif(None in _knobs(), reason="this torch has no OpenMP or no MKL")
def test_a_thread_that_first_uses_torch_in_the_block_gets_torchs_count_afterwards():
    """torch gives a thread its counts (here 3, more than the cores) at its first parallel op; the block must not
    undo them with OpenMP's default when it ends."""
    seen = []

    def fresh():
        with one_thread_if_small(100, CPU):
            torch.ones(2**17).sum()  # large enough for a parallel op, which sets up the thread
        seen.append(torch.get_num_threads())

    with torch_threads(3):
        thread = threading.Thread(target=fresh)
        thread.start()
        thread.join()
    assert seen == [3]


@pytest.mark.skipif(None in _knobs(), reason="this torch has no OpenMP or no MKL")
def test_the_counts_come_back_after_an_error(two_torch_threads):
    with pytest.raises(RuntimeError), one_thread_if_small(10, CPU):
        raise RuntimeError("in the block")
    assert torch.get_num_threads() == 2 and mkl_threads().endswith(": 2")
