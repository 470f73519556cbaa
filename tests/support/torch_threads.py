"""torch's intra-op thread count for a block: set, then put back, so no test leaves it changed for the next."""

import contextlib


@contextlib.contextmanager
def torch_threads(n: int):
    """torch.set_num_threads(n) for the block; the count before it afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
